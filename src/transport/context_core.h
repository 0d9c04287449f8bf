// transport/context_core.h — what a Context owns: configuration, the memory
// registry, the progress engine, listeners with their in-progress handshakes, and
// every live endpoint.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/progress.h"
#include "net/rails.h"
#include "net/socket.h"
#include "remora/context.h"
#include "remora/memory.h"
#include "transport/encryption.h"
#include "transport/endpoint_core.h"
#include "wire/handshake.h"

namespace remora::detail {

class ListenerCore;

/// 64 random bits from getrandom(2), never zero.
uint64_t random_nonzero_u64();

class ContextCore : public std::enable_shared_from_this<ContextCore> {
 public:
  /// `rails`: Config::rails resolved on this host (empty without REMORA_RAILS).
  ContextCore(const Config& config, std::shared_ptr<engine::ProgressEngine> engine, std::vector<net::Rail> rails = {});
  ~ContextCore();

  const Config& config() const noexcept { return config_; }
  MemoryRegistry& memory() noexcept { return registry_; }
  /// See Context::add_memory_domain. Takes the lock.
  Status add_memory_domain(MemoryDomain& domain);
  /// The added (device) domain that owns [ptr, ptr + len), else null. Takes the lock.
  MemoryDomain* device_of(const void* ptr, size_t len);
  /// device_of, else the host's domain.
  MemoryDomain& domain_of(const void* ptr, size_t len) {
    MemoryDomain* device = device_of(ptr, len);
    return device != nullptr ? *device : host_domain();
  }
  const std::shared_ptr<engine::ProgressEngine>& engine() const noexcept { return engine_; }

  Result<std::unique_ptr<Listener>> listen(std::string_view address);
  Result<std::shared_ptr<Endpoint>> connect(std::string_view address, Duration timeout);
  /// Closes listeners and endpoints (requests fail with kAborted), stops the thread, and
  /// waits for the rejoin attempts still connecting (each ends within its deadline).
  void shutdown();
  /// Runs `attempt` on a thread of its own (a rejoin's connect and handshake block),
  /// joined at shutdown; finished ones are joined as new ones start.
  void run_rejoin(std::function<void()> attempt);

  // --- lock held --------------------------------------------------------------
  /// Tracks a live endpoint until it fails or closes.
  void adopt(const std::shared_ptr<EndpointCore>& ep);
  /// Server side: a control HELLO arrived; returns the ack to send. `seal`: what its
  /// AUTH exchange left (null: not authenticated), for REMORA_ENCRYPT's keys.
  wire::HelloAck begin_server_endpoint(const wire::Hello& hello, net::Fd control, std::string peer,
                                       const std::shared_ptr<ListenerCore>& listener,
                                       const SealMaterial* seal = nullptr);
  /// Server side: a data HELLO arrived; returns the ack to send (and, on success,
  /// takes the fd; the endpoint is activated and queued when it is complete).
  wire::HelloAck attach_server_stream(const wire::Hello& hello, net::Fd* data, const SealMaterial* seal = nullptr);
  /// Server side: a resume HELLO arrived (kCapResume); returns the ack to send (and, when
  /// accepted, hands the fd to the endpoint it names: its control stream from now on).
  wire::HelloAck resume_server_control(const wire::Hello& hello, net::Fd* control, const SealMaterial* seal = nullptr);
  /// Whether one of this context's listeners is open (a resume or rejoin comes through one).
  bool listening() const;
  wire::HelloAck make_ack(wire::HelloStatus status) const;
  /// The accepted ACK of a connection that attaches to an endpoint (data, rejoin, resume):
  /// the HELLO's id, token, index and count, and the one cipher chosen.
  wire::HelloAck attach_ack(const wire::Hello& hello, const std::optional<net::SealCipher>& cipher) const;
  const std::vector<net::Rail>& rails() const noexcept { return rails_; }

 private:
  struct PendingEndpoint {
    std::shared_ptr<EndpointCore> endpoint;
    uint64_t token = 0;
    std::weak_ptr<ListenerCore> listener;
    uint64_t seq = 0;  ///< arrival order: the smallest is dropped first beyond the bound
    engine::Clock::time_point since;
    std::optional<net::SealCipher> cipher;  ///< REMORA_ENCRYPT's choice; every data stream uses it
  };
  /// Makes room for one more endpoint waiting for its data streams (see
  /// Config::max_pending_handshakes): at the bound the one waiting longest fails if it
  /// has waited kDataStreamsGrace, and at four times the bound whatever its age.
  void drop_oldest_pending_beyond_bound();

  /// The capability bits this side sets in its HELLO and HELLO_ACK.
  uint64_t capabilities() const noexcept;
  /// Server side: the RAILS message for an endpoint accepted by `listener`: each rail's
  /// address with the listener's port (a listener bound to one address: only the rail
  /// of that address).
  std::vector<std::byte> rails_message(const ListenerCore* listener) const;

