// device/cuda_driver.cc — loading the CUDA driver at run time (cuda_driver.h).
//
// Order matters: cuInit is looked up and called first, because the toolkit's stub
// library (stubs/libcuda.so, which exists only so that programs can link) exports every
// symbol and refuses at cuInit; reporting that refusal is more useful than reporting
// whatever the stub's cuGetProcAddress would say. The other entry points come from
// cuGetProcAddress_v2 (CUDA 12.0) with the ABI version each was declared for, falling
// back to dlsym of the versioned export name on older drivers.
#include "device/cuda_driver.h"

#include <dlfcn.h>

#include <memory>
#include <string>

#include <fmt/format.h>

#include "core/env.h"
#include "core/log.h"
#include "device/variables.h"

namespace remora::device {
namespace {

constexpr const char* kDefaultDriver = "libcuda.so.1";
constexpr ConfigVariable kDriverVariable{
    .name = "REMORA_CUDA_DRIVER",
    .section = "Devices",
    .kind = ConfigKind::kText,
    .default_text = "libcuda.so.1",
    .max = 4096,
    .doc =
        "the CUDA driver library to `dlopen` (a path, or a name the loader searches); where it cannot be loaded "
        "or is not a driver, CUDA is unavailable and every CUDA call says why"};

struct KnownResult {
  cu::CUresult code;
  const char* name;
};

// The names of the results remora reports itself, for drivers that cannot name them
// (the stub library answers cuGetErrorName with its own error).
constexpr KnownResult kKnownResults[] = {
    {cu::CUDA_SUCCESS, "CUDA_SUCCESS"},
    {cu::CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
    {cu::CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
    {cu::CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
    {cu::CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED"},
    {cu::CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY"},
    {cu::CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"},
    {cu::CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE"},
    {cu::CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE"},
    {cu::CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
    {cu::CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE"},
    {cu::CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"},
    {cu::CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
    {cu::CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX"},
    {cu::CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
    {cu::CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
    {cu::CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
    {cu::CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY"},
    {cu::CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS"},
    {cu::CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED"},
    {cu::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"},
    {cu::CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"},
    {cu::CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED"},
    {cu::CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED"},
    {cu::CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"},
    {cu::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"},
    {cu::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"},
    {cu::CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN"},
};

const char* known_name(cu::CUresult result) noexcept {
  for (const KnownResult& known : kKnownResults) {
    if (known.code == result) return known.name;
  }
  return nullptr;
}

std::string version_string(int version) { return fmt::format("{}.{}", version / 1000, (version % 1000) / 10); }

std::string last_dlerror() {
  const char* error = dlerror();
  return error != nullptr ? error : "no error text from dlerror";
}

/// One entry point: from cuGetProcAddress_v2 for `abi_version` where the driver has it
/// (then *via_proc_address is left true), else the exported symbol of that version.
void* resolve(void* handle, cu::PFN_cuGetProcAddress get_proc, const char* name, const char* exported, int abi_version,
              bool* via_proc_address) noexcept {
  if (get_proc != nullptr) {
    void* fn = nullptr;
    cu::CUdriverProcAddressQueryResult found = cu::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (get_proc(name, &fn, abi_version, cu::CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found) == cu::CUDA_SUCCESS &&
        found == cu::CU_GET_PROC_ADDRESS_SUCCESS && fn != nullptr) {
      return fn;
    }
  }
  void* fn = dlsym(handle, exported);
  if (fn != nullptr) *via_proc_address = false;
  return fn;
}

Result<const CudaDriver*> load() {
  REMORA_ASSIGN_OR_RETURN(const auto configured, core::read_text(kDriverVariable));
  const std::string path = configured ? std::string(*configured) : kDefaultDriver;
  const std::string origin = configured ? fmt::format(" (from {})", kDriverVariable.name) : "";

  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("no CUDA driver: dlopen({}){}: {}", path, origin, last_dlerror()));
  }
  auto driver = std::make_unique<CudaDriver>();
  driver->path = path;

  // Before cuInit succeeds the library may be closed again; after, the driver has
  // started threads and stays loaded whatever else goes wrong.
  using InitFn = cu::CUresult (*)(unsigned int flags);
  const auto init = reinterpret_cast<InitFn>(dlsym(handle, "cuInit"));
  if (init == nullptr) {
    dlclose(handle);
    return Status(StatusCode::kUnsupported,
                  fmt::format("no CUDA driver: {}{} has no cuInit, so it is not a CUDA driver library", path, origin));
  }
  const cu::CUresult init_result = init(0);
  if (init_result == cu::CUDA_ERROR_STUB_LIBRARY) {
    dlclose(handle);
    return Status(StatusCode::kUnsupported,
                  fmt::format("CUDA driver stub library (no GPU driver installed): cuInit returned {} "
                              "CUDA_ERROR_STUB_LIBRARY ({}{} is the toolkit's link-time stand-in for libcuda.so.1; "
                              "install the NVIDIA driver to use a GPU)",
                              static_cast<int>(init_result), path, origin));
  }
  if (init_result != cu::CUDA_SUCCESS) {
    driver->cuGetErrorName = reinterpret_cast<decltype(driver->cuGetErrorName)>(dlsym(handle, "cuGetErrorName"));
    driver->cuGetErrorString = reinterpret_cast<decltype(driver->cuGetErrorString)>(dlsym(handle, "cuGetErrorString"));
    std::string reason = describe_cuda_result(driver.get(), init_result);
    dlclose(handle);
    return Status(StatusCode::kUnsupported,
                  fmt::format("CUDA driver {}{} failed to initialise: cuInit returned {}", path, origin, reason));
  }

  const auto get_proc = reinterpret_cast<cu::PFN_cuGetProcAddress>(dlsym(handle, "cuGetProcAddress_v2"));
  driver->proc_address = get_proc != nullptr;  // until an entry point comes from dlsym
  std::string missing;
#define REMORA_CUDA_RESOLVE(name, suffix, abi_version, required, params)                   \
  driver->name = reinterpret_cast<decltype(driver->name)>(                                 \
      resolve(handle, get_proc, #name, #name suffix, abi_version, &driver->proc_address)); \
  if (driver->name == nullptr && (required))                                               \
    missing += fmt::format("{}{} (CUDA {})", missing.empty() ? "" : ", ", #name suffix, version_string(abi_version));
  REMORA_CUDA_DRIVER_FUNCTIONS(REMORA_CUDA_RESOLVE)
#undef REMORA_CUDA_RESOLVE

  if (driver->cuDriverGetVersion != nullptr && driver->cuDriverGetVersion(&driver->version) != cu::CUDA_SUCCESS) {
    driver->version = 0;
  }
  if (!missing.empty()) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("CUDA driver {}{} (version {}) lacks {}: update the NVIDIA driver", path, origin,
                              version_string(driver->version), missing));
  }
  REMORA_LOG(kInfo, "CUDA driver {}{} loaded: version {}, entry points from {}", path, origin,
             version_string(driver->version), driver->proc_address ? "cuGetProcAddress_v2" : "dlsym");
  return static_cast<const CudaDriver*>(driver.release());  // never unloaded: copies may be in flight at exit
}

}  // namespace

core::VariableTable variables() noexcept {
  static constexpr ConfigVariable kVariables[] = {kDriverVariable};
  return kVariables;
}

Result<const CudaDriver*> cuda_driver() {
  static const Result<const CudaDriver*> kLoaded = load();  // once per process; thread-safe
  return kLoaded;
}

std::string describe_cuda_result(const CudaDriver* driver, cu::CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (driver != nullptr && driver->cuGetErrorName != nullptr &&
      driver->cuGetErrorName(result, &name) != cu::CUDA_SUCCESS) {
    name = nullptr;
  }
  if (driver != nullptr && driver->cuGetErrorString != nullptr &&
      driver->cuGetErrorString(result, &text) != cu::CUDA_SUCCESS) {
    text = nullptr;
  }
  if (name == nullptr) name = known_name(result);
  std::string out = fmt::format("{} {}", static_cast<int>(result), name != nullptr ? name : "(unknown CUDA result)");
  if (text != nullptr) out += fmt::format(": {}", text);
  return out;
}

Status cuda_error(const CudaDriver& driver, cu::CUresult result, std::string_view call, std::string_view what) {
  StatusCode code = StatusCode::kDeviceFailed;
  switch (result) {
    case cu::CUDA_ERROR_OUT_OF_MEMORY: code = StatusCode::kNoResource; break;
    case cu::CUDA_ERROR_INVALID_VALUE: code = StatusCode::kInvalidArgument; break;
    case cu::CUDA_ERROR_NOT_SUPPORTED:
    case cu::CUDA_ERROR_NOT_PERMITTED: code = StatusCode::kUnsupported; break;
    default: break;
  }
  std::string message = fmt::format("{} returned {}", call, describe_cuda_result(&driver, result));
  if (!what.empty()) message = fmt::format("{}: {}", what, message);
  return Status(code, std::move(message));
}

}  // namespace remora::device
