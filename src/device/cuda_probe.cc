// device/cuda_probe.cc — the public CUDA entry points (remora/cuda.h): the process's
// CUDA domain and the driver and device probe for `remora doctor`.
#include <string>

#include <fmt/format.h>

#include "device/cuda_domain.h"
#include "device/cuda_driver.h"
#include "device/cuda_unpack.h"
#include "remora/cuda.h"

namespace remora {

namespace {
device::CudaDomain& process_domain() {
  // Never destroyed: regions and copies may outlive static destruction.
  static auto* domain = new device::CudaDomain(device::cuda_driver());
  return *domain;
}
}  // namespace

Result<MemoryDomain*> cuda_domain() {
  REMORA_RETURN_IF_ERROR(process_domain().available());
  return static_cast<MemoryDomain*>(&process_domain());
}

Result<void*> cuda_allocate(size_t bytes, int ordinal) { return process_domain().allocate(bytes, ordinal); }
Status cuda_free(void* ptr) { return process_domain().deallocate(ptr); }

namespace {

void describe_device(const device::CudaDriver& driver, int ordinal, CudaDeviceInfo* info) {
  namespace cu = device::cu;
  info->ordinal = ordinal;
  auto note = [&](cu::CUresult r, const char* call) {
    if (r == cu::CUDA_SUCCESS) return true;
    if (!info->error.empty()) info->error += "; ";
    info->error += fmt::format("{} returned {}", call, device::describe_cuda_result(&driver, r));
    return false;
  };
  cu::CUdevice device = 0;
  if (!note(driver.cuDeviceGet(&device, ordinal), "cuDeviceGet")) return;
  char text[256] = {};
  if (note(driver.cuDeviceGetName(text, sizeof(text) - 1, device), "cuDeviceGetName")) info->name = text;
  char bus_id[64] = {};
  if (note(driver.cuDeviceGetPCIBusId(bus_id, sizeof(bus_id) - 1, device), "cuDeviceGetPCIBusId")) {
    info->pci_bus_id = bus_id;
  }
  size_t bytes = 0;
  if (note(driver.cuDeviceTotalMem(&bytes, device), "cuDeviceTotalMem")) info->total_memory_bytes = bytes;
  note(driver.cuDeviceGetAttribute(&info->compute_capability_major, cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                   device),
       "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  note(driver.cuDeviceGetAttribute(&info->compute_capability_minor, cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                   device),
       "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
  int dmabuf = 0;
  if (note(driver.cuDeviceGetAttribute(&dmabuf, cu::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, device),
           "cuDeviceGetAttribute(DMA_BUF_SUPPORTED)")) {
    info->dmabuf_supported = dmabuf != 0;
  }
}

}  // namespace

CudaProbe probe_cuda() {
  CudaProbe probe;
  probe.unpack_kernel_built = !device::unpack_fatbin().empty();
  auto driver = device::cuda_driver();
  if (!driver.is_ok()) {
    probe.reason = driver.status().message();
    return probe;
  }
  const device::CudaDriver& d = **driver;
  probe.driver_loaded = true;
  probe.driver_path = d.path;
  probe.driver_version = d.version;
  int count = 0;
  const device::cu::CUresult r = d.cuDeviceGetCount(&count);
  if (r != device::cu::CUDA_SUCCESS) {
    probe.reason = fmt::format("cuDeviceGetCount returned {}", device::describe_cuda_result(&d, r));
    return probe;
  }
  probe.devices.resize(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) describe_device(d, i, &probe.devices[static_cast<size_t>(i)]);
  return probe;
}

}  // namespace remora
