// devmem bind-rx and bind-tx, for real, on a veth pair in private network namespaces
// (NetnsPair: created and removed by the test, addresses only inside). A thread joins the
// namespace (setns) and binds through the zerocopy layer with a memfd, the best
// descriptor this host has (it has no dmabuf exporter): the kernel must refuse, and the
// refusal must come back as a clear Status with its errno and message, never as a
// binding and never as a crash.
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "itest_util.h"
#include "net/socket.h"
#include "support/netns.h"
#include "zerocopy/kernel_error.h"
#include "zerocopy/netdev_nl.h"

namespace remora::itest {
namespace {

struct Attempt {
  Status status;
  zerocopy::KernelError refusal;
};

struct VethResults {
  std::string setup_error;
  uint32_t ifindex = 0;
  std::vector<zerocopy::NetdevQueue> queues;
  Attempt rx, tx;
};

/// Runs the attempts on a thread that has joined `ns` (network namespaces are per thread).
VethResults bind_in(const std::string& ns, const std::string& ifname) {
  VethResults out;
  std::thread t([&] {
    net::Fd nsfd(::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC));
    if (!nsfd.valid() || ::setns(nsfd.get(), CLONE_NEWNET) != 0) {
      out.setup_error = "setns into " + ns + ": " + zerocopy::errno_text(errno);
      return;
    }
    out.ifindex = ::if_nametoindex(ifname.c_str());
    net::Fd memfd(::memfd_create("remora-veth-bind", MFD_CLOEXEC));
    if (out.ifindex == 0 || !memfd.valid() || ::ftruncate(memfd.get(), 1 << 16) != 0) {
      out.setup_error = "no " + ifname + " in " + ns + ", or no memfd";
      return;
    }
    auto client = zerocopy::NetdevClient::open();
    if (client) {
      if (auto q = client->queues(out.ifindex)) out.queues = *q;
    }
    uint32_t rxq = 0;
    for (const auto& q : out.queues) {
      if (q.is_rx()) rxq = q.id;
    }
    const uint32_t queues[] = {rxq};
    auto rx = zerocopy::DevmemBinding::bind_rx(out.ifindex, memfd.get(), queues, &out.rx.refusal);
    out.rx.status = rx ? Status() : rx.status();
    if (rx) out.rx.status = Status(StatusCode::kInternal, "bound: binding id " + std::to_string(rx->id()));
    auto tx = zerocopy::DevmemBinding::bind_tx(out.ifindex, memfd.get(), &out.tx.refusal);
    out.tx.status = tx ? Status(StatusCode::kInternal, "bound: binding id " + std::to_string(tx->id())) : tx.status();
  });
  t.join();
  return out;
}

TEST(DevmemNetns, BindRxAndBindTxOnVethAreRefusedWithTheKernelsReason) {
  NetnsPair net;
  REMORA_NETNS_OR_SKIP(net);
  const VethResults r = bind_in(net.ns_a(), "rmr0");
  ASSERT_TRUE(r.setup_error.empty()) << r.setup_error;
  ASSERT_FALSE(r.queues.empty()) << "queue-get listed no queues of the veth";
  std::cout << "[ kernel   ] veth bind-rx: " << r.rx.status.to_string() << "\n"
            << "[ kernel   ] veth bind-tx: " << r.tx.status.to_string() << "\n";

  // bind-rx: veth has no queue-management ops; the kernel stops at the device.
  EXPECT_FALSE(r.rx.status.message().starts_with("bound")) << "the kernel bound a memfd to a veth RX queue";
  EXPECT_EQ(r.rx.refusal.err, EOPNOTSUPP) << r.rx.status.to_string();
  EXPECT_EQ(r.rx.status.code(), StatusCode::kUnsupported);
  EXPECT_NE(r.rx.status.message().find("the kernel refused: EOPNOTSUPP"), std::string::npos);
  EXPECT_NE(r.rx.status.message().find("cannot do devmem RX"), std::string::npos);

  // bind-tx: no netmem TX in veth, in the kernel's own words.
  EXPECT_FALSE(r.tx.status.message().starts_with("bound")) << "the kernel bound a memfd for TX on a veth";
  EXPECT_EQ(r.tx.refusal.err, EOPNOTSUPP) << r.tx.status.to_string();
  EXPECT_EQ(r.tx.refusal.message, "Driver does not support netmem TX");
  EXPECT_EQ(r.tx.status.code(), StatusCode::kUnsupported);
}

TEST(DevmemNetns, TheNamespacesLoopbackAnswersAsTheHostsDoes) {
  NetnsPair net;
  REMORA_NETNS_OR_SKIP(net);
  const VethResults r = bind_in(net.ns_b(), "lo");
  ASSERT_TRUE(r.setup_error.empty()) << r.setup_error;
  EXPECT_EQ(r.rx.refusal.err, EOPNOTSUPP) << r.rx.status.to_string();
  EXPECT_EQ(r.tx.refusal.err, EOPNOTSUPP) << r.tx.status.to_string();
}

}  // namespace
}  // namespace remora::itest
