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
#include <fcntl.h>
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

/// The first `streams` receiving streams of `link` read through devmem receivers of
/// `d`'s binding (the others stay plain); returns those receivers.
std::vector<std::shared_ptr<DevmemReceiver>> steer_to_devmem(Link& link, DeviceNic& d,
                                                             uint16_t streams = Link::kStreams) {
  std::vector<std::shared_ptr<DevmemReceiver>> receivers;
  for (uint16_t i = 0; i < streams; ++i) {
    auto receiver = std::make_shared<DevmemReceiver>(link.rx.fd(i), d.binding, d.nic.recvmsg_fn(), d.nic.dontneed_fn());
    receivers.push_back(receiver);
    link.rx.set_stream_in(i, std::make_unique<DevmemStreamIn>(std::move(receiver)));
  }
  return receivers;
}

/// What the DevmemSink tests share: the NIC stand-in, an engine, and a link whose
/// first `steered` receiving streams read through devmem receivers of the stand-in's
/// binding.
struct SinkRig {
  DeviceNic d{256};
  std::shared_ptr<engine::ProgressEngine> engine = engine::ProgressEngine::create({}).value();
  Link link;
  Host host{&link};
  std::shared_ptr<StagingHost*> anchor = std::make_shared<StagingHost*>(&host);
  std::shared_ptr<DevmemRxContext> ctx = std::make_shared<DevmemRxContext>();
  std::vector<std::shared_ptr<DevmemReceiver>> receivers;
  explicit SinkRig(uint16_t steered = Link::kStreams) {
    link.each_round = [this] { engine->try_progress(); };
    ctx->engine = engine;
    ctx->host = anchor;
    receivers = steer_to_devmem(link, d, steered);
  }
};

