// Endpoint and context lifetimes under load: close() and Context destruction with
// requests outstanding, a peer killed while this side is writing a large message, and
// one context serving several peers at once while one of them dies.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <thread>

#include "itest_util.h"
#include "support/exchange.h"
#include "support/raw_rma.h"
#include "support/test_data.h"

namespace remora::itest {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

TEST(Lifecycle, CloseAbortsOutstandingAndLaterOperations) {
  Pair p = make_pair_in_process(make_context(2), make_context(2));
  ASSERT_TRUE(p.ea && p.eb);
  std::vector<std::byte> rbuf(1 << 20), sbuf(8 << 20, std::byte{3});
  Request r = p.eb->recv(rbuf, Tag{1});
  Request s = p.eb->send(sbuf, Tag{2});  // rendezvous, never received
  Request peer_side = p.ea->recv(rbuf, Tag{3});
  EXPECT_EQ(r.wait(50ms).code(), StatusCode::kTimeout);
  const auto t0 = Clock::now();
  p.eb->close();
  EXPECT_EQ(r.wait(5s).code(), StatusCode::kAborted);
  EXPECT_EQ(s.wait(5s).code(), StatusCode::kAborted);
  EXPECT_LT(Clock::now() - t0, 2s);
  // The other side learns about it: its outstanding receive fails.
  const Status ps = peer_side.wait(10s);
  EXPECT_TRUE(ps.code() == StatusCode::kAborted || ps.code() == StatusCode::kPeerFailed) << describe(ps);
  EXPECT_TRUE(p.ea->failed());
  // Operations after close fail at once.
  Request late = p.eb->send(std::span<const std::byte>(sbuf).first(10), Tag{1});
  EXPECT_EQ(late.wait(1s).code(), StatusCode::kAborted) << describe(late.wait(0s));
  p.eb->close();  // idempotent
}

TEST(Lifecycle, CloseRightAfterTheLastMessageIsNoticed) {
  // The last frame, GOODBYE and the FIN tend to arrive together: the receiving side
  // must still notice the close, however the reads are split.
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Pair p = make_pair_in_process(make_context(1), make_context(1));
    ASSERT_TRUE(p.ea && p.eb);
    std::vector<std::byte> got(64), never(8);
    Request last = p.ea->recv(got, Tag{1});
    Request pending = p.ea->recv(never, Tag{2});
    const char text[] = "last words";
    ASSERT_TRUE(p.eb->send(std::as_bytes(std::span(text)), Tag{1}).wait(5s).is_ok());
    p.eb->close();
    ASSERT_TRUE(last.wait(5s).is_ok());
    const Status s = pending.wait(5s);
    ASSERT_TRUE(s.code() == StatusCode::kAborted || s.code() == StatusCode::kPeerFailed)
        << "a receive pending when the peer closed: " << describe(s);
    EXPECT_TRUE(p.ea->failed());
  }
}

std::vector<std::byte> numbered_bytes(size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 31 + static_cast<size_t>(seed) * 7 + 1) & 0xFF);
  return v;
}

// Waits until `ep` has seen its peer go: a receive nobody will ever match fails then.
Status wait_for_peer_gone(Endpoint& ep) {
  std::vector<std::byte> never(8);
  return ep.recv(never, Tag{0xDEAD}).wait(10s);
}

// An endpoint whose peer is a raw socket (one data stream): the test decides when the
// peer reads, and a 64 KiB receive buffer (fixed: no autotuning up to tcp_rmem's
// maximum) on the peer's control or data socket makes that socket fill up fast.
struct RawPeer {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Listener> listener;
  raw::RmaClient c;
  std::shared_ptr<Endpoint> ep;
};
enum class SmallBuffer { kControl, kData };
void accept_raw_peer(RawPeer& p, raw::RmaClient::Options options, SmallBuffer small) {
  p.ctx = make_context(1);
  ASSERT_TRUE(p.ctx);
  auto lr = p.ctx->listen("127.0.0.1:0");
  ASSERT_TRUE(lr) << describe(lr.status());
  p.listener = std::move(lr).value();
  options.streams = 1;
  ASSERT_EQ(p.c.connect(p.listener->port(), options), "");
  const int fd = small == SmallBuffer::kControl ? p.c.control().fd() : p.c.data(0).fd();
  const int rcvbuf = 64 * 1024;
  ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf), 0) << std::strerror(errno);
  auto ar = p.listener->accept(10s);
  ASSERT_TRUE(ar) << describe(ar.status());
  p.ep = std::move(ar).value();
}

