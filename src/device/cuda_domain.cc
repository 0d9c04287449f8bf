// device/cuda_domain.cc — the CUDA memory domain (cuda_domain.h).
//
// Threads. Three kinds touch a copy: the caller (starts it, tests, waits, registers
// on_done), the driver's host-function thread (runs on_stream_done after the copy's
// event), and the process's CompletionWatcher thread (polls the events of copies that
// have an on_done pending, because the driver drops host functions after a
// context-wide error). The host-function thread must not call CUDA, so it only flips
// the copy's state and calls on_done's function; a CUDA object released on that thread
// (an on_done function that destroys its copy) is handed to the watcher to destroy.
#include "device/cuda_domain.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/log.h"
#include "device/cuda_unpack.h"

namespace remora::device {

namespace {

using Clock = std::chrono::steady_clock;

/// How often the watcher and a waiting thread look for copies the driver failed.
constexpr auto kErrorPoll = std::chrono::milliseconds(250);

cu::CUdeviceptr device_address(const void* ptr) noexcept { return reinterpret_cast<uintptr_t>(ptr); }

/// Makes `ctx` current on this thread for a scope.
class ScopedContext {
 public:
  ScopedContext(const CudaDriver& driver, cu::CUcontext ctx) : driver_(driver), result_(driver.cuCtxPushCurrent(ctx)) {}
  ~ScopedContext() {
    if (result_ != cu::CUDA_SUCCESS) return;
    cu::CUcontext popped = nullptr;
    driver_.cuCtxPopCurrent(&popped);
  }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

  Status status(std::string_view what) const {
    if (result_ == cu::CUDA_SUCCESS) return Status::ok();
    return cuda_error(driver_, result_, "cuCtxPushCurrent", what);
  }

 private:
  const CudaDriver& driver_;
  cu::CUresult result_;
};

/// Whether a copy has ended, how, and what to call when it does.
struct CopyState {
  std::mutex mu;
  std::condition_variable cv;
  bool ended = false;     // the result is known: test() and on_done see the end
  bool reported = false;  // on_done's call (if any) has returned: wait() sees the end
  Status result;
  std::function<void()> fn;   // set by on_done while the copy runs
  uint64_t in_flight_id = 0;  // InFlight's number for the host function

  /// Ends the copy with `status` unless it has ended, calls on_done's function (if one
  /// is registered) on this thread, then lets wait() return: a waiter that returns sees
  /// the effects of that call.
  void finish(Status status) {
    std::function<void()> to_call;
    {
      std::lock_guard lock(mu);
      if (ended) return;
      ended = true;
      result = std::move(status);
      to_call = std::move(fn);
      fn = nullptr;
    }
    if (to_call) to_call();
    {
      std::lock_guard lock(mu);
      reported = true;
    }
    cv.notify_all();
  }

  bool has_ended() {
    std::lock_guard lock(mu);
    return ended;
  }
  /// Not ended, and nobody to call when it does: a waiter may end it itself.
  bool unwatched() {
    std::lock_guard lock(mu);
    return !ended && !fn;
  }
};

/// True on the driver's thread while it runs one of our host functions, where no CUDA
/// call is allowed.
thread_local bool t_in_host_function = false;

void destroy_event(const CudaDriver& driver, cu::CUcontext ctx, cu::CUevent event) noexcept {
  ScopedContext scope(driver, ctx);
  driver.cuEventDestroy(event);  // legal before the event completes: freed when it does
}

void retire_event(const CudaDriver& driver, cu::CUcontext ctx, cu::CUevent event);  // by the watcher

/// The copies whose host function may still come, by a number never reused: the host
/// function gets the number, not a pointer, so one that comes after its copy was ended
/// another way finds nothing, and a copy whose host function never comes (the driver
/// drops them after a context-wide error) is let go by whoever ends it. One per
/// process, never destroyed (a host function may run at any time).
class InFlight {
 public:
  static InFlight& instance() {
    static auto* in_flight = new InFlight();
    return *in_flight;
  }
  uint64_t add(std::shared_ptr<CopyState> state) {
    std::lock_guard lock(mu_);
    const uint64_t id = next_++;
    copies_.emplace(id, std::move(state));
    return id;
  }
  std::shared_ptr<CopyState> take(uint64_t id) {
    std::lock_guard lock(mu_);
    auto it = copies_.find(id);
    if (it == copies_.end()) return nullptr;
    std::shared_ptr<CopyState> state = std::move(it->second);
    copies_.erase(it);
    return state;
  }

