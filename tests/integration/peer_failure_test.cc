// A peer killed with SIGKILL in the middle of a stream of messages: every request still
// outstanding on this side completes within a bounded wait (received-in-full ones ok and
// correct, the rest kPeerFailed), the endpoint reports the failure, new operations fail
// at once, and the same Context then serves a new peer through the same listener.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <deque>

#include "itest_util.h"
#include "support/exchange.h"
#include "support/test_data.h"

namespace remora::itest {
namespace {

using Clock = std::chrono::steady_clock;

struct PostedRecv {
  const MessageSpec* m;
  std::vector<std::byte> buf;
  Request r;
};

TEST(PeerFailure, KilledPeerFailsOutstandingRequestsAndContextServesTheNext) {
  auto ctx = make_context(2);
  ASSERT_TRUE(ctx);
  auto lr = ctx->listen("127.0.0.1:0");
  ASSERT_TRUE(lr) << describe(lr.status());
  auto listener = std::move(lr).value();
  const std::string address = "--address=127.0.0.1:" + std::to_string(listener->port());

  // The doomed peer: an endless stream of 1 MiB messages on one tag (side 1 of the plan).
  const uint64_t seed = 911;
  const size_t msg = 1 << 20;
  auto doomed = spawn_peer({"--role=connect", address, "--scenario=exchange", "--side=1", "--seed=911",
                            "--count=1000000", "--peer-count=0", "--fixed-size=" + std::to_string(msg), "--tags=1",
                            "--send-window=8", "--close=none"});
  auto ar = listener->accept(std::chrono::seconds(30));
  ASSERT_TRUE(ar) << "accept: " << describe(ar.status());
  std::shared_ptr<Endpoint> ep = std::move(ar).value();

  const Plan in = make_plan({.seed = seed, .direction = 1, .count = 400, .max_size = 0, .fixed_size = msg, .tags = 1});
  std::deque<PostedRecv> posted;
  size_t next = 0;
  auto post = [&] {
    const MessageSpec& m = in.messages[next++];
    posted.push_back({&m, std::vector<std::byte>(m.size), {}});
    posted.back().r = ep->recv(posted.back().buf, m.tag);
  };
  auto verify = [&](const PostedRecv& p) {
    EXPECT_EQ(p.r.bytes(), p.m->size);
    const auto want = in.content(*p.m);
    EXPECT_EQ(std::memcmp(p.buf.data(), want.data(), p.m->size), 0) << "message #" << p.m->index << " corrupted";
  };
  for (int i = 0; i < 64; ++i) post();
  // Receive (and check) the first 20, keeping 64 posted.
  for (int i = 0; i < 20; ++i) {
    const Status s = posted.front().r.wait(std::chrono::seconds(30));
    ASSERT_TRUE(s.is_ok()) << "message #" << i << " before the kill: " << describe(s);
    verify(posted.front());
    posted.pop_front();
    post();
  }
  // Requests that can never complete normally: a receive on a tag the peer never sends,
  // and a rendezvous send the peer never receives.
  std::vector<std::byte> never_buf(64), big_send(4 << 20, std::byte{1});
  // On an early return, close the endpoint before the buffers above are freed.
  struct CloseOnExit {
    std::shared_ptr<Endpoint>& ep;
    ~CloseOnExit() {
      if (ep) ep->close();
    }
  } close_on_exit{ep};
  Request never_recv = ep->recv(never_buf, kNeverTag);
  Request never_send = ep->send(big_send, kNeverTag);

  // Many more receives than the peer can fill before the kill lands (buffers first, so
  // posting them and the kill are back to back).
  std::deque<PostedRecv> late;
  for (int i = 0; i < 256; ++i) {
    const MessageSpec& m = in.messages[next++];
    late.push_back({&m, std::vector<std::byte>(m.size), {}});
  }
  for (PostedRecv& p : late) {
    p.r = ep->recv(p.buf, p.m->tag);
    posted.push_back(std::move(p));
  }
  late.clear();

  const auto t_kill = Clock::now();
  doomed->signal(SIGKILL);
  const int st = doomed->kill_and_reap();
  EXPECT_TRUE(WIFSIGNALED(st)) << Process::describe(st);

  // Every outstanding request must complete within a bounded time. Those that succeed
  // (the bytes were already in flight) must be a prefix, in order, and correct.
  const auto deadline = t_kill + std::chrono::seconds(30);
  size_t ok = 0, failed = 0;
  bool prefix = true;
  for (PostedRecv& p : posted) {
    const Status s = p.r.wait(std::max(Clock::duration::zero(), deadline - Clock::now()));
    ASSERT_NE(s.code(), StatusCode::kTimeout) << "recv #" << p.m->index << " still pending 30 s after the kill";
    if (s.is_ok()) {
      EXPECT_TRUE(prefix) << "recv #" << p.m->index << " succeeded after an earlier one on the same tag failed";
      verify(p);
      ++ok;
    } else {
      prefix = false;
      EXPECT_EQ(s.code(), StatusCode::kPeerFailed) << "recv #" << p.m->index << ": " << describe(s);
      ++failed;
    }
  }
  const Status sn = never_recv.wait(std::max(Clock::duration::zero(), deadline - Clock::now()));
  EXPECT_EQ(sn.code(), StatusCode::kPeerFailed) << "receive on an unused tag: " << describe(sn);
  const Status ss = never_send.wait(std::max(Clock::duration::zero(), deadline - Clock::now()));
  EXPECT_EQ(ss.code(), StatusCode::kPeerFailed) << "unanswered rendezvous send: " << describe(ss);
  std::printf("[          ] after the kill: %zu receives completed ok, %zu failed, in %.0f ms\n", ok, failed,
              std::chrono::duration<double, std::milli>(Clock::now() - t_kill).count());
  EXPECT_GT(failed, 0u) << "all " << ok << " receives were filled before the kill took effect";

  EXPECT_TRUE(ep->failed());
  EXPECT_EQ(ep->failure().code(), StatusCode::kPeerFailed) << describe(ep->failure());
  // New operations on the dead endpoint fail at once.
  {
    std::byte b[8];
    Request late_recv = ep->recv(b, Tag{1});
    Request late_send = ep->send(std::span<const std::byte>(b), Tag{1});
    for (Request* r : {&late_recv, &late_send}) {
      const Status s = r->wait(std::chrono::seconds(5));
      EXPECT_TRUE(s.code() == StatusCode::kPeerFailed || s.code() == StatusCode::kAborted)
          << "operation posted on a failed endpoint: " << describe(s);
    }
  }
  posted.clear();
  ep.reset();

  // The same context and listener serve a fresh peer correctly.
  auto fresh = spawn_peer({"--role=connect", address, "--scenario=exchange", "--side=1", "--seed=912",
                           "--count=300", "--max-size=1048576", "--close=initiate"});
  auto ar2 = listener->accept(std::chrono::seconds(30));
  ASSERT_TRUE(ar2) << "accept after the kill: " << describe(ar2.status());
  std::shared_ptr<Endpoint> ep2 = std::move(ar2).value();
  PlanOptions po{.seed = 912, .direction = 0, .count = 300, .max_size = 1 << 20, .fixed_size = 0, .tags = 4};
  const Plan out2 = make_plan(po);
  po.direction = 1;
  const Plan in2 = make_plan(po);
  const ExchangeReport rep = run_exchange(*ep2, out2, in2, {});
  EXPECT_EQ(rep.error, "");
  if (rep.error.empty()) {
    EXPECT_EQ(close_handshake(*ep2, false, std::chrono::seconds(30)), "");
  }
  ep2.reset();
  expect_peer_success(*fresh);
}

}  // namespace
}  // namespace remora::itest
