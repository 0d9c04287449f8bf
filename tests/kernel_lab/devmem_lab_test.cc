// devmem bind-rx and bind-tx of a REAL dmabuf (a udmabuf), in the kernel lab, on the
// interfaces a stock kernel has without hardware: loopback, and a veth pair in network
// namespaces of the test's own. The kernel's exact answers are printed and checked: both
// binds are refused with EOPNOTSUPP at the device (lo and veth have neither the queue
// API and unreadable netmem that bind-rx needs nor netmem TX), so the dmabuf itself is
// never reached; the refusal must come back as a clear Status, never as a binding. Then
// an endpoint told to send by devmem TX over loopback (REMORA_DEVMEM_IFNAME=lo) from
// DmabufMemory over a udmabuf falls back to staging, its reason carrying that refusal,
// with every byte delivered.
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "itest_util.h"
#include "lab_dmabuf.h"
#include "lab_util.h"
#include "remora/dmabuf.h"
#include "support/netns.h"
#include "support/test_data.h"
#include "zerocopy/kernel_error.h"
#include "zerocopy/netdev_nl.h"

namespace remora::lab {
namespace {

using namespace std::chrono_literals;
using itest::describe;

struct Answer {
  Status status;
  zerocopy::KernelError refusal;
  bool bound = false;
};

struct Binds {
  std::string error;  // setting up, not the kernel's answer
  uint32_t ifindex = 0;
  uint32_t rx_queue = 0;
  Answer rx, tx;
};

/// bind-rx (to the interface's last RX queue) and bind-tx of `dmabuf_fd` on `ifname`,
/// from the current thread's network namespace.
Binds bind_here(const std::string& ifname, int dmabuf_fd) {
  Binds out;
  out.ifindex = ::if_nametoindex(ifname.c_str());
  if (out.ifindex == 0) return out.error = "no interface " + ifname, out;
  auto client = zerocopy::NetdevClient::open();
  if (!client) return out.error = "netdev family: " + client.status().message(), out;
  if (!client->has_bind_rx() || !client->has_bind_tx()) return out.error = "this kernel lacks bind-rx or bind-tx", out;
  auto queues = client->queues(out.ifindex);
  if (!queues) return out.error = "queue-get: " + queues.status().message(), out;
  for (const auto& q : *queues) {
    if (q.is_rx()) out.rx_queue = q.id;
  }
  const uint32_t q[] = {out.rx_queue};
  auto rx = zerocopy::DevmemBinding::bind_rx(out.ifindex, dmabuf_fd, q, &out.rx.refusal);
  out.rx.bound = rx.is_ok();
  out.rx.status = rx ? Status::ok() : rx.status();
  auto tx = zerocopy::DevmemBinding::bind_tx(out.ifindex, dmabuf_fd, &out.tx.refusal);
  out.tx.bound = tx.is_ok();
  out.tx.status = tx ? Status::ok() : tx.status();
  return out;
}

/// The same, on a thread that joined the network namespace `ns`.
Binds bind_in(const std::string& ns, const std::string& ifname, int dmabuf_fd) {
  Binds out;
  std::thread t([&] {
    net::Fd nsfd(::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC));
    if (!nsfd.valid() || ::setns(nsfd.get(), CLONE_NEWNET) != 0) {
      out.error = "setns into " + ns + ": " + zerocopy::errno_text(errno);
      return;
    }
    out = bind_here(ifname, dmabuf_fd);
  });
  t.join();
  return out;
}

void print(const std::string& where, const Binds& b) {
  std::cout << "[ kernel   ] " << where << " bind-rx (RX queue " << b.rx_queue
            << ") of a udmabuf: " << (b.rx.bound ? "BOUND" : b.rx.refusal.to_string()) << "\n"
            << "[ kernel   ] " << where
            << " bind-tx of a udmabuf: " << (b.tx.bound ? "BOUND" : b.tx.refusal.to_string()) << "\n";
}

/// What lo and veth answer: refused at the device, before the dmabuf is looked at.
void expect_refused_at_the_device(const Binds& b) {
  EXPECT_FALSE(b.rx.bound) << "the kernel bound a dmabuf to a virtual device's RX queue";
  EXPECT_EQ(b.rx.refusal.err, EOPNOTSUPP) << b.rx.status.to_string();
  EXPECT_EQ(b.rx.status.code(), StatusCode::kUnsupported);
  EXPECT_NE(b.rx.status.message().find("cannot do devmem RX"), std::string::npos) << b.rx.status.to_string();
  EXPECT_FALSE(b.tx.bound) << "the kernel bound a dmabuf for TX on a virtual device";
  EXPECT_EQ(b.tx.refusal.err, EOPNOTSUPP) << b.tx.status.to_string();
  EXPECT_EQ(b.tx.refusal.message, "Driver does not support netmem TX");
  EXPECT_EQ(b.tx.status.code(), StatusCode::kUnsupported);
}

TEST(DevmemLab, BindsOfARealDmabufOnLoopbackAreRefusedAtTheDevice) {
  LabDmabuf buf = make_lab_dmabuf("udmabuf", 1 << 20);
  REMORA_LAB_NEEDS(buf.ok(), buf.error);
  const Binds b = bind_here("lo", buf.dmabuf.get());
  ASSERT_TRUE(b.error.empty()) << b.error;
  print("lo", b);
  expect_refused_at_the_device(b);
}

TEST(DevmemLab, BindsOfARealDmabufOnVethAreRefusedAtTheDevice) {
  LabDmabuf buf = make_lab_dmabuf("udmabuf", 1 << 20);
  REMORA_LAB_NEEDS(buf.ok(), buf.error);
  itest::NetnsPair net;
  REMORA_LAB_NEEDS(net.ok(), "network namespaces with a veth pair: " + net.error());
  const Binds b = bind_in(net.ns_a(), "rmr0", buf.dmabuf.get());
  ASSERT_TRUE(b.error.empty()) << b.error;
  print("veth", b);
  expect_refused_at_the_device(b);
}

TEST(DevmemLab, AnEndpointSendingARealDmabufByDevmemTxFallsBackToStagingWithTheReason) {
  LabDmabuf buf = make_lab_dmabuf("udmabuf", 1 << 20);
  REMORA_LAB_NEEDS(buf.ok(), buf.error);
  auto mem = DmabufMemory::open(buf.dmabuf.get(), 0, buf.size);
  ASSERT_TRUE(mem.is_ok()) << describe(mem.status());
  DmabufMemory& m = **mem;
  ASSERT_EQ(::setenv("REMORA_DEVMEM_IFNAME", "lo", 1), 0);  // read by Context::create
  auto a = Context::create(ContextOptions{.streams_per_endpoint = 2, .chunk_bytes = 64 * 1024});
  ::unsetenv("REMORA_DEVMEM_IFNAME");
  ASSERT_TRUE(a.is_ok()) << describe(a.status());
  ASSERT_TRUE((*a)->add_memory_domain(m.domain()).is_ok());
  auto b = Context::create(ContextOptions{.streams_per_endpoint = 2, .chunk_bytes = 64 * 1024, .ignore_env = true});
  ASSERT_TRUE(b.is_ok());
  itest::Pair p = itest::make_pair_in_process(std::move(*a), std::move(*b));
  ASSERT_TRUE(p.ea && p.eb);

  const auto data = itest::stream_bytes(300 * 1024 + 7, 21);
  write_in(buf, 4096, data);
  std::vector<std::byte> got(data.size());
  Request r = p.eb->recv(std::span(got), Tag{3});
  ASSERT_TRUE(p.ea->send(std::span<const std::byte>(m.data() + 4096, data.size()), Tag{3}).wait(60s).is_ok());
  ASSERT_TRUE(r.wait(60s).is_ok());
  EXPECT_TRUE(got == data);
  const EndpointStats st = p.ea->stats();
  std::cout << "[ endpoint ] device_path " << st.device_path << ": " << st.device_path_reason << "\n";
  EXPECT_EQ(st.device_path, "staging");
  EXPECT_EQ(st.devmem_transfers, 0u);
  EXPECT_EQ(st.staged_transfers, 1u);
  // The refusal of this memory's own dmabuf, in the kernel's words, and no stand-in.
  EXPECT_NE(st.device_path_reason.find("EOPNOTSUPP"), std::string::npos) << st.device_path_reason;
  EXPECT_NE(st.device_path_reason.find("Driver does not support netmem TX"), std::string::npos)
      << st.device_path_reason;
  EXPECT_EQ(st.device_path_reason.find("memfd"), std::string::npos) << st.device_path_reason;
  EXPECT_EQ(st.device_path_reason.find("cannot export"), std::string::npos) << st.device_path_reason;
  itest::reset(p);
}

}  // namespace
}  // namespace remora::lab
