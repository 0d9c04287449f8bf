// process.h — child processes for the integration tests: spawn (posix_spawn) with a
// stdout pipe (and optionally a stdin pipe), read its lines with a deadline, reap it with a deadline, kill it.
// Nothing here sleeps to synchronise: reads poll the pipe, reaping polls a pidfd.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace remora::itest {

class Process {
 public:
  struct Options {
    std::vector<std::string> argv;
    std::vector<std::string> env;  ///< "NAME=value" entries added to (or replacing in) ours
    bool capture_stderr = false;   ///< also send stderr into the pipe (for short commands)
    bool pipe_stdin = false;       ///< give the child a stdin pipe (write_line) instead of /dev/null
  };

  /// Spawns; on failure `ok()` is false and `error()` says why.
  explicit Process(const Options& options);
  ~Process();  ///< kills (SIGKILL) and reaps a child that is still running
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  bool ok() const { return pid_ > 0; }
  const std::string& error() const { return error_; }
  pid_t pid() const { return pid_; }

  /// The next line of the child's stdout (without '\n'), or nullopt on EOF / timeout
  /// (`timed_out()` tells which).
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  bool timed_out() const { return timed_out_; }
  /// Writes `line` and a '\n' to the child's stdin (Options::pipe_stdin). False once the
  /// child closed its stdin or exited.
  bool write_line(const std::string& line);
  /// Everything the child writes until EOF or the deadline (for short commands).
  std::string read_all(std::chrono::milliseconds timeout);

  /// Waits up to `timeout` for the child to exit; returns its wait status, or nullopt if
  /// it is still running (it is NOT killed; call kill_and_reap()).
  std::optional<int> wait(std::chrono::milliseconds timeout);
  void signal(int sig);
  /// SIGKILL, then reap. Returns the wait status.
  int kill_and_reap();

  /// "exited with 0", "killed by signal 9"
  static std::string describe(int wait_status);
  static bool exited_ok(int wait_status);

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int in_fd_ = -1;
  int pidfd_ = -1;
  bool reaped_ = false;
  bool timed_out_ = false;
  int status_ = 0;
  std::string buffered_;
  std::string error_;
};

/// Runs a short command to completion (bounded); returns {wait status, output}.
struct CommandResult {
  int status = -1;
  std::string output;
  bool ok() const { return Process::exited_ok(status); }
};
CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

}  // namespace remora::itest
