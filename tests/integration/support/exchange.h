// exchange.h — the random two-way exchange both sides of a scenario run, and the
// closing handshake that lets them close without losing each other's last bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "remora/endpoint.h"
#include "support/test_data.h"

namespace remora::itest {

struct ExchangeOptions {
  size_t send_window = 64;   ///< sends posted and not yet completed
  size_t recv_window = 128;  ///< receives posted and not yet completed
  std::chrono::milliseconds timeout{30'000};  ///< the whole exchange (healthy runs take ~1 s)
};

struct ExchangeReport {
  std::string error;  ///< empty on success; otherwise the first failed check
  uint64_t sent = 0, received = 0;
  uint64_t bytes_sent = 0, bytes_received = 0;
  double seconds = 0;
};

/// Sends `out` (from one thread) while receiving `in` (from another), both windowed;
/// every receive is checked: status ok, bytes() == size, tag, content, and that the
/// slack behind the message was not written. On the first failure it closes the
/// endpoint, waits (bounded) for every outstanding request so no buffer is freed under
/// the library, and reports.
ExchangeReport run_exchange(Endpoint& ep, const Plan& out, const Plan& in, const ExchangeOptions& options);

/// After both sides finished their exchange: the initiator sends FIN and waits for
/// FIN_ACK; the other side waits for FIN, sends FIN_ACK and then waits (bounded) until
/// the initiator's close shows up as a failed receive (kAborted/kPeerFailed) — at most
/// 10 s for that last step.
/// Empty string on success.
std::string close_handshake(Endpoint& ep, bool initiator, std::chrono::milliseconds timeout);

}  // namespace remora::itest
