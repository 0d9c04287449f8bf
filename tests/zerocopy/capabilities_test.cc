// zerocopy/capabilities: the probe behind `remora doctor` on this host's loopback: every
// answer that is not "yes" has a reason, kernel refusals keep their errno, nothing
// claims a device path that no binding proved, CUDA says it was not probed, an unknown
// interface is a clear error and turning the bind attempts off says so.
#include "remora/capabilities.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <gtest/gtest.h>

#include "zc_test_util.h"

namespace remora {
namespace {

void expect_explained(const ProbeAnswer& a, const std::string& what) {
  SCOPED_TRACE(what);
  if (a.state == ProbeAnswer::State::kYes) {
    EXPECT_FALSE(a.detail.empty()) << "a yes says what it found";
  } else {
    EXPECT_FALSE(a.reason.empty()) << "every no and unknown says why";
  }
  if (!a.kernel_message.empty()) {
    EXPECT_NE(a.error, 0) << "a kernel message comes with its errno";
  }
}

TEST(Capabilities, LoopbackIsProbedAndEveryAnswerExplained) {
  auto r = probe_capabilities({.interfaces = {"lo"}});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_FALSE(r->host.kernel.empty());
  EXPECT_NE(r->hardware_note.find("devmem-capable hardware"), std::string::npos);
  for (const auto* a : {&r->host.dmabuf_source, &r->host.netdev_family, &r->host.ethtool_family, &r->host.io_uring,
                        &r->host.msg_zerocopy, &r->host.zcrx_copy, &r->host.cuda}) {
    expect_explained(*a, "host");
  }
  EXPECT_EQ(r->host.cuda.state, ProbeAnswer::State::kUnknown);
  EXPECT_NE(r->host.cuda.reason.find("not probed yet"), std::string::npos);
  ASSERT_EQ(r->interfaces.size(), 1u);
  const InterfaceCapabilities& lo = r->interfaces[0];
  EXPECT_EQ(lo.name, "lo");
  EXPECT_GT(lo.ifindex, 0u);
  for (const auto* a : {&lo.driver, &lo.header_split, &lo.header_split_settable, &lo.ntuple, &lo.queues, &lo.devmem_rx,
                        &lo.devmem_tx, &lo.zcrx}) {
    expect_explained(*a, "lo");
  }
  // Loopback can do none of it, and says what the kernel answered.
  EXPECT_EQ(lo.header_split.state, ProbeAnswer::State::kNo);
  EXPECT_EQ(lo.ntuple.state, ProbeAnswer::State::kNo);
  EXPECT_EQ(lo.devmem_rx.state, ProbeAnswer::State::kNo);
  EXPECT_NE(lo.devmem_rx.error, 0) << lo.devmem_rx.reason;
  EXPECT_EQ(lo.devmem_tx.state, ProbeAnswer::State::kNo);
  EXPECT_EQ(lo.devmem_tx.error, EOPNOTSUPP) << lo.devmem_tx.reason;
  EXPECT_EQ(lo.devmem_tx.kernel_message, "Driver does not support netmem TX");
  EXPECT_NE(lo.zcrx.state, ProbeAnswer::State::kYes);
  EXPECT_FALSE(lo.device_path());
  EXPECT_FALSE(r->device_path_available);
  if (::geteuid() == 0) {
    EXPECT_EQ(lo.devmem_rx.error, EOPNOTSUPP) << lo.devmem_rx.reason;
  }
}

TEST(Capabilities, AnUnknownInterfaceIsAnError) {
  auto r = probe_capabilities({.interfaces = {"lo", "remora-none0"}});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'remora-none0'"), std::string::npos) << r.status().message();
}

TEST(Capabilities, WithoutBindAttemptsTheyAreUnknownAndSaySo) {
  auto r = probe_capabilities({.interfaces = {"lo"}, .try_bind = false});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  for (const auto* a : {&r->interfaces[0].devmem_rx, &r->interfaces[0].devmem_tx, &r->interfaces[0].zcrx}) {
    EXPECT_EQ(a->state, ProbeAnswer::State::kUnknown);
    EXPECT_NE(a->reason.find("not tried"), std::string::npos) << a->reason;
    EXPECT_EQ(a->error, 0);
  }
}

// The caller's own dmabuf (remora doctor exports CUDA device 0's memory): the binds are
// tried with it and the host answer names it; a note without an fd (a failed export)
// replaces "no GPU export was tried". A memfd stands in for the export here: the kernel
// refuses it at the same point it refuses a dmabuf on lo, and the answer must not call
// it a memfd, since the caller said what it is.
TEST(Capabilities, TriesTheCallersDmabufAndNamesIt) {
  const int fd = ::memfd_create("remora-test-export", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 1 << 16), 0);
  auto r = probe_capabilities({.interfaces = {"lo"}, .dmabuf_fd = fd, .dmabuf_note = "test export of 65536 bytes"});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->host.dmabuf_source.state, ProbeAnswer::State::kYes);
  EXPECT_EQ(r->host.dmabuf_source.detail, "test export of 65536 bytes");
  const InterfaceCapabilities& lo = r->interfaces[0];
  EXPECT_NE(lo.devmem_rx.state, ProbeAnswer::State::kYes);  // lo can never bind
  EXPECT_EQ(lo.devmem_rx.reason.find("memfd"), std::string::npos) << lo.devmem_rx.reason;
  EXPECT_EQ(::fcntl(fd, F_GETFD), FD_CLOEXEC) << "the caller's fd must stay open";
  ::close(fd);

  auto failed = probe_capabilities({.interfaces = {"lo"}, .try_bind = false, .dmabuf_note = "the export failed: why"});
  ASSERT_TRUE(failed.is_ok()) << failed.status().to_string();
  if (failed->host.dmabuf_source.state == ProbeAnswer::State::kNo) {  // no udmabuf or heap here
    EXPECT_NE(failed->host.dmabuf_source.reason.find("; the export failed: why"), std::string::npos)
        << failed->host.dmabuf_source.reason;
    EXPECT_EQ(failed->host.dmabuf_source.reason.find("no GPU export was tried"), std::string::npos);
  }
}

}  // namespace
}  // namespace remora
