// device/cuda_api_check.cc — compiled only where CMake found a CUDA toolkit: checks at
// compile time that device/cuda_api.h, our own declaration of the driver API, matches
// the toolkit's cuda.h — every enumerator's value, and every function of
// REMORA_CUDA_DRIVER_FUNCTIONS against cuda.h's PFN_<name>_v<version> type
// (cudaTypedefs.h). It defines nothing: a mismatch fails the build.
//
// device/cuda_driver.h must come before cuda.h (it refuses otherwise), so the include
// order here is deliberate.
// clang-format off
#include "device/cuda_driver.h"

#include <cuda.h>
#include <cudaTypedefs.h>
// clang-format on

#include <type_traits>

namespace remora::device {
namespace {

/// Our type -> cuda.h's type, through pointers, const and function pointer types.
template <typename T>
struct ToCuda {
  using type = T;
};
template <typename T>
struct ToCuda<T*> {
  using type = typename ToCuda<T>::type*;
};
template <typename T>
struct ToCuda<const T> {
  using type = const typename ToCuda<T>::type;
};
template <typename R, typename... Args>
struct ToCuda<R (*)(Args...)> {
  using type = typename ToCuda<R>::type (*)(typename ToCuda<Args>::type...);
};
#define REMORA_CUDA_SAME_TYPE(ours, theirs) \
  template <>                               \
  struct ToCuda<ours> {                     \
    using type = theirs;                    \
  };
REMORA_CUDA_SAME_TYPE(cu::CUresult, ::CUresult)
REMORA_CUDA_SAME_TYPE(cu::CUctx_st, ::CUctx_st)
REMORA_CUDA_SAME_TYPE(cu::CUstream_st, ::CUstream_st)
REMORA_CUDA_SAME_TYPE(cu::CUevent_st, ::CUevent_st)
REMORA_CUDA_SAME_TYPE(cu::CUmod_st, ::CUmod_st)
REMORA_CUDA_SAME_TYPE(cu::CUfunc_st, ::CUfunc_st)
REMORA_CUDA_SAME_TYPE(cu::CUdevice_attribute, ::CUdevice_attribute)
REMORA_CUDA_SAME_TYPE(cu::CUpointer_attribute, ::CUpointer_attribute)
REMORA_CUDA_SAME_TYPE(cu::CUmemRangeHandleType, ::CUmemRangeHandleType)
REMORA_CUDA_SAME_TYPE(cu::CUdriverProcAddressQueryResult, ::CUdriverProcAddressQueryResult)
#undef REMORA_CUDA_SAME_TYPE

static_assert(std::is_same_v<cu::CUdevice, ::CUdevice>);
static_assert(std::is_same_v<cu::CUdeviceptr, ::CUdeviceptr>);
static_assert(std::is_same_v<cu::cuuint64_t, ::cuuint64_t>);
static_assert(std::is_same_v<ToCuda<cu::CUhostFn>::type, ::CUhostFn>);
static_assert(std::is_same_v<ToCuda<cu::PFN_cuGetProcAddress>::type, PFN_cuGetProcAddress_v12000>);

#define REMORA_CUDA_SAME_VALUE(name) \
  static_assert(static_cast<long long>(cu::name) == static_cast<long long>(::name), #name " differs from cuda.h");
REMORA_CUDA_SAME_VALUE(CUDA_SUCCESS)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_INVALID_VALUE)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_OUT_OF_MEMORY)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_NOT_INITIALIZED)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_DEINITIALIZED)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_STUB_LIBRARY)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_DEVICE_UNAVAILABLE)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_NO_DEVICE)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_INVALID_DEVICE)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_INVALID_IMAGE)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_INVALID_CONTEXT)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_NO_BINARY_FOR_GPU)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_INVALID_PTX)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_INVALID_HANDLE)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_NOT_FOUND)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_NOT_READY)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_ILLEGAL_ADDRESS)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_LAUNCH_FAILED)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_CONTEXT_IS_DESTROYED)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_NOT_PERMITTED)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_NOT_SUPPORTED)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE)
REMORA_CUDA_SAME_VALUE(CUDA_ERROR_UNKNOWN)
REMORA_CUDA_SAME_VALUE(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
REMORA_CUDA_SAME_VALUE(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)
REMORA_CUDA_SAME_VALUE(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)
REMORA_CUDA_SAME_VALUE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
REMORA_CUDA_SAME_VALUE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
REMORA_CUDA_SAME_VALUE(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED)
REMORA_CUDA_SAME_VALUE(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)
REMORA_CUDA_SAME_VALUE(CU_POINTER_ATTRIBUTE_CONTEXT)
REMORA_CUDA_SAME_VALUE(CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
REMORA_CUDA_SAME_VALUE(CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
REMORA_CUDA_SAME_VALUE(CU_POINTER_ATTRIBUTE_IS_MANAGED)
REMORA_CUDA_SAME_VALUE(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
REMORA_CUDA_SAME_VALUE(CU_MEMORYTYPE_HOST)
REMORA_CUDA_SAME_VALUE(CU_MEMORYTYPE_DEVICE)
REMORA_CUDA_SAME_VALUE(CU_MEMORYTYPE_ARRAY)
REMORA_CUDA_SAME_VALUE(CU_MEMORYTYPE_UNIFIED)
REMORA_CUDA_SAME_VALUE(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)
REMORA_CUDA_SAME_VALUE(CU_GET_PROC_ADDRESS_SUCCESS)
REMORA_CUDA_SAME_VALUE(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
REMORA_CUDA_SAME_VALUE(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
REMORA_CUDA_SAME_VALUE(CU_STREAM_NON_BLOCKING)
REMORA_CUDA_SAME_VALUE(CU_EVENT_DISABLE_TIMING)
REMORA_CUDA_SAME_VALUE(CU_GET_PROC_ADDRESS_LEGACY_STREAM)
#undef REMORA_CUDA_SAME_VALUE

// A macro in cuda.h, which would rename our constant of the same name.
constexpr unsigned int kCudaHostRegisterPortable = CU_MEMHOSTREGISTER_PORTABLE;
#pragma push_macro("CU_MEMHOSTREGISTER_PORTABLE")
#undef CU_MEMHOSTREGISTER_PORTABLE
static_assert(cu::CU_MEMHOSTREGISTER_PORTABLE == kCudaHostRegisterPortable, "CU_MEMHOSTREGISTER_PORTABLE differs");
#pragma pop_macro("CU_MEMHOSTREGISTER_PORTABLE")

// Each function's type is cuda.h's type of the ABI version cuGetProcAddress is asked for.
#define REMORA_CUDA_SAME_SIGNATURE(name, suffix, abi_version, required, params)                   \
  static_assert(std::is_same_v<ToCuda<CudaDriver::name##_fn>::type, PFN_##name##_v##abi_version>, \
                "CudaDriver::" #name " is not cuda.h's PFN_" #name "_v" #abi_version);
REMORA_CUDA_DRIVER_FUNCTIONS(REMORA_CUDA_SAME_SIGNATURE)
#undef REMORA_CUDA_SAME_SIGNATURE

}  // namespace
}  // namespace remora::device
