// python/src/binding.h — what the binders of the remora._remora extension share: the
// binders themselves (one per class or concern; module.cc calls them), a failed Status
// as the exception of its code, timeouts in seconds as Durations, the object that
// Python holds for each class, and posting and waiting for operations while the memory
// they touch is held (KeepAlive). Python objects become memory in buffers.h only.
//
// Conventions of every binder:
//   - every call that may block or take remora's locks runs with the GIL released;
//   - a failed Status becomes the remora.Error subclass of its code (remora/_errors.py)
//     with the C++ message;
//   - memory is any buffer-protocol or DLPack object, used in place; the objects an
//     operation touches are held (KeepAlive) until its Request completes;
//   - timeouts are seconds (float); None is the context's default bound
//     (REMORA_WAIT_TIMEOUT_MS), remora.FOREVER (math.inf) is no bound.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>

#include "buffers.h"
#include "remora/remora.h"

namespace remora::python {

namespace nb = nanobind;

// ---------------------------------------------------------------------------
// the binders, in the order module.cc calls them
// ---------------------------------------------------------------------------

/// bind_errors.cc: a failed Status raised as the remora.Error subclass of its code.
void bind_errors(nb::module_& m);
/// bind_context.cc: Context, its keywords and config() from the library's
/// configuration table, the enums and AuthKey they take, config_variables.
void bind_context(nb::module_& m);
/// bind_endpoint.cc: Listener, Notification, Endpoint.
void bind_endpoint(nb::module_& m);
/// bind_region.cc: RemoteKey, Region, Buffer, Pool.
void bind_region(nb::module_& m);
/// bind_request.cc: Request, wait_all, the asyncio completions.
void bind_request(nb::module_& m);
/// bind_collectives.cc: Communicator and every collective.
void bind_collectives(nb::module_& m);
/// bind_store.cc: StoreServer, Store, LaunchInfo, detect_launch.
void bind_store(nb::module_& m);
/// bind_device.cc: CUDA memory (cuda_empty, cuda_copy) and DmabufMemory.
void bind_device(nb::module_& m);

// ---------------------------------------------------------------------------
// errors
// ---------------------------------------------------------------------------

/// Raised from C++ and turned into the remora.Error subclass of its code (bind_errors).
struct StatusError {
  Status status;
};
[[noreturn]] inline void raise(Status s) { throw StatusError{std::move(s)}; }
inline void check(const Status& s) {
  if (!s.is_ok()) raise(s);
}
template <typename T>
T take(Result<T> r) {
  if (!r.is_ok()) raise(r.status());
  return std::move(r).value();
}

/// The remora.Error instance of a failed `s` (not raised): Endpoint.failure and
/// Communicator.failure return it.
nb::object error_object(const Status& s);

// ---------------------------------------------------------------------------
// timeouts
// ---------------------------------------------------------------------------

/// Seconds as a Duration: None is the default bound, infinity (remora.FOREVER) and
/// more than 1e9 s no bound; InvalidArgument for NaN or a negative number.
inline Duration to_duration(std::optional<double> seconds) {
  if (!seconds) return kDefaultTimeout;
  if (std::isinf(*seconds) && *seconds > 0) return kForever;
  if (std::isnan(*seconds) || *seconds < 0) {
    raise(Status(StatusCode::kInvalidArgument, "a timeout is a number of seconds >= 0, None or remora.FOREVER"));
  }
  if (*seconds > 1e9) return kForever;
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(*seconds));
}

/// As to_duration, but None stays unset (the option's own default applies).
inline std::optional<Duration> to_optional_duration(std::optional<double> seconds) {
  if (!seconds) return std::nullopt;
  return to_duration(seconds);
}

// ---------------------------------------------------------------------------
// the objects Python holds, one per class
// ---------------------------------------------------------------------------

/// remora.Request: the operation, and the word an atomic returns into.
struct RequestObj {
  Request req;
  std::shared_ptr<uint64_t> value;  ///< the old word of an atomic
};

