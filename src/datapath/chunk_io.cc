// datapath/chunk_io.cc — the host-memory sources and sinks (see chunk_io.h).
#include "datapath/chunk_io.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/crc32c.h"
#include "datapath/checksum.h"

namespace remora::detail {

std::span<const std::byte> zeros() {
  static const std::vector<std::byte> bytes(DiscardSink::kScratchBytes);
  return bytes;
}

uint32_t zeros_checksum(uint64_t length) {
  uint32_t crc = 0;
  for (uint64_t done = 0; done < length;) {
    const uint64_t n = std::min<uint64_t>(length - done, zeros().size());
    crc = core::crc32c_extend(crc, zeros().first(n));  // extend from 0 is crc32c
    done += n;
  }
  return crc;
}

Status revoked_status() { return Status(StatusCode::kInvalidKey, "the region was deregistered"); }

Status ChunkSource::read_inline(uint64_t /*length*/, const InlineNow& /*now*/, InlineLater /*later*/) {
  return Status(StatusCode::kInternal, "this source sends chunks only");
}

Status ChunkSink::place_inline(std::span<const std::byte> /*bytes*/, InlinePlaced /*done*/) {
  return Status(StatusCode::kInternal, "this sink receives chunks only");
}

net::IoResult HostSource::write(int fd, uint64_t offset, uint64_t len) {
  return net::send_some(fd, data_ + offset, len);
}

net::IoResult StreamIn::recv_some(std::byte* dst, size_t len) { return net::recv_some(fd_, dst, len); }

net::IoResult StreamIn::recv_scattered(const iovec* buffers, int count, uint64_t* asked) {
  *asked = 0;
  for (int i = 0; i < count; ++i) *asked += buffers[i].iov_len;
  return net::recv_some_scattered(fd_, buffers, count);
}

net::IoResult StreamIn::recv_first(const iovec* buffers, int count, uint64_t* asked) {
  *asked = count > 0 ? buffers[0].iov_len : 0;
  return recv_some(count > 0 ? static_cast<std::byte*>(buffers[0].iov_base) : nullptr, *asked);
}

Status StreamIn::read_exact(std::span<std::byte> data, net::Clock::time_point deadline) {
  return net::read_exact(
      fd_, data, deadline, [this](std::byte* p, size_t n) { return recv_some(p, n); },
      [this](int err) {
        Status why = take_failure();
        return why.is_ok() ? net::errno_status(err, "recv") : why;
      },
      [this](net::Clock::time_point until) { return wait_readable(until); });
}

Status StreamIn::wait_readable(net::Clock::time_point deadline) { return net::wait_readable(fd_, deadline); }

net::IoResult HostSink::read(StreamIn& in, uint64_t offset, uint64_t len, uint64_t* asked) {
  *asked = len;
  return in.recv_some(data_ + offset, len);
}

std::byte* DiscardSink::scratch() {
  if (scratch_.empty()) scratch_.resize(kScratchBytes);
  return scratch_.data();
}

net::IoResult DiscardSink::read(StreamIn& in, uint64_t /*offset*/, uint64_t len, uint64_t* asked) {
  *asked = std::min<uint64_t>(len, kScratchBytes);
  return in.recv_some(scratch(), *asked);
}

net::IoResult RegionSource::write(int fd, uint64_t offset, uint64_t len) {
  const net::IoResult r = write_again(fd, offset, len);
  if (!r.error() || r.err != EKEYREVOKED) return r;  // send(2) never answers EKEYREVOKED
  // The region was deregistered: never read it again, but keep the stream in step
  // with the announced chunk by sending zeros; the reply will say "revoked".
  return net::send_some(fd, zeros().data(), std::min<uint64_t>(len, zeros().size()));
}

net::IoResult RegionSource::write_again(int fd, uint64_t offset, uint64_t len) {
  if (!revoked_ && access_->begin()) {
    const net::IoResult r = net::send_some(fd, access_->address() + offset, len);
    access_->end();
    return r;
  }
  revoked_ = true;
  return net::IoResult{net::IoResult::Kind::kError, 0, EKEYREVOKED};
}

net::IoResult RegionSink::read(StreamIn& in, uint64_t offset, uint64_t len, uint64_t* asked) {
  if (!revoked_ && access_->begin()) {
    *asked = len;
    const net::IoResult r = in.recv_some(access_->address() + offset, len);
    access_->end();
    return r;
  }
  revoked_ = true;  // deregistered mid-transfer: drain the rest, the reply says "revoked"
  return discard_->read(in, offset, len, asked);
}

Status RegionSink::place(std::span<const std::byte> bytes) {
  if (bytes.empty()) return Status::ok();
  if (revoked_ || !access_->begin()) {
    revoked_ = true;
    return revoked_status();
  }
  std::memcpy(access_->address(), bytes.data(), bytes.size());
  access_->end();
  return Status::ok();
}

std::optional<uint32_t> HostSource::checksum(uint64_t offset, uint64_t length) {
  return checksum_of({data_ + offset, length});
}

std::optional<uint32_t> HostSink::checksum(uint64_t offset, uint64_t length) {
  return checksum_of({data_ + offset, length});
}

std::optional<uint32_t> RegionSource::checksum(uint64_t offset, uint64_t length) {
  if (!revoked_ && access_->begin()) {
    const uint32_t crc = checksum_of({access_->address() + offset, length});
    access_->end();
    return crc;
  }
  // Revoked before its bytes go out: zeros will (write), and the RESP says revoked.
  revoked_ = true;
  return zeros_checksum(length);
}

std::optional<uint32_t> RegionSink::checksum(uint64_t offset, uint64_t length) {
  if (revoked_ || !access_->begin()) return std::nullopt;
  const uint32_t crc = checksum_of({access_->address() + offset, length});
  access_->end();
  return crc;
}

}  // namespace remora::detail
