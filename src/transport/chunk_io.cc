// transport/chunk_io.cc — the host-memory chunk sources and sinks (see chunk_io.h).
#include "transport/chunk_io.h"

#include <algorithm>

namespace remora::detail {
namespace {

/// Zeros sent in place of a revoked region's bytes.
std::span<const std::byte> zeros() {
  static const std::vector<std::byte> bytes(DiscardSink::kScratchBytes);
  return bytes;
}

}  // namespace

net::IoResult HostSource::write(int fd, uint64_t offset, uint64_t len) {
  return net::send_some(fd, data_ + offset, len);
}

net::IoResult HostSink::read(int fd, uint64_t offset, uint64_t len, uint64_t* asked) {
  *asked = len;
  return net::recv_some(fd, data_ + offset, len);
}

std::byte* DiscardSink::scratch() {
  if (scratch_.empty()) scratch_.resize(kScratchBytes);
  return scratch_.data();
}

net::IoResult DiscardSink::read(int fd, uint64_t /*offset*/, uint64_t len, uint64_t* asked) {
  *asked = std::min<uint64_t>(len, kScratchBytes);
  return net::recv_some(fd, scratch(), *asked);
}

net::IoResult RegionSource::write(int fd, uint64_t offset, uint64_t len) {
  if (!revoked_ && access_->begin()) {
    const net::IoResult r = net::send_some(fd, access_->address() + offset, len);
    access_->end();
    return r;
  }
  // The region was deregistered: never read it again, but keep the stream in step
  // with the announced chunk by sending zeros; the reply will say "revoked".
  revoked_ = true;
  return net::send_some(fd, zeros().data(), std::min<uint64_t>(len, zeros().size()));
}

net::IoResult RegionSink::read(int fd, uint64_t offset, uint64_t len, uint64_t* asked) {
  if (!revoked_ && access_->begin()) {
    *asked = len;
    const net::IoResult r = net::recv_some(fd, access_->address() + offset, len);
    access_->end();
    return r;
  }
  revoked_ = true;  // deregistered mid-transfer: drain the rest, the reply says "revoked"
  return discard_->read(fd, offset, len, asked);
}

}  // namespace remora::detail