 private:
  std::mutex mu_;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<CopyState>> copies_;
};

/// The driver's host function, run after a copy's event: no CUDA calls here.
void on_stream_done(void* user_data) noexcept {
  t_in_host_function = true;
  if (auto state = InFlight::instance().take(reinterpret_cast<uintptr_t>(user_data))) {
    state->finish(Status::ok());  // CopyState holds no CUDA object, so it may be freed here
  }
  t_in_host_function = false;
}

/// Ends a copy found ended (or failed) by asking its event, not by its host function.
void end_by_query(CopyState& state, Status status) {
  InFlight::instance().take(state.in_flight_id);
  state.finish(std::move(status));
}

/// An event recorded after a copy. Destroyed by whoever lets go of it last: the
/// AsyncCopy's owner or the watcher; on the host-function thread (an on_done function
/// that destroyed its copy) the watcher destroys it later.
struct CopyEvent {
  const CudaDriver* driver;
  cu::CUcontext ctx;
  cu::CUevent event;

  CopyEvent(const CudaDriver* d, cu::CUcontext c, cu::CUevent e) : driver(d), ctx(c), event(e) {}
  ~CopyEvent() {
    if (t_in_host_function) {
      retire_event(*driver, ctx, event);
    } else {
      destroy_event(*driver, ctx, event);
    }
  }
  CopyEvent(const CopyEvent&) = delete;
  CopyEvent& operator=(const CopyEvent&) = delete;

  /// ok when the work before the event is done, kInProgress while it runs, or the error.
  Status query(std::string_view what) const {
    ScopedContext scope(*driver, ctx);
    REMORA_RETURN_IF_ERROR(scope.status(what));
    const cu::CUresult r = driver->cuEventQuery(event);
    if (r == cu::CUDA_SUCCESS) return Status::ok();
    if (r == cu::CUDA_ERROR_NOT_READY) return Status(StatusCode::kInProgress, fmt::format("{} still running", what));
    return cuda_error(*driver, r, "cuEventQuery", what);
  }
};

class CompletedCopy final : public AsyncCopy {
 public:
  Status test() override { return Status::ok(); }
  Status wait(Duration /*timeout*/) override { return Status::ok(); }
  void on_done(std::function<void()> fn) override { fn(); }
};

/// The process's one watcher (all domains share it): polls, every kErrorPoll while any
/// are pending, the events of copies whose on_done is still to be called, and ends
/// those whose event reports an error (or completion the host function has not yet
/// reported); and destroys events released on the host-function thread. Its thread
/// starts with the first such copy, sleeps on a condition variable while there is
/// nothing to do, and lives as long as the process (so no copy can outlive it).
class CompletionWatcher {
 public:
  static CompletionWatcher& instance() {
    static auto* watcher = new CompletionWatcher();  // never destroyed: see above
    return *watcher;
  }

  void watch(std::shared_ptr<CopyState> state, std::shared_ptr<CopyEvent> event, std::string what) {
    std::lock_guard lock(mu_);
    const bool was_idle = pending_.empty() && retired_.empty();
    pending_.push_back({std::move(state), std::move(event), std::move(what)});
    start_locked();
    if (was_idle) cv_.notify_all();  // a busy watcher finds it at its next poll
  }

  void retire(const CudaDriver& driver, cu::CUcontext ctx, cu::CUevent event) {
    std::lock_guard lock(mu_);
    retired_.push_back({&driver, ctx, event});
    start_locked();
    cv_.notify_all();
  }

 private:
  struct Pending {
    std::shared_ptr<CopyState> state;
    std::shared_ptr<CopyEvent> event;
    std::string what;
  };
  struct Retired {
    const CudaDriver* driver;
    cu::CUcontext ctx;
    cu::CUevent event;
  };

  CompletionWatcher() = default;