/// A put of `len` bytes of test pattern `seed` from host memory over `rig`'s link into
/// device memory through a DevmemSink, with failover on both sides; ready to be sent.
struct DevmemPut {
  std::vector<std::byte> data;
  std::byte* dst;
  HostSource source;
  TxTransfer out;
  RxTransfer in;
  DevmemSink sink;
  DevmemPut(SinkRig& rig, uint64_t len, uint64_t seed)
      : data(pattern(len, seed)),
        dst(rig.d.dev->allocate(len).value()),
        source(data.data()),
        out(test::outgoing(wire::ChunkKind::kPut, 1, 1, len, &source)),
        in(test::incoming(1, len, nullptr)),
        sink(rig.ctx, rig.d.dev.get(), dst, &in) {
    rig.link.tx.enable_failover();
    rig.link.rx.enable_failover();
    in.kind = wire::ChunkKind::kPut;  // a chunk sent again names its kind
    in.sink = &sink;
    rig.link.tx.ready(&out);
  }
  /// Runs `rig`'s link until the put is received and sent; then every byte is checked.
  void finish(SinkRig& rig) {
    Link& link = rig.link;
    link.run(&in, [&] { return !link.rx_owner.received_ids.empty() && !link.tx_owner.sent_ids.empty(); });
    ASSERT_EQ(link.rx_owner.received_ids.size(), 1u);
    EXPECT_TRUE(link.rx_owner.received_ids[0].second.is_ok()) << link.rx_owner.received_ids[0].second.to_string();
    ASSERT_EQ(link.tx_owner.sent_ids.size(), 1u);
    EXPECT_TRUE(link.tx_owner.sent_failures[0].is_ok());
    EXPECT_TRUE(link.tx_owner.failures.empty() && link.rx_owner.failures.empty());
    std::vector<std::byte> got(data.size());
    ASSERT_TRUE(rig.d.dev->read(got.data(), dst, got.size()).is_ok());
    EXPECT_TRUE(got == data);
    EXPECT_EQ(sink.in_flight(), 0u);
    EXPECT_TRUE(rig.d.nic.outstanding.empty()) << rig.d.nic.outstanding.size() << " tokens never went back";
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

// Failover (docs/rails.md): stream 1 breaks with a chunk read off it in part, whose
// scatter out of the dmabuf is still in flight (the test device holds its copies). The
// chunk is read again from its start on stream 0 and lands once, intact. The broken
// stream's socket stays open, shut down, until that scatter ended and its tokens went
// back through it: were it closed at once, the kernel would free those pages for the
// NIC to write while the scatter still reads them.
TEST(DevmemSink, AChunkReadInPartOffABrokenStreamIsReadAgainAndItsTokensGoBackFirst) {
  SinkRig rig;
  Link& link = rig.link;
  constexpr uint64_t C = Link::kChunk, len = 10 * C + 123;
  // Small socket buffers: a chunk goes in many pieces, so one can be read in part.
  for (uint16_t i = 0; i < Link::kStreams; ++i) {
    const int small = 4096;
    ASSERT_EQ(::setsockopt(link.tx.fd(i), SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  }
  DevmemPut put(rig, len, 21);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (link.tx.bytes_sent(1) == 0 && std::chrono::steady_clock::now() < deadline) {
    link.tx.schedule();
    link.tx.write_all();
  }
  ASSERT_GT(link.tx.bytes_sent(1), 0u);
  for (; link.handed < link.tx_owner.announced.size(); ++link.handed) {
    const wire::ChunkFrame& f = link.tx_owner.announced[link.handed];
    ASSERT_EQ(link.rx.expect(&put.in, f.stream, f.offset, f.length), "");
  }
  // The stand-in lays the bytes into the dmabuf; the scatter out of it then waits.
  rig.d.nic.after_dma = [&] { rig.d.dev->hold_copies(true); };
  link.rx.read(1);
  rig.d.nic.after_dma = nullptr;
  ASSERT_GT(put.in.received, 0u);
  ASSERT_LT(put.in.received, C) << "a chunk was read in part";
  const int broken = link.rx.fd(1);
  DevmemReceiver& receiver = *rig.receivers[1];
  ASSERT_GT(receiver.outstanding_tokens(), 0u);

  Result<uint64_t> tx_read = link.tx.retire(1);
  Result<uint64_t> rx_read = link.rx.retire(1);
  ASSERT_TRUE(tx_read.is_ok() && rx_read.is_ok()) << rx_read.status().to_string();
  EXPECT_NE(::fcntl(broken, F_GETFD), -1) << "the socket closed with its tokens still out";
  EXPECT_EQ(link.tx.peer_retired(1, *rx_read), "");
  EXPECT_EQ(link.rx.peer_retired(1, *tx_read), "");
  rig.d.dev->hold_copies(false);
  put.finish(rig);
  EXPECT_GE(link.tx.chunks_resent(), 1u);
  EXPECT_EQ(put.in.placed, len) << "every byte placed once";
  EXPECT_EQ(receiver.outstanding_tokens(), 0u);
  EXPECT_EQ(::fcntl(broken, F_GETFD), -1) << "the retired stream's socket was never closed";
}

// A stream connected again after a break is not steered (rxq steered the first
// connect's flows): chunks on it come into host memory and go on to the device by a
// copy, beside chunks placed from the dmabuf on the steered stream.
TEST(DevmemSink, ChunksOnAStreamNotSteeredAreCopiedToTheDeviceFromHostMemory) {
  SinkRig rig(/*steered=*/1);
  constexpr uint64_t len = 9 * Link::kChunk + 77;
  DevmemPut put(rig, len, 22);
  const uint64_t copies_before = rig.d.dev->copies();
  put.finish(rig);
  EXPECT_GT(rig.link.tx.bytes_sent(0), 0u);
  EXPECT_GT(rig.link.tx.bytes_sent(1), 0u) << "no chunk went on the stream not steered";
  EXPECT_EQ(put.in.placed, len);
  EXPECT_GT(rig.d.dev->copies(), copies_before);
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
