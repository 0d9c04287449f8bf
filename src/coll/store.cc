// coll/store.cc — the rendezvous store: a poll-driven TCP key-value server on its own
// thread, and a blocking client. Wire format: docs/protocol.md, "Rendezvous store".
#include "remora/store.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "coll/store_protocol.h"
#include "core/env.h"
#include "core/little_endian.h"
#include "core/log.h"
#include "net/address.h"
#include "net/io.h"
#include "net/seal.h"
#include "net/socket.h"
#include "wire/auth.h"
#include "wire/handshake.h"

namespace remora {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

// The wire format is store_protocol's (docs/protocol.md); the server's own limits:
using namespace store_protocol;
/// A client that never reads its replies is cut off once this much is queued for it.
constexpr size_t kMaxQueuedReplies = size_t{256} << 20;

// --- encryption (REMORA_ENCRYPT, docs/encryption.md) -----------------------------------

/// The cipher bits a side with `mode` offers in its AUTH request or challenge.
uint8_t seal_offer(EncryptMode mode) { return net::offered_ciphers(mode); }
static_assert(net::cipher_bit(net::SealCipher::kAes256Gcm) == wire::kAuthSealAes256Gcm &&
                  net::cipher_bit(net::SealCipher::kChacha20Poly1305) == wire::kAuthSealChacha20Poly1305 &&
                  net::cipher_bit(net::SealCipher::kAegis256) == wire::kAuthSealAegis256 &&
                  net::cipher_bit(net::SealCipher::kAegis128l) == wire::kAuthSealAegis128l,
              "the store's AUTH cipher bits are net::cipher_bit's");

/// REMORA_ENCRYPT's word for a side's bits.
std::string_view seal_word(uint8_t bits) { return net::offer_word(bits); }

/// Seals a store connection whose authentication just ended (`cipher`: one bit).
Status seal_store_connection(int fd, uint8_t cipher, const AuthKey& key, const wire::AuthNonce& server_nonce,
                             const wire::AuthNonce& client_nonce, bool server) {
  const wire::SealKeyPair pair =
      wire::derive_seal_keys(key.bytes, cipher, wire::store_auth_context(), server_nonce, client_nonce);
  net::SealKeys keys{.cipher = net::single_cipher(cipher).value_or(net::SealCipher::kChacha20Poly1305),
                     .send = server ? pair.server_to_client : pair.client_to_server,
                     .recv = server ? pair.client_to_server : pair.server_to_client};
  return net::seal_socket(fd, keys);
}

/// REMORA_ENCRYPT from the environment (the table's row, read as Config would).
Result<EncryptMode> encrypt_from_env() {
  for (const ConfigVariable& v : config_variables()) {
    if (v.name != "REMORA_ENCRYPT") continue;
    REMORA_ASSIGN_OR_RETURN(auto n, core::read_value(v));
    return n ? static_cast<EncryptMode>(*n) : EncryptMode::kOff;
  }
  return EncryptMode::kOff;
}

Status check_encrypt(EncryptMode mode, const std::optional<AuthKey>& key) {
  if (mode != EncryptMode::kOff && !key) {
    return Status(StatusCode::kInvalidArgument,
                  "the rendezvous store with REMORA_ENCRYPT: the keys are derived from the job secret, and none is "
                  "set: set REMORA_AUTH_KEY (or REMORA_AUTH_KEY_FILE), or REMORA_ENCRYPT=off");
  }
  return Status::ok();
}
/// Non-waiting requests (set, add, check, remove) are answered at once by a healthy
/// server; this only bounds a call on a server that stopped responding.
constexpr Duration kRequestTimeout = std::chrono::seconds(60);

void put_bytes(std::vector<std::byte>& out, std::span<const std::byte> b) { out.insert(out.end(), b.begin(), b.end()); }
void put_bytes(std::vector<std::byte>& out, std::string_view s) { put_bytes(out, std::as_bytes(std::span(s))); }
std::string_view as_view(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) {
    if (!out.empty()) out += ", ";
    out += '"' + k + '"';
  }
  return out;
}

/// Counters are stored as decimal text (a get on a counter returns "42").
std::optional<int64_t> parse_counter(const std::vector<std::byte>& v) {
  int64_t x = 0;
  const char* b = reinterpret_cast<const char*>(v.data());
  auto [p, ec] = std::from_chars(b, b + v.size(), x);
  if (ec != std::errc() || p != b + v.size() || v.empty()) return std::nullopt;
  return x;
}

}  // namespace

// --- server ----------------------------------------------------------------------------

