// Tests that need the emulated CUDA driver (tests/device/emulated_cuda/), because they
// make the driver fail on purpose or look inside it: a copy the driver fails still ends
// its on_done, exactly once, with the error; wait() reports that error instead of timing
// out, and returns only after on_done's function has returned; every call leaves the thread's context stack as it found
// it; an on_done function may destroy its copy; and the loader finds the entry points both through cuGetProcAddress_v2
// and, on drivers without it, through dlsym. Elsewhere (no driver, or a real one) they skip and say so. These are
// checks of remora's logic against an emulation, not GPU results.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "device/cuda_test_util.h"

namespace remora::device {
namespace {

using testing::CudaGpuTest;
using testing::DeviceBuffer;
using testing::DoneCounter;
using testing::emulator_control;
using testing::kCopyTimeout;
using testing::run_self;

class CudaEmulated : public CudaGpuTest {
 protected:
  void SetUp() override {
    CudaGpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    fail_next_copy_ = emulator_control<void (*)()>("remora_emulated_cuda_fail_next_copy");
    clear_error_ = emulator_control<void (*)()>("remora_emulated_cuda_clear_error");
    depth_ = emulator_control<int (*)()>("remora_emulated_cuda_current_depth");
    hold_streams_ = emulator_control<void (*)(int)>("remora_emulated_cuda_hold_streams");
    if (fail_next_copy_ == nullptr || clear_error_ == nullptr || depth_ == nullptr || hold_streams_ == nullptr) {
      GTEST_SKIP() << "needs the emulated CUDA driver (REMORA_CUDA_DRIVER=.../libremora_test_emulated_cuda.so), "
                      "not "
                   << driver_->path;
    }
  }
  void TearDown() override {
    if (hold_streams_ != nullptr) hold_streams_(0);
    if (clear_error_ != nullptr) clear_error_();
    CudaGpuTest::TearDown();
  }

