// Device memory over the staging path, between two processes on loopback: this process
// and remora_test_peer (scenario device-echo) each add a TestDeviceDomain to their
// context — memory the process cannot touch except through the domain's asynchronous
// copies — and exchange messages of every size class around the eager limit and the
// chunk size, both ways, for each pairing of host and device memory on the two sides.
// Every message comes back and is compared byte for byte, and the peer's XXH3 of what
// it received is checked too. Failed device copies on either side fail exactly the
// message they belong to (device_failed, on both sides when the sender's copy fails:
// the ABORT frame) and the messages after it still arrive intact. Puts and gets whose
// local memory is on the device are staged the same way (DeviceStagingRma).
#include <gtest/gtest.h>
#include <xxhash.h>

#include <chrono>
#include <algorithm>
#include <array>
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
constexpr uint64_t kEager = 16 * 1024;   // the eager limit these tests set (and the inline get bound)

std::vector<uint64_t> sizes() {
  return {0,         1,         kEager - 1, kEager,      kEager + 1, kChunk - 1, kChunk,
          kChunk + 1, 5 * kChunk + 3, scaled<uint64_t>(uint64_t{24} << 20, uint64_t{4} << 20) + 5};
}

std::string join(const std::vector<uint64_t>& v) {
  std::string out;
  for (uint64_t x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

/// `len` bytes of the test data stream `seed` (support/test_data.h).
std::vector<std::byte> pattern(uint64_t len, uint64_t seed) {
  std::vector<std::byte> v(len);
  fill_stream(seed, 0, v);
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
  ContextOptions options{.streams_per_endpoint = 2, .chunk_bytes = kChunk, .eager_limit = kEager, .staging_buffers = 2};
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

/// Every pairing of this side's and the peer's memory that has a device in it.
const auto kPairings = ::testing::Values(Pairing{true, true}, Pairing{true, false}, Pairing{false, true});
std::string pairing_name(const ::testing::TestParamInfo<Pairing>& p) {
  return std::string(p.param.mine_device ? "Device" : "Host") + "To" + (p.param.peer_device ? "Device" : "Host");
}

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
                         kPairings, pairing_name);

// Puts and gets between two processes: the peer (device-rma) registers a region of its
// memory (device or host) and sends its key; this side puts from and gets into its own
// memory (device or host) at every size class and odd offsets, each get compared byte
// for byte with a model of the region, and at the end the peer's XXH3 of its whole
// region must equal the model's.
class DeviceStagingRmaPeer : public ::testing::TestWithParam<Pairing> {};

TEST_P(DeviceStagingRmaPeer, PutsAndGetsLandWhereTheyShould) {
  const auto [mine_device, peer_device] = GetParam();
  Sides setup = make_sides(mine_device);
  ASSERT_TRUE(setup.ctx);
  const auto all = sizes();
  const uint64_t region_size = all.back() + 64;
  const uint64_t seed = 31;
  PeerSession s = start_listening_peer(
      *setup.ctx,
      {"--scenario=device-rma", "--size=" + std::to_string(region_size), "--seed=" + std::to_string(seed),
       std::string("--memory=") + (peer_device ? "device" : "host"), "--close=follow"},
      {"REMORA_CHUNK_SIZE=" + std::to_string(kChunk), "REMORA_STAGING_BUFFERS=2"});
  ASSERT_TRUE(s.ep);
  std::array<std::byte, RemoteKey::kSerializedSize> key_bytes{};
  ASSERT_TRUE(s.ep->recv(key_bytes, Tag{1}).wait(60s).is_ok());
  auto key = RemoteKey::deserialize(key_bytes);
  ASSERT_TRUE(key.is_ok()) << describe(key.status());
  EXPECT_EQ(key->kind, peer_device ? testing::kTestDeviceKind : MemoryKind::kHost);
  std::vector<std::byte> model(region_size);
  fill_stream(seed, 0, model);
  TestDeviceDomain* dev = mine_device ? setup.dev.get() : nullptr;
  Side mine(dev, all.back());
  for (size_t i = 0; i < all.size(); ++i) {
    const uint64_t n = all[i];
    SCOPED_TRACE("size " + std::to_string(n));
    const uint64_t put_at = (i * 7) % 61;
    const auto bytes = pattern(n, i + 1);
    mine.write(bytes);
    const Status put = s.ep->put(std::span<const std::byte>(mine.data(), n), *key, put_at).wait(60s);
    ASSERT_TRUE(put.is_ok()) << describe(put);
    std::copy(bytes.begin(), bytes.end(), model.begin() + static_cast<ptrdiff_t>(put_at));
    const uint64_t get_at = (i * 13) % 61;
    const Status get = s.ep->get(std::span<std::byte>(mine.data(), n), *key, get_at).wait(60s);
    ASSERT_TRUE(get.is_ok()) << describe(get);
    const auto back = mine.read(n);
    ASSERT_TRUE(std::equal(back.begin(), back.end(), model.begin() + static_cast<ptrdiff_t>(get_at)));
  }
  const std::byte done{1};
  ASSERT_TRUE(s.ep->send(std::span(&done, 1), Tag{2}).wait(60s).is_ok());
  EXPECT_EQ(peer_line(*s.peer), "REGION " + hex64(XXH3_64bits(model.data(), model.size())));
  EXPECT_EQ(peer_line(*s.peer), "DONE");
  EXPECT_EQ(close_handshake(*s.ep, true, 30s), "");
  s.ep.reset();
  expect_peer_success(*s.peer);
}

INSTANTIATE_TEST_SUITE_P(HostAndDevice, DeviceStagingRmaPeer,
                         kPairings, pairing_name);

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

// Puts and gets whose local memory is on the device: staged like messages (inline ones
// through a host copy of their bytes), at every size class around the eager limit and
// the chunk, into and out of a host region of another context, compared byte for byte
// both ways; a notified put's notification comes after its data.
TEST(DeviceStagingRma, PutsAndGetsOfDeviceMemoryMoveEveryByte) {
  Sides mine = make_sides(true);
  ASSERT_TRUE(mine.ctx);
  Pair p = make_pair_in_process(make_context(2), std::move(mine.ctx));
  ASSERT_TRUE(p.ea && p.eb);
  const auto all = sizes();
  const uint64_t max = *std::max_element(all.begin(), all.end());
  std::vector<std::byte> target(max + 64, std::byte{0x11});
  auto region = p.a->register_memory(target.data(), target.size(), Access::kRemoteRead | Access::kRemoteWrite);
  ASSERT_TRUE(region.is_ok()) << describe(region.status());
  Side dev(mine.dev.get(), max + 64);
  uint64_t round = 0;
  for (uint64_t n : all) {
    SCOPED_TRACE("size " + std::to_string(n));
    const uint64_t off = ++round % 7;  // odd offsets on both sides
    const std::vector<std::byte> bytes = pattern(n, round);
    std::vector<std::byte> staged(off + n);
    std::copy(bytes.begin(), bytes.end(), staged.begin() + static_cast<ptrdiff_t>(off));
    dev.write(staged);
    const Status put =
        p.eb->put(std::span<const std::byte>(dev.data() + off, n), region->remote_key(), off, {.notify = round})
            .wait(60s);
    ASSERT_TRUE(put.is_ok()) << describe(put);
    auto note = p.ea->wait_notification(30s);
    ASSERT_TRUE(note.is_ok()) << describe(note.status());
    EXPECT_EQ(note->value, round);
    ASSERT_TRUE(std::equal(bytes.begin(), bytes.end(), target.begin() + static_cast<ptrdiff_t>(off)));
    // The other way: the region's bytes, changed, back into the device at another offset.
    for (uint64_t i = 0; i < n; ++i) target[off + i] ^= std::byte{0x5a};
    const Status get = p.eb->get(std::span<std::byte>(dev.data() + off + 1, n), region->remote_key(), off).wait(60s);
    ASSERT_TRUE(get.is_ok()) << describe(get);
    const std::vector<std::byte> back = dev.read(off + 1 + n);
    ASSERT_TRUE(std::equal(back.begin() + static_cast<ptrdiff_t>(off + 1), back.end(),
                           target.begin() + static_cast<ptrdiff_t>(off)));
  }
  const EndpointStats st = p.eb->stats();
  EXPECT_EQ(st.staged_transfers, 2 * (all.size() - 1));  // all but the 0-byte put and get
  EXPECT_EQ(st.rma_bytes_put, st.rma_bytes_got);
}

// A failed device copy fails that put or get only, with device_failed, on every path
// (inline and chunked; the copy out of the device for a put, into it for a get), and
// the same endpoint then moves device memory intact.
TEST(DeviceStagingRma, AFailedCopyFailsThatOperationOnly) {
  Sides mine = make_sides(true);
  ASSERT_TRUE(mine.ctx);
  Pair p = make_pair_in_process(make_context(2), std::move(mine.ctx));
  ASSERT_TRUE(p.ea && p.eb);
  const uint64_t big = 5 * kChunk + 3;
  std::vector<std::byte> target(big, std::byte{0x11});
  auto region = p.a->register_memory(target.data(), target.size(), Access::kRemoteRead | Access::kRemoteWrite);
  ASSERT_TRUE(region.is_ok()) << describe(region.status());
  Side dev(mine.dev.get(), 2 * big);
  std::byte* bad = dev.data();
  std::byte* good = dev.data() + big;
  const std::vector<std::byte> bytes = pattern(big, 42);
  dev.write(std::vector<std::byte>(2 * big, std::byte{0}));
  ASSERT_TRUE(mine.dev->write(good, bytes.data(), bytes.size()).is_ok());
  for (uint64_t n : {uint64_t{100}, kEager, kEager + 1, big}) {
    SCOPED_TRACE("size " + std::to_string(n));
    // The last chunk of a large one fails: some of it was announced before.
    const uint64_t at = n > kChunk ? n - 1 : 0;
    mine.dev->fail_copies(bad + at, 1);
    const Status put = p.eb->put(std::span<const std::byte>(bad, n), region->remote_key(), 0).wait(60s);
    EXPECT_EQ(put.code(), StatusCode::kDeviceFailed) << describe(put);
    const Status get = p.eb->get(std::span<std::byte>(bad, n), region->remote_key(), 0).wait(60s);
    EXPECT_EQ(get.code(), StatusCode::kDeviceFailed) << describe(get);
    mine.dev->clear_failures();
    const Status ok = p.eb->put(std::span<const std::byte>(good, n), region->remote_key(), 0).wait(60s);
    ASSERT_TRUE(ok.is_ok()) << describe(ok);
    ASSERT_TRUE(std::equal(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n), target.begin()));
  }
  EXPECT_GE(mine.dev->failed_copies(), 8u);
  // Host puts and messages still work on the same endpoint.
  std::vector<std::byte> host(64, std::byte{0x22});
  EXPECT_TRUE(p.eb->put(host, region->remote_key(), 0).wait(30s).is_ok());
  EXPECT_EQ(target[0], std::byte{0x22});
}

// A region of device memory that peers put into and get from: the target stages what
// it serves. Every size class; the initiator's memory alternates between host and its
// own device; notifications come after the data; remote atomics are refused at
// registration.
TEST(DeviceStagingRma, PeersPutIntoAndGetFromARegionOfDeviceMemory) {
  Sides target = make_sides(true);
  Sides init = make_sides(true);
  ASSERT_TRUE(target.ctx && init.ctx);
  TestDeviceDomain& tdev = *target.dev;
  Pair p = make_pair_in_process(std::move(target.ctx), std::move(init.ctx));
  ASSERT_TRUE(p.ea && p.eb);
  const auto all = sizes();
  const uint64_t max = *std::max_element(all.begin(), all.end());
  Side region_mem(&tdev, max + 64);
  EXPECT_EQ(p.a->register_memory(region_mem.data(), max + 64, Access::kRemoteAtomic).status().code(),
            StatusCode::kUnsupported);
  auto region = p.a->register_memory(region_mem.data(), max + 64, Access::kRemoteRead | Access::kRemoteWrite);
  ASSERT_TRUE(region.is_ok()) << describe(region.status());
  EXPECT_EQ(region->kind(), testing::kTestDeviceKind);
  Side host_side(nullptr, max + 64);
  Side dev_side(init.dev.get(), max + 64);
  uint64_t round = 0;
  for (uint64_t n : all) {
    ++round;
    Side& mine = round % 2 == 0 ? dev_side : host_side;
    SCOPED_TRACE("size " + std::to_string(n) + (round % 2 == 0 ? " from device" : " from host"));
    const uint64_t off = round % 5;
    const std::vector<std::byte> bytes = pattern(n, round);
    mine.write(bytes);
    const Status put =
        p.eb->put(std::span<const std::byte>(mine.data(), n), region->remote_key(), off, {.notify = round}).wait(60s);
    ASSERT_TRUE(put.is_ok()) << describe(put);
    auto note = p.ea->wait_notification(30s);
    ASSERT_TRUE(note.is_ok()) << describe(note.status());
    EXPECT_EQ(note->value, round);
    EXPECT_EQ(note->length, n);
    std::vector<std::byte> landed = region_mem.read(off + n);
    ASSERT_TRUE(std::equal(bytes.begin(), bytes.end(), landed.begin() + static_cast<ptrdiff_t>(off)));
    // Changed at the target, then read back by the initiator.
    std::vector<std::byte> changed = pattern(off + n, round + 1000);
    region_mem.write(changed);
    const Status get = p.eb->get(std::span<std::byte>(mine.data(), n), region->remote_key(), off).wait(60s);
    ASSERT_TRUE(get.is_ok()) << describe(get);
    const std::vector<std::byte> back = mine.read(n);
    ASSERT_TRUE(std::equal(back.begin(), back.end(), changed.begin() + static_cast<ptrdiff_t>(off)));
  }
  EXPECT_EQ(p.ea->stats().served_puts, all.size());
  EXPECT_EQ(p.ea->stats().served_gets, all.size());
}

// A failed copy at the target (into its device for a put, out of it for a get) fails
// that operation with device_failed at the initiator, inline and chunked, the region's
// other bytes untouched and the endpoint still serving.
TEST(DeviceStagingRma, AFailedCopyAtTheTargetFailsThatOperationOnly) {
  Sides target = make_sides(true);
  ASSERT_TRUE(target.ctx);
  TestDeviceDomain& tdev = *target.dev;
  Pair p = make_pair_in_process(std::move(target.ctx), make_context(2));
  ASSERT_TRUE(p.ea && p.eb);
  const uint64_t big = 5 * kChunk + 3;
  Side region_mem(&tdev, 2 * big);
  region_mem.write(std::vector<std::byte>(2 * big, std::byte{0x33}));
  auto region = p.a->register_memory(region_mem.data(), 2 * big, Access::kRemoteRead | Access::kRemoteWrite);
  ASSERT_TRUE(region.is_ok()) << describe(region.status());
  const std::vector<std::byte> bytes = pattern(big, 9);
  std::vector<std::byte> in(big);
  for (uint64_t n : {uint64_t{100}, kEager, kEager + 1, big}) {
    SCOPED_TRACE("size " + std::to_string(n));
    tdev.fail_copies(region_mem.data() + n - 1, 1);  // the last byte: the last chunk's copy
    const Status put = p.eb->put(std::span(bytes.data(), n), region->remote_key(), 0).wait(60s);
    EXPECT_EQ(put.code(), StatusCode::kDeviceFailed) << describe(put);
    const Status get = p.eb->get(std::span(in.data(), n), region->remote_key(), 0).wait(60s);
    EXPECT_EQ(get.code(), StatusCode::kDeviceFailed) << describe(get);
    tdev.clear_failures();
    // The second half of the region was never written to.
    const std::vector<std::byte> now = region_mem.read(2 * big);
    EXPECT_TRUE(std::all_of(now.begin() + static_cast<ptrdiff_t>(big), now.end(),
                            [](std::byte b) { return b == std::byte{0x33}; }));
    const Status ok = p.eb->put(std::span(bytes.data(), n), region->remote_key(), big).wait(60s);
    ASSERT_TRUE(ok.is_ok()) << describe(ok);
    const std::vector<std::byte> after = region_mem.read(2 * big);
    ASSERT_TRUE(std::equal(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n),
                           after.begin() + static_cast<ptrdiff_t>(big)));
    region_mem.write(std::vector<std::byte>(2 * big, std::byte{0x33}));
  }
}

}  // namespace
}  // namespace remora::itest