TEST(Lifecycle, MessagesSentBeforeAnOrderlyCloseStayReceivable) {
  // A sender whose sends completed and which then closes (a rank leaving after its
  // last collective) must not take back what it sent: the eager messages that reached
  // the receiver before its receives were posted are still theirs.
  Pair p = make_pair_in_process(make_context(1), make_context(1));
  ASSERT_TRUE(p.ea && p.eb);
  std::vector<std::vector<std::byte>> sent;
  for (int i = 0; i < 3; ++i) {
    sent.push_back(numbered_bytes(100 * static_cast<size_t>(i + 1), i));
    ASSERT_TRUE(p.eb->send(sent.back(), Tag{static_cast<uint64_t>(10 + i)}).wait(5s).is_ok());
  }
  sent.push_back(numbered_bytes(5, 3));  // two on one tag: they keep their order
  sent.push_back(numbered_bytes(7, 4));
  ASSERT_TRUE(p.eb->send(sent[3], Tag{20}).wait(5s).is_ok());
  ASSERT_TRUE(p.eb->send(sent[4], Tag{20}).wait(5s).is_ok());
  std::vector<std::byte> big(1 << 20, std::byte{9});
  Request never_matched = p.eb->send(big, Tag{30});  // rendezvous: needs a receive first
  p.eb->close();
  EXPECT_EQ(never_matched.wait(5s).code(), StatusCode::kAborted);

  const Status gone = wait_for_peer_gone(*p.ea);
  ASSERT_EQ(gone.code(), StatusCode::kPeerFailed) << describe(gone);
  EXPECT_NE(gone.message().find("closed the endpoint"), std::string::npos) << describe(gone);
  EXPECT_TRUE(p.ea->failed());
  EXPECT_TRUE(p.ea->closed_by_peer());

  std::vector<std::byte> got(1024);
  for (int i = 2; i >= 0; --i) {  // not in arrival order: matching is by tag
    Request r = p.ea->recv(got, Tag{static_cast<uint64_t>(10 + i)});
    ASSERT_TRUE(r.wait(1s).is_ok()) << "message " << i << ": " << describe(r.wait(0s));
    ASSERT_EQ(r.bytes(), sent[static_cast<size_t>(i)].size());
    EXPECT_EQ(std::memcmp(got.data(), sent[static_cast<size_t>(i)].data(), r.bytes()), 0) << "message " << i;
  }
  Request first = p.ea->recv(got, Tag{20});
  ASSERT_TRUE(first.wait(1s).is_ok());
  ASSERT_EQ(first.bytes(), sent[3].size());
  EXPECT_EQ(std::memcmp(got.data(), sent[3].data(), sent[3].size()), 0);
  // Each message is received once; the rendezvous one never arrived; sends fail.
  EXPECT_EQ(p.ea->recv(got, Tag{10}).wait(1s).code(), StatusCode::kPeerFailed);
  EXPECT_EQ(p.ea->recv(big, Tag{30}).wait(1s).code(), StatusCode::kPeerFailed);
  EXPECT_EQ(p.ea->send(std::span(got).first(8), Tag{1}).wait(1s).code(), StatusCode::kPeerFailed);
  // Closing this side too drops what was left (the second message on tag 20); the
  // endpoint keeps the failure it had.
  p.ea->close();
  EXPECT_TRUE(p.ea->closed_by_peer());
  EXPECT_EQ(p.ea->recv(got, Tag{20}).wait(1s).code(), StatusCode::kPeerFailed);
}

