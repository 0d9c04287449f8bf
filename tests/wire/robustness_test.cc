// tests/wire/robustness_test.cc — the decoders over a few hundred thousand random and
// mutated inputs (deterministic seed), checking the invariants in wire_invariants.h.
// A cheap, always-on cousin of tests/fuzz/wire_fuzz.cc.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <variant>
#include <vector>

#include "remora/version.h"
#include "wire/auth.h"
#include "wire/frame.h"
#include "wire/handshake.h"
#include "wire/wire_invariants.h"

namespace remora::wire {
namespace {

using Bytes = std::vector<std::byte>;

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  uint64_t u64() { return rng_(); }
  uint64_t below(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }
  bool coin(int one_in) { return below(static_cast<uint64_t>(one_in)) == 0; }
  std::byte byte() { return static_cast<std::byte>(rng_()); }

  /// Boundary values are far more interesting than uniform ones.
  uint64_t interesting_u64() {
    switch (below(6)) {
      case 0: return 0;
      case 1: return 1;
      case 2: return ~uint64_t{0};
      case 3: return uint64_t{1} << below(64);
      case 4: return below(256);
      default: return u64();
    }
  }

  Bytes random_bytes(size_t max_len) {
    Bytes b(below(max_len + 1));
    for (auto& x : b) x = byte();
    return b;
  }

  KeyBytes key() {
    KeyBytes k;
    for (auto& b : k) b = coin(4) ? std::byte{0} : byte();
    return k;
  }

  /// An inline payload for PUT/RESP: usually small, sometimes exactly the limit.
  std::span<const std::byte> inline_payload(uint32_t eager_limit, Bytes& storage) {
    storage = random_bytes(std::min<size_t>(eager_limit, 48));
    if (coin(8)) storage.assign(eager_limit, byte());
    return storage;
  }

