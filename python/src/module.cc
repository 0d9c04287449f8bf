// python/src/module.cc — the remora._remora extension: the whole C++ API of
// include/remora/*.h for Python (nanobind). Conventions:
//   - every call that may block or take remora's locks runs with the GIL released;
//   - a failed Status becomes the remora.Error subclass of its code (remora/_errors.py)
//     with the C++ message;
//   - memory is any buffer-protocol or DLPack object, used in place; the objects an
//     operation touches are held (KeepAlive) until its Request completes;
//   - timeouts are seconds (float); None is the context's default bound
//     (REMORA_WAIT_TIMEOUT_MS), remora.FOREVER (math.inf) is no bound.
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "buffers.h"

namespace remora::python {
namespace {

using namespace nb::literals;

// ---------------------------------------------------------------------------
// errors and timeouts
// ---------------------------------------------------------------------------

/// The remora.Error subclass of `code`, from remora._errors (imported at first use).
nb::handle error_class(StatusCode code) {
  static nb::object by_code = nb::module_::import_("remora._errors").attr("_BY_CODE");
  static auto* keep = new nb::object(by_code);  // never released: the module outlives every raise
  (void)keep;
  return by_code[nb::int_(static_cast<int>(code))];
}

nb::object error_object(const Status& s) {
  return error_class(s.code())(nb::str(s.message().c_str()));
}

Duration to_duration(std::optional<double> seconds) {
  if (!seconds) return kDefaultTimeout;
  if (std::isinf(*seconds) && *seconds > 0) return kForever;
  if (std::isnan(*seconds) || *seconds < 0) {
    raise(Status(StatusCode::kInvalidArgument, "a timeout is a number of seconds >= 0, None or remora.FOREVER"));
  }
  if (*seconds > 1e9) return kForever;
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(*seconds));
}

std::optional<Duration> to_optional_duration(std::optional<double> seconds) {
  if (!seconds) return std::nullopt;
  return to_duration(seconds);
}

// ---------------------------------------------------------------------------
// wrappers
// ---------------------------------------------------------------------------

struct RequestObj {
  Request req;
  std::shared_ptr<uint64_t> value;  ///< the old word of an atomic
};

struct ContextObj;

/// The CUDA domain once CUDA memory was first used, and every open context of this
/// module, so that each gets it (use_cuda_memory). Both with the GIL.
MemoryDomain* g_cuda = nullptr;
std::vector<ContextObj*> g_contexts;

struct ContextObj {
  /// DmabufMemory objects added with add_memory: their domains outlive the context
  /// (destroyed after `ctx`, which is declared after them).
  std::vector<nb::object> memories;
  std::unique_ptr<Context> ctx;
  explicit ContextObj(std::unique_ptr<Context> c) : ctx(std::move(c)) {
    if (g_cuda != nullptr) check(ctx->add_memory_domain(*g_cuda));
    g_contexts.push_back(this);
  }
  ContextObj(const ContextObj&) = delete;
  ContextObj& operator=(const ContextObj&) = delete;
  ~ContextObj() { std::erase(g_contexts, this); }
  Context& get() {
    if (!ctx) raise(Status(StatusCode::kAborted, "the context was closed"));
    return *ctx;
  }
};

struct EndpointObj {
  std::shared_ptr<Endpoint> ep;
};

struct ListenerObj {
  std::unique_ptr<Listener> listener;
  Listener& get() {
    if (!listener) raise(Status(StatusCode::kAborted, "the listener was closed"));
    return *listener;
  }
};

struct DmabufObj {
  std::unique_ptr<DmabufMemory> mem;
};

struct RegionObj {
  std::shared_ptr<Holder> holder;  // declared first: destroyed after the region deregistered
  Region region;
};

struct PoolObj {
  std::unique_ptr<Pool> pool;
};

struct BufferObj {
  Buffer buf;
};

struct StoreServerObj {
  std::unique_ptr<StoreServer> server;
  StoreServer& get() {
    if (!server) raise(Status(StatusCode::kAborted, "the store server was closed"));
    return *server;
  }
};

struct StoreObj {
  std::unique_ptr<Store> store;
  Store& get() {
    if (!store) raise(Status(StatusCode::kAborted, "the store connection was closed"));
    return *store;
  }
};

struct CommObj {
  std::unique_ptr<Communicator> comm;
  Communicator& get() {
    if (!comm) raise(Status(StatusCode::kAborted, "the communicator was closed"));
    return *comm;
  }
};

/// Wakes an asyncio loop when requests complete (remora/_aio.py): Request::on_done
/// notes the token and writes an eventfd, without the GIL; the loop reads it.
class Completions {
 public:
  Completions() : inner_(std::make_shared<Inner>()) {
    inner_->fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (inner_->fd < 0) raise(Status(StatusCode::kNoResource, std::string("eventfd: ") + std::strerror(errno)));
  }
  int fileno() const { return inner_->fd; }
  void watch(const RequestObj& r, uint64_t token) {
    auto inner = inner_;
    check(r.req.on_done([inner, token] {
      {
        std::lock_guard lock(inner->mutex);
        inner->ready.push_back(token);
      }
      const uint64_t one = 1;
      ssize_t n = ::write(inner->fd, &one, sizeof one);
      (void)n;  // EAGAIN: the counter is already raised
    }));
  }
  std::vector<uint64_t> drain() {
    uint64_t count = 0;
    ssize_t n = ::read(inner_->fd, &count, sizeof count);
    (void)n;
    std::vector<uint64_t> out;
    std::lock_guard lock(inner_->mutex);
    out.swap(inner_->ready);
    return out;
  }

 private:
  struct Inner {
    int fd = -1;
    std::mutex mutex;
    std::vector<uint64_t> ready;
    ~Inner() {
      if (fd >= 0) ::close(fd);
    }
  };
  std::shared_ptr<Inner> inner_;
};

// ---------------------------------------------------------------------------
// memory of module objects, and posting operations
// ---------------------------------------------------------------------------

}  // namespace

MemoryDomain& use_cuda_memory() {
  if (g_cuda != nullptr) return *g_cuda;
  MemoryDomain* cuda = take(cuda_domain());
  for (ContextObj* c : g_contexts) {
    if (c->ctx) check(c->ctx->add_memory_domain(*cuda));
  }
  g_cuda = cuda;
  return *cuda;
}