TEST(Lifecycle, AnOrderlyCloseDeliversWhatWasQueuedBehindAFullSocket) {
  // An eager send completes once its bytes are copied; they may still sit in the
  // endpoint's queue, behind a socket the peer is not reading yet, when the
  // application closes. close() must not drop them: the peer, a raw socket that reads
  // only after the close, gets every message, then GOODBYE (reason 0), then EOF. The
  // data stream ends only after that GOODBYE is in the kernel, so a chunk cut short by
  // a close reaches the peer behind the GOODBYE (see AChunkCutShortByAnOrderlyClose...).
  constexpr size_t kMessages = 512, kSize = 16 * 1024;  // 8 MiB: far beyond the socket buffers
  RawPeer p;
  ASSERT_NO_FATAL_FAILURE(
      accept_raw_peer(p, {.eager_limit = kSize, .eager_credit = 16u << 20}, SmallBuffer::kControl));
  raw::RmaClient& c = p.c;
  std::shared_ptr<Endpoint>& ep = p.ep;
  for (size_t i = 0; i < kMessages; ++i) {
    const Status s = ep->send(numbered_bytes(kSize, static_cast<int>(i)), Tag{1000 + i}).wait(5s);
    ASSERT_TRUE(s.is_ok()) << "message " << i << ": " << describe(s);
  }
  ep->close();
  ep.reset();
  std::byte probe{};
  const ssize_t early = ::recv(c.data(0).fd(), &probe, 1, MSG_DONTWAIT);
  const int early_errno = errno;
  EXPECT_TRUE(early < 0 && (early_errno == EAGAIN || early_errno == EWOULDBLOCK))
      << "the data stream ended (0) or carried bytes before GOODBYE could be sent: " << early;

  std::string err;
  for (size_t i = 0; i < kMessages; ++i) {
    auto header = c.control().recv_exact(8, 20s, &err);
    ASSERT_TRUE(header) << "message " << i << " of " << kMessages << ": " << err;
    ASSERT_EQ((*header)[0], 1) << "message " << i << ": frame type " << int{(*header)[0]} << ", not EAGER";
    const uint32_t body = static_cast<uint32_t>(raw::get_le(header->data() + 4, 4));
    ASSERT_EQ(body, 8 + kSize) << "message " << i;
    auto bytes = c.control().recv_exact(body, 20s, &err);
    ASSERT_TRUE(bytes) << "message " << i << ": " << err;
    EXPECT_EQ(raw::get_le(bytes->data(), 8), 1000 + i);
    const auto want = numbered_bytes(kSize, static_cast<int>(i));
    ASSERT_EQ(std::memcmp(bytes->data() + 8, want.data(), kSize), 0) << "message " << i;
  }
  auto goodbye = c.control().recv_exact(16, 20s, &err);
  ASSERT_TRUE(goodbye) << "GOODBYE: " << err;
  EXPECT_EQ((*goodbye)[0], 6) << "frame type";
  EXPECT_EQ(raw::get_le(goodbye->data() + 8, 4), 0u) << "GOODBYE reason";
  size_t extra = 0;
  EXPECT_TRUE(c.control().wait_closed(20s, &extra));
  EXPECT_EQ(extra, 0u) << "bytes after GOODBYE";
  EXPECT_TRUE(c.data(0).wait_closed(20s, &extra)) << "the data stream, once GOODBYE was out";
  EXPECT_EQ(extra, 0u) << "bytes on the data stream";
}

