// tests/device/cuda_test_util.h — what the CUDA tests share: the checks that a domain
// without a driver reports the reason from every entry point; running this test binary
// again in a child process with another REMORA_CUDA_DRIVER (the driver is loaded once
// per process); and, for the tests that need a GPU, a fixture that skips with the
// driver's exact reason where there is none, device buffers, and data helpers.
#pragma once

#include <dlfcn.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "device/cuda_domain.h"
#include "device/cuda_driver.h"
#include "remora/memory.h"
#include "support/process.h"

namespace remora {
/// gtest prints StatusCode by name ("unsupported") instead of as raw bytes.
inline void PrintTo(StatusCode code, std::ostream* os) { *os << to_string(code); }
}  // namespace remora

namespace remora::device::testing {

inline constexpr auto kCopyTimeout = std::chrono::seconds(30);

/// Every MemoryDomain entry point of `domain`, which has no driver, fails with exactly
/// `reason` (or answers "no" where it cannot fail), and nothing crashes.
inline void expect_every_entry_point_reports(CudaDomain& domain, const Status& reason) {
  ASSERT_FALSE(reason.is_ok());
  EXPECT_EQ(domain.kind(), MemoryKind::kCuda);
  EXPECT_EQ(domain.name(), "cuda");
  EXPECT_EQ(domain.available(), reason);

  std::vector<std::byte> host(4096);
  EXPECT_FALSE(domain.owns(host.data(), host.size()));
  EXPECT_FALSE(domain.owns(nullptr, 1));
  EXPECT_EQ(domain.register_range(host.data(), host.size(), PinMode::kTry).status(), reason);
  EXPECT_EQ(domain.copy_to_host(host.data(), host.data() + 1024, 16).status(), reason);
  EXPECT_EQ(domain.copy_from_host(host.data(), host.data() + 1024, 16).status(), reason);
  EXPECT_EQ(domain.prepare_staging(host.data(), host.size()), reason);
  EXPECT_EQ(domain.export_dmabuf(host.data(), host.size()).status(), reason);
  const UnpackEntry entry{.src_offset = 0, .length = 16, .reserved = 0, .dst_offset = 64};
  EXPECT_EQ(domain.scatter(host.data(), host.data() + 1024, std::span(&entry, 1)).status(), reason);
  EXPECT_EQ(domain.unpack_kernel_status(host.data()), reason);
  EXPECT_EQ(domain.allocate(4096).status(), reason);
  EXPECT_EQ(domain.deallocate(host.data()), reason);
  domain.release_staging(host.data(), host.size());
  domain.deregister_range(host.data(), host.size(), DomainRegistration{});

  // Through a registry: the domain owns nothing, so registration is refused before
  // the domain is asked to register.
  MemoryRegistry registry;
  auto region = registry.register_memory(host.data(), host.size(), Access::kLocalWrite, domain);
  EXPECT_EQ(region.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(region.status().message().find("is not cuda memory"), std::string::npos) << region.status().to_string();
}

/// Runs this test binary again with `filter` as --gtest_filter and `env` ("NAME=value")
/// added to the environment; returns the wait status and everything it printed.
inline itest::CommandResult run_self(const std::string& filter, std::vector<std::string> env) {
  itest::Process child({.argv = {"/proc/self/exe", "--gtest_filter=" + filter, "--gtest_color=no"},
                        .env = std::move(env),
                        .capture_stderr = true});
  itest::CommandResult result;
  if (!child.ok()) {
    result.output = child.error();
    return result;
  }
  result.output = child.read_all(std::chrono::seconds(120));
  auto status = child.wait(std::chrono::seconds(10));
  result.status = status ? *status : child.kill_and_reap();
  return result;
}

/// The process's driver, or a GTEST_SKIP naming exactly why there is none. Use at the
/// start of a test (or SetUp) that needs a GPU: REMORA_CUDA_GPU_TEST_SETUP.
struct GpuSetup {
  const CudaDriver* driver = nullptr;
  std::string skip_reason;  // empty when a driver and a device exist
};
inline GpuSetup gpu_setup() {
  GpuSetup setup;
  auto driver = cuda_driver();
  if (!driver.is_ok()) {
    setup.skip_reason = "needs a CUDA driver and GPU: " + driver.status().message();
    return setup;
  }
  int count = 0;
  const cu::CUresult r = (*driver)->cuDeviceGetCount(&count);
  if (r != cu::CUDA_SUCCESS || count == 0) {
    setup.skip_reason = "needs a CUDA GPU: cuDeviceGetCount returned " + describe_cuda_result(*driver, r) + " and " +
                        std::to_string(count) + " devices";
    return setup;
  }
  setup.driver = *driver;
  return setup;
}

/// A test control of the emulated driver (tests/device/emulated_cuda/), or null where
/// the process's driver is another (a real one has no such symbol).
template <typename Fn>
Fn emulator_control(const char* name) {
  auto driver = cuda_driver();
  if (!driver.is_ok()) return nullptr;
  void* handle = dlopen((*driver)->path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;
  auto fn = reinterpret_cast<Fn>(dlsym(handle, name));
  dlclose(handle);  // still loaded: the driver holds its own reference
  return fn;
}

/// Fixture for tests that need a GPU: device 0's primary context is current on the test
/// thread for the whole test (as cudart leaves it for applications). Under the emulated
/// driver it also checks, after each test, that no driver call came from a host function.
class CudaGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GpuSetup setup = gpu_setup();
    if (setup.driver == nullptr) GTEST_SKIP() << setup.skip_reason;
    driver_ = setup.driver;
    ASSERT_EQ(driver_->cuDeviceGet(&device_, 0), cu::CUDA_SUCCESS);
    ASSERT_EQ(driver_->cuDevicePrimaryCtxRetain(&ctx_, device_), cu::CUDA_SUCCESS);
    ASSERT_EQ(driver_->cuCtxPushCurrent(ctx_), cu::CUDA_SUCCESS);
    pushed_ = true;
  }
  void TearDown() override {
    if (auto calls = emulator_control<int (*)()>("remora_emulated_cuda_calls_from_host_functions")) {
      EXPECT_EQ(calls(), 0) << "driver calls from inside a host function, which CUDA forbids";
    }
    if (pushed_) {
      cu::CUcontext popped = nullptr;
      driver_->cuCtxPopCurrent(&popped);
    }
    if (ctx_ != nullptr) driver_->cuDevicePrimaryCtxRelease(device_);
  }

  int device_attribute(cu::CUdevice_attribute attribute) const {
    int value = -1;
    EXPECT_EQ(driver_->cuDeviceGetAttribute(&value, attribute, device_), cu::CUDA_SUCCESS);
    return value;
  }

  const CudaDriver* driver_ = nullptr;
  cu::CUdevice device_ = 0;
  cu::CUcontext ctx_ = nullptr;
  bool pushed_ = false;
};

/// Device memory from cuMemAlloc, freed on destruction (in the current context).
class DeviceBuffer {
 public:
  DeviceBuffer(const CudaDriver& driver, size_t bytes) : driver_(driver), bytes_(bytes) {
    result_ = driver.cuMemAlloc(&ptr_, bytes);
  }
  ~DeviceBuffer() {
    if (result_ == cu::CUDA_SUCCESS) driver_.cuMemFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  bool ok() const { return result_ == cu::CUDA_SUCCESS; }
  std::string error() const { return "cuMemAlloc: " + describe_cuda_result(&driver_, result_); }
  cu::CUdeviceptr address() const { return ptr_; }
  std::byte* data() const { return reinterpret_cast<std::byte*>(ptr_); }  // NOLINT(performance-no-int-to-ptr)
  size_t size() const { return bytes_; }

  /// The whole buffer, read with the driver's own synchronous copy (not the domain's).
  std::vector<std::byte> read() const {
    std::vector<std::byte> out(bytes_);
    EXPECT_EQ(driver_.cuMemcpyDtoH(out.data(), ptr_, bytes_), cu::CUDA_SUCCESS);
    return out;
  }
  void write(const std::vector<std::byte>& bytes) const {
    ASSERT_EQ(bytes.size(), bytes_);
    ASSERT_EQ(driver_.cuMemcpyHtoD(ptr_, bytes.data(), bytes_), cu::CUDA_SUCCESS);
  }
  void fill(unsigned char value) const { ASSERT_EQ(driver_.cuMemsetD8(ptr_, value, bytes_), cu::CUDA_SUCCESS); }

 private:
  const CudaDriver& driver_;
  size_t bytes_;
  cu::CUdeviceptr ptr_ = 0;
  cu::CUresult result_ = cu::CUDA_ERROR_NOT_INITIALIZED;
};

/// Host memory aligned to `alignment`, freed on destruction.
class AlignedHost {
 public:
  AlignedHost(size_t bytes, size_t alignment)
      : data_(static_cast<std::byte*>(std::aligned_alloc(alignment, round_up(bytes, alignment)))), size_(bytes) {}
  ~AlignedHost() { std::free(data_); }
  AlignedHost(const AlignedHost&) = delete;
  AlignedHost& operator=(const AlignedHost&) = delete;
  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
  std::byte* data_;
  size_t size_;
};

/// Counts on_done calls and lets a test wait (bounded) for a number of them.
struct DoneCounter {
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;

