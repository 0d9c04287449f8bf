// raw_wire.h — handshake and frame bytes built by hand from docs/protocol.md (not from
// src/wire, so a mistake shared by encoder and decoder cannot hide), plus a tiny
// blocking-with-deadline TCP client/server for the robustness tests.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace remora::itest::raw {

inline constexpr size_t kHelloSize = 48;

struct Hello {
  uint32_t magic = 0x41524D52;  // "RMRA"
  uint16_t version = 1;
  uint8_t role = 1;  // 1 control, 2 data, 3 probe
  uint64_t capabilities = 0;
  uint64_t endpoint_id = 0;
  uint64_t attach_token = 0;
  uint16_t stream_index = 0;
  uint16_t stream_count = 1;
  uint32_t eager_limit = 16 * 1024;
  uint32_t eager_credit = 1024 * 1024;
  uint32_t rma_window = 256;  // bytes 44..47: RMA requests we serve at once, 1..65536
};

struct HelloAck {
  uint32_t magic = 0;
  uint16_t version = 0;
  uint16_t status = 0;
  uint64_t capabilities = 0;
  uint64_t endpoint_id = 0;
  uint64_t attach_token = 0;
  uint16_t stream_index = 0;
  uint16_t stream_count = 0;
  uint32_t eager_limit = 0;
  uint32_t eager_credit = 0;
  uint32_t rma_window = 0;  // bytes 44..47: 1..65536 when accepted; a refusal may send 0
};

/// Little-endian writer.
class Bytes {
 public:
  Bytes& u8(uint8_t v) { b_.push_back(v); return *this; }
  Bytes& u16(uint16_t v) { return put(v, 2); }
  Bytes& u32(uint32_t v) { return put(v, 4); }
  Bytes& u64(uint64_t v) { return put(v, 8); }
  Bytes& raw(const std::vector<uint8_t>& v) { b_.insert(b_.end(), v.begin(), v.end()); return *this; }
  Bytes& zeros(size_t n) { b_.insert(b_.end(), n, 0); return *this; }
  const std::vector<uint8_t>& bytes() const { return b_; }

 private:
  Bytes& put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  std::vector<uint8_t> b_;
};

inline uint64_t get_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

inline std::vector<uint8_t> encode(const Hello& h) {
  Bytes b;
  b.u32(h.magic).u16(h.version).u8(h.role).u8(0).u64(h.capabilities).u64(h.endpoint_id).u64(h.attach_token)
      .u16(h.stream_index).u16(h.stream_count).u32(h.eager_limit).u32(h.eager_credit).u32(h.rma_window);
  return b.bytes();
}

inline std::vector<uint8_t> encode(const HelloAck& a) {
  Bytes b;
  b.u32(a.magic).u16(a.version).u16(a.status).u64(a.capabilities).u64(a.endpoint_id).u64(a.attach_token)
      .u16(a.stream_index).u16(a.stream_count).u32(a.eager_limit).u32(a.eager_credit).u32(a.rma_window);
  return b.bytes();
}

inline HelloAck decode_ack(const std::vector<uint8_t>& v) {
  const uint8_t* p = v.data();
  HelloAck a;
  a.magic = static_cast<uint32_t>(get_le(p, 4));
  a.version = static_cast<uint16_t>(get_le(p + 4, 2));
  a.status = static_cast<uint16_t>(get_le(p + 6, 2));
  a.capabilities = get_le(p + 8, 8);
  a.endpoint_id = get_le(p + 16, 8);
  a.attach_token = get_le(p + 24, 8);
  a.stream_index = static_cast<uint16_t>(get_le(p + 32, 2));
  a.stream_count = static_cast<uint16_t>(get_le(p + 34, 2));
  a.eager_limit = static_cast<uint32_t>(get_le(p + 36, 4));
  a.eager_credit = static_cast<uint32_t>(get_le(p + 40, 4));
  a.rma_window = static_cast<uint32_t>(get_le(p + 44, 4));
  return a;
}

/// Decodes a HELLO as the server sees it (for the fake-server tests).
struct HelloView {
  uint32_t magic;
  uint16_t version;
  uint8_t role, reserved7;
  uint64_t capabilities, endpoint_id, attach_token;
  uint16_t stream_index, stream_count;
  uint32_t eager_limit, eager_credit, rma_window;
};
inline HelloView decode_hello(const std::vector<uint8_t>& v) {
  const uint8_t* p = v.data();
  return {static_cast<uint32_t>(get_le(p, 4)),        static_cast<uint16_t>(get_le(p + 4, 2)),
          p[6],                                       p[7],
          get_le(p + 8, 8),                           get_le(p + 16, 8),
          get_le(p + 24, 8),                          static_cast<uint16_t>(get_le(p + 32, 2)),
          static_cast<uint16_t>(get_le(p + 34, 2)),   static_cast<uint32_t>(get_le(p + 36, 4)),
          static_cast<uint32_t>(get_le(p + 40, 4)),   static_cast<uint32_t>(get_le(p + 44, 4))};
}

/// Control frame: 8-byte header (type, flags, reserved u16, body_length u32) + body.
inline std::vector<uint8_t> frame(uint8_t type, const std::vector<uint8_t>& body, uint8_t flags = 0,
                                  uint16_t reserved = 0, std::optional<uint32_t> body_length = std::nullopt) {
  Bytes b;
  b.u8(type).u8(flags).u16(reserved).u32(body_length.value_or(static_cast<uint32_t>(body.size()))).raw(body);
  return b.bytes();
}

inline std::vector<uint8_t> eager(uint64_t tag, const std::vector<uint8_t>& payload) {
  return frame(1, Bytes().u64(tag).raw(payload).bytes());
}

/// A connected TCP socket with deadline-bounded I/O. Closes on destruction.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  static Socket connect_to(const std::string& host, uint16_t port, std::string* error);
  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  bool send_all(const std::vector<uint8_t>& data, std::string* error);
  /// Exactly n bytes, or nullopt (EOF, error or deadline; `error` says which).
  std::optional<std::vector<uint8_t>> recv_exact(size_t n, std::chrono::milliseconds timeout, std::string* error);
  /// Reads and discards until EOF / reset (true) or the deadline (false). `bytes_read`
  /// counts what was discarded.
  bool wait_closed(std::chrono::milliseconds timeout, size_t* bytes_read = nullptr);

 private:
  int fd_ = -1;
};

/// A listening socket on 127.0.0.1:0 (a fake server).
class Listener {
 public:
  Listener();
  ~Listener();
  bool valid() const { return fd_ >= 0; }
  uint16_t port() const { return port_; }
  /// Accepts one connection within the deadline.
  Socket accept(std::chrono::milliseconds timeout, std::string* error);

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

/// A port on 127.0.0.1 that is bound but not listening (connections get RST) while
/// this object lives, so nobody else can grab it meanwhile.
class ClosedPort {
 public:
  ClosedPort();
  ~ClosedPort();
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace remora::itest::raw
