// plugin/nixl/abi.cc — libplugin_REMORA.so's face to NIXL: the two exported functions
// (nixl_plugin_init, nixl_plugin_fini), the plugin table, and the engine class NIXL
// calls, each of its methods a thin adapter onto Engine (engine.h): NIXL's descriptor
// lists become LocalDesc/RemoteDesc, its metadata objects wrap our memory objects, its
// request handle wraps a Transfer, and remora's Status becomes NIXL's status (to_nixl).
// The reason for any failure is logged (log.h): NIXL passes on only the code.
//
// Nothing here lets an exception reach NIXL: every entry point catches and answers
// NIXL_ERR_BACKEND.
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine.h"
#include "log.h"
#include "nixl_abi.h"
#include "release.h"
#include "remora/version.h"

namespace remora::nixl_plugin {

namespace {

constexpr const char* kPluginName = "REMORA";

/// NIXL's status for a remora outcome (docs/nixl.md, "Errors").
nixl_status_t to_nixl(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return NIXL_SUCCESS;
    case StatusCode::kInProgress: return NIXL_IN_PROG;
    case StatusCode::kInvalidArgument:
    case StatusCode::kInvalidKey:
    case StatusCode::kOutOfRange:
    case StatusCode::kTruncated: return NIXL_ERR_INVALID_PARAM;
    case StatusCode::kAccessDenied: return NIXL_ERR_NOT_ALLOWED;
    case StatusCode::kUnsupported: return NIXL_ERR_NOT_SUPPORTED;
    case StatusCode::kPeerFailed:
    case StatusCode::kUnreachable:
    case StatusCode::kProtocol:
    case StatusCode::kTimeout: return NIXL_ERR_REMOTE_DISCONNECT;
    case StatusCode::kAborted: return NIXL_ERR_CANCELED;
    default: return NIXL_ERR_BACKEND;  // no resource, device failure, corrupt data, internal
  }
}

/// Logs a failure where it is decided (transfers log their own in engine.cc).
nixl_status_t report(const Status& s, const std::string& what) {
  if (!s.is_ok() && s.code() != StatusCode::kInProgress) log(LogLevel::kWarn, what + ": " + s.to_string());
  return to_nixl(s);
}

template <typename Fn>
nixl_status_t guarded(const char* what, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const std::exception& e) {
    log(LogLevel::kError, std::string(what) + ": " + e.what());
  } catch (...) {
    log(LogLevel::kError, std::string(what) + ": an unknown exception");
  }
  return NIXL_ERR_BACKEND;
}

std::optional<MemKind> kind_of(nixl_mem_t m) {
  if (m == DRAM_SEG) return MemKind::kDram;
  if (m == VRAM_SEG) return MemKind::kVram;
  return std::nullopt;
}

/// A registration of ours, as NIXL holds it.
struct LocalMD final : nixlBackendMD {
  explicit LocalMD(std::unique_ptr<LocalMemory> m) : nixlBackendMD(true), memory(std::move(m)) {}
  std::unique_ptr<LocalMemory> memory;
};
/// A loaded remote registration (or our own, for transfers within the agent).
struct RemoteMD final : nixlBackendMD {
  explicit RemoteMD(std::unique_ptr<RemoteMemory> m) : nixlBackendMD(false), memory(std::move(m)) {}
  std::unique_ptr<RemoteMemory> memory;
};
/// A prepared transfer, as NIXL holds it.
struct XferHandle final : nixlBackendReqH {
  explicit XferHandle(std::unique_ptr<Transfer> t) : transfer(std::move(t)) {}
  std::unique_ptr<Transfer> transfer;
};

class RemoraBackend final : public nixlBackendEngine {
 public:
  explicit RemoraBackend(const nixlBackendInitParams* params) : nixlBackendEngine(params) {
    const nixl_b_params_t& custom = getCustomParams();
    std::map<std::string, std::string> p(custom.begin(), custom.end());
    Result<std::unique_ptr<Engine>> e = Engine::create(localAgent, EngineParams::from(p));
    if (!e) {
      log(LogLevel::kError, "agent \"" + localAgent + "\": " + e.status().to_string());
      initErr = true;
      return;
    }
    engine_ = std::move(*e);
  }

  bool supportsRemote() const override { return true; }
  bool supportsLocal() const override { return true; }
  bool supportsNotif() const override { return true; }
  nixl_mem_list_t getSupportedMems() const override { return {DRAM_SEG, VRAM_SEG}; }

  nixl_status_t registerMem(const nixlBlobDesc& mem, const nixl_mem_t& nixl_mem, nixlBackendMD*& out) override {
    return guarded("registerMem", [&] {
      std::optional<MemKind> kind = kind_of(nixl_mem);
      if (!kind) return report(Status(StatusCode::kUnsupported, "only DRAM and VRAM"), "registerMem");
      Result<std::unique_ptr<LocalMemory>> m = engine_->register_memory(mem.addr, mem.len, mem.devId, *kind);
      if (!m) return report(m.status(), "registerMem");
      out = new LocalMD(std::move(*m));
      return NIXL_SUCCESS;
    });
  }

