// plugin/nixl/engine.h — the NIXL backend over remora, in remora's terms (no NIXL type
// appears here; abi.cc adapts NIXL's engine class to it).
//
//   Engine        one per NIXL backend instance: a remora Context, a Listener whose
//                 addresses are the connection info, a Peer per remote agent, and the
//                 endpoints other agents opened to it, on which their notifications come
//   LocalMemory   a registration: a remora Region granting remote reads and writes;
//                 its public data is the Region's RemoteKey (wire.h)
//   RemoteMemory  another agent's registration, loaded from its public data
//   Transfer      a prepared descriptor list: one remora put_batch (WRITE) or get_batch
//                 (READ), then at most one notification message
//
// Completion and ordering: a WRITE completes when every byte is placed at the target
// (remora's remote completion), a READ when every byte is here; the notification is
// sent only then, on the same endpoint, so the target sees it after the whole list is
// visible in its memory. The target's remora progress thread checks every key, range
// and right before placing or reading a byte: a forged, stale (deregistered) or
// out-of-range remote registration is refused and nothing is written.
//
// Nothing on the data path blocks: post() starts a connection if there is none and
// returns kInProgress; check() drives progress once. Releasing a transfer in flight
// closes the endpoint it runs on (remora then completes every request on it, and never
// touches their memory again); the next transfer to that agent connects again, and
// other transfers that were in flight on it end with kAborted (NIXL_ERR_CANCELED).
//
// Thread safety: every Engine method may be called from any thread; one Transfer is
// used by one thread at a time (as NIXL does with a request handle).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "peer.h"
#include "remora/context.h"
#include "remora/endpoint.h"
#include "remora/memory.h"
#include "remora/request.h"
#include "remora/status.h"
#include "wire.h"

namespace remora::nixl_plugin {

enum class Direction : uint8_t { kRead, kWrite };

/// A registration of this agent's memory.
class LocalMemory {
 public:
  uintptr_t addr() const { return addr_; }
  size_t size() const { return size_; }
  uint64_t device() const { return device_; }
  MemKind kind() const { return kind_; }
  const Region& region() const { return region_; }

 private:
  friend class Engine;
  LocalMemory(uintptr_t addr, size_t size, uint64_t device, MemKind kind, Region region)
      : addr_(addr), size_(size), device_(device), kind_(kind), region_(std::move(region)) {}
  uintptr_t addr_;
  size_t size_;
  uint64_t device_;
  MemKind kind_;
  Region region_;  // deregistered (its keys revoked) when this is destroyed
};

/// Another agent's registration (or this agent's own, for transfers within it).
class RemoteMemory {
 public:
  const std::string& agent() const { return agent_; }
  uint64_t base() const { return data_.base; }
  uint64_t size() const { return data_.key.length; }
  MemKind kind() const { return data_.kind; }
  const RemoteKey& key() const { return data_.key; }

 private:
  friend class Engine;
  RemoteMemory(std::string agent, PublicData data) : agent_(std::move(agent)), data_(data) {}
  std::string agent_;
  PublicData data_;
};

/// One descriptor of a transfer's local side: [addr, addr + len) inside `memory`.
struct LocalDesc {
  uintptr_t addr = 0;
  size_t len = 0;
  const LocalMemory* memory = nullptr;
};
/// One descriptor of a transfer's remote side: [addr, addr + len) of the agent's
/// address space, inside `memory`.
struct RemoteDesc {
  uintptr_t addr = 0;
  size_t len = 0;
  const RemoteMemory* memory = nullptr;
};

/// A prepared transfer; may be posted again once it has ended (ok or failed).
class Transfer {
 public:
  ~Transfer();
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;

  Direction direction() const { return direction_; }
  const std::string& agent() const { return peer_->agent(); }
  /// Remora operations it posts (after merging descriptors that touch end to end on
  /// both sides) and the bytes they move.
  size_t operations() const { return items_.size(); }
  uint64_t bytes() const { return bytes_; }
  /// Posted and not yet ended.
  bool in_flight() const {
    return state_ == State::kConnecting || state_ == State::kMoving || state_ == State::kNotifying;
  }

 private:
  friend class Engine;
  enum class State { kPrepared, kConnecting, kMoving, kNotifying, kDone, kFailed };
  Transfer(Direction direction, std::shared_ptr<Peer> peer, std::vector<TransferItem> items, uint64_t bytes,
           std::string local_agent);
  /// Moves the state machine as far as it goes without waiting.
  Status advance();
  Status fail(Status why);
  /// Called when released: cancels what is in flight (see the file comment).
  void abandon();

  const Direction direction_;
  const std::shared_ptr<Peer> peer_;
  const std::vector<TransferItem> items_;
  const uint64_t bytes_;
  const std::string local_agent_;  // names this agent in its notifications
  State state_ = State::kPrepared;
  std::shared_ptr<Endpoint> ep_;
  Request data_;
  std::shared_ptr<const std::vector<std::byte>> notification_;  // the encoded message, when asked for
  Request notification_send_;
  Status failure_;
};

/// What configures an engine: NIXL's backend parameters, else the environment.
struct EngineParams {
  /// Where to listen, "host:port" (REMORA_NIXL_ADDRESS; default "0.0.0.0:0": every
  /// interface, a port the kernel picks). A wildcard host advertises the address of
  /// every interface that is up (loopback last), or of those named in `interfaces`.
  std::string address;
  /// Comma-separated interface names whose addresses are advertised (REMORA_NIXL_IFNAME;
  /// default: all). Only with a wildcard address.
  std::string interfaces;

