// datapath/segments.cc — see segments.h.
#include "datapath/segments.h"

#include <algorithm>
#include <cerrno>
#include <utility>

#include "core/crc32c.h"

namespace remora::detail {

namespace {

std::byte* address(const std::byte* base, uint64_t at) noexcept {
  return base != nullptr ? const_cast<std::byte*>(base) + at : reinterpret_cast<std::byte*>(static_cast<uintptr_t>(at));
}

}  // namespace

SegmentMap::SegmentMap(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {
  starts_.reserve(pieces_.size());
  uint64_t at = 0;
  for (const Piece& p : pieces_) {
    starts_.push_back(at);
    at += p.length;
  }
}

SegmentMap::Piece SegmentMap::locate(uint64_t offset) const noexcept {
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), offset);
  const size_t i = static_cast<size_t>(it - starts_.begin()) - 1;
  const uint64_t into = offset - starts_[i];
  return Piece{.at = pieces_[i].at + into, .length = pieces_[i].length - into};
}

int SegmentMap::iovecs(const std::byte* base, uint64_t offset, uint64_t length, iovec* out, int max) const noexcept {
  int n = 0;
  while (length > 0 && n < max) {
    const Piece p = locate(offset);
    const uint64_t take = std::min(length, p.length);
    out[n++] = iovec{address(base, p.at), take};
    offset += take;
    length -= take;
  }
  return n;
}

uint32_t SegmentMap::checksum(const std::byte* base, uint64_t offset, uint64_t length) const noexcept {
  uint32_t crc = 0;  // extending 0 is the CRC-32C
  while (length > 0) {
    const Piece p = locate(offset);
    const uint64_t take = std::min(length, p.length);
    crc = core::crc32c_extend(crc, {address(base, p.at), take});
    offset += take;
    length -= take;
  }
  return crc;
}

net::IoResult SegmentedHostSource::write(int fd, uint64_t offset, uint64_t len) {
  iovec iov[kMaxIov];
  return net::send_some_gathered(fd, iov, map_.iovecs(nullptr, offset, len, iov, kMaxIov));
}

net::IoResult SegmentedHostSink::read(StreamIn& in, uint64_t offset, uint64_t len, uint64_t* asked) {
  iovec iov[kMaxIov];
  return in.recv_scattered(iov, map_.iovecs(nullptr, offset, len, iov, kMaxIov), asked);
}

net::IoResult SegmentedRegionSource::write(int fd, uint64_t offset, uint64_t len) {
  const net::IoResult r = write_again(fd, offset, len);
  if (!r.error() || r.err != EKEYREVOKED) return r;  // sendmsg(2) never answers EKEYREVOKED
  // Deregistered: keep the stream in step with zeros; the reply says "revoked".
  return net::send_some(fd, zeros().data(), std::min<uint64_t>(len, zeros().size()));
}

net::IoResult SegmentedRegionSource::write_again(int fd, uint64_t offset, uint64_t len) {
  if (!revoked_ && access_->begin()) {
    iovec iov[kMaxIov];
    const net::IoResult r =
        net::send_some_gathered(fd, iov, map_.iovecs(access_->address(), offset, len, iov, kMaxIov));
    access_->end();
    return r;
  }
  revoked_ = true;
  return net::IoResult{net::IoResult::Kind::kError, 0, EKEYREVOKED};
}

std::optional<uint32_t> SegmentedRegionSource::checksum(uint64_t offset, uint64_t length) {
  if (!revoked_ && access_->begin()) {
    const uint32_t crc = map_.checksum(access_->address(), offset, length);
    access_->end();
    return crc;
  }
  // Revoked before its bytes go out: zeros will (write), and the RESP says revoked.
  revoked_ = true;
  return zeros_checksum(length);
}

net::IoResult SegmentedRegionSink::read(StreamIn& in, uint64_t offset, uint64_t len, uint64_t* asked) {
  if (!revoked_ && access_->begin()) {
    iovec iov[kMaxIov];
    const net::IoResult r = in.recv_scattered(iov, map_.iovecs(access_->address(), offset, len, iov, kMaxIov), asked);
    access_->end();
    return r;
  }
  revoked_ = true;  // deregistered mid-transfer: drain the rest, the reply says "revoked"
  return discard_->read(in, offset, len, asked);
}

std::optional<uint32_t> SegmentedRegionSink::checksum(uint64_t offset, uint64_t length) {
  if (revoked_ || !access_->begin()) return std::nullopt;
  const uint32_t crc = map_.checksum(access_->address(), offset, length);
  access_->end();
  return crc;
}

}  // namespace remora::detail