class StoreServerCore {
 public:
  StoreServerCore(net::Fd listener, net::Fd wake_read, net::Fd wake_write, std::string address, uint16_t port,
                  std::optional<AuthKey> key, EncryptMode encrypt)
      : listener_(std::move(listener)),
        wake_read_(std::move(wake_read)),
        wake_write_(std::move(wake_write)),
        address_(std::move(address)),
        port_(port),
        key_(key),
        offer_(seal_offer(encrypt)) {
    thread_ = std::thread([this] { serve(); });
  }
  ~StoreServerCore() {
    stop_.store(true);
    const char c = 0;
    // The pipe is non-blocking and the thread drains it; a full pipe already wakes it.
    (void)!::write(wake_write_.get(), &c, 1);
    thread_.join();
  }
  StoreServerCore(const StoreServerCore&) = delete;
  StoreServerCore& operator=(const StoreServerCore&) = delete;

  uint16_t port() const { return port_; }
  const std::string& address() const { return address_; }

 private:
  /// Where a connection stands in the authentication that precedes every request when
  /// the store has a key (docs/protocol.md, "Authentication").
  enum class Auth : uint8_t { kAwaitRequest, kAwaitResponse, kDone };

  struct Conn {
    net::Fd fd;
    std::string peer;
    Auth auth = Auth::kDone;
    wire::AuthNonce server_nonce{};
    uint8_t cipher = 0;  ///< REMORA_ENCRYPT: the one chosen (sealed after the confirm)
    std::vector<std::byte> in;
    std::vector<std::byte> out;
    size_t out_done = 0;
    bool waiting = false;  ///< a get/wait is parked; later requests wait behind it
    Op wait_op = Op::kGet;
    std::vector<std::string> wait_keys;
    std::optional<Clock::time_point> deadline;
    bool dead = false;
  };

