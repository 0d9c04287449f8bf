// Which path device memory takes, and the reason reported (datapath/device_path.h),
// on this machine, where no NIC does devmem TCP or zcrx:
// - between two processes (this one and remora_test_peer's device-echo, both with a
//   TestDeviceDomain): under REMORA_DEVICE_PATH=auto the messages go by staging, intact,
//   and the endpoint's stats name staging and why not devmem, with the kernel's refusal
//   of bind-tx on the interface named (lo) and the memory's refusal to export a dmabuf;
// - REMORA_DEVICE_PATH=devmem (and zcrx) demanded: the transfer fails at once with that
//   reason, the refusal is counted, and the endpoint goes on with host memory (a send of
//   device memory under zcrx, a receive path, goes as under auto: staged);
// - over a veth pair in network namespaces: the same probe inside the namespace reports
//   the veth driver's refusal of bind-tx in the kernel's words.
#include "datapath/device_path.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <xxhash.h>

#include "itest_util.h"
#include "net/socket.h"
#include "remora/testing/test_device.h"
#include "support/exchange.h"
#include "support/netns.h"
#include "support/test_data.h"
#include "zerocopy/io_uring_probe.h"

namespace remora::itest {
namespace {

using namespace std::chrono_literals;
using testing::TestDeviceDomain;

constexpr uint64_t kChunk = 64 * 1024;

/// Sets an environment variable for its lifetime (the interface is named only there).
struct EnvVar {
  const char* name;
  EnvVar(const char* n, const char* value) : name(n) { ::setenv(n, value, 1); }
  ~EnvVar() { ::unsetenv(name); }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;
};

DeviceContext device_context(ContextOptions options, bool ignore_env = true) {
  DeviceContext d;
  d.dev = TestDeviceDomain::create({.capacity = size_t{256} << 20}).value();
  options.ignore_env = ignore_env;
  auto ctx = Context::create(options);
  EXPECT_TRUE(ctx.is_ok()) << describe(ctx.status());
  if (!ctx) return d;
  d.ctx = std::move(ctx).value();
  EXPECT_TRUE(d.ctx->add_memory_domain(*d.dev).is_ok());
  return d;
}

TEST(DevicePath, AutoStagesBetweenProcessesAndSaysWhyNotDevmem) {
  const EnvVar ifname("REMORA_DEVMEM_IFNAME", "lo");
  DeviceContext mine = device_context(
      {.streams_per_endpoint = 2, .chunk_bytes = kChunk, .staging_buffers = 2, .device_path = DevicePathMode::kAuto},
      /*ignore_env=*/false);
  ASSERT_TRUE(mine.ctx);
  const uint64_t len = 5 * kChunk + 3;
  PeerSession s = start_listening_peer(*mine.ctx,
                                       {"--scenario=device-echo", "--sizes=" + std::to_string(len), "--memory=device",
                                        "--close=follow"},
                                       {"REMORA_CHUNK_SIZE=" + std::to_string(kChunk), "REMORA_DEVICE_PATH=auto",
                                        "REMORA_DEVMEM_IFNAME=lo"});
  ASSERT_TRUE(s.ep);
  const auto data = stream_bytes(len, 1);
  std::byte* out = mine.dev->allocate(len).value();
  std::byte* in = mine.dev->allocate(len).value();
  ASSERT_TRUE(mine.dev->write(out, data.data(), len).is_ok());

  ASSERT_TRUE(s.ep->send(std::span<const std::byte>(out, len), Tag{100}).wait(60s).is_ok());
  EndpointStats st = s.ep->stats();
  EXPECT_EQ(st.device_path, "staging");
  // Why not devmem TX: the memory cannot export a dmabuf, and lo refuses bind-tx.
  EXPECT_NE(st.device_path_reason.find("cannot export a dmabuf"), std::string::npos) << st.device_path_reason;
  EXPECT_NE(st.device_path_reason.find("lo: bind-tx"), std::string::npos) << st.device_path_reason;
  EXPECT_NE(st.device_path_reason.find("EOPNOTSUPP"), std::string::npos) << st.device_path_reason;

  Request back = s.ep->recv(std::span(in, len), Tag{200});
  auto line = s.peer->read_line(60s);
  ASSERT_TRUE(line);
  EXPECT_EQ(*line, "RECV 0 ok " + hex64(XXH3_64bits(data.data(), data.size())));
  ASSERT_TRUE(back.wait(60s).is_ok());
  std::vector<std::byte> got(len);
  ASSERT_TRUE(mine.dev->read(got.data(), in, len).is_ok());
  EXPECT_TRUE(got == data);

  st = s.ep->stats();
  EXPECT_EQ(st.device_path, "staging");
  // Why not devmem RX or zcrx: nothing steers and binds the data streams' queues.
  EXPECT_NE(st.device_path_reason.find("remora rxq"), std::string::npos) << st.device_path_reason;
  EXPECT_NE(st.device_path_reason.find("zcrx:"), std::string::npos) << st.device_path_reason;
  EXPECT_EQ(st.devmem_transfers, 0u);
  EXPECT_EQ(st.zcrx_transfers, 0u);
  EXPECT_EQ(st.device_path_refusals, 0u);
  EXPECT_EQ(st.staged_transfers, 2u);
  EXPECT_EQ(*s.peer->read_line(60s), "DONE");
  EXPECT_EQ(close_handshake(*s.ep, true, 30s), "");
  s.ep.reset();
  expect_peer_success(*s.peer);
}

TEST(DevicePath, ADemandedPathThatCannotBeTakenFailsTheTransferWithTheReason) {
  for (const DevicePathMode mode : {DevicePathMode::kDevmem, DevicePathMode::kZcrx}) {
    const bool devmem = mode == DevicePathMode::kDevmem;
    SCOPED_TRACE(devmem ? "devmem" : "zcrx");
    DeviceContext mine = device_context({.streams_per_endpoint = 2, .chunk_bytes = kChunk, .device_path = mode});
    ASSERT_TRUE(mine.ctx);
    Pair p = make_pair_in_process(make_context(2), std::move(mine.ctx));
    ASSERT_TRUE(p.ea && p.eb);
    std::byte* dev = mine.dev->allocate(kChunk).value();

    // devmem: no interface named, the send fails. zcrx demands only how device memory
    // is received (it is a receive path): the send goes as under auto, staged here.
    std::vector<std::byte> landed(kChunk);
    Request landing = p.ea->recv(std::span(landed), Tag{1});
    const Status sent = p.eb->send(std::span<const std::byte>(dev, kChunk), Tag{1}).wait(10s);
    if (devmem) {
      EXPECT_EQ(sent.code(), StatusCode::kUnsupported);
      EXPECT_NE(sent.message().find("REMORA_DEVICE_PATH=devmem"), std::string::npos) << sent.to_string();
      EXPECT_NE(sent.message().find("REMORA_DEVMEM_IFNAME is unset"), std::string::npos) << sent.to_string();
      const std::vector<std::byte> filler(kChunk);
      ASSERT_TRUE(p.eb->send(std::span(filler), Tag{1}).wait(10s).is_ok());  // let the receive go
      ASSERT_TRUE(landing.wait(10s).is_ok());
    } else {
      ASSERT_TRUE(sent.is_ok()) << sent.to_string();
      ASSERT_TRUE(landing.wait(10s).is_ok());
      std::vector<std::byte> want(kChunk);
      ASSERT_TRUE(mine.dev->read(want.data(), dev, kChunk).is_ok());
      EXPECT_TRUE(landed == want);
      const EndpointStats sent_st = p.eb->stats();
      EXPECT_EQ(sent_st.device_path, "staging") << sent_st.device_path_reason;
      EXPECT_NE(sent_st.device_path_reason.find("REMORA_DEVICE_PATH=zcrx: zcrx is a receive path"), std::string::npos)
          << sent_st.device_path_reason;
    }
    const Status recvd = p.eb->recv(std::span(dev, kChunk), Tag{2}).wait(10s);
    EXPECT_EQ(recvd.code(), StatusCode::kUnsupported);
    // devmem: no rxq steers the data streams; zcrx: no rxq reserves a queue for them.
    EXPECT_NE(recvd.message().find(devmem ? "REMORA_RXQ_SOCKET is unset: no `remora rxq serve` steers"
                                          : "REMORA_RXQ_SOCKET is unset: no `remora rxq serve` reserves a queue for "
                                            "this endpoint's io_uring zcrx"),
              std::string::npos)
        << recvd.to_string();

    const EndpointStats st = p.eb->stats();
    EXPECT_EQ(st.device_path_refusals, devmem ? 2u : 1u);
    EXPECT_EQ(st.device_path, "refused");
    EXPECT_EQ(st.staged_transfers, devmem ? 0u : 1u);

    // Host memory is unaffected: the endpoint goes on.
    std::vector<std::byte> a(1000, std::byte{7}), b(1000);
    Request r = p.ea->recv(std::span(b), Tag{3});
    ASSERT_TRUE(p.eb->send(std::span<const std::byte>(a), Tag{3}).wait(10s).is_ok());
    ASSERT_TRUE(r.wait(10s).is_ok());
    EXPECT_TRUE(a == b);
  }
}

// REMORA_ZCRX_MODE=copy on a kernel without device-less zcrx (before Linux 7.1, as on
// this project's machines): the endpoint's own queue is refused, its data streams are
// read plainly, a device receive that demands zcrx fails with the kernel's refusal, and
// host memory goes on, intact. (Where the kernel has it, the kernel lab's
// ZcrxCopyEndpoint tests read every stream through it instead.)
TEST(DevicePath, ZcrxCopyModeWithoutTheKernelsSupportRefusesWithItsReason) {
  zerocopy::KernelError ke;
  if (zerocopy::try_zcrx_device_less(&ke).is_ok()) {
    GTEST_SKIP() << "this kernel registers device-less zcrx queues: the kernel lab's ZcrxCopyEndpoint tests cover it";
  }
  DeviceContext mine = device_context({.streams_per_endpoint = 2,
                                       .chunk_bytes = kChunk,
                                       .device_path = DevicePathMode::kZcrx,
                                       .zcrx_mode = ZcrxMode::kCopy});
  ASSERT_TRUE(mine.ctx);
  Pair p = make_pair_in_process(make_context(2), std::move(mine.ctx));
  ASSERT_TRUE(p.ea && p.eb);
  std::byte* dev = mine.dev->allocate(4 * kChunk).value();
  const Status recvd = p.eb->recv(std::span(dev, 4 * kChunk), Tag{1}).wait(10s);
  EXPECT_EQ(recvd.code(), StatusCode::kUnsupported);
  EXPECT_NE(recvd.message().find("REMORA_ZCRX_MODE=copy: 0 of 2 data streams read by a device-less zcrx queue"),
            std::string::npos)
      << recvd.to_string();
  EXPECT_NE(recvd.message().find("ZCRX_REG_NODEV"), std::string::npos) << recvd.to_string();
  EXPECT_EQ(p.eb->stats().device_path_refusals, 1u);

  // Host memory, a message of several chunks over both data streams: intact.
  const auto data = stream_bytes(5 * kChunk + 3, 9);
  std::vector<std::byte> got(data.size());
  Request r = p.eb->recv(std::span(got), Tag{2});
  ASSERT_TRUE(p.ea->send(std::span<const std::byte>(data), Tag{2}).wait(10s).is_ok());
  ASSERT_TRUE(r.wait(10s).is_ok());
  EXPECT_TRUE(got == data);
}

// Puts and gets choose and report their path like messages, on both sides: the
// initiator for its local device memory, the target for its region of device memory.
TEST(DevicePath, PutsAndGetsReportTheirPathOnBothSides) {
  DeviceContext target = device_context({.streams_per_endpoint = 2, .chunk_bytes = kChunk});
  DeviceContext init = device_context({.streams_per_endpoint = 2, .chunk_bytes = kChunk});
  ASSERT_TRUE(target.ctx && init.ctx);
  TestDeviceDomain& tdev = *target.dev;
  TestDeviceDomain& idev = *init.dev;
  Pair p = make_pair_in_process(std::move(target.ctx), std::move(init.ctx));
  ASSERT_TRUE(p.ea && p.eb);
  const uint64_t len = 3 * kChunk + 5;
  std::byte* region_mem = tdev.allocate(len).value();
  auto region = p.a->register_memory(region_mem, len, Access::kRemoteRead | Access::kRemoteWrite);
  ASSERT_TRUE(region.is_ok()) << describe(region.status());
  std::byte* local = idev.allocate(len).value();
  const auto data = stream_bytes(len, 7);
  ASSERT_TRUE(idev.write(local, data.data(), len).is_ok());

  ASSERT_TRUE(p.eb->put(std::span<const std::byte>(local, len), region->remote_key(), 0).wait(60s).is_ok());
  std::vector<std::byte> got(len);
  ASSERT_TRUE(tdev.read(got.data(), region_mem, len).is_ok());
  EXPECT_TRUE(got == data);
  for (const Endpoint* ep : {p.ea.get(), p.eb.get()}) {
    const EndpointStats st = ep->stats();
    EXPECT_EQ(st.device_path, "staging");
    EXPECT_NE(st.device_path_reason.find("devmem"), std::string::npos) << st.device_path_reason;
    EXPECT_EQ(st.device_path_refusals, 0u);
  }
  const auto changed = stream_bytes(len, 8);
  ASSERT_TRUE(tdev.write(region_mem, changed.data(), len).is_ok());
  ASSERT_TRUE(p.eb->get(std::span<std::byte>(local, len), region->remote_key(), 0).wait(60s).is_ok());
  ASSERT_TRUE(idev.read(got.data(), local, len).is_ok());
  EXPECT_TRUE(got == changed);
  EXPECT_EQ(p.ea->stats().device_path, "staging");
  EXPECT_EQ(p.eb->stats().device_path, "staging");
}

// A path demanded by either side that cannot be taken fails the one-sided operation:
// at the initiator with the reason (kUnsupported), at the target as device_failed, and
// the target's memory is untouched.
TEST(DevicePath, ADemandedPathFailsPutsAndGetsOnEitherSide) {
  DeviceContext target = device_context({.streams_per_endpoint = 2, .chunk_bytes = kChunk,
                                         .device_path = DevicePathMode::kDevmem});
  DeviceContext init = device_context({.streams_per_endpoint = 2, .chunk_bytes = kChunk,
                                       .device_path = DevicePathMode::kDevmem});
  ASSERT_TRUE(target.ctx && init.ctx);
  TestDeviceDomain& tdev = *target.dev;
  TestDeviceDomain& idev = *init.dev;
  Pair p = make_pair_in_process(std::move(target.ctx), std::move(init.ctx));
  ASSERT_TRUE(p.ea && p.eb);
  for (const uint64_t len : {uint64_t{100}, 3 * kChunk}) {
    SCOPED_TRACE("size " + std::to_string(len));
    std::byte* region_mem = tdev.allocate(len).value();
    const std::vector<std::byte> before(len, std::byte{0x5a});
    ASSERT_TRUE(tdev.write(region_mem, before.data(), len).is_ok());
    auto region = p.a->register_memory(region_mem, len, Access::kRemoteRead | Access::kRemoteWrite);
    ASSERT_TRUE(region.is_ok()) << describe(region.status());
    std::byte* local = idev.allocate(len).value();
    // The initiator's own device memory: refused before anything is sent.
    const Status put = p.eb->put(std::span<const std::byte>(local, len), region->remote_key(), 0).wait(30s);
    EXPECT_EQ(put.code(), StatusCode::kUnsupported) << describe(put);
    EXPECT_NE(put.message().find("REMORA_DEVICE_PATH=devmem"), std::string::npos) << describe(put);
    const Status get = p.eb->get(std::span<std::byte>(local, len), region->remote_key(), 0).wait(30s);
    EXPECT_EQ(get.code(), StatusCode::kUnsupported) << describe(get);
    // Host memory at the initiator, the target's region of device memory: the target refuses.
    const std::vector<std::byte> host(len, std::byte{1});
    const Status hput = p.eb->put(std::span<const std::byte>(host), region->remote_key(), 0).wait(30s);
    EXPECT_EQ(hput.code(), StatusCode::kDeviceFailed) << describe(hput);
    std::vector<std::byte> back(len);
    const Status hget = p.eb->get(std::span<std::byte>(back), region->remote_key(), 0).wait(30s);
    EXPECT_EQ(hget.code(), StatusCode::kDeviceFailed) << describe(hget);
    std::vector<std::byte> now(len);
    ASSERT_TRUE(tdev.read(now.data(), region_mem, len).is_ok());
    EXPECT_TRUE(now == before);
  }
  EXPECT_EQ(p.eb->stats().device_path, "refused");
  EXPECT_EQ(p.ea->stats().device_path, "refused");
  EXPECT_EQ(p.ea->stats().device_path_refusals, 4u);
  EXPECT_EQ(p.eb->stats().device_path_refusals, 4u);
}

TEST(DevicePath, OnAVethInANamespaceTheKernelsRefusalOfBindTxIsTheReason) {
  NetnsPair net;
  REMORA_NETNS_OR_SKIP(net);
  std::string setup_error;
  detail::DevicePathProbe probe;
  std::string reason, exported_reason;
  std::thread t([&] {
    net::Fd nsfd(::open(("/run/netns/" + net.ns_a()).c_str(), O_RDONLY | O_CLOEXEC));
    if (!nsfd.valid() || ::setns(nsfd.get(), CLONE_NEWNET) != 0) {
      setup_error = "setns into " + net.ns_a() + " failed";
      return;
    }
    Config config;
    std::snprintf(config.devmem_ifname.data(), config.devmem_ifname.size(), "%s", "rmr0");
    probe = detail::probe_device_paths(config);
    auto dev = TestDeviceDomain::create({.capacity = size_t{1} << 20}).value();
    detail::DevicePathSelector selector(config);
    std::byte* mem = dev->allocate(4096).value();
    auto choice = selector.choose(*dev, mem, 4096, /*tx=*/true, /*drives_devmem_tx=*/true);
    reason = choice ? choice->reason : choice.status().to_string();
    // The test device's memfd offered as the dmabuf: the real bind-tx of it on veth.
    auto exporting = TestDeviceDomain::create({.capacity = size_t{1} << 20, .export_memfd = true}).value();
    detail::DevicePathSelector second(config);
    std::byte* emem = exporting->allocate(8192).value();
    auto bound = second.choose(*exporting, emem + 100, 5000, /*tx=*/true, /*drives_devmem_tx=*/true);
    exported_reason = bound ? bound->reason : bound.status().to_string();
  });
  t.join();
  ASSERT_TRUE(setup_error.empty()) << setup_error;
  EXPECT_EQ(probe.devmem_tx_interface.code(), StatusCode::kUnsupported);
  EXPECT_NE(probe.devmem_tx_interface.message().find("rmr0: bind-tx"), std::string::npos)
      << probe.devmem_tx_interface.to_string();
  EXPECT_NE(probe.devmem_tx_interface.message().find("Driver does not support netmem TX"), std::string::npos)
      << probe.devmem_tx_interface.to_string();
  EXPECT_NE(probe.devmem_rx.message().find("remora rxq"), std::string::npos);
  EXPECT_NE(reason.find("Driver does not support netmem TX"), std::string::npos) << reason;
  EXPECT_NE(reason.find("REMORA_DEVICE_PATH=auto"), std::string::npos) << reason;
  EXPECT_NE(exported_reason.find("interface: rmr0: bind-tx of a test-device dmabuf"), std::string::npos)
      << exported_reason;
  EXPECT_NE(exported_reason.find("Driver does not support netmem TX"), std::string::npos) << exported_reason;
}

}  // namespace
}  // namespace remora::itest
