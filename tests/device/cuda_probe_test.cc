// Tests for the public CUDA probe (remora/cuda.h), which `remora doctor` reports: it
// agrees with the driver loader, says why where there is no driver, describes every
// device where there is one, and knows whether the unpack kernel was built.
#include <cctype>
#include <string>

#include "device/cuda_test_util.h"
#include "remora/cuda.h"
#include "remora/remora.h"

namespace remora {
namespace {

/// "0000:65:00.0": domain (4 or 8 hex digits), bus, device, then a function 0-7. (Not
/// std::regex: GCC 12 warns inside it under ASan, and warnings are errors.)
bool is_pci_bus_id(const std::string& id) {
  const size_t colon = id.find(':');
  if (colon != 4 && colon != 8) return false;
  const std::string rest = id.substr(colon);
  if (rest.size() != 8 || rest[0] != ':' || rest[3] != ':' || rest[6] != '.' || rest[7] < '0' || rest[7] > '7') {
    return false;
  }
  for (size_t i = 0; i < id.size(); ++i) {
    if (i == colon || i == colon + 3 || i == colon + 6 || i == colon + 7) continue;
    if (std::isxdigit(static_cast<unsigned char>(id[i])) == 0) return false;
  }
  return true;
}

TEST(CudaProbe, KnowsAPciBusIdWhenItSeesOne) {
  EXPECT_TRUE(is_pci_bus_id("0000:65:00.0"));
  EXPECT_TRUE(is_pci_bus_id("00000000:C1:1f.7"));
  EXPECT_FALSE(is_pci_bus_id("0000:65:00.8"));
  EXPECT_FALSE(is_pci_bus_id("0000:65:00"));
  EXPECT_FALSE(is_pci_bus_id("000:65:00.0"));
  EXPECT_FALSE(is_pci_bus_id("0000:6x:00.0"));
  EXPECT_FALSE(is_pci_bus_id(""));
}

TEST(CudaProbe, AgreesWithTheDriverLoader) {
  const CudaProbe probe = probe_cuda();
#ifdef REMORA_TEST_UNPACK_FATBIN
  EXPECT_TRUE(probe.unpack_kernel_built);
#else
  EXPECT_FALSE(probe.unpack_kernel_built);
#endif
  auto driver = device::cuda_driver();
  ASSERT_EQ(probe.driver_loaded, driver.is_ok());
  if (!driver.is_ok()) {
    EXPECT_EQ(probe.reason, driver.status().message());
    EXPECT_FALSE(probe.reason.empty());
    EXPECT_TRUE(probe.driver_path.empty());
    EXPECT_EQ(probe.driver_version, 0);
    EXPECT_TRUE(probe.devices.empty());
    return;
  }
  EXPECT_EQ(probe.driver_path, (*driver)->path);
  EXPECT_EQ(probe.driver_version, (*driver)->version);
  int count = -1;
  ASSERT_EQ((*driver)->cuDeviceGetCount(&count), device::cu::CUDA_SUCCESS);
  ASSERT_EQ(probe.devices.size(), static_cast<size_t>(count));
  for (size_t i = 0; i < probe.devices.size(); ++i) {
    const CudaDeviceInfo& d = probe.devices[i];
    SCOPED_TRACE("device " + std::to_string(i));
    EXPECT_EQ(d.ordinal, static_cast<int>(i));
    EXPECT_TRUE(d.error.empty()) << d.error;
    EXPECT_FALSE(d.name.empty());
    EXPECT_TRUE(is_pci_bus_id(d.pci_bus_id)) << d.pci_bus_id;
    EXPECT_GT(d.total_memory_bytes, 0u);
    EXPECT_GE(d.compute_capability_major, 3);
    std::printf("CUDA device %d: %s, %s, %llu MiB, sm_%d%d, dmabuf %s\n", d.ordinal, d.name.c_str(),
                d.pci_bus_id.c_str(), static_cast<unsigned long long>(d.total_memory_bytes >> 20),
                d.compute_capability_major, d.compute_capability_minor, d.dmabuf_supported ? "yes" : "no");
  }
}

TEST(CudaProbe, CreatesNoContext) {
  auto driver = device::cuda_driver();
  if (!driver.is_ok()) GTEST_SKIP() << "needs a CUDA driver: " << driver.status().message();
  (void)probe_cuda();
  device::cu::CUcontext current = nullptr;
  ASSERT_EQ((*driver)->cuCtxGetCurrent(&current), device::cu::CUDA_SUCCESS);
  EXPECT_EQ(current, nullptr);
}

}  // namespace
}  // namespace remora