  nixl_status_t deregisterMem(nixlBackendMD* meta) override {
    return guarded("deregisterMem", [&] {
      auto* md = dynamic_cast<LocalMD*>(meta);
      if (md == nullptr)
        return report(Status(StatusCode::kInvalidArgument, "not a registration of ours"), "deregisterMem");
      delete md;  // the Region goes: every key handed out for it is revoked
      return NIXL_SUCCESS;
    });
  }

  nixl_status_t connect(const std::string& remote_agent) override {
    return guarded("connect", [&] { return report(engine_->connect(remote_agent), "connect"); });
  }
  nixl_status_t disconnect(const std::string& remote_agent) override {
    return guarded("disconnect", [&] { return report(engine_->disconnect(remote_agent), "disconnect"); });
  }

  nixl_status_t unloadMD(nixlBackendMD* input) override {
    return guarded("unloadMD", [&] {
      auto* md = dynamic_cast<RemoteMD*>(input);
      if (md == nullptr) return report(Status(StatusCode::kInvalidArgument, "not loaded by us"), "unloadMD");
      delete md;
      return NIXL_SUCCESS;
    });
  }

  nixl_status_t prepXfer(const nixl_xfer_op_t& operation, const nixl_meta_dlist_t& local,
                         const nixl_meta_dlist_t& remote, const std::string& remote_agent, nixlBackendReqH*& handle,
                         const nixl_opt_b_args_t* /*opt_args*/) const override {
    return guarded("prepXfer", [&] {
      Result<std::unique_ptr<Transfer>> t = prepare(operation, local, remote, remote_agent);
      if (!t) return report(t.status(), "prepXfer with agent \"" + remote_agent + "\"");
      handle = new XferHandle(std::move(*t));
      return NIXL_SUCCESS;
    });
  }

  nixl_status_t postXfer(const nixl_xfer_op_t& operation, const nixl_meta_dlist_t& local,
                         const nixl_meta_dlist_t& remote, const std::string& remote_agent, nixlBackendReqH*& handle,
                         const nixl_opt_b_args_t* opt_args) const override {
    return guarded("postXfer", [&] {
      if (handle == nullptr) {  // NIXL prepares first; a caller that did not gets it done here
        nixl_status_t s = prepXfer(operation, local, remote, remote_agent, handle, opt_args);
        if (s != NIXL_SUCCESS) return s;
      }
      auto* h = dynamic_cast<XferHandle*>(handle);
      if (h == nullptr) return report(Status(StatusCode::kInvalidArgument, "not a handle of ours"), "postXfer");
      if (h->transfer->in_flight()) return NIXL_ERR_REPOST_ACTIVE;
      std::optional<std::string> notification;
      if (opt_args != nullptr && opt_args->hasNotif) notification = opt_args->notifMsg;
      return to_nixl(engine_->post(*h->transfer, notification));
    });
  }

  nixl_status_t checkXfer(nixlBackendReqH* handle) const override {
    return guarded("checkXfer", [&] {
      auto* h = dynamic_cast<XferHandle*>(handle);
      if (h == nullptr) return report(Status(StatusCode::kInvalidArgument, "not a handle of ours"), "checkXfer");
      return to_nixl(engine_->check(*h->transfer));
    });
  }

  nixl_status_t releaseReqH(nixlBackendReqH* handle) const override {
    return guarded("releaseReqH", [&] {
      auto* h = dynamic_cast<XferHandle*>(handle);
      if (h == nullptr) return report(Status(StatusCode::kInvalidArgument, "not a handle of ours"), "releaseReqH");
      engine_->release(*h->transfer);
      delete h;
      return NIXL_SUCCESS;
    });
  }

  nixl_status_t getPublicData(const nixlBackendMD* meta, std::string& str) const override {
    return guarded("getPublicData", [&] {
      auto* md = dynamic_cast<const LocalMD*>(meta);
      if (md == nullptr)
        return report(Status(StatusCode::kInvalidArgument, "not a registration of ours"), "getPublicData");
      str = engine_->public_data(*md->memory);
      return NIXL_SUCCESS;
    });
  }

  nixl_status_t getConnInfo(std::string& str) const override {
    return guarded("getConnInfo", [&] {
      str = engine_->conn_info();
      return NIXL_SUCCESS;
    });
  }

  nixl_status_t loadRemoteConnInfo(const std::string& remote_agent, const std::string& remote_conn_info) override {
    return guarded("loadRemoteConnInfo", [&] {
      return report(engine_->load_conn_info(remote_agent, remote_conn_info), "loadRemoteConnInfo");
    });
  }

