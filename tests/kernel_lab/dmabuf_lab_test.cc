// DmabufMemory over real dmabufs, in the kernel lab: a udmabuf (memfd + UDMABUF_CREATE)
// and a DMA-BUF system heap buffer, each opened at an odd offset, checked to be what the
// kernel says (exporter name, mapped), then moved through every path between two
// endpoints over loopback, both sides' memory a real dmabuf: a chunked put with its
// notification and an inline put into a region of it, chunked and small gets out of it
// into the other side's dmabuf, and messages (rendezvous and eager) from one dmabuf into
// the other. Every byte is read back through a view of the buffer independent of
// DmabufMemory (the udmabuf's memfd, or a mapping of our own bracketed by
// DMA_BUF_IOCTL_SYNC). No NIC binds these, so each transfer stages and says so.
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "itest_util.h"
#include "lab_dmabuf.h"
#include "lab_util.h"
#include "remora/dmabuf.h"
#include "support/test_data.h"
#include "zerocopy/dmabuf_source.h"

namespace remora::lab {
namespace {

using namespace std::chrono_literals;
using itest::describe;
using itest::stream_bytes;

constexpr uint64_t kChunk = 64 * 1024;
constexpr size_t kBytes = 32 * kChunk;  // 2 MiB
constexpr uint64_t kOffset = 4096 + 7;  // the DmabufMemory range starts here in the buffer

std::unique_ptr<Context> context_with(MemoryDomain& domain) {
  auto ctx = Context::create(ContextOptions{.streams_per_endpoint = 2, .chunk_bytes = kChunk, .ignore_env = true});
  EXPECT_TRUE(ctx.is_ok()) << describe(ctx.status());
  if (!ctx) return nullptr;
  EXPECT_TRUE((*ctx)->add_memory_domain(domain).is_ok());
  return std::move(*ctx);
}

class DmabufLab : public ::testing::TestWithParam<std::string> {};

TEST_P(DmabufLab, TheKernelExportsItAndDmabufMemoryMapsItWithSyncBrackets) {
  LabDmabuf buf = make_lab_dmabuf(GetParam(), kBytes);
  REMORA_LAB_NEEDS(buf.ok(), buf.kind + ": " + buf.error);
  auto mem = DmabufMemory::open(buf.dmabuf.get(), kOffset, kBytes - kOffset);
  ASSERT_TRUE(mem.is_ok()) << describe(mem.status());
  DmabufMemory& m = **mem;
  EXPECT_TRUE(m.is_dmabuf());
  EXPECT_EQ(m.exporter(), GetParam() == "udmabuf" ? "udmabuf" : "system");
  ASSERT_TRUE(m.mapped()) << m.unmapped_reason();
  std::cout << "[ dmabuf   ] " << buf.kind << ": exporter \"" << m.exporter() << "\", " << m.size()
            << " bytes mapped at offset " << kOffset << "\n";

  // The domain's copies (memcpy inside DMA_BUF_IOCTL_SYNC), read back the other way.
  const auto in = stream_bytes(3 * kChunk + 1, 10);
  auto copy = m.domain().copy_from_host(m.data() + 3, in.data(), in.size());
  ASSERT_TRUE(copy.is_ok()) << describe(copy.status());
  ASSERT_TRUE((*copy)->wait(10s).is_ok());
  EXPECT_TRUE(read_back(buf, kOffset + 3, in.size()) == in);
  const auto out = stream_bytes(kChunk + 9, 11);
  write_in(buf, kOffset + 5 * kChunk, out);
  std::vector<std::byte> got(out.size());
  auto back = m.domain().copy_to_host(got.data(), m.data() + 5 * kChunk, got.size());
  ASSERT_TRUE(back.is_ok()) << describe(back.status());
  ASSERT_TRUE((*back)->wait(10s).is_ok());
  EXPECT_TRUE(got == out);
  // Outside the range: refused, nothing touched.
  EXPECT_FALSE(m.domain().copy_from_host(m.data() + m.size() - 1, in.data(), 2).is_ok());
}

TEST_P(DmabufLab, EveryTransferPathMovesBytesBetweenTwoRealDmabufs) {
  LabDmabuf buf_a = make_lab_dmabuf(GetParam(), kBytes);
  LabDmabuf buf_b = make_lab_dmabuf(GetParam(), kBytes);
  REMORA_LAB_NEEDS(buf_a.ok() && buf_b.ok(), buf_a.kind + ": " + buf_a.error + buf_b.error);
  auto mem_a = DmabufMemory::open(buf_a.dmabuf.get(), kOffset, kBytes - kOffset);
  auto mem_b = DmabufMemory::open(buf_b.dmabuf.get(), kOffset, kBytes - kOffset);
  ASSERT_TRUE(mem_a.is_ok() && mem_b.is_ok());
  DmabufMemory& a = **mem_a;
  DmabufMemory& b = **mem_b;
  itest::Pair p = itest::make_pair_in_process(context_with(a.domain()), context_with(b.domain()));
  ASSERT_TRUE(p.ea && p.eb);
  auto region = p.a->register_memory(a.data(), a.size(), Access::kRemoteWrite | Access::kRemoteRead);
  ASSERT_TRUE(region.is_ok()) << describe(region.status());
  EXPECT_EQ(region->remote_key().kind, MemoryKind::kDmabuf);

  // A chunked put from b's dmabuf into a's region at an odd offset, with a notification.
  const uint64_t len = 3 * kChunk + 5;
  const auto data = stream_bytes(len, 1);
  write_in(buf_b, kOffset + 17, data);
  ASSERT_TRUE(
      p.eb->put(std::span<const std::byte>(b.data() + 17, len), region->remote_key(), 11, PutOptions{.notify = 7})
          .wait(60s)
          .is_ok());
  auto n = p.ea->wait_notification(60s);
  ASSERT_TRUE(n.is_ok()) << describe(n.status());
  EXPECT_EQ(n->value, 7u);
  EXPECT_TRUE(read_back(buf_a, kOffset + 11, len) == data);

  // An inline put (below the eager limit) from host memory.
  const auto small = stream_bytes(100, 2);
  ASSERT_TRUE(p.eb->put(std::span(small), region->remote_key(), 4 * kChunk + 3).wait(60s).is_ok());
  EXPECT_TRUE(read_back(buf_a, kOffset + 4 * kChunk + 3, small.size()) == small);

  // Gets of what a's dmabuf holds, into b's dmabuf: chunked, and one small reply.
  const auto served = stream_bytes(2 * kChunk + 1, 3);
  write_in(buf_a, kOffset + 8 * kChunk, served);
  ASSERT_TRUE(
      p.eb->get(std::span(b.data() + 12 * kChunk, served.size()), region->remote_key(), 8 * kChunk).wait(60s).is_ok());
  EXPECT_TRUE(read_back(buf_b, kOffset + 12 * kChunk, served.size()) == served);
  ASSERT_TRUE(p.eb->get(std::span(b.data() + 16 * kChunk, 64), region->remote_key(), 8 * kChunk + 1).wait(60s).is_ok());
  EXPECT_TRUE(read_back(buf_b, kOffset + 16 * kChunk, 64) ==
              std::vector<std::byte>(served.begin() + 1, served.begin() + 65));

  // Messages from a's dmabuf into b's: a rendezvous one and an eager one.
  const auto msg = stream_bytes(5 * kChunk + 3, 4);
  write_in(buf_a, kOffset + 20 * kChunk, msg);
  Request r = p.eb->recv(std::span(b.data() + 20 * kChunk, msg.size()), Tag{1});
  ASSERT_TRUE(p.ea->send(std::span<const std::byte>(a.data() + 20 * kChunk, msg.size()), Tag{1}).wait(60s).is_ok());
  ASSERT_TRUE(r.wait(60s).is_ok());
  EXPECT_TRUE(read_back(buf_b, kOffset + 20 * kChunk, msg.size()) == msg);
  Request r2 = p.eb->recv(std::span(b.data() + 27 * kChunk, 200), Tag{2});
  ASSERT_TRUE(p.ea->send(std::span<const std::byte>(a.data() + 20 * kChunk, 200), Tag{2}).wait(60s).is_ok());
  ASSERT_TRUE(r2.wait(60s).is_ok());
  EXPECT_TRUE(read_back(buf_b, kOffset + 27 * kChunk, 200) == std::vector<std::byte>(msg.begin(), msg.begin() + 200));

  const EndpointStats sa = p.ea->stats();
  const EndpointStats sb = p.eb->stats();
  EXPECT_EQ(sa.device_path, "staging") << sa.device_path_reason;
  EXPECT_EQ(sb.device_path, "staging") << sb.device_path_reason;
  EXPECT_EQ(sa.served_puts, 2u);
  EXPECT_EQ(sa.served_gets, 2u);
  std::cout << "[ dmabuf   ] a: " << sa.staged_transfers << " staged transfers (" << sa.staged_bytes
            << " bytes); b: " << sb.staged_transfers << " (" << sb.staged_bytes << " bytes)\n";
  itest::reset(p);
}

std::string exporter_name(const ::testing::TestParamInfo<std::string>& p) {
  return p.param == "udmabuf" ? "Udmabuf" : "DmaHeap";
}
INSTANTIATE_TEST_SUITE_P(Exporters, DmabufLab, ::testing::Values("udmabuf", "dma-heap"), exporter_name);

TEST(DmabufLabSource, TheLibrarysBestDescriptorIsARealDmabuf) {
  auto src = zerocopy::best_dmabuf(1 << 20);
  ASSERT_TRUE(src.is_ok()) << describe(src.status());
  REMORA_LAB_NEEDS(src->is_dmabuf(), src->why_no_dmabuf);
  EXPECT_EQ(src->kind, zerocopy::DmabufSource::Kind::kUdmabuf) << src->describe();
  auto mem = DmabufMemory::open(src->fd.get(), 0, src->size);
  ASSERT_TRUE(mem.is_ok()) << describe(mem.status());
  EXPECT_EQ((*mem)->exporter(), "udmabuf");
}

}  // namespace
}  // namespace remora::lab
