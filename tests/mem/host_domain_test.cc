// Tests for the host memory domain: range validation, pinning per PinMode (checked
// against the kernel's VmLck counter) and the RLIMIT_MEMLOCK refusal path.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "mem/mem_test_util.h"
#include "remora/memory.h"

namespace remora {
namespace {

using testing::locked_kib;
using testing::Mapping;
using testing::page_bytes;

constexpr Access kRw = Access::kLocalWrite | Access::kRemoteRead | Access::kRemoteWrite;

TEST(HostDomain, OwnsNonNullRangesThatDoNotWrap) {
  MemoryDomain& host = host_domain();
  int x = 0;
  EXPECT_EQ(host.kind(), MemoryKind::kHost);
  EXPECT_EQ(host.name(), "host");
  EXPECT_TRUE(host.owns(&x, sizeof(x)));
  EXPECT_FALSE(host.owns(nullptr, 16));
  // NOLINTNEXTLINE(performance-no-int-to-ptr)
  EXPECT_FALSE(host.owns(reinterpret_cast<void*>(UINTPTR_MAX - 7), 16));
}

TEST(HostDomain, RejectsNullEmptyAndWrappingRanges) {
  MemoryRegistry registry(PinMode::kTry);
  Mapping map(page_bytes());
  ASSERT_NE(map.data(), nullptr);

  auto null_ptr = registry.register_memory(nullptr, 4096, kRw);
  EXPECT_EQ(null_ptr.status().code(), StatusCode::kInvalidArgument);
  auto empty = registry.register_memory(map.data(), 0, kRw);
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  // NOLINTNEXTLINE(performance-no-int-to-ptr)
  auto wrapping = registry.register_memory(reinterpret_cast<void*>(UINTPTR_MAX - 4095), 8192, kRw);
  EXPECT_EQ(wrapping.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrapping.status().message().find("wraps"), std::string::npos) << wrapping.status().to_string();

  // The domain hook checks the same things on its own.
  EXPECT_EQ(host_domain().register_range(nullptr, 1, PinMode::kOff).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(host_domain().register_range(map.data(), 0, PinMode::kOff).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.stats().registrations, 0u);
}

TEST(HostDomain, RejectsUnmappedMemoryAsInvalidArgument) {
  const size_t page = page_bytes();
  Mapping map(3 * page);
  ASSERT_NE(map.data(), nullptr);
  ASSERT_TRUE(map.punch(page, page));  // [page, 2*page) is now a hole

  for (PinMode mode : {PinMode::kOff, PinMode::kTry, PinMode::kRequire}) {
    MemoryRegistry registry(mode);
    auto whole = registry.register_memory(map.data(), 3 * page, kRw);
    ASSERT_FALSE(whole.is_ok());
    EXPECT_EQ(whole.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(whole.status().message().find("not mapped"), std::string::npos) << whole.status().to_string();
    // Only the last byte of the range falls in the hole.
    auto tail = registry.register_memory(map.data(), page + 1, kRw);
    EXPECT_EQ(tail.status().code(), StatusCode::kInvalidArgument);
    // The pages around the hole are fine.
    auto head = registry.register_memory(map.data(), page, kRw);
    EXPECT_TRUE(head.is_ok()) << head.status().to_string();
    auto after = registry.register_memory(map.data() + 2 * page, page, kRw);
    EXPECT_TRUE(after.is_ok()) << after.status().to_string();
    EXPECT_EQ(registry.stats().pin_failures, 0u);
  }
}

TEST(HostDomain, RequirePinsAndDeregistrationUnpins) {
  constexpr size_t kBytes = size_t{1} << 20;
  Mapping map(kBytes);
  ASSERT_NE(map.data(), nullptr);
  const long before = locked_kib();
  ASSERT_GE(before, 0);

  MemoryRegistry registry(PinMode::kRequire);
  auto region = registry.register_memory(map.data(), kBytes, kRw);
  ASSERT_TRUE(region.is_ok()) << region.status().to_string();
  EXPECT_TRUE(region->pinned());
  EXPECT_EQ(locked_kib(), before + 1024);
  EXPECT_EQ(registry.stats().bytes_pinned, kBytes);

  region->deregister();
  EXPECT_FALSE(region->valid());
  EXPECT_EQ(locked_kib(), before);
  EXPECT_EQ(registry.stats().bytes_pinned, 0u);
}

TEST(HostDomain, PagesSharedByTwoRegionsStayLockedUntilBothAreGone) {
  constexpr size_t kBytes = size_t{256} << 10;
  Mapping map(kBytes);
  ASSERT_NE(map.data(), nullptr);
  const long before = locked_kib();
  MemoryRegistry registry(PinMode::kRequire);

  // The same memory twice: two regions, one set of locked pages.
  auto first = registry.register_memory(map.data(), kBytes, kRw);
  auto second = registry.register_memory(map.data(), kBytes, kRw);
  ASSERT_TRUE(first.is_ok() && second.is_ok());
  EXPECT_NE(first->id(), second->id());
  EXPECT_EQ(locked_kib(), before + 256);
  first->deregister();
  EXPECT_EQ(locked_kib(), before + 256) << "deregistering one region unlocked pages the other still uses";
  second->deregister();
  EXPECT_EQ(locked_kib(), before);

  // Two small unaligned regions in one page, plus one spanning a page boundary.
  const size_t page = page_bytes();
  auto a = registry.register_memory(map.data() + 16, 100, kRw);
  auto b = registry.register_memory(map.data() + 200, 100, kRw);
  auto c = registry.register_memory(map.data() + page - 8, 16, kRw);
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  const long page_kib = static_cast<long>(page / 1024);
  EXPECT_EQ(locked_kib(), before + 2 * page_kib);
  a->deregister();
  EXPECT_EQ(locked_kib(), before + 2 * page_kib);
  c->deregister();
  EXPECT_EQ(locked_kib(), before + page_kib);
  b->deregister();
  EXPECT_EQ(locked_kib(), before);
}

TEST(HostDomain, OffModeValidatesButDoesNotPin) {
  constexpr size_t kBytes = size_t{128} << 10;
  Mapping map(kBytes);
  const long before = locked_kib();
  MemoryRegistry registry(PinMode::kOff);
  auto region = registry.register_memory(map.data(), kBytes, kRw);
  ASSERT_TRUE(region.is_ok());
  EXPECT_FALSE(region->pinned());
  EXPECT_EQ(locked_kib(), before);
  EXPECT_EQ(registry.stats().pin_failures, 0u);
  EXPECT_EQ(registry.stats().bytes_pinned, 0u);
  EXPECT_EQ(registry.stats().bytes_registered, kBytes);
}

TEST(HostDomain, CopiesCompleteImmediately) {
  std::vector<std::byte> src(1000), dst(1000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 7);
  auto to = host_domain().copy_to_host(dst.data(), src.data(), src.size());
  ASSERT_TRUE(to.is_ok());
  EXPECT_TRUE((*to)->test().is_ok());
  EXPECT_TRUE((*to)->wait(Duration::zero()).is_ok());
  EXPECT_EQ(src, dst);

  std::vector<std::byte> back(1000);
  auto from = host_domain().copy_from_host(back.data(), dst.data(), dst.size());
  ASSERT_TRUE(from.is_ok());
  EXPECT_TRUE((*from)->test().is_ok());
  EXPECT_EQ(back, src);
  EXPECT_EQ(host_domain().copy_to_host(nullptr, src.data(), 4).status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// RLIMIT_MEMLOCK refusal, in a child without CAP_IPC_LOCK.
// ---------------------------------------------------------------------------

enum ChildExit : int {
  kChildOk = 0,
  kCapgetFailed = 10,
  kCapsetFailed,
  kSetrlimitFailed,
  kMmapFailed,
  kRequireNotRefused,
  kRequireWrongCode,
  kRequireMessageMissesLimit,
  kTryFailed,
  kTryPinned,
  kTryPinFailuresWrong,
  kWarningMissing,
  kWarningRepeated,
  kRedirectFailed,
};

int count_occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string read_fd(int fd) {
  std::string out;
  lseek(fd, 0, SEEK_SET);
  char buf[4096];
  ssize_t n = 0;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

int memlock_child() {
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  header.pid = 0;
  __user_cap_data_struct caps[2]{};
  if (syscall(SYS_capget, &header, caps) != 0) return kCapgetFailed;
  caps[CAP_TO_INDEX(CAP_IPC_LOCK)].effective &= ~CAP_TO_MASK(CAP_IPC_LOCK);
  if (syscall(SYS_capset, &header, caps) != 0) return kCapsetFailed;
  const rlimit limit{64 * 1024, 64 * 1024};
  if (setrlimit(RLIMIT_MEMLOCK, &limit) != 0) return kSetrlimitFailed;

  constexpr size_t kBytes = size_t{1} << 20;
  Mapping map(kBytes);
  if (map.data() == nullptr) return kMmapFailed;

  MemoryRegistry strict(PinMode::kRequire);
  auto refused = strict.register_memory(map.data(), kBytes, kRw);
  if (refused.is_ok()) return kRequireNotRefused;
  if (refused.status().code() != StatusCode::kNoResource) return kRequireWrongCode;
  const std::string message = refused.status().message();
  if (message.find("RLIMIT_MEMLOCK") == std::string::npos || message.find("65536") == std::string::npos ||
      message.find(std::to_string(kBytes)) == std::string::npos) {
    return kRequireMessageMissesLimit;
  }

  // Capture the warning kTry logs.
  FILE* log = tmpfile();
  if (log == nullptr || dup2(fileno(log), STDERR_FILENO) < 0) return kRedirectFailed;

  MemoryRegistry lenient(PinMode::kTry);
  auto degraded = lenient.register_memory(map.data(), kBytes, kRw);
  if (!degraded.is_ok()) return kTryFailed;
  if (degraded->pinned()) return kTryPinned;
  if (lenient.stats().pin_failures != 1 || lenient.stats().bytes_pinned != 0) return kTryPinFailuresWrong;
  auto again = lenient.register_memory(map.data(), kBytes, kRw);
  if (!again.is_ok() || again->pinned() || lenient.stats().pin_failures != 2) return kTryPinFailuresWrong;

  const std::string logged = read_fd(fileno(log));
  if (count_occurrences(logged, "RLIMIT_MEMLOCK") != 1 || logged.find("REMORA_PIN=off") == std::string::npos) {
    return logged.find("RLIMIT_MEMLOCK") == std::string::npos ? kWarningMissing : kWarningRepeated;
  }
  return kChildOk;
}

TEST(HostDomain, RlimitMemlockRefusalWithoutCapIpcLock) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0) << std::strerror(errno);
  if (pid == 0) _exit(memlock_child());
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died with signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), kChildOk) << "child failed at step " << WEXITSTATUS(status)
                                           << " (see ChildExit in this file)";
}

// A udmabuf is host memory: devmem receive into one scatters with memcpy, at once.
TEST(HostDomain, ScatterCopiesEachEntryAndEndsAtOnce) {
  std::vector<std::byte> src(64), dst(64, std::byte{0});
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i + 1);
  const ScatterEntry entries[] = {{.src_offset = 10, .length = 5, .dst_offset = 0},
                                  {.src_offset = 0, .length = 3, .dst_offset = 5}};
  auto copy = host_domain().scatter(dst.data(), src.data(), entries);
  ASSERT_TRUE(copy.is_ok());
  EXPECT_TRUE((*copy)->test().is_ok());
  const std::vector<std::byte> want = {src[10], src[11], src[12], src[13], src[14], src[0], src[1], src[2]};
  EXPECT_TRUE(std::equal(want.begin(), want.end(), dst.begin()));
  EXPECT_EQ(dst[8], std::byte{0});
}

}  // namespace
}  // namespace remora
