// plugin/nixl/engine.cc — the NIXL backend over remora's public API (engine.h).
#include "engine.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include "log.h"
#include "remora/cuda.h"

namespace remora::nixl_plugin {

namespace {

using namespace std::chrono_literals;

/// How long the acceptor waits for a connection before it looks at whether the engine
/// is stopping: the most an engine's destruction waits for it.
constexpr auto kAcceptSlice = 200ms;

Status invalid(std::string what) { return Status(StatusCode::kInvalidArgument, std::move(what)); }

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string range(uint64_t addr, uint64_t len) { return "[" + hex(addr) + ", +" + std::to_string(len) + ")"; }

/// [addr, addr + len) lies within [base, base + size), without overflow.
bool inside(uint64_t addr, uint64_t len, uint64_t base, uint64_t size) {
  return addr >= base && addr - base <= size && len <= size - (addr - base);
}

std::string_view kind_name(MemKind k) { return k == MemKind::kDram ? "DRAM" : "VRAM"; }

/// Splits "host:port" / "[v6]:port" into its host part.
std::string_view host_of(std::string_view address) {
  const size_t colon = address.rfind(':');
  return colon == std::string_view::npos ? address : address.substr(0, colon);
}

/// The addresses to advertise for a listener bound to `bound`: itself, or for a wildcard
/// host the address of every interface that is up (those in `interfaces` when given),
/// loopback last.
Result<std::vector<std::string>> advertised_addresses(const std::string& bound, uint16_t port,
                                                      const std::string& interfaces) {
  const std::string_view host = host_of(bound);
  const bool v4_any = host == "0.0.0.0";
  const bool v6_any = host == "[::]";
  if (!v4_any && !v6_any) return std::vector<std::string>{bound};

  std::vector<std::string> wanted;
  for (size_t start = 0; start < interfaces.size();) {
    size_t end = interfaces.find(',', start);
    if (end == std::string::npos) end = interfaces.size();
    if (end > start) wanted.emplace_back(interfaces.substr(start, end - start));
    start = end + 1;
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return Status(StatusCode::kInternal, std::string("getifaddrs: ") + std::strerror(errno));
  }
  std::vector<std::string> out, loopback;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_UP) == 0) continue;
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), i->ifa_name) == wanted.end()) continue;
    char text[INET6_ADDRSTRLEN] = {};
    std::string a;
    if (i->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
      a = std::string(text) + ":" + std::to_string(port);
    } else if (i->ifa_addr->sa_family == AF_INET6 && v6_any) {
      const in6_addr& in6 = reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&in6)) continue;  // would need a scope id
      inet_ntop(AF_INET6, &in6, text, sizeof text);
      a = "[" + std::string(text) + "]:" + std::to_string(port);
    } else {
      continue;
    }
    ((i->ifa_flags & IFF_LOOPBACK) != 0 ? loopback : out).push_back(std::move(a));
  }
  freeifaddrs(list);
  out.insert(out.end(), loopback.begin(), loopback.end());
  if (out.size() > kMaxAddresses) out.resize(kMaxAddresses);
  if (out.empty()) {
    return invalid("no interface to advertise for " + bound +
                   (interfaces.empty() ? std::string() : " among REMORA_NIXL_IFNAME=" + interfaces));
  }
  return out;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

}  // namespace