  std::function<void()> callback() {
    return [this] {
      {
        std::lock_guard lock(mu);
        ++calls;
      }
      cv.notify_all();
    };
  }
  bool wait_for(int n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, kCopyTimeout, [&] { return calls >= n; });
  }
  int count() {
    std::lock_guard lock(mu);
    return calls;
  }
};

/// Deterministic pseudo-random bytes (a different stream for each seed).
inline std::vector<std::byte> pattern(size_t bytes, uint64_t seed) {
  std::vector<std::byte> out(bytes);
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    const uint64_t v = rng();
    std::memcpy(out.data() + i, &v, 8);
  }
  const uint64_t v = rng();
  std::memcpy(out.data() + i, &v, bytes - i);
  return out;
}

/// FNV-1a over bytes, to name a buffer's content in a failure message.
inline uint64_t checksum(const std::byte* data, size_t bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= static_cast<uint64_t>(data[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

/// "" when equal, else where they first differ and both checksums.
inline std::string compare_bytes(const std::byte* expected, const std::byte* actual, size_t bytes) {
  if (std::memcmp(expected, actual, bytes) == 0) return "";
  size_t i = 0;
  while (expected[i] == actual[i]) ++i;
  return "first difference at byte " + std::to_string(i) + " of " + std::to_string(bytes) + " (expected " +
         std::to_string(static_cast<int>(expected[i])) + ", got " + std::to_string(static_cast<int>(actual[i])) +
         "); checksums expected " + std::to_string(checksum(expected, bytes)) + ", got " +
         std::to_string(checksum(actual, bytes));
}

}  // namespace remora::device::testing
