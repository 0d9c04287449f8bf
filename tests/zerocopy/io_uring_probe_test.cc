// zerocopy/io_uring_probe: io_uring on this kernel (a plain ring, the ring zcrx needs, the
// zero-copy opcodes), and a real zcrx registration on loopback and on an interface that
// does not exist, which the kernel must refuse with an errno that comes back explained.
// In a build without liburing every probe says so instead.
#include "zerocopy/io_uring_probe.h"

#include <net/if.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <iostream>

#include <gtest/gtest.h>

#include "zc_test_util.h"

namespace remora::zerocopy {
namespace {

/// The running kernel's version as major * 100 + minor (618 for 6.18).
int kernel_version() {
  utsname u{};
  int major = 0, minor = 0;
  if (::uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &major, &minor) != 2) return 0;
  return major * 100 + minor;
}

TEST(IoUringProbe, WithoutLiburingEveryProbeSaysSo) {
  if (built_with_io_uring()) GTEST_SKIP() << "this build has liburing";
  const IoUringProbe p = probe_io_uring();
  EXPECT_EQ(p.ring.code(), StatusCode::kUnsupported);
  EXPECT_NE(p.ring.message().find("built without io_uring"), std::string::npos) << p.ring.message();
  const Status z = try_zcrx_register(1, 0);
  EXPECT_NE(z.message().find("built without io_uring"), std::string::npos) << z.message();
}

TEST(IoUringProbe, RingsAndZeroCopyOpcodesOnThisKernel) {
  if (!built_with_io_uring()) GTEST_SKIP() << "built without liburing";
  const IoUringProbe p = probe_io_uring();
  if (p.disabled_sysctl && *p.disabled_sysctl == 2) {
    // io_uring is off: the refusal must say so and name the sysctl.
    EXPECT_EQ(p.ring_refusal.err, EPERM);
    EXPECT_NE(p.ring.message().find("kernel.io_uring_disabled=0"), std::string::npos) << p.ring.message();
    return;
  }
  ASSERT_TRUE(p.ring.is_ok()) << p.ring.to_string();
  const int v = kernel_version();
  EXPECT_EQ(p.send_zc, v >= 600) << "IORING_OP_SEND_ZC came in 6.0";
  EXPECT_EQ(p.recv_zc, v >= 615) << "IORING_OP_RECV_ZC came in 6.15";
  EXPECT_EQ(p.zcrx_ring.is_ok(), v >= 601) << p.zcrx_ring.to_string();
}

TEST(IoUringProbe, ZcrxOnLoopbackIsRefusedWithAReason) {
  if (!built_with_io_uring()) GTEST_SKIP() << "built without liburing";
  KernelError refusal;
  const Status s = try_zcrx_register(::if_nametoindex("lo"), 0, &refusal);
  ASSERT_FALSE(s.is_ok()) << "the kernel gave loopback's RX queue to io_uring zcrx";
  std::cout << "[ kernel   ] zcrx on lo: " << s.to_string() << "\n";
  EXPECT_NE(refusal.err, 0);
  EXPECT_NE(s.message().find("zcrx registration of ifindex"), std::string::npos) << s.message();
  if (kernel_version() >= 615 && ::geteuid() == 0) {
    // lo has no DMA device and no queue API: the kernel stops there.
    EXPECT_EQ(refusal.err, EOPNOTSUPP) << s.to_string();
    EXPECT_EQ(s.code(), StatusCode::kUnsupported);
    EXPECT_NE(s.message().find("queue-management API"), std::string::npos) << s.message();
  }
}

TEST(IoUringProbe, ZcrxOnAnInterfaceThatDoesNotExistIsEnodev) {
  if (!built_with_io_uring()) GTEST_SKIP() << "built without liburing";
  if (kernel_version() < 615 || ::geteuid() != 0) GTEST_SKIP() << "needs zcrx (6.15) and CAP_NET_ADMIN";
  KernelError refusal;
  const Status s = try_zcrx_register(0x7ffffff0u, 0, &refusal);
  EXPECT_EQ(refusal.err, ENODEV) << s.to_string();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace remora::zerocopy