TEST(Lifecycle, ACloseWithUnreadBytesStillDeliversACompletedRendezvousSend) {
  // The deterministic form of the next test's case. The peer, a raw socket, lets the
  // message's chunks pile up behind a small receive buffer, so the completed send's
  // tail is still in the sender's kernel at close(); and it has written bytes into the
  // data stream that the endpoint never reads. Closing that socket outright would
  // reset the connection and throw the tail away.
  RawPeer p;
  ASSERT_NO_FATAL_FAILURE(accept_raw_peer(p, {}, SmallBuffer::kData));
  raw::RmaClient& c = p.c;
  std::shared_ptr<Endpoint>& ep = p.ep;

  const auto msg = numbered_bytes(size_t{512} << 10, 8);
  Request sent = ep->send(msg, Tag{77});
  std::string err;
  auto rts = c.control().recv_exact(8 + 24, 10s, &err);
  ASSERT_TRUE(rts) << err;
  ASSERT_EQ((*rts)[0], 2) << "frame type " << int{(*rts)[0]} << ", not RTS";
  EXPECT_EQ(raw::get_le(rts->data() + 16, 8), 77u) << "tag";
  ASSERT_EQ(raw::get_le(rts->data() + 24, 8), msg.size()) << "length";
  ASSERT_EQ(c.send_control(raw::encode_frame(wire::CtsFrame{.send_id = raw::get_le(rts->data() + 8, 8), .recv_id = 5})), "");
  const Status s = sent.wait(30s);  // every chunk in the kernel; the peer has read none
  ASSERT_TRUE(s.is_ok()) << describe(s);
  const std::vector<std::byte> unread(100, std::byte{0x5A});
  ASSERT_EQ(c.send_data(0, unread), "");
  ep->close();
  ep.reset();

  auto data = c.data(0).recv_exact(msg.size(), 20s, &err);
  ASSERT_TRUE(data) << "the message's bytes on the data stream: " << err;
  EXPECT_EQ(std::memcmp(data->data(), msg.data(), msg.size()), 0);
  size_t extra = 0;
  EXPECT_TRUE(c.data(0).wait_closed(20s, &extra));
  EXPECT_EQ(extra, 0u) << "bytes after the message";
  // The control stream announced every byte, then said GOODBYE.
  uint64_t announced = 0;
  while (true) {
    auto header = c.control().recv_exact(8, 20s, &err);
    ASSERT_TRUE(header) << err;
    const uint32_t body = static_cast<uint32_t>(raw::get_le(header->data() + 4, 4));
    auto bytes = c.control().recv_exact(body, 20s, &err);
    ASSERT_TRUE(bytes) << err;
    if ((*header)[0] == 6) break;  // GOODBYE
    if ((*header)[0] != 4) continue;  // not a CHUNK (a credit update, say)
    EXPECT_EQ(raw::get_le(bytes->data(), 8), 5u) << "recv_id";
    EXPECT_EQ(raw::get_le(bytes->data() + 8, 8), announced) << "offset";
    announced += raw::get_le(bytes->data() + 16, 4);
  }
  EXPECT_EQ(announced, msg.size());
  EXPECT_TRUE(c.control().wait_closed(20s));
}