  void (*fail_next_copy_)() = nullptr;
  void (*clear_error_)() = nullptr;
  int (*depth_)() = nullptr;
  void (*hold_streams_)(int) = nullptr;
};

TEST_F(CudaEmulated, AFailedCopyEndsOnDoneOnceWithTheError) {
  CudaDomain domain(driver_);
  DeviceBuffer dev(*driver_, 1 << 20);
  ASSERT_TRUE(dev.ok()) << dev.error();
  std::vector<std::byte> host(1 << 20);

  // Everything is enqueued before the copy runs and fails, so the failure reaches the
  // copy's end and not its start (where the next call would report it).
  hold_streams_(1);
  fail_next_copy_();
  auto copy = domain.copy_from_host(dev.data(), host.data(), host.size());
  ASSERT_TRUE(copy.is_ok()) << copy.status().to_string();
  DoneCounter done;
  (*copy)->on_done(done.callback());
  hold_streams_(0);
  // The driver drops the host function after the error: the domain's watcher ends it.
  ASSERT_TRUE(done.wait_for(1)) << "on_done never came";
  const Status s = (*copy)->test();
  EXPECT_EQ(s.code(), StatusCode::kDeviceFailed);
  EXPECT_NE(s.message().find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << s.to_string();
  EXPECT_EQ((*copy)->wait(kCopyTimeout), s);

  // A copy started after the error fails at once: the error is the context's.
  auto after = domain.copy_from_host(dev.data(), host.data(), 16);
  EXPECT_FALSE(after.is_ok());
  clear_error_();
  auto recovered = domain.copy_from_host(dev.data(), host.data(), 16);
  ASSERT_TRUE(recovered.is_ok()) << recovered.status().to_string();
  EXPECT_TRUE((*recovered)->wait(kCopyTimeout).is_ok());
  EXPECT_EQ(done.count(), 1);
}

TEST_F(CudaEmulated, WaitReportsTheErrorRatherThanTimingOut) {
  CudaDomain domain(driver_);
  DeviceBuffer dev(*driver_, 4096);
  ASSERT_TRUE(dev.ok()) << dev.error();
  std::vector<std::byte> host(4096);
  hold_streams_(1);
  fail_next_copy_();
  auto copy = domain.copy_to_host(host.data(), dev.data(), host.size());
  ASSERT_TRUE(copy.is_ok()) << copy.status().to_string();
  hold_streams_(0);
  const auto start = std::chrono::steady_clock::now();
  const Status s = (*copy)->wait(kCopyTimeout);
  EXPECT_EQ(s.code(), StatusCode::kDeviceFailed) << s.to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - start, kCopyTimeout / 2) << "the wait ran into its bound";
}

TEST_F(CudaEmulated, WaitReturnsOnlyAfterOnDonesCallHasReturned) {
  CudaDomain domain(driver_);
  DeviceBuffer dev(*driver_, 4096);
  ASSERT_TRUE(dev.ok()) << dev.error();
  std::vector<std::byte> host(4096);
  hold_streams_(1);  // so on_done is registered before the copy can end
  auto copy = domain.copy_from_host(dev.data(), host.data(), host.size());
  ASSERT_TRUE(copy.is_ok()) << copy.status().to_string();
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false;
  bool release = false;
  (*copy)->on_done([&] {
    std::unique_lock lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  hold_streams_(0);
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, kCopyTimeout, [&] { return entered; }));
  }
  EXPECT_TRUE((*copy)->test().is_ok()) << "the copy has ended";
  EXPECT_EQ((*copy)->wait(std::chrono::milliseconds(50)).code(), StatusCode::kTimeout)
      << "wait() returned while on_done's function was still running";
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_TRUE((*copy)->wait(kCopyTimeout).is_ok());
}

TEST_F(CudaEmulated, EveryCallLeavesTheContextStackAsItFoundIt) {
  CudaDomain domain(driver_);
  DeviceBuffer dev(*driver_, 1 << 20);
  ASSERT_TRUE(dev.ok()) << dev.error();
  std::vector<std::byte> host(1 << 20);
  const int depth = depth_();
  ASSERT_EQ(depth, 1);  // the fixture's
  EXPECT_TRUE(domain.owns(dev.data(), 16));
  EXPECT_EQ(depth_(), depth);
  EXPECT_FALSE(domain.owns(host.data(), 16));
  EXPECT_EQ(depth_(), depth);
  EXPECT_TRUE(domain.register_range(dev.data(), 4096, PinMode::kTry).is_ok());
  EXPECT_EQ(depth_(), depth);
  auto copy = domain.copy_from_host(dev.data(), host.data(), 4096);
  ASSERT_TRUE(copy.is_ok());
  EXPECT_TRUE((*copy)->wait(kCopyTimeout).is_ok());
  EXPECT_EQ(depth_(), depth);
  EXPECT_FALSE(domain.copy_from_host(dev.data() + 1, host.data(), 1 << 20).is_ok());
  EXPECT_EQ(depth_(), depth);
  EXPECT_TRUE(domain.prepare_staging(host.data(), host.size()).is_ok());
  domain.release_staging(host.data(), host.size());
  EXPECT_EQ(depth_(), depth);
  EXPECT_EQ(domain.export_dmabuf(dev.data(), 4096).status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(depth_(), depth);
  const UnpackEntry entry{.src_offset = 0, .length = 100, .reserved = 0, .dst_offset = 200};
  auto scatter = domain.scatter(dev.data(), dev.data() + 4096, std::span(&entry, 1));
  ASSERT_TRUE(scatter.is_ok()) << scatter.status().to_string();
  EXPECT_TRUE((*scatter)->wait(kCopyTimeout).is_ok());
  EXPECT_EQ(depth_(), depth);

  // A thread with no context of its own ends with none.
  std::thread([&] {
    auto c = domain.copy_to_host(host.data(), dev.data(), 4096);
    EXPECT_TRUE(c.is_ok() && (*c)->wait(kCopyTimeout).is_ok());
    EXPECT_EQ(depth_(), 0);
  }).join();
}

TEST_F(CudaEmulated, OnDoneMayDestroyItsCopy) {
  CudaDomain domain(driver_);
  DeviceBuffer dev(*driver_, 1 << 20);
  ASSERT_TRUE(dev.ok()) << dev.error();
  std::vector<std::byte> host(1 << 20);
  for (int i = 0; i < 32; ++i) {
    auto copy = domain.copy_from_host(dev.data(), host.data(), host.size());
    ASSERT_TRUE(copy.is_ok());
    std::mutex mu;
    std::condition_variable cv;
    std::unique_ptr<AsyncCopy> owned = std::move(copy).value();
    AsyncCopy* raw = owned.get();
    bool done = false;
    raw->on_done([&] {
      std::lock_guard lock(mu);
      owned.reset();  // on the driver's thread, most times
      done = true;
      cv.notify_all();
    });
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, kCopyTimeout, [&] { return done; }));
  }
  // TearDown checks that no CUDA call came from the host-function thread.
}