/// remora.Context. Every open one gets the CUDA domain once the package uses CUDA
/// memory (attach_cuda, use_cuda_memory).
struct ContextObj {
  /// DmabufMemory objects added with add_memory: their domains outlive the context
  /// (destroyed after `ctx`, which is declared after them).
  std::vector<nb::object> memories;
  std::unique_ptr<Context> ctx;
  explicit ContextObj(std::unique_ptr<Context> c);  // bind_context.cc
  ContextObj(const ContextObj&) = delete;
  ContextObj& operator=(const ContextObj&) = delete;
  ~ContextObj();
  Context& get() {
    if (!ctx) raise(Status(StatusCode::kAborted, "the context was closed"));
    return *ctx;
  }
};

/// remora.Endpoint.
struct EndpointObj {
  std::shared_ptr<Endpoint> ep;
};

/// remora.Listener.
struct ListenerObj {
  std::unique_ptr<Listener> listener;
  Listener& get() {
    if (!listener) raise(Status(StatusCode::kAborted, "the listener was closed"));
    return *listener;
  }
};

/// remora.DmabufMemory.
struct DmabufObj {
  std::unique_ptr<DmabufMemory> mem;
};

/// remora.Region: the registration and what holds the registered object.
struct RegionObj {
  std::shared_ptr<Holder> holder;  // declared first: destroyed after the region deregistered
  Region region;
};

/// remora.Pool.
struct PoolObj {
  std::unique_ptr<Pool> pool;
};

/// remora.Buffer.
struct BufferObj {
  Buffer buf;
};

/// remora.StoreServer.
struct StoreServerObj {
  std::unique_ptr<StoreServer> server;
  StoreServer& get() {
    if (!server) raise(Status(StatusCode::kAborted, "the store server was closed"));
    return *server;
  }
};

/// remora.Store.
struct StoreObj {
  std::unique_ptr<Store> store;
  Store& get() {
    if (!store) raise(Status(StatusCode::kAborted, "the store connection was closed"));
    return *store;
  }
};

/// remora.Communicator.
struct CommObj {
  std::unique_ptr<Communicator> comm;
  Communicator& get() {
    if (!comm) raise(Status(StatusCode::kAborted, "the communicator was closed"));
    return *comm;
  }
};

// ---------------------------------------------------------------------------
// CUDA memory (bind_device.cc)
// ---------------------------------------------------------------------------

/// Loads the CUDA driver and adds the process's CUDA domain to every context of this
/// module, now and later, so that their endpoints, regions and collectives stage CUDA
/// memory through pinned host buffers. Once per process; raises Unsupported with the
/// driver's reason where there is none. With the GIL. Returns the domain.
MemoryDomain& use_cuda_memory();

/// Makes `c` one of the contexts that get the CUDA domain, adding it now if CUDA
/// memory is already in use; detach_cuda forgets it. Both with the GIL.
void attach_cuda(ContextObj& c);
void detach_cuda(ContextObj& c);

// ---------------------------------------------------------------------------
// posting and waiting, with the memory of operations held (bind_request.cc)
// ---------------------------------------------------------------------------

using Holders = std::vector<std::shared_ptr<Holder>>;

/// Objects kept alive while remora may touch their memory. A token per operation:
/// hold() stores the holders and arranges (through Request::on_done, which runs on
/// remora's threads without the GIL) for the token to be released; sweep(), called with
/// the GIL from every binding that posts or waits, drops what completed operations held.
class KeepAlive {
 public:
  static KeepAlive& instance();
  void hold(const Request& r, Holders holders);
  void sweep();
  size_t pending();

 private:
  std::unordered_map<uint64_t, Holders> held_;  // GIL
  uint64_t next_ = 1;                           // GIL
  std::mutex mutex_;
  std::vector<uint64_t> released_;  // mutex_
};

/// Posts with the GIL released; holds `holders` (and `value`, an atomic's result) until
/// the request completes.
RequestObj post(const std::function<Request()>& fn, Holders holders, std::shared_ptr<uint64_t> value = nullptr);

/// Request.wait: waits up to `timeout` seconds with the GIL released and raises the
/// operation's error.
void wait_request(const RequestObj& r, std::optional<double> timeout);

}  // namespace remora::python
