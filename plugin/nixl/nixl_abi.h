// plugin/nixl/nixl_abi.h — our own declarations of what a NIXL backend plugin must match:
// the C++ classes the NIXL agent (libnixl.so) hands to a plugin or gets back from it.
//
// NIXL ships no headers in its wheels, and its plugin interface is a C++ class whose
// layout is the ABI: the agent calls the engine through its vtable, reads the base
// class's members through inline accessors (getInitErr() at a fixed offset), and the
// plugin reads descriptor lists through NIXL's inline accessors. NIXL_PLUGIN_API_VERSION
// (1) has not changed while the engine class did, so this file pins one layout and
// release.h names the NIXL releases it was verified against (docs/nixl.md, "Releases").
//
// Written from NIXL's documented interface (docs/BackendGuide.md) and the declarations
// in its source at release/1.4.1 and main of 2026-08-21 (identical for everything here),
// then checked against the binaries of the nixl-cu12 1.5.1 wheel (no source of 1.5.x is
// public to us): the vtable of nixlBackendEngine in libplugin_UCX.so (27 slots, same
// order and signatures), the base constructor inlined into libplugin_POSIX.so (member
// offsets below), libnixl.so's check of initErr at +0xa0 after create_engine, and the
// UCX plugin's reads of descriptor lists (vector at +0x10, 32-byte elements) and of
// hasNotif at +0x20 of the optional arguments. The wheels of 1.4.1 and 1.5.0 read the
// same (release.cc). tests/nixl/test_plugin.py compares our vtable with the installed
// wheel's on every run.
//
// The names are NIXL's, at global scope, so that the demangled signatures of our
// overrides read exactly like NIXL's own (which is what the ABI test compares). The
// plugin exports nothing but nixl_plugin_init/nixl_plugin_fini (exports.map), so none
// of these names can clash with libnixl.so's. Only members the plugin or the agent
// touch are given meaning; the rest exist to keep offsets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

// --- enums and aliases (nixl_types.h) ---------------------------------------------------

enum nixl_mem_t { DRAM_SEG, VRAM_SEG, BLK_SEG, OBJ_SEG, FILE_SEG };

enum nixl_xfer_op_t { NIXL_READ, NIXL_WRITE };

enum nixl_status_t {
  NIXL_IN_PROG = 1,
  NIXL_SUCCESS = 0,
  NIXL_ERR_NOT_POSTED = -1,
  NIXL_ERR_INVALID_PARAM = -2,
  NIXL_ERR_BACKEND = -3,
  NIXL_ERR_NOT_FOUND = -4,
  NIXL_ERR_MISMATCH = -5,
  NIXL_ERR_NOT_ALLOWED = -6,
  NIXL_ERR_REPOST_ACTIVE = -7,
  NIXL_ERR_UNKNOWN = -8,
  NIXL_ERR_NOT_SUPPORTED = -9,
  NIXL_ERR_REMOTE_DISCONNECT = -10,
  NIXL_ERR_CANCELED = -11,
  NIXL_ERR_NO_TELEMETRY = -12,
};

enum class nixl_thread_sync_t { NIXL_THREAD_SYNC_NONE, NIXL_THREAD_SYNC_STRICT, NIXL_THREAD_SYNC_RW };

enum class nixl_cost_t { ANALYTICAL_BACKEND = 0 };

using nixl_backend_t = std::string;
using nixl_blob_t = std::string;  // bytes, not text: may hold '\0'
using nixl_mem_list_t = std::vector<nixl_mem_t>;
using nixl_b_params_t = std::unordered_map<std::string, std::string>;
using nixl_query_resp_t = std::optional<nixl_b_params_t>;
using nixlMemViewH = void*;
/// getNotifs' output: (sending agent, message) pairs, appended to.
using notif_list_t = std::vector<std::pair<std::string, std::string>>;

/// The agent-level optional arguments; only ever passed through a pointer we ignore
/// (estimateXferCost), so never completed here.
struct nixlAgentOptionalArgs;

