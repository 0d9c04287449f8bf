// remora/endpoint.h — a connection to one peer: tagged two-sided messaging now,
// one-sided RMA later.
//
// An Endpoint is one TCP control stream plus K payload-only data streams. Small
// messages travel inline on the control stream (eager); large ones are announced
// (RTS), accepted by the matching receive (CTS), and cut into chunks spread over the
// data streams — each chunk lands directly in the posted receive buffer.
//
// Matching: a recv matches the oldest unmatched message with the same tag from this
// endpoint; messages with the same tag are received in send order. Different tags
// complete in any order.
//
// Failure: if the peer goes away (EOF, reset) or violates the protocol, every
// outstanding request fails with kPeerFailed (or kProtocol) and later calls fail
// immediately. Other endpoints of the context are unaffected.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "remora/request.h"
#include "remora/status.h"
#include "remora/types.h"

namespace remora {

namespace detail {
class EndpointCore;
}

/// Counters for one endpoint.
struct EndpointStats {
  uint64_t messages_sent = 0, messages_received = 0;
  uint64_t bytes_sent = 0, bytes_received = 0;
  uint64_t eager_sent = 0, rendezvous_sent = 0;
  uint64_t chunks_sent = 0;
  std::vector<uint64_t> chunks_per_stream;  ///< chunks sent on each data stream
};

/// Thread-safe: any thread may post operations.
class Endpoint {
 public:
  explicit Endpoint(std::shared_ptr<detail::EndpointCore> core) noexcept;
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  /// Sends `data` with `tag`. The buffer must stay valid until the request completes.
  /// Fails immediately (in the request) with kNoResource when max_outstanding ops are
  /// posted, kPeerFailed/kAborted when the endpoint is down.
  Request send(std::span<const std::byte> data, Tag tag);
  /// Posts a receive of a message with `tag` into `buffer`. A message longer than the
  /// buffer completes this request with kTruncated and no byte of it is written. A
  /// rendezvous sender (messages above the eager limit) fails with kTruncated too; an
  /// eager send completed locally before the receiver matched it, so only the
  /// receiver learns of the truncation.
  Request recv(std::span<std::byte> buffer, Tag tag);

  /// Closes the endpoint: outstanding requests fail with kAborted; the peer sees EOF.
  void close();

  bool failed() const;
  /// Why the endpoint failed (ok if it has not).
  Status failure() const;
  EndpointId id() const;
  std::string peer_address() const;
  uint32_t data_streams() const;
  EndpointStats stats() const;

 private:
  std::shared_ptr<detail::EndpointCore> core_;
};

}  // namespace remora
