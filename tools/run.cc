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
/// The signals the launcher handles (and a rank gets back at their defaults).
constexpr int kRelayed[] = {SIGINT, SIGTERM, SIGCHLD};

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

/// Installs on_signal for SIGINT, SIGTERM and SIGCHLD, writing to a fresh self-pipe:
/// `sp[0]` is read by the supervision loop. false (after saying why) when no pipe.
bool install_signal_pipe(int sp[2]) {
  if (::pipe2(sp, O_CLOEXEC | O_NONBLOCK) != 0) {
    fmt::print(stderr, "remora run: pipe2: {}\n", std::strerror(errno));
    return false;
  }
  g_signal_pipe = sp[1];
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : kRelayed) ::sigaction(sig, &sa, nullptr);
  return true;
}

void close_signal_pipe(int sp[2]) {
  ::close(sp[0]);
  g_signal_pipe = -1;
  ::close(sp[1]);
}

/// The environment every rank shares: ours, less the launcher variables we set per rank
/// (a launcher around this one must not leak its own into the ranks).
std::vector<std::string> shared_environment() {
  static const char* const kOurs[] = {"REMORA_RANK=", "REMORA_WORLD_SIZE=", "REMORA_LOCAL_RANK=",
                                      "REMORA_LOCAL_WORLD_SIZE=", "REMORA_STORE=", "RANK=", "WORLD_SIZE=",
                                      "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT="};
  std::vector<std::string> base;
  for (char** e = environ; *e != nullptr; ++e) {
    bool ours = false;
    for (const char* p : kOurs) ours = ours || std::strncmp(*e, p, std::strlen(p)) == 0;
    if (!ours) base.emplace_back(*e);
  }
  return base;
}

/// Rank `rank`'s environment: the shared one plus its launcher variables, remora's and
/// torchrun's, with the store on 127.0.0.1:`store_port`.
std::vector<std::string> rank_environment(const std::vector<std::string>& base, int rank, int ranks,
                                          uint16_t store_port) {
  std::vector<std::string> env = base;
  const std::string n = std::to_string(ranks), rs = std::to_string(rank);
  for (const auto& [k, v] : std::initializer_list<std::pair<const char*, std::string>>{
           {"REMORA_RANK", rs}, {"REMORA_WORLD_SIZE", n}, {"REMORA_LOCAL_RANK", rs},
           {"REMORA_LOCAL_WORLD_SIZE", n}, {"REMORA_STORE", fmt::format("127.0.0.1:{}", store_port)},
           {"RANK", rs}, {"WORLD_SIZE", n}, {"LOCAL_RANK", rs}, {"LOCAL_WORLD_SIZE", n},
           {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(store_port)}}) {
    env.push_back(std::string(k) + "=" + v);
  }
  return env;
}

/// The ranks of one job and the relays of their output, as they are started and reaped.
class Job {
 public:
  explicit Job(const RunOptions& o) : o_(o), children_(static_cast<size_t>(o.ranks)) {}

  /// Forks and execs rank `rank` with `env`, in its own process group; with tag_output
  /// its stdout and stderr go through relays. false (after saying why, and killing the
  /// ranks already started) when it cannot be started.
  bool spawn(int rank, std::vector<std::string> env) {
    std::vector<char*> envp, argv;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = o_.argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    if (o_.tag_output && (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)) {
      fmt::print(stderr, "remora run: pipe2: {}\n", std::strerror(errno));
      kill_started();
      return false;
    }
    // Until the child has put back the default handlers, a signal sent to it (the
    // launcher stopping every rank when one failed at start-up) would run our handler
    // there and write to our self-pipe: "got signal 15" that nobody sent us. Blocked
    // across fork, it waits in the child until the defaults are back.
    sigset_t ours, before;
    sigemptyset(&ours);
    for (int sig : kRelayed) sigaddset(&ours, sig);
    ::sigprocmask(SIG_BLOCK, &ours, &before);
    const pid_t pid = ::fork();
    if (pid == 0) exec_rank(rank, argv, envp, out_pipe[1], err_pipe[1], before);
    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    if (pid < 0) {
      fmt::print(stderr, "remora run: fork: {}\n", std::strerror(errno));
      kill_started();
      return false;
    }
    ::setpgid(pid, pid);  // also here: no race with a signal sent before the child ran
    children_[static_cast<size_t>(rank)].pid = pid;
    if (o_.tag_output) {
      ::close(out_pipe[1]);
      ::close(err_pipe[1]);
      for (auto [fd, out] : {std::pair{out_pipe[0], STDOUT_FILENO}, std::pair{err_pipe[0], STDERR_FILENO}}) {
        ::fcntl(fd, F_SETFL, O_NONBLOCK);
        relays_.push_back(Relay{.rank = rank, .fd = fd, .out = out, .partial = {}});
      }
    }
    return true;
  }