  void start_locked() {
    if (!started_) {
      started_ = true;
      std::thread([this] { run(); }).detach();
    }
  }

  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return !pending_.empty() || !retired_.empty(); });
      if (retired_.empty()) cv_.wait_for(lock, kErrorPoll, [this] { return !retired_.empty(); });
      std::vector<Retired> retired = std::exchange(retired_, {});
      std::vector<Pending> batch = std::exchange(pending_, {});
      lock.unlock();
      for (const Retired& r : retired) destroy_event(*r.driver, r.ctx, r.event);
      std::vector<Pending> still_running;
      for (Pending& p : batch) {
        if (p.state->has_ended()) continue;
        Status s = p.event->query(p.what);
        if (s.code() == StatusCode::kInProgress) {
          still_running.push_back(std::move(p));
          continue;
        }
        if (!s.is_ok()) REMORA_LOG(kWarn, "{}", s.message());
        end_by_query(*p.state, std::move(s));
      }
      batch.clear();  // destroys the events nobody else holds, here, outside the lock
      lock.lock();
      for (Pending& p : still_running) pending_.push_back(std::move(p));
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  std::vector<Pending> pending_;
  std::vector<Retired> retired_;
};

void retire_event(const CudaDriver& driver, cu::CUcontext ctx, cu::CUevent event) {
  CompletionWatcher::instance().retire(driver, ctx, event);
}

class CudaCopy final : public AsyncCopy {
 public:
  CudaCopy(std::shared_ptr<CopyState> state, std::shared_ptr<CopyEvent> event, std::string what)
      : state_(std::move(state)), event_(std::move(event)), what_(std::move(what)) {}

  Status test() override {
    {
      std::lock_guard lock(state_->mu);
      if (state_->ended) return state_->result;
    }
    return event_->query(what_);
  }

  /// Returns when the copy has ended and on_done's call, if one is registered, has
  /// returned.
  Status wait(Duration timeout) override {
    if (timeout <= Duration::zero()) return test();  // kDefaultTimeout too: a domain has no context default
    // Past a year is forever (and keeps now + timeout from overflowing).
    const bool forever = timeout >= std::chrono::hours(24 * 365);
    const Clock::time_point deadline = forever ? Clock::time_point::max() : Clock::now() + timeout;
    for (;;) {
      {
        std::unique_lock lock(state_->mu);
        const Clock::time_point now = Clock::now();
        const Clock::time_point slice_end = deadline - now > kErrorPoll ? now + kErrorPoll : deadline;
        state_->cv.wait_until(lock, slice_end, [this] { return state_->reported; });
        if (state_->reported) return state_->result;
      }
      // The host function never comes after a context-wide error. With an on_done
      // registered the watcher ends the copy (and calls it); without one, end it here.
      // (Ended but not reported: another thread is in on_done's call; wait for it.)
      Status s = event_->query(what_);
      if (s.code() != StatusCode::kInProgress && state_->unwatched()) {
        end_by_query(*state_, std::move(s));
        std::lock_guard lock(state_->mu);
        return state_->result;
      }
      if (Clock::now() >= deadline) {
        return Status(StatusCode::kTimeout,
                      fmt::format("{} still running after {} ms", what_,
                                  std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()));
      }
    }
  }

  void on_done(std::function<void()> fn) override {
    {
      std::unique_lock lock(state_->mu);
      if (state_->ended) {
        lock.unlock();
        fn();
        return;
      }
      state_->fn = std::move(fn);
    }
    // Ended on the device but not yet reported by the host function: end it here, so
    // the function runs at once, as for a copy test() already calls done. (Should the
    // host function get there first, it makes the call instead: still exactly one.)
    Status s = event_->query(what_);
    if (s.code() != StatusCode::kInProgress) {
      end_by_query(*state_, std::move(s));
      return;
    }
    CompletionWatcher::instance().watch(state_, event_, what_);
  }

 private:
  std::shared_ptr<CopyState> state_;
  std::shared_ptr<CopyEvent> event_;
  std::string what_;
};

enum StreamRole : size_t { kToHost = 0, kFromHost = 1, kScatter = 2, kStreamRoles = 3 };

std::string describe_memory_type(unsigned int type) {
  switch (type) {
    case 0: return "memory CUDA does not know";
    case cu::CU_MEMORYTYPE_HOST: return "page-locked host memory";
    case cu::CU_MEMORYTYPE_ARRAY: return "a CUDA array";
    case cu::CU_MEMORYTYPE_UNIFIED: return "unified memory";
    default: return fmt::format("CUDA memory of type {}", type);
  }
}

}  // namespace