TEST(Lifecycle, ACloseWhileThePeerIsStillSendingDoesNotTakeBackWhatWasSent) {
  // A rendezvous send completes once its last chunk is in the kernel. If the sender
  // then closes while the peer's data is still coming in on the same data stream, a
  // plain close() of a socket with unread bytes would reset the connection, and the
  // reset would discard the sender's tail that the kernel had not sent yet.
  const auto out = numbered_bytes(size_t{24} << 20, 5);
  std::vector<std::byte> got(out.size());
  // a streams 8 x 32 MiB at b (one buffer each side, reused), far more than b's 24 MiB,
  // so it is almost always still coming when b's send has completed and b closes.
  // Which side the two progress threads favour is not ours to fix: an attempt where
  // all of a's data was already in does not count, and is tried again, up to 24
  // times: since the pump and the reader give way to a thread waiting for the lock,
  // b's progress thread reads a's data sooner, and 8 tries once all missed under ASan.
  // (The kernel loses the tail only if a had not read it yet, so this catches the bug
  // in about half the runs; the raw-peer test above catches it every time.)
  std::vector<std::byte> in(size_t{32} << 20), back(in.size(), std::byte{1});
  int closed_while_coming_in = 0;
  for (int attempt = 0; attempt < 24 && closed_while_coming_in == 0; ++attempt) {
    SCOPED_TRACE("attempt " + std::to_string(attempt));
    Pair p = make_pair_in_process(make_context(1), make_context(1));
    ASSERT_TRUE(p.ea && p.eb);
    std::fill(got.begin(), got.end(), std::byte{0});
    Request a_recv = p.ea->recv(got, Tag{1});
    std::vector<Request> a_sends, b_recvs;
    for (uint64_t t = 2; t < 10; ++t) {
      a_sends.push_back(p.ea->send(back, Tag{t}));
      b_recvs.push_back(p.eb->recv(in, Tag{t}));
    }
    Request b_send = p.eb->send(out, Tag{1});
    ASSERT_TRUE(b_send.wait(30s).is_ok()) << describe(b_send.wait(0s));
    p.eb->close();
    const Status last = b_recvs.back().wait(5s);
    if (last.code() == StatusCode::kAborted) {
      ++closed_while_coming_in;
    } else {
      EXPECT_TRUE(last.is_ok()) << describe(last);
    }
    const Status s = a_recv.wait(30s);
    ASSERT_TRUE(s.is_ok()) << describe(s);
    ASSERT_EQ(a_recv.bytes(), out.size());
    EXPECT_EQ(std::memcmp(got.data(), out.data(), out.size()), 0);
    // a's own sends end either way, without hanging: one may have been in the kernel
    // before b's close was known (a send completes locally), or fail.
    for (Request& r : a_sends) EXPECT_NE(r.wait(30s).code(), StatusCode::kTimeout);
  }
  EXPECT_EQ(closed_while_coming_in, 1) << "a's data was never still coming in at b's close";
}

TEST(Lifecycle, AChunkCutShortByAnOrderlyCloseIsStillAnOrderlyClose) {
  // A peer that closes while one of its chunks is on the wire (close() aborts that
  // operation) ends the data stream mid-chunk, after its GOODBYE. When this side
  // harvests the data stream's end first, it must read the control stream before it
  // judges: the GOODBYE there makes this an orderly close, so the eager message that
  // had arrived stays receivable and closed_by_peer() holds. To make this side see the
  // data stream first every time, its progress thread is held in a notification
  // handler while the peer (a raw socket) writes more of the chunk, so the data
  // stream's event is queued first, then GOODBYE and the control stream's FIN, then
  // the data stream's FIN.
  RawPeer p;
  ASSERT_NO_FATAL_FAILURE(accept_raw_peer(p, {}, SmallBuffer::kControl));
  raw::RmaClient& c = p.c;
  std::vector<std::byte> mem(size_t{1} << 20);
  auto region = p.ctx->register_memory(mem.data(), mem.size(), Access::kRemoteWrite);
  ASSERT_TRUE(region) << describe(region.status());
  const raw::KeyBytes key = region->remote_key().serialize();

  std::promise<void> held, release;
  std::shared_future<void> released = release.get_future().share();
  struct Release {  // whatever happens below, the progress thread is let go
    std::promise<void>& p;
    bool done = false;
    void now() {
      if (!done) p.set_value();
      done = true;
    }
    ~Release() { now(); }
  } let_go{release};
  p.ep->set_notification_handler([&held, released](const Notification& n) {
    if (n.value != 77) return;
    held.set_value();
    released.wait();
  });

  const std::vector<uint8_t> hello = {'s', 't', 'i', 'l', 'l', ' ', 'm', 'i', 'n', 'e'};
  ASSERT_EQ(c.send_control(raw::eager(5, hello)), "");
  constexpr uint32_t kLen = 256 * 1024;
  const auto bytes = numbered_bytes(kLen, 3);
  const uint64_t put_id = c.next_op_id();
  ASSERT_EQ(c.send_put_announce(put_id, key, 0, kLen), "");
  ASSERT_EQ(c.send_control(raw::chunk_frame(put_id, 0, kLen, 0, wire::ChunkKind::kPut)), "");
  ASSERT_EQ(c.send_data(0, std::span(bytes).first(1000)), "");
  ASSERT_EQ(c.send_put(c.next_op_id(), key, 4096, std::span(bytes).first(8), 77), "");
  ASSERT_EQ(held.get_future().wait_for(20s), std::future_status::ready) << "the notification handler never ran";

  ASSERT_EQ(c.send_data(0, std::span(bytes).subspan(1000, 1000)), "");
  ASSERT_EQ(c.send_control(raw::frame(6, raw::Bytes().u32(0).u32(0).bytes())), "");  // GOODBYE, closed
  ASSERT_EQ(::shutdown(c.control().fd(), SHUT_WR), 0);
  ASSERT_EQ(::shutdown(c.data(0).fd(), SHUT_WR), 0);
  let_go.now();

  const Status gone = wait_for_peer_gone(*p.ep);
  ASSERT_EQ(gone.code(), StatusCode::kPeerFailed) << describe(gone);
  EXPECT_TRUE(p.ep->closed_by_peer()) << describe(p.ep->failure());
  std::vector<std::byte> got(64);
  Request r = p.ep->recv(got, Tag{5});
  ASSERT_TRUE(r.wait(5s).is_ok()) << "the message that arrived before the close: " << describe(r.wait(0s));
  ASSERT_EQ(r.bytes(), hello.size());
  EXPECT_EQ(std::memcmp(got.data(), hello.data(), hello.size()), 0);
}