namespace {

Memory memory(nb::handle obj, bool writable) {
  if (nb::isinstance<DmabufObj>(obj)) {
    // Its address names its bytes even where the CPU cannot reach them (remora moves
    // those by devmem TCP only, and says so).
    DmabufMemory& d = *nb::cast<DmabufObj&>(obj).mem;
    Memory m;
    m.data = d.data();
    m.size = d.size();
    m.type = DataType::kUint8;
    m.holder = std::make_shared<Holder>();
    m.holder->owner = nb::borrow(obj);
    return m;
  }
  if (nb::isinstance<BufferObj>(obj)) {
    BufferObj& b = nb::cast<BufferObj&>(obj);
    if (!b.buf.valid()) raise(Status(StatusCode::kInvalidArgument, "the remora.Buffer was released"));
    Memory m;
    m.data = b.buf.data();
    m.size = b.buf.size();
    m.type = DataType::kUint8;
    m.holder = std::make_shared<Holder>();
    m.holder->owner = nb::borrow(obj);
    return m;
  }
  if (nb::isinstance<RegionObj>(obj)) {
    RegionObj& r = nb::cast<RegionObj&>(obj);
    if (!r.region.valid()) raise(Status(StatusCode::kInvalidArgument, "the remora.Region was deregistered"));
    Memory m;
    m.data = r.region.data();
    m.size = r.region.size();
    m.type = DataType::kUint8;
    m.holder = std::make_shared<Holder>();
    m.holder->owner = nb::borrow(obj);
    return m;
  }
  return memory_of(obj, writable);
}

using Holders = std::vector<std::shared_ptr<Holder>>;

/// Posts with the GIL released; holds `holders` until the request completes.
RequestObj post(const std::function<Request()>& fn, Holders holders, std::shared_ptr<uint64_t> value = nullptr) {
  KeepAlive::instance().sweep();
  Request r;
  {
    nb::gil_scoped_release unlocked;
    r = fn();
  }
  if (value) {
    auto h = std::make_shared<Holder>();
    h->extra = value;
    holders.push_back(std::move(h));
  }
  KeepAlive::instance().hold(r, std::move(holders));
  return RequestObj{std::move(r), std::move(value)};
}

void wait_request(const RequestObj& r, std::optional<double> timeout) {
  const Duration d = to_duration(timeout);
  Status s;
  {
    nb::gil_scoped_release unlocked;
    s = r.req.wait(d);
  }
  KeepAlive::instance().sweep();
  check(s);
}

nb::dict stats_dict(const EndpointStats& s) {
  nb::dict d;
  d["messages_sent"] = s.messages_sent;
  d["messages_received"] = s.messages_received;
  d["bytes_sent"] = s.bytes_sent;
  d["bytes_received"] = s.bytes_received;
  d["eager_sent"] = s.eager_sent;
  d["rendezvous_sent"] = s.rendezvous_sent;
  d["chunks_sent"] = s.chunks_sent;
  d["chunks_per_stream"] = s.chunks_per_stream;
  d["chunks_pulled"] = s.chunks_pulled;
  d["bytes_pulled"] = s.bytes_pulled;
  d["huge_pages_promoted"] = s.huge_pages_promoted;
  d["same_host_reason"] = s.same_host_reason;
  d["puts"] = s.puts;
  d["gets"] = s.gets;
  d["atomics"] = s.atomics;
  d["rma_bytes_put"] = s.rma_bytes_put;
  d["rma_bytes_got"] = s.rma_bytes_got;
  d["served_puts"] = s.served_puts;
  d["served_gets"] = s.served_gets;
  d["served_atomics"] = s.served_atomics;
  d["refused"] = s.refused;
  d["notifications"] = s.notifications;
  d["staged_transfers"] = s.staged_transfers;
  d["staged_bytes"] = s.staged_bytes;
  d["devmem_transfers"] = s.devmem_transfers;
  d["zcrx_transfers"] = s.zcrx_transfers;
  d["device_path_refusals"] = s.device_path_refusals;
  d["device_path"] = s.device_path;
  d["device_path_reason"] = s.device_path_reason;
  return d;
}

const RemoteKey& key_of(nb::handle key) {
  if (!nb::isinstance<RemoteKey>(key)) {
    raise(Status(StatusCode::kInvalidArgument, "expected a remora.RemoteKey (RemoteKey.from_bytes makes one)"));
  }
  return nb::cast<const RemoteKey&>(key);
}

// ---------------------------------------------------------------------------
// collectives
// ---------------------------------------------------------------------------

/// One collective buffer argument: None (absent or in place) or memory.
struct Arg {
  std::optional<Memory> mem;
  void* ptr() const { return mem ? static_cast<void*>(mem->data) : nullptr; }
};

Arg arg(nb::handle obj, bool writable) {
  Arg a;
  if (!obj.is_none()) a.mem = memory(obj, writable);
  return a;
}

/// The element type of the call: the first buffer that names one (dtype overrides).
DataType type_of(std::optional<std::string> dtype, std::initializer_list<const Arg*> args) {
  if (dtype) return take(parse_data_type(*dtype));
  std::optional<DataType> found;
  bool any = false;
  for (const Arg* a : args) {
    if (!a->mem) continue;
    any = true;
    if (!a->mem->type) continue;
    if (found && *found != *a->mem->type) {
      raise(Status(StatusCode::kInvalidArgument,
                   std::string("the buffers have different element types (") + std::string(to_string(*found)) +
                       ", " + std::string(to_string(*a->mem->type)) + "): pass dtype= to say which"));
    }
    found = a->mem->type;
  }
  if (!found) {
    if (!any) return DataType::kUint8;
    raise(Status(StatusCode::kInvalidArgument,
                 "the buffers' element type is not one remora reduces or moves (int8, uint8, int32, uint32, int64, "
                 "uint64, float16, bfloat16, float32, float64): pass dtype= (e.g. 'uint8' for raw bytes)"));
  }
  return *found;
}

size_t count_of(const Arg& a, DataType t) {
  if (!a.mem) return 0;
  const size_t sz = size_of(t);
  if (a.mem->size % sz != 0) {
    raise(Status(StatusCode::kInvalidArgument, "a buffer of " + std::to_string(a.mem->size) +
                                                   " bytes is not a whole number of " + std::string(to_string(t)) +
                                                   " elements"));
  }
  return a.mem->size / sz;
}

Holders holders_of(std::initializer_list<const Arg*> args) {
  Holders h;
  for (const Arg* a : args) {
    if (a->mem) h.push_back(a->mem->holder);
  }
  return h;
}

CollectiveOptions coll_options(std::optional<std::string> algorithm, std::optional<double> timeout) {
  CollectiveOptions o;
  if (algorithm) o.algorithm = take(parse_coll_algorithm(*algorithm));
  o.timeout = to_optional_duration(timeout);
  return o;
}

/// A size_t vector that lives as long as the operation (v-forms read it while running).
std::shared_ptr<std::vector<size_t>> counts(const std::vector<size_t>& v, Holders& holders) {
  auto p = std::make_shared<std::vector<size_t>>(v);
  auto h = std::make_shared<Holder>();
  h->extra = p;
  holders.push_back(std::move(h));
  return p;
}

/// Blocking form: post, then wait without a bound of its own (the collective is bounded
/// by the communicator's timeout), GIL released.
nb::object finish(RequestObj r, bool blocking) {
  if (!blocking) return nb::cast(std::move(r));
  wait_request(r, std::numeric_limits<double>::infinity());
  return nb::none();
}

nb::object scan_impl(CommObj& c, bool blocking, bool exclusive, nb::handle send, nb::handle recv, const std::string& op,
                     std::optional<std::string> dtype, std::optional<std::string> algorithm,
                     std::optional<double> timeout) {
  Arg s = arg(send, false);
  const bool in_place = recv.is_none() || recv.is(send);
  Arg r = in_place ? arg(send, true) : arg(recv, true);
  DataType t = type_of(dtype, {&s, &r});
  size_t n = count_of(r, t);
  ReduceOp rop = take(parse_reduce_op(op));
  auto o = coll_options(algorithm, timeout);
  const void* sp = in_place ? kInPlace : s.ptr();
  return finish(post([&] {
                  return exclusive ? c.get().iexscan(sp, r.ptr(), n, t, rop, o) : c.get().iscan(sp, r.ptr(), n, t, rop, o);
                },
                     holders_of({&s, &r})),
                blocking);
}

/// Defines collective `name` twice: i<name> (returns a Request) and <name> (blocking).
template <typename... A, typename... Extra>
void both(nb::class_<CommObj>& cls, const char* name, nb::object (*fn)(CommObj&, bool, A...), const char* doc,
          const Extra&... extra) {
  const char* iname = (new std::string(std::string("i") + name))->c_str();  // names live as long as the module
  cls.def(iname, [fn](CommObj& c, A... a) { return fn(c, false, std::move(a)...); }, extra..., doc);
  cls.def(name, [fn](CommObj& c, A... a) { return fn(c, true, std::move(a)...); }, extra..., doc);
}

const char* const kAccessDoc =
    "Access rights of a registered region. Remote rights are what a RemoteKey can grant "
    "(remora/types.h). Combine with |.";

// ---------------------------------------------------------------------------
// configuration: Context's keyword arguments and config() from the library's table
// ---------------------------------------------------------------------------

const ConfigVariable* option_row(std::string_view field) {
  for (const ConfigVariable& v : config_variables()) {
    if (v.field == field) return &v;
  }
  return nullptr;
}

std::string option_names() {
  std::string out;
  for (const ConfigVariable& v : config_variables()) {
    if (!v.field.empty()) out += (out.empty() ? "" : ", ") + std::string(v.field);
  }
  return out;
}

/// One keyword argument as ContextOptions::set takes it: a bool for a switch, a number
/// (an int, or an enum member's value), or text read as the environment's is.
ConfigValue option_value(std::string_view field, nb::handle value) {
  if (nb::isinstance<nb::bool_>(value)) return nb::cast<bool>(value);
  if (nb::isinstance<nb::str>(value)) return nb::cast<std::string>(value);
  nb::handle number = value;
  nb::object member;
  if (!nb::isinstance<nb::int_>(value) && nb::hasattr(value, "value")) {
    member = value.attr("value");  // an enum member (PinMode.OFF): its position
    number = member;
  }
  if (!nb::isinstance<nb::int_>(number) || nb::isinstance<nb::bool_>(number)) {
    throw nb::type_error(("Context(): " + std::string(field) + " takes an int, a bool, a str or an enum member, not " +
                          nb::cast<std::string>(nb::str(value.type())))
                             .c_str());
  }
  if (nb::cast<bool>(number.attr("__lt__")(0))) {
    check(Status(StatusCode::kInvalidArgument, std::string(field) + " cannot be negative"));
  }
  return nb::cast<uint64_t>(number);
}

ContextOptions context_options(const nb::kwargs& kwargs) {
  ContextOptions o;
  for (auto [key, value] : kwargs) {
    const std::string field = nb::cast<std::string>(key);
    if (value.is_none()) continue;  // unset: the environment's or the default
    if (field == "auth_key" && nb::isinstance<AuthKey>(value)) {
      o.auth_key = nb::cast<AuthKey>(value);
      continue;
    }
    if (option_row(field) == nullptr) {
      throw nb::type_error(
          ("Context() got an unexpected keyword argument '" + field + "' (the options: " + option_names() + ")")
              .c_str());
    }
    check(o.set(field, option_value(field, value)));
  }
  return o;
}

/// A choice's position as the package's enum where it has one, else as its word.
nb::object choice_object(const ConfigVariable& v, uint64_t n) {
  if (v.field == "pin_mode") return nb::cast(static_cast<PinMode>(n));
  if (v.field == "device_path") return nb::cast(static_cast<DevicePathMode>(n));
  if (v.field == "checksum") return nb::cast(static_cast<ChecksumMode>(n));
  if (v.field == "log_level") return nb::cast(static_cast<LogLevel>(n));
  return nb::str(std::string(v.choices[n]).c_str());
}

nb::dict config_dict(const Config& k) {
  nb::dict d;
  for (const ConfigVariable& v : config_variables()) {
    if (v.field.empty() || v.field == "auth_key") continue;
    const ConfigValue value = take(config_value(k, v.field));
    if (const auto* flag = std::get_if<bool>(&value)) {
      d[std::string(v.field).c_str()] = *flag;
    } else if (const auto* n = std::get_if<uint64_t>(&value)) {
      d[std::string(v.field).c_str()] = v.kind == ConfigKind::kChoice ? choice_object(v, *n) : nb::int_(*n);
    }
  }
  // The environment-only fields of Config.
  for (const char* field : {"devmem_ifname", "rxq_socket", "rxq_device_area", "zcrx_area"}) {
    const ConfigValue value = take(config_value(k, field));
    if (const auto* text = std::get_if<std::string>(&value)) {
      d[field] = *text;
    } else {
      d[field] = std::get<uint64_t>(value);
    }
  }
  if (k.auth_key) {
    d["auth_key"] = *k.auth_key;
  } else {
    d["auth_key"] = nb::none();
  }
  return d;
}

/// Context's docstring: its keyword arguments, one per row of the configuration table.
const std::string& context_doc() {
  static const std::string doc = [] {
    std::string out =
        "The root object: configuration, registered memory, a progress thread, listeners and endpoints. "
        "Configuration comes from REMORA_* environment variables with the keyword arguments applied on top "
        "(docs/configuration.md); ignore_env=True skips the environment. Closing (close() or collection) closes "
        "every endpoint.\n\n"
        "Keyword arguments, one per option of the library's configuration table (remora.config_variables(); "
        "unset or None: the environment's or the default value). Each takes an int, a bool (switches such as "
        "same_host_pulls: True is auto), a str read as its environment variable is (\"512K\", \"off\"), or "
        "the package's enum (PinMode, DevicePathMode, ChecksumMode, LogLevel); InvalidArgument for a value out "
        "of range, TypeError for an unknown name:\n";
    for (const ConfigVariable& v : config_variables()) {
      if (v.field.empty()) continue;
      out += "  " + std::string(v.field) + " (" + std::string(v.name) + ", " + v.range() + "): " + std::string(v.doc) +
             "\n";
    }
    out +=
        "  auth_key may also be an AuthKey.\n"
        "cuda=True: load the CUDA driver now and fail here (Unsupported, with the driver's reason) where there is "
        "none; without it, the first CUDA memory the package sees (a PyTorch CUDA tensor, a CuPy array, "
        "remora.cuda_empty) loads it, and from then on every context moves CUDA memory through pinned staging "
        "buffers (docs/device-memory.md).";
    return out;
  }();
  return doc;
}

}  // namespace
}  // namespace remora::python

using namespace remora;
using namespace remora::python;

