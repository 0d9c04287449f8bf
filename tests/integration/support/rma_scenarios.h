// rma_scenarios.h — one-sided RMA scenarios shared by the integration tests and the
// remora_rma_peer program. Each scenario has a target half (registers memory, hands
// its keys over as two-sided messages, then serves passively and answers a few
// commands) and an initiator half (puts, gets, atomics). The halves run in different
// processes; both derive everything from the same seed, so the target can check what
// it received without the data travelling out of band. Every half returns an empty
// string on success or a description of the first failed check; on failure it
// closes the endpoint (so the other side fails fast rather than waiting) and waits,
// bounded, for its own outstanding requests before any buffer is freed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "remora/context.h"
#include "remora/endpoint.h"
#include "remora/memory.h"

namespace remora::itest {

/// Tags of the scenarios' two-sided side channel (plans never use them).
inline constexpr Tag kRmaKeyTag{0xF1F1F1F1F1F1F201ull};
inline constexpr Tag kRmaCommandTag{0xF1F1F1F1F1F1F202ull};
inline constexpr Tag kRmaReplyTag{0xF1F1F1F1F1F1F203ull};

/// Sends a serialized RemoteKey on kRmaKeyTag / receives one.
std::string send_key(Endpoint& ep, const RemoteKey& key, std::chrono::milliseconds timeout);
std::string recv_key(Endpoint& ep, RemoteKey* key, std::chrono::milliseconds timeout);

// --- (a) random puts and gets checked against a model ------------------------------

struct RandomRmaOptions {
  uint64_t seed = 1;
  size_t region_size = 16 << 20;  ///< the target's region, initially fill_stream(seed)
  size_t count = 2000;            ///< operations (puts and gets, about half each)
  size_t max_size = 4 << 20;      ///< largest operation (most are far smaller)
  size_t window = 64;             ///< operations in flight
  std::chrono::milliseconds timeout{60'000};  ///< any single wait
};

struct RandomRmaReport {
  std::string error;
  uint64_t puts = 0, gets = 0, bytes_put = 0, bytes_got = 0;
  double seconds = 0;
};

/// Target: registers region_size bytes of fill_stream(seed) (remote read + write),
/// sends the key, then answers HASH (XXH3 of the region) until DONE.
std::string random_rma_target(Context& ctx, Endpoint& ep, const RandomRmaOptions& options);
/// Initiator: `count` puts and gets of random sizes and offsets, up to `window` in
/// flight, against a model of the target's memory. Operations that overlap an
/// in-flight put (or a put overlapping an in-flight get) wait for it first, so the
/// model is exact; every get is compared with the model, then a get of the whole
/// region, then the target's own hash of its memory. Ends with DONE.
RandomRmaReport random_rma_initiator(Endpoint& ep, const RandomRmaOptions& options);

/// For the peer-death test: starts random puts/gets (no model) and returns them.
struct RmaBurst {
  std::vector<std::vector<std::byte>> buffers;
  std::vector<Request> requests;
};
std::unique_ptr<RmaBurst> start_rma_burst(Endpoint& ep, const RemoteKey& key, size_t region_size, size_t count,
                                          uint64_t seed);

// --- (b) concurrent atomics from several initiators -------------------------------

/// What an atomics initiator does: `count` fetch_add(1) on word 0 and fetch_add of
/// atomics_addend(rank) on word 1 (pipelined), `cas_count` compare_swap increments of
/// word 2 in a CAS loop. The words are the first three of the key's window.
struct AtomicsOptions {
  size_t initiators = 3;
  size_t count = 2000;
  size_t cas_count = 300;
  std::chrono::milliseconds timeout{60'000};
};
uint64_t atomics_addend(uint32_t rank);
/// Target over several endpoints (one per initiator): serves, collects each
/// initiator's report and checks that the totals add up exactly and that the old
/// values fetch_add returned are exactly {0 .. initiators*count-1}.
std::string atomics_target(Context& ctx, const std::vector<std::shared_ptr<Endpoint>>& eps,
                           const AtomicsOptions& options);
std::string atomics_initiator(Endpoint& ep, uint32_t rank, const AtomicsOptions& options);

// --- (c) notifications: exactly once, after the data ---------------------------------

struct NotifyOptions {
  uint64_t seed = 1;
  size_t count = 1500;   ///< notified puts, spread over two regions
  size_t window = 64;
  std::chrono::milliseconds timeout{60'000};
};
/// Target: two regions; for every notification checks value (known, never seen
/// before), region, offset and length, and that the put's bytes (derived from the
/// value) are already in memory; after `count` of them and the initiator's DONE,
/// no further notification may exist.
std::string notify_target(Context& ctx, Endpoint& ep, const NotifyOptions& options);
std::string notify_initiator(Endpoint& ep, const NotifyOptions& options);

// --- (d) flush as the fence before a two-sided message --------------------------------

struct FlushOptions {
  uint64_t seed = 1;
  size_t region_size = 8 << 20;
  size_t rounds = 12;
  std::chrono::milliseconds timeout{60'000};
};
/// Initiator: per round, overwrites the whole region with fire-and-forget puts of
/// random sizes (content fill_stream(seed + round)) and some fetch_adds on a counter,
/// flushes, then sends VERIFY; the target checks every byte and the counter the
/// moment the message arrives and answers.
std::string flush_target(Context& ctx, Endpoint& ep, const FlushOptions& options);
std::string flush_initiator(Endpoint& ep, const FlushOptions& options);

}  // namespace remora::itest