TEST(Lifecycle, AnAbortingPeerIsAFailureNotAFinish) {
  Pair p = make_pair_in_process(make_context(1), make_context(1));
  ASSERT_TRUE(p.ea && p.eb);
  const auto msg = numbered_bytes(64, 1);
  ASSERT_TRUE(p.eb->send(msg, Tag{1}).wait(5s).is_ok());
  p.eb->abort();
  EXPECT_EQ(p.eb->failure().code(), StatusCode::kAborted);
  const Status gone = wait_for_peer_gone(*p.ea);
  ASSERT_EQ(gone.code(), StatusCode::kPeerFailed) << describe(gone);
  EXPECT_NE(gone.message().find("aborted"), std::string::npos) << describe(gone);
  EXPECT_FALSE(p.ea->closed_by_peer());
  std::vector<std::byte> got(64);
  EXPECT_EQ(p.ea->recv(got, Tag{1}).wait(1s).code(), StatusCode::kPeerFailed);
}

TEST(Lifecycle, DestroyingTheContextAbortsOutstandingRequests) {
  Pair p = make_pair_in_process(make_context(2), make_context(2));
  ASSERT_TRUE(p.ea && p.eb);
  std::vector<std::byte> rbuf(1 << 20), sbuf(4 << 20, std::byte{3});
  Request r = p.eb->recv(rbuf, Tag{1});
  Request s = p.eb->send(sbuf, Tag{2});
  Request peer_side = p.ea->recv(rbuf, Tag{3});
  // The application drops everything but the request handles.
  p.eb.reset();
  p.b.reset();
  ASSERT_TRUE(r.done()) << "a request of a destroyed context is still pending";
  EXPECT_EQ(r.wait(0s).code(), StatusCode::kAborted) << describe(r.wait(0s));
  EXPECT_EQ(s.wait(0s).code(), StatusCode::kAborted) << describe(s.wait(0s));
  const Status ps = peer_side.wait(10s);
  EXPECT_TRUE(ps.code() == StatusCode::kAborted || ps.code() == StatusCode::kPeerFailed) << describe(ps);
}

/// Bytes the loopback interface has received (/proc/net/dev), or 0 if unreadable.
uint64_t loopback_rx_bytes() {
  FILE* f = std::fopen("/proc/net/dev", "r");
  if (f == nullptr) return 0;
  char line[512];
  unsigned long long rx = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    const char* p = line;
    while (*p == ' ') ++p;
    if (std::sscanf(p, "lo: %llu", &rx) == 1) break;
  }
  std::fclose(f);
  return rx;
}

