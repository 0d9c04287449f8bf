// python/src/bind_context.cc — remora.Context, the root object, and its configuration:
// the keyword arguments of Context() and the dict of config() come from the library's
// configuration table (config_variables(), remora/config.h), one row per option, as do
// Context's docstring and remora.config_variables(); the enums and AuthKey those
// options take (Access, PinMode, LogLevel, DevicePathMode, ChecksumMode, AuthKey).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include "binding.h"

namespace remora::python {

namespace {

using namespace nb::literals;

// ---------------------------------------------------------------------------
// Context's keyword arguments and config() from the library's table
// ---------------------------------------------------------------------------

/// The configuration table's row of the Context keyword `field`, or nullptr.
const ConfigVariable* option_row(std::string_view field) {
  for (const ConfigVariable& v : config_variables()) {
    if (v.field == field) return &v;
  }
  return nullptr;
}

/// Every Context keyword of the table, comma-separated (for TypeError's message).
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

/// Context()'s keyword arguments as ContextOptions: None leaves an option unset, an
/// AuthKey is auth_key itself; TypeError for a name the table does not have.
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
  if (v.field == "encrypt") return nb::cast(static_cast<EncryptMode>(n));
  if (v.field == "log_level") return nb::cast(static_cast<LogLevel>(n));
  return nb::str(std::string(v.choices[n]).c_str());
}

/// Context.config(): every option of the table by its keyword, the environment-only
/// fields of Config, and auth_key (an AuthKey or None).
nb::dict config_dict(const Config& k) {
  nb::dict d;
  for (const ConfigVariable& v : config_variables()) {
    if (v.field.empty() || v.field == "auth_key") continue;
    const ConfigValue value = take(config_value(k, v.field));
    if (const auto* flag = std::get_if<bool>(&value)) {
      d[std::string(v.field).c_str()] = *flag;
    } else if (const auto* n = std::get_if<uint64_t>(&value)) {
      d[std::string(v.field).c_str()] = v.kind == ConfigKind::kChoice ? choice_object(v, *n) : nb::int_(*n);
    } else if (const auto* text = std::get_if<std::string>(&value)) {
      d[std::string(v.field).c_str()] = *text;
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
        "the package's enum (PinMode, DevicePathMode, ChecksumMode, EncryptMode, LogLevel); InvalidArgument for a "
        "value out "
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

// ---------------------------------------------------------------------------
// binders
// ---------------------------------------------------------------------------

const char* const kAccessDoc =
    "Access rights of a registered region. Remote rights are what a RemoteKey can grant "
    "(remora/types.h). Combine with |.";

/// The values Context's options and Context.register take: Access, PinMode, LogLevel,
/// DevicePathMode, ChecksumMode, AuthKey.
void bind_option_types(nb::module_& m) {
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

  nb::enum_<EncryptMode>(m, "EncryptMode",
                         "Encryption in flight (REMORA_ENCRYPT, docs/encryption.md). ON: every byte of every "
                         "connection sealed (AEAD) under keys derived per connection and direction from the job "
                         "secret, AES-256-GCM where both CPUs have AES instructions, else ChaCha20-Poly1305; "
                         "AES256GCM and CHACHA20POLY1305 name the cipher. Needs auth_key; both sides must agree "
                         "(a differing peer is refused at connect).")
      .value("OFF", EncryptMode::kOff)
      .value("ON", EncryptMode::kOn)
      .value("AES256GCM", EncryptMode::kAes256Gcm)
      .value("CHACHA20POLY1305", EncryptMode::kChacha20Poly1305)
      .value("AEGIS256", EncryptMode::kAegis256)
      .value("AEGIS128L", EncryptMode::kAegis128l);

  nb::class_<AuthKey>(m, "AuthKey",
                      "The key every handshake proves knowledge of when a job secret is configured "
                      "(REMORA_AUTH_KEY or REMORA_AUTH_KEY_FILE; docs/configuration.md): 32 bytes derived from "
                      "the secret (BLAKE2b under a fixed label), never the secret itself. Endpoints and the "
                      "rendezvous store then authenticate both ways by an HMAC challenge-response over fresh "
                      "nonces (docs/protocol.md, \"Authentication\"); a peer that cannot prove it holds the same "
                      "secret gets no endpoint and no store access (AccessDenied on its side).")
      .def_static(
          "from_secret",
          [](nb::bytes secret) {
            return take(AuthKey::from_secret(std::string_view(static_cast<const char*>(secret.data()), secret.size())));
          },
          "secret"_a,
          "Derives the key from a shared secret (bytes; encode a str first). InvalidArgument when it "
          "is empty.")
      .def_static(
          "from_env", [] { return take(AuthKey::from_env()); },
          "The key the environment names: REMORA_AUTH_KEY (the secret itself) or REMORA_AUTH_KEY_FILE "
          "(a file holding it; one trailing newline is dropped). Neither set: None (no "
          "authentication). InvalidArgument, naming the variable, when both are set, when the secret "
          "is empty, or when the file cannot be read.")
      .def_prop_ro(
          "bytes", [](const AuthKey& k) { return to_bytes(k.bytes); }, "The 32 derived bytes.")
      .def("__eq__", [](const AuthKey& a, const AuthKey& b) { return a.bytes == b.bytes; })
      .def("__repr__", [](const AuthKey&) { return std::string("AuthKey(<32 bytes>)"); });
}

/// Context: made from its keywords (context_options), listen, connect, register,
/// add_memory, config, close.
void bind_context_class(nb::module_& m) {
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
            Memory m = memory_of(obj, writable);
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
}

/// config_variables(): every REMORA_* variable of the table, as dicts.
void bind_config_variables(nb::module_& m) {
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
}

}  // namespace

ContextObj::ContextObj(std::unique_ptr<Context> c) : ctx(std::move(c)) { attach_cuda(*this); }

ContextObj::~ContextObj() { detach_cuda(*this); }

void bind_context(nb::module_& m) {
  bind_option_types(m);
  bind_context_class(m);
  bind_config_variables(m);
}

}  // namespace remora::python
