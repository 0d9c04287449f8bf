// plugin/nixl/peer.cc — connections to remote agents, made off the data path (peer.h).
#include "peer.h"

#include <atomic>
#include <utility>

#include "log.h"

namespace remora::nixl_plugin {

// --- Connector ---------------------------------------------------------------------------

bool Connector::start(std::function<void(Context&)> fn) {
  std::lock_guard lock(mu_);
  if (stopped_) return false;
  reap_locked();
  auto finished = std::make_shared<bool>(false);
  Context* ctx = ctx_;
  // The flag is written under mu_ by the thread itself, as its last act.
  std::thread t([this, ctx, finished, fn = std::move(fn)] {
    fn(*ctx);
    std::lock_guard done(mu_);
    *finished = true;
  });
  jobs_.push_back(Job{std::move(t), std::move(finished)});
  return true;
}

void Connector::reap_locked() {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (*it->finished) {
      it->thread.join();  // it has left fn; only its last unlock is left, which does not block
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

void Connector::stop() {
  std::list<Job> jobs;
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
    jobs.swap(jobs_);
  }
  for (Job& j : jobs) j.thread.join();
}

// --- Peer ---------------------------------------------------------------------------------

std::vector<std::string> connect_candidates(const ConnInfo& info, bool same_host) {
  std::vector<std::string> loopback, others;
  for (const std::string& a : info.addresses) (is_loopback_address(a) ? loopback : others).push_back(a);
  if (!same_host) return others;
  loopback.insert(loopback.end(), others.begin(), others.end());
  return loopback;
}

Peer::Peer(std::string agent, ConnInfo info, bool same_host, std::shared_ptr<Connector> connector)
    : agent_(std::move(agent)),
      info_(std::move(info)),
      candidates_(connect_candidates(info_, same_host)),
      connector_(std::move(connector)) {}

Peer::~Peer() { close(); }

void Peer::start_connect_locked() {
  state_ = State::kConnecting;
  auto self = shared_from_this();
  if (!connector_->start([self](Context& ctx) { self->connect_now(ctx); })) {
    state_ = State::kFailed;
    failure_ = Status(StatusCode::kAborted, "the NIXL backend is shutting down");
  }
}

void Peer::connect_now(Context& ctx) {
  Status last(StatusCode::kUnreachable,
              "agent \"" + agent_ + "\" advertises no address reachable from here (" + encode_conn_info(info_) + ")");
  std::shared_ptr<Endpoint> ep;
  for (const std::string& address : candidates_) {
    {
      std::lock_guard lock(mu_);
      if (state_ != State::kConnecting) return;  // closed meanwhile
    }
    Result<std::shared_ptr<Endpoint>> r = ctx.connect(address);
    if (r) {
      ep = std::move(*r);
      break;
    }
    last = r.status().with_context("agent \"" + agent_ + "\" at " + address);
    log(LogLevel::kInfo, "connecting: " + last.to_string());
  }
  std::unique_lock lock(mu_);
  if (state_ != State::kConnecting) {
    lock.unlock();
    if (ep) ep->close();
    return;
  }
  if (ep) {
    ep_ = std::move(ep);
    state_ = State::kReady;
    log(LogLevel::kInfo, "connected to agent \"" + agent_ + "\" at " + ep_->peer_address());
  } else {
    state_ = State::kFailed;
    failure_ = last;
    log(LogLevel::kWarn, "cannot reach " + last.to_string());
  }
  cv_.notify_all();
}

Result<std::shared_ptr<Endpoint>> Peer::endpoint() {
  std::lock_guard lock(mu_);
  reap_sends_locked();
  switch (state_) {
    case State::kIdle: start_connect_locked(); break;
    case State::kConnecting: break;
    case State::kReady:
      if (!ep_->failed()) return ep_;
      // The agent went away (or broke the protocol): say so from now on.
      state_ = State::kFailed;
      failure_ = ep_->failure().with_context("agent \"" + agent_ + "\"");
      log(LogLevel::kWarn, "lost " + failure_.to_string());
      break;
    case State::kFailed:
    case State::kClosed: break;
  }
  if (state_ == State::kConnecting) {
    return Status(StatusCode::kInProgress, "connecting to agent \"" + agent_ + "\"");
  }
  return failure_;
}

Result<std::shared_ptr<Endpoint>> Peer::wait_endpoint(Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    Result<std::shared_ptr<Endpoint>> r = endpoint();
    if (r || r.status().code() != StatusCode::kInProgress) return r;
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return state_ != State::kConnecting; })) {
      return Status(StatusCode::kTimeout, "connecting to agent \"" + agent_ + "\" took too long");
    }
  }
}

void Peer::cancel_endpoint(const std::shared_ptr<Endpoint>& ep) {
  {
    std::lock_guard lock(mu_);
    if (state_ == State::kReady && ep_ == ep) {
      ep_.reset();
      state_ = State::kIdle;  // the next endpoint() connects again
    }
  }
  // Completes every request on it before returning (remora's close), out of our lock.
  ep->close();
  log(LogLevel::kInfo, "closed the endpoint to agent \"" + agent_ + "\" to cancel a transfer in flight");
}

void Peer::keep_until_sent(Request send, std::shared_ptr<const std::vector<std::byte>> bytes) {
  if (send.done()) return;
  std::lock_guard lock(mu_);
  reap_sends_locked();
  sends_.push_back(PendingSend{std::move(send), std::move(bytes)});
}

void Peer::reap_sends_locked() {
  std::erase_if(sends_, [](const PendingSend& p) { return p.send.done(); });
}

bool Peer::lost() {
  std::lock_guard lock(mu_);
  return state_ == State::kFailed || (state_ == State::kReady && ep_->failed());
}

void Peer::close() {
  std::shared_ptr<Endpoint> ep;
  {
    std::lock_guard lock(mu_);
    if (state_ == State::kClosed) return;
    state_ = State::kClosed;
    failure_ = Status(StatusCode::kAborted, "disconnected from agent \"" + agent_ + "\"");
    ep = std::move(ep_);
    cv_.notify_all();
  }
  // Orderly: notifications already sent still reach the agent. Every request on it has
  // completed when close() returns, so the buffers of sends kept here may go.
  if (ep) ep->close();
  std::lock_guard lock(mu_);
  sends_.clear();
}

}  // namespace remora::nixl_plugin