/// One CUDA context's streams and unpack kernel. Created on first use, destroyed with
/// the domain.
struct CudaContextEntry {
  cu::CUcontext ctx = nullptr;
  cu::CUstream streams[kStreamRoles] = {};
  std::mutex stream_mu[kStreamRoles];  // keeps each copy's work, event and host function together

  std::mutex kernel_mu;
  bool kernel_tried = false;
  Status kernel_status;
  UnpackKernel kernel;
};

struct CudaDomain::DevicePointer {
  cu::CUcontext ctx = nullptr;
  int ordinal = -1;
  cu::CUdeviceptr base = 0;  // the allocation that holds the pointer
  size_t size = 0;
};

CudaDomain::CudaDomain(Result<const CudaDriver*> driver, CudaDomainOptions options) : options_(options) {
  if (driver.is_ok()) {
    driver_ = *driver;
  } else {
    unavailable_ = driver.status();
  }
}

CudaDomain::~CudaDomain() {
  if (driver_ == nullptr) return;
  for (auto& [key, entry] : entries_) {
    ScopedContext scope(*driver_, entry->ctx);
    for (cu::CUstream stream : entry->streams) {
      if (stream == nullptr) continue;
      driver_->cuStreamSynchronize(stream);
      driver_->cuStreamDestroy(stream);
    }
    entry->kernel.unload(*driver_);
  }
  for (auto& [host, staging] : staging_) {
    if (!staging.owned) continue;
    ScopedContext scope(*driver_, staging.ctx);
    driver_->cuMemHostUnregister(const_cast<void*>(host));
  }
  for (auto& [ordinal, ctx] : primary_) {
    cu::CUdevice device = 0;
    if (driver_->cuDeviceGet(&device, ordinal) == cu::CUDA_SUCCESS) driver_->cuDevicePrimaryCtxRelease(device);
  }
}

Status CudaDomain::available() const {
  if (driver_ != nullptr) return Status::ok();
  return unavailable_;
}

Result<cu::CUcontext> CudaDomain::primary_context(int ordinal) const {
  std::lock_guard lock(primary_mu_);
  if (auto it = primary_.find(ordinal); it != primary_.end()) return it->second;
  cu::CUdevice device = 0;
  cu::CUresult r = driver_->cuDeviceGet(&device, ordinal);
  if (r != cu::CUDA_SUCCESS) return cuda_error(*driver_, r, "cuDeviceGet", fmt::format("CUDA device {}", ordinal));
  cu::CUcontext ctx = nullptr;
  r = driver_->cuDevicePrimaryCtxRetain(&ctx, device);
  if (r != cu::CUDA_SUCCESS) {
    return cuda_error(*driver_, r, "cuDevicePrimaryCtxRetain", fmt::format("CUDA device {}", ordinal));
  }
  primary_.emplace(ordinal, ctx);
  return ctx;
}

Result<CudaDomain::DevicePointer> CudaDomain::locate(const void* ptr, size_t len, std::string_view what) const {
  if (ptr == nullptr) return Status(StatusCode::kInvalidArgument, fmt::format("{}: null pointer", what));
  const cu::CUdeviceptr address = device_address(ptr);
  if (address > UINT64_MAX - len) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{}: {} + {} bytes wraps around the address space", what, ptr, len));
  }
  unsigned int type = 0;
  DevicePointer out;
  cu::CUpointer_attribute attributes[] = {cu::CU_POINTER_ATTRIBUTE_MEMORY_TYPE, cu::CU_POINTER_ATTRIBUTE_CONTEXT,
                                          cu::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void* values[] = {&type, &out.ctx, &out.ordinal};
  cu::CUresult r = driver_->cuPointerGetAttributes(3, attributes, values, address);
  if (r != cu::CUDA_SUCCESS) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{}: {} is not CUDA device memory (cuPointerGetAttributes returned {})", what, ptr,
                              describe_cuda_result(driver_, r)));
  }
  if (type != cu::CU_MEMORYTYPE_DEVICE) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{}: {} is not CUDA device memory but {}", what, ptr, describe_memory_type(type)));
  }
  if (out.ctx == nullptr) {  // allocations of the virtual memory API name no context
    REMORA_ASSIGN_OR_RETURN(out.ctx, primary_context(out.ordinal));
  }
  ScopedContext scope(*driver_, out.ctx);
  REMORA_RETURN_IF_ERROR(scope.status(what));
  r = driver_->cuMemGetAddressRange(&out.base, &out.size, address);
  if (r != cu::CUDA_SUCCESS) {
    return Status(StatusCode::kInvalidArgument, fmt::format("{}: {} is not in a CUDA allocation (cuMemGetAddressRange "
                                                            "returned {})",
                                                            what, ptr, describe_cuda_result(driver_, r)));
  }
  if (address < out.base || address - out.base > out.size || len > out.size - (address - out.base)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{}: {} + {} bytes runs past the end of its CUDA allocation ({:#x} + {} bytes)", what,
                              ptr, len, out.base, out.size));
  }
  return out;
}