  void serve() {
    std::vector<pollfd> fds;
    while (!stop_.load()) {
      fds.clear();
      fds.push_back({listener_.get(), POLLIN, 0});
      fds.push_back({wake_read_.get(), POLLIN, 0});
      for (auto& c : conns_) {
        short ev = POLLIN;
        if (c->out_done < c->out.size()) ev |= POLLOUT;
        fds.push_back({c->fd.get(), ev, 0});
      }
      int timeout_ms = -1;
      const auto now = Clock::now();
      for (auto& c : conns_) {
        if (!c->waiting || !c->deadline) continue;
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(*c->deadline - now).count();
        const int ms = static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
        timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
      }
      const int n = ::poll(fds.data(), fds.size(), timeout_ms);
      if (n < 0 && errno != EINTR) {
        REMORA_LOG(kError, "store server: poll: {}", std::strerror(errno));
        break;
      }
      if (stop_.load()) break;
      if (n > 0) {
        if (fds[1].revents != 0) {
          char buf[64];
          while (::read(wake_read_.get(), buf, sizeof buf) > 0) {
          }
        }
        // Connections accepted now are polled from the next round; fds[i + 2] matches
        // conns_[i] for the ones that existed when fds was built.
        const size_t polled = fds.size() - 2;
        for (size_t i = 0; i < polled; ++i) {
          const short re = fds[i + 2].revents;
          if (re == 0) continue;
          Conn& c = *conns_[i];
          if ((re & (POLLIN | POLLHUP | POLLERR)) != 0) on_readable(c);
          if (!c.dead && (re & POLLOUT) != 0) flush(c);
        }
        if (fds[0].revents != 0) accept_all();
      }
      expire_waits();
      settle();
      std::erase_if(conns_, [](const std::unique_ptr<Conn>& c) { return c->dead; });
    }
    conns_.clear();  // closing the sockets fails every client's call with kPeerFailed
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
          REMORA_LOG(kWarn, "store server: accept: {}", std::strerror(errno));
        }
        return;
      }
      auto c = std::make_unique<Conn>();
      c->fd = net::Fd(fd);
      auto peer = net::peer_address(fd);
      c->peer = peer ? net::to_string(*peer) : "<unknown>";
      if (key_) c->auth = Auth::kAwaitRequest;
      if (Status s = net::configure_stream_socket(fd); !s.is_ok()) {
        REMORA_LOG(kWarn, "store server: {}", s.to_string());
        continue;
      }
      conns_.push_back(std::move(c));
    }
  }

  void drop(Conn& c, std::string_view why) {
    if (!why.empty()) REMORA_LOG(kWarn, "store server: closing a client connection: {}", why);
    c.dead = true;
    c.fd.reset();
  }

  void on_readable(Conn& c) {
    std::byte buf[64 * 1024];
    for (;;) {
      // Through the sealing layer once the connection is sealed (REMORA_ENCRYPT); read
      // until it would block, so nothing stays opened in the layer unseen by poll.
      const net::IoResult r = net::recv_some(c.fd.get(), buf, sizeof buf);
      if (r.moved()) {
        c.in.insert(c.in.end(), buf, buf + r.bytes);
        // A client may pipeline, but never more than one frame beyond a parked wait.
        if (c.in.size() > 2 * kMaxRequest) return drop(c, "too much unanswered input");
        continue;
      }
      if (r.would_block()) break;
      if (r.error() && r.err == EBADMSG) {
        return drop(c, net::errno_status(r.err, "store connection from " + c.peer).message());
      }
      return drop(c, "");
    }
    process(c);
  }

  /// Serves what clients unparked by a set/add/timeout had queued behind their wait.
  void settle() {
    for (bool again = true; again;) {
      again = false;
      for (auto& c : conns_) {
        if (!c->dead && !c->waiting && !c->in.empty()) again |= process(*c);
      }
    }
  }

  /// Serves complete frames in order, stopping behind a parked get/wait. Returns
  /// whether it consumed anything. Never re-entered for the same connection: the
  /// request being served points into `c.in`.
  bool process(Conn& c) {
    size_t at = 0;
    while (!c.dead && !c.waiting) {
      if (c.auth != Auth::kDone) {
        const size_t avail = c.in.size() - at;
        if (avail == 0) break;
        const auto consumed = authenticate(c, std::span(c.in.data() + at, avail));
        if (!consumed) break;
        at += *consumed;
        continue;
      }
      auto r = decode_request(std::span(c.in).subspan(at));
      if (!r.is_ok()) {
        if (r.status().code() == StatusCode::kInProgress) break;
        return drop(c, r.status().message()), false;
      }
      at += r->consumed;
      serve_one(c, r->op, std::string(r->key), r->value, r->timeout_ms);
    }
    if (c.dead) return false;
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(at));
    return at > 0;
  }

  /// One step of a keyed store's authentication from the bytes at the front of the
  /// connection's input: how many it consumed, or nullopt when it needs more (or dropped
  /// the connection).
  std::optional<size_t> authenticate(Conn& c, std::span<const std::byte> in) {
    if (c.auth == Auth::kAwaitRequest && std::to_integer<uint8_t>(in[0]) != (wire::kMagic & 0xFF)) {
      REMORA_LOG(kWarn, "store server: refusing {}: no authentication proof (it has no REMORA_AUTH_KEY)", c.peer);
      const std::string_view why =
          "this store requires authentication: set REMORA_AUTH_KEY (or REMORA_AUTH_KEY_FILE) to the job's shared "
          "secret";
      reply(c, Reply::kUnauthenticated, std::as_bytes(std::span(why.data(), why.size())));
      drop(c, "");
      return std::nullopt;
    }
    if (in.size() < wire::kAuthSize) return std::nullopt;
    auto m = wire::decode_auth(in.first(wire::kAuthSize));
    const wire::AuthStep expected = c.auth == Auth::kAwaitRequest ? wire::AuthStep::kRequest : wire::AuthStep::kResponse;
    if (!m || m->step != expected) {
      REMORA_LOG(kWarn, "store server: refusing {}: no authentication proof ({})", c.peer,
                 m ? "an AUTH message out of turn" : m.status().message());
      drop(c, "");
      return std::nullopt;
    }
    if (c.auth == Auth::kAwaitRequest) {
      c.server_nonce = wire::fresh_auth_nonce();
      // REMORA_ENCRYPT: the cipher both offer (net::kSealCiphers' order); when they do not
      // agree the challenge carries our whole offer, the client says why and closes.
      const uint8_t common = offer_ & m->seal;
      const bool agree = (offer_ == 0 && m->seal == 0) || common != 0;
      const std::optional<net::SealCipher> chosen = net::preferred_cipher(common);
      c.cipher = chosen ? net::cipher_bit(*chosen) : 0;
      if (!agree) {
        REMORA_LOG(kWarn,
                   "store server: refusing {}: encryption settings differ (this store REMORA_ENCRYPT={}, the client "
                   "{})",
                   c.peer, seal_word(offer_), seal_word(m->seal));
      }
      send_raw(c,
               wire::encode_auth(
                   {.step = wire::AuthStep::kChallenge, .nonce = c.server_nonce, .seal = agree ? c.cipher : offer_}));
      if (!agree) {
        drop(c, "");
        return std::nullopt;
      }
      c.auth = Auth::kAwaitResponse;
      return wire::kAuthSize;
    }
    const auto context = wire::store_auth_context();
    if (!wire::verify_auth_proof(key_->bytes, wire::AuthRole::kClient, context, c.server_nonce, m->nonce, m->proof)) {
      REMORA_LOG(kWarn,
                 "store server: refusing {}: wrong authentication proof (another REMORA_AUTH_KEY, or a replayed "
                 "handshake)",
                 c.peer);
      send_raw(c, wire::encode_auth({.step = wire::AuthStep::kRefused}));
      drop(c, "");
      return std::nullopt;
    }
    send_raw(c, wire::encode_auth({.step = wire::AuthStep::kConfirm,
                                   .proof = wire::auth_proof(key_->bytes, wire::AuthRole::kServer, context,
                                                             c.server_nonce, m->nonce)}));
    if (c.dead) return std::nullopt;
    if (c.cipher != 0) {
      // Every byte after the confirm is sealed: the confirm must be wholly in the kernel
      // (72 bytes on a fresh socket are), and the client sends nothing before it reads it.
      Status sealed = c.out_done == c.out.size() && in.size() == wire::kAuthSize
                          ? seal_store_connection(c.fd.get(), c.cipher, *key_, c.server_nonce, m->nonce, true)
                          : Status(StatusCode::kProtocol, "bytes beyond the authentication when sealing begins");
      if (!sealed.is_ok()) {
        drop(c, sealed.message());
        return std::nullopt;
      }
    }
    c.auth = Auth::kDone;
    return wire::kAuthSize;
  }

  /// Queues bytes that are not a reply (the AUTH messages) and sends what fits.
  void send_raw(Conn& c, std::span<const std::byte> bytes) {
    if (c.dead) return;
    put_bytes(c.out, bytes);
    flush(c);
  }

  void serve_one(Conn& c, Op op, const std::string& key, std::span<const std::byte> value, uint64_t timeout_ms) {
    switch (op) {
      case Op::kSet:
        data_[key].assign(value.begin(), value.end());
        reply(c, Reply::kOk, {});
        wake_waiters();
        return;
      case Op::kGet:
      case Op::kWait: {
        std::vector<std::string> keys;
        if (op == Op::kGet) {
          if (!value.empty()) return drop(c, "get with a value");
          keys.push_back(key);
        } else {
          auto parsed = decode_wait_keys(value);
          if (!parsed.is_ok()) return drop(c, parsed.status().message());
          keys = std::move(parsed).value();
        }
        c.waiting = true;
        c.wait_op = op;
        c.wait_keys = std::move(keys);
        c.deadline.reset();
        if (timeout_ms != kNoTimeout) c.deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
        try_complete(c);
        return;
      }
      case Op::kAdd: {
        if (value.size() != 8) return drop(c, "add needs an 8-byte delta");
        const auto delta = static_cast<int64_t>(core::load_u64(value.data()));
        int64_t now = 0;
        if (auto it = data_.find(key); it != data_.end()) {
          auto v = parse_counter(it->second);
          if (!v) {
            const std::string msg = fmt::format("store key \"{}\" holds a value that is not a counter", key);
            return reply(c, Reply::kInvalidArgument, std::as_bytes(std::span(msg)));
          }
          now = *v;
        }
        if (__builtin_add_overflow(now, delta, &now)) {
          const std::string msg = fmt::format("store counter \"{}\" would overflow", key);
          return reply(c, Reply::kInvalidArgument, std::as_bytes(std::span(msg)));
        }
        const std::string text = std::to_string(now);
        auto& slot = data_[key];
        slot.clear();
        put_bytes(slot, text);
        std::vector<std::byte> out;
        core::append_le<uint64_t>(out, static_cast<uint64_t>(now));
        reply(c, Reply::kOk, out);
        wake_waiters();
        return;
      }
      case Op::kCheck:
      case Op::kRemove: {
        if (!value.empty()) return drop(c, "check/remove with a value");
        bool had = false;
        if (op == Op::kCheck) {
          had = data_.contains(key);
        } else {
          had = data_.erase(key) > 0;
        }
        const std::byte b{static_cast<uint8_t>(had ? 1 : 0)};
        reply(c, Reply::kOk, std::span(&b, 1));
        return;
      }
    }
  }

  /// Answers a parked get/wait if its keys exist now (settle() serves what queued behind it).
  void try_complete(Conn& c) {
    if (!c.waiting) return;
    for (const auto& k : c.wait_keys) {
      if (!data_.contains(k)) return;
    }
    c.waiting = false;
    if (c.wait_op == Op::kGet) {
      reply(c, Reply::kOk, data_[c.wait_keys[0]]);
    } else {
      reply(c, Reply::kOk, {});
    }
    c.wait_keys.clear();
  }

  void wake_waiters() {
    for (auto& c : conns_) {
      if (!c->dead && c->waiting) try_complete(*c);
    }
  }

  void expire_waits() {
    const auto now = Clock::now();
    for (auto& c : conns_) {
      if (c->dead || !c->waiting || !c->deadline || *c->deadline > now) continue;
      std::vector<std::string> missing;
      for (const auto& k : c->wait_keys) {
        if (!data_.contains(k)) missing.push_back(k);
      }
      const std::string msg = fmt::format("store: timed out waiting for {} of {} key(s): {}", missing.size(),
                                          c->wait_keys.size(), join_keys(missing));
      // The message, then (after a NUL) the missing keys as a wait lists them: the
      // client learns them from this reply alone, even if the server is gone next.
      std::vector<std::byte> payload;
      put_bytes(payload, msg);
      payload.push_back(std::byte{0});
      encode_wait_keys(payload, missing);
      c->waiting = false;
      c->wait_keys.clear();
      reply(*c, Reply::kTimeout, payload);
    }
  }

  void reply(Conn& c, Reply status, std::span<const std::byte> payload) {
    if (c.dead) return;
    if (c.out_done == c.out.size()) {
      c.out.clear();
      c.out_done = 0;
    }
    encode_reply(c.out, status, payload);
    if (c.out.size() - c.out_done > kMaxQueuedReplies) return drop(c, "client does not read its replies");
    flush(c);
  }

  void flush(Conn& c) {
    while (c.out_done < c.out.size()) {
      const net::IoResult r = net::send_some(c.fd.get(), c.out.data() + c.out_done, c.out.size() - c.out_done);
      if (r.moved() && r.bytes > 0) {
        c.out_done += r.bytes;
        continue;
      }
      if (r.would_block()) return;
      return drop(c, "");
    }
  }

  net::Fd listener_;
  net::Fd wake_read_;
  net::Fd wake_write_;
  const std::string address_;
  const uint16_t port_;
  const std::optional<AuthKey> key_;  ///< with a key, every connection authenticates first
  const uint8_t offer_;               ///< REMORA_ENCRYPT's cipher bits (0: off)
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<Conn>> conns_;               ///< server thread only
  std::map<std::string, std::vector<std::byte>> data_;     ///< server thread only
  std::thread thread_;
};

