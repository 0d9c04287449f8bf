// tests/device/emulated_cuda/emulated_driver.cc — a host-memory emulation of the part of
// the CUDA driver API remora calls, built as a shared library that REMORA_CUDA_DRIVER
// can name, so the CUDA domain's own logic — contexts pushed and popped, streams,
// events, host functions, on_done, the watcher that ends copies the driver failed,
// range checks, staging counts, the scatter's launch batching — runs in CI on machines
// without a GPU, under the sanitizers too.
//
// Device memory is a memfd mapped twice: the address handed out is mapped with no
// access at all, as a GPU's memory is to the CPU, so code that touches "device memory"
// directly instead of through the driver faults at once; the driver copies through a
// second, read-write mapping of the same pages.
//
// It is NOT a GPU and proves nothing about one: "device memory" is host memory, a
// stream is a host thread running its work in order, and a launch of the unpack kernel
// runs the kernel's per-thread copy (device/unpack_copy.h) on the host for each thread
// of each block in turn, from the launch's parameter block; the compiled kernel never
// runs here. It follows the driver's documented
// behaviour where remora depends on it: work on a stream runs in order; an event is
// done when the stream reaches it; host functions run on a driver thread and are
// dropped after a context-wide ("sticky") error, which every later call reports;
// cuPointerGetAttributes answers zeros for memory CUDA does not know;
// cuMemHostRegister refuses a range registered twice; calls that need a current
// context fail without one; cuEventDestroy may come before the event completes.
//
// Test controls (C symbols the tests look up with dlsym; absent from a real driver):
//   remora_emulated_cuda_fail_next_copy(): the next asynchronous copy to run raises a
//     sticky CUDA_ERROR_ILLEGAL_ADDRESS in its context instead of copying;
//   remora_emulated_cuda_clear_error(): forgets a sticky error (a real process would
//     need a new context);
//   remora_emulated_cuda_hold_streams(1|0): streams start no work while held (so a test
//     can enqueue everything before any of it runs, and fail it then);
//   remora_emulated_cuda_current_depth(): how many contexts this thread has pushed;
//   remora_emulated_cuda_calls_from_host_functions(): how many driver calls were made
//     from inside a host function, where CUDA forbids them (they also fail here);
//   remora_emulated_cuda_events_destroyed_without_context(): how many cuEventDestroy
//     calls came after every retain of the event's primary context was released (a
//     real driver has destroyed the context, and the event with it, by then: the call
//     fails with CUDA_ERROR_INVALID_CONTEXT, as it does here);
//   remora_emulated_cuda_wait_all_events_destroyed(ms): 1 once every event created has
//     been given to cuEventDestroy, 0 if that takes longer than `ms`.
// REMORA_TEST_CUDA_EMULATOR_NO_PROC_ADDRESS=1 makes cuGetProcAddress_v2 find nothing,
// so the loader's dlsym fallback is exercised.
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device/cuda_api.h"
#include "device/unpack_copy.h"
#include "device/unpack_layout.h"

using namespace remora::device::cu;  // NOLINT(google-build-using-namespace): this file is the driver

namespace remora::device::cu {

struct CUctx_st {
  uint64_t id = 0;
  std::atomic<int> error{CUDA_SUCCESS};  // sticky
  int refs = 0;
};

struct CUstream_st {
  CUcontext ctx = nullptr;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> work;
  bool running = false;
  bool stop = false;
  std::thread thread;
};

struct CUevent_st {
  CUcontext ctx = nullptr;
  std::atomic<bool> done{true};
  std::atomic<int> refs{1};  // the caller's, and one per record the stream has not reached
};

struct CUmod_st {};
struct CUfunc_st {};

}  // namespace remora::device::cu