std::string local_host_identity() {
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  if (boot.empty()) boot = "unknown";
  struct stat st {};
  const uint64_t netns = stat("/proc/self/ns/net", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
  return boot + "/" + std::to_string(netns);
}

EngineParams EngineParams::from(const std::map<std::string, std::string>& nixl_params) {
  EngineParams p;
  auto param = [&](const char* key) -> std::string {
    auto it = nixl_params.find(key);
    return it == nixl_params.end() ? std::string() : it->second;
  };
  p.address = param("address");
  if (p.address.empty()) p.address = env_or("REMORA_NIXL_ADDRESS", "0.0.0.0:0");
  p.interfaces = param("ifname");
  if (p.interfaces.empty()) p.interfaces = env_or("REMORA_NIXL_IFNAME", "");
  return p;
}

// --- Transfer --------------------------------------------------------------------------------

Transfer::Transfer(Direction direction, std::shared_ptr<Peer> peer, std::vector<TransferItem> items, uint64_t bytes,
                   std::string local_agent)
    : direction_(direction),
      peer_(std::move(peer)),
      items_(std::move(items)),
      bytes_(bytes),
      local_agent_(std::move(local_agent)) {}

Transfer::~Transfer() {
  if (in_flight()) abandon();
}

Status Transfer::fail(Status why) {
  state_ = State::kFailed;
  failure_ = why.with_context(std::string(direction_ == Direction::kWrite ? "WRITE" : "READ") + " of " +
                              std::to_string(bytes_) + " bytes with agent \"" + peer_->agent() + "\"");
  log(LogLevel::kWarn, failure_.to_string());
  return failure_;
}

Status Transfer::advance() {
  for (;;) {
    switch (state_) {
      case State::kPrepared: return Status(StatusCode::kInvalidArgument, "the transfer was never posted");
      case State::kDone: return Status::ok();
      case State::kFailed: return failure_;
      case State::kConnecting: {
        Result<std::shared_ptr<Endpoint>> ep = peer_->endpoint();
        if (!ep) {
          if (ep.status().code() == StatusCode::kInProgress) return ep.status();
          return fail(ep.status());
        }
        ep_ = std::move(*ep);
        data_ = direction_ == Direction::kWrite ? ep_->put_batch(items_) : ep_->get_batch(items_);
        state_ = State::kMoving;
        break;
      }
      case State::kMoving: {
        Status s = data_.test();
        if (s.code() == StatusCode::kInProgress) return s;
        if (!s) return fail(s);
        if (!notification_) {
          state_ = State::kDone;
          break;
        }
        // Every byte is visible at the target (WRITE) or here (READ): only now the
        // notification goes, behind the data, on the same endpoint.
        notification_send_ =
            ep_->send(std::span<const std::byte>(notification_->data(), notification_->size()), kNotificationTag);
        state_ = State::kNotifying;
        break;
      }
      case State::kNotifying: {
        Status s = notification_send_.test();
        if (s.code() == StatusCode::kInProgress) return s;
        if (!s) return fail(s.with_context("its notification"));
        state_ = State::kDone;
        break;
      }
    }
  }
}

void Transfer::abandon() {
  switch (state_) {
    case State::kMoving:
      // remora writes into (READ) or reads from (WRITE) the local memory until the
      // request completes or its endpoint closes; NIXL's caller may free it as soon as
      // this returns, so the endpoint is closed now, which completes every request on it.
      if (!data_.done()) peer_->cancel_endpoint(ep_);
      break;
    case State::kNotifying: peer_->keep_until_sent(notification_send_, notification_); break;
    default: break;
  }
  if (in_flight()) {
    state_ = State::kFailed;
    failure_ = Status(StatusCode::kAborted, "released while in flight");
  }
}

// --- Engine ----------------------------------------------------------------------------------

Engine::Engine(std::string local_agent, std::unique_ptr<Context> ctx, std::unique_ptr<Listener> listener,
               std::string conn_info, std::string host)
    : local_agent_(std::move(local_agent)),
      ctx_(std::move(ctx)),
      listener_(std::move(listener)),
      conn_info_(std::move(conn_info)),
      host_(std::move(host)),
      connector_(std::make_shared<Connector>(*ctx_)) {
  acceptor_ = std::thread([this] { accept_loop(); });
}

Result<std::unique_ptr<Engine>> Engine::create(std::string local_agent, const EngineParams& params) {
  Result<std::unique_ptr<Context>> ctx = Context::create();
  if (!ctx) return ctx.status().with_context("creating the remora context");
  Result<std::unique_ptr<Listener>> listener = (*ctx)->listen(params.address);
  if (!listener) return listener.status().with_context("listening on " + params.address + " (REMORA_NIXL_ADDRESS)");
  Result<std::vector<std::string>> addresses =
      advertised_addresses((*listener)->address(), (*listener)->port(), params.interfaces);
  if (!addresses) return addresses.status();
  std::random_device entropy;
  char instance[17];
  std::snprintf(instance, sizeof instance, "%08x%08x", static_cast<unsigned>(entropy()),
                static_cast<unsigned>(entropy()));
  ConnInfo info{.host = local_host_identity(), .addresses = std::move(*addresses), .instance = instance};
  std::string text = encode_conn_info(info);
  log(LogLevel::kInfo, "agent \"" + local_agent + "\" listens: " + text);
  return std::unique_ptr<Engine>(
      new Engine(std::move(local_agent), std::move(*ctx), std::move(*listener), std::move(text), info.host));
}

Engine::~Engine() {
  stopping_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard lock(peers_mu_);
    for (auto& [name, peer] : peers_) peer->close();
    peers_.clear();
  }
  connector_->stop();  // no thread uses the context after this
  {
    std::lock_guard lock(inbound_mu_);
    for (auto& in : inbound_) in->ep->close();  // completes the posted receive: its buffer may go
    inbound_.clear();
  }
  listener_.reset();
  ctx_.reset();
}