Result<CudaContextEntry*> CudaDomain::context_entry(cu::CUcontext ctx) {
  // A context's id is unique for the life of the process; its handle may be reused
  // after the application destroys it.
  uint64_t key = reinterpret_cast<uintptr_t>(ctx);
  if (driver_->cuCtxGetId != nullptr) {
    unsigned long long id = 0;
    const cu::CUresult r = driver_->cuCtxGetId(ctx, &id);
    if (r != cu::CUDA_SUCCESS) return cuda_error(*driver_, r, "cuCtxGetId", "CUDA context of the memory");
    key = id;
  }
  std::lock_guard lock(entries_mu_);
  if (auto it = entries_.find(key); it != entries_.end()) return it->second.get();
  auto entry = std::make_unique<CudaContextEntry>();
  entry->ctx = ctx;
  ScopedContext scope(*driver_, ctx);
  REMORA_RETURN_IF_ERROR(scope.status("creating the CUDA domain's streams"));
  for (cu::CUstream& stream : entry->streams) {
    const cu::CUresult r = driver_->cuStreamCreate(&stream, cu::CU_STREAM_NON_BLOCKING);
    if (r != cu::CUDA_SUCCESS) {
      Status s = cuda_error(*driver_, r, "cuStreamCreate", "creating the CUDA domain's streams");
      for (cu::CUstream made : entry->streams) {
        if (made != nullptr) driver_->cuStreamDestroy(made);
      }
      return s;
    }
  }
  CudaContextEntry* raw = entry.get();
  entries_.emplace(key, std::move(entry));
  return raw;
}

namespace {

/// Enqueues `work` on `stream` (in `entry`'s context, which the caller made current),
/// then the event and the host function that end the copy. If any of it fails, waits
/// for what was enqueued, so nothing writes into the caller's memory after the error
/// is returned.
template <typename Work>
Result<std::unique_ptr<AsyncCopy>> enqueue(const CudaDriver& driver, CudaContextEntry& entry, StreamRole role,
                                           std::string what, Work&& work) {
  cu::CUevent raw_event = nullptr;
  cu::CUresult r = driver.cuEventCreate(&raw_event, cu::CU_EVENT_DISABLE_TIMING);
  if (r != cu::CUDA_SUCCESS) return cuda_error(driver, r, "cuEventCreate", what);
  auto event = std::make_shared<CopyEvent>(&driver, entry.ctx, raw_event);
  auto state = std::make_shared<CopyState>();

  const cu::CUstream stream = entry.streams[role];
  std::lock_guard lock(entry.stream_mu[role]);
  Status s = work(stream);
  if (s.is_ok()) {
    r = driver.cuEventRecord(raw_event, stream);
    if (r != cu::CUDA_SUCCESS) s = cuda_error(driver, r, "cuEventRecord", what);
  }
  if (s.is_ok()) {
    state->in_flight_id = InFlight::instance().add(state);
    // NOLINTNEXTLINE(performance-no-int-to-ptr): a number, not a pointer
    r = driver.cuLaunchHostFunc(stream, &on_stream_done, reinterpret_cast<void*>(state->in_flight_id));
    if (r != cu::CUDA_SUCCESS) {
      InFlight::instance().take(state->in_flight_id);
      s = cuda_error(driver, r, "cuLaunchHostFunc", what);
    }
  }
  if (!s.is_ok()) {
    driver.cuStreamSynchronize(stream);
    return s;
  }
  return std::unique_ptr<AsyncCopy>(std::make_unique<CudaCopy>(std::move(state), std::move(event), std::move(what)));
}

}  // namespace

