// tests/zerocopy/zc_test_util.h — what the zerocopy tests share: gtest printing of
// StatusCode, a control buffer laid out as the kernel's put_cmsg lays it out (built with
// the CMSG_* macros), little-endian byte strings for golden netlink messages, and a
// connected TCP pair on loopback.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <bit>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "net/socket.h"
#include "remora/status.h"
#include "zerocopy/uapi.h"

namespace remora {
inline void PrintTo(StatusCode code, std::ostream* os) { *os << to_string(code); }
}  // namespace remora

namespace remora::zerocopy::test {

/// The binding id the tests' devmem streams own.
inline constexpr uint32_t kOurBinding = 7;

/// A recvmsg control buffer filled the way the kernel fills one: each control message
/// at CMSG_NXTHDR of the previous, msg_controllen the bytes used (the last message's
/// padding included, as put_cmsg advances by CMSG_SPACE).
class ControlBuffer {
 public:
  explicit ControlBuffer(size_t capacity = 4096) : storage_((capacity + sizeof(cmsghdr) - 1) / sizeof(cmsghdr)) {
    msg_.msg_control = storage_.data();
    msg_.msg_controllen = storage_.size() * sizeof(cmsghdr);
  }

  /// Appends a control message of `level`/`type` carrying `data`; `cmsg_len` overrides
  /// the length written in its header (for malformed ones).
  void add(int level, int type, const void* data, size_t len, std::optional<size_t> cmsg_len = std::nullopt) {
    cmsghdr* c = next();
    ASSERT_NE(c, nullptr) << "control buffer full";
    c->cmsg_level = level;
    c->cmsg_type = type;
    c->cmsg_len = cmsg_len.value_or(CMSG_LEN(len));
    std::memcpy(data_of(c), data, len);
    last_ = c;
    used_ = offset_of(c) + CMSG_SPACE(len);
  }
  void dmabuf(uint64_t offset, uint32_t size, uint32_t token, uint32_t binding = kOurBinding) {
    const uapi::DmabufCmsg frag{
        .frag_offset = offset, .frag_size = size, .frag_token = token, .dmabuf_id = binding, .flags = 0};
    add(SOL_SOCKET, uapi::kScmDevmemDmabuf, &frag, sizeof frag);
  }
  void linear(uint32_t size) {
    const uapi::DmabufCmsg frag{.frag_offset = 0, .frag_size = size, .frag_token = 0, .dmabuf_id = 0, .flags = 0};
    add(SOL_SOCKET, uapi::kScmDevmemLinear, &frag, sizeof frag);
  }
  /// The msghdr as recvmsg would return it: msg_controllen = bytes used (or `controllen`).
  const msghdr& msg(int flags = 0, std::optional<size_t> controllen = std::nullopt) {
    msg_.msg_controllen = controllen.value_or(used_);
    msg_.msg_flags = flags;
    return msg_;
  }
  size_t used() const { return used_; }

 private:
  // CMSG_* cast C-style; they are used here only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wcast-align"
  cmsghdr* next() {
    msg_.msg_controllen = storage_.size() * sizeof(cmsghdr);
    return last_ == nullptr ? CMSG_FIRSTHDR(&msg_) : CMSG_NXTHDR(&msg_, last_);
  }
  static unsigned char* data_of(cmsghdr* c) { return CMSG_DATA(c); }
#pragma GCC diagnostic pop
  size_t offset_of(const cmsghdr* c) const {
    return static_cast<size_t>(static_cast<const char*>(static_cast<const void*>(c)) -
                               static_cast<const char*>(static_cast<const void*>(storage_.data())));
  }

  std::vector<cmsghdr> storage_;  // cmsghdr-aligned bytes
  msghdr msg_{};
  cmsghdr* last_ = nullptr;
  size_t used_ = 0;
};

/// Little-endian bytes, built field by field from the uAPI layouts (not with libmnl),
/// for golden netlink messages.
class Bytes {
 public:
  Bytes& u8(uint8_t v) { return raw(&v, 1); }
  Bytes& u16(uint16_t v) { return raw(&v, 2); }
  Bytes& u32(uint32_t v) { return raw(&v, 4); }
  Bytes& u64(uint64_t v) { return raw(&v, 8); }
  Bytes& str(const std::string& s) { return raw(s.data(), s.size()); }
  Bytes& zeros(size_t n) {
    bytes_.insert(bytes_.end(), n, std::byte{0});
    return *this;
  }
  /// nlattr header {len, type} for a payload of `payload` bytes.
  Bytes& attr(uint16_t type, uint16_t payload) { return u16(static_cast<uint16_t>(4 + payload)).u16(type); }
  Bytes& attr_u32(uint16_t type, uint32_t v) { return attr(type, 4).u32(v); }
  /// A nested attribute whose length close() fills in: open() returns where it starts.
  size_t open(uint16_t type) {
    const size_t at = bytes_.size();
    attr(type, 0);
    return at;
  }
  void close(size_t at) {
    ASSERT_LE(at + 2, bytes_.size());
    const auto len = static_cast<uint16_t>(bytes_.size() - at);
    std::memcpy(&bytes_[at], &len, sizeof len);
  }
  /// Patches a u32 at `offset` (nlmsg_len once the size is known).
  void set_u32(size_t offset, uint32_t v) {
    ASSERT_LE(offset + sizeof v, bytes_.size());
    std::memcpy(&bytes_[offset], &v, sizeof v);
  }
  size_t size() const { return bytes_.size(); }
  const std::vector<std::byte>& bytes() const { return bytes_; }

 private:
  Bytes& raw(const void* p, size_t n) {
    static_assert(std::endian::native == std::endian::little, "golden bytes are little-endian");
    const auto* b = static_cast<const std::byte*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
    return *this;
  }
  std::vector<std::byte> bytes_;
};

/// Sends all of `data` on the non-blocking socket `fd`, waiting for room with poll.
inline void send_all(int fd, std::span<const std::byte> data) {
  size_t at = 0;
  while (at < data.size()) {
    pollfd p{fd, POLLOUT, 0};
    ASSERT_EQ(::poll(&p, 1, 20000), 1);
    const ssize_t n = ::send(fd, data.data() + at, data.size() - at, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EAGAIN) continue;
    ASSERT_GT(n, 0) << std::strerror(errno);
    at += static_cast<size_t>(n);
  }
}

/// A connected TCP pair on 127.0.0.1 (both ends non-blocking).
struct TcpPair {
  net::Fd client, server;
};

inline TcpPair tcp_pair() {
  net::SockAddr a;
  auto* in = reinterpret_cast<sockaddr_in*>(&a.storage);
  in->sin_family = AF_INET;
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.length = sizeof(sockaddr_in);
  TcpPair p;
  auto listener = net::listen_tcp(a, 1);
  EXPECT_TRUE(listener.is_ok()) << listener.status().to_string();
  if (!listener) return p;
  auto where = net::local_address(listener->get());
  EXPECT_TRUE(where.is_ok());
  auto client = net::connect_tcp(*where, net::Clock::now() + std::chrono::seconds(10));
  EXPECT_TRUE(client.is_ok()) << client.status().to_string();
  if (!client) return p;
  pollfd pfd{listener->get(), POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 10'000), 1);
  p.server = net::Fd(::accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  EXPECT_TRUE(p.server.valid());
  p.client = std::move(*client);
  return p;
}

}  // namespace remora::zerocopy::test