  /// Relays output, forwards signals, reaps ranks and enforces the timeout until every
  /// rank has exited and its output is relayed. Returns the launcher's exit status.
  int supervise(int signal_fd) {
    start_ = Clock::now();
    running_ = children_.size();
    while (running_ > 0 || relaying()) {
      std::vector<pollfd> fds{{signal_fd, POLLIN, 0}};
      for (auto& r : relays_) {
        if (r.fd >= 0) fds.push_back({r.fd, POLLIN, 0});
      }
      const int n = ::poll(fds.data(), fds.size(), poll_timeout_ms());
      if (n < 0 && errno != EINTR) {
        fmt::print(stderr, "remora run: poll: {}\n", std::strerror(errno));
        stop_all(SIGKILL);
        break;
      }
      if (n > 0 && fds[0].revents != 0) forward_signals(signal_fd);
      relay_ready(fds);
      reap();
      enforce_deadlines();
      if (running_ == 0 && n == 0) close_relays();
    }
    return exit_code_;
  }

 private:
  /// The child's side of spawn: its own process group, default signals, then exec.
  [[noreturn]] void exec_rank(int rank, std::vector<char*>& argv, std::vector<char*>& envp, int out_fd, int err_fd,
                              const sigset_t& mask) {
    ::setpgid(0, 0);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : kRelayed) ::sigaction(sig, &dfl, nullptr);
    ::sigprocmask(SIG_SETMASK, &mask, nullptr);  // what was sent meanwhile now takes its default action
    if (o_.tag_output) {
      ::dup2(out_fd, STDOUT_FILENO);
      ::dup2(err_fd, STDERR_FILENO);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    const std::string msg = fmt::format("remora run: rank {}: cannot run {}: {}\n", rank, argv[0], std::strerror(errno));
    (void)!::write(STDERR_FILENO, msg.data(), msg.size());
    ::_exit(127);
  }

  void kill_started() {
    for (auto& c : children_) {
      if (c.pid > 0) ::kill(-c.pid, SIGKILL);
    }
  }

  bool relaying() const {
    return std::any_of(relays_.begin(), relays_.end(), [](const Relay& r) { return r.fd >= 0; });
  }

  void signal_all(int sig) {
    for (auto& c : children_) {
      if (!c.done) ::kill(-c.pid, sig);
    }
  }

  /// Sends `sig` to every rank still running, and SIGKILL after the grace period.
  void stop_all(int sig) {
    signal_all(sig);
    if (!kill_at_) kill_at_ = Clock::now() + o_.grace;
  }