  Bytes valid_frame(uint32_t eager_limit, Bytes& payload_storage) {
    Frame f;
    switch (below(23)) {
      case 0:
        payload_storage = random_bytes(std::min<size_t>(eager_limit, 48));
        if (coin(8)) payload_storage.assign(eager_limit, byte());
        f = EagerFrame{.tag = static_cast<Tag>(interesting_u64()), .payload = payload_storage};
        break;
      case 1:
        f = RtsFrame{.send_id = interesting_u64(), .tag = static_cast<Tag>(interesting_u64()), .length = interesting_u64()};
        break;
      case 2:
        f = CtsFrame{.send_id = interesting_u64(), .recv_id = interesting_u64(), .status = static_cast<CtsStatus>(below(2))};
        break;
      case 3:
        f = ChunkFrame{.recv_id = interesting_u64(),
                       .offset = interesting_u64(),
                       .length = static_cast<uint32_t>(interesting_u64() | 1),
                       .stream = static_cast<uint16_t>(interesting_u64()),
                       .kind = static_cast<ChunkKind>(below(3))};
        break;
      case 4: f = CreditFrame{.bytes = interesting_u64()}; break;
      case 5: f = GoodbyeFrame{.reason = static_cast<uint32_t>(interesting_u64())}; break;
      case 6: {
        PutFrame put{.op_id = interesting_u64(),
                     .key = key(),
                     .offset = interesting_u64(),
                     .length = interesting_u64(),
                     .has_notify = coin(2),
                     .notify = 0,
                     .inline_data = coin(2),
                     .payload = {}};
        if (put.has_notify) put.notify = interesting_u64();
        if (put.inline_data) {
          put.payload = inline_payload(eager_limit, payload_storage);
          put.length = put.payload.size();
        }
        f = put;
        break;
      }
      case 7:
        f = GetFrame{.op_id = interesting_u64(), .key = key(), .offset = interesting_u64(), .length = interesting_u64()};
        break;
      case 8: {
        const bool cas = coin(2);
        f = AtomicFrame{.op_id = interesting_u64(),
                        .key = key(),
                        .offset = interesting_u64(),
                        .op = cas ? AtomicOp::kCompareSwap : AtomicOp::kFetchAdd,
                        .operand = interesting_u64(),
                        .compare = cas ? interesting_u64() : 0};
        break;
      }
      case 11: f = HeartbeatFrame{.seq = interesting_u64(), .reply = coin(2)}; break;
      case 12: {
        HostFrame host{.pid = static_cast<uint32_t>(interesting_u64()),
                       .boot_id = {},
                       .netns = interesting_u64(),
                       .probe_address = interesting_u64(),
                       .probe_value = interesting_u64(),
                       .can_pull = coin(2)};
        for (auto& b : host.boot_id) b = byte();
        f = host;
        break;
      }
      case 13: {
        const bool crc = coin(2);
        f = PullFrame{.recv_id = interesting_u64(),
                      .offset = interesting_u64(),
                      .length = static_cast<uint32_t>(interesting_u64() | 1),
                      .address = interesting_u64(),
                      .kind = static_cast<ChunkKind>(below(3)),
                      .has_crc = crc,
                      .crc = crc ? static_cast<uint32_t>(interesting_u64()) : 0};
        break;
      }
      case 14:
        f = PulledFrame{.recv_id = interesting_u64(),
                        .length = static_cast<uint32_t>(interesting_u64() | 1),
                        .kind = static_cast<ChunkKind>(below(3))};
        break;
      case 15: {
        const auto op = static_cast<ShmOp>(1 + below(4));
        const auto fd = static_cast<uint32_t>(interesting_u64() & 0x7FFFFFFF);
        f = ShmFrame{.op = op,
                     .ring_fd = op == ShmOp::kOffer ? fd : 0,
                     .wake_fd = op == ShmOp::kOffer ? fd ^ 1 : 0,
                     .code = op == ShmOp::kDecline ? static_cast<StatusCode>(2 + below(15)) : StatusCode::kOk};
        break;
      }
      case 16:
        f = ReceivedFrame{.stream = static_cast<uint16_t>(interesting_u64()), .chunks = interesting_u64()};
        break;
      case 17:
        f = RetireFrame{.stream = static_cast<uint16_t>(interesting_u64()), .chunks = interesting_u64()};
        break;
      case 18: f = RejoinedFrame{.stream = static_cast<uint16_t>(interesting_u64())}; break;
      case 19: f = HandledFrame{.bytes = interesting_u64(), .resumed = below(2) == 1}; break;
      case 20: {
        const auto op = static_cast<MapOp>(1 + below(5));
        const bool counted = op == MapOp::kCredit || op == MapOp::kAck;
        KeyBytes key{};
        if (!counted) {
          for (auto& b : key) b = static_cast<std::byte>(below(256));
        }
        f = MapFrame{.op = op,
                     .fd = op == MapOp::kGrant ? static_cast<uint32_t>(interesting_u64() & 0x7FFFFFFF) : 0,
                     .code = op == MapOp::kRefuse ? static_cast<StatusCode>(2 + below(15)) : StatusCode::kOk,
                     .grant = op == MapOp::kGrant ? static_cast<uint32_t>(below(kMaxGrantNumber + 1)) : 0,
                     .region_bytes = op == MapOp::kGrant ? interesting_u64() | 1 : 0,
                     .count = op == MapOp::kCredit ? 1 + interesting_u64() % kMaxPlacedCredits
                              : op == MapOp::kAck  ? interesting_u64() | 1
                                                   : 0,
                     .key = key};
        break;
      }
      case 21: {
        // A range that does not end past 2^64 (the decoder refuses those).
        const uint64_t offset = interesting_u64(), room = UINT64_MAX - offset;
        const uint64_t length = room == UINT64_MAX ? interesting_u64() : interesting_u64() % (room + 1);
        f = PlacedFrame{.key = key(), .offset = offset, .length = length, .notify = interesting_u64()};
        break;
      }
      case 22: {
        const auto length = static_cast<uint32_t>(interesting_u64());
        const uint64_t room = UINT64_MAX - length;  // offsets whose range ends by 2^64
        f = PlacedShortFrame{.grant = 1 + static_cast<uint32_t>(below(kMaxGrantNumber)),
                             .length = length,
                             .offset = room == UINT64_MAX ? interesting_u64() : interesting_u64() % (room + 1),
                             .notify = interesting_u64(),
                             .handled = interesting_u64()};
        break;
      }
      case 10:
        f = AbortFrame{.id = interesting_u64(),
                       .kind = static_cast<ChunkKind>(below(3)),
                       .code = static_cast<StatusCode>(2 + below(14))};  // no_resource .. device_failed
        break;
      default: {
        RespFrame resp{.op_id = interesting_u64(),
                       .status = static_cast<RmaStatus>(below(8)),
                       .value = interesting_u64(),
                       .inline_data = false,
                       .payload = {}};
        if (coin(2)) {
          resp.status = RmaStatus::kOk;
          resp.inline_data = true;
          resp.payload = inline_payload(eager_limit, payload_storage);
        }
        f = resp;
        break;
      }
    }
    Bytes out(encoded_size(f));
    EXPECT_EQ(encode(f, out), out.size());
    return out;
  }