NB_MODULE(_remora, m) {
  m.doc() =
      "remora: RDMA-like memory semantics over plain TCP (the C++ library, include/remora/*.h). "
      "See docs/python.md.";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      nb::handle cls = error_class(e.status.code());
      PyErr_SetString(cls.ptr(), e.status.message().c_str());
    }
  });

  m.attr("FOREVER") = std::numeric_limits<double>::infinity();
  m.attr("__version__") = version_string();
  m.attr("WIRE_VERSION") = kWireVersion;
  m.def("_pending_keepalive", [] { return KeepAlive::instance().pending(); },
        "Operations whose buffers the package still holds (tests).");
  m.def("_code_names", [] {
    std::vector<std::string> names;
    for (int c = 0; c <= static_cast<int>(StatusCode::kDataCorrupt); ++c) {
      names.emplace_back(to_string(static_cast<StatusCode>(c)));
    }
    return names;
  });

  nb::enum_<Access>(m, "Access", nb::is_flag(), kAccessDoc)
      .value("NONE", Access::kNone)
      .value("LOCAL_WRITE", Access::kLocalWrite, "local operations may write into it (receives, get results)")
      .value("REMOTE_READ", Access::kRemoteRead, "a peer holding a key may read it (get)")
      .value("REMOTE_WRITE", Access::kRemoteWrite, "a peer holding a key may write it (put)")
      .value("REMOTE_ATOMIC", Access::kRemoteAtomic, "a peer holding a key may run 64-bit atomics on it")
      .value("ALL", kAllAccess);

  nb::enum_<PinMode>(m, "PinMode", "How registration treats page pinning (REMORA_PIN).")
      .value("TRY", PinMode::kTry, "lock pages; if RLIMIT_MEMLOCK refuses, warn once and go on unpinned")
      .value("REQUIRE", PinMode::kRequire, "lock pages or fail registration with NoResource")
      .value("OFF", PinMode::kOff, "never lock pages (validation still happens)");

  nb::enum_<LogLevel>(m, "LogLevel", "Log verbosity (REMORA_LOG).")
      .value("ERROR", LogLevel::kError)
      .value("WARN", LogLevel::kWarn)
      .value("INFO", LogLevel::kInfo)
      .value("DEBUG", LogLevel::kDebug)
      .value("TRACE", LogLevel::kTrace);

  nb::enum_<DevicePathMode>(m, "DevicePathMode",
                            "Which data path transfers of device memory take (REMORA_DEVICE_PATH). AUTO: the "
                            "best one that works (devmem TCP, io_uring zcrx, else staging), each one passed over "
                            "recorded with why; the others demand that path, and a transfer it cannot take fails "
                            "with the reason (docs/device-memory.md).")
      .value("AUTO", DevicePathMode::kAuto)
      .value("DEVMEM", DevicePathMode::kDevmem)
      .value("ZCRX", DevicePathMode::kZcrx)
      .value("STAGING", DevicePathMode::kStaging);

  nb::enum_<ChecksumMode>(m, "ChecksumMode",
                          "End-to-end integrity of transfers (REMORA_CHECKSUM). CRC32C: every chunk of every "
                          "transfer carries a CRC-32C on the control stream and the receiver checks it; a "
                          "mismatch fails that operation with DataCorrupt (docs/protocol.md, \"Checksums\"). "
                          "Both sides of an endpoint must use the same mode (a differing peer is refused at "
                          "connect). Needs a build with ISA-L; without it CRC32C is refused (Unsupported).")
      .value("NONE", ChecksumMode::kNone)
      .value("CRC32C", ChecksumMode::kCrc32c);

  nb::class_<AuthKey>(m, "AuthKey",
                      "The key every handshake proves knowledge of when a job secret is configured "
                      "(REMORA_AUTH_KEY or REMORA_AUTH_KEY_FILE; docs/configuration.md): 32 bytes derived from "
                      "the secret (BLAKE2b under a fixed label), never the secret itself. Endpoints and the "
                      "rendezvous store then authenticate both ways by an HMAC challenge-response over fresh "
                      "nonces (docs/protocol.md, \"Authentication\"); a peer that cannot prove it holds the same "
                      "secret gets no endpoint and no store access (AccessDenied on its side).")
      .def_static("from_secret",
                  [](nb::bytes secret) {
                    return take(AuthKey::from_secret(
                        std::string_view(static_cast<const char*>(secret.data()), secret.size())));
                  },
                  "secret"_a,
                  "Derives the key from a shared secret (bytes; encode a str first). InvalidArgument when it "
                  "is empty.")
      .def_static("from_env", [] { return take(AuthKey::from_env()); },
                  "The key the environment names: REMORA_AUTH_KEY (the secret itself) or REMORA_AUTH_KEY_FILE "
                  "(a file holding it; one trailing newline is dropped). Neither set: None (no "
                  "authentication). InvalidArgument, naming the variable, when both are set, when the secret "
                  "is empty, or when the file cannot be read.")
      .def_prop_ro("bytes",
                   [](const AuthKey& k) {
                     return nb::bytes(reinterpret_cast<const char*>(k.bytes.data()), k.bytes.size());
                   },
                   "The 32 derived bytes.")
      .def("__eq__", [](const AuthKey& a, const AuthKey& b) { return a.bytes == b.bytes; })
      .def("__repr__", [](const AuthKey&) { return std::string("AuthKey(<32 bytes>)"); });

  // --- RemoteKey ------------------------------------------------------------
  nb::class_<RemoteKey>(m, "RemoteKey",
                        "A grant to access a window of a registered region: region id, generation "
                        "(deregistration revokes), the window's bounds, the remote rights granted, and a "
                        "64-bit secret tag over all of those (SipHash keyed with a key that never leaves the "
                        "registering process). Changing any field makes the key invalid. Serialises to exactly "
                        "40 bytes (to_bytes / from_bytes) to hand to a peer any way you like.")
      .def_prop_ro("region", [](const RemoteKey& k) { return static_cast<uint32_t>(k.region); })
      .def_ro("generation", &RemoteKey::generation)
      .def_ro("secret", &RemoteKey::secret)
      .def_ro("offset", &RemoteKey::offset, "start of the granted window within the region")
      .def_ro("length", &RemoteKey::length, "length of the granted window")
      .def_ro("access", &RemoteKey::access)
      .def("to_bytes",
           [](const RemoteKey& k) {
             auto a = k.serialize();
             return nb::bytes(reinterpret_cast<const char*>(a.data()), a.size());
           },
           "The 40-byte little-endian serialisation (docs/protocol.md).")
      .def_static("from_bytes",
                  [](nb::bytes b) {
                    return take(RemoteKey::deserialize(
                        std::span<const std::byte>(static_cast<const std::byte*>(b.data()), b.size())));
                  },
                  "data"_a,
                  "Parses 40 bytes. InvalidArgument for a wrong size, unknown version, unknown access bits, "
                  "nonzero reserved bytes or a window whose end overflows. (A key whose secret was tampered "
                  "with parses; the target refuses it with InvalidKey.)")
      .def("__eq__", [](const RemoteKey& a, const RemoteKey& b) { return a == b; })
      .def("__hash__",
           [](const RemoteKey& k) {
             auto a = k.serialize();
             return nb::hash(nb::bytes(reinterpret_cast<const char*>(a.data()), a.size()));
           })
      .def("__getstate__",
           [](const RemoteKey& k) {
             auto a = k.serialize();
             return nb::bytes(reinterpret_cast<const char*>(a.data()), a.size());
           })
      .def("__setstate__",
           [](RemoteKey& k, nb::bytes b) {
             new (&k) RemoteKey(take(RemoteKey::deserialize(
                 std::span<const std::byte>(static_cast<const std::byte*>(b.data()), b.size()))));
           })
      .def("__repr__", [](const RemoteKey& k) {
        return "RemoteKey(region=" + std::to_string(static_cast<uint32_t>(k.region)) +
               ", generation=" + std::to_string(k.generation) + ", offset=" + std::to_string(k.offset) +
               ", length=" + std::to_string(k.length) + ")";
      });

  // --- Request --------------------------------------------------------------
  nb::class_<RequestObj>(m, "Request",
                        "Handle to one asynchronous operation. Dropping it does not cancel the operation; the "
                        "package keeps the operation's buffers alive until it completes. Awaitable from asyncio "
                        "(no thread per request: completion writes an eventfd the event loop watches).")
      .def("wait", &wait_request, "timeout"_a = nb::none(),
           "Waits up to `timeout` seconds (spinning briefly, then blocking in the kernel), GIL released. "
           "Returns None when the operation succeeded, raises its error otherwise, or remora.Timeout (the "
           "operation goes on; wait again or close the endpoint to abort it). None: the context's default "
           "bound (REMORA_WAIT_TIMEOUT_MS, 5 min); remora.FOREVER: no deadline.")
      .def("test",
           [](const RequestObj& r) {
             Status s;
             {
               nb::gil_scoped_release unlocked;
               s = r.req.test();
             }
             KeepAlive::instance().sweep();
             if (s.code() == StatusCode::kInProgress) return false;
             check(s);
             return true;
           },
           "Drives progress once. False while running, True when it succeeded; raises its error if it failed.")
      .def_prop_ro("done", [](const RequestObj& r) { return r.req.done(); }, "True once the operation completed.")
      .def_prop_ro("bytes", [](const RequestObj& r) { return r.req.bytes(); },
                   "Bytes sent or received (a recv: the message's length; a batch: the sum). Valid once done.")
      .def_prop_ro("tag", [](const RequestObj& r) { return static_cast<uint64_t>(r.req.tag()); },
                   "Tag of the matched message (recv) or the sent one.")
      .def_prop_ro("value",
                   [](const RequestObj& r) -> std::optional<uint64_t> {
                     if (!r.value || !r.req.done()) return std::nullopt;
                     return *r.value;
                   },
                   "fetch_add / compare_swap: the word's previous value once done (None before, or for other "
                   "operations).")
      .def("__await__",
           [](nb::handle self) {
             return nb::module_::import_("remora._aio").attr("wait_for")(self).attr("__await__")();
           },
           "`await request`: completes when the operation does (raising its error) and returns the request.");

  // --- CUDA memory without a CUDA runtime of one's own ------------------------
  m.def("cuda_empty",
        [](size_t nbytes, int device) {
          use_cuda_memory();
          void* p = nullptr;
          {
            nb::gil_scoped_release unlocked;
            p = take(cuda_allocate(std::max<size_t>(nbytes, 1), device));
          }
          nb::capsule owner(p, [](void* q) noexcept { (void)cuda_free(q); });
          return nb::ndarray<nb::array_api, uint8_t, nb::ndim<1>, nb::device::cuda>(p, {nbytes}, owner, {}, nb::dtype<uint8_t>(),
                                                                    nb::device::cuda::value, device);
        },
        "nbytes"_a, "device"_a = 0,
        "`nbytes` of CUDA device memory on `device` (cuMemAlloc in its primary context, through the driver: "
        "no CUDA runtime needed), uninitialised, as a 1-D uint8 array that exports DLPack (kDLCUDA) and is "
        "freed when the last reference to it goes. For programs that have no PyTorch or CuPy to allocate "
        "device memory with. Unsupported, with the driver's reason, where no CUDA driver loads.");
  m.def("cuda_copy",
        [](nb::handle dst, nb::handle src) {
          Memory d = memory(dst, true);
          Memory s = memory(src, false);
          if (d.size != s.size) {
            raise(Status(StatusCode::kInvalidArgument, "cuda_copy: dst has " + std::to_string(d.size) +
                                                           " bytes and src " + std::to_string(s.size)));
          }
          MemoryDomain& cuda = use_cuda_memory();
          const bool dst_dev = cuda.owns(d.data, d.size), src_dev = cuda.owns(s.data, s.size);
          if (dst_dev == src_dev) {
            raise(Status(StatusCode::kInvalidArgument,
                         "cuda_copy copies between host and CUDA memory: one side must be each (device to device "
                         "and host to host are the frameworks' and memcpy's)"));
          }
          nb::gil_scoped_release unlocked;
          auto copy = dst_dev ? cuda.copy_from_host(d.data, s.data, s.size) : cuda.copy_to_host(d.data, s.data, s.size);
          check(copy.is_ok() ? (*copy)->wait(kForever) : copy.status());
        },
        "dst"_a, "src"_a,
        "Copies `src` into `dst`, one of them CUDA memory and the other host memory, of the same size, "
        "through the CUDA driver (waits for the copy, GIL released). With cuda_empty, what moves data in "
        "and out of device memory for programs without a framework.");

  m.def("wait_all",
        [](std::vector<RequestObj*> requests, std::optional<double> timeout) {
          std::vector<Request> list;
          list.reserve(requests.size());
          for (RequestObj* r : requests) {
            if (!r) raise(Status(StatusCode::kInvalidArgument, "wait_all takes remora.Request objects"));
            list.push_back(r->req);
          }
          const Duration d = to_duration(timeout);
          Status s;
          {
            nb::gil_scoped_release unlocked;
            s = wait_all(list, d);
          }
          KeepAlive::instance().sweep();
          check(s);
        },
        "requests"_a, "timeout"_a = nb::none(),
        "Waits for all requests (up to `timeout` seconds in total; GIL released). First error wins; "
        "remora.Timeout if any is still running at the deadline. None: the default bound of the context "
        "of the first request still running (REMORA_WAIT_TIMEOUT_MS); remora.FOREVER: none.");

  nb::class_<Completions>(m, "_Completions", "Completion eventfd for asyncio (remora/_aio.py).")
      .def(nb::init<>())
      .def("fileno", &Completions::fileno)
      .def("watch", &Completions::watch, "request"_a, "token"_a)
      .def("drain", &Completions::drain);

  // --- Notification ---------------------------------------------------------
  nb::class_<Notification>(m, "Notification", "A notification delivered by a put (or batch) with notify=.")
      .def_ro("value", &Notification::value, "the 64-bit value the initiator sent")
      .def_prop_ro("region", [](const Notification& n) { return static_cast<uint32_t>(n.region); },
                   "the id of the region the put wrote (Region.id)")
      .def_ro("offset", &Notification::offset, "where in the region (bytes from the region's start)")
      .def_ro("length", &Notification::length, "bytes the put wrote")
      .def("__repr__", [](const Notification& n) {
        return "Notification(value=" + std::to_string(n.value) + ", region=" +
               std::to_string(static_cast<uint32_t>(n.region)) + ", offset=" + std::to_string(n.offset) +
               ", length=" + std::to_string(n.length) + ")";
      });

  // --- Region, Pool, Buffer -------------------------------------------------
  nb::class_<RegionObj>(m, "Region",
                       "A registered range of memory (Context.register). Keeps the registered object alive; "
                       "deregisters (revoking its keys) on deregister() or when collected.")
      .def("remote_key",
           [](RegionObj& r, std::optional<uint64_t> offset, std::optional<uint64_t> length,
              std::optional<Access> access) {
             if (!r.region.valid()) raise(Status(StatusCode::kInvalidArgument, "the region was deregistered"));
             if (!offset && !length && !access) return r.region.remote_key();
             const uint64_t off = offset.value_or(0);
             const uint64_t len = length ? *length : (off <= r.region.size() ? r.region.size() - off : 0);
             return take(r.region.remote_key(off, len, access.value_or(r.region.access() & kRemoteAccessMask)));
           },
           "offset"_a = nb::none(), "length"_a = nb::none(), "access"_a = nb::none(),
           "A key granting the region's remote rights over the whole region; with arguments, a key for the "
           "window [offset, offset+length) with a subset of the rights. OutOfRange / AccessDenied / "
           "InvalidArgument otherwise.")
      .def("deregister", [](RegionObj& r) { r.region.deregister(); },
           "Deregister now (idempotent). Keys for this region stop validating immediately.")
      .def_prop_ro("id", [](const RegionObj& r) { return static_cast<uint32_t>(r.region.id()); })
      .def_prop_ro("size", [](const RegionObj& r) { return r.region.size(); })
      .def_prop_ro("address", [](const RegionObj& r) { return reinterpret_cast<uintptr_t>(r.region.data()); })
      .def_prop_ro("access", [](const RegionObj& r) { return r.region.access(); })
      .def_prop_ro("pinned", [](const RegionObj& r) { return r.region.pinned(); })
      .def_prop_ro("valid", [](const RegionObj& r) { return r.region.valid(); })
      .def_prop_ro("obj", [](const RegionObj& r) { return r.holder ? r.holder->owner : nb::none(); },
                   "The object whose memory is registered.");

  nb::class_<BufferObj>(m, "Buffer",
                       "A registered buffer from a Pool. Returns to the pool's free list when released "
                       "(release(), or when collected). Usable wherever memory is expected.")
      .def("view",
           [](nb::handle self) {
             BufferObj& b = nb::cast<BufferObj&>(self);
             if (!b.buf.valid()) raise(Status(StatusCode::kInvalidArgument, "the buffer was released"));
             size_t shape[1] = {b.buf.size()};
             return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(reinterpret_cast<uint8_t*>(b.buf.data()), 1, shape,
                                                                 self);
           },
           "A NumPy uint8 array over the buffer's bytes (no copy; keeps the buffer alive).")
      .def("remote_key", [](const BufferObj& b) { return b.buf.remote_key(); },
           "A key granting the pool's remote rights over exactly this buffer's bytes.")
      .def("release", [](BufferObj& b) { b.buf.reset(); }, "Returns the buffer to its pool now.")
      .def_prop_ro("size", [](const BufferObj& b) { return b.buf.size(); }, "bytes requested")
      .def_prop_ro("capacity", [](const BufferObj& b) { return b.buf.capacity(); }, "size class")
      .def_prop_ro("region_id", [](const BufferObj& b) { return static_cast<uint32_t>(b.buf.region().id()); })
      .def_prop_ro("region_offset", [](const BufferObj& b) { return b.buf.region_offset(); })
      .def("__len__", [](const BufferObj& b) { return b.buf.size(); });

  nb::class_<DmabufObj>(m, "DmabufMemory",
                       "Memory in a dmabuf (remora/dmabuf.h): [offset, offset + length) of the dmabuf descriptor "
                       "`fd` (a GPU driver's export, a udmabuf, a DMA-BUF heap buffer; duplicated, the caller "
                       "keeps its own). Give it to Context.add_memory, then use it wherever memory is expected "
                       "(register, send, recv, put, get). Where the CPU can map it, view() shows its bytes and every "
                       "path works; where it cannot, only devmem TCP moves it, and a transfer that would copy it on "
                       "the CPU raises Unsupported saying so.")
      .def("__init__",
           [](DmabufObj* self, int fd, uint64_t offset, uint64_t length) {
             new (self) DmabufObj{take(DmabufMemory::open(fd, offset, length))};
           },
           "fd"_a, "offset"_a, "length"_a,
           "InvalidArgument for a descriptor that is not open or has no size, or a length of 0; OutOfRange for "
           "a range past the buffer's end.")
      .def("view",
           [](nb::handle self) {
             DmabufMemory& d = *nb::cast<DmabufObj&>(self).mem;
             if (!d.mapped()) {
               raise(Status(StatusCode::kUnsupported,
                            "the CPU cannot reach this dmabuf (" + d.unmapped_reason() + "): it has no view"));
             }
             size_t shape[1] = {d.size()};
             return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(reinterpret_cast<uint8_t*>(d.data()), 1, shape, self);
           },
           "A NumPy uint8 array over its bytes (no copy; keeps it alive). Unsupported where the CPU cannot map it.")
      .def_prop_ro("size", [](const DmabufObj& d) { return d.mem->size(); }, "bytes of the range")
      .def_prop_ro("address", [](const DmabufObj& d) { return reinterpret_cast<uintptr_t>(d.mem->data()); },
                   "the address that names the range's first byte")
      .def_prop_ro("mapped", [](const DmabufObj& d) { return d.mem->mapped(); }, "the CPU can read and write it")
      .def_prop_ro("unmapped_reason", [](const DmabufObj& d) { return d.mem->unmapped_reason(); },
                   "why not (mmap's errno), or \"\"")
      .def_prop_ro("is_dmabuf", [](const DmabufObj& d) { return d.mem->is_dmabuf(); },
                   "the kernel knows the descriptor as a dmabuf (only a real one can be bound by a NIC)")
      .def_prop_ro("exporter", [](const DmabufObj& d) { return d.mem->exporter(); },
                   "the exporter's name (\"udmabuf\", \"system\", a GPU driver's), or \"\"")
      .def("__len__", [](const DmabufObj& d) { return d.mem->size(); });

  nb::class_<PoolObj>(m, "Pool",
                     "Explicit reuse of registered memory: registers large arenas once and hands out Buffers "
                     "from power-of-two size classes (remora/pool.h).")
      .def("__init__",
           [](PoolObj* self, ContextObj& ctx, size_t arena_bytes, size_t min_buffer_bytes, size_t max_bytes,
              std::optional<Access> access) {
             PoolOptions o;
             o.arena_bytes = arena_bytes;
             o.min_buffer_bytes = min_buffer_bytes;
             o.max_bytes = max_bytes;
             if (access) o.access = *access;
             new (self) PoolObj{std::make_unique<Pool>(ctx.get(), o)};
           },
           "context"_a, "arena_bytes"_a = size_t{64} << 20, "min_buffer_bytes"_a = 4096, "max_bytes"_a = 0,
           "access"_a = nb::none(), nb::keep_alive<1, 2>())
      .def("allocate",
           [](PoolObj& p, size_t bytes) {
             Result<Buffer> b = [&] {
               nb::gil_scoped_release unlocked;
               return p.pool->allocate(bytes);
             }();
             return BufferObj{take(std::move(b))};
           },
           "bytes"_a,
           "A buffer of at least `bytes`. NoResource if max_bytes would be exceeded or registration is "
           "refused.",
           nb::keep_alive<0, 1>())
      .def("stats", [](const PoolObj& p) {
        PoolStats s = p.pool->stats();
        nb::dict d;
        d["registrations"] = s.registrations;
        d["bytes_registered"] = s.bytes_registered;
        d["hits"] = s.hits;
        d["misses"] = s.misses;
        d["buffers_in_use"] = s.buffers_in_use;
        d["bytes_in_use"] = s.bytes_in_use;
        return d;
      });

  // --- Endpoint -------------------------------------------------------------
  nb::class_<EndpointObj>(m, "Endpoint",
                         "A connection to one peer: tagged two-sided messaging and one-sided remote memory "
                         "access (put, get, notify, atomics, flush). Thread-safe (remora/endpoint.h).")
      .def("send",
           [](EndpointObj& e, nb::handle buf, uint64_t tag) {
             Memory m = memory(buf, false);
             return post([&] { return e.ep->send(m.span(), Tag{tag}); }, {m.holder});
           },
           "buf"_a, "tag"_a,
           "Sends `buf` with `tag` (no copy). The buffer is held until the request completes (when the "
           "bytes are in the kernel or copied, not when the peer received them). Messages with the same tag "
           "are received in send order.")
      .def("recv",
           [](EndpointObj& e, nb::handle buf, uint64_t tag) {
             Memory m = memory(buf, true);
             return post([&] { return e.ep->recv(m.span(), Tag{tag}); }, {m.holder});
           },
           "buf"_a, "tag"_a,
           "Posts a receive of a message with `tag` into `buf` (in place). A message longer than the "
           "buffer completes the request with Truncated and no byte of it is written. Request.bytes is "
           "the message's length.")
      .def("put",
           [](EndpointObj& e, nb::handle buf, const RemoteKey& key, uint64_t offset, std::optional<uint64_t> notify) {
             Memory m = memory(buf, false);
             const RemoteKey& k = key;
             return post([&] { return e.ep->put(m.span(), k, offset, PutOptions{.notify = notify}); }, {m.holder});
           },
           "buf"_a, "key"_a, "offset"_a = 0, "notify"_a = nb::none(),
           "Writes `buf` into the peer's memory at `offset` within `key`'s window. Completes when the TARGET "
           "placed every byte (and, with notify=, queued the notification: a 64-bit value the target gets "
           "exactly once, after the data). Errors from the target: InvalidKey (forged, stale or unknown "
           "key), OutOfRange, AccessDenied (no remote-write right), NoResource (the target's notification "
           "queue is full; nothing was written). Puts and gets are not ordered with each other; flush() is "
           "the fence.")
      .def("get",
           [](EndpointObj& e, nb::handle buf, const RemoteKey& key, uint64_t offset) {
             Memory m = memory(buf, true);
             const RemoteKey& k = key;
             return post([&] { return e.ep->get(m.span(), k, offset); }, {m.holder});
           },
           "buf"_a, "key"_a, "offset"_a = 0,
           "Reads the peer's memory at `offset` within `key`'s window into `buf` (len(buf) bytes, in place). "
           "Needs the remote-read right. Not covered by flush(): wait on its request.")
      .def("put_batch",
           [](EndpointObj& e, nb::iterable items, std::optional<uint64_t> notify) {
             std::vector<TransferItem> list;
             Holders holders;
             for (nb::handle item : items) {
               nb::tuple t = nb::cast<nb::tuple>(item);
               if (t.size() != 3) raise(Status(StatusCode::kInvalidArgument, "a batch item is (buffer, key, offset)"));
               Memory m = memory(t[0], false);
               list.push_back({m.span(), key_of(t[1]), nb::cast<uint64_t>(t[2])});
               holders.push_back(m.holder);
             }
             return post([&] { return e.ep->put_batch(list, PutOptions{.notify = notify}); }, std::move(holders));
           },
           "items"_a, "notify"_a = nb::none(),
           "Posts one put per (buffer, key, offset) item, all at once, and returns one Request that completes "
           "when every put has completed at the target, with the failure of the lowest-numbered item that "
           "failed (others still land). With notify=, the target receives exactly one notification, only "
           "after every item's bytes are visible: it is sent (a zero-length put at the LAST item's key and "
           "offset) once all the puts succeeded, and not at all if one failed. Items may name different "
           "regions of the peer.")
      .def("get_batch",
           [](EndpointObj& e, nb::iterable items) {
             std::vector<TransferItem> list;
             Holders holders;
             for (nb::handle item : items) {
               nb::tuple t = nb::cast<nb::tuple>(item);
               if (t.size() != 3) raise(Status(StatusCode::kInvalidArgument, "a batch item is (buffer, key, offset)"));
               Memory m = memory(t[0], true);
               list.push_back({m.span(), key_of(t[1]), nb::cast<uint64_t>(t[2])});
               holders.push_back(m.holder);
             }
             return post([&] { return e.ep->get_batch(list); }, std::move(holders));
           },
           "items"_a,
           "Posts one get per (buffer, key, offset) item, all at once; one Request that completes when every "
           "byte is in place, or with the failure of the lowest-numbered item that failed.")
      .def("fetch_add",
           [](EndpointObj& e, const RemoteKey& key, uint64_t offset, uint64_t value) {
             const RemoteKey& k = key;
             auto result = std::make_shared<uint64_t>(0);
             return post([&] { return e.ep->fetch_add(result.get(), k, offset, value); }, {}, result);
           },
           "key"_a, "offset"_a, "value"_a,
           "Atomically adds `value` to the u64 at `offset`; Request.value is the previous value once done. "
           "The word must be 8-byte aligned in the target's address space (InvalidArgument otherwise) and "
           "the key must grant remote atomics.")
      .def("compare_swap",
           [](EndpointObj& e, const RemoteKey& key, uint64_t offset, uint64_t expected, uint64_t desired) {
             const RemoteKey& k = key;
             auto result = std::make_shared<uint64_t>(0);
             return post([&] { return e.ep->compare_swap(result.get(), k, offset, {expected, desired}); }, {},
                         result);
           },
           "key"_a, "offset"_a, "expected"_a, "desired"_a,
           "Atomically replaces the u64 at `offset` with `desired` if it equals `expected`; Request.value is "
           "the previous value either way (so the swap happened exactly when value == expected).")
      .def("flush", [](EndpointObj& e) { return post([&] { return e.ep->flush(); }, {}); },
           "Completes when every put and atomic posted on this endpoint before the call has completed at the "
           "target; raises the first failure among them (so fire-and-forget puts still report errors).")
      .def("poll_notification",
           [](EndpointObj& e) {
             nb::gil_scoped_release unlocked;
             return e.ep->poll_notification();
           },
           "The oldest undelivered notification, or None. Drives progress once.")
      .def("wait_notification",
           [](EndpointObj& e, std::optional<double> timeout) {
             const Duration d = to_duration(timeout);
             Result<Notification> n = [&] {
               nb::gil_scoped_release unlocked;
               return e.ep->wait_notification(d);
             }();
             return take(std::move(n));
           },
           "timeout"_a = nb::none(),
           "Waits up to `timeout` seconds for a notification (GIL released). remora.Timeout when none "
           "arrived; the endpoint's failure once it failed and the queue is empty.")
      .def("close",
           [](EndpointObj& e) {
             nb::gil_scoped_release unlocked;
             e.ep->close();
           },
           "Closes the endpoint: outstanding requests fail with Aborted; the peer sees an orderly close and "
           "can still receive what this side sent before. Idempotent.")
      .def("abort",
           [](EndpointObj& e) {
             nb::gil_scoped_release unlocked;
             e.ep->abort();
           },
           "Like close(), but the peer fails as if this side had died.")
      .def_prop_ro("failed", [](const EndpointObj& e) { return e.ep->failed(); },
                   "True once the endpoint has failed for good (peer gone, closed or aborted).")
      .def_prop_ro("closed_by_peer", [](const EndpointObj& e) { return e.ep->closed_by_peer(); },
                   "True once the endpoint failed because the peer called close().")
      .def_prop_ro("failure",
                   [](const EndpointObj& e) -> nb::object {
                     Status s = e.ep->failure();
                     if (s.is_ok()) return nb::none();
                     return error_object(s);
                   },
                   "Why the endpoint failed, as a remora.Error instance (not raised), or None.")
      .def_prop_ro("id", [](const EndpointObj& e) { return static_cast<uint64_t>(e.ep->id()); })
      .def_prop_ro("peer_address", [](const EndpointObj& e) { return e.ep->peer_address(); })
      .def_prop_ro("data_streams", [](const EndpointObj& e) { return e.ep->data_streams(); })
      .def_prop_ro("peer_said_goodbye", [](const EndpointObj& e) { return e.ep->peer_said_goodbye(); },
                   "True once the peer sent GOODBYE, with close() or abort(): it was alive when the endpoint "
                   "ended. An endpoint that failed with PeerFailed without it lost a peer that died, was cut "
                   "off or fell silent (EOF, reset, REMORA_PEER_TIMEOUT_MS). Communicator.failed_ranks() tells "
                   "a dead rank from a survivor that gave up this way.")
      .def("stats", [](const EndpointObj& e) { return stats_dict(e.ep->stats()); },
           "A snapshot of the counters (EndpointStats, remora/endpoint.h) as a dict: messages_sent, "
           "messages_received, bytes_sent, bytes_received, eager_sent, rendezvous_sent, chunks_sent, "
           "chunks_per_stream (a list, one per data stream), chunks_pulled and bytes_pulled (same-host "
           "pulls: chunks this side announced for the peer to read out of its memory, bytes this side read "
           "out of the peer's), huge_pages_promoted (2 MiB frames of this side's memory the peer pulled again "
           "and again, collapsed into huge pages), same_host_reason (why this side does not read the peer's memory, '' when it "
           "does), puts, gets, atomics, rma_bytes_put, "
           "rma_bytes_got, served_puts, served_gets, served_atomics, refused (operations this side refused "
           "as the target), notifications (delivered to this side), staged_transfers and staged_bytes "
           "(device-memory transfers through pinned staging buffers), devmem_transfers and zcrx_transfers "
           "(device transfers by devmem TCP, message sends and chunked puts / by io_uring zero-copy "
           "receive, 0 in this version), "
           "device_path_refusals (device transfers refused because the path REMORA_DEVICE_PATH demands "
           "could not take them), device_path (the path the last device-memory transfer took: "
           "\"staging\", \"devmem\", \"zcrx\", \"refused\"; empty before the first) and "
           "device_path_reason (why; names each faster path passed over).")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](EndpointObj& e, nb::args) {
        nb::gil_scoped_release unlocked;
        e.ep->close();
      });

  // --- Listener, Context ----------------------------------------------------
  nb::class_<ListenerObj>(m, "Listener", "Accepts endpoints connected to a listening address.")
      .def("accept",
           [](ListenerObj& l, std::optional<double> timeout) {
             const Duration d = to_duration(timeout);
             Result<std::shared_ptr<Endpoint>> r = [&] {
               nb::gil_scoped_release unlocked;
               return l.get().accept(d);
             }();
             return EndpointObj{take(std::move(r))};
           },
           "timeout"_a = nb::none(),
           "Next endpoint whose handshake completed, waiting up to `timeout` seconds (GIL released): "
           "remora.Timeout when none did; Aborted once the listener is closed.",
           nb::keep_alive<0, 1>())
      .def_prop_ro("address", [](ListenerObj& l) { return l.get().address(); }, "\"host:port\" actually bound")
      .def_prop_ro("port", [](ListenerObj& l) { return l.get().port(); })
      .def("close",
           [](ListenerObj& l) {
             nb::gil_scoped_release unlocked;
             l.listener.reset();
           },
           "Stops listening; endpoints already accepted stay up.");

  nb::class_<ContextObj>(m, "Context",
                         "The root object: configuration, registered memory, a progress thread, listeners and "
                         "endpoints. Configuration comes from REMORA_* environment variables with the keyword "
                         "arguments applied on top (docs/configuration.md); ignore_env=True skips the "
                         "environment. Closing (close() or collection) closes every endpoint.")
      .def(
          "__init__",
          [](ContextObj* self, bool cuda, bool ignore_env, nb::kwargs kwargs) {
            if (cuda) use_cuda_memory();  // before the context: its failure leaves nothing behind
            ContextOptions o = context_options(kwargs);
            o.ignore_env = ignore_env;
            Result<std::unique_ptr<Context>> c = [&] {
              nb::gil_scoped_release unlocked;
              return Context::create(o);
            }();
            new (self) ContextObj(take(std::move(c)));
          },
          nb::kw_only(), "cuda"_a = false, "ignore_env"_a = false, "kwargs"_a, context_doc().c_str())
      .def(
          "listen",
          [](ContextObj& c, const std::string& address) {
            Result<std::unique_ptr<Listener>> l = [&] {
              nb::gil_scoped_release unlocked;
              return c.get().listen(address);
            }();
            return ListenerObj{take(std::move(l))};
          },
          "address"_a = "127.0.0.1:0",
          "Listens on \"host:port\" (\"0.0.0.0:0\", \"[::1]:7100\", \"localhost:7100\"); port 0 picks one.",
          nb::keep_alive<0, 1>())
      .def(
          "connect",
          [](ContextObj& c, const std::string& address, std::optional<double> timeout) {
            Result<std::shared_ptr<Endpoint>> r = [&] {
              Context& ctx = c.get();
              nb::gil_scoped_release unlocked;
              return timeout ? ctx.connect(address, to_duration(timeout)) : ctx.connect(address);
            }();
            return EndpointObj{take(std::move(r))};
          },
          "address"_a, "timeout"_a = nb::none(),
          "Connects to \"host:port\", performs the handshake and opens the data streams (GIL released). "
          "Unreachable, Timeout, ProtocolError (version mismatch or garbage). timeout None: "
          "REMORA_CONNECT_TIMEOUT_MS.",
          nb::keep_alive<0, 1>())
      .def(
          "add_memory",
          [](ContextObj& c, nb::handle mem) {
            DmabufObj& d = nb::cast<DmabufObj&>(mem);
            check(c.get().add_memory_domain(d.mem->domain()));
            c.memories.push_back(nb::borrow(mem));
          },
          "mem"_a,
          "Makes a DmabufMemory usable by this context (Context::add_memory_domain): its endpoints, regions "
          "and collectives then move it through the device paths. The context keeps it alive.")
      .def(
          "register",
          [](ContextObj& c, nb::handle obj, Access access) {
            const bool writable =
                (access & (Access::kLocalWrite | Access::kRemoteWrite | Access::kRemoteAtomic)) != Access::kNone;
            Memory m = memory(obj, writable);
            Result<Region> r = [&] {
              Context& ctx = c.get();
              nb::gil_scoped_release unlocked;
              return ctx.register_memory(m.data, m.size, access);
            }();
            return RegionObj{m.holder, take(std::move(r))};
          },
          "obj"_a, "access"_a = Access::kLocalWrite | Access::kRemoteRead | Access::kRemoteWrite,
          "Registers the memory of `obj` (any buffer-protocol or DLPack object: NumPy array, PyTorch "
          "tensor, CuPy array, bytearray, ...) in place, with `access` rights; the Region keeps `obj` alive. "
          "Host memory: validates the range and locks its pages (REMORA_PIN). CUDA memory: a region of device "
          "memory, which peers' puts and gets reach through the CUDA domain (docs/python.md). InvalidArgument "
          "for empty or non-contiguous memory; NoResource when pinning is required and refused; Unsupported "
          "for memory of another device kind.",
          nb::keep_alive<0, 1>())
      .def(
          "progress",
          [](ContextObj& c) {
            nb::gil_scoped_release unlocked;
            c.get().progress();
          },
          "Drives progress once from the calling thread (never blocks).")
      .def(
          "config", [](ContextObj& c) { return config_dict(c.get().config()); },
          "The resolved configuration, as a dict of Config's fields.")
      .def(
          "close",
          [](ContextObj& c) {
            nb::gil_scoped_release unlocked;
            c.ctx.reset();
          },
          "Closes every endpoint (their requests fail with Aborted) and joins the progress thread. Objects "
          "made from the context fail with Aborted afterwards.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](ContextObj& c, nb::args) {
        nb::gil_scoped_release unlocked;
        c.ctx.reset();
      });

  // --- rendezvous store, launch ---------------------------------------------
  nb::class_<StoreServerObj>(m, "StoreServer",
                            "Serves the rendezvous store (remora/store.h: a small TCP key-value service that "
                            "ranks use to find each other, hosted by rank 0) on a listening socket with its own "
                            "thread. Closing it (close() or collection) closes every client connection (their "
                            "calls fail with PeerFailed).")
      .def("__init__",
           [](StoreServerObj* self, const std::string& address, nb::object auth_key) {
             Result<std::unique_ptr<StoreServer>> r = Status(StatusCode::kInternal, "unset");
             if (auth_key.is(nb::ellipsis())) {
               nb::gil_scoped_release unlocked;
               r = StoreServer::start(address);
             } else {
               std::optional<AuthKey> key = nb::cast<std::optional<AuthKey>>(auth_key);
               nb::gil_scoped_release unlocked;
               r = StoreServer::start(address, key);
             }
             new (self) StoreServerObj{take(std::move(r))};
           },
           "address"_a = "127.0.0.1:0", "auth_key"_a.none() = nb::ellipsis(),
           "Listens on \"host:port\" (port 0 picks one). auth_key left out: the environment's key "
           "(AuthKey.from_env: REMORA_AUTH_KEY, REMORA_AUTH_KEY_FILE); every client must then authenticate "
           "before its first request is served (an unreadable key is InvalidArgument). An AuthKey, or None "
           "(no authentication): that, ignoring the environment.")
      .def_prop_ro("port", [](StoreServerObj& s) { return s.get().port(); })
      .def_prop_ro("address", [](StoreServerObj& s) { return s.get().address(); }, "\"host:port\" actually bound")
      .def("close",
           [](StoreServerObj& s) {
             nb::gil_scoped_release unlocked;
             s.server.reset();
           },
           "Stops serving; every client's calls fail with PeerFailed.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](StoreServerObj& s, nb::args) {
        nb::gil_scoped_release unlocked;
        s.server.reset();
      });

  nb::class_<StoreObj>(m, "Store",
                      "A connection to a StoreServer (remora/store.h). Keys are str (1..1024 bytes), values bytes "
                      "(up to 64 MiB). Every blocking call has a deadline and fails with Timeout naming the "
                      "keys it waited for; a server that went away fails every call with PeerFailed. "
                      "Thread-safe (calls are serialised); every call releases the GIL.")
      .def("__init__",
           [](StoreObj* self, const std::string& address, double timeout, nb::object auth_key) {
             const Duration d = to_duration(timeout);
             Result<std::unique_ptr<Store>> r = Status(StatusCode::kInternal, "unset");
             if (auth_key.is(nb::ellipsis())) {
               nb::gil_scoped_release unlocked;
               r = Store::connect(address, d);
             } else {
               std::optional<AuthKey> key = nb::cast<std::optional<AuthKey>>(auth_key);
               nb::gil_scoped_release unlocked;
               r = Store::connect(address, d, key);
             }
             new (self) StoreObj{take(std::move(r))};
           },
           "address"_a, "timeout"_a = 30.0, "auth_key"_a.none() = nb::ellipsis(),
           "Connects to \"host:port\", retrying until `timeout` seconds (the server may start later): "
           "Timeout / Unreachable with the address. auth_key left out: the environment's key; client and "
           "server then prove to each other that they hold it, and a server without it, with another key, "
           "or one that cannot prove it fails the call with AccessDenied (not retried). An AuthKey, or None "
           "(no key; a server that requires one fails the first request with AccessDenied): that, "
           "ignoring the environment.")
      .def("set",
           [](StoreObj& s, const std::string& key, nb::bytes value) {
             std::span<const std::byte> v(static_cast<const std::byte*>(value.data()), value.size());
             Store& st = s.get();
             Status r;
             {
               nb::gil_scoped_release unlocked;
               r = st.set(key, v);
             }
             check(r);
           },
           "key"_a, "value"_a, "Stores `value` (bytes) under `key`.")
      .def("get",
           [](StoreObj& s, const std::string& key, double timeout) {
             const Duration d = to_duration(timeout);
             Store& st = s.get();
             Result<std::vector<std::byte>> r = [&] {
               nb::gil_scoped_release unlocked;
               return st.get(key, d);
             }();
             std::vector<std::byte> v = take(std::move(r));
             return nb::bytes(reinterpret_cast<const char*>(v.data()), v.size());
           },
           "key"_a, "timeout"_a = 30.0,
           "Waits up to `timeout` seconds for `key` to exist, then returns its value (bytes).")
      .def("wait",
           [](StoreObj& s, std::vector<std::string> keys, double timeout) {
             const Duration d = to_duration(timeout);
             Store& st = s.get();
             Status r;
             {
               nb::gil_scoped_release unlocked;
               r = st.wait(keys, d);
             }
             check(r);
           },
           "keys"_a, "timeout"_a = 30.0,
           "Waits up to `timeout` seconds until every key exists. Timeout lists the missing ones.")
      .def("wait_missing",
           [](StoreObj& s, std::vector<std::string> keys, double timeout) {
             const Duration d = to_duration(timeout);
             Store& st = s.get();
             Result<std::vector<std::string>> r = [&] {
               nb::gil_scoped_release unlocked;
               return st.wait_missing(keys, d);
             }();
             return take(std::move(r));
           },
           "keys"_a, "timeout"_a = 30.0,
           "Waits up to `timeout` seconds until every key exists; returns the keys still missing then, in "
           "the order given (an empty list: all exist). A timeout is an answer here, not an error.")
      .def("add",
           [](StoreObj& s, const std::string& key, int64_t delta) {
             Store& st = s.get();
             Result<int64_t> r = [&] {
               nb::gil_scoped_release unlocked;
               return st.add(key, delta);
             }();
             return take(std::move(r));
           },
           "key"_a, "delta"_a,
           "Atomically adds `delta` to the signed 64-bit counter at `key` (created as 0) and returns the new "
           "value. A key holding a value that is not a counter is InvalidArgument.")
      .def("check",
           [](StoreObj& s, const std::string& key) {
             Store& st = s.get();
             Result<bool> r = [&] {
               nb::gil_scoped_release unlocked;
               return st.check(key);
             }();
             return take(std::move(r));
           },
           "key"_a, "Whether `key` exists now (never waits).")
      .def("remove",
           [](StoreObj& s, const std::string& key) {
             Store& st = s.get();
             Result<bool> r = [&] {
               nb::gil_scoped_release unlocked;
               return st.remove(key);
             }();
             return take(std::move(r));
           },
           "key"_a, "Removes `key`; True if it existed.")
      .def_prop_ro("local_host", [](StoreObj& s) { return s.get().local_host(); },
                   "The local address of this client's connection (\"10.0.0.2\"): the interface through "
                   "which the store is reachable, what a rank advertises to others.")
      .def("close",
           [](StoreObj& s) {
             nb::gil_scoped_release unlocked;
             s.store.reset();
           },
           "Closes the connection.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](StoreObj& s, nb::args) {
        nb::gil_scoped_release unlocked;
        s.store.reset();
      });

  nb::class_<LaunchInfo>(m, "LaunchInfo", "Rank, size and rendezvous address of this process (remora/launch.h).")
      .def_ro("rank", &LaunchInfo::rank)
      .def_ro("size", &LaunchInfo::size)
      .def_ro("local_rank", &LaunchInfo::local_rank)
      .def_ro("local_size", &LaunchInfo::local_size)
      .def_ro("launcher", &LaunchInfo::launcher, "\"remora\", \"torchrun\", \"openmpi\", \"mpich\", \"slurm\"")
      .def_ro("store_address", &LaunchInfo::store_address, "\"host:port\" of the rendezvous store")
      .def("__repr__", [](const LaunchInfo& l) {
        return "LaunchInfo(rank=" + std::to_string(l.rank) + ", size=" + std::to_string(l.size) +
               ", local_rank=" + std::to_string(l.local_rank) + ", local_size=" + std::to_string(l.local_size) +
               ", launcher='" + l.launcher + "', store_address='" + l.store_address + "')";
      });
  m.def(
      "config_variables",
      [] {
        nb::list out;
        for (const ConfigVariable& v : config_variables()) {
          nb::dict d;
          d["name"] = std::string(v.name);
          d["section"] = std::string(v.section);
          d["default"] = std::string(v.default_text);
          d["takes"] = v.range();
          d["option"] = v.field.empty() ? nb::none() : nb::cast(std::string(v.field));
          d["doc"] = std::string(v.doc);
          out.append(d);
        }
        return out;
      },
      "Every REMORA_* variable of the library's configuration table, as dicts: name, section, default, takes, "
      "option (the Context keyword that sets it too, or None: environment only), doc. `remora config` prints "
      "the same.");
  m.def("detect_launch", [] { return take(detect_launch()); },
        "Rank, size and store address from the launcher's environment, the first complete set of: "
        "remora (REMORA_RANK, REMORA_WORLD_SIZE, REMORA_LOCAL_RANK), torchrun (RANK, WORLD_SIZE, LOCAL_RANK, "
        "LOCAL_WORLD_SIZE), Open MPI (OMPI_COMM_WORLD_*), MPICH/Hydra (PMI_RANK, PMI_SIZE), Slurm "
        "(SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID). The store: REMORA_STORE, else MASTER_ADDR:MASTER_PORT. "
        "InvalidArgument (naming the variable) for a malformed or inconsistent value, or when no launcher "
        "environment is found.");

  // --- Communicator ---------------------------------------------------------
  nb::class_<CommObj> comm(
      m, "Communicator",
      "A group of ranks running collectives (MPI semantics) and point-to-point messages over a mesh of "
      "endpoints (remora/communicator.h). Every rank must call the same collectives in the same order. "
      "Buffers are arrays or tensors used in place; the element type comes from them (dtype= overrides). "
      "Each collective has a blocking form (returns when this rank's part is done; bounded by the "
      "communicator's timeout) and an i-form returning a Request. A recv/send argument of None means in "
      "place where MPI has MPI_IN_PLACE. Ops: 'sum', 'prod', 'min', 'max', 'avg' (floating types).");
  comm.def("__init__",
           [](CommObj* self, ContextObj& ctx, std::optional<int> rank, std::optional<int> size,
              std::optional<std::string> store, std::optional<double> timeout) {
             CommOptions o;
             o.timeout = to_optional_duration(timeout);
             Context& c = ctx.get();
             Result<std::unique_ptr<Communicator>> r = Status(StatusCode::kInternal, "unset");
             if (rank || size || store) {
               if (!rank || !size || !store) {
                 raise(Status(StatusCode::kInvalidArgument, "rank, size and store go together (or none of them: "
                                                            "the launcher's environment)"));
               }
               LaunchInfo li;
               li.rank = *rank;
               li.size = *size;
               li.local_rank = *rank;
               li.local_size = *size;
               li.launcher = "python";
               li.store_address = *store;
               nb::gil_scoped_release unlocked;
               r = Communicator::init(c, li, o);
             } else {
               nb::gil_scoped_release unlocked;
               r = Communicator::init(c, o);
             }
             new (self) CommObj{take(std::move(r))};
           },
           "context"_a, "rank"_a = nb::none(), "size"_a = nb::none(), "store"_a = nb::none(), "timeout"_a = nb::none(),
           "Joins the group (GIL released). Without rank/size/store: from the launcher's environment "
           "(remora run, torchrun, Open MPI, MPICH, Slurm; remora/launch.h). Rank 0 hosts the rendezvous "
           "store at `store` (\"host:port\"). timeout: seconds bounding every operation and the rendezvous "
           "(None: REMORA_COLL_TIMEOUT_MS).",
           nb::keep_alive<1, 2>());
  comm.def_prop_ro("rank", [](CommObj& c) { return c.get().rank(); })
      .def_prop_ro("size", [](CommObj& c) { return c.get().size(); })
      .def_prop_ro("id", [](CommObj& c) { return c.get().id(); },
                   "Unique among the communicators of this job that share a rank with this one.")
      .def_prop_ro("epoch", [](CommObj& c) { return c.get().epoch(); },
                   "0 for communicators made by init and split from them; a fresh value, the same on every "
                   "member, for each made by shrink (and the splits of that one).")
      .def("failed_ranks",
           [](CommObj& c, double timeout) {
             const Duration d = to_duration(timeout);
             Communicator& cm = c.get();
             nb::gil_scoped_release unlocked;
             return cm.failed_ranks(d);
           },
           "timeout"_a = 5.0,
           "Ranks of this communicator this rank believes dead, ascending (GIL released). While the "
           "communicator is healthy: those whose endpoint ended without a GOODBYE (process killed, host "
           "gone, reset, silent past REMORA_PEER_TIMEOUT_MS). Once it is broken (a collective failed): "
           "each rank whose endpoint ended without its GOODBYE is asked, at the listener it opened at init, "
           "for a handshake, all at once; a refusal or no answer within `timeout` seconds makes it dead, an "
           "answer alive. So after a rank was killed every survivor sees the same list. Local knowledge "
           "still: when failures keep racing, ranks may see different sets; make them agree before "
           "passing a list to shrink. Blocks up to `timeout` when broken.")
      .def("shrink",
           [](CommObj& c, std::vector<int> exclude_ranks, std::optional<double> timeout) {
             CommOptions o;
             o.timeout = to_optional_duration(timeout);
             Result<std::unique_ptr<Communicator>> r = [&] {
               Communicator& cm = c.get();
               nb::gil_scoped_release unlocked;
               return cm.shrink(exclude_ranks, o);
             }();
             return CommObj{take(std::move(r))};
           },
           "exclude_ranks"_a, "timeout"_a = nb::none(),
           "A new communicator of this one's ranks but `exclude_ranks` (the dead, and any the application "
           "wants out), in the spirit of ncclCommShrink (GIL released). Collective over the survivors: "
           "every one calls it with the same list (any order, duplicates ignored); an excluded rank does "
           "not. Works on a broken communicator (after a collective failed because a rank died, see "
           "failed_ranks()) and on a healthy one, which it leaves as it was. Independent of the old "
           "store (works when rank 0 died): the survivors reconnect at the listeners they opened at init. "
           "Ranks are the survivors renumbered 0..m-1 in their old order; a fresh epoch. timeout: seconds "
           "(None: this communicator's timeout), also the new communicator's timeout when set. Errors: "
           "InvalidArgument for a rank outside 0..size-1 or this rank in the list (nothing is sent), or "
           "naming both lists when a survivor passed a different list; PeerFailed when a survivor gave up "
           "or a rank that should survive cannot be reached (exclude it too); Timeout naming the ranks "
           "that never connected. Ends with a barrier over the new communicator. On failure call it again "
           "with the corrected list. Only init's communicators and their splits and shrinks can shrink "
           "(Unsupported otherwise). Not concurrently with this communicator's own operations.",
           nb::keep_alive<0, 1>())
      .def("split",
           [](CommObj& c, int color, int key) -> std::optional<CommObj> {
             Result<std::unique_ptr<Communicator>> r = [&] {
               Communicator& cm = c.get();
               nb::gil_scoped_release unlocked;
               return cm.split(color, key);
             }();
             auto p = take(std::move(r));
             if (!p) return std::nullopt;
             return CommObj{std::move(p)};
           },
           "color"_a, "key"_a = 0,
           "Collective: ranks with the same color form a new communicator ranked by (key, old rank). A "
           "negative color joins none (returns None).",
           nb::keep_alive<0, 1>())
      .def("algorithm",
           [](CommObj& c, const std::string& kind, size_t bytes, std::optional<std::string> algorithm) {
             CollectiveOptions o = coll_options(algorithm, std::nullopt);
             AlgorithmChoice a = c.get().algorithm(take(parse_collective_kind(kind)), bytes, o);
             return std::make_tuple(std::string(a.name), a.steps);
           },
           "kind"_a, "bytes"_a, "algorithm"_a = nb::none(),
           "(name, steps) of the algorithm collective `kind` runs for `bytes`.")
      .def("abort", [](CommObj& c) {
        nb::gil_scoped_release unlocked;
        c.get().abort();
      }, "Breaks the communicator now: outstanding and later operations fail with Aborted; peers see it.")
      .def_prop_ro("failure",
                   [](CommObj& c) -> nb::object {
                     Status s = c.get().failure();
                     if (s.is_ok()) return nb::none();
                     return error_object(s);
                   },
                   "The first failure as a remora.Error instance (not raised), or None.")
      .def("close",
           [](CommObj& c) {
             nb::gil_scoped_release unlocked;
             c.comm.reset();
           },
           "Waits for posted operations (up to the timeout) and leaves the communicator.");

  // Each collective: i<name> (Request) and <name> (blocking).
  using OS = std::optional<std::string>;
  using OD = std::optional<double>;

  comm.def("send",
           [](CommObj& c, nb::handle buf, int peer, uint64_t tag, OS dtype) {
             Arg a = arg(buf, false);
             DataType t = type_of(dtype, {&a});
             size_t n = count_of(a, t);
             finish(post([&] { return c.get().isend(a.ptr(), n, t, peer, Tag{tag}); }, holders_of({&a})), true);
           },
           "buf"_a, "peer"_a, "tag"_a = 0, "dtype"_a = nb::none(), "Sends `buf` to rank `peer` (tag < 2**32).");
  comm.def("recv",
           [](CommObj& c, nb::handle buf, int peer, uint64_t tag, OS dtype) {
             Arg a = arg(buf, true);
             DataType t = type_of(dtype, {&a});
             size_t n = count_of(a, t);
             RequestObj r = post([&] { return c.get().irecv(a.ptr(), n, t, peer, Tag{tag}); }, holders_of({&a}));
             wait_request(r, std::numeric_limits<double>::infinity());
             return r.req.bytes();
           },
           "buf"_a, "peer"_a, "tag"_a = 0, "dtype"_a = nb::none(),
           "Receives from rank `peer` into `buf`; returns the bytes that came.");
  comm.def("isend",
           [](CommObj& c, nb::handle buf, int peer, uint64_t tag, OS dtype) {
             Arg a = arg(buf, false);
             DataType t = type_of(dtype, {&a});
             size_t n = count_of(a, t);
             return post([&] { return c.get().isend(a.ptr(), n, t, peer, Tag{tag}); }, holders_of({&a}));
           },
           "buf"_a, "peer"_a, "tag"_a = 0, "dtype"_a = nb::none(), "Posts a send; returns a Request.");
  comm.def("irecv",
           [](CommObj& c, nb::handle buf, int peer, uint64_t tag, OS dtype) {
             Arg a = arg(buf, true);
             DataType t = type_of(dtype, {&a});
             size_t n = count_of(a, t);
             return post([&] { return c.get().irecv(a.ptr(), n, t, peer, Tag{tag}); }, holders_of({&a}));
           },
           "buf"_a, "peer"_a, "tag"_a = 0, "dtype"_a = nb::none(),
           "Posts a receive; Request.bytes says how many bytes came.");

  both(comm, "barrier",
       +[](CommObj& c, bool blocking, OS algorithm, OD timeout) {
         auto o = coll_options(algorithm, timeout);
         return finish(post([&] { return c.get().ibarrier(o); }, {}), blocking);
       },
       "Returns (completes) once every rank has called it.", nb::kw_only(), "algorithm"_a = nb::none(),
       "timeout"_a = nb::none());
  both(comm, "broadcast",
       +[](CommObj& c, bool blocking, nb::handle buf, int root, OS dtype, OS algorithm, OD timeout) {
         Arg a = arg(buf, true);
         DataType t = type_of(dtype, {&a});
         size_t n = count_of(a, t);
         auto o = coll_options(algorithm, timeout);
         return finish(post([&] { return c.get().ibroadcast(a.ptr(), n, t, root, o); }, holders_of({&a})), blocking);
       },
       "Root's `buf` to every rank's `buf`.", "buf"_a, "root"_a = 0, nb::kw_only(), "dtype"_a = nb::none(),
       "algorithm"_a = nb::none(), "timeout"_a = nb::none());
  both(comm, "reduce",
       +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, const std::string& op, int root, OS dtype,
              OS algorithm, OD timeout) {
         Arg s = arg(send, false), r = arg(recv, true);
         DataType t = type_of(dtype, {&s, &r});
         const bool in_place = r.mem.has_value() && recv.is(send);
         size_t n = count_of(s, t);
         ReduceOp rop = take(parse_reduce_op(op));
         auto o = coll_options(algorithm, timeout);
         return finish(post([&] {
                         return c.get().ireduce(in_place ? kInPlace : s.ptr(), r.ptr(), n, t, rop, root, o);
                       },
                            holders_of({&s, &r})),
                       blocking);
       },
       "op over every rank's `send`, into `recv` at the root (recv may be None elsewhere; pass the same "
       "object as send and recv at the root for in place).",
       "send"_a.none(), "recv"_a.none() = nb::none(), "op"_a = "sum", "root"_a = 0, nb::kw_only(), "dtype"_a = nb::none(),
       "algorithm"_a = nb::none(), "timeout"_a = nb::none());
  both(comm, "allreduce",
       +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, const std::string& op, OS dtype,
              OS algorithm, OD timeout) {
         Arg s = arg(send, false);
         const bool in_place = recv.is_none() || recv.is(send);
         Arg r = in_place ? arg(send, true) : arg(recv, true);
         DataType t = type_of(dtype, {&s, &r});
         size_t n = count_of(r, t);
         ReduceOp rop = take(parse_reduce_op(op));
         auto o = coll_options(algorithm, timeout);
         return finish(post([&] { return c.get().iallreduce(in_place ? kInPlace : s.ptr(), r.ptr(), n, t, rop, o); },
                            holders_of({&s, &r})),
                       blocking);
       },
       "op over every rank's `send`, into every rank's `recv` (None: in place in send); results are "
       "bit-identical on every rank.",
       "send"_a.none(), "recv"_a.none() = nb::none(), "op"_a = "sum", nb::kw_only(), "dtype"_a = nb::none(),
       "algorithm"_a = nb::none(), "timeout"_a = nb::none());
  both(comm, "gather",
       +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, int root, OS dtype, OS algorithm,
              OD timeout) {
         Arg s = arg(send, false), r = arg(recv, true);
         DataType t = type_of(dtype, {&s, &r});
         size_t n = count_of(s, t);
         auto o = coll_options(algorithm, timeout);
         return finish(post([&] { return c.get().igather(s.ptr(), r.ptr(), n, t, root, o); }, holders_of({&s, &r})),
                       blocking);
       },
       "Every rank's `send` (n elements) into the root's `recv`, rank r's at r*n (recv None elsewhere).", "send"_a.none(),
       "recv"_a.none() = nb::none(), "root"_a = 0, nb::kw_only(), "dtype"_a = nb::none(), "algorithm"_a = nb::none(),
       "timeout"_a = nb::none());
  both(comm, "gatherv",
       +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, std::vector<size_t> recv_counts,
              std::vector<size_t> displs, int root, OS dtype, OS algorithm, OD timeout) {
         Arg s = arg(send, false), r = arg(recv, true);
         DataType t = type_of(dtype, {&s, &r});
         size_t n = count_of(s, t);
         auto o = coll_options(algorithm, timeout);
         Holders h = holders_of({&s, &r});
         auto rc = counts(recv_counts, h), ds = counts(displs, h);
         return finish(post([&] { return c.get().igatherv(s.ptr(), n, r.ptr(), *rc, *ds, t, root, o); }, h),
                       blocking);
       },
       "gather with per-rank counts and displacements (in elements; meaningful at the root).", "send"_a.none(), "recv"_a.none(),
       "recv_counts"_a, "displs"_a, "root"_a = 0, nb::kw_only(), "dtype"_a = nb::none(), "algorithm"_a = nb::none(),
       "timeout"_a = nb::none());
  both(comm, "scatter",
       +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, int root, OS dtype, OS algorithm,
              OD timeout) {
         Arg s = arg(send, false), r = arg(recv, true);
         DataType t = type_of(dtype, {&s, &r});
         size_t n = count_of(r, t);
         auto o = coll_options(algorithm, timeout);
         return finish(post([&] { return c.get().iscatter(s.ptr(), r.ptr(), n, t, root, o); }, holders_of({&s, &r})),
                       blocking);
       },
       "The root's `send`, cut into size blocks of len(recv) elements, block r to rank r's `recv` (send None "
       "elsewhere).",
       "send"_a.none(), "recv"_a.none(), "root"_a = 0, nb::kw_only(), "dtype"_a = nb::none(), "algorithm"_a = nb::none(),
       "timeout"_a = nb::none());
  both(comm, "scatterv",
       +[](CommObj& c, bool blocking, nb::handle send, std::vector<size_t> send_counts, std::vector<size_t> displs,
              nb::handle recv, int root, OS dtype, OS algorithm, OD timeout) {
         Arg s = arg(send, false), r = arg(recv, true);
         DataType t = type_of(dtype, {&s, &r});
         size_t n = count_of(r, t);
         auto o = coll_options(algorithm, timeout);
         Holders h = holders_of({&s, &r});
         auto sc = counts(send_counts, h), ds = counts(displs, h);
         return finish(post([&] { return c.get().iscatterv(s.ptr(), *sc, *ds, r.ptr(), n, t, root, o); }, h),
                       blocking);
       },
       "scatter with per-rank counts and displacements (the root's).", "send"_a.none(), "send_counts"_a, "displs"_a,
       "recv"_a.none(), "root"_a = 0, nb::kw_only(), "dtype"_a = nb::none(), "algorithm"_a = nb::none(),
       "timeout"_a = nb::none());
  both(comm, "allgather",
       +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, OS dtype, OS algorithm, OD timeout) {
         Arg s = arg(send, false), r = arg(recv, true);
         DataType t = type_of(dtype, {&s, &r});
         size_t n = s.mem ? count_of(s, t) : count_of(r, t) / static_cast<size_t>(c.get().size());
         auto o = coll_options(algorithm, timeout);
         return finish(post([&] { return c.get().iallgather(s.mem ? s.ptr() : kInPlace, r.ptr(), n, t, o); },
                            holders_of({&s, &r})),
                       blocking);
       },
       "Every rank's `send` into every rank's `recv`, rank r's block at r*len(send). send None: in place "
       "(the rank's block is already in recv).",
       "send"_a.none(), "recv"_a.none(), nb::kw_only(), "dtype"_a = nb::none(), "algorithm"_a = nb::none(),
       "timeout"_a = nb::none());
  both(comm, "allgatherv",
       +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, std::vector<size_t> recv_counts,
              std::vector<size_t> displs, OS dtype, OS algorithm, OD timeout) {
         Arg s = arg(send, false), r = arg(recv, true);
         DataType t = type_of(dtype, {&s, &r});
         size_t n = s.mem ? count_of(s, t) : 0;
         auto o = coll_options(algorithm, timeout);
         Holders h = holders_of({&s, &r});
         auto rc = counts(recv_counts, h), ds = counts(displs, h);
         return finish(
             post([&] { return c.get().iallgatherv(s.mem ? s.ptr() : kInPlace, n, r.ptr(), *rc, *ds, t, o); }, h),
             blocking);
       },
       "allgather with per-rank counts and displacements (send None: in place).", "send"_a.none(), "recv"_a.none(),
       "recv_counts"_a, "displs"_a, nb::kw_only(), "dtype"_a = nb::none(), "algorithm"_a = nb::none(),
       "timeout"_a = nb::none());
  both(comm, "reduce_scatter",
       +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, const std::string& op, OS dtype,
              OS algorithm, OD timeout) {
         Arg s = arg(send, false), r = arg(recv, true);
         DataType t = type_of(dtype, {&s, &r});
         const size_t size = static_cast<size_t>(c.get().size());
         size_t n = s.mem ? count_of(r, t) : count_of(r, t) / size;
         ReduceOp rop = take(parse_reduce_op(op));
         auto o = coll_options(algorithm, timeout);
         return finish(post([&] { return c.get().ireduce_scatter(s.mem ? s.ptr() : kInPlace, r.ptr(), n, t, rop, o); },
                            holders_of({&s, &r})),
                       blocking);
       },
       "op over every rank's `send` (size*len(recv) elements); rank r gets block r in `recv`. send None: in "
       "place (the input is recv, size*n elements; the result is recv's first n).",
       "send"_a.none(), "recv"_a.none(), "op"_a = "sum", nb::kw_only(), "dtype"_a = nb::none(), "algorithm"_a = nb::none(),
       "timeout"_a = nb::none());
  both(comm, "alltoall",
       +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, OS dtype, OS algorithm, OD timeout) {
         Arg s = arg(send, false), r = arg(recv, true);
         DataType t = type_of(dtype, {&s, &r});
         size_t n = count_of(s, t) / static_cast<size_t>(c.get().size());
         auto o = coll_options(algorithm, timeout);
         return finish(post([&] { return c.get().ialltoall(s.ptr(), r.ptr(), n, t, o); }, holders_of({&s, &r})),
                       blocking);
       },
       "Block j of this rank's `send` (len(send)/size elements) to rank j's `recv` at block (this rank).",
       "send"_a.none(), "recv"_a.none(), nb::kw_only(), "dtype"_a = nb::none(), "algorithm"_a = nb::none(),
       "timeout"_a = nb::none());
  both(comm, "alltoallv",
       +[](CommObj& c, bool blocking, nb::handle send, std::vector<size_t> send_counts,
              std::vector<size_t> send_displs, nb::handle recv, std::vector<size_t> recv_counts,
              std::vector<size_t> recv_displs, OS dtype, OS algorithm, OD timeout) {
         Arg s = arg(send, false), r = arg(recv, true);
         DataType t = type_of(dtype, {&s, &r});
         auto o = coll_options(algorithm, timeout);
         Holders h = holders_of({&s, &r});
         auto sc = counts(send_counts, h), sd = counts(send_displs, h), rc = counts(recv_counts, h),
              rd = counts(recv_displs, h);
         return finish(post([&] { return c.get().ialltoallv(s.ptr(), *sc, *sd, r.ptr(), *rc, *rd, t, o); }, h),
                       blocking);
       },
       "alltoall with per-peer counts and displacements on both sides (in elements).", "send"_a.none(), "send_counts"_a,
       "send_displs"_a, "recv"_a.none(), "recv_counts"_a, "recv_displs"_a, nb::kw_only(), "dtype"_a = nb::none(),
       "algorithm"_a = nb::none(), "timeout"_a = nb::none());
  both(comm, "scan",
       +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, const std::string& op, OS dtype, OS algorithm,
           OD timeout) { return scan_impl(c, blocking, false, send, recv, op, dtype, algorithm, timeout); },
       "Inclusive prefix reduction: rank r gets op(send_0 .. send_r) (recv None: in place; no avg).", "send"_a.none(),
       "recv"_a.none() = nb::none(), "op"_a = "sum", nb::kw_only(), "dtype"_a = nb::none(), "algorithm"_a = nb::none(),
       "timeout"_a = nb::none());
  both(comm, "exscan",
       +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, const std::string& op, OS dtype, OS algorithm,
           OD timeout) { return scan_impl(c, blocking, true, send, recv, op, dtype, algorithm, timeout); },
       "Exclusive prefix: rank r > 0 gets op(send_0 .. send_{r-1}); rank 0's recv is untouched (recv None: in "
       "place; no avg).",
       "send"_a.none(), "recv"_a.none() = nb::none(), "op"_a = "sum", nb::kw_only(), "dtype"_a = nb::none(),
       "algorithm"_a = nb::none(), "timeout"_a = nb::none());
}