// --- descriptors (nixl_descriptors.h, backend_aux.h) ------------------------------------

/// One contiguous piece of memory: address, length, device (GPU ordinal for VRAM, 0 or
/// anything for DRAM). NIXL's class has constructors and helpers defined in libnixl;
/// the plugin only reads these.
class nixlBasicDesc {
 public:
  uintptr_t addr;
  size_t len;
  uint64_t devId;
};

/// A registration descriptor: the piece plus a blob (for a remote registration: that
/// side's getPublicData()).
class nixlBlobDesc : public nixlBasicDesc {
 public:
  nixl_blob_t metaInfo;
};

/// What registerMem/loadRemoteMD/loadLocalMD return: polymorphic, destroyed by the
/// plugin only (deregisterMem, unloadMD); the agent never deletes one.
class nixlBackendMD {
 protected:
  bool isPrivateMD;

 public:
  explicit nixlBackendMD(bool is_private) : isPrivateMD(is_private) {}
  virtual ~nixlBackendMD() {}
};

/// A transfer descriptor: the piece plus the plugin's own metadata object for the
/// registration it lies in (local) or the loaded remote registration (remote).
class nixlMetaDesc : public nixlBasicDesc {
 public:
  nixlBackendMD* metadataP;
};

/// Only named by a prepMemView overload the plugin does not implement.
struct nixlRemoteMetaDesc : public nixlMetaDesc {
  std::string remoteAgent;
};

/// A list of descriptors of one memory type. NIXL's template has more virtual members
/// (resize, addDesc, getIndex) defined in libnixl; the plugin reads the list through
/// these inline accessors only, as NIXL's own plugins do, and never copies, builds or
/// destroys one.
template <class T>
class nixlDescList {
 protected:
  nixl_mem_t type;
  std::vector<T> descs;

  nixlDescList() = default;  // for tests' own lists; NIXL builds the real ones

 public:
  nixlDescList(const nixlDescList&) = delete;
  nixlDescList& operator=(const nixlDescList&) = delete;
  virtual ~nixlDescList() = default;

  nixl_mem_t getType() const { return type; }
  int descCount() const { return static_cast<int>(descs.size()); }
  const T& operator[](size_t index) const { return descs[index]; }
};

using nixl_meta_dlist_t = nixlDescList<nixlMetaDesc>;
using nixl_remote_meta_dlist_t = nixlDescList<nixlRemoteMetaDesc>;
using nixl_reg_dlist_t = nixlDescList<nixlBlobDesc>;

// --- backend plumbing (backend_aux.h) ------------------------------------------------------

/// postXfer/prepXfer's optional arguments: one notification after the whole list.
struct nixlBackendOptionalArgs {
  nixl_blob_t notifMsg;
  bool hasNotif = false;
  nixl_blob_t customParam;
};
using nixl_opt_b_args_t = nixlBackendOptionalArgs;

/// What the agent passes to create_engine.
class nixlBackendInitParams {
 public:
  std::string localAgent;
  nixl_backend_t type;
  nixl_b_params_t* customParams = nullptr;
  bool enableProgTh = false;
  uint64_t pthrDelay = 0;  // nixlTime::us_t
  nixl_thread_sync_t syncMode;
  bool enableTelemetry_ = false;
};

/// A transfer request handle: polymorphic, released by the plugin only (releaseReqH).
class nixlBackendReqH {
 public:
  nixlBackendReqH() {}
  virtual ~nixlBackendReqH() {}
};

/// Stands for NIXL's telemetry event in the base class's vector, which stays empty:
/// events are added only by the base's inline addTelemetryEvent, which this plugin never
/// calls (the agent moves the empty vector out through the inline getTelemetryEvents).
struct nixlUnusedTelemetryEvent {
  uint64_t unused[4];
};

// --- the engine (backend_engine.h) --------------------------------------------------------

