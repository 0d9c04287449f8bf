// tools/soak.h — `remora soak -n N --seconds S [--seed X] [--max-size B]`: N ranks on this
// host running mixed operations of random sizes for S seconds, every byte verified.
//
// Every rank follows the same plan, drawn round by round from the seed: send/recv to a
// neighbour, put, put with notification, get, fetch_add and compare_swap (checked against
// a model of the target's words), or a collective (allreduce, broadcast, allgather);
// sizes from 0 B to --max-size. Each rank has its own endpoint to every other rank (the
// communicator only carries the collectives, the round headers and the final report).
// A failed operation or a wrong byte ends the run at once.
//
// Resources: each rank counts its open descriptors (/proc/self/fd) and resident memory
// (VmRSS) once the warm-up (the first fifth of the time) is over and again at the end.
// "Flat" means the same number of descriptors and resident memory grown by at most
// kSoakRssToleranceKib or 10%, whichever is larger. Rank 0 prints the report; the exit
// status is 0 only with no error and flat resources on every rank.
#pragma once

#include <cstddef>
#include <cstdint>

namespace remora::tools {

#if defined(__SANITIZE_ADDRESS__)
// AddressSanitizer keeps freed blocks in its quarantine (up to 256 MiB) instead of reusing
// them, so RSS climbs with the bytes allocated, not with what is live; its leak check at
// exit covers what this bound is for. 16 MiB was exceeded by 1.4 MiB on a loaded host.
inline constexpr long kSoakRssToleranceKib = 64 << 10;
#else
inline constexpr long kSoakRssToleranceKib = 16 << 10;
#endif

struct SoakOptions {
  double seconds = 30;
  uint64_t seed = 0;
  size_t max_size = 4 << 20;  ///< largest transfer, bytes
  /// Tests only: rank 1 damages one received byte in round 20, so that the run must fail.
  bool inject_corruption = false;
};

/// One rank's part, under a launcher (`remora run`, or `remora soak -n N` starting itself).
/// Returns the process's exit status.
int run_soak_rank(const SoakOptions& options);

}  // namespace remora::tools