bool CudaDomain::owns(const void* ptr, size_t len) const {
  if (driver_ == nullptr) return false;
  return locate(ptr, len, "owns").is_ok();
}

Result<DomainRegistration> CudaDomain::register_range(void* ptr, size_t len, PinMode /*mode*/) {
  REMORA_RETURN_IF_ERROR(available());
  if (len == 0) return Status(StatusCode::kInvalidArgument, "cannot register an empty range (length 0)");
  REMORA_ASSIGN_OR_RETURN(DevicePointer where, locate(ptr, len, "register CUDA memory"));
  ScopedContext scope(*driver_, where.ctx);
  REMORA_RETURN_IF_ERROR(scope.status("register CUDA memory"));
  const unsigned int on = 1;
  const cu::CUresult r = driver_->cuPointerSetAttribute(&on, cu::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, device_address(ptr));
  if (r != cu::CUDA_SUCCESS) {
    // The virtual memory API's allocations refuse it; remora's own copies are ordered
    // by their streams and events either way.
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      REMORA_LOG(kInfo, "cannot set CU_POINTER_ATTRIBUTE_SYNC_MEMOPS on registered CUDA memory at {}: {} (logged once)",
                 ptr, describe_cuda_result(driver_, r));
    }
  }
  DomainRegistration reg;
  reg.pinned = true;  // device memory is resident: the device equivalent of locked pages
  reg.cookie = static_cast<uint64_t>(where.ordinal);
  return reg;
}

void CudaDomain::deregister_range(void* /*ptr*/, size_t /*len*/, const DomainRegistration& /*reg*/) noexcept {
  // Nothing to undo: SYNC_MEMOPS stays with the allocation and costs nothing.
}

Result<std::unique_ptr<AsyncCopy>> CudaDomain::copy(bool to_host, void* dst, const void* src, size_t len) {
  REMORA_RETURN_IF_ERROR(available());
  const char* direction = to_host ? "copy_to_host" : "copy_from_host";
  if (len == 0) return std::unique_ptr<AsyncCopy>(std::make_unique<CompletedCopy>());
  if (dst == nullptr || src == nullptr) {
    return Status(StatusCode::kInvalidArgument, fmt::format("{}: null pointer", direction));
  }
  const void* device_side = to_host ? src : dst;
  REMORA_ASSIGN_OR_RETURN(DevicePointer where, locate(device_side, len, direction));
  REMORA_ASSIGN_OR_RETURN(CudaContextEntry * entry, context_entry(where.ctx));
  ScopedContext scope(*driver_, entry->ctx);
  REMORA_RETURN_IF_ERROR(scope.status(direction));
  std::string what = fmt::format("CUDA {} of {} bytes ({} {})", direction, len, to_host ? "from" : "to", device_side);
  const cu::CUdeviceptr device = device_address(device_side);
  const CudaDriver& driver = *driver_;
  return enqueue(driver, *entry, to_host ? kToHost : kFromHost, std::move(what), [&](cu::CUstream stream) {
    const cu::CUresult r = to_host ? driver.cuMemcpyDtoHAsync(dst, device, len, stream)
                                   : driver.cuMemcpyHtoDAsync(device, src, len, stream);
    if (r == cu::CUDA_SUCCESS) return Status::ok();
    return cuda_error(driver, r, to_host ? "cuMemcpyDtoHAsync" : "cuMemcpyHtoDAsync", direction);
  });
}

Result<std::unique_ptr<AsyncCopy>> CudaDomain::copy_to_host(void* host_dst, const void* src, size_t len) {
  return copy(true, host_dst, src, len);
}

Result<std::unique_ptr<AsyncCopy>> CudaDomain::copy_from_host(void* dst, const void* host_src, size_t len) {
  return copy(false, dst, host_src, len);
}