/// NIXL's base class of a backend engine. The data members and their order are the
/// layout the agent's inline accessors read; the virtual functions, in this order, are
/// the vtable it calls (slot 0/1: destructor, 2 supportsRemote ... 26 estimateXferCost).
class nixlBackendEngine {
 private:
  nixl_backend_t backendType;
  nixl_b_params_t customParams;
  std::vector<nixlUnusedTelemetryEvent> telemetryEvents_;
  std::mutex telemetryEventsMutex_;

 protected:
  bool initErr = false;  // read by the agent right after create_engine
  const std::string localAgent;
  const bool enableTelemetry_;

 public:
  explicit nixlBackendEngine(const nixlBackendInitParams* init_params)
      : backendType(init_params->type),
        customParams(init_params->customParams != nullptr ? *init_params->customParams : nixl_b_params_t{}),
        localAgent(init_params->localAgent),
        enableTelemetry_(init_params->enableTelemetry_) {}
  nixlBackendEngine(const nixlBackendEngine&) = delete;
  nixlBackendEngine& operator=(const nixlBackendEngine&) = delete;

  virtual ~nixlBackendEngine() = default;

  bool getInitErr() const noexcept { return initErr; }
  const nixl_backend_t& getType() const noexcept { return backendType; }
  const nixl_b_params_t& getCustomParams() const noexcept { return customParams; }

  virtual bool supportsRemote() const = 0;
  virtual bool supportsLocal() const = 0;
  virtual bool supportsNotif() const = 0;
  virtual nixl_mem_list_t getSupportedMems() const = 0;

  virtual nixl_status_t registerMem(const nixlBlobDesc& mem, const nixl_mem_t& nixl_mem, nixlBackendMD*& out) = 0;
  virtual nixl_status_t deregisterMem(nixlBackendMD* meta) = 0;

  virtual nixl_status_t connect(const std::string& remote_agent) = 0;
  virtual nixl_status_t disconnect(const std::string& remote_agent) = 0;

  virtual nixl_status_t unloadMD(nixlBackendMD* input) = 0;

  virtual nixl_status_t prepXfer(const nixl_xfer_op_t& operation, const nixl_meta_dlist_t& local,
                                 const nixl_meta_dlist_t& remote, const std::string& remote_agent,
                                 nixlBackendReqH*& handle, const nixl_opt_b_args_t* opt_args = nullptr) const = 0;
  virtual nixl_status_t postXfer(const nixl_xfer_op_t& operation, const nixl_meta_dlist_t& local,
                                 const nixl_meta_dlist_t& remote, const std::string& remote_agent,
                                 nixlBackendReqH*& handle, const nixl_opt_b_args_t* opt_args = nullptr) const = 0;
  virtual nixl_status_t checkXfer(nixlBackendReqH* handle) const = 0;
  virtual nixl_status_t releaseReqH(nixlBackendReqH* handle) const = 0;

  virtual nixl_status_t prepMemView(const nixl_remote_meta_dlist_t&, nixlMemViewH&,
                                    const nixl_opt_b_args_t* = nullptr) const {
    return NIXL_ERR_NOT_SUPPORTED;
  }
  virtual nixl_status_t prepMemView(const nixl_meta_dlist_t&, nixlMemViewH&, const nixl_opt_b_args_t* = nullptr) const {
    return NIXL_ERR_NOT_SUPPORTED;
  }
  virtual void releaseMemView(nixlMemViewH) const {}

  virtual nixl_status_t getPublicData(const nixlBackendMD*, std::string&) const { return NIXL_ERR_BACKEND; }
  virtual nixl_status_t getConnInfo(std::string&) const { return NIXL_ERR_BACKEND; }
  virtual nixl_status_t loadRemoteConnInfo(const std::string&, const std::string&) { return NIXL_ERR_BACKEND; }
  virtual nixl_status_t loadRemoteMD(const nixlBlobDesc&, const nixl_mem_t&, const std::string&, nixlBackendMD*&) {
    return NIXL_ERR_BACKEND;
  }
  virtual nixl_status_t loadLocalMD(nixlBackendMD*, nixlBackendMD*&) { return NIXL_ERR_BACKEND; }

