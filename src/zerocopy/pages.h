// zerocopy/pages.h — anonymous page-aligned memory for the kernel to share with us (an
// io_uring zcrx area, a refill ring), unmapped on destruction.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <utility>

namespace remora::zerocopy {

class MappedPages {
 public:
  MappedPages() = default;
  /// `bytes` of zeroed memory; get() is null when mmap refused.
  explicit MappedPages(size_t bytes) : bytes_(bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    addr_ = p == MAP_FAILED ? nullptr : p;
  }
  ~MappedPages() {
    if (addr_ != nullptr) ::munmap(addr_, bytes_);
  }
  MappedPages(MappedPages&& o) noexcept : addr_(std::exchange(o.addr_, nullptr)), bytes_(o.bytes_) {}
  MappedPages& operator=(MappedPages&& o) noexcept {
    std::swap(addr_, o.addr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void* get() const { return addr_; }
  size_t size() const { return bytes_; }

 private:
  void* addr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace remora::zerocopy