Status CudaDomain::prepare_staging(void* host, size_t len) {
  REMORA_RETURN_IF_ERROR(available());
  if (host == nullptr || len == 0) {
    return Status(StatusCode::kInvalidArgument, "prepare_staging: null pointer or empty range");
  }
  std::lock_guard lock(staging_mu_);
  if (auto it = staging_.find(host); it != staging_.end()) {
    if (it->second.len != len) {
      return Status(
          StatusCode::kInvalidArgument,
          fmt::format("prepare_staging: {} is already prepared with {} bytes, not {}", host, it->second.len, len));
    }
    ++it->second.count;
    return Status::ok();
  }
  cu::CUcontext ctx = nullptr;
  if (driver_->cuCtxGetCurrent(&ctx) != cu::CUDA_SUCCESS || ctx == nullptr) {
    REMORA_ASSIGN_OR_RETURN(ctx, primary_context(0));
  }
  ScopedContext scope(*driver_, ctx);
  REMORA_RETURN_IF_ERROR(scope.status("prepare_staging"));
  const cu::CUresult r = driver_->cuMemHostRegister(host, len, cu::CU_MEMHOSTREGISTER_PORTABLE);
  if (r != cu::CUDA_SUCCESS && r != cu::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
    return cuda_error(*driver_, r, "cuMemHostRegister",
                      fmt::format("prepare_staging: page-locking {} bytes at {} for CUDA copies", len, host));
  }
  staging_.emplace(host, Staging{.len = len, .ctx = ctx, .owned = r == cu::CUDA_SUCCESS, .count = 1});
  return Status::ok();
}

void CudaDomain::release_staging(void* host, size_t /*len*/) noexcept {
  if (driver_ == nullptr) return;
  std::lock_guard lock(staging_mu_);
  auto it = staging_.find(host);
  if (it == staging_.end()) return;
  if (--it->second.count > 0) return;
  if (it->second.owned) {
    ScopedContext scope(*driver_, it->second.ctx);
    const cu::CUresult r = driver_->cuMemHostUnregister(host);
    if (r != cu::CUDA_SUCCESS) {
      REMORA_LOG(kWarn, "release_staging: cuMemHostUnregister({}) returned {}", host, describe_cuda_result(driver_, r));
    }
  }
  staging_.erase(it);
}

Result<DmabufExport> CudaDomain::export_dmabuf(const void* ptr, size_t len) {
  REMORA_RETURN_IF_ERROR(available());
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  if (len == 0 || reinterpret_cast<uintptr_t>(ptr) % page != 0 || len % page != 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("export_dmabuf: {} + {} bytes is not a whole number of pages (start and length must be "
                              "non-zero multiples of {}): the driver exports whole pages",
                              ptr, len, page));
  }
  REMORA_ASSIGN_OR_RETURN(DevicePointer where, locate(ptr, len, "export_dmabuf"));
  if (driver_->cuMemGetHandleForAddressRange == nullptr) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("export_dmabuf: the CUDA driver {} has no cuMemGetHandleForAddressRange (CUDA 11.7)",
                              driver_->path));
  }
  cu::CUdevice device = 0;
  cu::CUresult r = driver_->cuDeviceGet(&device, where.ordinal);
  if (r != cu::CUDA_SUCCESS) return cuda_error(*driver_, r, "cuDeviceGet", "export_dmabuf");
  int supported = 0;
  r = driver_->cuDeviceGetAttribute(&supported, cu::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, device);
  if (r != cu::CUDA_SUCCESS) {
    return cuda_error(*driver_, r, "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)", "export_dmabuf");
  }
  if (supported == 0) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("export_dmabuf: CUDA device {} cannot export dmabufs "
                              "(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0 with driver {}.{})",
                              where.ordinal, driver_->version / 1000, (driver_->version % 1000) / 10));
  }
  ScopedContext scope(*driver_, where.ctx);
  REMORA_RETURN_IF_ERROR(scope.status("export_dmabuf"));
  int fd = -1;
  r = driver_->cuMemGetHandleForAddressRange(&fd, device_address(ptr), len, cu::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (r != cu::CUDA_SUCCESS) {
    return cuda_error(*driver_, r, "cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)",
                      fmt::format("export_dmabuf of {} + {} bytes", ptr, len));
  }
  return DmabufExport{.fd = fd, .offset = 0, .length = len};
}

