// Tests of REMORA_CHECKSUM=crc32c end to end (datapath/checksum.h, docs/protocol.md
// "Checksums"): two contexts in one process over real loopback sockets, checksums on,
// every kind of transfer (eager and rendezvous messages, expected and unexpected; inline
// and chunked puts and gets; host and staged device memory) across the size classes
// and chunk boundaries, the data compared byte for byte; and the handshake rule that a
// peer configured differently is refused at connect, on both sides, with a clear error.
// A peer that sends a wrong CRC or a flipped byte: checksum_hostile_test.cc.
#include <gtest/gtest.h>

#include "crc32c_required.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "remora/remora.h"
#include "remora/testing/test_device.h"
#include "scoped_env.h"

namespace remora {
namespace {

using namespace std::chrono_literals;
using testing::TestDeviceDomain;

constexpr size_t kEager = 4096;
constexpr size_t kChunk = 64 * 1024;

ContextOptions options(ChecksumMode mode) {
  ContextOptions o;
  o.ignore_env = true;
  o.checksum = mode;
  o.eager_limit = kEager;
  o.chunk_bytes = kChunk;
  o.streams_per_endpoint = 2;
  return o;
}

std::vector<std::byte> pattern(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937_64 rng(seed);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

/// 0 B, inline (and the eager limit itself), one chunk and its edges, many chunks.
const std::vector<size_t> kSizes = {0, 1, kEager - 1, kEager, kEager + 1, kChunk - 1, kChunk, kChunk + 1,
                                    7 * kChunk + 13};

class Checksum : public ::testing::Test {
 protected:
  void SetUp() override {
    REMORA_SKIP_WITHOUT_CRC32C();
    a_ = Context::create(options(ChecksumMode::kCrc32c)).value();
    b_ = Context::create(options(ChecksumMode::kCrc32c)).value();
    listener_ = b_->listen("127.0.0.1:0").value();
    auto c = a_->connect("127.0.0.1:" + std::to_string(listener_->port()), 10s);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    init_ = *c;
    auto s = listener_->accept(10s);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    target_ = *s;
  }

  // Device domains outlive the contexts that use them (declared first, destroyed last).
  std::unique_ptr<TestDeviceDomain> dev_a_, dev_b_;
  std::unique_ptr<Context> a_, b_;
  std::unique_ptr<Listener> listener_;
  std::shared_ptr<Endpoint> init_, target_;
};

TEST_F(Checksum, MessagesOfEverySizeArriveIntactBothWays) {
  uint64_t tag = 1;
  for (size_t n : kSizes) {
    for (bool expected : {true, false}) {  // receive posted first, or the message first
      for (auto [from, to] : {std::pair{init_.get(), target_.get()}, std::pair{target_.get(), init_.get()}}) {
        const auto data = pattern(n, tag);
        std::vector<std::byte> got(n + 1, std::byte{0xEE});
        Request r, s;
        if (expected) r = to->recv(std::span(got).first(n), Tag{tag});
        s = from->send(data, Tag{tag});
        if (!expected) {
          // A marker sent after it: once the marker is received, the message (EAGER or
          // RTS, earlier on the same control stream) has arrived unexpected.
          const Tag marker{uint64_t{1} << 40};
          Request m = to->recv({}, marker);
          ASSERT_TRUE(from->send({}, marker).wait(10s).is_ok());
          ASSERT_TRUE(m.wait(10s).is_ok());
          r = to->recv(std::span(got).first(n), Tag{tag});
        }
        ASSERT_TRUE(r.wait(10s).is_ok()) << n << " bytes: " << r.wait(0s).to_string();
        ASSERT_TRUE(s.wait(10s).is_ok()) << n;
        EXPECT_EQ(r.bytes(), n);
        EXPECT_TRUE(std::equal(data.begin(), data.end(), got.begin())) << n << " bytes";
        EXPECT_EQ(got[n], std::byte{0xEE}) << "a byte past the message was written";
        ++tag;
      }
    }
  }
  EXPECT_FALSE(init_->failed());
  EXPECT_FALSE(target_->failed());
}

TEST_F(Checksum, PutsAndGetsOfEverySizeArriveIntact) {
  const size_t region_bytes = 8 * kChunk + 64;
  std::vector<std::byte> region(region_bytes, std::byte{0});
  auto reg = b_->register_memory(region.data(), region.size(), Access::kRemoteRead | Access::kRemoteWrite).value();
  const RemoteKey key = reg.remote_key();
  uint64_t seed = 100;
  for (size_t n : kSizes) {
    const auto data = pattern(n, seed++);
    std::vector<std::byte> model = region;
    std::copy(data.begin(), data.end(), model.begin() + 3);
    Status put = init_->put(data, key, 3).wait(10s);
    ASSERT_TRUE(put.is_ok()) << n << " bytes: " << put.to_string();
    EXPECT_EQ(region, model) << "put of " << n << " bytes";
    std::vector<std::byte> back(n + 1, std::byte{0xEE});
    Status get = init_->get(std::span(back).first(n), key, 3).wait(10s);
    ASSERT_TRUE(get.is_ok()) << n << " bytes: " << get.to_string();
    EXPECT_TRUE(std::equal(data.begin(), data.end(), back.begin())) << "get of " << n << " bytes";
    EXPECT_EQ(back[n], std::byte{0xEE});
  }
  // Collectives ride on puts with notifications: those are checked alike.
  const auto data = pattern(3 * kChunk, 7);
  ASSERT_TRUE(init_->put(data, key, 0, {.notify = 42}).wait(10s).is_ok());
  auto note = target_->wait_notification(10s);
  ASSERT_TRUE(note.is_ok());
  EXPECT_EQ(note->value, 42u);
  EXPECT_EQ(std::memcmp(region.data(), data.data(), data.size()), 0);
  EXPECT_GT(init_->stats().chunks_sent, 0u);
}

TEST_F(Checksum, StagedDeviceMemoryIsChecksummedOnItsHostBytes) {
  dev_a_ = TestDeviceDomain::create({.capacity = size_t{64} << 20}).value();
  dev_b_ = TestDeviceDomain::create({.capacity = size_t{64} << 20}).value();
  TestDeviceDomain* dev_a = dev_a_.get();
  TestDeviceDomain* dev_b = dev_b_.get();
  ASSERT_TRUE(a_->add_memory_domain(*dev_a).is_ok());
  ASSERT_TRUE(b_->add_memory_domain(*dev_b).is_ok());
  const size_t max = 7 * kChunk + 13;
  std::byte* src = dev_a->allocate(max).value();
  std::byte* dst = dev_b->allocate(max).value();
  std::byte* region_mem = dev_b->allocate(max).value();
  auto reg = b_->register_memory(region_mem, max, Access::kRemoteRead | Access::kRemoteWrite).value();
  uint64_t tag = 500;
  for (size_t n : kSizes) {
    if (n == 0) continue;
    const auto data = pattern(n, tag);
    ASSERT_TRUE(dev_a->write(src, data.data(), n).is_ok());
    // A message from device memory into device memory.
    Request r = target_->recv({dst, n}, Tag{tag});
    Request s = init_->send({src, n}, Tag{tag});
    ASSERT_TRUE(r.wait(10s).is_ok()) << n << ": " << r.wait(0s).to_string();
    ASSERT_TRUE(s.wait(10s).is_ok()) << n;
    std::vector<std::byte> got(n);
    ASSERT_TRUE(dev_b->read(got.data(), dst, n).is_ok());
    EXPECT_EQ(got, data) << "message of " << n << " bytes";
    // A put from device memory into a device region, and a get back into device memory.
    Status put = init_->put({src, n}, reg.remote_key(), 0).wait(10s);
    ASSERT_TRUE(put.is_ok()) << n << ": " << put.to_string();
    ASSERT_TRUE(dev_b->read(got.data(), region_mem, n).is_ok());
    EXPECT_EQ(got, data) << "put of " << n << " bytes";
    ASSERT_TRUE(dev_a->write(src, pattern(n, 0).data(), n).is_ok());
    Status get = init_->get({src, n}, reg.remote_key(), 0).wait(10s);
    ASSERT_TRUE(get.is_ok()) << n << ": " << get.to_string();
    ASSERT_TRUE(dev_a->read(got.data(), src, n).is_ok());
    EXPECT_EQ(got, data) << "get of " << n << " bytes";
    ++tag;
  }
}

/// A server and a client configured differently: connect fails, on whichever side
/// checksums, naming REMORA_CHECKSUM; the server goes on accepting matching peers.
TEST(ChecksumNegotiation, DifferingPeersAreRefusedAtConnect) {
  REMORA_SKIP_WITHOUT_CRC32C();
  for (bool server_checksums : {true, false}) {
    auto server = Context::create(options(server_checksums ? ChecksumMode::kCrc32c : ChecksumMode::kNone)).value();
    auto client = Context::create(options(server_checksums ? ChecksumMode::kNone : ChecksumMode::kCrc32c)).value();
    auto listener = server->listen("127.0.0.1:0").value();
    const std::string address = "127.0.0.1:" + std::to_string(listener->port());
    auto refused = client->connect(address, 10s);
    ASSERT_FALSE(refused.is_ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported) << refused.status().to_string();
    EXPECT_NE(refused.status().message().find("REMORA_CHECKSUM"), std::string::npos) << refused.status().to_string();
    EXPECT_NE(refused.status().message().find(server_checksums ? "this side has REMORA_CHECKSUM=none"
                                                               : "this side has REMORA_CHECKSUM=crc32c"),
              std::string::npos)
        << refused.status().to_string();
    EXPECT_FALSE(listener->accept(100ms).is_ok()) << "a refused peer must not be accepted";
    // The listener serves a peer that agrees.
    auto agreeing = Context::create(options(server_checksums ? ChecksumMode::kCrc32c : ChecksumMode::kNone)).value();
    auto ok = agreeing->connect(address, 10s);
    ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
    auto accepted = listener->accept(10s);
    ASSERT_TRUE(accepted.is_ok()) << accepted.status().to_string();
    std::vector<std::byte> got(5);
    Request r = (*accepted)->recv(got, Tag{1});
    ASSERT_TRUE((*ok)->send(pattern(5, 1), Tag{1}).wait(10s).is_ok());
    ASSERT_TRUE(r.wait(10s).is_ok());
    EXPECT_EQ(got, pattern(5, 1));
  }
}

/// With authentication (REMORA_AUTH_KEY) on both sides, the checksum rule still holds:
/// after the peers proved the shared secret, a differing checksum setting is refused with
/// its own error, and agreeing peers exchange checksummed data.
TEST(ChecksumNegotiation, HoldsBehindAuthentication) {
  REMORA_SKIP_WITHOUT_CRC32C();
  auto keyed = [](ChecksumMode mode) {
    ContextOptions o = options(mode);
    o.auth_key = AuthKey::from_secret("job secret").value();
    return Context::create(o).value();
  };
  auto server = keyed(ChecksumMode::kCrc32c);
  auto listener = server->listen("127.0.0.1:0").value();
  const std::string address = "127.0.0.1:" + std::to_string(listener->port());
  auto refused = keyed(ChecksumMode::kNone)->connect(address, 10s);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("REMORA_CHECKSUM"), std::string::npos) << refused.status().to_string();
  auto client = keyed(ChecksumMode::kCrc32c);
  auto ok = client->connect(address, 10s);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  auto accepted = listener->accept(10s);
  ASSERT_TRUE(accepted.is_ok()) << accepted.status().to_string();
  const auto data = pattern(3 * kChunk + 1, 9);
  std::vector<std::byte> got(data.size());
  Request r = (*accepted)->recv(got, Tag{1});
  ASSERT_TRUE((*ok)->send(data, Tag{1}).wait(10s).is_ok());
  ASSERT_TRUE(r.wait(10s).is_ok());
  EXPECT_EQ(got, data);
}

TEST(ChecksumConfig, VariableIsParsedAndChecked) {
  ContextOptions o;
  o.ignore_env = true;
  Config c = apply(Config{}, o);
  EXPECT_EQ(c.checksum, ChecksumMode::kNone);
  o.checksum = ChecksumMode::kCrc32c;
  c = apply(c, o);
  EXPECT_EQ(c.checksum, ChecksumMode::kCrc32c);
  const Status v = c.validate();
  if (core::crc32c_available()) {
    EXPECT_TRUE(v.is_ok()) << v.to_string();
  } else {
    EXPECT_EQ(v.code(), StatusCode::kUnsupported);
    EXPECT_NE(v.message().find("libisal-dev"), std::string::npos) << v.to_string();
  }
  {
    testing::ScopedEnv env("REMORA_CHECKSUM", "md5");
    auto bad = Config::from_env();
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("none|crc32c"), std::string::npos) << bad.status().to_string();
  }
  {
    testing::ScopedEnv env("REMORA_CHECKSUM", "crc32c");
    auto good = Config::from_env();
    if (core::crc32c_available()) {
      ASSERT_TRUE(good.is_ok()) << good.status().to_string();
      EXPECT_EQ(good->checksum, ChecksumMode::kCrc32c);
    }
  }
}

}  // namespace
}  // namespace remora
