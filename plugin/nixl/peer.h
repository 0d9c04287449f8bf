// plugin/nixl/peer.h — the NIXL backend's connection to one remote agent: a remora
// Endpoint to that agent's listener, made on a background thread so that nothing NIXL
// calls on the data path blocks (postXfer never waits for a connection; checkXfer
// finds it ready), and remade after this side closed it to cancel a transfer.
//
// An endpoint that failed because the peer went away (EOF, reset, no answer within
// REMORA_PEER_TIMEOUT_MS) is not remade: the Peer stays failed with that status, so
// every transfer to the agent reports it (NIXL then drops the agent's metadata; loading
// it again makes a new Peer).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "remora/context.h"
#include "remora/endpoint.h"
#include "remora/request.h"
#include "remora/status.h"
#include "wire.h"

namespace remora::nixl_plugin {

/// Runs connection attempts on threads of their own, all joined before the Context
/// they use goes away (stop()). Shared by an engine and its peers, which may outlive
/// it inside transfers NIXL has not released yet: once stopped it starts nothing.
class Connector {
 public:
  explicit Connector(Context& ctx) : ctx_(&ctx) {}
  ~Connector() { stop(); }
  Connector(const Connector&) = delete;
  Connector& operator=(const Connector&) = delete;

  /// Runs fn(context) on a new thread; false once stopped (fn is not run).
  bool start(std::function<void(Context&)> fn);
  /// Starts nothing more and joins every thread (each one bounded by the connect timeout).
  void stop();

 private:
  void reap_locked();

  Context* ctx_;
  std::mutex mu_;
  bool stopped_ = false;
  struct Job {
    std::thread thread;
    std::shared_ptr<bool> finished;
  };
  std::list<Job> jobs_;
};

class Peer : public std::enable_shared_from_this<Peer> {
 public:
  /// `same_host`: the agent runs in this kernel and network namespace (its loopback
  /// addresses are ours), so they are tried first; otherwise they are never tried.
  Peer(std::string agent, ConnInfo info, bool same_host, std::shared_ptr<Connector> connector);
  ~Peer();
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  const std::string& agent() const { return agent_; }
  const ConnInfo& info() const { return info_; }

  /// Never blocks: the endpoint when connected; kInProgress while connecting (starting
  /// a connection if none is on its way); the failure when the agent cannot be reached
  /// or its endpoint failed; kAborted once close() was called.
  Result<std::shared_ptr<Endpoint>> endpoint();
  /// endpoint(), waiting up to `timeout` while it is kInProgress.
  Result<std::shared_ptr<Endpoint>> wait_endpoint(Duration timeout);

  /// Closes `ep` (orderly: what this side sent before still reaches the agent) because
  /// a transfer on it was released while in flight: every request on it has completed
  /// (kAborted) when this returns, so remora no longer touches their memory; the next
  /// endpoint() connects again. Nothing if `ep` is no longer the current endpoint.
  void cancel_endpoint(const std::shared_ptr<Endpoint>& ep);

  /// Keeps a send's buffer alive until the send completes (a notification whose
  /// transfer was released, a standalone notification).
  void keep_until_sent(Request send, std::shared_ptr<const std::vector<std::byte>> bytes);

  /// Closes the endpoint for good (NIXL's disconnect); later calls fail with kAborted.
  void close();
  /// True once the agent could not be reached or its endpoint failed (not after a close
  /// of ours): loading its connection info again then makes a new Peer.
  bool lost();

 private:
  void start_connect_locked();
  void connect_now(Context& ctx);
  void reap_sends_locked();

  const std::string agent_;
  const ConnInfo info_;
  const std::vector<std::string> candidates_;
  const std::shared_ptr<Connector> connector_;

  enum class State { kIdle, kConnecting, kReady, kFailed, kClosed };
  std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::kIdle;
  std::shared_ptr<Endpoint> ep_;
  Status failure_;
  struct PendingSend {
    Request send;
    std::shared_ptr<const std::vector<std::byte>> bytes;
  };
  std::vector<PendingSend> sends_;
};

/// The addresses of `info` to try, in order, from a host with identity `local_host`.
std::vector<std::string> connect_candidates(const ConnInfo& info, bool same_host);

}  // namespace remora::nixl_plugin
