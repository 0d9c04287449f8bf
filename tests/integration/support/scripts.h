// scripts.h — scripted edge-case scenarios shared by the test and the peer program.
//
// Each scenario is a pair of halves that run in different processes over one
// endpoint: the "A" half on one side and the "B" half on the other (the test runs A
// then B, the peer runs B then A, so both directions are covered). Every half returns
// an empty string on success or a description of the first failed check.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "remora/endpoint.h"

namespace remora::itest {

inline constexpr std::chrono::seconds kStepTimeout{30};

/// Truncation: rendezvous and eager messages into too-small buffers (1 byte short
/// included). The receiver's request must fail with kTruncated; a rendezvous sender's
/// too; and the very next message on the same tag must arrive intact.
std::string truncation_sender(Endpoint& ep, uint64_t seed);
std::string truncation_receiver(Endpoint& ep, uint64_t seed);

/// 0-byte messages: into an empty span, into a non-empty buffer (bytes() == 0 and the
/// buffer untouched), interleaved with non-empty messages on the same tag.
std::string zero_sender(Endpoint& ep, uint64_t seed);
std::string zero_receiver(Endpoint& ep, uint64_t seed);

/// Receives posted after arrival: eager and rendezvous messages are sent, then a
/// marker on another tag; the receiver waits for the marker first (frames are
/// processed in order, so the earlier ones are unexpected by then) and only then
/// posts the other receives.
std::string unexpected_sender(Endpoint& ep, uint64_t seed);
std::string unexpected_receiver(Endpoint& ep, uint64_t seed);

/// Out-of-order completion across tags: a big message on tag A, then small ones on
/// tags B/C; the receiver gets B and C before it even posts A. Then both posted, the
/// small one waited for first.
std::string out_of_order_sender(Endpoint& ep, uint64_t seed);
std::string out_of_order_receiver(Endpoint& ep, uint64_t seed);

/// Symmetric: post `count` sends, then `count` receives, without any wait in between,
/// then wait_all and verify each. `side` is 0 or 1 (which plan this side sends).
std::string many_outstanding(Endpoint& ep, uint64_t seed, uint32_t side, size_t count);

}  // namespace remora::itest