// --- client ----------------------------------------------------------------------------

class StoreClientCore {
 public:
  StoreClientCore(net::Fd fd, std::string address, std::string local_host)
      : fd_(std::move(fd)), address_(std::move(address)), local_host_(std::move(local_host)) {}

  const std::string& local_host() const { return local_host_; }

  struct Response {
    Reply status;
    std::vector<std::byte> payload;
  };

  /// One request, one reply. `wait` is how long the server may hold it.
  Result<Response> call(Op op, std::string_view key, std::span<const std::byte> value, std::optional<Duration> wait) {
    if (key.size() > kMaxKey || (key.empty() && op != Op::kWait)) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("store key must be 1..{} bytes (got {})", kMaxKey, key.size()));
    }
    if (value.size() > kMaxValue) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("store value must be at most {} bytes (got {})", kMaxValue, value.size()));
    }
    uint64_t timeout_ms = 0;
    Clock::time_point deadline = Clock::now() + kRequestTimeout;
    if (wait) {
      if (*wait < Duration::zero()) return Status(StatusCode::kInvalidArgument, "store: negative timeout");
      if (*wait == kForever) {
        timeout_ms = kNoTimeout;
        deadline = Clock::time_point::max();
      } else {
        timeout_ms = static_cast<uint64_t>(std::chrono::ceil<std::chrono::milliseconds>(*wait).count());
        // The server answers kTimeout itself; the grace covers the round trip.
        deadline = Clock::now() + *wait + std::chrono::seconds(10);
      }
    }
    std::vector<std::byte> frame;
    encode_request(frame, op, key, value, timeout_ms);

    std::lock_guard lock(mu_);
    if (!broken_.is_ok()) return broken_;
    auto fail = [&](const Status& s) {
      // A half-written request or half-read reply leaves the stream out of step.
      const StatusCode code = s.code() == StatusCode::kTimeout ? StatusCode::kTimeout : StatusCode::kPeerFailed;
      broken_ = Status(StatusCode::kPeerFailed, fmt::format("store at {}: {}", address_, s.message()));
      fd_.reset();
      return Status(code, fmt::format("store at {}: {}", address_, s.message()));
    };
    if (Status s = net::write_all(fd_.get(), frame, deadline); !s.is_ok()) return fail(s);
    std::byte head[kReplyHeaderBytes];
    if (Status s = net::read_exact(fd_.get(), head, deadline); !s.is_ok()) return fail(s);
    auto header = decode_reply_header(head);
    if (!header.is_ok()) return fail(header.status());
    Response r{header->status, {}};
    r.payload.resize(header->payload_bytes);
    if (Status s = net::read_exact(fd_.get(), r.payload, deadline); !s.is_ok()) return fail(s);
    return r;
  }

 private:
  std::mutex mu_;
  net::Fd fd_;
  Status broken_;
  const std::string address_;
  const std::string local_host_;
};

