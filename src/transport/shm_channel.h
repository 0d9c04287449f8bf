// transport/shm_channel.h — an endpoint's control stream moved into shared memory
// between peers of one host (docs/protocol.md, "Shared-memory channel"): two byte rings
// (net/shm_ring.h), one per direction, each read by the side that made it, that carry
// the same frames the control connection would, decoded by the same decoders. The TCP
// control connection stays open and idle: its EOF or reset is the peer's death.
//
// Set-up (the endpoint sends and handles the SHM frames): each side makes its ring and
// eventfd (create_rx) and OFFERs them; each takes the peer's (adopt_tx) and says ACCEPT,
// or DECLINE with why. A side that took the peer's ring and heard the peer ACCEPT its
// own sends SWITCH on TCP and writes every later byte into the ring (switch_tx_at); the
// receiver reads TCP up to SWITCH and the ring after it (rx_switched). So both
// directions move, or neither.
//
// This class only moves bytes; it knows nothing of frames. Lock held (the engine's).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "engine/progress.h"
#include "net/io.h"
#include "net/shm_ring.h"
#include "remora/status.h"
#include "wire/frame.h"

namespace remora::detail {

class ShmChannel {
 public:
  /// Bytes of each ring.
  static constexpr size_t kRingBytes = size_t{1} << 20;

  /// Makes this side's ring and eventfd; the OFFER that names them.
  Result<wire::ShmFrame> create_rx();
  /// Takes the peer's (process `pid`) ring and eventfd from its OFFER: kAccessDenied,
  /// kUnsupported or kPeerFailed when the kernel refuses, kProtocol when they are not a
  /// sealed memfd ring and an eventfd.
  Status adopt_tx(pid_t pid, const wire::ShmFrame& offer);

  bool offered() const noexcept { return rx_ != nullptr; }
  bool adopted() const noexcept { return tx_ != nullptr; }
  /// This side's eventfd (registered with the engine): data came, or room.
  int rx_wake_fd() const noexcept { return rx_wake_.get(); }

  /// The byte at `offset` of the control output (and every one after it) goes into the
  /// peer's ring; those before it on TCP.
  void switch_tx_at(size_t offset) noexcept { tx_switch_at_ = offset; }
  /// The peer's SWITCH was read: every later byte comes from this side's ring.
  void rx_switched() noexcept { rx_on_ = true; }
  bool tx_on() const noexcept { return tx_on_; }
  bool rx_on() const noexcept { return rx_on_; }
  /// A SWITCH is queued and not all bytes before it are on TCP yet.
  bool tx_switch_pending() const noexcept { return !tx_on_ && tx_switch_at_ != SIZE_MAX; }

  /// One send of the control output `queued[off, end)`: to TCP `tcp_fd` up to the
  /// switch, into the ring after it. kWouldBlock when the ring is full (this side is
  /// woken through its eventfd once the peer read); kError with EPROTO when the peer
  /// corrupted the ring (corruption() says how).
  net::IoResult send(int tcp_fd, const std::byte* queued, size_t off, size_t end) noexcept;
  /// One read out of this side's ring (rx_on only): kWouldBlock when it is empty (and,
  /// with `arm`, this side is then marked sleeping: the peer's next write wakes it;
  /// without, a poller that will look again costs the peer no wake-up); kError with
  /// EPROTO on corruption.
  net::IoResult recv(std::byte* dst, size_t len, bool arm = true) noexcept;
  /// Bytes waiting in this side's ring.
  size_t readable() const noexcept { return rx_ != nullptr ? rx_->readable() : 0; }
  const Status& corruption() const noexcept { return corruption_; }

  /// The engine registration of rx_wake_fd.
  engine::HandlerId hid;
  bool registered = false;

 private:
  std::unique_ptr<net::ShmRingReader> rx_;
  net::Fd rx_wake_;
  std::unique_ptr<net::ShmRingWriter> tx_;
  net::Fd peer_wake_;
  size_t tx_switch_at_ = SIZE_MAX;
  bool tx_on_ = false;
  bool rx_on_ = false;
  Status corruption_;
};

}  // namespace remora::detail
