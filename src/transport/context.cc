#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/cpus.h"
#include "core/log.h"
#include "datapath/checksum.h"
#include "engine/engine_of.h"
#include "remora/pool.h"
#include "remora/version.h"
#include "transport/context_core.h"
#include "wire/auth.h"

namespace remora {
namespace detail {

uint64_t random_nonzero_u64() {
  for (;;) {
    uint64_t v = 0;
    ssize_t n = ::getrandom(&v, sizeof v, 0);
    if (n == static_cast<ssize_t>(sizeof v) && v != 0) return v;
    if (n < 0 && errno != EINTR) {
      // getrandom cannot fail on Linux >= 3.17 with a valid buffer; keep going regardless.
      REMORA_LOG(kError, "getrandom: {}", std::strerror(errno));
    }
  }
}

ContextCore::ContextCore(const Config& config, std::shared_ptr<engine::ProgressEngine> engine,
                         std::vector<net::Rail> rails)
    : config_(config), rails_(std::move(rails)), registry_(config.pin_mode), engine_(std::move(engine)) {
  if (config_.progress_threads == 0) {
    config_.progress_threads = core::progress_threads_for(rails_.size(), core::usable_cpus());
  }
  if (config_.progress_threads > 1) stream_workers_ = std::make_shared<StreamWorkers>(config_.progress_threads - 1);
}

ContextCore::~ContextCore() { shutdown(); }

void ContextCore::shutdown() {
  {
    engine::ProgressEngine::Guard guard(*engine_);
    if (shut_down_) return;
    shut_down_ = true;
    for (auto& weak : listeners_) {
      if (auto l = weak.lock()) l->close_locked();
    }
    listeners_.clear();
    auto endpoints = std::move(endpoints_);
    for (auto& [id, ep] : endpoints) ep->fail_locked(Status(StatusCode::kAborted, "context destroyed"));
    auto pending = std::move(pending_);
    for (auto& [id, pe] : pending) pe.endpoint->fail_locked(Status(StatusCode::kAborted, "context destroyed"));
  }
  std::vector<RejoinThread> rejoins;
  {
    std::lock_guard lock(rejoin_mu_);
    rejoin_closed_ = true;
    rejoins.swap(rejoin_threads_);
  }
  for (RejoinThread& r : rejoins) r.thread.join();  // each ends at its connect or handshake deadline
  engine_->stop();
}

void ContextCore::run_rejoin(std::function<void()> attempt) {
  std::lock_guard lock(rejoin_mu_);
  if (rejoin_closed_) return;
  std::erase_if(rejoin_threads_, [](RejoinThread& r) {
    if (!r.done->load()) return false;
    r.thread.join();
    return true;
  });
  auto done = std::make_shared<std::atomic<bool>>(false);
  rejoin_threads_.push_back({std::thread([attempt = std::move(attempt), done] {
                               attempt();
                               done->store(true);
                             }),
                             done});
}

Status ContextCore::add_memory_domain(MemoryDomain& domain) {
  if (domain.kind() == MemoryKind::kHost) {
    return Status(StatusCode::kInvalidArgument, "host memory needs no domain: every endpoint moves it directly");
  }
  engine::ProgressEngine::Guard guard(*engine_);
  if (std::find(domains_.begin(), domains_.end(), &domain) != domains_.end()) {
    return Status(StatusCode::kInvalidArgument, fmt::format("the {} memory domain was added before", domain.name()));
  }
  domains_.push_back(&domain);
  has_domains_.store(true, std::memory_order_release);
  return Status::ok();
}

MemoryDomain* ContextCore::device_of(const void* ptr, size_t len) {
  // Every collective asks this of each buffer: without a domain, host memory, and no
  // trip through the progress lock.
  if (!has_domains_.load(std::memory_order_acquire)) return nullptr;
  engine::ProgressEngine::Guard guard(*engine_);
  for (MemoryDomain* d : domains_) {
    if (d->owns(ptr, len)) return d;
  }
  return nullptr;
}

void ContextCore::adopt(const std::shared_ptr<EndpointCore>& ep) {
  // Keyed by a number of our own, not the EndpointId: the id is chosen by the
  // accepting side, so both ends of a connection to this same context carry it.
  const uint64_t key = next_endpoint_key_++;
  endpoints_[key] = ep;
  std::weak_ptr<ContextCore> weak = weak_from_this();
  ep->set_on_closed([weak, key](EndpointId) {
    if (auto self = weak.lock()) self->endpoints_.erase(key);
  });
}

Result<std::unique_ptr<Listener>> ContextCore::listen(std::string_view address) {
  REMORA_ASSIGN_OR_RETURN(net::HostPort hp, net::parse_host_port(address));
  REMORA_ASSIGN_OR_RETURN(std::vector<net::SockAddr> addrs, net::resolve(hp, /*passive=*/true));
  Status last;
  for (const auto& a : addrs) {
    auto fd = net::listen_tcp(a);
    if (!fd) {
      last = fd.status();
      continue;
    }
    auto bound = net::local_address(fd->get());
    if (!bound) return bound.status();
    if (!config_.auth_key && !net::is_loopback(*bound)) {
      wire::warn_unauthenticated_listener("a remora listener", net::to_string(*bound));
    }
    auto core = std::make_shared<ListenerCore>(weak_from_this(), engine_, std::move(fd).value(), *bound,
                                               config_.handshake_timeout_ms);
    engine::ProgressEngine::Guard guard(*engine_);
    if (shut_down_) return Status(StatusCode::kAborted, "context is shutting down");
    REMORA_RETURN_IF_ERROR(core->start());
    listeners_.push_back(core);
    return ContextInternals::make_listener(core);
  }
  return last.with_context("listen on " + std::string(address));
}

namespace {

Status check_ack(const Result<wire::HelloAck>& ack, const std::string& peer) {
  if (!ack) return ack.status().with_context("bad handshake reply from " + peer);
  if (ack->version != kWireVersion) {
    return Status(StatusCode::kProtocol, "version mismatch: " + peer + " speaks remora wire version " +
                                             std::to_string(ack->version) + ", we speak " +
                                             std::to_string(kWireVersion));
  }
  switch (ack->status) {
    case wire::HelloStatus::kAccepted: return Status::ok();
    case wire::HelloStatus::kVersionMismatch:
      return Status(StatusCode::kProtocol, peer + " refused our wire version " + std::to_string(kWireVersion));
    case wire::HelloStatus::kBadRequest: return Status(StatusCode::kProtocol, peer + " rejected the handshake as malformed");
    case wire::HelloStatus::kRefused: return Status(StatusCode::kUnreachable, peer + " refused the connection (shutting down)");
    case wire::HelloStatus::kAuthenticate:
    case wire::HelloStatus::kUnauthenticated:
      break;  // handled by exchange_hello
  }
  return Status(StatusCode::kProtocol, "unknown handshake status from " + peer);
}

Status access_denied(std::string message) { return {StatusCode::kAccessDenied, std::move(message)}; }

Result<wire::AuthMessage> read_auth(StreamIn& stream, net::Clock::time_point deadline) {
  std::array<std::byte, wire::kAuthSize> in{};
  REMORA_RETURN_IF_ERROR(stream.read_exact(in, deadline));
  return wire::decode_auth(in);
}

/// Reads a HELLO_ACK, its magic first: a peer that is no remora listener (an HTTP
/// server's short reply) is refused at once, not at the deadline.
Result<wire::HelloAck> read_ack(StreamIn& stream, const std::string& peer, net::Clock::time_point deadline) {
  std::array<std::byte, wire::kHelloAckSize> in{};
  const auto magic = std::span(in).first(4);
  REMORA_RETURN_IF_ERROR(stream.read_exact(magic, deadline));
  REMORA_RETURN_IF_ERROR(wire::check_magic_prefix("the handshake reply from " + peer, magic));
  REMORA_RETURN_IF_ERROR(stream.read_exact(std::span(in).subspan(4), deadline));
  return wire::decode_hello_ack(in);
}

/// Sends `hello` and returns the listener's final HELLO_ACK. With a key, the listener must
/// authenticate (docs/protocol.md, "Authentication"): it sends a challenge, we answer
/// with our proof, and it proves the key back before its ACK counts. Any failure of that
/// is kAccessDenied, and so is a keyed listener refusing us for having no key. An
/// authenticated exchange leaves its keys' material in `seal` (REMORA_ENCRYPT).
Result<wire::HelloAck> exchange_hello(StreamIn& stream, const wire::Hello& hello, const std::optional<AuthKey>& key,
                                      const std::string& peer, net::Clock::time_point deadline, SealMaterial* seal) {
  const int fd = stream.fd();
  const auto out = wire::encode_hello(hello);
  REMORA_RETURN_IF_ERROR(net::write_all(fd, out, deadline));
  auto ack = read_ack(stream, peer, deadline);
  if (!ack || ack->version != kWireVersion) return ack;  // check_ack words it
  if (ack->status == wire::HelloStatus::kUnauthenticated || (!key && ack->status == wire::HelloStatus::kAuthenticate)) {
    return access_denied(peer + " requires authentication and we hold no key: set REMORA_AUTH_KEY (or "
                                "REMORA_AUTH_KEY_FILE) to the job's shared secret");
  }
  if (!key) return ack;
  if (ack->status == wire::HelloStatus::kAccepted) {
    return access_denied(peer + " accepted us without proving that it holds the shared secret (it has no "
                                "REMORA_AUTH_KEY set): refusing it");
  }
  if (ack->status != wire::HelloStatus::kAuthenticate) return ack;  // version, bad request, refused
  REMORA_ASSIGN_OR_RETURN(const wire::AuthMessage challenge, read_auth(stream, deadline));
  if (challenge.step != wire::AuthStep::kChallenge) {
    return Status(StatusCode::kProtocol, peer + " sent an AUTH message that is not a challenge");
  }
  const wire::AuthNonce client_nonce = wire::fresh_auth_nonce();
  const wire::AuthMessage response{
      .step = wire::AuthStep::kResponse,
      .nonce = client_nonce,
      .proof = wire::auth_proof(key->bytes, wire::AuthRole::kClient, out, challenge.nonce, client_nonce)};
  REMORA_RETURN_IF_ERROR(net::write_all(fd, wire::encode_auth(response), deadline));
  auto confirm = read_auth(stream, deadline);
  if (!confirm && confirm.status().code() == StatusCode::kPeerFailed) {
    return access_denied(peer + " closed the connection at our authentication proof");
  }
  if (!confirm) return confirm.status();
  if (confirm->step == wire::AuthStep::kRefused) {
    return access_denied(peer + " refused our authentication proof: its REMORA_AUTH_KEY differs from ours");
  }
  if (confirm->step != wire::AuthStep::kConfirm) {
    return Status(StatusCode::kProtocol, peer + " sent an AUTH message that is neither a confirmation nor a refusal");
  }
  if (!wire::verify_auth_proof(key->bytes, wire::AuthRole::kServer, out, challenge.nonce, client_nonce,
                               confirm->proof)) {
    return access_denied(peer + " could not prove that it holds the shared secret (wrong proof): refusing it");
  }
  *seal = SealMaterial{.hello = out, .server_nonce = challenge.nonce, .client_nonce = client_nonce};
  return read_ack(stream, peer, deadline);
}

}  // namespace

namespace {

/// How long a connect from a rail may take before that rail is skipped (it may drop
/// SYNs: a peer address it has no route to, a link down on the way), within the
/// connect deadline.
constexpr std::chrono::milliseconds kRailProbeTimeout{2000};

/// One way the data streams can go: from a rail's address (none: the route's choice,
/// as without rails) to one of the peer's addresses.
struct StreamPath {
  std::optional<net::SockAddr> source;
  net::SockAddr dest;
};

net::SockAddr sockaddr_of(const wire::RailAddress& r) {
  net::SockAddr a;
  if (r.family == 4) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(a.get());
    v4->sin_family = AF_INET;
    std::memcpy(&v4->sin_addr, r.address.data(), 4);
    a.length = sizeof(sockaddr_in);
  } else {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(a.get());
    v6->sin6_family = AF_INET6;
    std::memcpy(&v6->sin6_addr, r.address.data(), 16);
    a.length = sizeof(sockaddr_in6);
  }
  return net::with_port(a, r.port);
}

/// The listener's RAILS message (docs/protocol.md, "Rails"): its addresses.
Result<std::vector<net::SockAddr>> read_rails(StreamIn& stream, net::Clock::time_point deadline) {
  std::array<std::byte, wire::kRailsHeaderSize> header{};
  REMORA_RETURN_IF_ERROR(stream.read_exact(header, deadline));
  REMORA_ASSIGN_OR_RETURN(const uint16_t count, wire::decode_rails_header(header));
  std::vector<net::SockAddr> out;
  for (uint16_t i = 0; i < count; ++i) {
    std::array<std::byte, wire::kRailEntrySize> entry{};
    REMORA_RETURN_IF_ERROR(stream.read_exact(entry, deadline));
    REMORA_ASSIGN_OR_RETURN(const wire::RailAddress r, wire::decode_rail_entry(entry));
    out.push_back(sockaddr_of(r));
  }
  return out;
}

/// The peer's address for local rail `i`: an unused one in the rail's subnet, else an
/// unused one of its family, else any one of its family (round robin), else none.
std::optional<net::SockAddr> peer_for(const net::Rail& rail, size_t i, const std::vector<net::SockAddr>& peers,
                                      std::vector<bool>& used) {
  std::optional<size_t> pick;
  for (size_t j = 0; j < peers.size() && !pick; ++j) {
    if (!used[j] && net::same_subnet(rail, peers[j])) pick = j;
  }
  for (size_t j = 0; j < peers.size() && !pick; ++j) {
    if (!used[j] && peers[j].family() == rail.address.family()) pick = j;
  }
  for (size_t k = 0; k < peers.size() && !pick; ++k) {
    const size_t j = (i + k) % peers.size();
    if (peers[j].family() == rail.address.family()) pick = j;
  }
  if (!pick) return std::nullopt;
  used[*pick] = true;
  return peers[*pick];
}

/// A rejoin attempt (docs/rails.md): data stream `index` connected again along `path`,
/// its HELLO answered and, with a cipher, sealed; invalid with `*why` set if not.
net::Fd connect_again(const Config& config, wire::Hello dh, const StreamPath& path,
                      const std::optional<net::SealCipher>& cipher, uint16_t index, Status* why) {
  const auto now = net::Clock::now();
  const auto deadline = now + std::chrono::milliseconds(config.handshake_timeout_ms);
  auto fd =
      net::connect_tcp(path.dest, std::min(deadline, now + kRailProbeTimeout), path.source ? &*path.source : nullptr);
  if (!fd) {
    *why = fd.status();
    return {};
  }
  StreamIn in(fd->get());
  dh.stream_index = index;
  SealMaterial seal;
  const std::string to = net::to_string(path.dest);
  auto ack = exchange_hello(in, dh, config.auth_key, to, deadline, &seal);
  if (!ack && ack.status().code() != StatusCode::kProtocol) {
    *why = ack.status();
    return {};
  }
  if (Status s = check_ack(ack, to); !s) {
    *why = s;
    return {};
  }
  if (cipher) {
    auto same = client_cipher(config, ack->capabilities, /*accepted=*/true, to);
    if (!same || *same != cipher) {
      *why = Status(StatusCode::kProtocol, "the rejoined stream's cipher differs from the control stream's");
      return {};
    }
    if (Status s = seal_connection(fd->get(), *cipher, *config.auth_key, seal, /*server=*/false); !s) {
      *why = s;
      return {};
    }
  }
  return std::move(fd).value();
}

}  // namespace

Result<std::shared_ptr<Endpoint>> ContextCore::connect(std::string_view address, Duration timeout) {
  const auto deadline = net::Clock::now() + timeout;
  REMORA_ASSIGN_OR_RETURN(net::HostPort hp, net::parse_host_port(address));
  if (hp.port == 0) return Status(StatusCode::kInvalidArgument, "connect to '" + std::string(address) + "': port 0");
  REMORA_ASSIGN_OR_RETURN(std::vector<net::SockAddr> addrs, net::resolve(hp, /*passive=*/false));
  // K data streams per rail (one rail without REMORA_RAILS).
  const uint32_t stream_count =
      config_.streams_per_endpoint * static_cast<uint32_t>(std::max<size_t>(rails_.size(), 1));
  // The control stream and every data stream: raise the soft RLIMIT_NOFILE toward the
  // hard one where they would not fit, or say which limit is in the way.
  // With same-host on, a peer of this host adds the shared-memory channel's memfd and
  // two eventfds (docs/protocol.md).
  REMORA_RETURN_IF_ERROR(net::ensure_descriptors(1 + stream_count + (config_.same_host_pulls ? 3 : 0),
                                                 "connect to " + std::string(address)));

  net::Fd control;
  net::SockAddr peer_addr;
  Status last;
  for (const auto& a : addrs) {
    auto fd = net::connect_tcp(a, deadline);
    if (fd) {
      control = std::move(fd).value();
      peer_addr = a;
      break;
    }
    last = fd.status();
  }
  if (!control.valid()) return last.with_context("connect to " + std::string(address));
  const std::string peer = net::to_string(peer_addr);

  wire::Hello hello;
  hello.version = kWireVersion;
  hello.role = wire::Role::kControl;
  hello.stream_count = static_cast<uint16_t>(stream_count);
  hello.eager_limit = static_cast<uint32_t>(config_.eager_limit);
  hello.eager_credit = static_cast<uint32_t>(config_.eager_credit);
  hello.rma_window = config_.rma_window;
  hello.capabilities = capabilities();
  StreamIn control_in(control.get());
  SealMaterial control_seal;
  auto ack = exchange_hello(control_in, hello, config_.auth_key, peer, deadline, &control_seal);
  if (!ack && ack.status().code() != StatusCode::kProtocol) return ack.status().with_context("handshake with " + peer);
  // Before the status: a server whose checksum or encryption setting differs refuses,
  // and this says why.
  std::optional<net::SealCipher> cipher;
  if (ack && ack->version == kWireVersion) {
    REMORA_RETURN_IF_ERROR(checksum_agreement(config_, ack->capabilities, peer).with_context("connect to " + peer));
    auto chosen = client_cipher(config_, ack->capabilities, ack->status == wire::HelloStatus::kAccepted, peer);
    if (!chosen) return chosen.status().with_context("connect to " + peer);
    cipher = *chosen;
  }
  REMORA_RETURN_IF_ERROR(check_ack(ack, peer));
  // Every byte after the ACK is sealed (REMORA_ENCRYPT).
  if (cipher) {
    REMORA_RETURN_IF_ERROR(seal_connection(control.get(), *cipher, *config_.auth_key, control_seal, /*server=*/false)
                               .with_context("connect to " + peer));
  }

  // Where the data streams go: without rails, all to the control stream's address;
  // with them, from each rail to the listener's address on it (RAILS), or to the
  // control stream's address where the listener advertises none.
  std::vector<net::SockAddr> peer_rails;
  if (!rails_.empty() && (ack->capabilities & wire::kCapRails) != 0) {
    auto advertised = read_rails(control_in, deadline);
    if (!advertised) return advertised.status().with_context("the rails of " + peer);
    peer_rails = std::move(advertised).value();
  }
  if (peer_rails.empty()) peer_rails.push_back(peer_addr);

  EndpointCore::Params p;
  p.id = EndpointId{ack->endpoint_id};
  p.streams = stream_count;
  p.peer_eager_limit = ack->eager_limit;
  p.peer_eager_credit = ack->eager_credit;
  p.peer_rma_window = ack->rma_window;
  p.peer_capabilities = ack->capabilities;
  p.registry = &registry_;
  p.devmem_tx_bindings = devmem_tx_bindings_;
  p.domains = &domains_;
  p.stream_workers = stream_workers_;
  p.peer = peer;
  auto ep = std::make_shared<EndpointCore>(engine_, config_, p);
  ep->set_control(std::move(control));

  // Each rail's first stream is its probe: a rail whose connect fails is skipped, with
  // the reason, and its streams go to the rails that work.
  std::vector<StreamPath> paths;
  std::vector<net::Fd> probes;
  std::vector<RailStats> skipped;
  std::vector<std::pair<std::string, std::string>> interfaces;
  if (rails_.empty()) {
    paths.push_back({std::nullopt, peer_addr});
  } else {
    std::vector<bool> used(peer_rails.size(), false);
    for (size_t i = 0; i < rails_.size(); ++i) {
      const net::Rail& rail = rails_[i];
      interfaces.emplace_back(net::address_text(rail.address), rail.interface);
      const std::optional<net::SockAddr> dest = peer_for(rail, i, peer_rails, used);
      Status why;
      if (!dest) {
        why = Status(StatusCode::kUnreachable, "the peer advertises no address of this rail's family");
      } else {
        const auto probe_deadline = std::min(deadline, net::Clock::now() + kRailProbeTimeout);
        auto fd = net::connect_tcp(*dest, probe_deadline, &rail.address);
        if (fd) {
          paths.push_back({rail.address, *dest});
          probes.push_back(std::move(fd).value());
          continue;
        }
        why = fd.status();
      }
      REMORA_LOG(kWarn, "rail {} ({}) to {}: skipped: {}", rail.interface, net::address_text(rail.address),
                 dest ? net::to_string(*dest) : peer, why.message());
      RailStats r;
      r.local_address = net::address_text(rail.address);
      r.peer_address = dest ? net::to_string(*dest) : "";
      r.interface = rail.interface;
      r.state = "skipped";
      r.reason = why.message();
      skipped.push_back(std::move(r));
    }
    if (paths.empty()) {
      std::string reasons;
      for (const RailStats& r : skipped)
        reasons += fmt::format("; {} ({}): {}", r.interface, r.local_address, r.reason);
      return Status(StatusCode::kUnreachable, fmt::format("connect to {}: no rail reaches it{}", peer, reasons));
    }
  }
  ep->set_rail_notes(std::move(skipped), std::move(interfaces));

  for (uint16_t i = 0; i < stream_count; ++i) {
    const StreamPath& path = paths[i % paths.size()];
    net::Fd data;
    if (i < probes.size()) {
      data = std::move(probes[i]);
    } else {
      REMORA_ASSIGN_OR_RETURN(data, net::connect_tcp(path.dest, deadline, path.source ? &*path.source : nullptr));
    }
    // Steered to devmem RX queues before the hello (REMORA_RXQ_SOCKET), so that the
    // answer, and every byte after it, comes through the stream's devmem receiver.
    std::unique_ptr<StreamIn> in = ep->steer_data_stream(data.get(), deadline);
    wire::Hello dh = hello;
    dh.role = wire::Role::kData;
    dh.endpoint_id = ack->endpoint_id;
    dh.attach_token = ack->attach_token;
    dh.stream_index = i;
    SealMaterial data_seal;
    const std::string to = net::to_string(path.dest);
    auto dack = exchange_hello(*in, dh, config_.auth_key, to, deadline, &data_seal);
    if (!dack && dack.status().code() != StatusCode::kProtocol) {
      return dack.status().with_context("data stream " + std::to_string(i) + " to " + to);
    }
    REMORA_RETURN_IF_ERROR(check_ack(dack, to));
    if (cipher) {
      auto same = client_cipher(config_, dack->capabilities, /*accepted=*/true, to);
      if (!same || *same != cipher) {
        return Status(StatusCode::kProtocol, fmt::format("data stream {} to {}: its cipher differs from the control "
                                                         "stream's",
                                                         i, to));
      }
      REMORA_RETURN_IF_ERROR(seal_connection(data.get(), *cipher, *config_.auth_key, data_seal, /*server=*/false)
                                 .with_context("data stream " + std::to_string(i) + " to " + to));
    }
    REMORA_RETURN_IF_ERROR(ep->set_data(i, std::move(data), std::move(in)));
  }

  engine::ProgressEngine::Guard guard(*engine_);
  if (shut_down_) return Status(StatusCode::kAborted, "context is shutting down");
  if (Status s = ep->activate(); !s) {
    ep->fail_locked(s);
    return s;
  }
  if (config_.failover && (ack->capabilities & wire::kCapRejoin) != 0 && stream_count >= 2) {
    // A retired data stream is connected again along its first path (docs/rails.md).
    wire::Hello dh = hello;
    dh.role = wire::Role::kData;
    dh.endpoint_id = ack->endpoint_id;
    dh.attach_token = ack->attach_token;
    std::vector<StreamPath> stream_paths;
    for (uint16_t i = 0; i < stream_count; ++i) stream_paths.push_back(paths[i % paths.size()]);
    ep->set_rejoiner([weak_ctx = weak_from_this(), weak_ep = std::weak_ptr(ep), engine = engine_, config = config_, dh,
                      stream_paths = std::move(stream_paths), cipher](uint16_t index) {
      auto self = weak_ctx.lock();
      if (self == nullptr) return;
      self->run_rejoin([weak_ep, engine, config, dh, path = stream_paths[index], cipher, index] {
        Status why;
        net::Fd fd = connect_again(config, dh, path, cipher, index, &why);
        auto handed = std::make_shared<net::Fd>(std::move(fd));
        engine->post([weak_ep, handed, why, index] {
          if (auto e = weak_ep.lock()) e->rejoin_done(index, std::move(*handed), why);
        });
      });
    });
  }
  if (config_.failover && (ack->capabilities & wire::kCapResume) != 0 && stream_count >= 2) {
    // A control stream that resets is connected again (docs/rails.md): to the address
    // it first went to, else along each data stream's path.
    wire::Hello rh = hello;
    rh.role = wire::Role::kResume;
    rh.endpoint_id = ack->endpoint_id;
    rh.attach_token = ack->attach_token;
    std::vector<StreamPath> resume_paths{{std::nullopt, peer_addr}};
    auto same_path = [](const StreamPath& a, const StreamPath& b) {
      return net::same_address(a.dest, b.dest) && a.source.has_value() == b.source.has_value() &&
             (!a.source || net::same_address(*a.source, *b.source));
    };
    for (const StreamPath& path : paths) {
      if (!net::same_address(path.dest, peer_addr) || path.source) {
        if (std::none_of(resume_paths.begin(), resume_paths.end(),
                         [&](const StreamPath& known) { return same_path(known, path); })) {
          resume_paths.push_back(path);
        }
      }
    }
    ep->set_resumer([weak_ctx = weak_from_this(), weak_ep = std::weak_ptr(ep), engine = engine_, config = config_, rh,
                     resume_paths = std::move(resume_paths),
                     cipher](uint32_t attempt, const EndpointCore::QuietPath* quiet) {
      auto self = weak_ctx.lock();
      if (self == nullptr) return;
      // One path per attempt, in turn: each attempt ends within its connect deadline and
      // says why it failed. After the liveness verdict, the paths that lead where the
      // quiet control connection went from where it left are tried last, if at all.
      std::vector<const StreamPath*> usable;
      for (const StreamPath& candidate : resume_paths) {
        const bool quiet_one = quiet != nullptr && net::same_address(candidate.dest, quiet->peer) &&
                               (!candidate.source || net::same_address(*candidate.source, quiet->local));
        if (!quiet_one) usable.push_back(&candidate);
      }
      if (usable.empty()) {
        for (const StreamPath& candidate : resume_paths) usable.push_back(&candidate);
      }
      const StreamPath& path = *usable[attempt % usable.size()];
      self->run_rejoin([weak_ep, engine, config, rh, path, cipher, first = &path == &resume_paths.front()] {
        Status why;
        net::Fd fd = connect_again(config, rh, path, cipher, 0, &why);
        // Nothing listens where the endpoint first connected: its listener or its
        // process is gone, and no other path can do better.
        const bool refused = first && !fd.valid() && why.message().ends_with(std::strerror(ECONNREFUSED));
        auto handed = std::make_shared<net::Fd>(std::move(fd));
        engine->post([weak_ep, handed, why, refused] {
          if (auto e = weak_ep.lock()) e->resume_done(std::move(*handed), why, refused);
        });
      });
    });
  }
  adopt(ep);
  return ContextInternals::make_endpoint(std::move(ep));
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Context
// ---------------------------------------------------------------------------

Context::Context(std::shared_ptr<detail::ContextCore> core) : core_(std::move(core)) {}
Context::~Context() {
  if (core_) core_->shutdown();
}

Result<std::unique_ptr<Context>> Context::create(const ContextOptions& options) {
  Config base;
  if (!options.ignore_env) {
    REMORA_ASSIGN_OR_RETURN(base, Config::from_env());
  }
  if (options.log_level) core::set_log_level(*options.log_level);  // the log is one per process
  return create(apply(base, options));
}

Result<std::unique_ptr<Context>> Context::create(const Config& config) {
  REMORA_RETURN_IF_ERROR(config.validate());
  REMORA_ASSIGN_OR_RETURN(std::vector<net::Rail> rails, net::resolve_rails(config.rails.data()));
  if (config.streams_per_endpoint * std::max<size_t>(rails.size(), 1) > wire::kMaxStreams) {
    return Status(
        StatusCode::kInvalidArgument,
        fmt::format("REMORA_RAILS='{}' names {} rails, and REMORA_STREAMS={} streams each make {}: at most {} "
                    "data streams per endpoint; lower REMORA_STREAMS",
                    config.rails.data(), rails.size(), config.streams_per_endpoint,
                    config.streams_per_endpoint * rails.size(), wire::kMaxStreams));
  }
  REMORA_ASSIGN_OR_RETURN(auto engine, engine::ProgressEngine::create({.spin_us = config.spin_us,
                                                                         .linger_us = config.progress_linger_us,
                                                                         .poll_us = config.progress_poll_us,
                                                                         .wait_timeout_ms = config.wait_timeout_ms}));
  auto core = std::make_shared<detail::ContextCore>(config, engine, std::move(rails));
  engine->start();
  return std::unique_ptr<Context>(new Context(std::move(core)));
}

const Config& Context::config() const noexcept { return core_->config(); }

std::vector<Context::Rail> Context::rails() const {
  std::vector<Rail> out;
  for (const net::Rail& r : core_->rails()) {
    out.push_back(
        Rail{.interface = r.interface, .address = net::address_text(r.address), .prefix_length = r.prefix_length});
  }
  return out;
}
MemoryRegistry& Context::memory() noexcept { return core_->memory(); }
Result<Region> Context::register_memory(void* ptr, size_t len, Access access) {
  return core_->memory().register_memory(ptr, len, access, core_->domain_of(ptr, len));
}
Status Context::add_memory_domain(MemoryDomain& domain) { return core_->add_memory_domain(domain); }
MemoryDomain* Context::device_domain_of(const void* ptr, size_t len) { return core_->device_of(ptr, len); }
Result<std::unique_ptr<Listener>> Context::listen(std::string_view address) { return core_->listen(address); }
Result<std::shared_ptr<Endpoint>> Context::connect(std::string_view address, Duration timeout) {
  return core_->connect(address, timeout);
}
Result<std::shared_ptr<Endpoint>> Context::connect(std::string_view address) {
  return core_->connect(address, std::chrono::milliseconds(core_->config().connect_timeout_ms));
}
void Context::progress() { core_->engine()->try_progress(); }

const std::shared_ptr<engine::ProgressEngine>& detail::engine_of(const Context& context) noexcept {
  return ContextInternals::core(context)->engine();
}

Pool::Pool(Context& context, PoolOptions options) : Pool(context.memory(), options) {}

}  // namespace remora