void Engine::accept_loop() {
  while (!stopping_.load()) {
    Result<std::shared_ptr<Endpoint>> ep = listener_->accept(kAcceptSlice);
    if (!ep) {
      if (ep.status().code() == StatusCode::kTimeout) continue;
      if (ep.status().code() == StatusCode::kAborted) return;
      log(LogLevel::kWarn, "accepting: " + ep.status().to_string());
      continue;
    }
    auto in = std::make_unique<Inbound>();
    in->ep = std::move(*ep);
    in->buffer.resize(kMaxNotificationBytes);
    in->recv = in->ep->recv(in->buffer, kNotificationTag);
    log(LogLevel::kInfo, "accepted an endpoint from " + in->ep->peer_address());
    std::lock_guard lock(inbound_mu_);
    inbound_.push_back(std::move(in));
  }
}

bool Engine::drain(Inbound& in, std::vector<std::pair<std::string, std::string>>& out) {
  for (;;) {
    Status s = in.recv.test();
    if (s.code() == StatusCode::kInProgress) return true;
    if (!s) return false;  // the agent went away or closed, and what it sent before is taken
    Result<NotificationMessage> n =
        decode_notification(std::span<const std::byte>(in.buffer.data(), std::min(in.recv.bytes(), in.buffer.size())));
    if (n) {
      out.emplace_back(std::move(n->agent), std::move(n->message));
    } else {
      log(LogLevel::kWarn, n.status().to_string() + " (from " + in.ep->peer_address() + "; dropped)");
    }
    in.recv = in.ep->recv(in.buffer, kNotificationTag);
  }
}

void Engine::take_notifications(std::vector<std::pair<std::string, std::string>>& out) {
  std::lock_guard lock(inbound_mu_);
  std::erase_if(inbound_, [&](const std::unique_ptr<Inbound>& in) { return !drain(*in, out); });
}

std::shared_ptr<Peer> Engine::find_peer(const std::string& agent) {
  std::lock_guard lock(peers_mu_);
  auto it = peers_.find(agent);
  if (it != peers_.end()) return it->second;
  if (agent != local_agent_) return nullptr;
  // Transfers within this agent go through its own listener, made on first use.
  Result<ConnInfo> self = decode_conn_info(conn_info_);
  auto peer = std::make_shared<Peer>(agent, std::move(*self), /*same_host=*/true, connector_);
  peers_[agent] = peer;
  return peer;
}

Status Engine::load_conn_info(const std::string& agent, std::string_view text) {
  Result<ConnInfo> info = decode_conn_info(text);
  if (!info) return info.status().with_context("agent \"" + agent + "\"");
  const bool same_host = info->host == host_;
  std::shared_ptr<Peer> old;
  {
    std::lock_guard lock(peers_mu_);
    auto it = peers_.find(agent);
    // The same info again keeps the connection, unless the agent was lost since (a
    // restarted agent may come back at the same address).
    if (it != peers_.end() && encode_conn_info(it->second->info()) == text && !it->second->lost()) {
      return Status::ok();
    }
    auto peer = std::make_shared<Peer>(agent, std::move(*info), same_host, connector_);
    if (it != peers_.end())
      old = std::exchange(it->second, peer);
    else
      peers_[agent] = peer;
    (void)peer->endpoint();  // starts connecting now, in the background
  }
  if (old) old->close();
  return Status::ok();
}