namespace {
/// A reply's message: its payload up to the first NUL (a timed-out wait's missing keys follow it).
std::string_view message_of(const StoreClientCore::Response& r) {
  const std::string_view all = as_view(r.payload);
  return all.substr(0, all.find('\0'));
}

/// kOk, or the server's refusal as a Status.
Status reply_status(const StoreClientCore::Response& r) {
  const std::string msg(message_of(r));
  switch (r.status) {
    case Reply::kOk: return Status::ok();
    case Reply::kTimeout: return Status(StatusCode::kTimeout, msg);
    case Reply::kInvalidArgument: return Status(StatusCode::kInvalidArgument, msg);
    case Reply::kUnauthenticated: return Status(StatusCode::kAccessDenied, msg);
  }
  return Status(StatusCode::kProtocol, "store: unknown reply status");
}

Result<wire::AuthMessage> read_auth(int fd, Clock::time_point deadline) {
  std::array<std::byte, wire::kAuthSize> in{};
  REMORA_RETURN_IF_ERROR(net::read_exact(fd, in, deadline));
  return wire::decode_auth(in);
}

/// The client's side of the store's authentication (docs/protocol.md): kAccessDenied
/// when the server lacks the key, holds another, or cannot prove it.
Status authenticate_client(int fd, const AuthKey& key, EncryptMode encrypt, std::string_view address,
                           Clock::time_point deadline) {
  auto denied = [&](std::string_view why) {
    return Status(StatusCode::kAccessDenied, fmt::format("rendezvous store at {}: {}", address, why));
  };
  const uint8_t offer = seal_offer(encrypt);
  REMORA_RETURN_IF_ERROR(
      net::write_all(fd, wire::encode_auth({.step = wire::AuthStep::kRequest, .seal = offer}), deadline));
  auto challenge = read_auth(fd, deadline);
  if (!challenge && challenge.status().code() == StatusCode::kPeerFailed) {
    return denied("closed the connection when we asked to authenticate: it holds no REMORA_AUTH_KEY");
  }
  if (!challenge) return challenge.status().with_context(fmt::format("rendezvous store at {}", address));
  if (challenge->step != wire::AuthStep::kChallenge) return denied("answered with an AUTH message that is not a challenge");
  // REMORA_ENCRYPT: the challenge names the one cipher chosen, or its whole offer when
  // the settings differ.
  const uint8_t cipher = challenge->seal;
  const bool one = net::single_cipher(cipher).has_value();
  if ((offer == 0) != (cipher == 0) || (offer != 0 && (!one || (offer & cipher) == 0))) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("rendezvous store at {}: encryption settings differ: this side has REMORA_ENCRYPT={}, "
                              "the store has REMORA_ENCRYPT={}; set the same REMORA_ENCRYPT on every process",
                              address, seal_word(offer), seal_word(cipher)));
  }
  const wire::AuthNonce nonce = wire::fresh_auth_nonce();
  const auto context = wire::store_auth_context();
  REMORA_RETURN_IF_ERROR(net::write_all(
      fd,
      wire::encode_auth({.step = wire::AuthStep::kResponse,
                         .nonce = nonce,
                         .proof = wire::auth_proof(key.bytes, wire::AuthRole::kClient, context, challenge->nonce, nonce)}),
      deadline));
  auto confirm = read_auth(fd, deadline);
  if (!confirm && confirm.status().code() == StatusCode::kPeerFailed) {
    return denied("closed the connection at our authentication proof");
  }
  if (!confirm) return confirm.status().with_context(fmt::format("rendezvous store at {}", address));
  if (confirm->step == wire::AuthStep::kRefused) return denied("refused our proof: its REMORA_AUTH_KEY differs from ours");
  if (confirm->step != wire::AuthStep::kConfirm ||
      !wire::verify_auth_proof(key.bytes, wire::AuthRole::kServer, context, challenge->nonce, nonce, confirm->proof)) {
    return denied("could not prove that it holds the shared secret: refusing it");
  }
  if (cipher != 0) {
    return seal_store_connection(fd, cipher, key, challenge->nonce, nonce, false)
        .with_context(fmt::format("rendezvous store at {}", address));
  }
  return Status::ok();
}