  Bytes valid_hello() {
    Hello h{.version = kWireVersion,
            .role = coin(2) ? Role::kControl : Role::kData,
            .capabilities = interesting_u64(),
            .endpoint_id = 0,
            .attach_token = 0,
            .stream_index = 0,
            .stream_count = static_cast<uint16_t>(1 + below(kMaxStreams)),
            .eager_limit = static_cast<uint32_t>(interesting_u64()),
            .eager_credit = static_cast<uint32_t>(interesting_u64()),
            .rma_window = rma_window()};
    if (h.role == Role::kData) {
      h.endpoint_id = interesting_u64() | 1;
      h.attach_token = interesting_u64();
      h.stream_index = static_cast<uint16_t>(below(h.stream_count));
    }
    const auto a = encode_hello(h);
    return Bytes(a.begin(), a.end());
  }

  /// 1..65536, boundaries favoured.
  uint32_t rma_window() {
    switch (below(4)) {
      case 0: return 1;
      case 1: return 65536;
      default: return static_cast<uint32_t>(1 + below(65536));
    }
  }

  Bytes valid_hello_ack() {
    HelloAck ack{.version = coin(10) ? static_cast<uint16_t>(u64()) : kWireVersion,
                 .status = static_cast<HelloStatus>(below(4)),
                 .capabilities = interesting_u64(),
                 .endpoint_id = interesting_u64(),
                 .attach_token = interesting_u64(),
                 .stream_index = static_cast<uint16_t>(interesting_u64()),
                 .stream_count = static_cast<uint16_t>(interesting_u64()),
                 .eager_limit = static_cast<uint32_t>(interesting_u64()),
                 .eager_credit = static_cast<uint32_t>(interesting_u64()),
                 .rma_window = rma_window()};
    if (ack.status != HelloStatus::kAccepted && coin(2)) ack.rma_window = 0;  // a refusal may carry 0
    const auto a = encode_hello_ack(ack);
    return Bytes(a.begin(), a.end());
  }

  /// A handful of byte-level mutations: flips, overwrites, truncation, extension.
  void mutate(Bytes& b) {
    const uint64_t rounds = 1 + below(3);
    for (uint64_t i = 0; i < rounds; ++i) {
      switch (below(6)) {
        case 0:
          if (!b.empty()) b[below(b.size())] ^= static_cast<std::byte>(1u << below(8));
          break;
        case 1:
          if (!b.empty()) b[below(b.size())] = byte();
          break;
        case 2:
          if (!b.empty()) b.resize(below(b.size()));
          break;
        case 3: {
          const Bytes tail = random_bytes(16);
          b.insert(b.end(), tail.begin(), tail.end());
          break;
        }
        case 4:  // a header field set to an extreme
          if (b.size() >= 8) b[4 + below(4)] = coin(2) ? std::byte{0xFF} : std::byte{0x00};
          break;
        default:
          if (!b.empty()) b[below(b.size())] = static_cast<std::byte>(below(16));  // small values: types, statuses, kinds
          break;
      }
    }
  }