  nixl_status_t loadRemoteMD(const nixlBlobDesc& input, const nixl_mem_t& nixl_mem, const std::string& remote_agent,
                             nixlBackendMD*& output) override {
    return guarded("loadRemoteMD", [&] {
      std::optional<MemKind> kind = kind_of(nixl_mem);
      if (!kind) return report(Status(StatusCode::kUnsupported, "only DRAM and VRAM"), "loadRemoteMD");
      Result<std::unique_ptr<RemoteMemory>> m =
          engine_->load_remote(remote_agent, input.addr, input.len, *kind, input.metaInfo);
      if (!m) return report(m.status(), "loadRemoteMD");
      output = new RemoteMD(std::move(*m));
      return NIXL_SUCCESS;
    });
  }

  nixl_status_t loadLocalMD(nixlBackendMD* input, nixlBackendMD*& output) override {
    return guarded("loadLocalMD", [&] {
      auto* md = dynamic_cast<LocalMD*>(input);
      if (md == nullptr)
        return report(Status(StatusCode::kInvalidArgument, "not a registration of ours"), "loadLocalMD");
      output = new RemoteMD(engine_->load_local(*md->memory));
      return NIXL_SUCCESS;
    });
  }

  nixl_status_t getNotifs(notif_list_t& notif_list) override {
    return guarded("getNotifs", [&] {
      engine_->take_notifications(notif_list);
      return NIXL_SUCCESS;
    });
  }

  nixl_status_t genNotif(const std::string& remote_agent, const std::string& msg) const override {
    return guarded("genNotif", [&] { return report(engine_->notify(remote_agent, msg), "genNotif"); });
  }

 private:
  Result<std::unique_ptr<Transfer>> prepare(nixl_xfer_op_t operation, const nixl_meta_dlist_t& local,
                                            const nixl_meta_dlist_t& remote, const std::string& agent) const {
    if (operation != NIXL_READ && operation != NIXL_WRITE) {
      return Status(StatusCode::kInvalidArgument, "an operation that is neither READ nor WRITE");
    }
    std::optional<MemKind> local_kind = kind_of(local.getType());
    std::optional<MemKind> remote_kind = kind_of(remote.getType());
    if (!local_kind || !remote_kind) return Status(StatusCode::kUnsupported, "only DRAM and VRAM lists");
    std::vector<LocalDesc> l(static_cast<size_t>(std::max(0, local.descCount())));
    std::vector<RemoteDesc> r(static_cast<size_t>(std::max(0, remote.descCount())));
    for (size_t i = 0; i < l.size(); ++i) {
      const nixlMetaDesc& d = local[i];
      auto* md = dynamic_cast<const LocalMD*>(d.metadataP);
      l[i] = LocalDesc{.addr = d.addr, .len = d.len, .memory = md != nullptr ? md->memory.get() : nullptr};
    }
    for (size_t i = 0; i < r.size(); ++i) {
      const nixlMetaDesc& d = remote[i];
      auto* md = dynamic_cast<const RemoteMD*>(d.metadataP);
      r[i] = RemoteDesc{.addr = d.addr, .len = d.len, .memory = md != nullptr ? md->memory.get() : nullptr};
    }
    return engine_->prepare(operation == NIXL_WRITE ? Direction::kWrite : Direction::kRead, *local_kind, l,
                            *remote_kind, r, agent);
  }

  std::unique_ptr<Engine> engine_;
};

// --- the plugin table ------------------------------------------------------------------------

nixlBackendEngine* create_engine(const nixlBackendInitParams* params) {
  try {
    return new RemoraBackend(params);
  } catch (const std::exception& e) {
    log(LogLevel::kError, std::string("creating the engine: ") + e.what());
  } catch (...) {
    log(LogLevel::kError, "creating the engine: an unknown exception");
  }
  return nullptr;
}

void destroy_engine(nixlBackendEngine* engine) { delete engine; }

const char* plugin_name() { return kPluginName; }
const char* plugin_version() { return remora::version_string(); }

nixl_b_params_t backend_options() {
  // Empty values: the environment's (REMORA_NIXL_ADDRESS, REMORA_NIXL_IFNAME) or the default.
  return {{"address", ""}, {"ifname", ""}};
}

nixl_mem_list_t backend_mems() { return {DRAM_SEG, VRAM_SEG}; }

nixlBackendPlugin g_plugin = {kNixlPluginApiVersion, create_engine,   destroy_engine, plugin_name,
                              plugin_version,        backend_options, backend_mems};

}  // namespace

}  // namespace remora::nixl_plugin

extern "C" {

__attribute__((visibility("default"))) nixlBackendPlugin* nixl_plugin_init() {
  using namespace remora::nixl_plugin;
  try {
    remora::Result<NixlRelease> release = detect_nixl_release();
    if (!release) {
      log(remora::LogLevel::kError, release.status().message());
      return nullptr;
    }
    log(remora::LogLevel::kInfo, "NIXL " + release->version + " (" + release->library + ", from " + release->evidence +
                                     "): plugin " + kPluginName + " " + remora::version_string());
    return &g_plugin;
  } catch (...) {
    return nullptr;
  }
}

__attribute__((visibility("default"))) void nixl_plugin_fini() {}

}  // extern "C"
