// tests/faults/faults.h — the fault matrix (`remora_faults`): what its three parts share.
//
//   matrix  (matrix.cc)  the driver: namespaces, processes, faults, the table
//   node    (node.cc)    one process of a cell: the observer, or a server (the victim
//                        that gets the fault, or the healthy peer that must keep working)
//   delay   (delay.cc)   holds every packet NFQUEUE hands it for a fixed time (the
//                        kernel here has no netem)
//
// The driver talks to each node over its stdin/stdout, one line per step; docs/testing.md
// describes the matrix, tests/README.md what each cell asserts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "remora/types.h"

namespace remora::faults {

/// The workloads, in table order.
/// put-in: the victim puts with notifications into the observer's memory (the observer
/// is the passive target and checks each block when its notification arrives).
inline const std::vector<std::string> kWorkloads = {"sendrecv", "put", "get", "atomics", "put-in", "allreduce"};

// Tags of the echo service every server runs: a message to kEcho comes back on kEchoBack.
inline constexpr Tag kEcho{0xEC40};
inline constexpr Tag kEchoBack{0xEC41};
inline constexpr size_t kMaxMessage = 4 << 20;

// The put-in workload: the observer sends its key and the geometry (kPushKey), the victim
// puts block `seq` into slot seq % window with notification `seq`, and reuses a slot once
// the observer acknowledged (kPushAck) the block before; kPushStop as an ack ends it.
inline constexpr Tag kPushKey{0xEC50};
inline constexpr Tag kPushAck{0xEC51};
inline constexpr uint64_t kPushStop = ~uint64_t{0};
inline constexpr uint64_t kPushSeed = 0x9ba5;
/// Bytes of block `seq`: every other one `size`, the rest small (inline).
inline size_t push_size(uint64_t seq, size_t size) { return seq % 2 == 0 ? size : 4096 + seq % 512; }

// The servers' region: data for puts and gets, then two atomic words.
inline constexpr size_t kRegionData = 16 << 20;
inline constexpr size_t kFetchAddWord = kRegionData;
inline constexpr size_t kCasWord = kRegionData + 8;
inline constexpr size_t kRegionSize = kRegionData + 4096;

/// The store port of the allreduce cell's communicator (rank 0 is the observer, in its
/// own namespace, so nothing else can hold it).
inline constexpr uint16_t kStorePort = 29431;

int node_main(int argc, char** argv);
int delay_main(int argc, char** argv);
int matrix_main(int argc, char** argv);

/// Open descriptors of process `pid` (entries of /proc/<pid>/fd), -1 if unreadable.
int count_fds(int pid);
/// Under AddressSanitizer, empties its quarantine and returns free pages to the kernel,
/// so that RSS measured next follows what is live (freed blocks are otherwise held, up to
/// 256 MiB, and RSS climbs with the bytes allocated). Does nothing in other builds.
void settle_allocator();

/// VmRSS of process `pid` in KiB, -1 if unreadable.
long rss_kib(int pid);

std::string to_hex(const std::byte* data, size_t n);
bool from_hex(const std::string& hex, std::vector<std::byte>* out);

}  // namespace remora::faults
