// tools/perf/memory.cc — the memory kinds of benchmark buffers: parsing them, opening
// a side's device memory, and reusing its blocks.
#include "memory.h"

#include <charconv>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "perf.h"
#include "remora/cuda.h"
#include "remora/testing/test_device.h"
#include "session.h"

namespace remora::perf {
namespace internal {
namespace {

/// Address space each side's test device reserves; pages exist only once copied to.
/// Room for the largest bench sizes with distinct buffers on both directions.
constexpr size_t kTestDeviceCapacity = size_t{4} << 30;

class TestDeviceMemory final : public DeviceMemory {
 public:
  explicit TestDeviceMemory(std::unique_ptr<testing::TestDeviceDomain> device) : device_(std::move(device)) {}
  MemoryKind kind() const noexcept override { return testing::kTestDeviceKind; }
  MemoryDomain& domain() noexcept override { return *device_; }
  Status set_copy_rate(double bytes_per_second) override {
    device_->set_copy_rate(bytes_per_second);
    return Status::ok();
  }

 protected:
  Result<std::byte*> allocate_new(size_t len) override { return device_->allocate(len); }

 private:
  std::unique_ptr<testing::TestDeviceDomain> device_;
};

Result<std::unique_ptr<DeviceMemory>> open_test_device() {
  REMORA_ASSIGN_OR_RETURN(auto device, testing::TestDeviceDomain::create({.capacity = kTestDeviceCapacity}));
  return std::unique_ptr<DeviceMemory>(std::make_unique<TestDeviceMemory>(std::move(device)));
}

/// CUDA device memory of device 0, allocated with the driver (remora::cuda_allocate)
/// and freed when the benchmark side closes it. Copies run at the hardware's rate.
class CudaMemory final : public DeviceMemory {
 public:
  explicit CudaMemory(MemoryDomain& domain) : domain_(domain) {}
  ~CudaMemory() override {
    for (std::byte* p : allocated_) (void)cuda_free(p);
  }
  MemoryKind kind() const noexcept override { return MemoryKind::kCuda; }
  MemoryDomain& domain() noexcept override { return domain_; }
  Status set_copy_rate(double bytes_per_second) override {
    if (bytes_per_second == 0) return Status::ok();
    return Status(StatusCode::kInvalidArgument, "cuda memory: a GPU's copies run at the hardware's rate; "
                                                "--device-copy-rate applies to the test device only");
  }

 protected:
  Result<std::byte*> allocate_new(size_t len) override {
    REMORA_ASSIGN_OR_RETURN(void* p, cuda_allocate(len));
    allocated_.push_back(static_cast<std::byte*>(p));
    return static_cast<std::byte*>(p);
  }