Status CudaDomain::ensure_kernel(CudaContextEntry& entry) {
  std::lock_guard lock(entry.kernel_mu);
  if (entry.kernel_tried) return entry.kernel_status;
  entry.kernel_tried = true;
  if (!options_.use_unpack_kernel) {
    entry.kernel_status = Status(StatusCode::kUnsupported, "the unpack kernel is off (CudaDomainOptions)");
    return entry.kernel_status;
  }
  ScopedContext scope(*driver_, entry.ctx);
  entry.kernel_status = scope.status("loading the unpack kernel");
  if (!entry.kernel_status.is_ok()) return entry.kernel_status;
  auto kernel = UnpackKernel::load(*driver_);
  if (kernel.is_ok()) {
    entry.kernel = std::move(kernel).value();
  } else {
    entry.kernel_status = kernel.status();
    REMORA_LOG(kInfo, "CUDA scatter copies entry by entry (cuMemcpyDtoDAsync): {}", entry.kernel_status.message());
  }
  return entry.kernel_status;
}

Status CudaDomain::unpack_kernel_status(const void* device_ptr) {
  REMORA_RETURN_IF_ERROR(available());
  REMORA_ASSIGN_OR_RETURN(DevicePointer where, locate(device_ptr, 0, "unpack_kernel_status"));
  REMORA_ASSIGN_OR_RETURN(CudaContextEntry * entry, context_entry(where.ctx));
  return ensure_kernel(*entry);
}

Result<std::unique_ptr<AsyncCopy>> CudaDomain::scatter(void* dst_base, const void* src_base,
                                                       std::span<const UnpackEntry> entries) {
  REMORA_RETURN_IF_ERROR(available());
  if (entries.empty()) return std::unique_ptr<AsyncCopy>(std::make_unique<CompletedCopy>());
  REMORA_ASSIGN_OR_RETURN(DevicePointer dst, locate(dst_base, 0, "scatter destination"));
  REMORA_ASSIGN_OR_RETURN(DevicePointer src, locate(src_base, 0, "scatter source"));
  REMORA_ASSIGN_OR_RETURN(CudaContextEntry * entry, context_entry(dst.ctx));
  REMORA_ASSIGN_OR_RETURN(CudaContextEntry * src_entry, context_entry(src.ctx));
  if (entry != src_entry) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("scatter: source {} (device {}) and destination {} (device {}) are in different CUDA "
                              "contexts",
                              src_base, src.ordinal, dst_base, dst.ordinal));
  }
  // Room from each base to the end of its allocation; every entry must fit in it.
  const uint64_t dst_room = dst.base + dst.size - device_address(dst_base);
  const uint64_t src_room = src.base + src.size - device_address(src_base);
  uint64_t total = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const UnpackEntry& e = entries[i];
    if (e.reserved != 0) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("scatter: entry {} has reserved = {}; it must be 0", i, e.reserved));
    }
    if (e.src_offset > src_room || e.length > src_room - e.src_offset) {
      return Status(StatusCode::kOutOfRange,
                    fmt::format("scatter: entry {} (source offset {}, {} bytes) runs past the source allocation ({} "
                                "bytes from the base)",
                                i, e.src_offset, e.length, src_room));
    }
    if (e.dst_offset > dst_room || e.length > dst_room - e.dst_offset) {
      return Status(StatusCode::kOutOfRange,
                    fmt::format("scatter: entry {} (destination offset {}, {} bytes) runs past the destination "
                                "allocation ({} bytes from the base)",
                                i, e.dst_offset, e.length, dst_room));
    }
    total += e.length;
  }
  const bool use_kernel = ensure_kernel(*entry).is_ok();
  ScopedContext scope(*driver_, entry->ctx);
  REMORA_RETURN_IF_ERROR(scope.status("scatter"));
  std::string what = fmt::format("CUDA scatter of {} entries, {} bytes ({})", entries.size(), total,
                                 use_kernel ? "unpack kernel" : "a copy per entry");
  const cu::CUdeviceptr dst_address = device_address(dst_base);
  const cu::CUdeviceptr src_address = device_address(src_base);
  const CudaDriver& driver = *driver_;
  return enqueue(driver, *entry, kScatter, std::move(what), [&](cu::CUstream stream) {
    if (use_kernel) return entry->kernel.launch(driver, stream, dst_address, src_address, entries);
    return scatter_by_copies(driver, stream, dst_address, src_address, entries);
  });
}

}  // namespace remora::device
