// tools/run.cc — the single-host launcher behind `remora run` (see run.h).
#include "run.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "store_port.h"

extern char** environ;

namespace remora::tools {
namespace {

using Clock = std::chrono::steady_clock;

int g_signal_pipe = -1;  ///< write end of the self-pipe (async-signal-safe wakeups)

void on_signal(int sig) {
  const int saved = errno;
  const auto b = static_cast<unsigned char>(sig);
  (void)!::write(g_signal_pipe, &b, 1);
  errno = saved;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

/// One output stream of one rank, relayed line by line with a "[rank] " prefix.
struct Relay {
  int rank = 0;
  int fd = -1;   ///< read end, -1 once at EOF
  int out = 1;   ///< where the lines go
  std::string partial;

  void emit(std::string_view line) const {
    const std::string s = fmt::format("[{}] {}\n", rank, line);
    size_t done = 0;
    while (done < s.size()) {
      const ssize_t n = ::write(out, s.data() + done, s.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }
  void drain() {
    char buf[16384];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        if (!partial.empty()) emit(partial);
        partial.clear();
        ::close(fd);
        fd = -1;
        return;
      }
      partial.append(buf, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
        emit(std::string_view(partial).substr(start, nl - start));
      }
      partial.erase(0, start);
    }
  }
};

struct Child {
  pid_t pid = -1;
  bool done = false;
  int status = 0;
};

}  // namespace

int run_ranks(const RunOptions& o) {
  if (o.ranks < 1 || o.argv.empty()) {
    fmt::print(stderr, "remora run: need -n N >= 1 and a program\n");
    return 2;
  }
  const auto port = free_store_port();
  if (!port) {
    fmt::print(stderr, "remora run: no free port on 127.0.0.1: {}\n", std::strerror(errno));
    return 1;
  }

  int sp[2];
  if (::pipe2(sp, O_CLOEXEC | O_NONBLOCK) != 0) {
    fmt::print(stderr, "remora run: pipe2: {}\n", std::strerror(errno));
    return 1;
  }
  g_signal_pipe = sp[1];
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGCHLD}) ::sigaction(sig, &sa, nullptr);

  // The environment every rank shares, then its own variables.
  std::vector<std::string> base;
  static const char* const kOurs[] = {"REMORA_RANK=", "REMORA_WORLD_SIZE=", "REMORA_LOCAL_RANK=",
                                      "REMORA_LOCAL_WORLD_SIZE=", "REMORA_STORE=", "RANK=", "WORLD_SIZE=",
                                      "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT="};
  for (char** e = environ; *e != nullptr; ++e) {
    bool ours = false;
    for (const char* p : kOurs) ours = ours || std::strncmp(*e, p, std::strlen(p)) == 0;
    if (!ours) base.emplace_back(*e);
  }