std::string host_of(const net::SockAddr& a) {
  std::string s = net::to_string(a);
  const auto colon = s.rfind(':');
  if (colon != std::string::npos) s.resize(colon);
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  return s;
}
}  // namespace

}  // namespace detail

using Clock = std::chrono::steady_clock;

// --- StoreServer ---------------------------------------------------------------------------

StoreServer::StoreServer(std::unique_ptr<detail::StoreServerCore> core) : core_(std::move(core)) {}
StoreServer::~StoreServer() = default;
uint16_t StoreServer::port() const { return core_->port(); }
std::string StoreServer::address() const { return core_->address(); }

Result<std::unique_ptr<StoreServer>> StoreServer::start(std::string_view address) {
  REMORA_ASSIGN_OR_RETURN(std::optional<AuthKey> key, AuthKey::from_env());
  REMORA_ASSIGN_OR_RETURN(EncryptMode encrypt, detail::encrypt_from_env());
  return start(address, key, encrypt);
}

Result<std::unique_ptr<StoreServer>> StoreServer::start(std::string_view address, const std::optional<AuthKey>& key,
                                                        EncryptMode encrypt) {
  REMORA_RETURN_IF_ERROR(detail::check_encrypt(encrypt, key));
  REMORA_ASSIGN_OR_RETURN(auto hp, net::parse_host_port(address));
  REMORA_ASSIGN_OR_RETURN(auto addrs, net::resolve(hp, /*passive=*/true));
  if (addrs.empty()) return Status(StatusCode::kUnreachable, fmt::format("store: {} resolves to nothing", address));
  auto fd = net::listen_tcp(addrs.front());
  if (!fd) return fd.status().with_context(fmt::format("store: listen on {}", address));
  REMORA_ASSIGN_OR_RETURN(auto bound, net::local_address(fd->get()));
  if (!key && !net::is_loopback(bound)) wire::warn_unauthenticated_listener("the rendezvous store", net::to_string(bound));
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) return net::errno_status(errno, "store: pipe2");
  uint16_t port = 0;
  if (bound.family() == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in*>(bound.get())->sin_port);
  } else {
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(bound.get())->sin6_port);
  }
  auto core = std::make_unique<detail::StoreServerCore>(std::move(*fd), net::Fd(pipe_fds[0]), net::Fd(pipe_fds[1]),
                                                        net::to_string(bound), port, key, encrypt);
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(core)));
}