  virtual nixl_status_t getNotifs(notif_list_t&) { return NIXL_ERR_BACKEND; }
  virtual nixl_status_t genNotif(const std::string&, const std::string&) const { return NIXL_ERR_BACKEND; }

  virtual nixl_status_t queryMem(const nixl_reg_dlist_t&, std::vector<nixl_query_resp_t>&) const {
    return NIXL_ERR_NOT_SUPPORTED;
  }
  virtual nixl_status_t estimateXferCost(const nixl_xfer_op_t&, const nixl_meta_dlist_t&, const nixl_meta_dlist_t&,
                                         const std::string&, nixlBackendReqH* const&, std::chrono::microseconds&,
                                         std::chrono::microseconds&, nixl_cost_t&,
                                         const nixlAgentOptionalArgs* = nullptr) const {
    return NIXL_ERR_NOT_SUPPORTED;
  }
};

// --- the plugin table (backend_plugin.h) ------------------------------------------------------

/// NIXL_PLUGIN_API_VERSION: what nixl_plugin_init's table must say.
inline constexpr int kNixlPluginApiVersion = 1;

/// What nixl_plugin_init returns; the agent keeps the pointer for the process's life.
class nixlBackendPlugin {
 public:
  int api_version;
  nixlBackendEngine* (*create_engine)(const nixlBackendInitParams* init_params);
  void (*destroy_engine)(nixlBackendEngine* engine);
  const char* (*get_plugin_name)();
  const char* (*get_plugin_version)();
  nixl_b_params_t (*get_backend_options)();
  nixl_mem_list_t (*get_backend_mems)();
};

// --- the layout, as verified (x86-64 / aarch64 LP64, libstdc++'s C++11 ABI) --------------------

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
static_assert(sizeof(std::string) == 32 && sizeof(nixl_b_params_t) == 56 && sizeof(std::mutex) == 40,
              "libstdc++ with the C++11 string ABI on LP64, as NIXL's wheels are built");
static_assert(sizeof(nixlBasicDesc) == 24);
static_assert(sizeof(nixlMetaDesc) == 32 && offsetof(nixlMetaDesc, metadataP) == 0x18);
static_assert(sizeof(nixlBlobDesc) == 56 && offsetof(nixlBlobDesc, metaInfo) == 0x18);
static_assert(sizeof(nixlDescList<nixlMetaDesc>) == 40);
static_assert(sizeof(nixlBackendOptionalArgs) == 0x48 && offsetof(nixlBackendOptionalArgs, hasNotif) == 0x20 &&
              offsetof(nixlBackendOptionalArgs, customParam) == 0x28);
static_assert(offsetof(nixlBackendInitParams, type) == 0x20 && offsetof(nixlBackendInitParams, customParams) == 0x40 &&
              offsetof(nixlBackendInitParams, enableProgTh) == 0x48 &&
              offsetof(nixlBackendInitParams, pthrDelay) == 0x50 && offsetof(nixlBackendInitParams, syncMode) == 0x58 &&
              offsetof(nixlBackendInitParams, enableTelemetry_) == 0x5c && sizeof(nixlBackendInitParams) == 0x60);
static_assert(sizeof(nixlBackendEngine) == 0xd0, "the base class's size: derived members start at +0xd0");
static_assert(sizeof(nixlBackendPlugin) == 0x38 && offsetof(nixlBackendPlugin, get_backend_mems) == 0x30);
#pragma GCC diagnostic pop

namespace remora::nixl_plugin {
/// Offsets inside nixlBackendEngine, private there; checked by tests/nixl/abi_test.cc
/// on a constructed engine (offsetof cannot name private members).
inline constexpr size_t kInitErrOffset = 0xa0;
inline constexpr size_t kLocalAgentOffset = 0xa8;
inline constexpr size_t kEnableTelemetryOffset = 0xc8;
}  // namespace remora::nixl_plugin