// Found on an H100 by compute-sanitizer: the process's watcher destroyed copy events
// after the domain had released the primary context they were made in, and with it
// the last retain (CUDA_ERROR_INVALID_CONTEXT from cuEventDestroy: the driver had
// destroyed the context and its events). An event now keeps the domain's retain of its
// context until it is destroyed. The watcher holds this copy's event until its next
// poll, well after the domain is gone.
TEST_F(CudaEmulated, CopyEventsKeepTheirPrimaryContextAliveAfterTheDomain) {
  auto without_context = emulator_control<int (*)()>("remora_emulated_cuda_events_destroyed_without_context");
  auto all_destroyed = emulator_control<int (*)(int)>("remora_emulated_cuda_wait_all_events_destroyed");
  ASSERT_NE(without_context, nullptr);
  ASSERT_NE(all_destroyed, nullptr);
  const int before = without_context();
  // The fixture's own retain would keep the context alive: only the domain's is left.
  ASSERT_EQ(driver_->cuDevicePrimaryCtxRelease(device_), cu::CUDA_SUCCESS);
  ctx_ = nullptr;
  {
    auto domain = std::make_unique<CudaDomain>(driver_);
    auto device = domain->allocate(1 << 20);
    ASSERT_TRUE(device.is_ok()) << device.status().to_string();
    std::vector<std::byte> host(1 << 20, std::byte{7});
    hold_streams_(1);  // on_done is registered (and the watcher watches) before the copy ends
    auto copy = domain->copy_from_host(*device, host.data(), host.size());
    ASSERT_TRUE(copy.is_ok()) << copy.status().to_string();
    DoneCounter done;
    (*copy)->on_done(done.callback());
    hold_streams_(0);
    ASSERT_TRUE(done.wait_for(1)) << "on_done never came";
    copy->reset();
    EXPECT_TRUE(domain->deallocate(*device).is_ok());
  }  // the domain lets go of its retain here; the watcher still holds the event
  ASSERT_EQ(all_destroyed(static_cast<int>(kCopyTimeout / std::chrono::milliseconds(1))), 1)
      << "the watcher never destroyed the copy's event";
  EXPECT_EQ(without_context() - before, 0) << "cuEventDestroy after the event's context was released";
}

// The loader, in child processes with the emulated driver: entry points from
// cuGetProcAddress_v2, and from dlsym where the driver has no working one.
constexpr const char* kLoaderChild = "CudaEmulatedLoaderChild.Loads";

TEST(CudaEmulatedLoaderChild, Loads) {
  const char* want = std::getenv("REMORA_TEST_CUDA_EXPECT_PROC_ADDRESS");
  if (want == nullptr) GTEST_SKIP() << "runs as the child process of CudaEmulatedLoader tests";
  auto driver = cuda_driver();
  ASSERT_TRUE(driver.is_ok()) << driver.status().to_string();
  EXPECT_EQ((*driver)->proc_address, std::string(want) == "1");
  EXPECT_EQ((*driver)->version, 13000);
#define REMORA_EXPECT_RESOLVED(name, suffix, abi_version, required, params) \
  EXPECT_NE((*driver)->name, nullptr) << #name;
  REMORA_CUDA_DRIVER_FUNCTIONS(REMORA_EXPECT_RESOLVED)
#undef REMORA_EXPECT_RESOLVED
  std::printf("loaded through %s\n", (*driver)->proc_address ? "cuGetProcAddress_v2" : "dlsym");
}

#ifdef REMORA_TEST_EMULATED_CUDA
void expect_loads(std::vector<std::string> env, const std::string& how) {
  env.push_back(std::string("REMORA_CUDA_DRIVER=") + REMORA_TEST_EMULATED_CUDA);
  auto child = run_self(kLoaderChild, std::move(env));
  EXPECT_TRUE(child.ok()) << itest::Process::describe(child.status) << "\n" << child.output;
  EXPECT_NE(child.output.find("[  PASSED  ] 1 test"), std::string::npos) << child.output;
  EXPECT_NE(child.output.find("loaded through " + how), std::string::npos) << child.output;
}

TEST(CudaEmulatedLoader, TakesEntryPointsFromGetProcAddress) {
  expect_loads({"REMORA_TEST_CUDA_EXPECT_PROC_ADDRESS=1"}, "cuGetProcAddress_v2");
}

TEST(CudaEmulatedLoader, FallsBackToDlsym) {
  expect_loads({"REMORA_TEST_CUDA_EXPECT_PROC_ADDRESS=0", "REMORA_TEST_CUDA_EMULATOR_NO_PROC_ADDRESS=1"}, "dlsym");
}
#endif

}  // namespace
}  // namespace remora::device