// --- Store ---------------------------------------------------------------------------------

Store::Store(std::unique_ptr<detail::StoreClientCore> core) : core_(std::move(core)) {}
Store::~Store() = default;

Result<std::unique_ptr<Store>> Store::connect(std::string_view address, Duration timeout) {
  REMORA_ASSIGN_OR_RETURN(std::optional<AuthKey> key, AuthKey::from_env());
  REMORA_ASSIGN_OR_RETURN(EncryptMode encrypt, detail::encrypt_from_env());
  return connect(address, timeout, key, encrypt);
}

Result<std::unique_ptr<Store>> Store::connect(std::string_view address, Duration timeout,
                                              const std::optional<AuthKey>& key, EncryptMode encrypt) {
  REMORA_RETURN_IF_ERROR(detail::check_encrypt(encrypt, key));
  REMORA_ASSIGN_OR_RETURN(auto hp, net::parse_host_port(address));
  if (hp.host.empty() || hp.port == 0) {
    return Status(StatusCode::kInvalidArgument, fmt::format("store address \"{}\" needs a host and a port", address));
  }
  const auto start = Clock::now();
  const auto deadline = timeout == kForever ? Clock::time_point::max() : start + timeout;
  Status last(StatusCode::kTimeout, "no attempt finished");
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    auto addrs = net::resolve(hp, /*passive=*/false);
    if (addrs) {
      for (const auto& a : *addrs) {
        const auto attempt_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(5));
        auto fd = net::connect_tcp(a, attempt_deadline);
        if (!fd) {
          last = fd.status();
          continue;
        }
        if (Status s = net::configure_stream_socket(fd->get()); !s.is_ok()) return s;
        if (key) {
          // A refusal is final (not retried): the server is there and does not take our key.
          const auto auth_deadline = std::min(deadline, Clock::now() + detail::kRequestTimeout);
          REMORA_RETURN_IF_ERROR(detail::authenticate_client(fd->get(), *key, encrypt, address, auth_deadline));
        }
        REMORA_ASSIGN_OR_RETURN(auto local, net::local_address(fd->get()));
        auto core = std::make_unique<detail::StoreClientCore>(std::move(*fd), std::string(address),
                                                              detail::host_of(local));
        return std::unique_ptr<Store>(new Store(std::move(core)));
      }
    } else {
      last = addrs.status();
    }
    // The server may not be up yet (rank 0 starts later than the others): retry with a
    // growing pause until the deadline.
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(250));
  }
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  return Status(StatusCode::kTimeout, fmt::format("could not reach the rendezvous store at {} within {} ms "
                                                  "(is rank 0 running, and REMORA_STORE/MASTER_ADDR right?): {}",
                                                  address, waited, last.message()));
}