Status Engine::connect(const std::string& agent) {
  if (agent == local_agent_) return Status::ok();  // made on the first transfer within the agent, if any
  std::shared_ptr<Peer> peer = find_peer(agent);
  if (!peer) return invalid("no connection info loaded for agent \"" + agent + "\"");
  const auto per_address = std::chrono::milliseconds(ctx_->config().connect_timeout_ms);
  const size_t tries = std::max<size_t>(1, peer->info().addresses.size());
  Result<std::shared_ptr<Endpoint>> ep = peer->wait_endpoint(per_address * static_cast<int64_t>(tries));
  return ep ? Status::ok() : ep.status();
}

Status Engine::disconnect(const std::string& agent) {
  std::shared_ptr<Peer> peer;
  {
    std::lock_guard lock(peers_mu_);
    auto it = peers_.find(agent);
    if (it == peers_.end()) return Status::ok();
    peer = std::move(it->second);
    peers_.erase(it);
  }
  peer->close();
  return Status::ok();
}

Status Engine::ensure_cuda() {
  std::lock_guard lock(cuda_mu_);
  if (cuda_added_) return Status::ok();
  Result<MemoryDomain*> domain = cuda_domain();
  if (!domain) return domain.status().with_context("VRAM needs remora's CUDA memory domain");
  REMORA_RETURN_IF_ERROR(ctx_->add_memory_domain(**domain));
  cuda_added_ = true;
  return Status::ok();
}

Result<std::unique_ptr<LocalMemory>> Engine::register_memory(uintptr_t addr, size_t len, uint64_t device,
                                                             MemKind kind) {
  if (len == 0) return invalid("registering " + range(addr, len) + ": an empty range");
  if (kind == MemKind::kVram) REMORA_RETURN_IF_ERROR(ensure_cuda());
  const Access rights = Access::kLocalWrite | Access::kRemoteRead | Access::kRemoteWrite;
  Result<Region> region = ctx_->register_memory(reinterpret_cast<void*>(addr), len, rights);
  if (!region)
    return region.status().with_context("registering " + std::string(kind_name(kind)) + " " + range(addr, len));
  const bool host = region->kind() == MemoryKind::kHost;
  if ((kind == MemKind::kDram) != host) {
    return invalid("registering " + std::string(kind_name(kind)) + " " + range(addr, len) + ": remora sees " +
                   std::string(to_string(region->kind())) + " memory there");
  }
  return std::unique_ptr<LocalMemory>(new LocalMemory(addr, len, device, kind, std::move(*region)));
}

std::string Engine::public_data(const LocalMemory& memory) const {
  return encode_public_data(
      PublicData{.kind = memory.kind(), .base = memory.addr(), .key = memory.region().remote_key()});
}

Result<std::unique_ptr<RemoteMemory>> Engine::load_remote(const std::string& agent, uintptr_t addr, size_t len,
                                                          MemKind kind, std::string_view public_data) {
  Result<PublicData> data = decode_public_data(public_data);
  if (!data) return data.status().with_context("agent \"" + agent + "\"");
  if (data->kind != kind || data->base != addr || data->key.length != len) {
    return invalid("agent \"" + agent + "\": the public data of " + std::string(kind_name(data->kind)) + " " +
                   range(data->base, data->key.length) + " does not describe the registration it came with (" +
                   std::string(kind_name(kind)) + " " + range(addr, len) + ")");
  }
  return std::unique_ptr<RemoteMemory>(new RemoteMemory(agent, *data));
}

std::unique_ptr<RemoteMemory> Engine::load_local(const LocalMemory& memory) {
  return std::unique_ptr<RemoteMemory>(new RemoteMemory(
      local_agent_, PublicData{.kind = memory.kind(), .base = memory.addr(), .key = memory.region().remote_key()}));
}

