// io_uring zcrx in device-less mode (ZCRX_REG_NODEV, Linux 7.1+), in the kernel lab:
// remora's ZcrxQueue registers a queue with no NIC under it and reads real loopback TCP
// connections through real multishot RECV_ZC completions, the kernel copying the payload
// into the queue's area. 4 MiB go through a 64 KiB area, so every buffer is handed back
// through the real refill ring and the flush control many times over; every byte is
// compared. Then a receive's error completion (RECV_ZC on a descriptor that is not a
// socket: the kernel's ENOTSOCK comes back as the stream's error), and a stream closed
// while bytes keep arriving (its receive cancelled, its buffers back, the queue goes
// on). Outside the lab, where the kernel refuses the registration, each test skips
// with that refusal.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "lab_util.h"
#include "net/socket.h"
#include "support/test_data.h"
#include "zerocopy/zcrx_queue.h"

namespace remora::lab {
namespace {

using namespace std::chrono_literals;
using zerocopy::ZcrxQueue;

constexpr uint64_t kPage = 4096;

/// A connected loopback TCP pair: `rx` accepted, `tx` connected.
struct TcpPair {
  net::Fd rx, tx;
};

TcpPair tcp_pair() {
  TcpPair p;
  net::Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::listen(listener.get(), 1), 0);
  EXPECT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  p.tx = net::Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_EQ(::connect(p.tx.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  p.rx = net::Fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  EXPECT_TRUE(p.rx.valid());
  return p;
}

/// A device-less queue with an area of `pages` pages, or the refusal (skips outside the lab).
std::shared_ptr<ZcrxQueue> open_device_less(uint64_t pages, std::string* refusal_text) {
  zerocopy::KernelError refusal;
  auto q =
      ZcrxQueue::open({.area_bytes = pages * kPage, .device_less = true}, zerocopy::io_uring_zcrx_kernels(), &refusal);
  if (!q) {
    *refusal_text = q.status().to_string();
    return nullptr;
  }
  return *q;
}

/// Reads `len` bytes of `stream` out of the queue's area, releasing each piece at once.
std::vector<std::byte> read_all(ZcrxQueue& q, ZcrxQueue::Stream& stream, uint64_t len) {
  std::vector<std::byte> out;
  out.reserve(len);
  const std::byte* area = q.registration().area;
  const auto deadline = net::Clock::now() + 120s;
  while (out.size() < len) {
    std::vector<ZcrxQueue::Stream::Piece> pieces;
    Status why;
    const net::IoResult r = stream.take(len - out.size(), &pieces, &why);
    if (r.kind == net::IoResult::Kind::kWouldBlock) {
      const Status w = stream.wait(deadline);
      if (!w.is_ok()) {
        ADD_FAILURE() << w.to_string() << " after " << out.size() << " of " << len << " bytes";
        break;
      }
      continue;
    }
    if (r.kind != net::IoResult::Kind::kBytes) {
      ADD_FAILURE() << "take: kind " << static_cast<int>(r.kind) << " err " << r.err << ": " << why.to_string()
                    << " after " << out.size() << " bytes";
      break;
    }
    for (const auto& piece : pieces) {
      EXPECT_LE(piece.area_offset + piece.length, q.registration().area_bytes);
      out.insert(out.end(), area + piece.area_offset, area + piece.area_offset + piece.length);
      stream.release(piece.slot);
    }
  }
  return out;
}

TEST(ZcrxDeviceLess, FourMiBThroughA64KiBAreaByRealRecvZcCompletionsAndRefills) {
  std::string refusal;
  auto q = open_device_less(16, &refusal);
  REMORA_LAB_NEEDS(q != nullptr, "io_uring zcrx device-less mode: " + refusal);
  EXPECT_TRUE(q->device_less());
  EXPECT_FALSE(q->standin());
  std::cout << "[ zcrx     ] " << q->describe() << "\n";
  TcpPair tcp = tcp_pair();
  auto stream = q->add_stream(tcp.rx.get());
  ASSERT_TRUE(stream.is_ok()) << stream.status().to_string();

  constexpr uint64_t kLen = uint64_t{4} << 20;
  const auto data = itest::stream_bytes(kLen, 77);
  std::thread sender([&] {
    size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n = ::send(tcp.tx.get(), data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
    ::shutdown(tcp.tx.get(), SHUT_WR);
  });
  const auto got = read_all(*q, **stream, kLen);
  if (got.size() < kLen) ::shutdown(tcp.tx.get(), SHUT_RDWR);  // the sender may be stuck in send()
  sender.join();
  ASSERT_EQ(got.size(), kLen);
  EXPECT_EQ(itest::first_mismatch(77, 0, got), SIZE_MAX) << "the received bytes differ from what was sent";

  // The peer's end: kEof once everything was taken.
  std::vector<ZcrxQueue::Stream::Piece> none;
  net::IoResult end{};
  for (int i = 0; i < 100; ++i) {
    end = (*stream)->take(1, &none, nullptr);
    if (end.kind != net::IoResult::Kind::kWouldBlock) break;
    ASSERT_TRUE((*stream)->wait(net::Clock::now() + 30s).is_ok());
  }
  EXPECT_EQ(end.kind, net::IoResult::Kind::kEof);
  EXPECT_TRUE(none.empty());

  const ZcrxQueue::Stats st = q->stats();
  std::cout << "[ zcrx     ] " << st.completions << " RECV_ZC completions, " << st.bytes << " bytes, " << st.refilled
            << " buffers refilled, " << st.flushes << " refill-ring flushes, " << st.held << " held\n";
  EXPECT_EQ(st.bytes, kLen);
  EXPECT_EQ(st.held, 0u);
  // 4 MiB through 16 pages: buffers went back and were taken again many times.
  EXPECT_GE(st.refilled, kLen / (16 * kPage));
  EXPECT_GT(st.flushes, 0u);
  EXPECT_EQ(st.refilled, st.completions);
}

TEST(ZcrxDeviceLess, ARecvZcErrorCompletionBecomesTheStreamsError) {
  std::string refusal;
  auto q = open_device_less(16, &refusal);
  REMORA_LAB_NEEDS(q != nullptr, "io_uring zcrx device-less mode: " + refusal);
  net::Fd not_a_socket(::eventfd(0, EFD_CLOEXEC));
  ASSERT_TRUE(not_a_socket.valid());
  auto stream = q->add_stream(not_a_socket.get());
  ASSERT_TRUE(stream.is_ok()) << stream.status().to_string();
  ASSERT_TRUE((*stream)->wait(net::Clock::now() + 30s).is_ok());
  std::vector<ZcrxQueue::Stream::Piece> pieces;
  Status why;
  const net::IoResult r = (*stream)->take(100, &pieces, &why);
  std::cout << "[ kernel   ] RECV_ZC on an eventfd: err " << r.err << ": " << why.to_string() << "\n";
  EXPECT_EQ(r.kind, net::IoResult::Kind::kError);
  EXPECT_EQ(r.err, ENOTSOCK) << why.to_string();
  EXPECT_TRUE(pieces.empty());
  // The queue goes on: a real socket still receives.
  TcpPair tcp = tcp_pair();
  auto good = q->add_stream(tcp.rx.get());
  ASSERT_TRUE(good.is_ok());
  const auto data = itest::stream_bytes(10000, 5);
  ASSERT_EQ(::send(tcp.tx.get(), data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
  EXPECT_TRUE(read_all(*q, **good, data.size()) == data);
}

TEST(ZcrxDeviceLess, AStreamClosedWhileBytesArriveGivesItsBuffersBack) {
  std::string refusal;
  auto q = open_device_less(16, &refusal);
  REMORA_LAB_NEEDS(q != nullptr, "io_uring zcrx device-less mode: " + refusal);
  TcpPair first = tcp_pair();
  auto stream = q->add_stream(first.rx.get());
  ASSERT_TRUE(stream.is_ok());
  const auto data = itest::stream_bytes(256 * 1024, 6);
  // More than the area holds, never taken: the receive starves, then the stream closes.
  std::thread sender([&] { (void)::send(first.tx.get(), data.data(), data.size(), MSG_NOSIGNAL); });
  ASSERT_TRUE((*stream)->wait(net::Clock::now() + 30s).is_ok());
  (*stream)->close();
  ::shutdown(first.tx.get(), SHUT_RDWR);  // the sender is stuck in send(): nothing reads any more
  sender.join();
  // Every buffer is free again: another connection moves more than the area through it.
  TcpPair second = tcp_pair();
  auto next = q->add_stream(second.rx.get());
  ASSERT_TRUE(next.is_ok());
  const auto more = itest::stream_bytes(512 * 1024, 8);
  std::thread sender2([&] { (void)::send(second.tx.get(), more.data(), more.size(), MSG_NOSIGNAL); });
  const auto got = read_all(*q, **next, more.size());
  if (got.size() < more.size()) ::shutdown(second.tx.get(), SHUT_RDWR);
  sender2.join();
  EXPECT_TRUE(got == more);
  EXPECT_EQ(q->stats().held, 0u);
}

}  // namespace
}  // namespace remora::lab
