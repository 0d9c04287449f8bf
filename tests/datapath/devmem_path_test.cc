// Tests of datapath/devmem_path.cc, the devmem TCP receive path.
//
// Against the real kernel (this machine's 6.18, no devmem NIC): recvmsg(MSG_SOCK_DEVMEM)
// on an ordinary loopback TCP connection returns the bytes with no devmem control
// message, which the receiver refuses as a misrouted flow; without an iov (linear data
// forbidden) the kernel answers EFAULT, refused the same way; SO_DEVMEM_DONTNEED there
// frees nothing.
//
// Through the same code with the recvmsg and the setsockopt swapped for a stand-in of
// the kernel and NIC (the only parts swapped; `NicStandIn`, in
// tests/zerocopy/devmem_nic_standin.h): real TCP bytes read off real sockets are laid into a "dmabuf" in
// TestDeviceDomain memory (or host memory, as a udmabuf is) in page-sized fragments with tokens, and handed over as
// control messages in the kernel's layouts. Checked: the bytes land intact at the destination through the domain's
// scatter; tokens go back only after the scatter ended, all of them, coalesced; linear fragments mixed in; foreign
// bindings, truncation and fragments outside the dmabuf fail with their reason and their tokens go back at once; a
// failed scatter fails the chunk and still returns the tokens; DevmemSink under the real ChunkScheduler over socket
// pairs.
#include "datapath/devmem_path.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "datapath/chunk_link.h"
#include "mem/region_access.h"
#include "net/address.h"
#include "net/socket.h"
#include "remora/testing/test_device.h"
#include "zerocopy/devmem_nic_standin.h"
#include "zerocopy/uapi.h"
#include "zerocopy/zc_test_util.h"

namespace remora::detail {
namespace {

using test::Link;
using test::pattern;
using testing::TestDeviceDomain;
using testing::TestDeviceOptions;
namespace uapi = zerocopy::uapi;

constexpr uint32_t kBinding = 7;
constexpr size_t kPage = 4096;

using zerocopy::test::NicStandIn;
using zerocopy::test::tcp_pair;  // a loopback TCP connection, both ends non-blocking

void wait_readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1);
}