  Config config_;
  std::vector<net::Rail> rails_;
  MemoryRegistry registry_;
  /// devmem TX bindings of registered regions, shared by the endpoints (after registry_:
  /// it listens for deregistrations).
  std::shared_ptr<DevmemTxBindingCache> devmem_tx_bindings_ = std::make_shared<DevmemTxBindingCache>(registry_);
  std::vector<MemoryDomain*> domains_;  // device domains the endpoints look buffers up in; lock held
  std::atomic<bool> has_domains_{false};  // domains_ is not empty (it never shrinks)
  std::shared_ptr<engine::ProgressEngine> engine_;
  /// Workers the endpoints share (REMORA_PROGRESS_THREADS above 1); each
  /// endpoint keeps them alive while it may use them.
  std::shared_ptr<StreamWorkers> stream_workers_;
  bool shut_down_ = false;
  std::unordered_map<uint64_t, std::shared_ptr<EndpointCore>> endpoints_;  // by next_endpoint_key_
  uint64_t next_endpoint_key_ = 1;
  std::unordered_map<uint64_t, PendingEndpoint> pending_;
  uint64_t next_pending_seq_ = 0;
  std::vector<std::weak_ptr<ListenerCore>> listeners_;
  /// Rejoin attempts (run_rejoin): each thread with its "finished" flag.
  struct RejoinThread {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex rejoin_mu_;
  std::vector<RejoinThread> rejoin_threads_;
  bool rejoin_closed_ = false;  // under rejoin_mu_: shutdown began, start no more
};

/// How long a handshake in progress is safe from being dropped for a newer one when the
/// bound is reached (REMORA_MAX_PENDING_HANDSHAKES). A real client sends its HELLO as
/// soon as its connect completes, usually before the listener accepts the socket, so an
/// accepted socket gets a short grace; its data streams follow the HELLO_ACK after a
/// round trip and must be accepted first, so an endpoint waiting for them gets longer.
/// Silent connections reach their grace and make room.
inline constexpr std::chrono::milliseconds kHelloGrace{100};
inline constexpr std::chrono::milliseconds kDataStreamsGrace{1000};
/// How long a listener that could not accept (out of descriptors) waits before it tries again.
inline constexpr std::chrono::milliseconds kAcceptRetry{100};

/// A listening socket plus the connections still in their handshake.
class ListenerCore : public engine::EventHandler, public std::enable_shared_from_this<ListenerCore> {
 public:
  ListenerCore(std::weak_ptr<ContextCore> ctx, std::shared_ptr<engine::ProgressEngine> engine, net::Fd fd,
               net::SockAddr bound, uint32_t handshake_timeout_ms);
  ~ListenerCore() override;

  Status start();  // lock held
  void on_event(uint32_t events) override;
  /// Stops listening and drops unfinished handshakes. Lock held.
  void close_locked();
  void close();
  /// A complete endpoint is ready for accept(). Lock held.
  void enqueue(std::shared_ptr<EndpointCore> ep);

  Result<std::shared_ptr<Endpoint>> accept(Duration timeout);
  const net::SockAddr& bound() const noexcept { return bound_; }
  bool open() const noexcept { return !closed_; }  // lock held

 private:
  class Conn;
  void drop_conn(uint64_t id);
  /// Whether one more connection may be accepted (Config::max_pending_handshakes): below
  /// the bound yes; at it, the one waiting longest is dropped if it has waited
  /// kHelloGrace, else no, and accepting resumes when it has (the newcomers wait in
  /// the kernel's backlog meanwhile). Lock held.
  bool make_room();
  void resume_accepting_at(engine::Clock::time_point when);
  void resume_accepting_at_once();
  void on_conn_event(uint64_t id);

  std::weak_ptr<ContextCore> ctx_;
  std::shared_ptr<engine::ProgressEngine> engine_;
  net::Fd fd_;
  engine::HandlerId hid_;
  net::SockAddr bound_;
  uint32_t handshake_timeout_ms_;
  bool closed_ = false;
  uint64_t next_conn_id_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  bool resume_timer_set_ = false;  ///< accepting paused until a timer resumes it
  bool accept_failure_logged_ = false;  ///< the last accept failed and said so (once until one works)
  std::deque<std::shared_ptr<EndpointCore>> ready_;
  std::atomic<uint32_t> ready_seq_{0};
};

/// The library's way into the public Context, Listener and Endpoint (a friend of
/// each): their constructors, and the core behind a Context.
struct ContextInternals {
  static std::unique_ptr<Listener> make_listener(std::shared_ptr<ListenerCore> core) {
    return std::unique_ptr<Listener>(new Listener(std::move(core)));
  }
  static std::shared_ptr<Endpoint> make_endpoint(std::shared_ptr<EndpointCore> core) {
    return std::shared_ptr<Endpoint>(new Endpoint(std::move(core)));
  }
  static const std::shared_ptr<ContextCore>& core(const Context& context) noexcept { return context.core_; }
};

}  // namespace remora::detail
