// A hostile (or broken) peer against REMORA_CHECKSUM=crc32c: a raw socket in this
// process speaks the protocol by hand to a real remora endpoint over loopback, and sends
// payloads whose CRC-32C does not match their bytes: a wrong CRC on an inline payload, a
// flipped byte in a chunk. The victim's operation must fail with kDataCorrupt naming the
// chunk, nothing must be written where the protocol promises nothing is (inline puts,
// inline get replies, eager receives), no notification and no success may be reported,
// and the endpoint must carry the next transfer intact. A payload without the CRC the
// endpoint negotiated is a protocol error. (Frames are built with src/wire's encoder,
// whose byte layout tests/wire/frame_test.cc pins by hand.)
#include <gtest/gtest.h>

#include "crc32c_required.h"
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "remora/remora.h"
#include "remora/version.h"
#include "wire/frame.h"
#include "wire/handshake.h"

namespace remora {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kPeerEagerLimit = 16 * 1024;
constexpr size_t kVictimEager = 4096;  // the negotiated eager limit: min(ours, the victim's)

std::vector<std::byte> pattern(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937_64 rng(seed);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

uint32_t crc_of(std::span<const std::byte> b) { return core::crc32c(b); }

/// `data` with the bits of `mask` flipped in byte `at` (a copy: what goes on the wire).
std::vector<std::byte> flipped(const std::vector<std::byte>& data, size_t at, uint8_t mask) {
  std::vector<std::byte> out = data;
  if (at < out.size() && mask != 0) out.at(at) = static_cast<std::byte>(static_cast<uint8_t>(out.at(at)) ^ mask);
  return out;
}

/// The raw peer: one control and one data connection, blocking with a 10 s timeout.
class RawPeer {
 public:
  ~RawPeer() {
    if (ctl_ >= 0) ::close(ctl_);
    if (data_ >= 0) ::close(data_);
  }

  /// Handshakes with `capabilities` (0 + kCapChecksumCrc32c here); "" or what went wrong.
  std::string connect(uint16_t port, uint64_t capabilities) {
    wire::Hello h;
    h.version = kWireVersion;
    h.role = wire::Role::kControl;
    h.capabilities = capabilities;
    h.stream_count = 1;
    h.eager_limit = kPeerEagerLimit;
    h.eager_credit = 1 << 20;
    h.rma_window = 256;
    ctl_ = open(port);
    if (ctl_ < 0) return "connect failed";
    auto ack = exchange(ctl_, h);
    if (!ack) return ack.status().to_string();
    if (ack->status != wire::HelloStatus::kAccepted) return "refused, status " + std::to_string(int(ack->status));
    wire::Hello d = h;
    d.role = wire::Role::kData;
    d.endpoint_id = ack->endpoint_id;
    d.attach_token = ack->attach_token;
    data_ = open(port);
    auto dack = exchange(data_, d);
    if (!dack) return dack.status().to_string();
    return dack->status == wire::HelloStatus::kAccepted ? "" : "data stream refused";
  }

  void send_frame(const wire::Frame& f) {
    std::vector<std::byte> out(wire::encoded_size(f));
    wire::encode(f, out);
    write_all(ctl_, out);
  }
  void send_data(std::span<const std::byte> bytes) { write_all(data_, bytes); }
  /// Reads `n` bytes off the data stream (a put's chunks the victim sends).
  bool read_data(size_t n) {
    std::vector<std::byte> sink(n);
    return read_all(data_, sink);
  }

  /// The next frame of type T from the victim (others, such as CREDIT, are skipped).
  template <typename T>
  std::optional<T> next() {
    for (int i = 0; i < 1000; ++i) {
      std::vector<std::byte> header(wire::kFrameHeaderSize);
      if (!read_all(ctl_, header)) return std::nullopt;
      uint32_t body_length = 0;
      std::memcpy(&body_length, header.data() + 4, 4);
      buffer_ = header;
      buffer_.resize(header.size() + body_length);
      if (!read_all(ctl_, std::span(buffer_).subspan(header.size()))) return std::nullopt;
      auto decoded = wire::decode_frame(buffer_, {.max_eager_payload = kPeerEagerLimit});
      if (!decoded) {
        ADD_FAILURE() << decoded.status().to_string();
        return std::nullopt;
      }
      if (const T* f = std::get_if<T>(&decoded->frame)) return *f;  // spans point into buffer_
    }
    return std::nullopt;
  }

  /// True once the victim closed the control connection (it failed the endpoint).
  bool closed_by_victim() {
    std::byte b[4096];
    for (;;) {
      const ssize_t n = ::recv(ctl_, b, sizeof b, 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }

 private:
  static int open(uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{.tv_sec = 10, .tv_usec = 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }
  static Result<wire::HelloAck> exchange(int fd, const wire::Hello& h) {
    const auto out = wire::encode_hello(h);
    write_all(fd, out);
    std::array<std::byte, wire::kHelloAckSize> in{};
    if (!read_all(fd, in)) return Status(StatusCode::kPeerFailed, "no HELLO_ACK");
    return wire::decode_hello_ack(in);
  }
  static void write_all(int fd, std::span<const std::byte> b) {
    while (!b.empty()) {
      const ssize_t n = ::send(fd, b.data(), b.size(), MSG_NOSIGNAL);
      ASSERT_GT(n, 0) << "send: " << std::strerror(errno);
      b = b.subspan(static_cast<size_t>(n));
    }
  }
  static bool read_all(int fd, std::span<std::byte> b) {
    while (!b.empty()) {
      const ssize_t n = ::recv(fd, b.data(), b.size(), 0);
      if (n <= 0) return false;
      b = b.subspan(static_cast<size_t>(n));
    }
    return true;
  }

  int ctl_ = -1;
  int data_ = -1;
  std::vector<std::byte> buffer_;
};

class ChecksumHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    REMORA_SKIP_WITHOUT_CRC32C();
    ContextOptions o;
    o.ignore_env = true;
    o.checksum = ChecksumMode::kCrc32c;
    o.eager_limit = kVictimEager;
    o.chunk_bytes = 64 * 1024;
    ctx_ = Context::create(o).value();
    listener_ = ctx_->listen("127.0.0.1:0").value();
    ASSERT_EQ(peer_.connect(listener_->port(), wire::kCapChecksumCrc32c), "");
    auto ep = listener_->accept(10s);
    ASSERT_TRUE(ep.is_ok()) << ep.status().to_string();
    victim_ = *ep;
    region_.assign(256 * 1024, std::byte{0x11});
    reg_ = ctx_->register_memory(region_.data(), region_.size(), Access::kRemoteRead | Access::kRemoteWrite).value();
    const auto k = reg_.remote_key().serialize();
    std::copy(k.begin(), k.end(), key_.begin());
  }

  /// Sends a chunked transfer's CHUNKs, each with the CRC of `data`'s chunk, and the
  /// bytes of `wire_bytes` (which may differ) on the data stream.
  void send_chunks(wire::ChunkKind kind, uint64_t id, std::span<const std::byte> data,
                   std::span<const std::byte> wire_bytes, size_t chunk) {
    for (size_t off = 0; off < data.size(); off += chunk) {
      const size_t n = std::min(chunk, data.size() - off);
      peer_.send_frame(wire::ChunkFrame{.recv_id = id,
                                        .offset = off,
                                        .length = static_cast<uint32_t>(n),
                                        .stream = 0,
                                        .kind = kind,
                                        .has_crc = true,
                                        .crc = crc_of(data.subspan(off, n))});
      peer_.send_data(wire_bytes.subspan(off, n));
    }
  }

  static void expect_corrupt(const Status& s, const std::string& names) {
    EXPECT_EQ(s.code(), StatusCode::kDataCorrupt) << s.to_string();
    EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find(names), std::string::npos) << "expected '" << names << "' in: " << s.to_string();
  }

  RawPeer peer_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Listener> listener_;
  std::shared_ptr<Endpoint> victim_;
  std::vector<std::byte> region_;
  Region reg_;
  wire::KeyBytes key_{};
};

TEST_F(ChecksumHostile, EagerWithWrongCrcFailsThatReceiveOnly) {
  const auto data = pattern(300, 1);
  // Expected: the receive is posted first.
  std::vector<std::byte> got(300, std::byte{0xEE});
  Request r = victim_->recv(got, Tag{1});
  peer_.send_frame(wire::EagerFrame{.tag = Tag{1}, .payload = data, .has_crc = true, .crc = crc_of(data) ^ 1});
  expect_corrupt(r.wait(10s), "tag 1");
  EXPECT_EQ(got, std::vector<std::byte>(300, std::byte{0xEE})) << "a corrupt eager payload was delivered";
  // Unexpected: it arrives before its receive, and fails the receive that matches it.
  peer_.send_frame(wire::EagerFrame{.tag = Tag{3}, .payload = data, .has_crc = true, .crc = crc_of(data) + 7});
  peer_.send_frame(wire::EagerFrame{.tag = Tag{4}, .payload = data, .has_crc = true, .crc = crc_of(data)});
  ASSERT_TRUE(victim_->recv(got, Tag{4}).wait(10s).is_ok());  // in order: tag 3 is in too
  EXPECT_EQ(got, data);
  std::fill(got.begin(), got.end(), std::byte{0xEE});
  expect_corrupt(victim_->recv(got, Tag{3}).wait(10s), "tag 3");
  EXPECT_EQ(got, std::vector<std::byte>(300, std::byte{0xEE}));
  // The endpoint goes on.
  Request next = victim_->recv(got, Tag{2});
  peer_.send_frame(wire::EagerFrame{.tag = Tag{2}, .payload = data, .has_crc = true, .crc = crc_of(data)});
  ASSERT_TRUE(next.wait(10s).is_ok());
  EXPECT_EQ(got, data);
  EXPECT_FALSE(victim_->failed());
}

TEST_F(ChecksumHostile, ChunkWithFlippedByteFailsThatMessageOnly) {
  constexpr size_t kChunk = 32 * 1024;
  const auto data = pattern(3 * kChunk + 5, 2);
  for (bool corrupt : {true, false}) {
    const Tag tag{corrupt ? 10u : 11u};
    std::vector<std::byte> got(data.size());
    Request r = victim_->recv(got, tag);
    peer_.send_frame(wire::RtsFrame{.send_id = 1, .tag = tag, .length = data.size()});
    auto cts = peer_.next<wire::CtsFrame>();
    ASSERT_TRUE(cts.has_value());
    const auto on_wire = flipped(data, 2 * kChunk + 100, corrupt ? 0x04 : 0);  // in the third chunk
    send_chunks(wire::ChunkKind::kMessage, cts->recv_id, data, on_wire, kChunk);
    const Status s = r.wait(10s);
    if (corrupt) {
      expect_corrupt(s, "offset " + std::to_string(2 * kChunk));
    } else {
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      EXPECT_EQ(got, data);
    }
  }
  EXPECT_FALSE(victim_->failed());
}

TEST_F(ChecksumHostile, InlinePutWithWrongCrcWritesNothingAndIsRefused) {
  const auto data = pattern(1000, 3);
  const auto before = region_;
  peer_.send_frame(wire::PutFrame{.op_id = 1,
                                  .key = key_,
                                  .offset = 8,
                                  .length = data.size(),
                                  .has_notify = true,
                                  .notify = 5,
                                  .inline_data = true,
                                  .payload = data,
                                  .has_crc = true,
                                  .crc = ~crc_of(data)});
  auto resp = peer_.next<wire::RespFrame>();
  ASSERT_TRUE(resp.has_value());
  EXPECT_EQ(resp->op_id, 1u);
  EXPECT_EQ(resp->status, wire::RmaStatus::kChecksum);
  EXPECT_EQ(resp->value, 0u);
  EXPECT_EQ(region_, before) << "a corrupt inline put wrote into the region";
  EXPECT_FALSE(victim_->poll_notification().has_value()) << "a corrupt put delivered its notification";
  // The next put is served.
  peer_.send_frame(wire::PutFrame{.op_id = 2,
                                  .key = key_,
                                  .offset = 8,
                                  .length = data.size(),
                                  .has_notify = true,
                                  .notify = 6,
                                  .inline_data = true,
                                  .payload = data,
                                  .has_crc = true,
                                  .crc = crc_of(data)});
  resp = peer_.next<wire::RespFrame>();
  ASSERT_TRUE(resp.has_value());
  EXPECT_EQ(resp->status, wire::RmaStatus::kOk);
  EXPECT_EQ(std::memcmp(region_.data() + 8, data.data(), data.size()), 0);
  auto note = victim_->wait_notification(10s);
  ASSERT_TRUE(note.is_ok());
  EXPECT_EQ(note->value, 6u);
}

TEST_F(ChecksumHostile, ChunkedPutWithFlippedByteIsAnsweredWithTheChunkOffset) {
  constexpr size_t kChunk = 16 * 1024;
  const auto data = pattern(4 * kChunk + 9, 4);
  for (bool corrupt : {true, false}) {
    const uint64_t op = corrupt ? 7 : 8;
    const auto on_wire = flipped(data, kChunk + 3, corrupt ? 0x80 : 0);  // the second chunk
    peer_.send_frame(wire::PutFrame{.op_id = op,
                                    .key = key_,
                                    .offset = 64,
                                    .length = data.size(),
                                    .has_notify = true,
                                    .notify = op,
                                    .inline_data = false,
                                    .payload = {}});
    send_chunks(wire::ChunkKind::kPut, op, data, on_wire, kChunk);
    auto resp = peer_.next<wire::RespFrame>();
    ASSERT_TRUE(resp.has_value());
    EXPECT_EQ(resp->op_id, op);
    if (corrupt) {
      EXPECT_EQ(resp->status, wire::RmaStatus::kChecksum);
      EXPECT_EQ(resp->value, kChunk) << "the RESP names the first chunk that failed";
      EXPECT_FALSE(victim_->poll_notification().has_value()) << "a corrupt put delivered its notification";
    } else {
      EXPECT_EQ(resp->status, wire::RmaStatus::kOk);
      EXPECT_EQ(resp->value, 0u);
      EXPECT_EQ(std::memcmp(region_.data() + 64, data.data(), data.size()), 0);
      auto note = victim_->wait_notification(10s);
      ASSERT_TRUE(note.is_ok());
      EXPECT_EQ(note->value, op);
    }
  }
  EXPECT_FALSE(victim_->failed());
}

TEST_F(ChecksumHostile, InlineGetReplyWithWrongCrcFailsTheGetAndWritesNothing) {
  const auto data = pattern(777, 5);
  for (bool corrupt : {true, false}) {
    std::vector<std::byte> got(data.size(), std::byte{0xEE});
    Request r = victim_->get(got, reg_.remote_key(), 0);
    auto get = peer_.next<wire::GetFrame>();
    ASSERT_TRUE(get.has_value());
    ASSERT_EQ(get->length, data.size());
    peer_.send_frame(wire::RespFrame{.op_id = get->op_id,
                                     .status = wire::RmaStatus::kOk,
                                     .value = 0,
                                     .inline_data = true,
                                     .payload = data,
                                     .has_crc = true,
                                     .crc = crc_of(data) ^ (corrupt ? 0x10000u : 0u)});
    const Status s = r.wait(10s);
    if (corrupt) {
      expect_corrupt(s, "get " + std::to_string(get->op_id));
      EXPECT_EQ(got, std::vector<std::byte>(data.size(), std::byte{0xEE})) << "a corrupt reply was written";
    } else {
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      EXPECT_EQ(got, data);
    }
  }
  EXPECT_FALSE(victim_->failed());
}

TEST_F(ChecksumHostile, ChunkedGetWithFlippedByteFailsTheGet) {
  constexpr size_t kChunk = 20000;
  const auto data = pattern(3 * kChunk + 1, 6);
  for (bool corrupt : {true, false}) {
    std::vector<std::byte> got(data.size());
    Request r = victim_->get(got, reg_.remote_key(), 0);
    auto get = peer_.next<wire::GetFrame>();
    ASSERT_TRUE(get.has_value());
    const auto on_wire = flipped(data, data.size() - 1, corrupt ? 0x01 : 0);  // the last chunk's last byte
    send_chunks(wire::ChunkKind::kGet, get->op_id, data, on_wire, kChunk);
    peer_.send_frame(wire::RespFrame{.op_id = get->op_id, .status = wire::RmaStatus::kOk, .value = 0});
    const Status s = r.wait(10s);
    if (corrupt) {
      expect_corrupt(s, "offset " + std::to_string(3 * kChunk));
    } else {
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      EXPECT_EQ(got, data);
    }
  }
  EXPECT_FALSE(victim_->failed());
}

/// The victim initiates: a target that answers RESP status 8 fails that put with
/// data_corrupt naming the chunk, at every size class (0 B and inline: offset 0), and
/// the victim's next put completes.
TEST_F(ChecksumHostile, TargetsChecksumVerdictFailsThatPutOnly) {
  for (size_t n : {size_t{0}, size_t{100}, size_t{3 * 64 * 1024 + 1}}) {
    for (bool corrupt : {true, false}) {
      const auto data = pattern(n, n);
      Request r = victim_->put(data, reg_.remote_key(), 0);
      auto put = peer_.next<wire::PutFrame>();
      ASSERT_TRUE(put.has_value());
      ASSERT_EQ(put->length, n);
      ASSERT_EQ(put->inline_data, n <= kVictimEager);
      if (put->inline_data) {
        ASSERT_TRUE(put->has_crc) << "an inline put carries its CRC";
        EXPECT_EQ(put->crc, crc_of(data));
      } else {
        // Take every chunk in before answering (a RESP before the data is a violation).
        uint64_t announced = 0;
        while (announced < n) {
          auto chunk = peer_.next<wire::ChunkFrame>();
          ASSERT_TRUE(chunk.has_value());
          ASSERT_TRUE(chunk->has_crc);
          EXPECT_EQ(chunk->crc, crc_of(std::span(data).subspan(chunk->offset, chunk->length)));
          announced += chunk->length;
        }
        ASSERT_TRUE(peer_.read_data(n));
      }
      const uint64_t bad_chunk = put->inline_data ? 0 : 64 * 1024;
      peer_.send_frame(wire::RespFrame{.op_id = put->op_id,
                                       .status = corrupt ? wire::RmaStatus::kChecksum : wire::RmaStatus::kOk,
                                       .value = corrupt ? bad_chunk : 0});
      const Status s = r.wait(10s);
      if (corrupt) {
        expect_corrupt(s, "chunk at offset " + std::to_string(bad_chunk));
      } else {
        EXPECT_TRUE(s.is_ok()) << n << " bytes: " << s.to_string();
      }
    }
  }
  EXPECT_FALSE(victim_->failed());
}

TEST_F(ChecksumHostile, PayloadWithoutTheNegotiatedCrcIsAProtocolError) {
  const auto data = pattern(10, 7);
  std::vector<std::byte> got(10);
  Request r = victim_->recv(got, Tag{1});
  peer_.send_frame(wire::EagerFrame{.tag = Tag{1}, .payload = data});  // no CRC
  const Status s = r.wait(10s);
  EXPECT_EQ(s.code(), StatusCode::kProtocol) << s.to_string();
  EXPECT_NE(s.message().find("CRC"), std::string::npos) << s.to_string();
  EXPECT_TRUE(peer_.closed_by_victim());
}

}  // namespace
}  // namespace remora
