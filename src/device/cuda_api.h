// device/cuda_api.h — the part of the CUDA driver API that remora calls, declared here
// so the library compiles (and runs, reporting why CUDA is unavailable) on machines
// without a CUDA toolkit. The driver itself is loaded at run time (device/cuda_driver.h).
//
// Names and values are the driver's own (cuda.h), in a namespace of ours so a file may
// include both. Every value, and the signature of every function in
// REMORA_CUDA_DRIVER_FUNCTIONS, is checked against cuda.h at compile time wherever CMake
// found a toolkit (device/cuda_api_check.cc). The function signatures are those of the
// ABI version named in the list: the driver is asked for exactly that version, so a
// newer driver that changed a function keeps serving the version we declare.
#pragma once

#include <cstddef>
#include <cstdint>

namespace remora::device::cu {

// NOLINTBEGIN(readability-identifier-naming): the driver's names, kept so they can be
// looked up in NVIDIA's documentation.

enum CUresult : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER = 36,
  CUDA_ERROR_DEVICE_UNAVAILABLE = 46,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
  CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
  CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
  CUDA_ERROR_NOT_PERMITTED = 800,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
  CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804,
  CUDA_ERROR_UNKNOWN = 999,
};

using CUdevice = int;
using CUdeviceptr = unsigned long long;  // CUdeviceptr_v2
using cuuint64_t = uint64_t;

struct CUctx_st;
struct CUstream_st;
struct CUevent_st;
struct CUmod_st;
struct CUfunc_st;
using CUcontext = CUctx_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUhostFn = void (*)(void* user_data);

enum CUdevice_attribute : int {
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
  CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED = 99,
  CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124,
};

enum CUpointer_attribute : int {
  CU_POINTER_ATTRIBUTE_CONTEXT = 1,
  CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
  CU_POINTER_ATTRIBUTE_SYNC_MEMOPS = 6,
  CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
};

enum CUmemorytype : int {
  CU_MEMORYTYPE_HOST = 1,
  CU_MEMORYTYPE_DEVICE = 2,
  CU_MEMORYTYPE_ARRAY = 3,
  CU_MEMORYTYPE_UNIFIED = 4,
};

enum CUmemRangeHandleType : int {
  CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1,
};

enum CUdriverProcAddressQueryResult : int {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

inline constexpr unsigned int CU_STREAM_NON_BLOCKING = 0x1;
inline constexpr unsigned int CU_EVENT_DISABLE_TIMING = 0x2;
inline constexpr unsigned int CU_MEMHOSTREGISTER_PORTABLE = 0x1;
inline constexpr cuuint64_t CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1u << 0;

/// cuGetProcAddress_v2 (CUDA 12.0), looked up with dlsym; everything else through it.
using PFN_cuGetProcAddress = CUresult (*)(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                                          CUdriverProcAddressQueryResult* symbol_status);

// NOLINTEND(readability-identifier-naming)

}  // namespace remora::device::cu