  /// Until the next deadline (the SIGKILL or the job's timeout), at most a minute;
  /// forever when there is none; a second when only output is left.
  int poll_timeout_ms() const {
    std::optional<Clock::time_point> wake = kill_at_;
    if (o_.timeout.count() > 0 && exit_code_ != 124 && running_ > 0) {
      const auto t = start_ + o_.timeout;
      wake = wake ? std::min(*wake, t) : t;
    }
    int ms = -1;
    if (wake) {
      ms = static_cast<int>(std::clamp<int64_t>(
          std::chrono::ceil<std::chrono::milliseconds>(*wake - Clock::now()).count(), 0, 60'000));
    }
    if (running_ == 0) ms = 1000;  // only output left: its EOF comes with the last exit
    return ms;
  }

  /// SIGINT/SIGTERM to the launcher go to every rank (exit 128+signal); SIGCHLD only
  /// wakes the loop to reap.
  void forward_signals(int signal_fd) {
    unsigned char buf[64];
    ssize_t got;
    while ((got = ::read(signal_fd, buf, sizeof buf)) > 0) {
      for (ssize_t i = 0; i < got; ++i) {
        const int sig = buf[i];
        if (sig == SIGCHLD || running_ == 0) continue;
        fmt::print(stderr, "remora run: got signal {} ({}); passing it to every rank\n", sig, strsignal(sig));
        if (exit_code_ == 0) exit_code_ = 128 + sig;
        stop_all(sig);
      }
    }
  }

  /// Drains the relays whose pipes poll found readable (fds[0] is the signal pipe).
  void relay_ready(const std::vector<pollfd>& fds) {
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      for (auto& r : relays_) {
        if (r.fd == fds[i].fd) r.drain();
      }
    }
  }

  /// Collects the ranks that exited; the first that failed stops the others.
  void reap() {
    for (int r = 0; r < o_.ranks; ++r) {
      Child& c = children_[static_cast<size_t>(r)];
      if (c.done) continue;
      int status = 0;
      const pid_t p = ::waitpid(c.pid, &status, WNOHANG);
      if (p != c.pid) continue;
      c.done = true;
      c.status = status;
      --running_;
      // The rank's own children (same process group) go with it.
      ::kill(-c.pid, SIGKILL);
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && o_.keep_going) {
        fmt::print(stderr, "remora run: rank {} (pid {}) {}; the others go on (--keep-going)\n", r, c.pid,
                   describe(status));
        if (exit_code_ == 0) exit_code_ = 1;
        continue;
      }
      if (!ok && exit_code_ == 0) {
        fmt::print(stderr, "remora run: rank {} (pid {}) {}; stopping the other ranks\n", r, c.pid, describe(status));
        exit_code_ = 1;
        stop_all(SIGTERM);
      }
    }
  }

  /// The job's timeout (exit 124), then SIGKILL for whoever outlived the grace period.
  void enforce_deadlines() {
    const auto now = Clock::now();
    if (o_.timeout.count() > 0 && running_ > 0 && exit_code_ != 124 && now >= start_ + o_.timeout) {
      fmt::print(stderr, "remora run: timed out after {} s with {} of {} ranks still running; stopping them\n",
                 o_.timeout.count(), running_, o_.ranks);
      exit_code_ = 124;
      stop_all(SIGTERM);
    }
    if (kill_at_ && now >= *kill_at_ && running_ > 0) {
      signal_all(SIGKILL);
      kill_at_ = now + std::chrono::seconds(3600);  // SIGKILL once; reaping follows
    }
  }

  /// Every rank is gone but grandchildren hold the output pipes open: stop relaying.
  void close_relays() {
    for (auto& r : relays_) {
      if (r.fd >= 0) {
        ::close(r.fd);
        r.fd = -1;
      }
    }
  }

  const RunOptions& o_;
  std::vector<Child> children_;
  std::vector<Relay> relays_;
  Clock::time_point start_;
  size_t running_ = 0;
  std::optional<Clock::time_point> kill_at_;  ///< SIGKILL whoever is left then
  int exit_code_ = 0;
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
  if (!install_signal_pipe(sp)) return 1;
  const std::vector<std::string> base = shared_environment();
  Job job(o);
  for (int r = 0; r < o.ranks; ++r) {
    if (!job.spawn(r, rank_environment(base, r, o.ranks, *port))) return 1;
  }
  const int exit_code = job.supervise(sp[0]);
  close_signal_pipe(sp);
  return exit_code;
}

}  // namespace remora::tools
