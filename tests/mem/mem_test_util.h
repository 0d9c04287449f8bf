// tests/mem/mem_test_util.h — helpers shared by the mem layer's tests: anonymous
// mappings that clean up after themselves, and the process's locked-memory counter.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

namespace remora::testing {

/// An anonymous private mapping, unmapped on destruction.
class Mapping {
 public:
  explicit Mapping(size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
  }
  ~Mapping() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  std::byte* data() const { return base_; }
  size_t size() const { return bytes_; }
  /// Unmaps [offset, offset+len) inside the mapping (makes a hole).
  bool punch(size_t offset, size_t len) { return munmap(base_ + offset, len) == 0; }

 private:
  std::byte* base_ = nullptr;
  size_t bytes_ = 0;
};

inline size_t page_bytes() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

/// VmLck from /proc/self/status, in KiB; -1 if it cannot be read.
inline long locked_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmLck:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

}  // namespace remora::testing
