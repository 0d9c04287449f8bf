// Tests for loading the CUDA driver at run time (device/cuda_driver.h): the answer in
// this process, whatever the machine has; and, in child processes of this binary (the
// driver is loaded once per process), REMORA_CUDA_DRIVER pointing at a missing file, at
// a library that is not a driver, and at the toolkit's stub library, whose cuInit
// refuses for real. In each child every CUDA entry point must report the same reason.
#include "device/cuda_driver.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/env.h"
#include "device/cuda_test_util.h"
#include "device/variables.h"
#include "remora/cuda.h"

namespace remora::device {
namespace {

using testing::run_self;

constexpr const char* kExpectVariable = "REMORA_TEST_CUDA_EXPECT";
constexpr const char* kChildTest = "CudaDriverChild.ReportsTheLoadFailureEverywhere";

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

TEST(CudaDriver, LoadsOrSaysWhyNot) {
  auto driver = cuda_driver();
  if (driver.is_ok()) {
    const CudaDriver& d = **driver;
    EXPECT_FALSE(d.path.empty());
    EXPECT_GE(d.version, 11000) << "remora asks for functions of CUDA 11.0";
#define REMORA_EXPECT_RESOLVED(name, suffix, abi_version, required, params) \
  if (required) {                                                           \
    EXPECT_NE(d.name, nullptr) << #name;                                    \
  }
    REMORA_CUDA_DRIVER_FUNCTIONS(REMORA_EXPECT_RESOLVED)
#undef REMORA_EXPECT_RESOLVED
    return;
  }
  EXPECT_EQ(driver.status().code(), StatusCode::kUnsupported);
  const std::string message = driver.status().message();
  // Where nothing overrides the library and the loader cannot find libcuda.so.1
  // either, the reason is exactly the loader's.
  if (std::getenv("REMORA_CUDA_DRIVER") == nullptr) {
    void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      EXPECT_EQ(message, std::string("no CUDA driver: dlopen(libcuda.so.1): ") + dlerror());
    } else {
      dlclose(handle);
      EXPECT_TRUE(starts_with(message, "CUDA driver ")) << message;
    }
  }
  EXPECT_TRUE(starts_with(message, "no CUDA driver: ") || starts_with(message, "CUDA driver ")) << message;
}

TEST(CudaDriver, AnswersTheSameEveryTime) {
  auto first = cuda_driver();
  auto second = cuda_driver();
  ASSERT_EQ(first.is_ok(), second.is_ok());
  if (first.is_ok()) {
    EXPECT_EQ(*first, *second);  // one table per process
  } else {
    EXPECT_EQ(first.status(), second.status());
  }
}

TEST(CudaDriver, DescribesResultsItKnowsAndOnesItDoesNot) {
  EXPECT_EQ(describe_cuda_result(nullptr, cu::CUDA_ERROR_STUB_LIBRARY), "34 CUDA_ERROR_STUB_LIBRARY");
  EXPECT_EQ(describe_cuda_result(nullptr, cu::CUDA_ERROR_NOT_READY), "600 CUDA_ERROR_NOT_READY");
  EXPECT_EQ(describe_cuda_result(nullptr, static_cast<cu::CUresult>(12345)), "12345 (unknown CUDA result)");
  // A table with nothing resolved names results itself.
  const CudaDriver empty;
  EXPECT_EQ(describe_cuda_result(&empty, cu::CUDA_ERROR_NO_DEVICE), "100 CUDA_ERROR_NO_DEVICE");
}

TEST(CudaDriver, MapsResultsToStatusCodes) {
  const CudaDriver empty;
  Status s = cuda_error(empty, cu::CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc", "staging");
  EXPECT_EQ(s.code(), StatusCode::kNoResource);
  EXPECT_EQ(s.message(), "staging: cuMemAlloc returned 2 CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(cuda_error(empty, cu::CUDA_ERROR_INVALID_VALUE, "f", "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda_error(empty, cu::CUDA_ERROR_INVALID_VALUE, "f", "").message(),
            "f returned 1 CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(cuda_error(empty, cu::CUDA_ERROR_NOT_SUPPORTED, "f", "x").code(), StatusCode::kUnsupported);
  EXPECT_EQ(cuda_error(empty, cu::CUDA_ERROR_NOT_PERMITTED, "f", "x").code(), StatusCode::kUnsupported);
  EXPECT_EQ(cuda_error(empty, cu::CUDA_ERROR_ILLEGAL_ADDRESS, "f", "x").code(), StatusCode::kDeviceFailed);
}

TEST(CudaDriver, ItsVariableIsKnownToTheLibrary) {
  const auto ours = variables();
  EXPECT_TRUE(
      std::any_of(ours.begin(), ours.end(), [](const ConfigVariable& v) { return v.name == "REMORA_CUDA_DRIVER"; }));
  const ConfigVariable* row = core::find_variable("REMORA_CUDA_DRIVER");
  ASSERT_NE(row, nullptr) << "src/library/config_variables.cc does not gather the device layer's table";
  EXPECT_EQ(row->section, "Devices");
}

// The child's side: runs only when a CudaDriverChild test started this process with
// REMORA_TEST_CUDA_EXPECT set to the reason the load must fail with (a prefix of it).
TEST(CudaDriverChild, ReportsTheLoadFailureEverywhere) {
  const char* expected = std::getenv(kExpectVariable);
  if (expected == nullptr) GTEST_SKIP() << "runs as the child process of the other CudaDriverChild tests";
  auto driver = cuda_driver();
  ASSERT_FALSE(driver.is_ok()) << "the driver loaded from " << (*driver)->path;
  const Status reason = driver.status();
  EXPECT_EQ(reason.code(), StatusCode::kUnsupported);
  EXPECT_TRUE(starts_with(reason.message(), expected)) << "reason: " << reason.message() << "\nexpected: " << expected;

  auto process_domain = cuda_domain();
  ASSERT_FALSE(process_domain.is_ok());
  EXPECT_EQ(process_domain.status(), reason);

  const CudaProbe probe = probe_cuda();
  EXPECT_FALSE(probe.driver_loaded);
  EXPECT_EQ(probe.reason, reason.message());
  EXPECT_TRUE(probe.devices.empty());
  EXPECT_EQ(probe.driver_version, 0);

  CudaDomain domain(cuda_driver());
  testing::expect_every_entry_point_reports(domain, reason);
  std::printf("child reason: %s\n", reason.message().c_str());
}

/// Runs the child test with REMORA_CUDA_DRIVER=`library`, expecting `reason` (a prefix).
void expect_child_refuses(const std::string& library, const std::string& reason) {
  auto child = run_self(kChildTest, {"REMORA_CUDA_DRIVER=" + library, std::string(kExpectVariable) + "=" + reason});
  EXPECT_TRUE(child.ok()) << itest::Process::describe(child.status) << "\n" << child.output;
  // gtest exits 0 when the filter matches nothing, or when the test skips.
  EXPECT_NE(child.output.find("[  PASSED  ] 1 test"), std::string::npos) << child.output;
  EXPECT_EQ(child.output.find("SKIPPED"), std::string::npos) << child.output;
  EXPECT_NE(child.output.find("child reason: " + reason), std::string::npos) << child.output;
}

TEST(CudaDriverChild, MissingLibraryGivesTheDlopenReason) {
  const std::string path = "/nonexistent/libcuda.so.1";
  expect_child_refuses(path,
                       "no CUDA driver: dlopen(/nonexistent/libcuda.so.1) (from REMORA_CUDA_DRIVER): "
                       "/nonexistent/libcuda.so.1: cannot open shared object file: No such file or directory");
}

TEST(CudaDriverChild, LibraryWithoutCuInitIsNotADriver) {
  // Any library the loader finds on every Linux system will do.
  expect_child_refuses("libm.so.6",
                       "no CUDA driver: libm.so.6 (from REMORA_CUDA_DRIVER) has no cuInit, so it is not a CUDA "
                       "driver library");
}

TEST(CudaDriverChild, StubLibraryIsRefusedAtCuInit) {
#ifndef REMORA_TEST_CUDA_STUB
  GTEST_SKIP() << "no CUDA toolkit stub library (stubs/libcuda.so) was found when the tests were configured";
#else
  expect_child_refuses(REMORA_TEST_CUDA_STUB,
                       "CUDA driver stub library (no GPU driver installed): cuInit returned 34 CUDA_ERROR_STUB_LIBRARY "
                       "(" REMORA_TEST_CUDA_STUB " (from REMORA_CUDA_DRIVER) is the toolkit's link-time stand-in");
#endif
}

}  // namespace
}  // namespace remora::device