  /// From NIXL's parameters ("address", "ifname"), falling back to the environment.
  static EngineParams from(const std::map<std::string, std::string>& nixl_params);
};

class Engine {
 public:
  /// A remora Context configured by the environment (REMORA_*), listening as `params`
  /// says. Errors: the Context's (a malformed REMORA_* variable), the listener's.
  static Result<std::unique_ptr<Engine>> create(std::string local_agent, const EngineParams& params);
  /// Stops accepting, closes every endpoint (orderly), joins its threads.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const std::string& local_agent() const { return local_agent_; }
  /// encode_conn_info() of this engine.
  const std::string& conn_info() const { return conn_info_; }
  Context& context() { return *ctx_; }

  // --- connections ------------------------------------------------------------------

  /// Remembers how to reach `agent` and starts connecting to it in the background.
  /// Loading the same info again keeps the connection (unless the agent was lost since:
  /// then it connects again); other info replaces it.
  Status load_conn_info(const std::string& agent, std::string_view info);
  /// Waits (up to REMORA_CONNECT_TIMEOUT_MS per address) until `agent` is connected.
  /// The agent itself is reached through its own listener.
  Status connect(const std::string& agent);
  /// Closes the connection to `agent` and forgets its info. Transfers to it still in
  /// flight end with kAborted.
  Status disconnect(const std::string& agent);

  // --- memory -----------------------------------------------------------------------

  /// Registers [addr, addr + len) of DRAM, or of VRAM on GPU `device` through remora's
  /// CUDA domain (kUnsupported, with the reason, where there is none).
  Result<std::unique_ptr<LocalMemory>> register_memory(uintptr_t addr, size_t len, uint64_t device, MemKind kind);
  /// What another agent needs to access `memory` (wire.h).
  std::string public_data(const LocalMemory& memory) const;
  /// `agent`'s registration [addr, addr + len) of `kind`, from its public data; the
  /// descriptor must match what the public data says.
  Result<std::unique_ptr<RemoteMemory>> load_remote(const std::string& agent, uintptr_t addr, size_t len, MemKind kind,
                                                    std::string_view public_data);
  /// This agent's own registration as the target of a transfer within the agent.
  std::unique_ptr<RemoteMemory> load_local(const LocalMemory& memory);

  // --- transfers ----------------------------------------------------------------------

  /// Checks every descriptor before anything moves: as many on each side, equal
  /// lengths pairwise, each inside its memory (overflow-safe), kinds as the lists say,
  /// the remote memory `agent`'s. kInvalidArgument naming the first bad descriptor.
  Result<std::unique_ptr<Transfer>> prepare(Direction direction, MemKind local_kind, std::span<const LocalDesc> local,
                                            MemKind remote_kind, std::span<const RemoteDesc> remote,
                                            const std::string& agent);
  /// Starts `t` (again), with a notification carrying `notification` once all of it
  /// is visible at the target. ok (ended already), kInProgress, or the failure.
  /// kInvalidArgument when the notification is too long (wire.h), kNoResource when
  /// `t` is still in flight.
  Status post(Transfer& t, const std::optional<std::string>& notification);
  /// Drives progress once: ok, kInProgress, or the failure.
  Status check(Transfer& t);
  /// Ends `t`'s use: cancels it when in flight (see the file comment). `t` may be
  /// destroyed afterwards.
  void release(Transfer& t);

  // --- notifications ----------------------------------------------------------------

  /// Appends every notification that arrived since the last call: (sending agent, message).
  void take_notifications(std::vector<std::pair<std::string, std::string>>& out);
  /// Sends `message` to `agent`, not bound to any transfer. Waits for the connection
  /// when it is still being made (up to REMORA_CONNECT_TIMEOUT_MS), not for delivery.
  Status notify(const std::string& agent, std::string_view message);

 private:
  Engine(std::string local_agent, std::unique_ptr<Context> ctx, std::unique_ptr<Listener> listener,
         std::string conn_info, std::string host);

  /// One endpoint another agent (or this one) opened to us, with a receive posted for
  /// its next notification.
  struct Inbound {
    std::shared_ptr<Endpoint> ep;
    std::vector<std::byte> buffer;
    Request recv;
  };

  void accept_loop();
  /// Moves what arrived on `in` to `out`; false once the endpoint is gone and drained.
  bool drain(Inbound& in, std::vector<std::pair<std::string, std::string>>& out);
  std::shared_ptr<Peer> find_peer(const std::string& agent);
  Status ensure_cuda();

  const std::string local_agent_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Listener> listener_;
  const std::string conn_info_;
  const std::string host_;
  std::shared_ptr<Connector> connector_;

  std::mutex peers_mu_;
  std::map<std::string, std::shared_ptr<Peer>> peers_;  // by agent name; the agent itself included once used

  std::mutex inbound_mu_;
  std::vector<std::unique_ptr<Inbound>> inbound_;

  std::mutex cuda_mu_;
  bool cuda_added_ = false;

  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
};

/// "<boot id>/<network namespace inode>" of this process (see ConnInfo::host).
std::string local_host_identity();

}  // namespace remora::nixl_plugin
