// Tests of zerocopy/zcrx_queue.cc, io_uring zero-copy receive driven by a queue thread.
//
// Against the real kernel (this machine's 6.18; no NIC here can do zcrx): the queue's
// own ring is set up with the flags zcrx needs and the registration of loopback's RX
// queue is refused with the kernel's errno and what it needs, with a host area and with
// a dmabuf area alike.
//
// Through the stand-in NIC (tests/zerocopy/zcrx_nic_standin.h, the kernel boundary only):
// real TCP bytes from a real socket arrive as completions in the kernel's layout, in
// stream order, byte for byte; a completion longer than asked for is split and its
// buffer goes back once, after its last piece is released; an area far smaller than the
// stream is reused through the refill ring (every entry in the kernel's layout, none
// refused), including when the reader holds every buffer until the area is dry; the end
// of the stream, a failed receive and a completion outside the area end the stream with
// their reason; closing a stream hands back what it did not take; a dmabuf area (a memfd
// standing in) is registered whole, only at its exact size, and the NIC writes there.
#include "zerocopy/zcrx_queue.h"

#include <net/if.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "zerocopy/io_uring_probe.h"
#include "zerocopy/zc_test_util.h"
#include "zerocopy/zcrx_nic_standin.h"

namespace remora::zerocopy {
namespace {

using test::send_all;
using test::tcp_pair;
using test::ZcrxNicStandIn;
using Piece = ZcrxQueue::Stream::Piece;

constexpr size_t kPage = ZcrxNicStandIn::kPage;

std::vector<std::byte> pattern(size_t n, uint32_t seed) {
  std::vector<std::byte> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<std::byte>(x);
  }
  return v;
}

net::Clock::time_point soon() { return net::Clock::now() + std::chrono::seconds(20); }

/// Takes up to `len` bytes of `stream` once it has something to say (bounded wait).
net::IoResult take_when_ready(ZcrxQueue::Stream& stream, uint64_t len, std::vector<Piece>* pieces, Status* why) {
  net::IoResult r;
  while ((r = stream.take(len, pieces, why)).would_block()) {
    const Status w = stream.wait(soon());
    EXPECT_TRUE(w.is_ok()) << w.to_string();
    if (!w) break;
  }
  return r;
}

struct StandInQueue {
  std::shared_ptr<ZcrxNicStandIn::Shared> nic = std::make_shared<ZcrxNicStandIn::Shared>();
  std::shared_ptr<ZcrxQueue> queue;
  explicit StandInQueue(size_t pages) {
    auto q = ZcrxQueue::open({.ifindex = 5, .rx_queue = 3, .area_bytes = pages * kPage}, ZcrxNicStandIn::factory(nic));
    EXPECT_TRUE(q.is_ok()) << q.status().to_string();
    if (q) queue = std::move(*q);
  }
};

/// Reads `n` bytes of `stream`, `ask` at most per take, copying each piece out of the
/// area and releasing it at once (`hold` > 0: only once `hold` pieces are held).
std::vector<std::byte> read_stream(ZcrxQueue& q, ZcrxQueue::Stream& stream, size_t n, size_t ask, size_t hold = 0) {
  std::vector<std::byte> out;
  std::vector<Piece> held;
  while (out.size() < n) {
    std::vector<Piece> pieces;
    Status why;
    const net::IoResult r = stream.take(std::min(ask, n - out.size()), &pieces, &why);
    if (r.would_block()) {
      if (!held.empty() && held.size() < hold) {
        // The area may be dry: give everything back so the NIC can go on.
        for (const Piece& p : held) stream.release(p.slot);
        held.clear();
        continue;
      }
      const Status w = stream.wait(soon());
      EXPECT_TRUE(w.is_ok()) << w.to_string();
      if (!w) break;
      continue;
    }
    EXPECT_TRUE(r.moved()) << "take ended: " << why.to_string();
    if (!r.moved()) break;
    size_t sum = 0;
    for (const Piece& p : pieces) {
      EXPECT_LE(p.area_offset + p.length, q.registration().area_bytes);
      out.insert(out.end(), q.registration().area + p.area_offset, q.registration().area + p.area_offset + p.length);
      sum += p.length;
      held.push_back(p);
    }
    EXPECT_EQ(sum, r.bytes);
    if (held.size() >= hold) {
      for (const Piece& p : held) stream.release(p.slot);
      held.clear();
    }
  }
  for (const Piece& p : held) stream.release(p.slot);
  return out;
}

TEST(ZcrxQueue, TheRealRegistrationOfLoopbackIsRefusedWithTheKernelsReason) {
  KernelError refusal;
  auto q = ZcrxQueue::open({.ifindex = ::if_nametoindex("lo"), .rx_queue = 0, .area_bytes = 64 * kPage},
                           io_uring_zcrx_kernels(), &refusal);
  ASSERT_FALSE(q.is_ok()) << "the kernel gave loopback's RX queue to io_uring zcrx";
  std::cout << "[ kernel   ] zcrx queue on lo: " << q.status().to_string() << "\n";
  if (!built_with_io_uring()) {
    EXPECT_EQ(q.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(q.status().message().find("built without io_uring"), std::string::npos);
    return;
  }
  // The ring was set up (the flags zcrx needs are this kernel's); the queue was refused.
  EXPECT_NE(q.status().message().find("zcrx registration of ifindex"), std::string::npos) << q.status().to_string();
  EXPECT_NE(refusal.err, 0);
  if (::geteuid() == 0) {
    EXPECT_EQ(refusal.err, EOPNOTSUPP) << q.status().to_string();
    EXPECT_NE(q.status().message().find("queue-management API"), std::string::npos);
  }
}

TEST(ZcrxQueue, AStandInRefusalComesBackAsTheOpensError) {
  auto nic = std::make_shared<ZcrxNicStandIn::Shared>();
  nic->refuse = true;
  KernelError refusal;
  auto q = ZcrxQueue::open({.ifindex = 5, .rx_queue = 3}, ZcrxNicStandIn::factory(nic), &refusal);
  ASSERT_FALSE(q.is_ok());
  EXPECT_EQ(refusal.err, EOPNOTSUPP);
  EXPECT_EQ(q.status().code(), StatusCode::kUnsupported);
}

TEST(ZcrxQueue, AStreamFarLargerThanTheAreaArrivesIntactThroughRefills) {
  StandInQueue s(16);  // 64 KiB of area for 4 MiB of stream
  ASSERT_NE(s.queue, nullptr);
  EXPECT_EQ(s.nic->registered_ifindex, 5u);
  EXPECT_EQ(s.nic->registered_queue, 3u);
  EXPECT_TRUE(s.queue->standin());
  auto [client, server] = tcp_pair();
  auto stream = s.queue->add_stream(server.get());
  ASSERT_TRUE(stream.is_ok()) << stream.status().to_string();
  const auto data = pattern(4 << 20, 1);
  std::thread sender([&, fd = client.get()] { send_all(fd, data); });
  const auto got = read_stream(*s.queue, **stream, data.size(), 100'000);
  sender.join();
  ASSERT_EQ(got.size(), data.size());
  EXPECT_TRUE(got == data) << "the stream's bytes differ";
  const auto st = s.queue->stats();
  EXPECT_EQ(st.bytes, data.size());
  EXPECT_EQ(st.held, 0u);
  EXPECT_EQ(st.refilled, st.completions);  // every buffer went back, once
  EXPECT_GE(st.completions, data.size() / kPage);
  EXPECT_EQ(s.nic->bad_refills, 0u);
}

TEST(ZcrxQueue, ACompletionSplitAcrossTakesGoesBackOnceAfterItsLastPiece) {
  StandInQueue s(16);
  ASSERT_NE(s.queue, nullptr);
  auto [client, server] = tcp_pair();
  const auto data = pattern(40'000, 2);
  send_all(client.get(), data);  // queued before the receive is armed: full pages come
  auto stream = s.queue->add_stream(server.get());
  ASSERT_TRUE(stream.is_ok());
  // 1000 bytes at a time: each 4 KiB completion comes in five pieces.
  std::vector<std::byte> got;
  std::vector<Piece> first;
  while (got.size() < 1000) {
    ASSERT_TRUE((*stream)->wait(soon()).is_ok());
    const net::IoResult r = (*stream)->take(1000, &first);
    if (r.moved())
      got.insert(got.end(), s.queue->registration().area + first[0].area_offset,
                 s.queue->registration().area + first[0].area_offset + r.bytes);
  }
  ASSERT_EQ(first.size(), 1u);
  std::vector<Piece> second;
  ASSERT_TRUE((*stream)->take(1000, &second).moved());
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].slot, first[0].slot);
  EXPECT_EQ(second[0].area_offset, first[0].area_offset + 1000);
  got.insert(got.end(), s.queue->registration().area + second[0].area_offset,
             s.queue->registration().area + second[0].area_offset + 1000);
  (*stream)->release(first[0].slot);
  EXPECT_EQ(s.queue->stats().refilled, 0u);  // the completion is still partly unread and held
  (*stream)->release(second[0].slot);
  EXPECT_EQ(s.queue->stats().refilled, 0u);  // released, but not all taken
  const auto rest = read_stream(*s.queue, **stream, data.size() - 2000, 1000);
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_TRUE(got == data);
  const auto st = s.queue->stats();
  EXPECT_EQ(st.held, 0u);
  EXPECT_EQ(st.refilled, st.completions);
  EXPECT_EQ(s.nic->bad_refills, 0u);
}

TEST(ZcrxQueue, AReaderHoldingEveryBufferStallsTheNicUntilItGivesThemBack) {
  StandInQueue s(8);
  ASSERT_NE(s.queue, nullptr);
  auto [client, server] = tcp_pair();
  auto stream = s.queue->add_stream(server.get());
  ASSERT_TRUE(stream.is_ok());
  const auto data = pattern(1 << 20, 3);
  std::thread sender([&, fd = client.get()] { send_all(fd, data); });
  // Eight pieces held at a time: the area (eight pages) is dry each time.
  const auto got = read_stream(*s.queue, **stream, data.size(), kPage, /*hold=*/8);
  sender.join();
  EXPECT_TRUE(got == data);
  EXPECT_GT(s.nic->starved_polls, 0u);  // the NIC did run dry
  EXPECT_EQ(s.queue->stats().held, 0u);
  EXPECT_EQ(s.nic->bad_refills, 0u);
}

TEST(ZcrxQueue, AReceiveEndedForWantOfBuffersIsArmedAgainAtTheNextRefill) {
  StandInQueue s(16);
  ASSERT_NE(s.queue, nullptr);
  auto [client, server] = tcp_pair();
  auto stream = s.queue->add_stream(server.get());
  ASSERT_TRUE(stream.is_ok());
  std::atomic<int> notices{0};
  (*stream)->set_notify([&] { ++notices; });
  const auto first = pattern(kPage, 10);
  send_all(client.get(), first);
  std::vector<Piece> held;
  Status why;
  ASSERT_TRUE(take_when_ready(**stream, kPage, &held, &why).moved());  // held: its buffer stays out
  // The kernel ends the RECV_ZC with ENOBUFS (the area ran dry): the stream waits for a
  // refill, with no error.
  notices = 0;
  s.nic->fail_recv_errno = ENOBUFS;
  const auto rest = pattern(5 * kPage, 11);
  send_all(client.get(), rest);
  const auto until = soon();
  while (notices == 0 && net::Clock::now() < until) std::this_thread::yield();
  ASSERT_GT(notices.load(), 0) << "the queue did not hear of the ENOBUFS completion";
  std::vector<Piece> none;
  EXPECT_TRUE((*stream)->take(kPage, &none, &why).would_block());
  EXPECT_EQ(s.nic->armed, 1u);  // not armed again yet
  // The held buffer goes back: the receive is armed again and the rest arrives.
  for (const Piece& p : held) (*stream)->release(p.slot);
  EXPECT_TRUE(read_stream(*s.queue, **stream, rest.size(), 65536) == rest);
  EXPECT_EQ(s.nic->armed, 2u);
  EXPECT_EQ(s.nic->bad_refills, 0u);
}

TEST(ZcrxQueue, ThePeersEndComesAfterItsBytes) {
  StandInQueue s(16);
  ASSERT_NE(s.queue, nullptr);
  auto [client, server] = tcp_pair();
  auto stream = s.queue->add_stream(server.get());
  ASSERT_TRUE(stream.is_ok());
  const auto data = pattern(10'000, 4);
  send_all(client.get(), data);
  client.reset();
  const auto got = read_stream(*s.queue, **stream, data.size(), 65536);
  EXPECT_TRUE(got == data);
  std::vector<Piece> none;
  Status why;
  const net::IoResult r = take_when_ready(**stream, 100, &none, &why);
  EXPECT_TRUE(r.eof());
  EXPECT_TRUE(none.empty());
}

TEST(ZcrxQueue, AFailedReceiveOrACompletionOutsideTheAreaEndsTheStreamWithItsReason) {
  struct Case {
    const char* name;
    std::function<void(ZcrxNicStandIn::Shared&)> set;
    int err;
    StatusCode code;
    const char* says;
  };
  const Case cases[] = {
      {"the kernel's errno", [](ZcrxNicStandIn::Shared& n) { n.fail_recv_errno = ECONNRESET; }, ECONNRESET,
       StatusCode::kPeerFailed, "RECV_ZC"},
      {"outside the area", [](ZcrxNicStandIn::Shared& n) { n.outside = true; }, EPROTO, StatusCode::kProtocol,
       "outside"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    StandInQueue s(16);
    ASSERT_NE(s.queue, nullptr);
    auto [client, server] = tcp_pair();
    c.set(*s.nic);
    auto stream = s.queue->add_stream(server.get());
    ASSERT_TRUE(stream.is_ok());
    send_all(client.get(), pattern(100, 5));
    std::vector<Piece> pieces;
    Status why;
    const net::IoResult r = take_when_ready(**stream, 100, &pieces, &why);
    ASSERT_TRUE(r.error());
    EXPECT_EQ(r.err, c.err);
    EXPECT_TRUE(pieces.empty());
    EXPECT_EQ(why.code(), c.code) << why.to_string();
    EXPECT_NE(why.message().find(c.says), std::string::npos) << why.to_string();
  }
}

TEST(ZcrxQueue, ClosingAStreamHandsBackWhatItDidNotTakeAndCancelsItsReceive) {
  StandInQueue s(16);
  ASSERT_NE(s.queue, nullptr);
  auto [client, server] = tcp_pair();
  send_all(client.get(), pattern(3 * kPage, 7));
  auto stream = s.queue->add_stream(server.get());
  ASSERT_TRUE(stream.is_ok());
  std::vector<Piece> taken;
  while (taken.empty()) {
    ASSERT_TRUE((*stream)->wait(soon()).is_ok());
    (void)(*stream)->take(10, &taken);
  }
  // Let the rest arrive too: the stream has all three pages' completions, one piece taken.
  while (s.queue->stats().bytes < 3 * kPage) std::this_thread::yield();
  (*stream)->close();
  auto st = s.queue->stats();
  EXPECT_EQ(st.refilled, st.completions - 1);  // all but the page of the piece still held
  EXPECT_EQ(st.held, 1u);
  (*stream)->release(taken[0].slot);
  st = s.queue->stats();
  EXPECT_EQ(st.refilled, st.completions);
  EXPECT_EQ(st.held, 0u);
  stream->reset();
  // A stream added after the close works, and by the time its bytes came the queue's
  // thread had cancelled the closed stream's RECV_ZC (its commands run in order).
  auto [client2, server2] = tcp_pair();
  auto next = s.queue->add_stream(server2.get());
  ASSERT_TRUE(next.is_ok());
  const auto data = pattern(5000, 8);
  send_all(client2.get(), data);
  EXPECT_TRUE(read_stream(*s.queue, **next, data.size(), 65536) == data);
  EXPECT_EQ(s.nic->cancels, 1u);
  EXPECT_EQ(s.nic->bad_refills, 0u);
}

TEST(ZcrxQueue, ADmabufAreaIsRegisteredWholeAndTheNicWritesThere) {
  // The area is a dmabuf of device memory; a memfd stands in for it (no exporter here),
  // and the stand-in NIC writes into it as the device's DMA would.
  constexpr size_t kPages = 16;
  const int fd = ::memfd_create("zcrx-dmabuf-area", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, kPages * kPage), 0);
  auto nic = std::make_shared<ZcrxNicStandIn::Shared>();
  nic->write_area = [fd](uint64_t offset, const std::byte* data, size_t n) {
    ASSERT_EQ(::pwrite(fd, data, n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
  };
  // A size other than the dmabuf's is refused, as the kernel refuses it.
  KernelError refusal;
  auto wrong = ZcrxQueue::open({.ifindex = 5, .rx_queue = 3, .area_bytes = 8 * kPage, .dmabuf_fd = fd},
                               ZcrxNicStandIn::factory(nic), &refusal);
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_EQ(refusal.err, EINVAL);
  EXPECT_EQ(
      ZcrxQueue::open({.ifindex = 5, .rx_queue = 3, .area_bytes = 100, .dmabuf_fd = fd}, ZcrxNicStandIn::factory(nic))
          .status()
          .code(),
      StatusCode::kInvalidArgument);  // not whole pages

  auto q = ZcrxQueue::open({.ifindex = 5, .rx_queue = 3, .area_bytes = kPages * kPage, .dmabuf_fd = fd},
                           ZcrxNicStandIn::factory(nic));
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  EXPECT_TRUE(nic->registered_dmabuf);
  EXPECT_EQ((*q)->registration().area, nullptr);  // not mapped here: device memory
  EXPECT_NE((*q)->describe().find("dmabuf area"), std::string::npos) << (*q)->describe();
  auto [client, server] = tcp_pair();
  auto stream = (*q)->add_stream(server.get());
  ASSERT_TRUE(stream.is_ok());
  const auto data = pattern(1 << 20, 9);
  std::thread sender([&, cfd = client.get()] { send_all(cfd, data); });
  std::vector<std::byte> got;
  while (got.size() < data.size()) {
    std::vector<Piece> pieces;
    const net::IoResult r = (*stream)->take(data.size() - got.size(), &pieces);
    if (r.would_block()) {
      ASSERT_TRUE((*stream)->wait(soon()).is_ok());
      continue;
    }
    ASSERT_TRUE(r.moved());
    for (const Piece& p : pieces) {
      std::vector<std::byte> b(p.length);
      ASSERT_EQ(::pread(fd, b.data(), p.length, static_cast<off_t>(p.area_offset)), static_cast<ssize_t>(p.length));
      got.insert(got.end(), b.begin(), b.end());
      (*stream)->release(p.slot);
    }
  }
  sender.join();
  EXPECT_TRUE(got == data);
  EXPECT_EQ((*q)->stats().held, 0u);
  EXPECT_EQ(nic->bad_refills, 0u);
  stream->reset();
  q->reset();
  ::close(fd);
}

TEST(ZcrxQueue, TheRealRegistrationOfADmabufAreaOnLoopbackIsRefusedToo) {
  const int fd = ::memfd_create("zcrx-dmabuf-area", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 16 * kPage), 0);
  KernelError refusal;
  auto q =
      ZcrxQueue::open({.ifindex = ::if_nametoindex("lo"), .rx_queue = 0, .area_bytes = 16 * kPage, .dmabuf_fd = fd},
                      io_uring_zcrx_kernels(), &refusal);
  ASSERT_FALSE(q.is_ok());
  std::cout << "[ kernel   ] zcrx queue with a dmabuf area on lo: " << q.status().to_string() << "\n";
  ::close(fd);
  if (!built_with_io_uring()) {
    EXPECT_NE(q.status().message().find("built without io_uring"), std::string::npos) << q.status().to_string();
    return;
  }
  EXPECT_NE(refusal.err, 0);
  EXPECT_NE(q.status().message().find("with a dmabuf area"), std::string::npos) << q.status().to_string();
}

}  // namespace
}  // namespace remora::zerocopy
