// tests/huge_pages.h — what the tests of huge-page promotion (net::HugePagePromoter,
// Config::pull_huge_pages) look at: 2 MiB-aligned anonymous memory on small pages, and
// the kernel's own account of how much of a mapping is on transparent huge pages.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace remora::testing {

constexpr size_t kHugeFrame = size_t{2} << 20;

/// `frames` 2 MiB frames of private anonymous memory starting on a 2 MiB boundary,
/// faulted in on 4 KiB pages (MADV_HUGEPAGE is not set; THP's "madvise" mode, the
/// common default, then gives it no huge page of its own accord).
class AlignedFrames {
 public:
  explicit AlignedFrames(size_t frames) : size_(frames * kHugeFrame) {
    void* p = ::mmap(nullptr, size_ + kHugeFrame, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    if (p == MAP_FAILED) return;
    base_ = static_cast<std::byte*>(p);
    const auto at = (reinterpret_cast<uintptr_t>(base_) + kHugeFrame - 1) & ~uintptr_t{kHugeFrame - 1};
    data_ = reinterpret_cast<std::byte*>(at);
  }
  ~AlignedFrames() {
    if (base_ != nullptr) ::munmap(base_, size_ + kHugeFrame);
  }
  AlignedFrames(const AlignedFrames&) = delete;
  AlignedFrames& operator=(const AlignedFrames&) = delete;
  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  std::byte* base_ = nullptr;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

/// AnonHugePages of the mapping that holds `p`, in KiB (/proc/self/smaps); -1 if none holds it.
inline long anon_huge_kib(const void* p) {
  std::ifstream in("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    unsigned long start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &start, &end) == 2) {
      inside = start <= at && at < end;
      continue;
    }
    long kib = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kib) == 1) return kib;
  }
  return -1;
}

/// The kernel's THP mode: "always", "madvise" or "never" ("never" too where unreadable).
/// Under "never" nothing is collapsed; under "always" memory may be on huge pages anyway.
inline std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::stringstream text;
  text << in.rdbuf();
  for (const char* mode : {"always", "madvise"}) {
    if (text.str().find(std::string("[") + mode + "]") != std::string::npos) return mode;
  }
  return "never";
}

}  // namespace remora::testing
