// remora/context.h — the root object: configuration, registered memory, a progress
// thread, listeners and endpoints.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "remora/config.h"
#include "remora/endpoint.h"
#include "remora/memory.h"
#include "remora/status.h"
#include "remora/types.h"

namespace remora {

namespace detail {
class ContextCore;
class ListenerCore;
struct ContextInternals;  // the library's own access (src/transport/context_core.h)
}

/// Accepts endpoints connected to a listening address.
class Listener {
 public:
  ~Listener();  ///< stops listening; endpoints already accepted stay up
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  /// Next endpoint whose handshake (control + all data streams) completed, waiting up
  /// to `timeout` for one: kTimeout when none did. Without a timeout (kDefaultTimeout)
  /// the wait is bounded by Config::wait_timeout_ms (REMORA_WAIT_TIMEOUT_MS), and its
  /// kTimeout names that variable; a server that waits for clients indefinitely passes
  /// kForever. kAborted once the listener is closed.
  Result<std::shared_ptr<Endpoint>> accept(Duration timeout = kDefaultTimeout);
  template <typename Rep, typename Period>
  Result<std::shared_ptr<Endpoint>> accept(std::chrono::duration<Rep, Period> timeout) {
    return accept(std::chrono::duration_cast<Duration>(timeout));
  }
  /// "host:port" actually bound (port resolved when 0 was asked for).
  std::string address() const;
  uint16_t port() const;
  /// Stops listening now, as the destructor does: a thread waiting in accept() returns
  /// kAborted; endpoints already accepted stay up. Idempotent; thread-safe.
  void close();

 private:
  friend struct detail::ContextInternals;
  explicit Listener(std::shared_ptr<detail::ListenerCore> core) noexcept;
  std::shared_ptr<detail::ListenerCore> core_;
};

/// One per process is typical. Owns a progress thread that serves sockets (and, with
/// RMA, passive-target requests); it sleeps in epoll when idle, and yields to threads
/// that are spinning in Request::wait. Thread-safe. Destroying the context closes
/// every endpoint (their requests fail with kAborted) and joins the thread.
class Context {
 public:
  /// Config from the environment (REMORA_*) with `options` applied on top.
  static Result<std::unique_ptr<Context>> create(const ContextOptions& options = {});
  /// Exactly this configuration (no environment).
  static Result<std::unique_ptr<Context>> create(const Config& config);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Config& config() const noexcept;
  /// One of this context's rails (REMORA_RAILS, docs/rails.md).
  struct Rail {
    std::string interface;      ///< "eth0"
    std::string address;        ///< the local address its data streams are bound to: "10.0.1.5", "fd00::5"
    uint8_t prefix_length = 0;  ///< of the interface's netmask: 24
  };
  /// The rails REMORA_RAILS chose, in its order; empty without rails (each endpoint
  /// takes one path, the route's).
  std::vector<Rail> rails() const;
  MemoryRegistry& memory() noexcept;
  /// Registers memory with this context's registry (see MemoryRegistry): host memory,
  /// or memory of a domain added with add_memory_domain (the one that owns the range).
  /// A region of device memory may be granted remote reads and writes (peers' puts and
  /// gets are staged through host memory), not remote atomics (kUnsupported).
  Result<Region> register_memory(void* ptr, size_t len, Access access);
  /// Lets this context's endpoints move memory of `domain` (a device: CUDA, the test
  /// device): a send, receive, put or get whose buffer the domain owns
  /// (MemoryDomain::owns) moves through pinned staging buffers, device copies
  /// overlapping the network (docs/device-memory.md). `domain` must outlive the
  /// context. kInvalidArgument for the host domain or one added before.
  Status add_memory_domain(MemoryDomain& domain);
  /// The domain added with add_memory_domain that owns [ptr, ptr + len), or nullptr
  /// (host memory, or memory of no domain this context knows).
  MemoryDomain* device_domain_of(const void* ptr, size_t len);

  /// Listens on "host:port" ("0.0.0.0:0", "[::1]:7100", "localhost:7100").
  Result<std::unique_ptr<Listener>> listen(std::string_view address);
  /// Connects to "host:port" (IPv4, IPv6 in brackets, or a name), performs the
  /// handshake and opens the data streams. kUnreachable, kTimeout, kProtocol
  /// (version mismatch or garbage from the other side).
  Result<std::shared_ptr<Endpoint>> connect(std::string_view address, Duration timeout);
  Result<std::shared_ptr<Endpoint>> connect(std::string_view address);

  /// Drives progress once from the calling thread (never blocks).
  void progress();

 private:
  friend struct detail::ContextInternals;
  explicit Context(std::shared_ptr<detail::ContextCore> core);
  std::shared_ptr<detail::ContextCore> core_;
};

}  // namespace remora
