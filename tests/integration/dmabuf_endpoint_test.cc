// Memory in a dmabuf (remora/dmabuf.h) through real endpoints over loopback, in one
// process (two contexts). No exporter on this host: a memfd stands in for the dmabuf
// (tests/device/dmabuf_memory_test.cc says why that is enough for these paths). A range
// of it registered as a region takes a peer's chunked put with its notification and
// serves its gets, and messages are sent from it and received into it, every byte read
// back through the descriptor; each transfer stages (no NIC binds it here) and says so.
// A range the CPU cannot map fails each of those with `unsupported` or `device_failed`
// and the reason, and the endpoint goes on.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "itest_util.h"
#include "remora/dmabuf.h"
#include "support/test_data.h"

namespace remora::itest {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kChunk = 64 * 1024;
constexpr size_t kBytes = 16 * kChunk;

int memfd_of(size_t bytes) {
  const int fd = ::memfd_create("remora-dmabuf-endpoint", MFD_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(bytes)), 0);
  return fd;
}

std::vector<std::byte> file_bytes(int fd, uint64_t offset, size_t len) {
  std::vector<std::byte> v(len);
  EXPECT_EQ(::pread(fd, v.data(), len, static_cast<off_t>(offset)), static_cast<ssize_t>(len));
  return v;
}

std::unique_ptr<Context> context_with(MemoryDomain* domain) {
  auto ctx = Context::create(ContextOptions{.streams_per_endpoint = 2, .chunk_bytes = kChunk, .ignore_env = true});
  EXPECT_TRUE(ctx.is_ok()) << describe(ctx.status());
  if (!ctx) return nullptr;
  if (domain != nullptr) {
    EXPECT_TRUE((*ctx)->add_memory_domain(*domain).is_ok());
  }
  return std::move(*ctx);
}

TEST(DmabufEndpoint, ARegionOfADmabufTakesPutsServesGetsAndMessagesMoveFromAndIntoIt) {
  const int fd = memfd_of(kBytes);
  constexpr uint64_t kOffset = 4096 + 7;
  auto mem = DmabufMemory::open(fd, kOffset, kBytes - kOffset);
  ASSERT_TRUE(mem.is_ok()) << describe(mem.status());
  DmabufMemory& m = **mem;
  {
    Pair p = make_pair_in_process(context_with(&m.domain()), context_with(nullptr));
    ASSERT_TRUE(p.ea && p.eb);
    auto region = p.a->register_memory(m.data(), m.size(), Access::kRemoteWrite | Access::kRemoteRead);
    ASSERT_TRUE(region.is_ok()) << describe(region.status());
    EXPECT_EQ(region->remote_key().kind, MemoryKind::kDmabuf);

    // A chunked put with a notification, at an odd offset; its bytes are in the descriptor.
    const uint64_t len = 3 * kChunk + 5;
    const auto data = stream_bytes(len, 1);
    ASSERT_TRUE(p.eb->put(std::span(data), region->remote_key(), 11, PutOptions{.notify = 7}).wait(60s).is_ok());
    auto n = p.ea->wait_notification(60s);
    ASSERT_TRUE(n.is_ok()) << describe(n.status());
    EXPECT_EQ(n->value, 7u);
    EXPECT_TRUE(file_bytes(fd, kOffset + 11, len) == data);
    EndpointStats st = p.ea->stats();
    EXPECT_EQ(st.device_path, "staging") << st.device_path_reason;

    // A get of what the descriptor holds, from another odd offset.
    const auto written = stream_bytes(2 * kChunk + 1, 2);
    ASSERT_EQ(::pwrite(fd, written.data(), written.size(), static_cast<off_t>(kOffset + 5 * kChunk)),
              static_cast<ssize_t>(written.size()));
    std::vector<std::byte> got(written.size());
    ASSERT_TRUE(p.eb->get(std::span(got), region->remote_key(), 5 * kChunk).wait(60s).is_ok());
    EXPECT_TRUE(got == written);

    // Messages from it and into it.
    std::vector<std::byte> host(len);
    Request r = p.eb->recv(std::span(host), Tag{1});
    ASSERT_TRUE(p.ea->send(std::span<const std::byte>(m.data() + 11, len), Tag{1}).wait(60s).is_ok());
    ASSERT_TRUE(r.wait(60s).is_ok());
    EXPECT_TRUE(host == data);
    const auto back = stream_bytes(kChunk + 3, 3);
    Request into = p.ea->recv(std::span(m.data() + 8 * kChunk, back.size()), Tag{2});
    ASSERT_TRUE(p.eb->send(std::span(back), Tag{2}).wait(60s).is_ok());
    ASSERT_TRUE(into.wait(60s).is_ok());
    EXPECT_TRUE(file_bytes(fd, kOffset + 8 * kChunk, back.size()) == back);
    st = p.ea->stats();
    EXPECT_EQ(st.device_path, "staging") << st.device_path_reason;
    EXPECT_EQ(st.staged_transfers, 2u);  // the send and the receive; the put and get were served
    EXPECT_EQ(st.served_puts, 1u);
    reset(p);
  }
  ::close(fd);
}

TEST(DmabufEndpoint, ARangeTheCpuCannotMapFailsEachCopyingTransferWithTheReason) {
  const int fd = memfd_of(kBytes);
  const int wo = ::open(fmt::format("/proc/self/fd/{}", fd).c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(wo, 0);
  auto mem = DmabufMemory::open(wo, 0, kBytes);
  ASSERT_TRUE(mem.is_ok()) << describe(mem.status());
  DmabufMemory& m = **mem;
  ASSERT_FALSE(m.mapped());
  {
    Pair p = make_pair_in_process(context_with(&m.domain()), context_with(nullptr));
    ASSERT_TRUE(p.ea && p.eb);
    auto region = p.a->register_memory(m.data(), m.size(), Access::kRemoteWrite);
    ASSERT_TRUE(region.is_ok()) << describe(region.status());
    const auto data = stream_bytes(2 * kChunk, 4);
    const Status put = p.eb->put(std::span(data), region->remote_key(), 0).wait(60s);
    EXPECT_EQ(put.code(), StatusCode::kDeviceFailed) << describe(put);
    // A message from it: its first copy (once the receiver is ready) fails, and so do
    // the send and, told so, the receive.
    std::vector<std::byte> host(kChunk);
    Request r = p.eb->recv(std::span(host), Tag{1});
    const Status sent = p.ea->send(std::span<const std::byte>(m.data(), kChunk), Tag{1}).wait(60s);
    EXPECT_EQ(sent.code(), StatusCode::kUnsupported) << describe(sent);
    const Status received = r.wait(60s);
    EXPECT_FALSE(received.is_ok());
    EXPECT_NE(received.code(), StatusCode::kTimeout) << describe(received);
    std::cout << "[ refused  ] send: " << describe(sent) << "\n[ refused  ] its receive: " << describe(received)
              << "\n[ refused  ] a put into it: " << describe(put) << "\n";
    EXPECT_NE(sent.message().find("the CPU cannot reach this dmabuf"), std::string::npos) << describe(sent);
    // The endpoint goes on with host memory.
    const auto ok = stream_bytes(100, 5);
    Request r2 = p.eb->recv(std::span(host.data(), ok.size()), Tag{2});
    ASSERT_TRUE(p.ea->send(std::span(ok), Tag{2}).wait(60s).is_ok());
    ASSERT_TRUE(r2.wait(60s).is_ok());
    EXPECT_TRUE(std::equal(ok.begin(), ok.end(), host.begin()));
    reset(p);
  }
  ::close(wo);
  ::close(fd);
}

}  // namespace
}  // namespace remora::itest