 private:
  std::mt19937_64 rng_;
};

constexpr uint32_t kLimitChoices[] = {0, 1, 64, 4096};

TEST(WireRobustness, FrameDecoderInvariantsOnRandomAndMutatedInput) {
  Generator gen(0x5EED'CAFE'F00D'0001);
  size_t ok = 0, protocol = 0, in_progress = 0;
  std::array<size_t, std::variant_size_v<Frame>> ok_by_type{};
  constexpr int kIterations = 300'000;
  for (int i = 0; i < kIterations; ++i) {
    const DecodeLimits limits{.max_eager_payload = kLimitChoices[gen.below(std::size(kLimitChoices))]};
    Bytes payload;
    Bytes in;
    switch (gen.below(4)) {
      case 0: in = gen.random_bytes(96); break;
      case 1: in = gen.valid_frame(limits.max_eager_payload, payload); break;
      default:
        in = gen.valid_frame(limits.max_eager_payload, payload);
        gen.mutate(in);
        break;
    }
    const std::string violation = testing::check_frame_invariants(in, limits);
    ASSERT_EQ(violation, "") << "iteration " << i;
    auto r = decode_frame(in, limits);
    if (r.is_ok()) {
      ++ok;
      ++ok_by_type[r->frame.index()];
    } else if (r.status().code() == StatusCode::kProtocol) {
      ++protocol;
    } else {
      ++in_progress;
    }
  }
  // The generator must actually reach all three outcomes, or the test proves little.
  EXPECT_GT(ok, kIterations / 10);
  EXPECT_GT(protocol, kIterations / 10);
  EXPECT_GT(in_progress, kIterations / 100);
  for (size_t i = 0; i < ok_by_type.size(); ++i) {
    EXPECT_GT(ok_by_type[i], kIterations / 100) << to_string(static_cast<FrameType>(i + 1)) << " frames decoded";
  }
}

TEST(WireRobustness, FrameStreamsDecodeFrameByFrame) {
  Generator gen(0x5EED'CAFE'F00D'0002);
  for (int i = 0; i < 20'000; ++i) {
    const DecodeLimits limits{.max_eager_payload = 4096};
    std::vector<Bytes> payloads(8);
    Bytes stream;
    const uint64_t frames = 1 + gen.below(8);
    for (uint64_t k = 0; k < frames; ++k) {
      const Bytes f = gen.valid_frame(limits.max_eager_payload, payloads[k]);
      stream.insert(stream.end(), f.begin(), f.end());
    }
    const bool mutated = gen.coin(2);
    if (mutated) gen.mutate(stream);
    std::span<const std::byte> rest(stream);
    uint64_t decoded = 0;
    while (!rest.empty()) {
      ASSERT_EQ(testing::check_frame_invariants(rest, limits), "") << "iteration " << i;
      auto r = decode_frame(rest, limits);
      if (!r.is_ok()) break;
      rest = rest.subspan(r->consumed);
      ++decoded;
    }
    if (!mutated) {
      EXPECT_EQ(decoded, frames);
      EXPECT_TRUE(rest.empty());
    }
  }
}

TEST(WireRobustness, HandshakeDecoderInvariants) {
  Generator gen(0x5EED'CAFE'F00D'0003);
  for (int i = 0; i < 200'000; ++i) {
    Bytes in;
    switch (gen.below(5)) {
      case 0: in = gen.random_bytes(56); break;
      case 1: in = gen.valid_hello(); break;
      case 2: in = gen.valid_hello_ack(); break;
      default:
        in = gen.coin(2) ? gen.valid_hello() : gen.valid_hello_ack();
        gen.mutate(in);
        if (gen.coin(2)) in.resize(kHelloSize);  // most mutations should still reach field checks
        break;
    }
    ASSERT_EQ(testing::check_hello_invariants(in), "") << "iteration " << i;
    ASSERT_EQ(testing::check_hello_ack_invariants(in), "") << "iteration " << i;
  }
}

TEST(WireRobustness, AuthDecoderInvariants) {
  Generator gen(0x5EED'CAFE'F00D'0004);
  for (int i = 0; i < 200'000; ++i) {
    Bytes in;
    if (gen.coin(4)) {
      in = gen.random_bytes(gen.coin(2) ? kAuthSize : 80);
    } else {
      AuthMessage m{.step = static_cast<AuthStep>(1 + gen.below(5))};
      for (auto& b : m.nonce) b = std::byte(gen.u64());
      for (auto& b : m.proof) b = std::byte(gen.u64());
      const auto encoded = encode_auth(m);  // the encoder writes what it is given
      in.assign(encoded.begin(), encoded.end());
      if (gen.coin(2)) gen.mutate(in);
      if (gen.coin(2)) in.resize(kAuthSize);  // most mutations should still reach field checks
    }
    ASSERT_EQ(testing::check_auth_invariants(in), "") << "iteration " << i;
  }
}

}  // namespace
}  // namespace remora::wire