 private:
  MemoryDomain& domain_;
  std::vector<std::byte*> allocated_;
};

/// The one place CUDA memory comes from: the process's CUDA domain, or the driver's
/// reason there is none.
Result<std::unique_ptr<DeviceMemory>> open_cuda() {
  auto domain = cuda_domain();
  if (!domain) {
    return Status(StatusCode::kUnsupported, fmt::format("cuda memory: {}; use host or test-device memory",
                                                        domain.status().message()));
  }
  return std::unique_ptr<DeviceMemory>(std::make_unique<CudaMemory>(**domain));
}

Result<std::unique_ptr<DeviceMemory>> open_device(MemoryKind kind) {
  if (kind == testing::kTestDeviceKind) return open_test_device();
  if (kind == MemoryKind::kCuda) return open_cuda();
  return Status(StatusCode::kUnsupported, fmt::format("{} memory: no benchmark buffers of this kind", to_string(kind)));
}

}  // namespace

DeviceBlock::DeviceBlock(DeviceBlock&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

DeviceBlock& DeviceBlock::operator=(DeviceBlock&& other) noexcept {
  if (this != &other) {
    give_back();
    owner_ = std::exchange(other.owner_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

DeviceBlock::~DeviceBlock() { give_back(); }

void DeviceBlock::give_back() noexcept {
  if (owner_ != nullptr) owner_->give_back(data_, size_);
  owner_ = nullptr;
}

Result<DeviceBlock> DeviceMemory::allocate(size_t len) {
  const size_t n = len == 0 ? 1 : len;
  if (auto it = free_.lower_bound(n); it != free_.end()) {  // the smallest that fits
    DeviceBlock block(this, it->second, it->first);
    free_.erase(it);
    return block;
  }
  REMORA_ASSIGN_OR_RETURN(std::byte * data, allocate_new(n));
  return DeviceBlock(this, data, n);
}

Status DeviceMemory::write(std::byte* device_dst, std::span<const std::byte> host_src) {
  if (host_src.empty()) return Status::ok();
  REMORA_ASSIGN_OR_RETURN(auto copy, domain().copy_from_host(device_dst, host_src.data(), host_src.size()));
  if (Status s = copy->wait(kOpTimeout); !s.is_ok()) return s.with_context("writing device memory");
  return Status::ok();
}

Status DeviceMemory::read(std::span<std::byte> host_dst, const std::byte* device_src) {
  if (host_dst.empty()) return Status::ok();
  REMORA_ASSIGN_OR_RETURN(auto copy, domain().copy_to_host(host_dst.data(), device_src, host_dst.size()));
  if (Status s = copy->wait(kOpTimeout); !s.is_ok()) return s.with_context("reading device memory back");
  return Status::ok();
}

Status memory_available(MemoryKind kind) {
  // The CUDA domain is a process singleton once built in: asking is opening.
  if (kind == MemoryKind::kCuda) return open_cuda().status();
  if (kind == MemoryKind::kHost || kind == testing::kTestDeviceKind) return Status::ok();
  return open_device(kind).status();
}

Result<DeviceMemory*> DeviceSet::open(MemoryKind kind) {
  if (kind == MemoryKind::kHost) return nullptr;
  for (const auto& m : opened_) {
    if (m->kind() == kind) return m.get();
  }
  REMORA_ASSIGN_OR_RETURN(auto memory, open_device(kind));
  if (ctx_ != nullptr) REMORA_RETURN_IF_ERROR(ctx_->add_memory_domain(memory->domain()));
  opened_.push_back(std::move(memory));
  return opened_.back().get();
}

Status DeviceSet::attach(Context& ctx) {
  for (const auto& m : opened_) REMORA_RETURN_IF_ERROR(ctx.add_memory_domain(m->domain()));
  ctx_ = &ctx;
  return Status::ok();
}

Status DeviceSet::set_copy_rate(double bytes_per_second) {
  for (const auto& m : opened_) REMORA_RETURN_IF_ERROR(m->set_copy_rate(bytes_per_second));
  return Status::ok();
}

}  // namespace internal

Result<MemoryKind> parse_bench_memory(std::string_view text) {
  for (MemoryKind k : {MemoryKind::kHost, testing::kTestDeviceKind, MemoryKind::kCuda}) {
    if (text == to_string(k)) return k;
  }
  return Status(StatusCode::kInvalidArgument,
                fmt::format("unknown memory kind '{}': use host, test-device or cuda", text));
}

Result<DeviceCopyRate> parse_device_copy_rate(std::string_view text) {
  if (text == "auto") return DeviceCopyRate{.automatic = true};
  if (auto bytes = parse_size(text)) return DeviceCopyRate{.bytes_per_second = static_cast<double>(*bytes)};
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value) || value < 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("bad copy rate '{}': use bytes per second (2500000000, 2.5e9, 0 = unlimited), "
                              "a K/M/G suffix (powers of 1024: 2G) or auto",
                              text));
  }
  return DeviceCopyRate{.bytes_per_second = value};
}

std::string to_string(const DeviceCopyRate& rate) {
  if (rate.automatic) return "auto";
  if (rate.bytes_per_second <= 0) return "unlimited";
  return fmt::format("{:.3f} GB/s", rate.bytes_per_second / 1e9);
}

}  // namespace remora::perf
