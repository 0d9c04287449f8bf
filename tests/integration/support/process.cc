#include "support/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <utility>

extern char** environ;

namespace remora::itest {
namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1'000'000));
}

}  // namespace

Process::Process(const Options& options) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    error_ = std::string("pipe2: ") + std::strerror(errno);
    return;
  }
  int in_fds[2] = {-1, -1};
  if (options.pipe_stdin && pipe2(in_fds, O_CLOEXEC) != 0) {
    error_ = std::string("pipe2: ") + std::strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return;
  }
  // Environment: ours, with the requested entries replaced or added.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string s(*e);
    env[s.substr(0, s.find('='))] = s;
  }
  for (const std::string& s : options.env) env[s.substr(0, s.find('='))] = s;
  std::vector<char*> envp;
  for (auto& [k, v] : env) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = options.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  if (options.capture_stderr) posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
  if (options.pipe_stdin) {
    posix_spawn_file_actions_adddup2(&fa, in_fds[0], STDIN_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (in_fds[0] >= 0) close(in_fds[0]);
  if (rc != 0) {
    close(fds[0]);
    if (in_fds[1] >= 0) close(in_fds[1]);
    error_ = "posix_spawn " + args[0] + ": " + std::strerror(rc);
    return;
  }
  pid_ = pid;
  out_fd_ = fds[0];
  in_fd_ = in_fds[1];
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
}

Process::~Process() {
  if (pid_ > 0 && !reaped_) kill_and_reap();
  if (out_fd_ >= 0) close(out_fd_);
  if (in_fd_ >= 0) close(in_fd_);
  if (pidfd_ >= 0) close(pidfd_);
}

bool Process::write_line(const std::string& line) {
  if (in_fd_ < 0) return false;
  const std::string out = line + "\n";
  size_t done = 0;
  while (done < out.size()) {
    // MSG_NOSIGNAL does not apply to pipes; a dead child must not kill us with SIGPIPE.
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    const ssize_t n = ::write(in_fd_, out.data() + done, out.size() - done);
    const int saved = errno;
    if (n < 0 && saved == EPIPE) {
      timespec zero{0, 0};
      (void)sigtimedwait(&pipe_set, nullptr, &zero);  // consume the pending SIGPIPE
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (n < 0 && saved == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::optional<std::string> Process::read_line(std::chrono::milliseconds timeout) {
  timed_out_ = false;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (auto nl = buffered_.find('\n'); nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    if (out_fd_ < 0) return std::nullopt;
    pollfd p{out_fd_, POLLIN, 0};
    const int n = poll(&p, 1, remaining_ms(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      timed_out_ = true;
      return std::nullopt;
    }
    char buf[4096];
    const ssize_t r = read(out_fd_, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      close(out_fd_);
      out_fd_ = -1;
      if (!buffered_.empty()) return std::exchange(buffered_, {});
      return std::nullopt;
    }
    buffered_.append(buf, static_cast<size_t>(r));
  }
}

std::string Process::read_all(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string all;
  while (auto line = read_line(std::chrono::milliseconds(remaining_ms(deadline)))) all += *line + "\n";
  return all;
}

std::optional<int> Process::wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  if (reaped_) return status_;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    int st = 0;
    const pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      status_ = st;
      return st;
    }
    if (r < 0 && errno != EINTR) return std::nullopt;
    const int left = remaining_ms(deadline);
    if (left == 0) return std::nullopt;
    if (pidfd_ >= 0) {
      pollfd p{pidfd_, POLLIN, 0};
      (void)poll(&p, 1, left);
    } else {
      // No pidfd (old kernel): poll the child at a coarse interval. This is a bounded
      // wait for an exit, not synchronisation between the two sides.
      pollfd none{-1, 0, 0};
      (void)poll(&none, 1, std::min(left, 20));
    }
  }
}

void Process::signal(int sig) {
  if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

int Process::kill_and_reap() {
  if (pid_ <= 0) return -1;
  if (!reaped_) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    status_ = st;
  }
  return status_;
}

std::string Process::describe(int st) {
  if (WIFEXITED(st)) return "exited with " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return "killed by signal " + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
  return "wait status " + std::to_string(st);
}

bool Process::exited_ok(int st) { return WIFEXITED(st) && WEXITSTATUS(st) == 0; }

CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  CommandResult res;
  Process p({.argv = argv, .env = {}, .capture_stderr = true});
  if (!p.ok()) {
    res.output = p.error();
    return res;
  }
  res.output = p.read_all(timeout);
  auto st = p.wait(std::chrono::milliseconds(5000));
  res.status = st ? *st : p.kill_and_reap();
  return res;
}

}  // namespace remora::itest