namespace {

constexpr size_t kDeviceMemory = size_t{4} << 30;
constexpr const char* kUnpackKernel = "remora_unpack";

struct Range {
  size_t size = 0;
  CUcontext ctx = nullptr;
  bool device = false;  // cuMemAlloc; else page-locked host memory
  bool owned = false;   // we allocated the bytes (cuMemAlloc, cuMemAllocHost)
  bool sync_memops = false;
  unsigned char* view = nullptr;  // device memory: the read-write mapping the driver copies through
  size_t mapped = 0;              // device memory: bytes mapped (whole pages)
};

// The synchronisation objects are never destroyed: remora's copy watcher thread lives
// as long as the process and may still destroy an event while exit runs destructors.
// Nor are the ranges: this library's destructors run at exit before handlers that were
// registered before it was loaded, such as the NCCL plugin's teardown, which releases
// staging buffers (cuMemHostUnregister) and read a destroyed map under AddressSanitizer.
// A real driver answers such late calls; it does not fault.
std::mutex& g_mu = *new std::mutex;
std::map<uintptr_t, Range>& g_ranges = *new std::map<uintptr_t, Range>;  // by start
CUctx_st g_primary;

// Records reached (cuStreamWaitEvent waits on these).
std::mutex& g_event_done_mu = *new std::mutex;
std::condition_variable& g_event_done_cv = *new std::condition_variable;

// Events created and not yet given to cuEventDestroy; destroys after the context went.
std::mutex& g_event_count_mu = *new std::mutex;
std::condition_variable& g_event_count_cv = *new std::condition_variable;
int g_events_alive = 0;
std::atomic<int> g_events_without_context{0};
bool g_initialised = false;
std::atomic<bool> g_fail_next_copy{false};
std::mutex& g_hold_mu = *new std::mutex;
std::condition_variable& g_hold_cv = *new std::condition_variable;
bool g_hold = false;
CUfunc_st g_unpack_function;
// Initial-exec: in the static TLS block that glibc keeps spare for modules loaded
// later, not in dynamically allocated TLS. LeakSanitizer's tracer (GCC 12) crashed
// walking a dlopen'ed module's dynamic TLS in some processes (it depended on the
// build's path), failing every sanitized process that loaded this driver at exit.
// The context stack is a fixed array, not a vector: its memory would hang off TLS alone,
// and the sanitized tests that load this driver scan no TLS (LSAN_OPTIONS=use_tls=0,
// for the crash above), so a vector's buffer in a thread still alive at exit (remora's
// copy watcher) was reported as a leak whenever that thread had pushed a context.
struct ContextStack {
  static constexpr size_t kDepth = 64;
  std::array<CUcontext, kDepth> items{};
  size_t depth = 0;
};
[[gnu::tls_model("initial-exec")]] thread_local ContextStack t_contexts;
[[gnu::tls_model("initial-exec")]] thread_local bool t_in_host_function = false;
std::atomic<int> g_calls_from_host_functions{0};

/// Every entry point starts with this: CUDA forbids driver calls from a host function.
#define REMORA_EMULATED_ENTRY()        \
  do {                                 \
    if (t_in_host_function) {          \
      ++g_calls_from_host_functions;   \
      return CUDA_ERROR_NOT_PERMITTED; \
    }                                  \
  } while (0)

void release(CUevent event) {
  if (--event->refs == 0) delete event;
}

CUcontext current() { return t_contexts.depth == 0 ? nullptr : t_contexts.items[t_contexts.depth - 1]; }

/// The range that holds p and [p, p+len), under g_mu.
std::map<uintptr_t, Range>::iterator find_range(uintptr_t p, size_t len = 0) {
  auto it = g_ranges.upper_bound(p);
  if (it == g_ranges.begin()) return g_ranges.end();
  --it;
  const uintptr_t offset = p - it->first;
  if (offset >= it->second.size || len > it->second.size - offset) return g_ranges.end();
  return it;
}

bool is_device(CUdeviceptr p, size_t len) {
  std::lock_guard lock(g_mu);
  auto it = find_range(p, len);
  return it != g_ranges.end() && it->second.device;
}

CUresult sticky(CUcontext ctx) { return static_cast<CUresult>(ctx->error.load()); }

void stream_loop(CUstream s) {
  std::unique_lock lock(s->mu);
  for (;;) {
    s->cv.wait(lock, [s] { return s->stop || !s->work.empty(); });
    if (s->work.empty()) return;  // stopping, and drained
    std::function<void()> work = std::move(s->work.front());
    s->work.pop_front();
    s->running = true;
    lock.unlock();
    {
      std::unique_lock hold(g_hold_mu);
      g_hold_cv.wait(hold, [] { return !g_hold; });
    }
    work();
    lock.lock();
    s->running = false;
    s->cv.notify_all();
  }
}

CUresult enqueue(CUstream s, std::function<void()> work) {
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;  // remora never uses the legacy stream
  if (CUresult e = sticky(s->ctx); e != CUDA_SUCCESS) return e;
  {
    std::lock_guard lock(s->mu);
    s->work.push_back(std::move(work));
  }
  s->cv.notify_all();
  return CUDA_SUCCESS;
}

/// A copy as the stream runs it: skipped after a sticky error; the injected failure
/// raises one.
std::function<void()> copy_work(CUcontext ctx, void* dst, const void* src, size_t bytes) {
  return [ctx, dst, src, bytes] {
    if (ctx->error.load() != CUDA_SUCCESS) return;
    if (g_fail_next_copy.exchange(false)) {
      ctx->error = CUDA_ERROR_ILLEGAL_ADDRESS;
      return;
    }
    std::memmove(dst, src, bytes);
  };
}

/// Where the driver reaches device address `p`: its read-write view (null if unknown).
void* as_pointer(CUdeviceptr p) {
  std::lock_guard lock(g_mu);
  auto it = find_range(p);
  if (it == g_ranges.end() || !it->second.device) return nullptr;
  return it->second.view + (p - it->first);
}

CUresult need_context() { return current() == nullptr ? CUDA_ERROR_INVALID_CONTEXT : CUDA_SUCCESS; }

struct Name {
  CUresult code;
  const char* name;
  const char* text;
};
constexpr Name kNames[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

}  // namespace

extern "C" {

// NOLINTBEGIN(readability-identifier-naming,bugprone-easily-swappable-parameters)

void remora_emulated_cuda_fail_next_copy() { g_fail_next_copy = true; }
void remora_emulated_cuda_clear_error() { g_primary.error = CUDA_SUCCESS; }
void remora_emulated_cuda_hold_streams(int hold) {
  {
    std::lock_guard lock(g_hold_mu);
    g_hold = hold != 0;
  }
  g_hold_cv.notify_all();
}
int remora_emulated_cuda_current_depth() { return static_cast<int>(t_contexts.depth); }
int remora_emulated_cuda_calls_from_host_functions() { return g_calls_from_host_functions.load(); }
int remora_emulated_cuda_events_destroyed_without_context() { return g_events_without_context.load(); }
int remora_emulated_cuda_wait_all_events_destroyed(int ms) {
  std::unique_lock lock(g_event_count_mu);
  return g_event_count_cv.wait_for(lock, std::chrono::milliseconds(ms), [] { return g_events_alive == 0; }) ? 1 : 0;
}

CUresult cuInit(unsigned int flags) {
  REMORA_EMULATED_ENTRY();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mu);
  g_initialised = true;
  g_primary.id = 1;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char** str) {
  REMORA_EMULATED_ENTRY();
  for (const Name& n : kNames) {
    if (n.code == error) {
      *str = n.name;
      return CUDA_SUCCESS;
    }
  }
  *str = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char** str) {
  REMORA_EMULATED_ENTRY();
  for (const Name& n : kNames) {
    if (n.code == error) {
      *str = n.text;
      return CUDA_SUCCESS;
    }
  }
  *str = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDriverGetVersion(int* version) {
  REMORA_EMULATED_ENTRY();
  *version = 13000;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  REMORA_EMULATED_ENTRY();
  *count = 1;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  REMORA_EMULATED_ENTRY();
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  REMORA_EMULATED_ENTRY();
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "%s", "remora emulated CUDA device (host memory, not a GPU)");
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  REMORA_EMULATED_ENTRY();
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  REMORA_EMULATED_ENTRY();
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = kDeviceMemory;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char* bus_id, int len, CUdevice dev) {
  REMORA_EMULATED_ENTRY();
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(bus_id, static_cast<size_t>(len), "%s", "0000:00:00.0");
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  REMORA_EMULATED_ENTRY();
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(g_mu);
  ++g_primary.refs;
  *ctx = &g_primary;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  REMORA_EMULATED_ENTRY();
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(g_mu);
  if (g_primary.refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --g_primary.refs;
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  REMORA_EMULATED_ENTRY();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_contexts.depth == ContextStack::kDepth) return CUDA_ERROR_OUT_OF_MEMORY;  // deeper than any caller goes
  t_contexts.items[t_contexts.depth++] = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext* ctx) {
  REMORA_EMULATED_ENTRY();
  if (t_contexts.depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --t_contexts.depth;
  if (ctx != nullptr) *ctx = t_contexts.items[t_contexts.depth];
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* ctx) {
  REMORA_EMULATED_ENTRY();
  *ctx = current();
  return CUDA_SUCCESS;
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long* id) {
  REMORA_EMULATED_ENTRY();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *id = ctx->id;
  return CUDA_SUCCESS;
}

CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr) {
  REMORA_EMULATED_ENTRY();
  std::lock_guard lock(g_mu);
  auto it = find_range(ptr);
  const bool known = it != g_ranges.end();
  for (unsigned int i = 0; i < count; ++i) {
    switch (attributes[i]) {
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *static_cast<unsigned int*>(data[i]) = !known              ? 0
                                               : it->second.device ? CU_MEMORYTYPE_DEVICE
                                                                   : CU_MEMORYTYPE_HOST;
        break;
      case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data[i]) = known ? it->second.ctx : nullptr; break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data[i]) = known ? 0 : -2; break;
      case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *static_cast<unsigned int*>(data[i]) = known && it->second.sync_memops ? 1 : 0;
        break;
      case CU_POINTER_ATTRIBUTE_IS_MANAGED: *static_cast<unsigned int*>(data[i]) = 0; break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  REMORA_EMULATED_ENTRY();
  {
    std::lock_guard lock(g_mu);
    if (find_range(ptr) == g_ranges.end()) return CUDA_ERROR_INVALID_VALUE;
  }
  void* one[] = {data};
  return cuPointerGetAttributes(1, &attribute, one, ptr);
}

CUresult cuPointerSetAttribute(const void* value, CUpointer_attribute attribute, CUdeviceptr ptr) {
  REMORA_EMULATED_ENTRY();
  if (attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mu);
  auto it = find_range(ptr);
  if (it == g_ranges.end() || !it->second.device) return CUDA_ERROR_INVALID_VALUE;
  it->second.sync_memops = *static_cast<const unsigned int*>(value) != 0;
  return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  REMORA_EMULATED_ENTRY();
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(g_mu);
  auto it = find_range(ptr);
  if (it == g_ranges.end() || !it->second.device) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = it->first;
  if (size != nullptr) *size = it->second.size;
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes) {
  REMORA_EMULATED_ENTRY();
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t mapped = (bytes + 4095) / 4096 * 4096;
  const int fd = memfd_create("remora-emulated-cuda-device-memory", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  void* device = MAP_FAILED;
  void* view = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(mapped)) == 0) {
    device = mmap(nullptr, mapped, PROT_NONE, MAP_SHARED, fd, 0);
    view = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (device == MAP_FAILED || view == MAP_FAILED) {
    if (device != MAP_FAILED) munmap(device, mapped);
    if (view != MAP_FAILED) munmap(view, mapped);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard lock(g_mu);
  g_ranges[reinterpret_cast<uintptr_t>(device)] = Range{.size = bytes,
                                                        .ctx = current(),
                                                        .device = true,
                                                        .owned = true,
                                                        .view = static_cast<unsigned char*>(view),
                                                        .mapped = mapped};
  *ptr = reinterpret_cast<uintptr_t>(device);
  return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
  REMORA_EMULATED_ENTRY();
  std::lock_guard lock(g_mu);
  auto it = g_ranges.find(ptr);
  if (it == g_ranges.end() || !it->second.device) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(ptr), it->second.mapped);  // NOLINT(performance-no-int-to-ptr)
  munmap(it->second.view, it->second.mapped);
  g_ranges.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemAllocHost_v2(void** ptr, size_t bytes) {
  REMORA_EMULATED_ENTRY();
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard lock(g_mu);
  g_ranges[reinterpret_cast<uintptr_t>(p)] = Range{.size = bytes, .ctx = current(), .device = false, .owned = true};
  *ptr = p;
  return CUDA_SUCCESS;
}

CUresult cuMemFreeHost(void* ptr) {
  REMORA_EMULATED_ENTRY();
  std::lock_guard lock(g_mu);
  auto it = g_ranges.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == g_ranges.end() || it->second.device || !it->second.owned) return CUDA_ERROR_INVALID_VALUE;
  std::free(ptr);
  g_ranges.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemHostRegister_v2(void* ptr, size_t bytes, unsigned int flags) {
  REMORA_EMULATED_ENTRY();
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (ptr == nullptr || bytes == 0 || (flags & ~0xFu) != 0) return CUDA_ERROR_INVALID_VALUE;
  const uintptr_t start = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard lock(g_mu);
  auto next = g_ranges.lower_bound(start);
  if (next != g_ranges.end() && next->first < start + bytes) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (find_range(start) != g_ranges.end()) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  g_ranges[start] = Range{.size = bytes, .ctx = current(), .device = false, .owned = false};
  return CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void* ptr) {
  REMORA_EMULATED_ENTRY();
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(g_mu);
  auto it = g_ranges.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == g_ranges.end() || it->second.device || it->second.owned) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  g_ranges.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  REMORA_EMULATED_ENTRY();
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (!is_device(dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(as_pointer(dst), src, bytes);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  REMORA_EMULATED_ENTRY();
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (!is_device(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(dst, as_pointer(src), bytes);
  return CUDA_SUCCESS;
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count) {
  REMORA_EMULATED_ENTRY();
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (!is_device(dst, count)) return CUDA_ERROR_INVALID_VALUE;
  std::memset(as_pointer(dst), value, count);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  REMORA_EMULATED_ENTRY();
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (!is_device(dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
  return enqueue(stream, copy_work(stream->ctx, as_pointer(dst), src, bytes));
}

CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  REMORA_EMULATED_ENTRY();
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (!is_device(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
  return enqueue(stream, copy_work(stream->ctx, dst, as_pointer(src), bytes));
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  REMORA_EMULATED_ENTRY();
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (!is_device(dst, bytes) || !is_device(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
  return enqueue(stream, copy_work(stream->ctx, as_pointer(dst), as_pointer(src), bytes));
}

CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  REMORA_EMULATED_ENTRY();
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;  // all remora asks for
  auto* s = new CUstream_st();
  s->ctx = current();
  s->thread = std::thread(stream_loop, s);
  *stream = s;
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream stream) {
  REMORA_EMULATED_ENTRY();
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::unique_lock lock(stream->mu);
  stream->cv.wait(lock, [stream] { return stream->work.empty() && !stream->running; });
  return sticky(stream->ctx);
}

CUresult cuStreamDestroy_v2(CUstream stream) {
  REMORA_EMULATED_ENTRY();
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard lock(stream->mu);
    stream->stop = true;  // like the driver: work already enqueued still runs
  }
  stream->cv.notify_all();
  stream->thread.join();
  delete stream;
  return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  REMORA_EMULATED_ENTRY();
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (flags != CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new CUevent_st();
  e->ctx = current();
  *event = e;
  std::lock_guard lock(g_event_count_mu);
  ++g_events_alive;
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent event, CUstream stream) {
  REMORA_EMULATED_ENTRY();
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (stream == nullptr || stream->ctx != event->ctx) return CUDA_ERROR_INVALID_HANDLE;
  event->done = false;
  ++event->refs;  // the event outlives cuEventDestroy until the stream reaches it
  const CUresult r = enqueue(stream, [event] {
    {
      std::lock_guard lock(g_event_done_mu);
      event->done = true;
    }
    g_event_done_cv.notify_all();
    release(event);
  });
  if (r != CUDA_SUCCESS) release(event);
  return r;
}

// Work on `stream` after this waits until `event`'s last record has been reached (an
// event never recorded is reached already).
CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  REMORA_EMULATED_ENTRY();
  if (stream == nullptr || event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  ++event->refs;
  const CUresult r = enqueue(stream, [event] {
    std::unique_lock lock(g_event_done_mu);
    g_event_done_cv.wait(lock, [event] { return event->done.load(); });
    lock.unlock();
    release(event);
  });
  if (r != CUDA_SUCCESS) release(event);
  return r;
}

CUresult cuEventQuery(CUevent event) {
  REMORA_EMULATED_ENTRY();
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult e = sticky(event->ctx); e != CUDA_SUCCESS) return e;
  return event->done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent event) {
  REMORA_EMULATED_ENTRY();
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_ERROR_NOT_SUPPORTED;  // remora never blocks on an event
}

CUresult cuEventDestroy_v2(CUevent event) {
  REMORA_EMULATED_ENTRY();
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  bool context_gone = false;
  if (event->ctx == &g_primary) {
    std::lock_guard lock(g_mu);
    context_gone = g_primary.refs == 0;
  }
  {
    std::lock_guard lock(g_event_count_mu);
    --g_events_alive;
  }
  g_event_count_cv.notify_all();
  release(event);  // a real driver freed it with its context; the emulation frees it now
  if (context_gone) {
    ++g_events_without_context;
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return CUDA_SUCCESS;
}

CUresult cuLaunchHostFunc(CUstream stream, CUhostFn fn, void* user_data) {
  REMORA_EMULATED_ENTRY();
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUcontext ctx = stream == nullptr ? nullptr : stream->ctx;
  return enqueue(stream, [ctx, fn, user_data] {
    if (ctx->error.load() != CUDA_SUCCESS) return;  // never after a sticky error
    t_in_host_function = true;
    fn(user_data);
    t_in_host_function = false;
  });
}

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  REMORA_EMULATED_ENTRY();
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  uint32_t magic = 0;
  std::memcpy(&magic, image, sizeof(magic));
  if (magic != 0xBA55ED50u) return CUDA_ERROR_INVALID_IMAGE;  // a fatbin, as remora embeds
  *module = new CUmod_st();
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  REMORA_EMULATED_ENTRY();
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (std::strcmp(name, kUnpackKernel) != 0) return CUDA_ERROR_NOT_FOUND;
  *function = &g_unpack_function;
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule module) {
  REMORA_EMULATED_ENTRY();
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  delete module;
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                        unsigned int block_x, unsigned int block_y, unsigned int block_z, unsigned int shared_bytes,
                        CUstream stream, void** params, void** extra) {
  REMORA_EMULATED_ENTRY();
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (f != &g_unpack_function || params == nullptr || extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  // The launch copies the parameter block, as the driver does.
  remora::device::UnpackBatch batch;
  std::memcpy(&batch, params[0], sizeof(batch));
  if (grid_x != batch.count || grid_y != 1 || grid_z != 1 || block_x != remora::device::kUnpackThreadsPerBlock ||
      block_y != 1 || block_z != 1 || shared_bytes != 0 || batch.count > remora::device::kUnpackEntriesPerLaunch) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUcontext ctx = stream == nullptr ? nullptr : stream->ctx;
  return enqueue(stream, [ctx, batch] {
    if (ctx->error.load() != CUDA_SUCCESS) return;
    for (uint32_t i = 0; i < batch.count; ++i) {
      const remora::device::UnpackEntry& e = batch.entries[i];
      if (e.length == 0) continue;
      if (!is_device(batch.src_base + e.src_offset, e.length) || !is_device(batch.dst_base + e.dst_offset, e.length)) {
        ctx->error = CUDA_ERROR_ILLEGAL_ADDRESS;  // what a real kernel's stray access becomes
        return;
      }
      // The kernel's own copy, every thread of the block in turn (their shares are disjoint).
      for (uint32_t t = 0; t < remora::device::kUnpackThreadsPerBlock; ++t) {
        remora::device::unpack::copy_share(static_cast<unsigned char*>(as_pointer(batch.dst_base + e.dst_offset)),
                                           static_cast<const unsigned char*>(as_pointer(batch.src_base + e.src_offset)),
                                           e.length, t, remora::device::kUnpackThreadsPerBlock);
      }
    }
  });
}

CUresult cuMemGetHandleForAddressRange(void* /*handle*/, CUdeviceptr /*ptr*/, size_t /*size*/,
                                       CUmemRangeHandleType /*type*/, unsigned long long /*flags*/) {
  REMORA_EMULATED_ENTRY();
  return CUDA_ERROR_NOT_SUPPORTED;  // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0 here
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t /*flags*/,
                             CUdriverProcAddressQueryResult* status) {
  REMORA_EMULATED_ENTRY();
  *pfn = nullptr;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (std::getenv("REMORA_TEST_CUDA_EMULATOR_NO_PROC_ADDRESS") != nullptr) return CUDA_ERROR_NOT_FOUND;
  // The exported symbol of each ABI version remora declares (device/cuda_api.h).
  struct Export {
    const char* name;
    const char* exported;
    int version;
  };
  static const Export kExports[] = {
#define REMORA_EMULATED_EXPORT(name, suffix, abi_version, required, params) {#name, #name suffix, abi_version},
      REMORA_CUDA_DRIVER_FUNCTIONS(REMORA_EMULATED_EXPORT)
#undef REMORA_EMULATED_EXPORT
  };
  for (const Export& e : kExports) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    if (cuda_version < e.version) {
      if (status != nullptr) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      return CUDA_ERROR_NOT_FOUND;
    }
    Dl_info self{};
    if (dladdr(reinterpret_cast<void*>(&cuInit), &self) == 0) return CUDA_ERROR_UNKNOWN;
    void* handle = dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) return CUDA_ERROR_UNKNOWN;
    *pfn = dlsym(handle, e.exported);
    dlclose(handle);
    if (*pfn == nullptr) return CUDA_ERROR_NOT_FOUND;
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_NOT_FOUND;
}

// NOLINTEND(readability-identifier-naming,bugprone-easily-swappable-parameters)

}  // extern "C"
