// tools/run.h — `remora run -n N [--] prog args…`: the single-host launcher (the CLI's
// argument handling, where `--` is optional, is in tools/remora.cc).
//
// Spawns N copies of a program with the launcher variables remora::detect_launch reads
// (REMORA_RANK, REMORA_WORLD_SIZE, REMORA_LOCAL_RANK, REMORA_LOCAL_WORLD_SIZE,
// REMORA_STORE=127.0.0.1:<free port>) and their torchrun twins (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Each child runs in its own
// process group so that stopping it stops what it started.
//
// Exit status: 0 when every rank exits 0. When one fails (non-zero exit or a signal)
// the others get SIGTERM, then SIGKILL after `grace`, and the launcher prints which rank
// failed how and exits 1. SIGINT/SIGTERM to the launcher are forwarded to every rank
// (exit 128+signal). Past `timeout` everything is stopped the same way and the exit
// status is 124. With `keep_going` a failed rank stops nobody (the survivors of a job
// that shrinks its communicator go on); the launcher still exits 1 once all have ended.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace remora::tools {

struct RunOptions {
  int ranks = 1;
  std::vector<std::string> argv;           ///< program and its arguments
  std::chrono::seconds timeout{0};         ///< 0: none
  std::chrono::milliseconds grace{3000};   ///< SIGTERM → SIGKILL
  bool tag_output = false;                 ///< prefix every output line with "[rank] "
  bool keep_going = false;                 ///< a failed rank does not stop the others
};

/// Runs the job; returns the launcher's exit status. Messages go to stderr.
int run_ranks(const RunOptions& options);

}  // namespace remora::tools
