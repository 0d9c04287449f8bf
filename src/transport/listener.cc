#include <sys/random.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/log.h"
#include "datapath/checksum.h"
#include "engine/futex.h"
#include "engine/wait_bound.h"
#include "net/io.h"
#include "remora/version.h"
#include "transport/context_core.h"
#include "wire/auth.h"

namespace remora {
namespace detail {

/// One accepted connection that has not finished its HELLO yet.
class ListenerCore::Conn final : public engine::EventHandler {
 public:
  Conn(ListenerCore* owner, uint64_t id, net::Fd fd, std::string peer)
      : owner_(owner), id_(id), fd_(std::move(fd)), peer_(std::move(peer)) {}
  void on_event(uint32_t /*events*/) override { owner_->on_conn_event(id_); }

  ListenerCore* owner_;
  uint64_t id_;
  net::Fd fd_;
  std::string peer_;
  engine::Clock::time_point accepted_at = engine::Clock::now();
  engine::HandlerId hid_;
  std::array<std::byte, wire::kHelloSize> buf_{};
  size_t got_ = 0;
  // With a key: after the HELLO, the client's AUTH response (docs/protocol.md,
  // "Authentication"), read into auth_buf_ against the nonce sent in the challenge.
  bool authenticating_ = false;
  std::array<std::byte, wire::kAuthSize> auth_buf_{};
  size_t auth_got_ = 0;
  wire::AuthNonce server_nonce_{};
  // After a verified AUTH response: the keys' material (REMORA_ENCRYPT).
  std::optional<SealMaterial> seal_;
};

ListenerCore::ListenerCore(std::weak_ptr<ContextCore> ctx, std::shared_ptr<engine::ProgressEngine> engine, net::Fd fd,
                           net::SockAddr bound, uint32_t handshake_timeout_ms)
    : ctx_(std::move(ctx)),
      engine_(std::move(engine)),
      fd_(std::move(fd)),
      bound_(bound),
      handshake_timeout_ms_(handshake_timeout_ms) {}

ListenerCore::~ListenerCore() = default;

Status ListenerCore::start() {
  auto hid = engine_->add(fd_.get(), this, EPOLLIN);
  if (!hid) return hid.status();
  hid_ = *hid;
  return Status::ok();
}

void ListenerCore::close_locked() {
  if (closed_) return;
  closed_ = true;
  engine_->remove(fd_.get(), hid_);
  fd_.reset();
  for (auto& [id, c] : conns_) engine_->remove(c->fd_.get(), c->hid_);
  conns_.clear();
  // Never accepted: no Endpoint handle exists, so nobody could use or close them.
  for (auto& ep : ready_) ep->fail_locked(Status(StatusCode::kAborted, "listener closed before accept"));
  ready_.clear();
  ready_seq_.fetch_add(1, std::memory_order_release);
  engine::futex_wake_all(&ready_seq_);
}

void ListenerCore::close() {
  engine::ProgressEngine::Guard guard(*engine_);
  close_locked();
}

void ListenerCore::on_event(uint32_t /*events*/) {
  while (!closed_) {
    if (!make_room()) return;  // the rest waits in the kernel's backlog
    int fd = ::accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // Out of descriptors: raise the soft RLIMIT_NOFILE toward the hard one and try
      // again; where it cannot be, say so (once until an accept works) and try again in
      // a while (the socket is edge-triggered: nothing else would), the connections
      // waiting in the backlog meanwhile.
      const int err = errno;
      if (err == EMFILE && net::ensure_descriptors(8, "accepting on " + net::to_string(bound_)).is_ok()) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      if (!accept_failure_logged_) {
        accept_failure_logged_ = true;
        REMORA_LOG(kWarn, "{}", net::errno_status(err, "accept on " + net::to_string(bound_)).message());
      }
      resume_accepting_at(engine::Clock::now() + kAcceptRetry);
      return;
    }
    accept_failure_logged_ = false;
    net::Fd owned(fd);
    if (Status s = net::configure_stream_socket(fd); !s) {
      REMORA_LOG(kWarn, "accepted socket: {}", s.to_string());
      continue;
    }
    auto peer = net::peer_address(fd);
    uint64_t id = next_conn_id_++;
    auto conn = std::make_unique<Conn>(this, id, std::move(owned), peer ? net::to_string(*peer) : "<unknown>");
    auto hid = engine_->add(conn->fd_.get(), conn.get(), EPOLLIN | EPOLLRDHUP);
    if (!hid) {
      REMORA_LOG(kWarn, "cannot watch accepted socket: {}", hid.status().to_string());
      continue;
    }
    conn->hid_ = *hid;
    conns_.emplace(id, std::move(conn));
    // A peer that never completes its HELLO is dropped at the deadline.
    std::weak_ptr<ListenerCore> weak = weak_from_this();
    engine_->add_timer(engine::Clock::now() + std::chrono::milliseconds(handshake_timeout_ms_), [weak, id] {
      if (auto self = weak.lock()) {
        if (self->conns_.count(id) != 0) {
          REMORA_LOG(kInfo, "handshake from {} timed out", self->conns_[id]->peer_);
          self->drop_conn(id);
        }
      }
    });
    on_conn_event(id);  // the HELLO may already be there
  }
}

bool ListenerCore::make_room() {
  auto ctx = ctx_.lock();
  const size_t bound = ctx ? ctx->config().max_pending_handshakes : 1;
  if (conns_.size() < bound) return true;
  // Ids grow with every accept: the smallest is the connection waiting longest.
  const Conn* oldest = nullptr;
  for (const auto& [id, c] : conns_) {
    if (oldest == nullptr || id < oldest->id_) oldest = c.get();
  }
  if (oldest == nullptr) return true;
  const auto ripe = oldest->accepted_at + kHelloGrace;
  if (engine::Clock::now() < ripe) {
    resume_accepting_at(ripe);
    return false;
  }
  REMORA_LOG(kInfo, "dropping the handshake from {}: {} handshakes in progress (REMORA_MAX_PENDING_HANDSHAKES)",
             oldest->peer_, conns_.size());
  drop_conn(oldest->id_);
  return true;
}

void ListenerCore::resume_accepting_at_once() {
  // A slot freed while paused: accept again at the next progress round (not from
  // here, which may be inside on_event's own loop).
  std::weak_ptr<ListenerCore> weak = weak_from_this();
  engine_->add_timer(engine::Clock::now(), [weak] {
    if (auto self = weak.lock()) self->on_event(0);
  });
}

void ListenerCore::resume_accepting_at(engine::Clock::time_point when) {
  if (resume_timer_set_) return;
  resume_timer_set_ = true;
  std::weak_ptr<ListenerCore> weak = weak_from_this();
  engine_->add_timer(when, [weak] {
    if (auto self = weak.lock()) {
      self->resume_timer_set_ = false;
      self->on_event(0);
    }
  });
}

void ListenerCore::drop_conn(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  engine_->remove(it->second->fd_.get(), it->second->hid_);
  conns_.erase(it);
  if (resume_timer_set_) resume_accepting_at_once();
}

namespace {
/// How long the progress thread waits for rxq to steer an accepted data stream.
constexpr std::chrono::milliseconds kRxqAnswerTimeout{2000};

void send_ack(int fd, const wire::HelloAck& ack) {
  auto bytes = wire::encode_hello_ack(ack);
  // A fresh socket's send buffer is empty; 48 bytes always fit.
  if (net::send_some(fd, bytes.data(), bytes.size()).bytes != bytes.size()) REMORA_LOG(kInfo, "could not send HELLO_ACK");
}
}  // namespace

namespace {
void send_auth(int fd, const wire::AuthMessage& m) {
  auto bytes = wire::encode_auth(m);
  // Follows at most one 48-byte ACK on a fresh socket: always fits.
  if (net::send_some(fd, bytes.data(), bytes.size()).bytes != bytes.size()) REMORA_LOG(kInfo, "could not send AUTH");
}
}  // namespace

void ListenerCore::on_conn_event(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  // Reads the HELLO, then (authenticating) the AUTH response, without blocking.
  auto fill = [&](std::byte* buf, size_t size, size_t* got) {
    while (*got < size) {
      const net::IoResult r = net::recv_some(c.fd_.get(), buf + *got, size - *got);
      if (r.moved()) {
        *got += r.bytes;
        continue;
      }
      if (!r.would_block()) drop_conn(id);  // EOF or error before the whole message
      return false;
    }
    return true;
  };
  if (!c.authenticating_) {
    const bool whole = fill(c.buf_.data(), c.buf_.size(), &c.got_);
    if (!conns_.contains(id)) return;  // dropped: EOF or an error
    // A client that is no remora peer (an HTTP request, a port scanner's probe) is
    // dropped on its first bytes, not at the handshake deadline.
    if (Status s = wire::check_magic_prefix("HELLO", std::span(c.buf_).first(c.got_)); !s) {
      REMORA_LOG(kInfo, "dropping connection from {}: {}", c.peer_, s.message());
      drop_conn(id);
      return;
    }
    if (!whole) return;
  }
  auto ctx = ctx_.lock();
  if (!ctx) {
    drop_conn(id);
    return;
  }
  const std::optional<AuthKey>& key = ctx->config().auth_key;
  if (!c.authenticating_) {
    auto hello = wire::decode_hello(c.buf_);
    if (!hello) {
      REMORA_LOG(kInfo, "dropping connection from {}: {}", c.peer_, hello.status().message());
      drop_conn(id);
      return;
    }
    if (hello->version != kWireVersion) {
      REMORA_LOG(kWarn, "refusing {}: it speaks wire version {}, we speak {}", c.peer_, hello->version, kWireVersion);
      send_ack(c.fd_.get(), ctx->make_ack(wire::HelloStatus::kVersionMismatch));
      drop_conn(id);
      return;
    }
    // A liveness probe (Communicator::failed_ranks): the answer itself is what it asks
    // for. Before authentication, as a keyed listener's challenge also tells anyone that
    // it is alive; no endpoint is made.
    if (hello->role == wire::Role::kProbe) {
      send_ack(c.fd_.get(), ctx->make_ack(wire::HelloStatus::kAccepted));
      drop_conn(id);
      return;
    }
    if (key) {
      if ((hello->capabilities & wire::kCapAuth) == 0) {
        REMORA_LOG(kWarn, "refusing {} ({} connection): no authentication proof (it has no REMORA_AUTH_KEY)", c.peer_,
                   hello->role == wire::Role::kControl ? "control" : "data");
        send_ack(c.fd_.get(), ctx->make_ack(wire::HelloStatus::kUnauthenticated));
        drop_conn(id);
        return;
      }
      c.authenticating_ = true;
      c.server_nonce_ = wire::fresh_auth_nonce();
      send_ack(c.fd_.get(), ctx->make_ack(wire::HelloStatus::kAuthenticate));
      send_auth(c.fd_.get(), {.step = wire::AuthStep::kChallenge, .nonce = c.server_nonce_});
    }
  }
  if (c.authenticating_) {
    if (!fill(c.auth_buf_.data(), c.auth_buf_.size(), &c.auth_got_)) return;
    auto response = wire::decode_auth(c.auth_buf_);
    if (!response || response->step != wire::AuthStep::kResponse) {
      REMORA_LOG(kWarn, "refusing {}: no authentication proof ({})", c.peer_,
                 response ? "an AUTH message that is not a response" : response.status().message());
      drop_conn(id);
      return;
    }
    // The proof covers the HELLO as sent: the role, and for a data connection the
    // endpoint id, token and index it attaches with.
    if (!wire::verify_auth_proof(key->bytes, wire::AuthRole::kClient, c.buf_, c.server_nonce_, response->nonce,
                                 response->proof)) {
      REMORA_LOG(kWarn, "refusing {}: wrong authentication proof (another REMORA_AUTH_KEY, or a replayed handshake)",
                 c.peer_);
      send_auth(c.fd_.get(), {.step = wire::AuthStep::kRefused});
      drop_conn(id);
      return;
    }
    send_auth(c.fd_.get(), {.step = wire::AuthStep::kConfirm,
                            .proof = wire::auth_proof(key->bytes, wire::AuthRole::kServer, c.buf_, c.server_nonce_,
                                                      response->nonce)});
    c.seal_ = SealMaterial{.hello = c.buf_, .server_nonce = c.server_nonce_, .client_nonce = response->nonce};
  }
  auto hello = wire::decode_hello(c.buf_);  // decoded above; cannot fail now
  if (!hello) {
    drop_conn(id);
    return;
  }
  // The socket leaves the listener: unregister it here (the endpoint registers it anew).
  engine_->remove(c.fd_.get(), c.hid_);
  net::Fd fd = std::move(c.fd_);
  std::string peer = c.peer_;
  const std::optional<SealMaterial> seal = c.seal_;
  conns_.erase(it);
  if (resume_timer_set_) resume_accepting_at_once();
  if (hello->role == wire::Role::kControl) {
    wire::HelloAck ack =
        ctx->begin_server_endpoint(*hello, std::move(fd), peer, shared_from_this(), seal ? &*seal : nullptr);
    (void)ack;
  } else {
    wire::HelloAck ack = hello->role == wire::Role::kResume
                             ? ctx->resume_server_control(*hello, &fd, seal ? &*seal : nullptr)
                             : ctx->attach_server_stream(*hello, &fd, seal ? &*seal : nullptr);
    if (fd.valid()) {  // refused: the fd was not taken
      send_ack(fd.get(), ack);
      REMORA_LOG(kInfo, "refused {} from {}",
                 hello->role == wire::Role::kResume ? "to resume a control stream" : "a data stream", peer);
    }
  }
}

void ListenerCore::enqueue(std::shared_ptr<EndpointCore> ep) {
  if (closed_) {
    ep->fail_locked(Status(StatusCode::kAborted, "listener closed before accept"));
    return;
  }
  ready_.push_back(std::move(ep));
  ready_seq_.fetch_add(1, std::memory_order_release);
  engine::futex_wake_all(&ready_seq_);
}

Result<std::shared_ptr<Endpoint>> ListenerCore::accept(Duration requested) {
  const engine::WaitBound bound(requested, *engine_);
  const Duration timeout = bound.timeout();
  const bool forever = timeout == kForever || timeout > std::chrono::hours(24 * 365);
  const auto deadline = forever ? engine::Clock::time_point::max() : engine::Clock::now() + timeout;
  for (;;) {
    uint32_t seq = ready_seq_.load(std::memory_order_acquire);
    {
      engine::ProgressEngine::Guard guard(*engine_);
      if (!ready_.empty()) {
        auto ep = std::move(ready_.front());
        ready_.pop_front();
        return ContextInternals::make_endpoint(std::move(ep));
      }
      if (closed_) return Status(StatusCode::kAborted, "listener is closed");
    }
    auto now = engine::Clock::now();
    if (now >= deadline) return bound.explain(Status(StatusCode::kTimeout, "no peer connected before the accept deadline"));
    // Not block_begin(): that keeps the progress thread from ever parking, and a thread
    // that sits in accept() for the life of the process (an accept loop, NIXL's
    // acceptor) would then have it compete with every spinning waiter of the process
    // for the lock and the sockets. Handshakes are driven by whoever drives progress,
    // and a parked progress thread looks around within a linger period anyway.
    engine::futex_wait(&ready_seq_, seq, forever ? std::chrono::nanoseconds(-1) : deadline - now);
  }
}

// ---------------------------------------------------------------------------
// Server side of the handshake (ContextCore)
// ---------------------------------------------------------------------------

wire::HelloAck ContextCore::make_ack(wire::HelloStatus status) const {
  wire::HelloAck ack;
  ack.version = kWireVersion;
  ack.status = status;
  ack.eager_limit = static_cast<uint32_t>(config_.eager_limit);
  ack.eager_credit = static_cast<uint32_t>(config_.eager_credit);
  ack.rma_window = config_.rma_window;
  ack.capabilities = capabilities();
  return ack;
}

uint64_t ContextCore::capabilities() const noexcept {
  return wire::kCapHeartbeat | (config_.segments ? wire::kCapSegments : 0) | (config_.auth_key ? wire::kCapAuth : 0) |
         checksum_capability(config_) |
         (config_.same_host_pulls
              ? wire::kCapSameHost | wire::kCapShmChannel | wire::kCapDirectMap | wire::kCapPlacedShort
              : 0) |
         (rails_.empty() ? 0 : wire::kCapRails) | encrypt_capabilities(config_) |
         (config_.failover ? wire::kCapFailover | wire::kCapRejoin | wire::kCapResume : 0);
}

std::vector<std::byte> ContextCore::rails_message(const ListenerCore* listener) const {
  std::vector<wire::RailAddress> out;
  const net::SockAddr& bound = listener->bound();
  for (const net::Rail& rail : rails_) {
    // A listener bound to the wildcard takes connections to every local address (an
    // IPv4 wildcard only IPv4 ones); one bound to an address only there.
    const bool reachable = net::is_wildcard(bound) ? (bound.family() == AF_INET6 || rail.address.family() == AF_INET)
                                                   : net::same_address(bound, rail.address);
    if (!reachable) continue;
    wire::RailAddress a{.family = static_cast<uint8_t>(rail.address.family() == AF_INET ? 4 : 6),
                        .prefix_length = rail.prefix_length,
                        .port = net::port_of(bound)};
    if (rail.address.family() == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(rail.address.get());
      std::memcpy(a.address.data(), &v4->sin_addr, 4);
    } else {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(rail.address.get());
      std::memcpy(a.address.data(), &v6->sin6_addr, 16);
    }
    out.push_back(a);
  }
  return wire::encode_rails(out);
}


namespace {

/// The cipher of a connection whose HELLO offered `hello_capabilities`, and whether the
/// keys can be made: a refusal (kUnsupported naming REMORA_ENCRYPT) is logged by the caller.
Result<std::optional<net::SealCipher>> server_cipher(const Config& config, uint64_t hello_capabilities,
                                                     const SealMaterial* seal, std::string_view peer) {
  REMORA_ASSIGN_OR_RETURN(std::optional<net::SealCipher> cipher, listener_cipher(config, hello_capabilities, peer));
  if (cipher && (seal == nullptr || !config.auth_key)) {
    return Status(StatusCode::kAccessDenied,
                  fmt::format("peer {} asks for encryption without authenticating (REMORA_AUTH_KEY)", peer));
  }
  return cipher;
}

/// The ACK of an accepted connection names the one cipher chosen.
void name_cipher(wire::HelloAck& ack, const std::optional<net::SealCipher>& cipher) {
  ack.capabilities &= ~wire::kCapSealMask;
  if (cipher) ack.capabilities |= cipher_capability(*cipher);
}

}  // namespace

wire::HelloAck ContextCore::begin_server_endpoint(const wire::Hello& hello, net::Fd control, std::string peer,
                                                  const std::shared_ptr<ListenerCore>& listener,
                                                  const SealMaterial* seal) {
  if (shut_down_) {
    auto ack = make_ack(wire::HelloStatus::kRefused);
    send_ack(control.get(), ack);
    return ack;
  }
  if (Status differ = checksum_agreement(config_, hello.capabilities, peer); !differ) {
    REMORA_LOG(kWarn, "refused endpoint: {}", differ.message());
    auto ack = make_ack(wire::HelloStatus::kRefused);  // carries our bits: the client says why
    send_ack(control.get(), ack);
    return ack;
  }
  auto cipher = server_cipher(config_, hello.capabilities, seal, peer);
  if (!cipher) {
    REMORA_LOG(kWarn, "refused endpoint: {}", cipher.status().message());
    auto ack = make_ack(wire::HelloStatus::kRefused);  // carries our offer: the client says why
    send_ack(control.get(), ack);
    return ack;
  }
  EndpointCore::Params p;
  p.id = EndpointId{random_nonzero_u64()};
  p.streams = hello.stream_count;
  p.peer_eager_limit = hello.eager_limit;
  p.peer_eager_credit = hello.eager_credit;
  p.peer_rma_window = hello.rma_window;
  p.peer_capabilities = hello.capabilities;
  p.registry = &registry_;
  p.devmem_tx_bindings = devmem_tx_bindings_;
  p.domains = &domains_;
  p.stream_workers = stream_workers_;
  p.peer = std::move(peer);
  drop_oldest_pending_beyond_bound();
  auto ep = std::make_shared<EndpointCore>(engine_, config_, p);
  int fd = control.get();
  ep->set_control(std::move(control));
  uint64_t token = random_nonzero_u64();
  uint64_t id = static_cast<uint64_t>(p.id);
  pending_[id] = PendingEndpoint{ep, token, listener, next_pending_seq_++, engine::Clock::now(), *cipher};

  wire::HelloAck ack = make_ack(wire::HelloStatus::kAccepted);
  ack.endpoint_id = id;
  ack.attach_token = token;
  ack.stream_count = hello.stream_count;
  name_cipher(ack, *cipher);
  send_ack(fd, ack);
  // Every byte after the ACK is sealed (REMORA_ENCRYPT).
  if (*cipher) {
    if (Status s = seal_connection(fd, **cipher, *config_.auth_key, *seal, /*server=*/true); !s) {
      REMORA_LOG(kWarn, "endpoint from {}: {}", ep->peer(), s.message());
      ep->fail_locked(s);
      pending_.erase(id);
      return ack;
    }
  }
  if ((hello.capabilities & wire::kCapRails) != 0 && !rails_.empty() && listener) {
    // Where this side's rails can be reached (docs/protocol.md, "Rails"); at most
    // 8 + 16 * 24 bytes after the 48 of the ACK on a fresh socket: it fits.
    const std::vector<std::byte> rails = rails_message(listener.get());
    if (net::send_some(fd, rails.data(), rails.size()).bytes != rails.size()) REMORA_LOG(kInfo, "could not send RAILS");
  }

  // The data streams must follow within the handshake deadline.
  std::weak_ptr<ContextCore> weak = weak_from_this();
  engine_->add_timer(engine::Clock::now() + std::chrono::milliseconds(config_.handshake_timeout_ms), [weak, id] {
    auto self = weak.lock();
    if (!self) return;
    auto it = self->pending_.find(id);
    if (it == self->pending_.end()) return;
    REMORA_LOG(kInfo, "endpoint from {}: data streams did not arrive in time", it->second.endpoint->peer());
    it->second.endpoint->fail_locked(Status(StatusCode::kTimeout, "handshake timed out"));
    self->pending_.erase(it);
  });
  return ack;
}

void ContextCore::drop_oldest_pending_beyond_bound() {
  const size_t bound = config_.max_pending_handshakes;
  if (pending_.size() < bound) return;
  uint64_t oldest_id = 0;
  const PendingEndpoint* oldest = nullptr;
  for (const auto& [id, pe] : pending_) {
    if (oldest == nullptr || pe.seq < oldest->seq) {
      oldest = &pe;
      oldest_id = id;
    }
  }
  if (oldest == nullptr) return;
  // Young ones may be honest clients of a storm whose data streams are on their way
  // (and need accepting, so the listener cannot pause for them): only the hard cap
  // drops those.
  if (engine::Clock::now() < oldest->since + kDataStreamsGrace && pending_.size() < 4 * bound) return;
  REMORA_LOG(kInfo, "endpoint from {}: dropped while waiting for its data streams, {} handshakes in progress "
             "(REMORA_MAX_PENDING_HANDSHAKES)", oldest->endpoint->peer(), pending_.size());
  oldest->endpoint->fail_locked(
      Status(StatusCode::kNoResource, "handshake dropped: too many in progress (REMORA_MAX_PENDING_HANDSHAKES)"));
  pending_.erase(oldest_id);
}

wire::HelloAck ContextCore::attach_server_stream(const wire::Hello& hello, net::Fd* data, const SealMaterial* seal) {
  auto it = pending_.find(hello.endpoint_id);
  if (it == pending_.end()) {
    // A retired data stream of an active endpoint connected again (kCapRejoin): only
    // with the endpoint's token, for a stream retired on both sides, sealed as before.
    for (auto& [key, ep] : endpoints_) {
      if (ep->id() != EndpointId{hello.endpoint_id} || hello.stream_count != ep->streams() ||
          !ep->rejoin_wanted(hello.attach_token, hello.stream_index)) {
        continue;
      }
      auto cipher = server_cipher(config_, hello.capabilities, seal, ep->peer());
      if (!cipher || *cipher != ep->rejoin_cipher()) {
        REMORA_LOG(kWarn, "refused a rejoined data stream of endpoint from {}: {}", ep->peer(),
                   cipher ? "its encryption differs from its control stream's" : cipher.status().message());
        return make_ack(wire::HelloStatus::kBadRequest);
      }
      const int fd = data->get();
      if (Status s = ep->rejoin_accept(hello.stream_index, std::move(*data)); !s) {
        return make_ack(wire::HelloStatus::kBadRequest);
      }
      const wire::HelloAck ack = attach_ack(hello, *cipher);
      send_ack(fd, ack);
      if (*cipher) {
        if (Status s = seal_connection(fd, **cipher, *config_.auth_key, *seal, /*server=*/true); !s) ep->fail_locked(s);
      }
      return ack;
    }
  }
  // Constant-time compare is not needed for a 64-bit token checked once per connection
  // attempt, but a mismatch must look exactly like an unknown id.
  if (it == pending_.end() || it->second.token != hello.attach_token ||
      hello.stream_count != it->second.endpoint->streams()) {
    return make_ack(wire::HelloStatus::kBadRequest);
  }
  PendingEndpoint& pe = it->second;
  auto cipher = server_cipher(config_, hello.capabilities, seal, pe.endpoint->peer());
  if (!cipher || *cipher != pe.cipher) {
    REMORA_LOG(kWarn, "refused data stream of endpoint from {}: {}", pe.endpoint->peer(),
               cipher ? "its encryption differs from its control stream's" : cipher.status().message());
    return make_ack(wire::HelloStatus::kBadRequest);
  }
  int fd = data->get();
  if (Status s = pe.endpoint->set_data(hello.stream_index, std::move(*data)); !s) {
    return make_ack(wire::HelloStatus::kBadRequest);
  }
  // Steered to devmem RX queues (REMORA_RXQ_SOCKET) before the answer goes out: the
  // connecting side sends nothing more on this stream before it has every answer.
  // rxq is local and answers at once; this runs on the progress thread, so its wait is
  // kept short.
  pe.endpoint->steer_stream(hello.stream_index, net::Clock::now() + kRxqAnswerTimeout);
  const wire::HelloAck ack = attach_ack(hello, pe.cipher);
  send_ack(fd, ack);
  if (pe.cipher) {
    if (Status s = seal_connection(fd, *pe.cipher, *config_.auth_key, *seal, /*server=*/true); !s) {
      auto ep = pe.endpoint;
      pending_.erase(it);
      ep->fail_locked(s);
      return ack;
    }
  }
  if (pe.endpoint->all_streams_attached()) {
    auto ep = pe.endpoint;
    auto listener = pe.listener.lock();
    if (config_.failover && (hello.capabilities & wire::kCapRejoin) != 0) {
      ep->allow_rejoin(pe.token, pe.cipher);
      ep->set_listening([weak = weak_from_this()] {
        auto self = weak.lock();
        return self != nullptr && self->listening();
      });
    }
    pending_.erase(it);
    if (Status s = ep->activate(); !s) {
      ep->fail_locked(s);
      return ack;
    }
    adopt(ep);
    if (listener) {
      listener->enqueue(ep);
    } else {
      ep->fail_locked(Status(StatusCode::kAborted, "listener closed before accept"));
    }
  }
  return ack;
}

wire::HelloAck ContextCore::attach_ack(const wire::Hello& hello, const std::optional<net::SealCipher>& cipher) const {
  wire::HelloAck ack = make_ack(wire::HelloStatus::kAccepted);
  ack.endpoint_id = hello.endpoint_id;
  ack.attach_token = hello.attach_token;
  ack.stream_index = hello.stream_index;
  ack.stream_count = hello.stream_count;
  name_cipher(ack, cipher);
  return ack;
}

bool ContextCore::listening() const {
  return std::any_of(listeners_.begin(), listeners_.end(), [](const std::weak_ptr<ListenerCore>& weak) {
    auto l = weak.lock();
    return l != nullptr && l->open();
  });
}

wire::HelloAck ContextCore::resume_server_control(const wire::Hello& hello, net::Fd* control,
                                                  const SealMaterial* seal) {
  // Only with the endpoint's token, for an endpoint that resumes, sealed as before: like a
  // rejoined data stream (attach_server_stream), and refused alike.
  for (auto& [key, ep] : endpoints_) {
    if (ep->id() != EndpointId{hello.endpoint_id} || hello.stream_count != ep->streams() ||
        !ep->resume_wanted(hello.attach_token)) {
      continue;
    }
    auto cipher = server_cipher(config_, hello.capabilities, seal, ep->peer());
    if (!cipher || *cipher != ep->rejoin_cipher()) {
      REMORA_LOG(kWarn, "refused to resume the control stream of endpoint from {}: {}", ep->peer(),
                 cipher ? "its encryption differs from the first control stream's" : cipher.status().message());
      return make_ack(wire::HelloStatus::kBadRequest);
    }
    net::Fd fd = std::move(*control);
    const wire::HelloAck ack = attach_ack(hello, *cipher);
    send_ack(fd.get(), ack);
    if (*cipher) {
      if (Status s = seal_connection(fd.get(), **cipher, *config_.auth_key, *seal, /*server=*/true); !s) {
        REMORA_LOG(kWarn, "endpoint from {}: {}", ep->peer(), s.message());
        return ack;  // the connection closes; the peer tries again
      }
    }
    ep->resume_accept(std::move(fd));
    return ack;
  }
  return make_ack(wire::HelloStatus::kBadRequest);
}

}  // namespace detail

Listener::Listener(std::shared_ptr<detail::ListenerCore> core) noexcept : core_(std::move(core)) {}
Listener::~Listener() {
  if (core_) core_->close();
}
Result<std::shared_ptr<Endpoint>> Listener::accept(Duration timeout) { return core_->accept(timeout); }
void Listener::close() { core_->close(); }
std::string Listener::address() const { return net::to_string(core_->bound()); }
uint16_t Listener::port() const {
  const auto& a = core_->bound();
  if (a.family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&a.storage)->sin_port);
  return ntohs(reinterpret_cast<const sockaddr_in6*>(&a.storage)->sin6_port);
}

}  // namespace remora