void send_all(int fd, const std::vector<std::byte>& data) {
  size_t at = 0;
  while (at < data.size()) {
    const ssize_t n = ::send(fd, data.data() + at, data.size() - at, MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    at += static_cast<size_t>(n);
  }
}

// --- the real kernel ----------------------------------------------------------------

TEST(DevmemReceive, AnOrdinaryTcpStreamIsRefusedAsAMisroutedFlow) {
  auto [client, server] = tcp_pair();
  const auto data = pattern(1000, 1);
  send_all(client.get(), data);
  wait_readable(server.get());

  auto host_pool = std::vector<std::byte>(16 * kPage);
  DevmemRxBinding binding{.id = kBinding, .domain = &host_domain(), .base = host_pool.data(), .size = host_pool.size()};
  DevmemReceiver receiver(server.get(), binding);  // the real recvmsg and SO_DEVMEM_DONTNEED
  std::vector<std::byte> dst(1000);
  DevmemRead read;
  auto got = receiver.receive(nullptr, dst.data(), dst.size(), &read);
  // 6.18 copies the readable bytes into the iov and adds no devmem control message.
  ASSERT_FALSE(got.is_ok());
  EXPECT_EQ(got.status().code(), StatusCode::kProtocol);
  EXPECT_NE(got.status().message().find("misrouted flow"), std::string::npos) << got.status().to_string();
  EXPECT_GT(read.bytes, 0u);
  EXPECT_EQ(receiver.outstanding_tokens(), 0u);
}

TEST(DevmemReceive, WithoutAnIovTheKernelAnswersEfaultAndThatIsAMisroutedFlow) {
  auto [client, server] = tcp_pair();
  send_all(client.get(), pattern(100, 2));
  wait_readable(server.get());
  auto host_pool = std::vector<std::byte>(16 * kPage);
  DevmemRxBinding binding{.id = kBinding,
                          .domain = &host_domain(),
                          .base = host_pool.data(),
                          .size = host_pool.size(),
                          .allow_linear = false};
  DevmemReceiver receiver(server.get(), binding);
  std::vector<std::byte> dst(100);
  DevmemRead read;
  auto got = receiver.receive(nullptr, dst.data(), dst.size(), &read);
  ASSERT_FALSE(got.is_ok());
  EXPECT_EQ(got.status().code(), StatusCode::kProtocol);
  EXPECT_NE(got.status().message().find("EFAULT"), std::string::npos) << got.status().to_string();
  EXPECT_NE(got.status().message().find("misrouted"), std::string::npos);
  // Nothing was taken off the stream.
  char b[200];
  EXPECT_EQ(::recv(server.get(), b, sizeof b, MSG_DONTWAIT), 100);
}

TEST(DevmemReceive, TheKernelFreesNoTokenOnAnOrdinaryTcpSocket) {
  auto [client, server] = tcp_pair();
  const uapi::DmabufToken range{.token_start = 1, .token_count = 4};
  auto freed = zerocopy::devmem_dontneed(server.get(), std::span(&range, 1));
  ASSERT_TRUE(freed.is_ok()) << freed.status().to_string();
  EXPECT_EQ(*freed, 0u);
}

// --- a stand-in for the kernel and the NIC -------------------------------------------

struct DeviceNic {
  std::unique_ptr<TestDeviceDomain> dev;
  NicStandIn nic;
  DevmemRxBinding binding;
  explicit DeviceNic(size_t pages = 64) {
    TestDeviceOptions o;
    o.capacity = size_t{64} << 20;
    dev = TestDeviceDomain::create(o).value();
    nic.dev = dev.get();
    nic.dmabuf = dev->allocate(pages * kPage).value();
    nic.init(pages);
    binding = {.id = kBinding, .domain = dev.get(), .base = nic.dmabuf, .size = pages * kPage};
  }
};

/// Receives everything `data` holds from `server` into device memory `dst`, releasing
/// each read once its copies ended.
void receive_all(DevmemReceiver& r, int fd, TestDeviceDomain& dev, std::byte* dst, size_t len) {
  size_t at = 0;
  while (at < len) {
    DevmemRead read;
    auto got = r.receive(&dev, dst + at, len - at, &read);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    if (got->would_block()) {
      wait_readable(fd);
      continue;
    }
    ASSERT_TRUE(got->moved());
    for (auto& c : read.copies) ASSERT_TRUE(c->wait(std::chrono::seconds(30)).is_ok());
    ASSERT_TRUE(r.release(read).is_ok());
    at += got->bytes;
  }
}

TEST(DevmemReceive, FragmentsAreScatteredIntoDeviceMemoryAndTokensAllGoBack) {
  DeviceNic d;
  auto [client, server] = tcp_pair();
  constexpr size_t len = 300 * 1000 + 17;
  const auto data = pattern(len, 3);
  std::thread sender([&, fd = client.get()] { send_all(fd, data); });
  DevmemReceiver r(server.get(), d.binding, d.nic.recvmsg_fn(), d.nic.dontneed_fn());
  std::byte* dst = d.dev->allocate(len).value();
  receive_all(r, server.get(), *d.dev, dst, len);
  sender.join();
  std::vector<std::byte> got(len);
  ASSERT_TRUE(d.dev->read(got.data(), dst, len).is_ok());
  EXPECT_TRUE(got == data);
  EXPECT_TRUE(d.nic.outstanding.empty());
  EXPECT_EQ(d.nic.free_pages.size(), d.nic.pages);
  EXPECT_EQ(r.outstanding_tokens(), 0u);
  EXPECT_EQ(r.token_stats().returned, static_cast<uint64_t>(d.nic.next_token - 1));
  for (const auto& call : d.nic.dontneed_calls) EXPECT_LE(call.size(), uapi::kMaxDontneedTokens);
}

TEST(DevmemReceive, TokensGoBackOnlyAfterTheScatterEnded) {
  DeviceNic d;
  auto [client, server] = tcp_pair();
  const auto data = pattern(5 * kPage, 4);
  send_all(client.get(), data);
  wait_readable(server.get());
  DevmemReceiver r(server.get(), d.binding, d.nic.recvmsg_fn(), d.nic.dontneed_fn());
  std::byte* dst = d.dev->allocate(data.size()).value();
  bool scatter_done_at_dontneed = true;
  std::vector<std::unique_ptr<AsyncCopy>>* watched = nullptr;
  d.nic.on_dontneed = [&] {
    for (auto& c : *watched) scatter_done_at_dontneed = scatter_done_at_dontneed && c->test().is_ok();
  };
  // Copies are held from the moment the "NIC" has written the dmabuf: the scatter waits.
  d.nic.after_dma = [&] { d.dev->hold_copies(true); };
  DevmemRead read;
  auto got = r.receive(d.dev.get(), dst, data.size(), &read);
  ASSERT_TRUE(got.is_ok() && got->moved()) << got.status().to_string();
  watched = &read.copies;
  ASSERT_EQ(read.copies.size(), 1u);  // one scatter for all dmabuf fragments
  EXPECT_EQ(read.copies[0]->test().code(), StatusCode::kInProgress);
  EXPECT_FALSE(read.tokens.empty());
  EXPECT_TRUE(d.nic.dontneed_calls.empty());  // nothing returned while the scatter runs
  EXPECT_EQ(r.outstanding_tokens(), read.tokens.size());
  d.dev->hold_copies(false);
  ASSERT_TRUE(read.copies[0]->wait(std::chrono::seconds(30)).is_ok());
  ASSERT_TRUE(r.release(read).is_ok());
  EXPECT_TRUE(scatter_done_at_dontneed);
  ASSERT_EQ(d.nic.dontneed_calls.size(), 1u);
  // Consecutive tokens went back as one coalesced range.
  ASSERT_EQ(d.nic.dontneed_calls[0].size(), 1u);
  EXPECT_EQ(d.nic.dontneed_calls[0][0].token_count, static_cast<uint32_t>((got->bytes + kPage - 1) / kPage));
  EXPECT_EQ(r.outstanding_tokens(), 0u);
}

TEST(DevmemReceive, LinearFragmentsMixInAndLandInStreamOrder) {
  DeviceNic d;
  d.nic.linear_every = 3;
  d.nic.piece = 1000;  // not page-sized: fragments land at odd destination offsets
  auto [client, server] = tcp_pair();
  constexpr size_t len = 50 * 1000 + 3;
  const auto data = pattern(len, 5);
  std::thread sender([&, fd = client.get()] { send_all(fd, data); });
  DevmemReceiver r(server.get(), d.binding, d.nic.recvmsg_fn(), d.nic.dontneed_fn());
  std::byte* dst = d.dev->allocate(len).value();
  receive_all(r, server.get(), *d.dev, dst, len);
  sender.join();
  std::vector<std::byte> got(len);
  ASSERT_TRUE(d.dev->read(got.data(), dst, len).is_ok());
  EXPECT_TRUE(got == data);
  EXPECT_TRUE(d.nic.outstanding.empty());
}

TEST(DevmemReceive, IntoHostMemoryFromAHostDmabufAsWithAUdmabuf) {
  NicStandIn nic;
  std::vector<std::byte> pool(32 * kPage);
  nic.dmabuf = pool.data();
  nic.init(32);
  nic.linear_every = 4;
  DevmemRxBinding binding{.id = kBinding, .domain = &host_domain(), .base = pool.data(), .size = pool.size()};
  auto [client, server] = tcp_pair();
  const auto data = pattern(20 * kPage + 5, 6);
  send_all(client.get(), data);
  DevmemReceiver r(server.get(), binding, nic.recvmsg_fn(), nic.dontneed_fn());
  std::vector<std::byte> dst(data.size());
  size_t at = 0;
  while (at < dst.size()) {
    wait_readable(server.get());
    DevmemRead read;
    auto got = r.receive(nullptr, dst.data() + at, dst.size() - at, &read);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    if (!got->moved()) continue;
    for (auto& c : read.copies) ASSERT_TRUE(c->test().is_ok());
    ASSERT_TRUE(r.release(read).is_ok());
    at += got->bytes;
  }
  EXPECT_TRUE(dst == data);
  EXPECT_TRUE(nic.outstanding.empty());
}

TEST(DevmemReceive, RefusalsGiveTheirTokensBackAtOnce) {
  struct Case {
    const char* name;
    std::function<void(NicStandIn&)> set;
    StatusCode code;
    const char* says;
  };
  const Case cases[] = {
      {"foreign binding", [](NicStandIn& n) { n.binding = kBinding + 1; }, StatusCode::kProtocol, "foreign binding"},
      {"truncated", [](NicStandIn& n) { n.truncate = true; }, StatusCode::kTruncated, "MSG_CTRUNC"},
      {"outside", [](NicStandIn& n) { n.outside = true; }, StatusCode::kProtocol, "outside"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    DeviceNic d;
    c.set(d.nic);
    auto [client, server] = tcp_pair();
    send_all(client.get(), pattern(3 * kPage, 7));
    wait_readable(server.get());
    DevmemReceiver r(server.get(), d.binding, d.nic.recvmsg_fn(), d.nic.dontneed_fn());
    std::byte* dst = d.dev->allocate(3 * kPage).value();
    DevmemRead read;
    auto got = r.receive(d.dev.get(), dst, 3 * kPage, &read);
    ASSERT_FALSE(got.is_ok());
    EXPECT_EQ(got.status().code(), c.code);
    EXPECT_NE(got.status().message().find(c.says), std::string::npos) << got.status().to_string();
    EXPECT_TRUE(d.nic.outstanding.empty());  // every token of the refused read went back
    EXPECT_EQ(r.outstanding_tokens(), 0u);
  }
}

// --- DevmemSink under the chunk scheduler --------------------------------------------

struct Host final : StagingHost {
  Link* link;
  explicit Host(Link* l) : link(l) {}
  void staged_chunk_placed(RxTransfer& t, uint64_t length, const Status& status) override {
    link->rx.chunk_placed(&t, length, status);
  }
  void staging_progressed() override { link->rx.unstall(); }
};

/// Every receiving stream of `link` reads through a devmem receiver of `d`'s binding.
void steer_to_devmem(Link& link, DeviceNic& d) {
  for (uint16_t i = 0; i < Link::kStreams; ++i) {
    auto receiver = std::make_shared<DevmemReceiver>(link.rx.fd(i), d.binding, d.nic.recvmsg_fn(), d.nic.dontneed_fn());
    link.rx.set_stream_in(i, std::make_unique<DevmemStreamIn>(std::move(receiver)));
  }
}

/// What the DevmemSink tests share: the NIC stand-in, an engine, and a link whose
/// receiving streams read through devmem receivers of the stand-in's binding.
struct SinkRig {
  DeviceNic d{256};
  std::shared_ptr<engine::ProgressEngine> engine = engine::ProgressEngine::create({}).value();
  Link link;
  Host host{&link};
  std::shared_ptr<StagingHost*> anchor = std::make_shared<StagingHost*>(&host);
  std::shared_ptr<DevmemRxContext> ctx = std::make_shared<DevmemRxContext>();
  SinkRig() {
    link.each_round = [this] { engine->try_progress(); };
    ctx->engine = engine;
    ctx->host = anchor;
    steer_to_devmem(link, d);
  }
};

TEST(DevmemSink, ChunksOverSocketPairsLandInDeviceMemoryAndEveryTokenGoesBack) {
  SinkRig rig;
  DeviceNic& d = rig.d;
  Link& link = rig.link;
  const auto& ctx = rig.ctx;

  constexpr uint64_t len = 7 * Link::kChunk + 333;
  const auto data = pattern(len, 8);
  std::byte* dst = d.dev->allocate(len).value();
  RxTransfer in;
  DevmemSink sink(ctx, d.dev.get(), dst, &in);
  const Status delivered = link.deliver(data, in, sink);
  EXPECT_TRUE(delivered.is_ok()) << delivered.to_string();
  std::vector<std::byte> got(len);
  ASSERT_TRUE(d.dev->read(got.data(), dst, len).is_ok());
  EXPECT_TRUE(got == data);
  EXPECT_TRUE(d.nic.outstanding.empty());
  EXPECT_EQ(sink.in_flight(), 0u);
}

TEST(DevmemSink, AFailedScatterFailsTheTransferAndStillReturnsTheTokens) {
  SinkRig rig;
  DeviceNic& d = rig.d;
  Link& link = rig.link;
  const auto& ctx = rig.ctx;

  constexpr uint64_t len = 3 * Link::kChunk;
  const auto data = pattern(len, 9);
  std::byte* dst = d.dev->allocate(len).value();
  d.dev->fail_copies(dst + Link::kChunk + 100, 1);  // the second chunk's scatter fails
  RxTransfer in;
  DevmemSink sink(ctx, d.dev.get(), dst, &in);
  EXPECT_EQ(link.deliver(data, in, sink).code(), StatusCode::kDeviceFailed);  // the streams stay in step
  EXPECT_TRUE(d.nic.outstanding.empty());
}

/// A registered host region of `len` bytes, and a served put's access to all of it.
struct PutRegion {
  MemoryRegistry registry{PinMode::kTry};
  std::vector<std::byte> memory;
  Region region;
  std::shared_ptr<RegionAccess> access;
  explicit PutRegion(size_t len) : memory(len) {
    auto r = registry.register_memory(memory.data(), len, Access::kLocalWrite | Access::kRemoteWrite);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    region = std::move(r).value();
    auto key = region.remote_key(0, len, Access::kRemoteWrite).value();
    auto a = acquire_access(registry, key, 0, len, Access::kRemoteWrite);
    EXPECT_TRUE(a.is_ok()) << a.status().to_string();
    access = std::make_shared<RegionAccess>(std::move(a).value());
  }
};

TEST(DevmemSink, AServedPutIsBracketedAndARegionDeregisteredMidwayIsDrainedAsRevoked) {
  for (const bool deregister_first : {false, true}) {
    SCOPED_TRACE(deregister_first ? "deregistered before the chunks" : "registered throughout");
    SinkRig rig;
    DeviceNic& d = rig.d;
    Link& link = rig.link;
    const auto& ctx = rig.ctx;

    constexpr uint64_t len = 3 * Link::kChunk + 5;
    const auto data = pattern(len, 10);
    PutRegion put(len);
    if (deregister_first) put.region.deregister();
    HostSource source(data.data());
    TxTransfer out = test::outgoing(wire::ChunkKind::kPut, 1, 1, len, &source);
    RxTransfer in;
    in.kind = wire::ChunkKind::kPut;
    in.id = 1;
    in.length = len;
    // Host memory from a dmabuf of the test device: each placement is an asynchronous
    // copy, so the bracket stays open across it.
    DevmemSink sink(ctx, &host_domain(), put.memory.data(), &in, put.access);
    in.sink = &sink;
    link.tx.ready(&out);
    link.run(&in, [&] { return !link.rx_owner.received_ids.empty(); });
    ASSERT_EQ(link.rx_owner.received_ids.size(), 1u);
    EXPECT_TRUE(link.rx_owner.received_ids[0].second.is_ok()) << link.rx_owner.received_ids[0].second.to_string();
    EXPECT_EQ(sink.revoked(), deregister_first);
    if (deregister_first) {
      EXPECT_TRUE(std::all_of(put.memory.begin(), put.memory.end(), [](std::byte b) { return b == std::byte{0}; }));
    } else {
      EXPECT_TRUE(put.memory == data);
      put.region.deregister();  // returns: every bracket was closed
    }
    EXPECT_TRUE(d.nic.outstanding.empty());
    EXPECT_EQ(sink.in_flight(), 0u);
  }
}

}  // namespace
}  // namespace remora::detail