Status Store::set(std::string_view key, std::span<const std::byte> value) {
  REMORA_ASSIGN_OR_RETURN(auto r, core_->call(detail::Op::kSet, key, value, std::nullopt));
  return detail::reply_status(r);
}

Status Store::set(std::string_view key, std::string_view value) { return set(key, std::as_bytes(std::span(value))); }

Result<std::vector<std::byte>> Store::get(std::string_view key, Duration timeout) {
  REMORA_ASSIGN_OR_RETURN(auto r, core_->call(detail::Op::kGet, key, {}, timeout));
  REMORA_RETURN_IF_ERROR(detail::reply_status(r));
  return std::move(r.payload);
}

namespace detail {
namespace {
/// One wait for `keys`; its reply as it came.
Result<StoreClientCore::Response> wait_call(StoreClientCore& core, std::span<const std::string> keys, Duration timeout) {
  std::vector<std::byte> list;
  for (const auto& k : keys) {
    if (k.empty() || k.size() > kMaxKey) {
      return Status(StatusCode::kInvalidArgument, fmt::format("store key must be 1..{} bytes (got {})", kMaxKey, k.size()));
    }
  }
  store_protocol::encode_wait_keys(list, keys);
  return core.call(Op::kWait, {}, list, timeout);
}
}  // namespace
}  // namespace detail

Status Store::wait(std::span<const std::string> keys, Duration timeout) {
  if (keys.empty()) return Status::ok();
  REMORA_ASSIGN_OR_RETURN(auto r, detail::wait_call(*core_, keys, timeout));
  return detail::reply_status(r);
}

Result<std::vector<std::string>> Store::wait_missing(std::span<const std::string> keys, Duration timeout) {
  if (keys.empty()) return std::vector<std::string>{};
  REMORA_ASSIGN_OR_RETURN(auto r, detail::wait_call(*core_, keys, timeout));
  if (r.status != detail::Reply::kTimeout) {
    REMORA_RETURN_IF_ERROR(detail::reply_status(r));
    return std::vector<std::string>{};
  }
  const size_t nul = detail::message_of(r).size();
  if (nul == r.payload.size()) {
    return Status(StatusCode::kProtocol, "store: a timed-out wait's reply lists no missing keys");
  }
  auto missing = detail::store_protocol::decode_wait_keys(std::span(r.payload).subspan(nul + 1));
  if (!missing) return missing.status().with_context("store: a timed-out wait's missing keys");
  return std::move(missing).value();
}

Result<int64_t> Store::add(std::string_view key, int64_t delta) {
  std::vector<std::byte> v;
  core::append_le<uint64_t>(v, static_cast<uint64_t>(delta));
  REMORA_ASSIGN_OR_RETURN(auto r, core_->call(detail::Op::kAdd, key, v, std::nullopt));
  REMORA_RETURN_IF_ERROR(detail::reply_status(r));
  if (r.payload.size() != 8) return Status(StatusCode::kProtocol, "store: add reply is not 8 bytes");
  return static_cast<int64_t>(core::load_u64(r.payload.data()));
}

Result<bool> Store::check(std::string_view key) {
  REMORA_ASSIGN_OR_RETURN(auto r, core_->call(detail::Op::kCheck, key, {}, std::nullopt));
  REMORA_RETURN_IF_ERROR(detail::reply_status(r));
  if (r.payload.size() != 1) return Status(StatusCode::kProtocol, "store: check reply is not 1 byte");
  return r.payload[0] != std::byte{0};
}

Result<bool> Store::remove(std::string_view key) {
  REMORA_ASSIGN_OR_RETURN(auto r, core_->call(detail::Op::kRemove, key, {}, std::nullopt));
  REMORA_RETURN_IF_ERROR(detail::reply_status(r));
  if (r.payload.size() != 1) return Status(StatusCode::kProtocol, "store: remove reply is not 1 byte");
  return r.payload[0] != std::byte{0};
}

std::string Store::local_host() const { return core_->local_host(); }

}  // namespace remora