  std::vector<Child> children(static_cast<size_t>(o.ranks));
  std::vector<Relay> relays;
  for (int r = 0; r < o.ranks; ++r) {
    std::vector<std::string> env = base;
    const std::string n = std::to_string(o.ranks), rs = std::to_string(r);
    for (const auto& [k, v] : std::initializer_list<std::pair<const char*, std::string>>{
             {"REMORA_RANK", rs}, {"REMORA_WORLD_SIZE", n}, {"REMORA_LOCAL_RANK", rs},
             {"REMORA_LOCAL_WORLD_SIZE", n}, {"REMORA_STORE", fmt::format("127.0.0.1:{}", *port)},
             {"RANK", rs}, {"WORLD_SIZE", n}, {"LOCAL_RANK", rs}, {"LOCAL_WORLD_SIZE", n},
             {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(*port)}}) {
      env.push_back(std::string(k) + "=" + v);
    }
    std::vector<char*> envp, argv;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = o.argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    if (o.tag_output && (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)) {
      fmt::print(stderr, "remora run: pipe2: {}\n", std::strerror(errno));
      for (auto& c : children) {
        if (c.pid > 0) ::kill(-c.pid, SIGKILL);
      }
      return 1;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      // The child: its own process group, default signals, then exec.
      ::setpgid(0, 0);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int sig : {SIGINT, SIGTERM, SIGCHLD}) ::sigaction(sig, &dfl, nullptr);
      if (o.tag_output) {
        ::dup2(out_pipe[1], STDOUT_FILENO);
        ::dup2(err_pipe[1], STDERR_FILENO);
      }
      ::execvpe(argv[0], argv.data(), envp.data());
      const std::string msg = fmt::format("remora run: rank {}: cannot run {}: {}\n", r, argv[0], std::strerror(errno));
      (void)!::write(STDERR_FILENO, msg.data(), msg.size());
      ::_exit(127);
    }
    if (pid < 0) {
      fmt::print(stderr, "remora run: fork: {}\n", std::strerror(errno));
      for (auto& c : children) {
        if (c.pid > 0) ::kill(-c.pid, SIGKILL);
      }
      return 1;
    }
    ::setpgid(pid, pid);  // also here: no race with a signal sent before the child ran
    children[static_cast<size_t>(r)].pid = pid;
    if (o.tag_output) {
      ::close(out_pipe[1]);
      ::close(err_pipe[1]);
      for (auto [fd, out] : {std::pair{out_pipe[0], STDOUT_FILENO}, std::pair{err_pipe[0], STDERR_FILENO}}) {
        ::fcntl(fd, F_SETFL, O_NONBLOCK);
        relays.push_back(Relay{.rank = r, .fd = fd, .out = out, .partial = {}});
      }
    }
  }

  const auto start = Clock::now();
  std::optional<Clock::time_point> kill_at;  ///< SIGKILL whoever is left then
  std::string first_failure;
  int exit_code = 0;
  auto signal_all = [&](int sig) {
    for (auto& c : children) {
      if (!c.done) ::kill(-c.pid, sig);
    }
  };
  auto stop_all = [&](int sig) {
    signal_all(sig);
    if (!kill_at) kill_at = Clock::now() + o.grace;
  };

  size_t running = children.size();
  while (running > 0 || std::any_of(relays.begin(), relays.end(), [](const Relay& r) { return r.fd >= 0; })) {
    std::vector<pollfd> fds{{sp[0], POLLIN, 0}};
    for (auto& r : relays) {
      if (r.fd >= 0) fds.push_back({r.fd, POLLIN, 0});
    }
    std::optional<Clock::time_point> wake = kill_at;
    if (o.timeout.count() > 0 && exit_code != 124 && running > 0) {
      const auto t = start + o.timeout;
      wake = wake ? std::min(*wake, t) : t;
    }
    int ms = -1;
    if (wake) {
      ms = static_cast<int>(std::clamp<int64_t>(
          std::chrono::ceil<std::chrono::milliseconds>(*wake - Clock::now()).count(), 0, 60'000));
    }
    if (running == 0) ms = 1000;  // only output left: its EOF comes with the last exit
    const int n = ::poll(fds.data(), fds.size(), ms);
    if (n < 0 && errno != EINTR) {
      fmt::print(stderr, "remora run: poll: {}\n", std::strerror(errno));
      stop_all(SIGKILL);
      break;
    }
    if (n > 0 && fds[0].revents != 0) {
      unsigned char buf[64];
      ssize_t got;
      while ((got = ::read(sp[0], buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < got; ++i) {
          const int sig = buf[i];
          if (sig == SIGCHLD || running == 0) continue;
          fmt::print(stderr, "remora run: got signal {} ({}); passing it to every rank\n", sig, strsignal(sig));
          if (exit_code == 0) exit_code = 128 + sig;
          stop_all(sig);
        }
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      for (auto& r : relays) {
        if (r.fd == fds[i].fd) r.drain();
      }
    }
    // Reap.
    for (int r = 0; r < o.ranks; ++r) {
      Child& c = children[static_cast<size_t>(r)];
      if (c.done) continue;
      int status = 0;
      const pid_t p = ::waitpid(c.pid, &status, WNOHANG);
      if (p != c.pid) continue;
      c.done = true;
      c.status = status;
      --running;
      // The rank's own children (same process group) go with it.
      ::kill(-c.pid, SIGKILL);
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && exit_code == 0) {
        first_failure = fmt::format("rank {} (pid {}) {}", r, c.pid, describe(status));
        fmt::print(stderr, "remora run: {}; stopping the other ranks\n", first_failure);
        exit_code = 1;
        stop_all(SIGTERM);
      }
    }
    const auto now = Clock::now();
    if (o.timeout.count() > 0 && running > 0 && exit_code != 124 && now >= start + o.timeout) {
      fmt::print(stderr, "remora run: timed out after {} s with {} of {} ranks still running; stopping them\n",
                 o.timeout.count(), running, o.ranks);
      exit_code = 124;
      stop_all(SIGTERM);
    }
    if (kill_at && now >= *kill_at && running > 0) {
      signal_all(SIGKILL);
      kill_at = now + std::chrono::seconds(3600);  // SIGKILL once; reaping follows
    }
    if (running == 0 && n == 0) {
      // Grandchildren holding the output pipes open: stop relaying.
      for (auto& r : relays) {
        if (r.fd >= 0) {
          ::close(r.fd);
          r.fd = -1;
        }
      }
    }
  }
  ::close(sp[0]);
  g_signal_pipe = -1;
  ::close(sp[1]);
  return exit_code;
}

}  // namespace remora::tools
