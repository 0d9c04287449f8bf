// zerocopy/msg_zerocopy: the probe on this kernel: SO_ZEROCOPY accepted, one MSG_ZEROCOPY
// send over loopback completed on the error queue, and flagged as copied (loopback hands
// the receiver the pages, so the kernel copies them: zero copy happens on a NIC's
// transmit path only).
#include "zerocopy/msg_zerocopy.h"

#include <gtest/gtest.h>

#include "zc_test_util.h"

namespace remora::zerocopy {
namespace {

TEST(MsgZerocopy, ALoopbackSendCompletesAndIsReportedAsCopied) {
  MsgZerocopyProbe p;
  const Status s = probe_msg_zerocopy(&p);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_TRUE(p.so_zerocopy);
  EXPECT_TRUE(p.completed);
  EXPECT_TRUE(p.copied);
  EXPECT_EQ(p.first, 0u);  // the first zerocopy send of the socket
  EXPECT_EQ(p.last, 0u);
  EXPECT_EQ(p.refusal.err, 0);
}

TEST(MsgZerocopy, ProbesAreIndependent) {
  MsgZerocopyProbe a, b;
  ASSERT_TRUE(probe_msg_zerocopy(&a).is_ok());
  ASSERT_TRUE(probe_msg_zerocopy(&b).is_ok());
  EXPECT_EQ(b.first, 0u);  // a new socket, numbered from 0 again
}

}  // namespace
}  // namespace remora::zerocopy