Result<std::unique_ptr<Transfer>> Engine::prepare(Direction direction, MemKind local_kind,
                                                  std::span<const LocalDesc> local, MemKind remote_kind,
                                                  std::span<const RemoteDesc> remote, const std::string& agent) {
  if (local.size() != remote.size()) {
    return invalid("the local list has " + std::to_string(local.size()) + " descriptors, the remote one " +
                   std::to_string(remote.size()));
  }
  std::shared_ptr<Peer> peer = find_peer(agent);
  if (!peer) return invalid("no connection info loaded for agent \"" + agent + "\"");
  std::vector<TransferItem> items;
  items.reserve(local.size());
  uint64_t bytes = 0;
  for (size_t i = 0; i < local.size(); ++i) {
    const LocalDesc& l = local[i];
    const RemoteDesc& r = remote[i];
    const std::string which = "descriptor " + std::to_string(i) + ": ";
    if (l.memory == nullptr || r.memory == nullptr) return invalid(which + "no registration of this backend");
    if (l.len != r.len) {
      return invalid(which + "local length " + std::to_string(l.len) + " != remote length " + std::to_string(r.len));
    }
    if (l.memory->kind() != local_kind || r.memory->kind() != remote_kind) {
      return invalid(which + "its registration is of another memory type than its list");
    }
    if (!inside(l.addr, l.len, l.memory->addr(), l.memory->size())) {
      return invalid(which + "local " + range(l.addr, l.len) + " is outside its registration " +
                     range(l.memory->addr(), l.memory->size()));
    }
    if (r.memory->agent() != agent) {
      return invalid(which + "its remote registration is agent \"" + r.memory->agent() + "\"'s, not \"" + agent +
                     "\"'s");
    }
    if (!inside(r.addr, r.len, r.memory->base(), r.memory->size())) {
      return invalid(which + "remote " + range(r.addr, r.len) + " is outside agent \"" + agent + "\"'s registration " +
                     range(r.memory->base(), r.memory->size()));
    }
    const uint64_t offset = r.addr - r.memory->base();
    bytes += l.len;
    // Descriptors that continue the previous one on both sides, within one registration
    // there, become one operation (NIXL merges only some lists; KV blocks often touch).
    if (!items.empty()) {
      TransferItem& last = items.back();
      if (last.key == r.memory->key() && reinterpret_cast<uintptr_t>(last.local.data()) + last.local.size() == l.addr &&
          last.remote_offset + last.local.size() == offset) {
        last.local = std::span<std::byte>(last.local.data(), last.local.size() + l.len);
        continue;
      }
    }
    items.push_back(TransferItem{.local = std::span<std::byte>(reinterpret_cast<std::byte*>(l.addr), l.len),
                                 .key = r.memory->key(),
                                 .remote_offset = offset});
  }
  return std::unique_ptr<Transfer>(new Transfer(direction, std::move(peer), std::move(items), bytes, local_agent_));
}

Status Engine::post(Transfer& t, const std::optional<std::string>& notification) {
  if (t.in_flight()) return Status(StatusCode::kNoResource, "the transfer was posted again while still in flight");
  t.notification_.reset();
  if (notification) {
    Result<std::vector<std::byte>> wire = encode_notification(local_agent_, *notification);
    if (!wire) return wire.status();
    t.notification_ = std::make_shared<const std::vector<std::byte>>(std::move(*wire));
  }
  t.data_ = Request();
  t.notification_send_ = Request();
  t.ep_.reset();
  t.failure_ = Status::ok();
  t.state_ = Transfer::State::kConnecting;
  return t.advance();
}

Status Engine::check(Transfer& t) { return t.advance(); }

void Engine::release(Transfer& t) { t.abandon(); }

Status Engine::notify(const std::string& agent, std::string_view message) {
  std::shared_ptr<Peer> peer = find_peer(agent);
  if (!peer) return invalid("no connection info loaded for agent \"" + agent + "\"");
  Result<std::vector<std::byte>> wire = encode_notification(local_agent_, message);
  if (!wire) return wire.status();
  const auto per_address = std::chrono::milliseconds(ctx_->config().connect_timeout_ms);
  const size_t tries = std::max<size_t>(1, peer->info().addresses.size());
  Result<std::shared_ptr<Endpoint>> ep = peer->wait_endpoint(per_address * static_cast<int64_t>(tries));
  if (!ep) return ep.status().with_context("notifying agent \"" + agent + "\"");
  auto bytes = std::make_shared<const std::vector<std::byte>>(std::move(*wire));
  Request send = (*ep)->send(std::span<const std::byte>(bytes->data(), bytes->size()), kNotificationTag);
  Status s = send.test();
  if (s.code() != StatusCode::kInProgress && !s) return s.with_context("notifying agent \"" + agent + "\"");
  peer->keep_until_sent(std::move(send), std::move(bytes));
  return Status::ok();
}

}  // namespace remora::nixl_plugin