/// Every driver function remora uses, as X(name, dlsym suffix, ABI version, required,
/// parameter list). `name` is what cuGetProcAddress is asked for, with the CUDA version
/// `version` (1000 × major + 10 × minor), whose signature `parameters` declares; `name`
/// followed by `suffix` is the exported symbol of that version, the fallback for drivers
/// older than CUDA 12.0 (no cuGetProcAddress_v2). A driver without a required function
/// cannot be used; an optional one is null where missing (the call that needs it says
/// so). The functions used only by the tests (cuMemAlloc, cuMemcpyHtoD, ...) are here
/// too: tests drive the real driver, not a model of it.
#define REMORA_CUDA_DRIVER_FUNCTIONS(X)                                                                         \
  X(cuGetErrorName, "", 6000, true, (CUresult error, const char** str))                                         \
  X(cuGetErrorString, "", 6000, true, (CUresult error, const char** str))                                       \
  X(cuDriverGetVersion, "", 2020, true, (int* version))                                                         \
  X(cuDeviceGetCount, "", 2000, true, (int* count))                                                             \
  X(cuDeviceGet, "", 2000, true, (CUdevice * device, int ordinal))                                              \
  X(cuDeviceGetName, "", 2000, true, (char* name, int len, CUdevice dev))                                       \
  X(cuDeviceGetAttribute, "", 2000, true, (int* value, CUdevice_attribute attrib, CUdevice dev))                \
  X(cuDeviceTotalMem, "_v2", 3020, true, (size_t * bytes, CUdevice dev))                                        \
  X(cuDeviceGetPCIBusId, "", 4010, true, (char* bus_id, int len, CUdevice dev))                                 \
  X(cuDevicePrimaryCtxRetain, "", 7000, true, (CUcontext * ctx, CUdevice dev))                                  \
  X(cuDevicePrimaryCtxRelease, "_v2", 11000, true, (CUdevice dev))                                              \
  X(cuCtxPushCurrent, "_v2", 4000, true, (CUcontext ctx))                                                       \
  X(cuCtxPopCurrent, "_v2", 4000, true, (CUcontext * ctx))                                                      \
  X(cuCtxGetCurrent, "", 4000, true, (CUcontext * ctx))                                                         \
  X(cuCtxGetId, "", 12000, false, (CUcontext ctx, unsigned long long* id))                                      \
  X(cuPointerGetAttribute, "", 4000, true, (void* data, CUpointer_attribute attribute, CUdeviceptr ptr))        \
  X(cuPointerGetAttributes, "", 7000, true,                                                                     \
    (unsigned int count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr))                        \
  X(cuPointerSetAttribute, "", 6000, true, (const void* value, CUpointer_attribute attribute, CUdeviceptr ptr)) \
  X(cuMemGetAddressRange, "_v2", 3020, true, (CUdeviceptr * base, size_t * size, CUdeviceptr ptr))              \
  X(cuMemAlloc, "_v2", 3020, true, (CUdeviceptr * ptr, size_t bytes))                                           \
  X(cuMemFree, "_v2", 3020, true, (CUdeviceptr ptr))                                                            \
  X(cuMemAllocHost, "_v2", 3020, true, (void** ptr, size_t bytes))                                              \
  X(cuMemFreeHost, "", 2000, true, (void* ptr))                                                                 \
  X(cuMemHostRegister, "_v2", 6050, true, (void* ptr, size_t bytes, unsigned int flags))                        \
  X(cuMemHostUnregister, "", 4000, true, (void* ptr))                                                           \
  X(cuMemcpyHtoD, "_v2", 3020, true, (CUdeviceptr dst, const void* src, size_t bytes))                          \
  X(cuMemcpyDtoH, "_v2", 3020, true, (void* dst, CUdeviceptr src, size_t bytes))                                \
  X(cuMemsetD8, "_v2", 3020, true, (CUdeviceptr dst, unsigned char value, size_t count))                        \
  X(cuMemcpyHtoDAsync, "_v2", 3020, true, (CUdeviceptr dst, const void* src, size_t bytes, CUstream stream))    \
  X(cuMemcpyDtoHAsync, "_v2", 3020, true, (void* dst, CUdeviceptr src, size_t bytes, CUstream stream))          \
  X(cuMemcpyDtoDAsync, "_v2", 3020, true, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream))    \
  X(cuStreamCreate, "", 2000, true, (CUstream * stream, unsigned int flags))                                    \
  X(cuStreamDestroy, "_v2", 4000, true, (CUstream stream))                                                      \
  X(cuStreamSynchronize, "", 2000, true, (CUstream stream))                                                     \
  X(cuStreamWaitEvent, "", 3020, true, (CUstream stream, CUevent event, unsigned int flags))                    \
  X(cuEventCreate, "", 2000, true, (CUevent * event, unsigned int flags))                                       \
  X(cuEventRecord, "", 2000, true, (CUevent event, CUstream stream))                                            \
  X(cuEventQuery, "", 2000, true, (CUevent event))                                                              \
  X(cuEventSynchronize, "", 2000, true, (CUevent event))                                                        \
  X(cuEventDestroy, "_v2", 4000, true, (CUevent event))                                                         \
  X(cuLaunchHostFunc, "", 10000, true, (CUstream stream, CUhostFn fn, void* user_data))                         \
  X(cuModuleLoadData, "", 2000, true, (CUmodule * module, const void* image))                                   \
  X(cuModuleGetFunction, "", 2000, true, (CUfunction * function, CUmodule module, const char* name))            \
  X(cuModuleUnload, "", 2000, true, (CUmodule module))                                                          \
  X(cuLaunchKernel, "", 4000, true,                                                                             \
    (CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z, unsigned int block_x,         \
     unsigned int block_y, unsigned int block_z, unsigned int shared_bytes, CUstream stream, void** params,     \
     void** extra))                                                                                             \
  X(cuMemGetHandleForAddressRange, "", 11070, false,                                                            \
    (void* handle, CUdeviceptr ptr, size_t size, CUmemRangeHandleType type, unsigned long long flags))
