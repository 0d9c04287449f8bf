// Tests of datapath/zcrx_path.cc, io_uring zero-copy receive on a data stream.
//
// The queue (zerocopy/zcrx_queue.h) runs for real with its thread; what stands in is the
// kernel and NIC behind it (tests/zerocopy/zcrx_nic_standin.h): real bytes read off real
// sockets into the queue's host area and reported as RECV_ZC completions. Checked: a
// ZcrxReceiver places what arrived into test-device memory (copies to the device) and
// host memory, every buffer going back only after its copy ended; a failed device copy
// fails that read and still gives the buffers back; the stream as host sinks read it
// (DevmemStreamIn) waits for arrivals on the queue rather than on the socket, and tells
// of them through on_arrival; DevmemSink under the real ChunkScheduler over socket pairs
// whose every receiving stream is read by zcrx.
#include "datapath/zcrx_path.h"

#include <sys/socket.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "datapath/chunk_link.h"
#include "remora/testing/test_device.h"
#include "zerocopy/zc_test_util.h"
#include "zerocopy/zcrx_nic_standin.h"

namespace remora::detail {
namespace {

using test::Link;
using test::pattern;
using testing::TestDeviceDomain;
using zerocopy::ZcrxQueue;
using zerocopy::test::send_all;
using zerocopy::test::tcp_pair;
using zerocopy::test::ZcrxNicStandIn;

constexpr size_t kPage = ZcrxNicStandIn::kPage;

net::Clock::time_point soon() { return net::Clock::now() + std::chrono::seconds(20); }

struct Rig {
  std::shared_ptr<ZcrxNicStandIn::Shared> nic = std::make_shared<ZcrxNicStandIn::Shared>();
  std::shared_ptr<ZcrxQueue> queue;
  std::unique_ptr<TestDeviceDomain> dev = TestDeviceDomain::create({.capacity = size_t{64} << 20}).value();
  explicit Rig(size_t pages = 32) {
    auto q = ZcrxQueue::open({.ifindex = 9, .rx_queue = 2, .area_bytes = pages * kPage}, ZcrxNicStandIn::factory(nic));
    EXPECT_TRUE(q.is_ok()) << q.status().to_string();
    if (q) queue = std::move(*q);
  }
  std::shared_ptr<ZcrxReceiver> receiver(int fd) {
    auto stream = queue->add_stream(fd);
    EXPECT_TRUE(stream.is_ok()) << stream.status().to_string();
    return std::make_shared<ZcrxReceiver>(fd, host_area_binding(*queue), queue, std::move(*stream));
  }
};

TEST(ZcrxReceive, IntoDeviceMemoryEachBufferGoesBackAfterItsCopy) {
  Rig rig(16);
  ASSERT_NE(rig.queue, nullptr);
  auto [client, server] = tcp_pair();
  constexpr size_t len = 300 * 1000 + 17;  // far more than the area
  const auto data = pattern(len, 1);
  std::thread sender([&, fd = client.get()] { send_all(fd, data); });
  auto r = rig.receiver(server.get());
  EXPECT_EQ(r->kind(), DataPathKind::kZcrx);
  std::byte* dst = rig.dev->allocate(len).value();
  size_t at = 0;
  bool held_while_copying = true;
  while (at < len) {
    DevmemRead read;
    auto got = r->receive(rig.dev.get(), dst + at, len - at, &read);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    if (got->would_block()) {
      ASSERT_TRUE(r->wait_readable(soon()).is_ok());
      continue;
    }
    ASSERT_TRUE(got->moved());
    EXPECT_EQ(read.tokens.size(), read.copies.size());  // one piece, one copy to the device
    held_while_copying = held_while_copying && rig.queue->stats().held >= read.tokens.size();
    for (auto& c : read.copies) ASSERT_TRUE(c->wait(std::chrono::seconds(30)).is_ok());
    ASSERT_TRUE(r->release(read).is_ok());
    at += got->bytes;
  }
  sender.join();
  std::vector<std::byte> got(len);
  ASSERT_TRUE(rig.dev->read(got.data(), dst, len).is_ok());
  EXPECT_TRUE(got == data);
  EXPECT_TRUE(held_while_copying);
  const auto st = rig.queue->stats();
  EXPECT_EQ(st.held, 0u);
  EXPECT_EQ(st.refilled, st.completions);
  EXPECT_EQ(rig.nic->bad_refills, 0u);
}

TEST(ZcrxReceive, AFailedDeviceCopyFailsTheReadAndItsBuffersStillGoBack) {
  Rig rig;
  ASSERT_NE(rig.queue, nullptr);
  auto [client, server] = tcp_pair();
  send_all(client.get(), pattern(3 * kPage, 2));
  auto r = rig.receiver(server.get());
  std::byte* dst = rig.dev->allocate(3 * kPage).value();
  rig.dev->fail_copies(dst, 1);  // the first copy to the device fails
  Status failed;
  uint64_t at = 0;
  while (at < 3 * kPage) {
    DevmemRead read;
    auto got = r->receive(rig.dev.get(), dst + at, 3 * kPage - at, &read);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    if (got->would_block()) {
      ASSERT_TRUE(r->wait_readable(soon()).is_ok());
      continue;
    }
    for (auto& c : read.copies) {
      const Status s = c->wait(std::chrono::seconds(30));
      if (!s.is_ok() && failed.is_ok()) failed = s;
    }
    ASSERT_TRUE(r->release(read).is_ok());
    at += got->bytes;
  }
  EXPECT_EQ(failed.code(), StatusCode::kDeviceFailed) << failed.to_string();
  EXPECT_EQ(rig.queue->stats().held, 0u);
}

TEST(ZcrxReceive, AHostReaderWaitsOnTheQueueAndHearsOfArrivals) {
  Rig rig;
  ASSERT_NE(rig.queue, nullptr);
  auto [client, server] = tcp_pair();
  DevmemStreamIn in(rig.receiver(server.get()));
  std::atomic<int> arrivals{0};
  in.on_arrival([&] { ++arrivals; });
  // Nothing yet: a bounded wait says so.
  EXPECT_EQ(in.wait_readable(net::Clock::now() + std::chrono::milliseconds(20)).code(), StatusCode::kTimeout);
  const auto data = pattern(10 * kPage + 99, 3);
  std::thread sender([&, fd = client.get()] { send_all(fd, data); });
  std::vector<std::byte> got(data.size());
  // A handshake's read: the socket does not stay readable (the queue's thread took the
  // bytes), so the wait is on the queue.
  ASSERT_TRUE(in.read_exact(got, soon()).is_ok());
  sender.join();
  EXPECT_TRUE(got == data);
  EXPECT_GT(arrivals.load(), 0);
  EXPECT_EQ(rig.queue->stats().held, 0u);
  // The peer's end: read_exact says so.
  client.reset();
  std::vector<std::byte> more(1);
  EXPECT_EQ(in.read_exact(more, soon()).code(), StatusCode::kPeerFailed);
}

// --- DevmemSink over zcrx streams under the chunk scheduler --------------------------

struct Host final : StagingHost {
  Link* link;
  explicit Host(Link* l) : link(l) {}
  void staged_chunk_placed(RxTransfer& t, uint64_t length, const Status& status) override {
    link->rx.chunk_placed(&t, length, status);
  }
  void staging_progressed() override { link->rx.unstall(); }
};

TEST(ZcrxSink, ChunksOverSocketPairsLandInDeviceMemoryAndEveryBufferGoesBack) {
  Rig rig(64);
  ASSERT_NE(rig.queue, nullptr);
  auto engine = engine::ProgressEngine::create({}).value();
  Link link;
  Host host{&link};
  auto anchor = std::make_shared<StagingHost*>(&host);
  auto ctx =
      std::make_shared<DevmemRxContext>(DevmemRxContext{.engine = engine, .host = anchor, .kind = DataPathKind::kZcrx});
  std::vector<std::shared_ptr<ZcrxReceiver>> receivers;
  for (uint16_t i = 0; i < Link::kStreams; ++i) {
    receivers.push_back(rig.receiver(link.rx.fd(i)));
    link.rx.set_stream_in(i, std::make_unique<DevmemStreamIn>(receivers.back()));
  }
  link.each_round = [&] {
    engine->try_progress();
    // The queue's thread delivers on its own time: a round waits a little for it.
    for (auto& r : receivers) (void)r->wait_readable(net::Clock::now() + std::chrono::milliseconds(1));
  };
  constexpr uint64_t len = 7 * Link::kChunk + 333;
  const auto data = pattern(len, 4);
  std::byte* dst = rig.dev->allocate(len).value();
  RxTransfer in;
  DevmemSink sink(ctx, rig.dev.get(), dst, &in);
  const Status delivered = link.deliver(data, in, sink);
  EXPECT_TRUE(delivered.is_ok()) << delivered.to_string();
  std::vector<std::byte> got(len);
  ASSERT_TRUE(rig.dev->read(got.data(), dst, len).is_ok());
  EXPECT_TRUE(got == data);
  EXPECT_EQ(sink.in_flight(), 0u);
  EXPECT_EQ(rig.queue->stats().held, 0u);
  EXPECT_EQ(rig.nic->bad_refills, 0u);
}

}  // namespace
}  // namespace remora::detail
