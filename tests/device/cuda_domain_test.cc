// Tests for the CUDA memory domain (device/cuda_domain.h). Without a driver: every entry
// point reports the reason. With a driver and a GPU (skipped, with the driver's reason,
// elsewhere): device memory is recognised and registered, copies to and from host move
// the right bytes (checked against the driver's own synchronous copies) across sizes
// from 1 byte to 64 MiB and odd offsets, on_done runs exactly once, staging memory is
// page-locked and released, and a dmabuf is exported where the device supports it.
#include "device/cuda_domain.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "device/cuda_test_util.h"
#include "remora/cuda.h"

namespace remora::device {
namespace {

using testing::AlignedHost;
using testing::compare_bytes;
using testing::CudaGpuTest;
using testing::DeviceBuffer;
using testing::DoneCounter;
using testing::kCopyTimeout;
using testing::pattern;

TEST(CudaDomainWithoutDriver, EveryEntryPointReportsTheReason) {
  const Status reason(StatusCode::kUnsupported, "no CUDA driver: dlopen(libcuda.so.1): not here");
  CudaDomain domain{Result<const CudaDriver*>(reason)};
  testing::expect_every_entry_point_reports(domain, reason);
}

TEST(CudaDomainWithoutDriver, TheProcessDomainFollowsTheDriver) {
  auto driver = cuda_driver();
  auto domain = cuda_domain();
  ASSERT_EQ(domain.is_ok(), driver.is_ok());
  if (!driver.is_ok()) {
    EXPECT_EQ(domain.status(), driver.status());
    EXPECT_EQ(domain.status().code(), StatusCode::kUnsupported);
    return;
  }
  EXPECT_EQ((*domain)->kind(), MemoryKind::kCuda);
  EXPECT_EQ(*domain, *cuda_domain());  // one per process
}

// ---------------------------------------------------------------------------------
// With a GPU
// ---------------------------------------------------------------------------------

class CudaDomainGpu : public CudaGpuTest {};

/// Waits for `copy` (bounded) and expects it to succeed.
void expect_completes(Result<std::unique_ptr<AsyncCopy>>& copy) {
  ASSERT_TRUE(copy.is_ok()) << copy.status().to_string();
  Status s = (*copy)->wait(kCopyTimeout);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_TRUE((*copy)->test().is_ok());
}

TEST_F(CudaDomainGpu, OwnsDeviceMemoryAndNothingElse) {
  CudaDomain domain(driver_);
  DeviceBuffer dev(*driver_, 1 << 20);
  ASSERT_TRUE(dev.ok()) << dev.error();
  EXPECT_TRUE(domain.owns(dev.data(), dev.size()));
  EXPECT_TRUE(domain.owns(dev.data() + 4097, 1000));
  EXPECT_FALSE(domain.owns(dev.data(), dev.size() + 1)) << "past the end of the allocation";
  EXPECT_FALSE(domain.owns(dev.data() + 100, dev.size()));

  std::vector<std::byte> pageable(4096);
  EXPECT_FALSE(domain.owns(pageable.data(), pageable.size()));
  void* pinned = nullptr;
  ASSERT_EQ(driver_->cuMemAllocHost(&pinned, 4096), cu::CUDA_SUCCESS);
  EXPECT_FALSE(domain.owns(pinned, 4096)) << "page-locked host memory belongs to the host domain";
  driver_->cuMemFreeHost(pinned);
  EXPECT_FALSE(domain.owns(nullptr, 1));
}

TEST_F(CudaDomainGpu, RegistersDeviceMemoryAsCudaRegions) {
  CudaDomain domain(driver_);
  DeviceBuffer dev(*driver_, 1 << 20);
  ASSERT_TRUE(dev.ok()) << dev.error();
  MemoryRegistry registry(PinMode::kRequire);
  auto region = registry.register_memory(dev.data() + 64, 4096, Access::kLocalWrite, domain);
  ASSERT_TRUE(region.is_ok()) << region.status().to_string();
  EXPECT_EQ(region->kind(), MemoryKind::kCuda);
  EXPECT_TRUE(region->pinned());
  EXPECT_EQ(region->remote_key().kind, MemoryKind::kCuda);
  EXPECT_EQ(registry.stats().pin_failures, 0u);
  // Peers' puts and gets of device memory are staged, atomics are not: the registry
  // grants remote reads and writes and refuses remote atomics.
  auto remote = registry.register_memory(dev.data(), 4096, Access::kRemoteRead | Access::kRemoteWrite, domain);
  EXPECT_TRUE(remote.is_ok()) << remote.status().to_string();
  auto atomic = registry.register_memory(dev.data(), 4096, Access::kRemoteAtomic, domain);
  EXPECT_EQ(atomic.status().code(), StatusCode::kUnsupported) << atomic.status().to_string();

  unsigned int sync_memops = 0;
  ASSERT_EQ(driver_->cuPointerGetAttribute(&sync_memops, cu::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, dev.address()),
            cu::CUDA_SUCCESS);
  EXPECT_EQ(sync_memops, 1u) << "registration sets SYNC_MEMOPS";

  auto past_end = registry.register_memory(dev.data() + 4096, dev.size(), Access::kLocalWrite, domain);
  EXPECT_EQ(past_end.status().code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> host(4096);
  auto host_in_cuda = domain.register_range(host.data(), host.size(), PinMode::kTry);
  EXPECT_EQ(host_in_cuda.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(host_in_cuda.status().message().find("not CUDA device memory"), std::string::npos)
      << host_in_cuda.status().to_string();
  EXPECT_EQ(domain.register_range(dev.data(), 0, PinMode::kTry).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CudaDomainGpu, RoundTripsEverySizeAndOffset) {
  CudaDomain domain(driver_);
  const size_t sizes[] = {1, 2, 3, 7, 8, 15, 16, 17, 255, 4095, 4096, 4097, 65537, (1 << 20) + 3, 16 << 20, 64 << 20};
  const size_t offsets[] = {0, 1, 7, 4093};
  constexpr size_t kGuard = 64;
  constexpr auto kDeviceFill = std::byte{0xA5};
  constexpr auto kHostFill = std::byte{0x5A};
  uint64_t seed = 1;
  for (size_t size : sizes) {
    for (size_t offset : offsets) {
      SCOPED_TRACE("size " + std::to_string(size) + ", offset " + std::to_string(offset));
      DeviceBuffer dev(*driver_, offset + size + kGuard);
      ASSERT_TRUE(dev.ok()) << dev.error();
      dev.fill(0xA5);
      const std::vector<std::byte> src = pattern(size, seed++);

      // Host -> device, from pageable memory; checked with the driver's own copy.
      auto in = domain.copy_from_host(dev.data() + offset, src.data(), size);
      expect_completes(in);
      const std::vector<std::byte> device_bytes = dev.read();
      for (size_t i = 0; i < offset; ++i) ASSERT_EQ(device_bytes[i], kDeviceFill) << "before the range, byte " << i;
      ASSERT_EQ(compare_bytes(src.data(), device_bytes.data() + offset, size), "");
      for (size_t i = offset + size; i < device_bytes.size(); ++i) {
        ASSERT_EQ(device_bytes[i], kDeviceFill) << "after the range, byte " << i;
      }

      // Device -> host, into prepared staging memory at an odd address.
      AlignedHost host(size + 2, 4096);
      std::memset(host.data(), 0x5A, size + 2);
      ASSERT_TRUE(domain.prepare_staging(host.data(), size + 2).is_ok());
      auto out = domain.copy_to_host(host.data() + 1, dev.data() + offset, size);
      expect_completes(out);
      EXPECT_EQ(host.data()[0], kHostFill);
      EXPECT_EQ(host.data()[size + 1], kHostFill);
      ASSERT_EQ(compare_bytes(src.data(), host.data() + 1, size), "");
      domain.release_staging(host.data(), size + 2);
    }
  }
}

// The allocator for programs without a CUDA runtime (remora bench): memory the domain
// owns, round-tripped, freed; a pointer inside an allocation or of host memory is not
// freed. The public functions answer like the process domain.
TEST_F(CudaDomainGpu, AllocatesAndFreesDeviceMemory) {
  CudaDomain domain(driver_);
  auto p = domain.allocate(3 << 20);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  auto* dev = static_cast<std::byte*>(*p);
  EXPECT_TRUE(domain.owns(dev, 3 << 20));
  std::vector<std::byte> out(3 << 20), in(3 << 20);
  for (size_t i = 0; i < out.size(); ++i) out[i] = std::byte(i * 7 % 251);
  auto up = domain.copy_from_host(dev, out.data(), out.size());
  expect_completes(up);
  auto down = domain.copy_to_host(in.data(), dev, in.size());
  expect_completes(down);
  EXPECT_EQ(in, out);
  EXPECT_EQ(domain.deallocate(dev + 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(domain.deallocate(out.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(domain.deallocate(dev).is_ok());
  EXPECT_FALSE(domain.owns(dev, 1)) << "freed";
  auto q = cuda_allocate(4096);
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  EXPECT_TRUE(cuda_domain().value()->owns(*q, 4096));
  EXPECT_TRUE(cuda_free(*q).is_ok());
}

TEST_F(CudaDomainGpu, ZeroLengthCopiesCompleteAtOnce) {
  CudaDomain domain(driver_);
  std::byte host{};
  auto copy = domain.copy_to_host(&host, nullptr, 0);
  ASSERT_TRUE(copy.is_ok());
  EXPECT_TRUE((*copy)->test().is_ok());
  int calls = 0;
  (*copy)->on_done([&] { ++calls; });
  EXPECT_EQ(calls, 1);
}

TEST_F(CudaDomainGpu, RefusesHostMemoryAndRangesPastTheAllocation) {
  CudaDomain domain(driver_);
  DeviceBuffer dev(*driver_, 8192);
  ASSERT_TRUE(dev.ok()) << dev.error();
  std::vector<std::byte> host(16384);
  auto host_as_device = domain.copy_to_host(host.data(), host.data() + 8192, 100);
  EXPECT_EQ(host_as_device.status().code(), StatusCode::kInvalidArgument);
  auto past_end = domain.copy_to_host(host.data(), dev.data() + 4096, 8192);
  EXPECT_EQ(past_end.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past_end.status().message().find("runs past the end of its CUDA allocation"), std::string::npos)
      << past_end.status().to_string();
  auto into_past_end = domain.copy_from_host(dev.data() + 1, host.data(), 8192);
  EXPECT_EQ(into_past_end.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(domain.copy_from_host(nullptr, host.data(), 1).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CudaDomainGpu, OnDoneRunsExactlyOnce) {
  CudaDomain domain(driver_);
  constexpr size_t kBytes = 64 << 20;
  DeviceBuffer dev(*driver_, kBytes);
  ASSERT_TRUE(dev.ok()) << dev.error();
  AlignedHost host(kBytes, 4096);
  ASSERT_TRUE(domain.prepare_staging(host.data(), kBytes).is_ok());
  std::memset(host.data(), 1, kBytes);

  // Registered while the copy most likely still runs.
  DoneCounter big;
  auto copy = domain.copy_from_host(dev.data(), host.data(), kBytes);
  ASSERT_TRUE(copy.is_ok()) << copy.status().to_string();
  (*copy)->on_done(big.callback());
  ASSERT_TRUE(big.wait_for(1)) << "on_done was not called within the bound";
  EXPECT_TRUE((*copy)->test().is_ok());

  // Registered after test() says done: called at once, on this thread.
  const std::thread::id self = std::this_thread::get_id();
  std::thread::id caller;
  bool called_inline = false;
  (*copy)->on_done([&] {
    caller = std::this_thread::get_id();
    called_inline = true;
  });
  EXPECT_TRUE(called_inline);
  EXPECT_EQ(caller, self);

  // Many copies, each with its own counter, on a domain of their own: each is called
  // within the bound, and the domain's destruction then drains its streams, host
  // functions included, so a second call of any of them would have happened by then.
  // (A later copy's end is no such point: a small copy's end may be seen by polling its
  // event while earlier copies' host functions are still to run.)
  constexpr size_t kCopies = 64;
  std::vector<DoneCounter> counters(kCopies);
  {
    CudaDomain many(driver_);
    std::vector<std::unique_ptr<AsyncCopy>> copies;
    for (size_t i = 0; i < kCopies; ++i) {
      auto c = many.copy_from_host(dev.data() + i * 4096, host.data() + i * 4096, 4096);
      ASSERT_TRUE(c.is_ok()) << c.status().to_string();
      (*c)->on_done(counters[i].callback());
      copies.push_back(std::move(c).value());
    }
    for (size_t i = 0; i < kCopies; ++i) ASSERT_TRUE(counters[i].wait_for(1)) << "copy " << i;
    copies.clear();
  }
  for (size_t i = 0; i < kCopies; ++i) {
    EXPECT_EQ(counters[i].count(), 1) << "copy " << i;
  }
  EXPECT_EQ(big.count(), 1);
  domain.release_staging(host.data(), kBytes);
}

TEST_F(CudaDomainGpu, CopiesFromManyThreadsLandWhereTheyShould) {
  CudaDomain domain(driver_);
  constexpr size_t kThreads = 4;
  constexpr size_t kCopiesPerThread = 32;
  constexpr size_t kPiece = 12345;
  DeviceBuffer dev(*driver_, kThreads * kCopiesPerThread * kPiece);
  ASSERT_TRUE(dev.ok()) << dev.error();
  const std::vector<std::byte> src = pattern(dev.size(), 99);
  std::vector<std::byte> back(dev.size());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  threads.reserve(kThreads);
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread needs a current context for nothing: the domain pushes its own.
      for (size_t i = 0; i < kCopiesPerThread; ++i) {
        const size_t at = (t * kCopiesPerThread + i) * kPiece;
        auto in = domain.copy_from_host(dev.data() + at, src.data() + at, kPiece);
        if (!in.is_ok() || !(*in)->wait(kCopyTimeout).is_ok()) {
          ++failures;
          continue;
        }
        auto out = domain.copy_to_host(back.data() + at, dev.data() + at, kPiece);
        if (!out.is_ok() || !(*out)->wait(kCopyTimeout).is_ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(compare_bytes(src.data(), back.data(), src.size()), "");
}

TEST_F(CudaDomainGpu, StagingIsPageLockedUntilReleased) {
  CudaDomain domain(driver_);
  constexpr size_t kBytes = 1 << 20;
  AlignedHost host(kBytes, 4096);
  auto memory_type = [&] {
    unsigned int type = 0;
    cu::CUpointer_attribute attribute = cu::CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
    void* value = &type;
    EXPECT_EQ(driver_->cuPointerGetAttributes(1, &attribute, &value, reinterpret_cast<uintptr_t>(host.data())),
              cu::CUDA_SUCCESS);
    return type;
  };
  EXPECT_EQ(memory_type(), 0u) << "plain host memory is unknown to CUDA";
  ASSERT_TRUE(domain.prepare_staging(host.data(), kBytes).is_ok());
  EXPECT_EQ(memory_type(), static_cast<unsigned>(cu::CU_MEMORYTYPE_HOST));
  EXPECT_FALSE(domain.owns(host.data(), kBytes));
  // Prepared twice, released twice: locked until the second release.
  ASSERT_TRUE(domain.prepare_staging(host.data(), kBytes).is_ok());
  EXPECT_EQ(domain.prepare_staging(host.data(), kBytes / 2).code(), StatusCode::kInvalidArgument);
  domain.release_staging(host.data(), kBytes);
  EXPECT_EQ(memory_type(), static_cast<unsigned>(cu::CU_MEMORYTYPE_HOST));
  domain.release_staging(host.data(), kBytes);
  EXPECT_EQ(memory_type(), 0u);

  // Memory the application registered itself stays registered.
  ASSERT_EQ(driver_->cuMemHostRegister(host.data(), kBytes, 0), cu::CUDA_SUCCESS);
  ASSERT_TRUE(domain.prepare_staging(host.data(), kBytes).is_ok());
  domain.release_staging(host.data(), kBytes);
  EXPECT_EQ(memory_type(), static_cast<unsigned>(cu::CU_MEMORYTYPE_HOST));
  EXPECT_EQ(driver_->cuMemHostUnregister(host.data()), cu::CUDA_SUCCESS);
  EXPECT_EQ(domain.prepare_staging(nullptr, 1).code(), StatusCode::kInvalidArgument);
}

TEST_F(CudaDomainGpu, ExportsADmabufWhereTheDeviceCan) {
  CudaDomain domain(driver_);
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  DeviceBuffer dev(*driver_, size_t{2} * 1024 * 1024 + page);
  ASSERT_TRUE(dev.ok()) << dev.error();
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(dev.data()) + page - 1) / page * page;
  auto* start = reinterpret_cast<std::byte*>(aligned);  // NOLINT(performance-no-int-to-ptr)
  const size_t len = 16 * page;

  EXPECT_EQ(domain.export_dmabuf(start + 1, len).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(domain.export_dmabuf(start, len + 1).status().code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> host(2 * page);
  const uintptr_t host_page = (reinterpret_cast<uintptr_t>(host.data()) + page - 1) / page * page;
  EXPECT_EQ(domain.export_dmabuf(reinterpret_cast<void*>(host_page), page).status().code(),  // NOLINT
            StatusCode::kInvalidArgument);

  auto exported = domain.export_dmabuf(start, len);
  if (device_attribute(cu::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED) == 0) {
    EXPECT_EQ(exported.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(exported.status().message().find("CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0"), std::string::npos)
        << exported.status().to_string();
    GTEST_SKIP() << "the refusal is right, but this device cannot export: " << exported.status().message();
  }
  ASSERT_TRUE(exported.is_ok()) << exported.status().to_string();
  const int fd = exported->fd;
  ASSERT_GE(fd, 0);
  EXPECT_EQ(exported->offset, 0u);
  EXPECT_EQ(exported->length, len);
  char target[256] = {};
  const ssize_t n = readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), target, sizeof(target) - 1);
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(target).find("dmabuf"), std::string::npos) << target;
  EXPECT_GE(lseek(fd, 0, SEEK_END), static_cast<off_t>(len));
  close(fd);
}

TEST_F(CudaDomainGpu, TheProcessDomainCopiesToo) {
  auto domain = cuda_domain();
  ASSERT_TRUE(domain.is_ok()) << domain.status().to_string();
  DeviceBuffer dev(*driver_, 4096);
  ASSERT_TRUE(dev.ok()) << dev.error();
  const std::vector<std::byte> src = pattern(4096, 7);
  std::vector<std::byte> back(4096);
  auto in = (*domain)->copy_from_host(dev.data(), src.data(), src.size());
  expect_completes(in);
  auto out = (*domain)->copy_to_host(back.data(), dev.data(), back.size());
  expect_completes(out);
  EXPECT_EQ(compare_bytes(src.data(), back.data(), src.size()), "");
}

}  // namespace
}  // namespace remora::device
