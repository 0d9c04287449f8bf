// The Matcher on its own: posted receives and unexpected messages queue per tag in
// order, while tags come and go (a tag's entry is taken out when its queue empties and
// the last one taken out is reused for the next tag: nothing of one tag may show up
// under another), and while posted receives move between the few kept in post order
// and the map that takes them once many wait; failing the posted receives completes
// every one of them.
#include "transport/matcher.h"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace remora::detail {
namespace {

std::unique_ptr<RecvOp> op(Tag tag) {
  auto o = std::make_unique<RecvOp>();
  o->req = RequestState::make(nullptr, tag);
  o->tag = tag;
  return o;
}

std::vector<std::byte> bytes(const std::string& s) {
  std::vector<std::byte> v(s.size());
  for (size_t i = 0; i < s.size(); ++i) v[i] = static_cast<std::byte>(s[i]);
  return v;
}

std::string text(const std::vector<std::byte>& v) {
  std::string s;
  for (std::byte b : v) s.push_back(static_cast<char>(b));
  return s;
}

TEST(Matcher, ReceivesOfOneTagMatchInPostingOrderWhileTagsComeAndGo) {
  Matcher m;
  const Tag a{1}, b{2}, c{3};
  std::unique_ptr<RecvOp> r1 = op(a);
  RecvOp* p1 = r1.get();
  EXPECT_EQ(m.post(std::move(r1)), 0u);
  EXPECT_EQ(m.take_posted(a).get(), p1);  // tag a's entry goes (and is kept aside)
  EXPECT_EQ(m.take_posted(a), nullptr);

  // Tag b takes the entry a left, then a and c need entries of their own.
  std::unique_ptr<RecvOp> r2 = op(b), r3 = op(b), r4 = op(a), r5 = op(c);
  RecvOp *p2 = r2.get(), *p3 = r3.get(), *p4 = r4.get(), *p5 = r5.get();
  m.post(std::move(r2));
  m.post(std::move(r3));
  m.post(std::move(r4));
  m.post(std::move(r5));
  EXPECT_EQ(m.take_posted(a).get(), p4);
  EXPECT_EQ(m.take_posted(a), nullptr);
  EXPECT_EQ(m.take_posted(b).get(), p2);
  EXPECT_EQ(m.take_posted(c).get(), p5);
  EXPECT_EQ(m.take_posted(b).get(), p3);
  EXPECT_EQ(m.take_posted(b), nullptr);
  EXPECT_EQ(m.take_posted(c), nullptr);

  // A ping-pong of one receive at a time, alternating two tags: each match is the
  // receive just posted for that tag.
  for (int i = 0; i < 100; ++i) {
    const Tag t = i % 2 == 0 ? a : b;
    std::unique_ptr<RecvOp> r = op(t);
    RecvOp* p = r.get();
    m.post(std::move(r));
    EXPECT_EQ(m.take_posted(i % 2 == 0 ? b : a), nullptr);
    EXPECT_EQ(m.take_posted(t).get(), p);
  }
}

TEST(Matcher, UnexpectedMessagesKeepTheirOrderPerTagWhileTagsComeAndGo) {
  Matcher m;
  const Tag a{10}, b{20};
  m.add_eager(a, bytes("first"));
  ASSERT_TRUE(m.has_unexpected(a));
  std::optional<Unexpected> u = m.take_unexpected(a);
  ASSERT_TRUE(u && u->eager);
  EXPECT_EQ(text(u->payload), "first");
  EXPECT_FALSE(m.has_unexpected(a));

  // b reuses a's entry; a gets a new one.
  ASSERT_TRUE(m.add_rts(b, /*send_id=*/7, /*length=*/1 << 20, /*max=*/1));
  m.add_eager(b, bytes("second"));
  m.add_eager(a, bytes("third"));
  EXPECT_FALSE(m.add_rts(a, 8, 1 << 20, /*max=*/1)) << "one announcement is queued already";

  u = m.take_unexpected(b);
  ASSERT_TRUE(u);
  EXPECT_FALSE(u->eager);
  EXPECT_EQ(u->send_id, 7u);
  EXPECT_EQ(u->length, uint64_t{1} << 20);
  EXPECT_TRUE(m.add_rts(a, 8, 64, /*max=*/1)) << "the announcement taken out no longer counts";
  u = m.take_unexpected(b);
  ASSERT_TRUE(u && u->eager);
  EXPECT_EQ(text(u->payload), "second");
  EXPECT_FALSE(m.has_unexpected(b));
  u = m.take_unexpected(a);
  ASSERT_TRUE(u && u->eager);
  EXPECT_EQ(text(u->payload), "third");
  u = m.take_unexpected(a);
  ASSERT_TRUE(u);
  EXPECT_FALSE(u->eager);
  EXPECT_EQ(u->send_id, 8u);
  EXPECT_FALSE(m.take_unexpected(a));
  EXPECT_FALSE(m.take_unexpected(b));
}

TEST(Matcher, ManyPostedReceivesKeepEachTagsOrderAcrossTheFewAndTheMap) {
  Matcher m;
  const Tag a{1}, b{2};
  std::vector<RecvOp*> want_a, want_b;
  auto post = [&](Tag t) {
    std::unique_ptr<RecvOp> r = op(t);
    (t == a ? want_a : want_b).push_back(r.get());
    m.post(std::move(r));
  };
  // Twenty, alternating tags: the first ones kept in order, the rest in the map.
  for (int i = 0; i < 20; ++i) post(i % 3 == 0 ? b : a);
  // One taken from the few: there is room there again, but the map still holds older
  // receives of tag a, so these go behind them.
  EXPECT_EQ(m.take_posted(a).get(), want_a.front());
  want_a.erase(want_a.begin());
  post(a);
  post(b);
  for (RecvOp* p : want_a) EXPECT_EQ(m.take_posted(a).get(), p);
  EXPECT_EQ(m.take_posted(a), nullptr);
  for (RecvOp* p : want_b) EXPECT_EQ(m.take_posted(b).get(), p);
  EXPECT_EQ(m.take_posted(b), nullptr);

  // Everything taken: the next receives are kept in order again, and match.
  want_a.clear();
  post(a);
  post(a);
  EXPECT_EQ(m.take_posted(a).get(), want_a[0]);
  EXPECT_EQ(m.take_posted(a).get(), want_a[1]);
  EXPECT_EQ(m.take_posted(a), nullptr);
}

TEST(Matcher, FailingThePostedReceivesCompletesEveryOneAfterTagsCameAndWent) {
  Matcher m;
  std::unique_ptr<RecvOp> first = op(Tag{1});
  m.post(std::move(first));
  ASSERT_NE(m.take_posted(Tag{1}), nullptr);
  std::vector<std::shared_ptr<RequestState>> reqs;
  // Twenty: some kept in post order, the rest in the map; every one fails.
  for (uint64_t t = 0; t < 20; ++t) {
    std::unique_ptr<RecvOp> r = op(Tag{t % 5});
    reqs.push_back(r->req);
    m.post(std::move(r));
  }
  EXPECT_EQ(m.fail_posted(Status(StatusCode::kPeerFailed, "gone")), 20u);
  for (const auto& r : reqs) {
    ASSERT_TRUE(r->done());
    EXPECT_EQ(r->status.code(), StatusCode::kPeerFailed);
  }
  for (uint64_t t = 0; t < 5; ++t) EXPECT_EQ(m.take_posted(Tag{t}), nullptr);
}

}  // namespace
}  // namespace remora::detail
