// Device memory over the staging path, between two processes on loopback: this process
// and remora_test_peer (scenario device-echo) each add a TestDeviceDomain to their
// context — memory the process cannot touch except through the domain's asynchronous
// copies — and exchange messages of every size class around the eager limit and the
// chunk size, both ways, for each pairing of host and device memory on the two sides.
// Every message comes back and is compared byte for byte, and the peer's XXH3 of what
// it received is checked too. Failed device copies on either side fail exactly the
// message they belong to (device_failed, on both sides when the sender's copy fails:
// the ABORT frame) and the messages after it still arrive intact.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <chrono>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "itest_util.h"
#include "support/exchange.h"
#include "support/test_data.h"
#include "remora/testing/test_device.h"

namespace remora::itest {
namespace {

using namespace std::chrono_literals;
using testing::TestDeviceDomain;

constexpr uint64_t kChunk = 64 * 1024;   // small chunks: many per message
constexpr uint64_t kEager = 16 * 1024;   // the default eager limit

std::vector<uint64_t> sizes() {
  return {0,         1,         kEager - 1, kEager,      kEager + 1, kChunk - 1, kChunk,
          kChunk + 1, 5 * kChunk + 3, scaled<uint64_t>(uint64_t{24} << 20, uint64_t{4} << 20) + 5};
}

std::string join(const std::vector<uint64_t>& v) {
  std::string out;
  for (uint64_t x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

std::vector<std::byte> pattern(uint64_t len, uint64_t seed) {
  std::vector<std::byte> v(len);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<std::byte>(x);
  }
  return v;
}

/// This side's memory for one message: host bytes or test-device memory.
struct Side {
  TestDeviceDomain* dev = nullptr;  // null: host
  std::vector<std::byte> host;
  std::byte* device = nullptr;

  Side(TestDeviceDomain* d, uint64_t capacity) : dev(d) {
    if (dev == nullptr) {
      host.resize(capacity);
    } else {
      device = dev->allocate(capacity).value();
    }
  }
  std::byte* data() { return dev == nullptr ? host.data() : device; }
  void write(const std::vector<std::byte>& bytes) {
    if (bytes.empty()) return;  // memcpy of 0 bytes from a null pointer is undefined
    if (dev == nullptr) {
      std::memcpy(host.data(), bytes.data(), bytes.size());
    } else {
      ASSERT_TRUE(dev->write(device, bytes.data(), bytes.size()).is_ok());
    }
  }
  std::vector<std::byte> read(uint64_t len) {
    std::vector<std::byte> out(len);
    if (len == 0) return out;
    if (dev == nullptr) {
      std::memcpy(out.data(), host.data(), len);
    } else {
      EXPECT_TRUE(dev->read(out.data(), device, len).is_ok());
    }
    return out;
  }
};

struct Sides {
  std::unique_ptr<TestDeviceDomain> dev;  // before the context: it must outlive it
  std::unique_ptr<Context> ctx;
};

Sides make_sides(bool device) {
  Sides s;
  s.dev = TestDeviceDomain::create({.capacity = size_t{1} << 30, .newest_first = true}).value();
  ContextOptions options{.streams_per_endpoint = 2, .chunk_bytes = kChunk, .staging_buffers = 2};
  auto ctx = Context::create(options);
  EXPECT_TRUE(ctx.is_ok()) << describe(ctx.status());
  if (!ctx) return s;
  s.ctx = std::move(ctx).value();
  if (device) {
    EXPECT_TRUE(s.ctx->add_memory_domain(*s.dev).is_ok());
  }
  return s;
}

/// "RECV <i> ok <hash>" or "RECV <i> <code>" from the peer.
std::string peer_line(Process& peer) {
  auto line = peer.read_line(60s);
  return line ? *line : "(no line: " + std::string(peer.timed_out() ? "timeout" : "EOF") + ")";
}

struct Pairing {
  bool mine_device;
  bool peer_device;
};

class DeviceStaging : public ::testing::TestWithParam<Pairing> {};

TEST_P(DeviceStaging, EveryMessageComesBackIntactAtEverySize) {
  const auto [mine_device, peer_device] = GetParam();
  Sides setup = make_sides(mine_device);
  ASSERT_TRUE(setup.ctx);
  const auto all = sizes();
  PeerSession s = start_listening_peer(
      *setup.ctx, {"--scenario=device-echo", "--sizes=" + join(all), std::string("--memory=") + (peer_device ? "device" : "host"),
                   "--close=follow"},
      {"REMORA_CHUNK_SIZE=" + std::to_string(kChunk), "REMORA_STAGING_BUFFERS=2"});
  ASSERT_TRUE(s.ep);
  TestDeviceDomain* dev = mine_device ? setup.dev.get() : nullptr;
  Side out(dev, all.back()), in(dev, all.back());
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE("message " + std::to_string(i) + " of " + std::to_string(all[i]) + " bytes");
    const auto bytes = pattern(all[i], i + 1);
    out.write(bytes);
    Request back = s.ep->recv(std::span(in.data(), all[i]), Tag{200 + i});
    const Status sent = s.ep->send(std::span<const std::byte>(out.data(), all[i]), Tag{100 + i}).wait(60s);
    ASSERT_TRUE(sent.is_ok()) << describe(sent);
    EXPECT_EQ(peer_line(*s.peer), "RECV " + std::to_string(i) + " ok " + hex64(XXH3_64bits(bytes.data(), bytes.size())));
    const Status got = back.wait(60s);
    ASSERT_TRUE(got.is_ok()) << describe(got);
    EXPECT_EQ(back.bytes(), all[i]);
    EXPECT_TRUE(in.read(all[i]) == bytes) << "the echo differs from what was sent";
  }
  EXPECT_EQ(peer_line(*s.peer), "DONE");
  const EndpointStats st = s.ep->stats();
  if (mine_device) {
    // Every message both ways was staged on this side, except the empty ones, which
    // have no bytes to copy.
    EXPECT_GE(st.staged_transfers, 2 * (all.size() - 1));
  } else {
    EXPECT_EQ(st.staged_transfers, 0u);
  }
  EXPECT_EQ(close_handshake(*s.ep, true, 30s), "");
  s.ep.reset();
  expect_peer_success(*s.peer);
}

INSTANTIATE_TEST_SUITE_P(HostAndDevice, DeviceStaging,
                         ::testing::Values(Pairing{true, true}, Pairing{true, false}, Pairing{false, true}),
                         [](const auto& p) {
                           return std::string(p.param.mine_device ? "Device" : "Host") + "To" +
                                  (p.param.peer_device ? "Device" : "Host");
                         });

// A copy that fails fails its message and nothing else: on the receiver's side (the
// peer's device copy of message 1 fails, the peer's receive says device_failed, this
// send does not know) and on the sender's (this side's copy of message 3 fails: the
// send fails, and the peer's receive ends with device_failed through ABORT, after the
// chunks announced before the failure).
TEST(DeviceStagingFailure, AFailedCopyFailsItsMessageOnlyOnEitherSide) {
  Sides setup = make_sides(true);
  ASSERT_TRUE(setup.ctx);
  const std::vector<uint64_t> all = {kChunk * 6, kChunk * 6, kChunk * 6, kChunk * 6 + 7, kChunk * 6};
  PeerSession s = start_listening_peer(*setup.ctx,
                                       {"--scenario=device-echo", "--sizes=" + join(all), "--memory=device",
                                        "--fail-recv=1", "--close=follow"},
                                       {"REMORA_CHUNK_SIZE=" + std::to_string(kChunk), "REMORA_STAGING_BUFFERS=2"});
  ASSERT_TRUE(s.ep);
  TestDeviceDomain& dev = *setup.dev;
  Side out(&dev, all.back() + 7), in(&dev, all.back() + 7);
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    const auto bytes = pattern(all[i], 50 + i);
    out.write(bytes);
    if (i == 3) dev.fail_copies(out.data() + 4 * kChunk, 1);  // this side cannot stage its fifth chunk
    const Status sent = s.ep->send(std::span<const std::byte>(out.data(), all[i]), Tag{100 + i}).wait(60s);
    dev.clear_failures();
    if (i == 3) {
      EXPECT_EQ(sent.code(), StatusCode::kDeviceFailed) << describe(sent);
      EXPECT_EQ(peer_line(*s.peer), "RECV 3 device_failed");
      continue;  // no echo
    }
    ASSERT_TRUE(sent.is_ok()) << describe(sent);
    if (i == 1) {
      EXPECT_EQ(peer_line(*s.peer), "RECV 1 device_failed");  // the peer's copy into its device failed
      continue;
    }
    Request back = s.ep->recv(std::span(in.data(), all[i]), Tag{200 + i});
    const std::string line = peer_line(*s.peer);
    EXPECT_EQ(line, "RECV " + std::to_string(i) + " ok " + hex64(XXH3_64bits(bytes.data(), bytes.size())));
    const Status got = back.wait(60s);
    ASSERT_TRUE(got.is_ok()) << describe(got);
    EXPECT_TRUE(in.read(all[i]) == bytes);
  }
  EXPECT_EQ(peer_line(*s.peer), "DONE");
  EXPECT_GE(dev.failed_copies(), 1u);
  EXPECT_EQ(close_handshake(*s.ep, true, 30s), "");
  s.ep.reset();
  expect_peer_success(*s.peer);
}

// Puts and gets of device memory are not staged yet: refused with a clear error, the
// device memory untouched and the endpoint still usable.
TEST(DeviceStagingRma, PutsAndGetsOfDeviceMemoryAreRefusedClearly) {
  Sides mine = make_sides(true);
  ASSERT_TRUE(mine.ctx);
  Pair p = make_pair_in_process(make_context(2), std::move(mine.ctx));
  ASSERT_TRUE(p.ea && p.eb);
  std::vector<std::byte> target(4096, std::byte{0x11});
  auto region = p.a->register_memory(target.data(), target.size(), Access::kRemoteRead | Access::kRemoteWrite);
  ASSERT_TRUE(region.is_ok());
  std::byte* dev_mem = mine.dev->allocate(4096).value();
  const std::vector<std::byte> pattern_bytes(4096, std::byte{0x77});
  ASSERT_TRUE(mine.dev->write(dev_mem, pattern_bytes.data(), pattern_bytes.size()).is_ok());
  for (uint64_t n : {uint64_t{8}, uint64_t{4096}}) {
    const Status put = p.eb->put(std::span<const std::byte>(dev_mem, n), region->remote_key(), 0).wait(30s);
    EXPECT_EQ(put.code(), StatusCode::kUnsupported) << describe(put);
    EXPECT_NE(put.message().find("not staged yet"), std::string::npos) << put.message();
    const Status get = p.eb->get(std::span<std::byte>(dev_mem, n), region->remote_key(), 0).wait(30s);
    EXPECT_EQ(get.code(), StatusCode::kUnsupported) << describe(get);
  }
  EXPECT_TRUE(std::all_of(target.begin(), target.end(), [](std::byte b) { return b == std::byte{0x11}; }));
  std::vector<std::byte> back(4096);
  ASSERT_TRUE(mine.dev->read(back.data(), dev_mem, back.size()).is_ok());
  EXPECT_TRUE(back == pattern_bytes);
  // Host puts still work on the same endpoint.
  std::vector<std::byte> host(64, std::byte{0x22});
  EXPECT_TRUE(p.eb->put(host, region->remote_key(), 0).wait(30s).is_ok());
  EXPECT_EQ(target[0], std::byte{0x22});
}

}  // namespace
}  // namespace remora::itest
