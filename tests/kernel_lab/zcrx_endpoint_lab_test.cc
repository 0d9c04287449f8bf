// Endpoints whose data streams are read by io_uring zcrx in device-less copy mode
// (REMORA_DEVICE_PATH=zcrx, REMORA_ZCRX_MODE=copy; ZCRX_REG_NODEV, Linux 7.1+), in the
// kernel lab: each endpoint registers its own queue with no NIC under it, and every
// byte of its data streams arrives through real multishot RECV_ZC completions, the
// kernel copying it into the queue's area, and goes back through the real refill ring
// and its flush control. Both sides' device memory is a real udmabuf: served chunked
// puts, chunked gets and rendezvous messages land in it by the zcrx path (the stats say
// so), host memory on the same endpoints goes through the same queue, and more bytes
// pass than the area holds, so its buffers are recycled many times. Every byte is read
// back through the udmabuf's memfd. Outside the lab, where the kernel refuses the
// registration, each test skips with that refusal (tests/integration/device_path_test.cc
// checks the refusal itself).
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "itest_util.h"
#include "lab_dmabuf.h"
#include "lab_util.h"
#include "remora/dmabuf.h"
#include "support/test_data.h"
#include "zerocopy/io_uring_probe.h"

namespace remora::lab {
namespace {

using namespace std::chrono_literals;
using itest::describe;
using itest::stream_bytes;

constexpr uint64_t kChunk = 64 * 1024;
constexpr size_t kBytes = size_t{8} << 20;
constexpr uint64_t kArea = 256 * 1024;  // the zcrx area: far less than what passes through it

std::unique_ptr<Context> copy_mode_context(MemoryDomain& domain) {
  ContextOptions o{.streams_per_endpoint = 2,
                   .chunk_bytes = kChunk,
                   .device_path = DevicePathMode::kZcrx,
                   .zcrx_area = kArea,
                   .zcrx_mode = ZcrxMode::kCopy,
                   .same_host_pulls = false,  // every chunk crosses a data stream
                   .ignore_env = true};
  auto ctx = Context::create(o);
  EXPECT_TRUE(ctx.is_ok()) << describe(ctx.status());
  if (!ctx) return nullptr;
  EXPECT_TRUE((*ctx)->add_memory_domain(domain).is_ok());
  return std::move(*ctx);
}

TEST(ZcrxCopyEndpoint, ReceivesPutsAndGetsThroughRealRecvZcIntoRealDmabufs) {
  zerocopy::KernelError ke;
  const Status nodev = zerocopy::try_zcrx_device_less(&ke);
  REMORA_LAB_NEEDS(nodev.is_ok(), "io_uring zcrx device-less mode: " + nodev.to_string());
  LabDmabuf buf_a = make_lab_dmabuf("udmabuf", kBytes);
  LabDmabuf buf_b = make_lab_dmabuf("udmabuf", kBytes);
  REMORA_LAB_NEEDS(buf_a.ok() && buf_b.ok(), "udmabuf: " + buf_a.error + buf_b.error);
  auto mem_a = DmabufMemory::open(buf_a.dmabuf.get(), 0, kBytes);
  auto mem_b = DmabufMemory::open(buf_b.dmabuf.get(), 0, kBytes);
  ASSERT_TRUE(mem_a.is_ok() && mem_b.is_ok());
  DmabufMemory& a = **mem_a;
  DmabufMemory& b = **mem_b;
  itest::Pair p = itest::make_pair_in_process(copy_mode_context(a.domain()), copy_mode_context(b.domain()));
  ASSERT_TRUE(p.ea && p.eb);
  auto region = p.a->register_memory(a.data(), a.size(), Access::kRemoteWrite | Access::kRemoteRead);
  ASSERT_TRUE(region.is_ok()) << describe(region.status());

  // Served chunked puts from b's udmabuf into a's region: a's data streams receive them.
  // 4 x 3 MiB + a few bytes: many times the area.
  uint64_t put_bytes = 0;
  for (uint64_t i = 0; i < 4; ++i) {
    const uint64_t len = (uint64_t{3} << 20) + 5 + i;
    const uint64_t at = (i % 2) * (uint64_t{4} << 20) + 11;
    const auto data = stream_bytes(len, 100 + i);
    write_in(buf_b, 17, data);
    ASSERT_TRUE(p.eb->put(std::span<const std::byte>(b.data() + 17, len), region->remote_key(), at).wait(60s).is_ok());
    ASSERT_TRUE(read_back(buf_a, at, len) == data) << "put " << i;
    put_bytes += len;
  }
  EndpointStats sa = p.ea->stats();
  EXPECT_EQ(sa.device_path, "zcrx") << sa.device_path_reason;
  EXPECT_NE(sa.device_path_reason.find("device-less"), std::string::npos) << sa.device_path_reason;
  EXPECT_GE(sa.zcrx_transfers, 4u);
  EXPECT_EQ(sa.served_puts, 4u);

  // Chunked gets of what a's udmabuf holds, into b's: b's data streams receive them.
  const auto served = stream_bytes((uint64_t{2} << 20) + 3, 7);
  write_in(buf_a, 100, served);
  for (int i = 0; i < 3; ++i) {
    const uint64_t into = (uint64_t{4} << 20) + static_cast<uint64_t>(i) * 9;
    ASSERT_TRUE(p.eb->get(std::span(b.data() + into, served.size()), region->remote_key(), 100).wait(60s).is_ok());
    ASSERT_TRUE(read_back(buf_b, into, served.size()) == served) << "get " << i;
  }
  // Rendezvous messages from a's udmabuf into b's, and from host memory into host memory
  // over the same streams.
  const auto msg = stream_bytes((uint64_t{1} << 20) + 99, 8);
  write_in(buf_a, 3, msg);
  for (int i = 0; i < 3; ++i) {
    Request r = p.eb->recv(std::span(b.data() + 1000, msg.size()), Tag{1});
    ASSERT_TRUE(p.ea->send(std::span<const std::byte>(a.data() + 3, msg.size()), Tag{1}).wait(60s).is_ok());
    ASSERT_TRUE(r.wait(60s).is_ok());
    ASSERT_TRUE(read_back(buf_b, 1000, msg.size()) == msg) << "message " << i;
  }
  std::vector<std::byte> host_in(msg.size());
  Request hr = p.eb->recv(std::span(host_in), Tag{2});
  ASSERT_TRUE(p.ea->send(std::span<const std::byte>(msg), Tag{2}).wait(60s).is_ok());
  ASSERT_TRUE(hr.wait(60s).is_ok());
  EXPECT_TRUE(host_in == msg);

  const EndpointStats sb = p.eb->stats();
  EXPECT_EQ(sb.device_path, "zcrx") << sb.device_path_reason;
  EXPECT_GE(sb.zcrx_transfers, 6u);
  std::cout << "[ zcrx     ] a: " << sa.zcrx_transfers << " transfers by zcrx (" << put_bytes
            << " bytes put); b: " << sb.zcrx_transfers << "; " << sb.device_path_reason << "\n";
  itest::reset(p);
}

}  // namespace
}  // namespace remora::lab