TEST(Lifecycle, PeerKilledWhileWeWriteALargeMessage) {
  // SIGPIPE must not kill this process, and the send must fail, not hang. Over TCP
  // (same-host pulls off here, so the peer writes nothing to read out of us).
  const uint64_t size = uint64_t{1} << 30;  // mmap'd zero pages: cheap in every build
  ContextOptions options;
  options.streams_per_endpoint = 2;
  options.same_host_pulls = false;
  auto made = Context::create(options);
  ASSERT_TRUE(made) << describe(made.status());
  auto ctx = std::move(made).value();
  GuardedBuffer buf(size);  // content does not matter here: the receiver dies
  ASSERT_TRUE(buf.ok());
  PeerSession sess = start_listening_peer(*ctx, {"--scenario=big-recv", "--size=" + std::to_string(size),
                                                 "--close=none"});
  ASSERT_TRUE(sess.ep);
  const uint64_t lo_before = loopback_rx_bytes();
  ASSERT_GT(lo_before, 0u) << "cannot read lo's counters in /proc/net/dev";
  Request r = sess.ep->send(buf.span(), Tag{9});
  // As soon as payload flows, freeze the receiver so the transfer cannot finish, then
  // kill it: the kill lands mid-transfer, with our data streams blocked on full socket
  // buffers. Flow is seen in lo's byte counter (tests run one at a time), not in our
  // endpoint's stats: stats() takes the progress lock, which the progress thread holds
  // while it pumps, so by the time it answers the whole transfer may be over.
  const auto deadline = Clock::now() + 30s;
  while (loopback_rx_bytes() < lo_before + (8u << 20) && !r.done() && Clock::now() < deadline) {
    std::this_thread::yield();
  }
  sess.peer->signal(SIGSTOP);
  ASSERT_FALSE(r.done()) << "the 1 GiB send finished before the receiver was stopped; " << describe(r.wait(0s));
  ASSERT_GT(sess.ep->stats().chunks_sent, 0u) << "no chunks sent within 30 s";
  EXPECT_EQ(sess.ep->stats().chunks_pulled, 0u);
  EXPECT_EQ(r.wait(200ms).code(), StatusCode::kTimeout) << "the send completed while the receiver was stopped";
  sess.peer->kill_and_reap();
  const Status s = r.wait(30s);
  EXPECT_EQ(s.code(), StatusCode::kPeerFailed) << describe(s);
  EXPECT_TRUE(sess.ep->failed());
}

TEST(Lifecycle, PeerKilledWhileItPullsALargeMessageOutOfUs) {
  // Same-host pulls: the receiver reads the message out of our memory, 8 chunks at a
  // time, and the send completes only at the last PULLED. Stopped mid-transfer, then
  // killed: the send fails with peer_failed, it does not hang. (Here the transfer needs
  // hundreds of PULL round trips, so stopping it once the first chunks went cannot miss.)
  const uint64_t size = uint64_t{1} << 30;
  auto ctx = make_context(2);
  ASSERT_TRUE(ctx);
  GuardedBuffer buf(size);
  ASSERT_TRUE(buf.ok());
  PeerSession sess =
      start_listening_peer(*ctx, {"--scenario=big-recv", "--size=" + std::to_string(size), "--close=none"});
  ASSERT_TRUE(sess.ep);
  Request r = sess.ep->send(buf.span(), Tag{9});
  const auto deadline = Clock::now() + 30s;
  while (sess.ep->stats().chunks_pulled == 0 && !r.done() && Clock::now() < deadline) std::this_thread::yield();
  sess.peer->signal(SIGSTOP);
  ASSERT_FALSE(r.done()) << "the 1 GiB send finished before the receiver was stopped; " << describe(r.wait(0s));
  ASSERT_GT(sess.ep->stats().chunks_pulled, 0u)
      << "no chunk announced as a pull within 30 s: " << sess.ep->stats().same_host_reason;
  EXPECT_EQ(r.wait(200ms).code(), StatusCode::kTimeout) << "the send completed while the receiver was stopped";
  sess.peer->kill_and_reap();
  const Status s = r.wait(30s);
  EXPECT_EQ(s.code(), StatusCode::kPeerFailed) << describe(s);
  EXPECT_TRUE(sess.ep->failed());
}

