// tests/nccl/installed_nccl.cc — the facts NCCL's own installed headers state about the
// plugin ABI (nccl.h, nccl_device/net_device.h), compiled only where CMake found them, in
// a translation unit of their own (their names clash with plugin/nccl/net_abi.h's).
#include <cstddef>

#include <nccl.h>
#include <nccl_device/net_device.h>

#include "installed_nccl.h"

InstalledNccl installed_nccl() {
  InstalledNccl n;
  n.version_code = NCCL_VERSION_CODE;
  n.results = {ncclSuccess, ncclUnhandledCudaError, ncclSystemError, ncclInternalError,
               ncclInvalidArgument, ncclInvalidUsage, ncclRemoteError, ncclInProgress};
  n.device_host = NCCL_NET_DEVICE_HOST;
  n.device_unpack = NCCL_NET_DEVICE_UNPACK;
  n.device_handle_size = sizeof(ncclNetDeviceHandle_v8_t);
  n.device_handle_size_offset = offsetof(ncclNetDeviceHandle_v8_t, size);
  n.device_handle_proxy_offset = offsetof(ncclNetDeviceHandle_v8_t, needsProxyProgress);
  return n;
}
