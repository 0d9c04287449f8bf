// Tests of remora/dmabuf.h, memory in a dmabuf, on a host with no dmabuf exporter (no
// udmabuf, no DMA-BUF heap, no GPU): a memfd stands in for the dmabuf. It is what the
// code needs of a dmabuf here (a size, mmap; DMA_BUF_IOCTL_SYNC it refuses with ENOTTY,
// which leaves nothing to synchronise), and the object says it is not one. Checked: the
// range's bytes are the descriptor's at its offset, both ways; copies to and from host
// memory and scatters land in the descriptor; the export is the descriptor itself at
// the right offset; a descriptor the CPU cannot map (a write-only reopening) still names
// its range, exports it, and refuses every CPU copy with the reason; bad descriptors,
// empty and out-of-range ranges are refused with their codes.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "remora/dmabuf.h"

namespace remora {
namespace {

constexpr size_t kBytes = 64 * 4096;

std::vector<std::byte> pattern(size_t n, uint32_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed * 7) & 0xff);
  return v;
}

/// A memfd of kBytes holding pattern(kBytes, 1).
int stand_in_fd() {
  const int fd = ::memfd_create("remora-dmabuf-test", MFD_CLOEXEC);
  EXPECT_GE(fd, 0);
  const auto bytes = pattern(kBytes, 1);
  EXPECT_EQ(::pwrite(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(kBytes));
  return fd;
}

std::vector<std::byte> file_bytes(int fd, size_t offset, size_t len) {
  std::vector<std::byte> v(len);
  EXPECT_EQ(::pread(fd, v.data(), len, static_cast<off_t>(offset)), static_cast<ssize_t>(len));
  return v;
}

TEST(DmabufMemory, ARangeIsTheDescriptorsBytesAtItsOffsetBothWays) {
  const int fd = stand_in_fd();
  constexpr uint64_t kOffset = 3 * 4096 + 100;  // not page-aligned
  constexpr uint64_t kLen = 20000;
  auto mem = DmabufMemory::open(fd, kOffset, kLen);
  ASSERT_TRUE(mem.is_ok()) << mem.status().to_string();
  DmabufMemory& m = **mem;
  EXPECT_TRUE(m.mapped());
  EXPECT_FALSE(m.is_dmabuf());  // a memfd: the kernel names no exporter
  EXPECT_EQ(m.exporter(), "");
  EXPECT_EQ(m.size(), kLen);
  EXPECT_EQ(m.domain().kind(), MemoryKind::kDmabuf);
  EXPECT_EQ(m.domain().name(), "dmabuf");
  const auto all = pattern(kBytes, 1);
  EXPECT_TRUE(std::equal(m.data(), m.data() + kLen, all.begin() + kOffset));

  // Copies out of it and into it go through the descriptor.
  std::vector<std::byte> out(kLen);
  auto c = m.domain().copy_to_host(out.data(), m.data(), kLen);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_TRUE((*c)->wait(std::chrono::seconds(1)).is_ok());
  EXPECT_TRUE(std::equal(out.begin(), out.end(), all.begin() + kOffset));
  const auto in = pattern(5000, 2);
  ASSERT_TRUE(m.domain().copy_from_host(m.data() + 7, in.data(), in.size()).is_ok());
  EXPECT_TRUE(file_bytes(fd, kOffset + 7, in.size()) == in);
  // A scatter within it.
  const ScatterEntry e[] = {{.src_offset = 0, .length = 100, .dst_offset = 10000},
                            {.src_offset = 100, .length = 50, .dst_offset = 15000}};
  ASSERT_TRUE(m.domain().scatter(m.data(), m.data(), e).is_ok());
  const auto now = file_bytes(fd, kOffset, kLen);
  EXPECT_TRUE(std::equal(now.begin() + 10000, now.begin() + 10100, now.begin()));
  EXPECT_TRUE(std::equal(now.begin() + 15000, now.begin() + 15050, now.begin() + 100));

  // Its export is the descriptor itself, at the range's place in it.
  auto ex = m.domain().export_dmabuf(m.data() + 64, 128);
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  struct stat a = {}, b = {};
  ASSERT_EQ(::fstat(ex->fd, &a), 0);
  ASSERT_EQ(::fstat(fd, &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(ex->offset, kOffset + 64);
  EXPECT_EQ(ex->length, 128u);
  ::close(ex->fd);

  // It owns exactly its range.
  EXPECT_TRUE(m.domain().owns(m.data(), kLen));
  EXPECT_FALSE(m.domain().owns(m.data(), kLen + 1));
  EXPECT_FALSE(m.domain().owns(m.data() - 1, 1));
  EXPECT_TRUE(m.domain().register_range(m.data() + 1, kLen - 1, PinMode::kRequire).is_ok());
  EXPECT_EQ(m.domain().register_range(m.data(), kLen + 1, PinMode::kTry).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.domain().export_dmabuf(m.data(), kLen + 1).status().code(), StatusCode::kInvalidArgument);
  ::close(fd);  // the object holds its own duplicate
  EXPECT_TRUE(std::equal(m.data(), m.data() + 7, all.begin() + kOffset));
}

TEST(DmabufMemory, ADescriptorTheCpuCannotMapIsExportedButNeverCopied) {
  const int fd = stand_in_fd();
  // Reopened write-only: mmap with PROT_READ refuses it (EACCES), as GPU drivers refuse
  // to map their dmabufs for the CPU.
  const int wo = ::open(fmt::format("/proc/self/fd/{}", fd).c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(wo, 0);
  auto mem = DmabufMemory::open(wo, 4096, 8192);
  ASSERT_TRUE(mem.is_ok()) << mem.status().to_string();
  DmabufMemory& m = **mem;
  EXPECT_FALSE(m.mapped());
  EXPECT_NE(m.unmapped_reason().find("mmap"), std::string::npos) << m.unmapped_reason();
  EXPECT_NE(m.data(), nullptr);
  EXPECT_TRUE(m.domain().owns(m.data(), 8192));
  std::vector<std::byte> host(100);
  auto c = m.domain().copy_to_host(host.data(), m.data(), host.size());
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(c.status().message().find("the CPU cannot reach this dmabuf"), std::string::npos) << c.status().to_string();
  EXPECT_EQ(m.domain().copy_from_host(m.data(), host.data(), host.size()).status().code(), StatusCode::kUnsupported);
  auto ex = m.domain().export_dmabuf(m.data() + 10, 20);
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  EXPECT_EQ(ex->offset, 4096u + 10);
  ::close(ex->fd);
  ::close(wo);
  ::close(fd);
}

TEST(DmabufMemory, BadDescriptorsAndRangesAreRefusedWithTheirCodes) {
  EXPECT_EQ(DmabufMemory::open(-1, 0, 4096).status().code(), StatusCode::kInvalidArgument);
  const int fd = stand_in_fd();
  EXPECT_EQ(DmabufMemory::open(fd, 0, 0).status().code(), StatusCode::kInvalidArgument);
  auto past = DmabufMemory::open(fd, kBytes - 10, 11);
  EXPECT_EQ(past.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(past.status().message().find("past the end"), std::string::npos) << past.status().to_string();
  EXPECT_EQ(DmabufMemory::open(fd, kBytes + 1, 1).status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(DmabufMemory::open(fd, kBytes - 10, 10).is_ok());
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  auto sock = DmabufMemory::open(sv[0], 0, 4096);  // a socket has no size
  EXPECT_EQ(sock.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(sock.status().message().find("has no size"), std::string::npos) << sock.status().to_string();
  ::close(sv[0]);
  ::close(sv[1]);
  ::close(fd);
}

}  // namespace
}  // namespace remora