TEST(Lifecycle, OneContextManyPeersOneDies) {
  auto ctx = make_context(2);
  ASSERT_TRUE(ctx);
  auto lr = ctx->listen("127.0.0.1:0");
  ASSERT_TRUE(lr) << describe(lr.status());
  auto listener = std::move(lr).value();
  const std::string address = "--address=127.0.0.1:" + std::to_string(listener->port());
  const size_t count = scaled<size_t>(1500, 300);

  // Accept right after each spawn so endpoint i belongs to peer i.
  std::vector<std::unique_ptr<Process>> peers;
  std::vector<std::shared_ptr<Endpoint>> eps;
  auto add_peer = [&](std::vector<std::string> args) {
    args.push_back("--role=connect");
    args.push_back(address);
    peers.push_back(spawn_peer(std::move(args)));
    auto a = listener->accept(20s);
    ASSERT_TRUE(a) << describe(a.status());
    eps.push_back(std::move(a).value());
  };
  for (int i = 0; i < 2; ++i) {
    add_peer({"--scenario=exchange", "--side=1", "--seed=" + std::to_string(300 + i), "--count=" + std::to_string(count),
              "--max-size=1048576", "--close=initiate"});
  }
  add_peer({"--scenario=exchange", "--side=1", "--seed=399", "--count=1000000", "--peer-count=0",
            "--fixed-size=262144", "--tags=1", "--close=none"});
  ASSERT_EQ(eps.size(), 3u);

  std::vector<std::string> errors(2);
  std::vector<std::thread> workers;
  std::atomic<int> finished{0};
  for (int i = 0; i < 2; ++i) {
    workers.emplace_back([&, i] {
      PlanOptions po{.seed = 300u + i, .direction = 0, .count = count, .max_size = 1 << 20, .fixed_size = 0, .tags = 4};
      const Plan out = make_plan(po);
      po.direction = 1;
      const Plan in = make_plan(po);
      errors[i] = run_exchange(*eps[i], out, in, {}).error;
      if (errors[i].empty()) errors[i] = close_handshake(*eps[i], false, 30s);
      ++finished;
    });
  }
  // Meanwhile: receive from the doomed peer, kill it after a few messages.
  const Plan doomed_in =
      make_plan({.seed = 399, .direction = 1, .count = 64, .max_size = 0, .fixed_size = 262144, .tags = 1});
  std::vector<std::vector<std::byte>> bufs(64, std::vector<std::byte>(262144));
  std::vector<Request> rs;
  for (size_t i = 0; i < 64; ++i) rs.push_back(eps[2]->recv(bufs[i], doomed_in.messages[i].tag));
  for (size_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(rs[i].wait(30s).is_ok());
    EXPECT_EQ(std::memcmp(bufs[i].data(), doomed_in.content(doomed_in.messages[i]).data(), 262144), 0);
  }
  std::byte never[8];
  Request sentinel = eps[2]->recv(never, kNeverTag);  // can only end by failing
  peers[2]->kill_and_reap();
  const Status ss = sentinel.wait(30s);
  EXPECT_EQ(ss.code(), StatusCode::kPeerFailed) << "receive pending on the killed peer's endpoint: " << describe(ss);
  for (Request& r : rs) {
    const Status s = r.wait(30s);
    EXPECT_TRUE(s.is_ok() || s.code() == StatusCode::kPeerFailed) << describe(s);
  }
  EXPECT_TRUE(eps[2]->failed());
  for (auto& w : workers) w.join();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(errors[i], "") << "exchange with healthy peer " << i;
    EXPECT_FALSE(eps[i]->failed() && !errors[i].empty());
  }
  eps.clear();
  expect_peer_success(*peers[0]);
  expect_peer_success(*peers[1]);
}

}  // namespace
}  // namespace remora::itest
