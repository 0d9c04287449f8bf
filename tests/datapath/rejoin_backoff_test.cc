// When a retired data stream's rail is tried again: at once, once per peer timeout while
// it stays away, and with a doubling wait while it flaps (datapath/rejoin_backoff.h).
// Time is given, never waited for.
#include "datapath/rejoin_backoff.h"

#include <chrono>

#include <gtest/gtest.h>

namespace remora::detail {
namespace {

using std::chrono::seconds;
using Clock = RejoinBackoff::Clock;

TEST(RejoinBackoff, ARailThatStaysAwayIsTriedAtOnceThenOncePerPeerTimeout) {
  RejoinBackoff b(seconds(3));
  const Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(b.retired(t0));  // never up since: not a flap
  EXPECT_TRUE(b.due(t0));
  b.attempted(t0);
  EXPECT_FALSE(b.due(t0 + seconds(2)));
  EXPECT_TRUE(b.due(t0 + seconds(3)));
  b.attempted(t0 + seconds(3));
  EXPECT_FALSE(b.due(t0 + seconds(5)));
  EXPECT_TRUE(b.due(t0 + seconds(6)));
  EXPECT_EQ(b.wait(), seconds(3));
}

TEST(RejoinBackoff, EachQuickReturnDoublesTheWaitUpToItsCap) {
  RejoinBackoff b(seconds(1));
  Clock::time_point t = Clock::now();
  b.retired(t);
  b.attempted(t);
  Clock::duration expected = seconds(1);
  for (int flap = 0; flap < 10; ++flap) {
    b.rejoined(t);
    t += seconds(RejoinBackoff::kSettle - 1);  // up, but not for long
    EXPECT_TRUE(b.retired(t)) << flap;
    expected = std::min<Clock::duration>(expected * 2, seconds(RejoinBackoff::kMaxFactor));
    EXPECT_EQ(b.wait(), expected) << flap;
    EXPECT_FALSE(b.due(t + expected - seconds(1))) << flap;
    EXPECT_TRUE(b.due(t + expected)) << flap;
    t += expected;
    b.attempted(t);
    // While it stays away, attempts keep the longer pace.
    EXPECT_FALSE(b.due(t + expected - seconds(1))) << flap;
    EXPECT_TRUE(b.due(t + expected)) << flap;
  }
  EXPECT_EQ(b.wait(), seconds(RejoinBackoff::kMaxFactor));
}

TEST(RejoinBackoff, ARailThatStayedUpIsTriedAtOnceAgain) {
  RejoinBackoff b(seconds(2));
  Clock::time_point t = Clock::now();
  b.retired(t);
  b.attempted(t);
  b.rejoined(t);
  t += seconds(1);
  ASSERT_TRUE(b.retired(t));
  ASSERT_EQ(b.wait(), seconds(4));
  t += seconds(4);
  b.attempted(t);
  b.rejoined(t);
  t += seconds(2 * RejoinBackoff::kSettle);  // up long enough: settled
  EXPECT_FALSE(b.retired(t));
  EXPECT_TRUE(b.due(t));
  EXPECT_EQ(b.wait(), seconds(2));
}

}  // namespace
}  // namespace remora::detail
