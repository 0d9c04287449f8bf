// tools/rxq.cc — `remora rxq`: check, serve, undo, request (see rxq.h).
#include "rxq.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "doctor.h"
#include "remora/capabilities.h"
#include "zerocopy/dmabuf_source.h"
#include "zerocopy/ethtool_nl.h"
#include "zerocopy/flow_steering.h"
#include "zerocopy/netdev_nl.h"
#include "zerocopy/rxq_client.h"
#include "zerocopy/rxq_journal.h"
#include "zerocopy/rxq_protocol.h"

namespace remora::tools {
namespace {

namespace zc = remora::zerocopy;
namespace rq = remora::zerocopy::rxq;

/// What the stand-in buffer starts with, so that a client can show it reads rxq's memory.
constexpr std::string_view kStandinMarker = "remora rxq stand-in buffer: a memfd, not a dmabuf\n";
constexpr size_t kMaxClients = 256;
constexpr size_t kMaxFlowsPerClient = 64;

template <typename... Args>
void say(fmt::format_string<Args...> f, Args&&... args) {
  fmt::print("rxq: {}\n", fmt::format(f, std::forward<Args>(args)...));
  std::fflush(stdout);
}

ProbeAnswer answer(bool ok, std::string text, std::string fix = {}, const zc::KernelError& ke = {}) {
  ProbeAnswer a;
  a.state = ok ? ProbeAnswer::State::kYes : ProbeAnswer::State::kNo;
  (ok ? a.detail : a.reason) = std::move(text);
  a.fix = std::move(fix);
  a.error = ke.err;
  a.kernel_message = ke.message;
  return a;
}

/// What `serve` found on the interface, and whether it can go on.
struct Plan {
  std::string ifname;
  uint32_t ifindex = 0;
  std::vector<std::pair<std::string, ProbeAnswer>> checks;
  std::optional<uint8_t> tcp_data_split;   ///< rings-get's value (nullopt: not reported)
  std::optional<uint32_t> hds_thresh;      ///< rings-get's header-split threshold (nullopt: not reported)
  std::optional<uint32_t> rx_rings;        ///< ETHTOOL_GRXRINGS
  std::optional<std::vector<uint32_t>> indirection;  ///< ETHTOOL_GRXFHINDIR
  std::vector<uint32_t> reserved;          ///< the queues flows go to: the last `queues`
  bool can() const {
    for (const auto& [label, a] : checks) {
      if (!a.yes()) return false;
    }
    return true;
  }
};

/// Every check `serve` makes, none of which changes the interface. The header-split,
/// ntuple and dmabuf answers are the doctor's (probe_capabilities), with its reasons and fixes.
Result<Plan> check_interface(const std::string& ifname, uint32_t queues, bool standin) {
  Plan plan;
  plan.ifname = ifname;
  plan.ifindex = ::if_nametoindex(ifname.c_str());
  if (plan.ifindex == 0) {
    return Status(StatusCode::kInvalidArgument, fmt::format("no network interface '{}' in this network namespace", ifname));
  }
  REMORA_ASSIGN_OR_RETURN(const CapabilityReport report,
                          probe_capabilities({.interfaces = {ifname}, .try_bind = false}));
  const InterfaceCapabilities& c = report.interfaces.at(0);

  if (auto ethtool = zc::EthtoolClient::open()) {
    if (auto rings = ethtool->rings(plan.ifindex)) {
      plan.tcp_data_split = rings->tcp_data_split;
      plan.hds_thresh = rings->hds_thresh;
    }
  }
  // Header split: on already, or the driver lets it be set (the doctor's rings-set of the current value).
  if (c.header_split.yes()) {
    plan.checks.emplace_back("header split", c.header_split);
  } else {
    ProbeAnswer a = c.header_split_settable;
    if (a.yes()) a.detail = fmt::format("{} now; {}: rxq will turn it on", c.header_split.reason, a.detail);
    if (!a.yes() && a.fix.empty()) a.fix = c.header_split.fix;
    plan.checks.emplace_back("header split", a);
  }
  // The threshold under which payload stays with the headers (linear data on a devmem
  // stream, which remora refuses when linear data is not allowed): set to 0 if it is
  // not, but never a reason to stop (a driver may refuse it, and linear data is legal).
  plan.checks.emplace_back(
      "header-split threshold",
      answer(true, !plan.hds_thresh        ? "the driver reports none"
                   : *plan.hds_thresh == 0 ? "hds-thresh 0: every payload byte goes to the bound queues' buffer"
                                           : fmt::format("hds-thresh {}: rxq will set it to 0 (payloads under {} bytes "
                                                         "would arrive in host memory, as linear data)",
                                                         *plan.hds_thresh, *plan.hds_thresh)));
  plan.checks.emplace_back("ntuple flow steering", c.ntuple);

  REMORA_ASSIGN_OR_RETURN(zc::FlowSteering steering, zc::FlowSteering::open(ifname));
  zc::KernelError ke;
  if (auto n = steering.rx_rings(&ke)) {
    plan.rx_rings = *n;
    const bool enough = *n > queues;
    // The fix: more channels, where the driver has them; fewer reserved queues, where that helps.
    std::string fix;
    const std::optional<uint32_t> most = c.queue_counts.combined_max;
    if (!enough) {
      if (!most || *most > queues) fix = fmt::format("ethtool -L {} combined {}", ifname, queues + 1);
      if (*n > 1) fix += fmt::format("{}--queues {} or fewer", fix.empty() ? "" : "; or ", *n - 1);
    }
    plan.checks.emplace_back(
        "RX queues",
        answer(enough,
               enough ? fmt::format("{} RX queues: RSS keeps 0..{}, rxq reserves {}..{}", *n, *n - queues - 1,
                                    *n - queues, *n - 1)
                      : fmt::format("{} RX queue(s){}: reserving {} leaves none for RSS", *n,
                                    most ? fmt::format(" (at most {} channel(s))", *most) : "", queues),
               fix));
    for (uint32_t q = *n - std::min(*n, queues); q < *n; ++q) plan.reserved.push_back(q);
  } else {
    plan.checks.emplace_back("RX queues", answer(false, n.status().message(), zc::steering_hint(ke.err, ifname, ""), ke));
  }
  ke = {};
  if (auto table = steering.indirection(&ke)) {
    plan.indirection = *table;
    plan.checks.emplace_back("RSS indirection", answer(!table->empty(), fmt::format("{} buckets", table->size()),
                                                       table->empty() ? "the driver reports an empty table" : ""));
  } else {
    plan.checks.emplace_back("RSS indirection",
                             answer(false, table.status().message(), zc::steering_hint(ke.err, ifname, ""), ke));
  }
  if (auto netdev = zc::NetdevClient::open()) {
    plan.checks.emplace_back("devmem bind-rx", answer(netdev->has_bind_rx(),
                                                      netdev->has_bind_rx() ? "the netdev family has bind-rx"
                                                                            : "this kernel's netdev family has no bind-rx",
                                                      netdev->has_bind_rx() ? "" : "Linux 6.12 or later"));
  } else {
    plan.checks.emplace_back("devmem bind-rx", answer(false, netdev.status().message(), "Linux 6.12 or later"));
  }
  if (standin) {
    plan.checks.emplace_back("dmabuf", answer(true, "stand-in mode: a memfd stands in for the dmabuf (bind-rx will "
                                                    "refuse it; nothing real is bound)"));
  } else {
    plan.checks.emplace_back("dmabuf", report.host.dmabuf_source);
  }
  if (plan.reserved.empty()) {
    for (uint32_t q = 0; q < queues; ++q) plan.reserved.push_back(q);  // stand-in mode only: nominal ids
  }
  return plan;
}

void print_checks(const Plan& plan) {
  fmt::print("remora rxq: interface {} (index {})\n", plan.ifname, plan.ifindex);
  for (const auto& [label, a] : plan.checks) print_answer(label, a);
  std::fflush(stdout);
}

// ---- serve ----

struct ServeOptions {
  std::string ifname;
  uint32_t queues = 1;
  uint32_t client_queues = 0;  ///< more reserved queues, one per client with a dmabuf of its own or its own zcrx
  std::string socket;
  std::string journal;
  uint64_t dmabuf_size = 0;
  bool standin = false;
};

/// A memfd of `size` bytes that starts with kStandinMarker: the stand-in mode's buffer.
Result<zc::DmabufSource> standin_buffer(uint64_t size) {
  zc::DmabufSource s;
  s.kind = zc::DmabufSource::Kind::kMemfd;
  s.fd = net::Fd(::memfd_create("remora-rxq-standin", MFD_CLOEXEC));
  if (!s.fd.valid()) return net::errno_status(errno, "memfd_create");
  if (::ftruncate(s.fd.get(), static_cast<off_t>(size)) != 0) return net::errno_status(errno, "ftruncate the memfd");
  if (::pwrite(s.fd.get(), kStandinMarker.data(), kStandinMarker.size(), 0) !=
      static_cast<ssize_t>(kStandinMarker.size())) {
    return net::errno_status(errno, "write the stand-in marker");
  }
  s.size = size;
  s.why_no_dmabuf = "stand-in mode";
  return s;
}

/// The listening Unix socket at `path`. A socket file nobody answers on (left by a killed
/// rxq) is replaced; one that answers is another rxq's, and is refused.
Result<net::Fd> listen_unix(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return Status(StatusCode::kInvalidArgument, fmt::format("--socket '{}': empty or too long", path));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Status(StatusCode::kInvalidArgument, fmt::format("--socket {}: exists and is not a socket", path));
    }
    if (auto other = rq::Client::connect(path)) {
      return Status(StatusCode::kInvalidArgument, fmt::format("--socket {}: another rxq serves there", path));
    }
    ::unlink(path.c_str());
  }
  net::Fd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s.valid()) return net::errno_status(errno, "socket(AF_UNIX, SOCK_SEQPACKET)");
  if (::bind(s.get(), static_cast<sockaddr*>(static_cast<void*>(&addr)), sizeof addr) != 0) {
    return net::errno_status(errno, fmt::format("bind {}", path));
  }
  if (::listen(s.get(), 64) != 0) return net::errno_status(errno, fmt::format("listen {}", path));
  return s;
}

class Server {
 public:
  Server(ServeOptions o, Plan plan, rq::Journal journal, zc::DmabufSource buffer)
      : o_(std::move(o)), plan_(std::move(plan)), journal_(std::move(journal)), buffer_(std::move(buffer)) {}

  /// Applies the changes, binds, serves until a signal, undoes. The exit code.
  int run() {
    // The signals wait in the signalfd from here on, so that one that comes while the
    // interface is being changed is taken after, and undoes it.
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
    ::sigprocmask(SIG_BLOCK, &set, nullptr);
    signals_ = net::Fd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!signals_.valid()) {
      fmt::print(stderr, "remora rxq serve: signalfd: {}\n", zc::errno_text(errno));
      return finish(kRxqError);
    }
    if (Status s = apply(); !s) {
      fmt::print(stderr, "remora rxq serve: {}\n", s.message());
      return finish(kRxqError);
    }
    auto listening = listen_unix(o_.socket);
    if (!listening) {
      fmt::print(stderr, "remora rxq serve: {}\n", listening.status().message());
      return finish(kRxqError);
    }
    listen_ = std::move(*listening);
    say("serving {} queues {} on {} (journal {}){}", o_.ifname, fmt::join(plan_.reserved, ","), o_.socket,
        journal_.path(),
        free_client_queues_.empty()
            ? std::string()
            : fmt::format("; queues {} for clients' own dmabufs or zcrx", fmt::join(free_client_queues_, ",")));
    const int code = loop();
    ::unlink(o_.socket.c_str());
    return finish(code);
  }

 private:
  /// A client's own queue: for its own dmabuf (TCPX's model), bound to it, or for its
  /// io_uring zcrx (`zcrx`: the client registers the queue with its ring; nothing bound).
  struct OwnBinding {
    uint32_t queue = 0;
    bool zcrx = false;                         ///< a queue for its zcrx: no dmabuf, no binding
    uint64_t size = 0;                         ///< the dmabuf's bytes; 0 for zcrx
    std::optional<zc::DevmemBinding> binding;  ///< bind-rx's (none in stand-in mode); unbinds when it goes
    net::Fd dmabuf;                            ///< held while bound
  };
  struct Peer {
    net::Fd fd;
    pid_t pid = 0;
    uid_t uid = 0;
    std::vector<uint64_t> entries;  ///< its flows' journal ids
    std::optional<OwnBinding> own;  ///< its own queue, if it gave a dmabuf or reserved one for zcrx
  };

  Status apply() {
    if (o_.standin) {
      say("stand-in mode: the interface is left as it is; only the clients' flows are journalled");
    } else {
      if (plan_.tcp_data_split != zc::uapi::kEthtoolTcpDataSplitEnabled) {
        rq::JournalEntry e;
        e.kind = rq::JournalEntry::Kind::kHeaderSplit;
        e.header_split = plan_.tcp_data_split.value_or(zc::uapi::kEthtoolTcpDataSplitUnknown);
        REMORA_RETURN_IF_ERROR(journal_.add(e).status());
        REMORA_ASSIGN_OR_RETURN(zc::EthtoolClient ethtool, zc::EthtoolClient::open());
        REMORA_RETURN_IF_ERROR(ethtool.set_tcp_data_split(plan_.ifindex, zc::uapi::kEthtoolTcpDataSplitEnabled));
        say("header split: on");
      }
      if (plan_.hds_thresh && *plan_.hds_thresh != 0) {
        rq::JournalEntry e;
        e.kind = rq::JournalEntry::Kind::kHdsThresh;
        e.hds_thresh = *plan_.hds_thresh;
        REMORA_ASSIGN_OR_RETURN(const uint64_t id, journal_.add(e));
        REMORA_ASSIGN_OR_RETURN(zc::EthtoolClient ethtool, zc::EthtoolClient::open());
        if (Status s = ethtool.set_hds_thresh(plan_.ifindex, 0); s) {
          say("header-split threshold: 0 (was {})", e.hds_thresh);
        } else {
          // Not fatal: small payloads then arrive as linear data, which the receive path
          // takes from the iov (an endpoint that forbids linear data refuses them).
          REMORA_RETURN_IF_ERROR(journal_.remove(id));
          say("header-split threshold stays {}: {}", e.hds_thresh, s.message());
        }
      }
      rq::JournalEntry e;
      e.kind = rq::JournalEntry::Kind::kRss;
      e.rss = *plan_.indirection;
      REMORA_RETURN_IF_ERROR(journal_.add(e).status());
      REMORA_ASSIGN_OR_RETURN(zc::FlowSteering steering, zc::FlowSteering::open(o_.ifname));
      const uint32_t rss_queues = *plan_.rx_rings - static_cast<uint32_t>(plan_.reserved.size());
      REMORA_RETURN_IF_ERROR(steering.set_indirection(zc::equal_indirection(static_cast<uint32_t>(e.rss.size()), rss_queues)));
      say("RSS: queues 0..{} (ethtool -X {} equal {})", rss_queues - 1, o_.ifname, rss_queues);
    }
    // The last client_queues reserved queues are the clients' own; the rest take rxq's buffer.
    const auto split = plan_.reserved.end() - static_cast<std::ptrdiff_t>(o_.client_queues);
    free_client_queues_.assign(split, plan_.reserved.end());
    plan_.reserved.erase(split, plan_.reserved.end());
    zc::KernelError ke;
    auto b = zc::DevmemBinding::bind_rx(plan_.ifindex, buffer_.fd.get(), plan_.reserved, &ke);
    if (b) {
      binding_.emplace(std::move(*b));
      say("bind-rx: {} bound to queues {}: binding id {}", buffer_.describe(), fmt::join(plan_.reserved, ","),
          binding_->id());
    } else if (o_.standin) {
      say("bind-rx refused, as expected of a stand-in: {}", b.status().message());
    } else {
      return b.status();
    }
    return Status::ok();
  }

  /// Undoes everything left in the journal (reverse order) after the binding ends.
  int finish(int code) {
    for (auto& [fd, peer] : peers_) drop_flows(&peer);
    peers_.clear();
    binding_.reset();
    const rq::UndoOutcome out = rq::undo_all(&journal_);
    for (const auto& d : out.done) say("undone: {}", d);
    for (const auto& f : out.failed) fmt::print(stderr, "remora rxq: could not undo {}\n", f);
    if (!out.ok()) {
      fmt::print(stderr, "remora rxq: the journal {} keeps what is left: `remora rxq undo --journal {}`\n",
                 journal_.path(), journal_.path());
      return kRxqError;
    }
    say("stopped; {} is as it was", o_.ifname);
    return code;
  }

  int loop() {
    for (;;) {
      std::vector<pollfd> fds = {{signals_.get(), POLLIN, 0}, {listen_.get(), POLLIN, 0}};
      for (const auto& [fd, peer] : peers_) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        fmt::print(stderr, "remora rxq serve: poll: {}\n", zc::errno_text(errno));
        return kRxqError;
      }
      if (fds[0].revents != 0) {
        signalfd_siginfo si{};
        if (::read(signals_.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
          say("signal {}: undoing", strsignal(static_cast<int>(si.ssi_signo)));
          return kRxqOk;
        }
      }
      if (fds[1].revents != 0) accept_peer();
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents != 0) serve_peer(fds[i].fd);
      }
    }
  }

  void accept_peer() {
    net::Fd fd(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) return;
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return;
    if (peers_.size() >= kMaxClients) {
      say("refused a client (pid {}): {} clients already", cred.pid, kMaxClients);
      return;
    }
    say("client pid {} uid {} connected", cred.pid, cred.uid);
    const int key = fd.get();
    peers_[key] = Peer{std::move(fd), cred.pid, cred.uid, {}, std::nullopt};
  }

  void serve_peer(int key) {
    Peer& peer = peers_.at(key);
    auto packet = rq::recv_packet(peer.fd.get(), rq::kRequestBytes, net::Clock::now() + std::chrono::seconds(1));
    if (!packet || packet->eof) {
      say("client pid {} gone{}: removing its {} flow(s)", peer.pid,
          packet ? "" : " (" + packet.status().message() + ")", peer.entries.size());
      drop_flows(&peer);  // its rules first, then its own binding and queue
      if (peer.own) {
        free_client_queues_.push_back(peer.own->queue);
        if (peer.own->zcrx) {
          say("client pid {}: its zcrx queue {} released", peer.pid, peer.own->queue);
        } else {
          say("client pid {}: its dmabuf on queue {} released", peer.pid, peer.own->queue);
        }
      }
      peers_.erase(key);
      return;
    }
    rq::BindFlowReply reply;
    int pass_fd = -1;
    auto type = rq::request_type(packet->bytes);
    if (type && *type == rq::kTypeBindDmabuf) {
      reply.type = rq::kTypeBindDmabufReply;
      bind_dmabuf(&peer, packet->bytes, std::move(packet->fd), &reply);
      if (Status s = rq::send_packet(peer.fd.get(), rq::encode(reply)); !s)
        say("client pid {}: {}", peer.pid, s.message());
      return;
    }
    if (type && *type == rq::kTypeReserveQueue) {
      reply.type = rq::kTypeReserveQueueReply;
      reserve_queue(&peer, packet->bytes, packet->fd.valid(), &reply);  // a descriptor goes with `packet`
      if (Status s = rq::send_packet(peer.fd.get(), rq::encode(reply)); !s)
        say("client pid {}: {}", peer.pid, s.message());
      return;
    }
    auto request = rq::decode_request(packet->bytes);
    if (!request) {
      reply.error = EINVAL;
      reply.message = request.status().message();
    } else if (packet->fd.valid()) {
      reply.error = EINVAL;
      reply.message = "a request must not carry a descriptor";
    } else if (peer.entries.size() >= kMaxFlowsPerClient) {
      reply.error = ENOSPC;
      reply.message = fmt::format("{} flows per client at most", kMaxFlowsPerClient);
    } else {
      pass_fd = bind_flow(&peer, request->flow, &reply);
    }
    if (Status s = rq::send_packet(peer.fd.get(), rq::encode(reply), pass_fd); !s) {
      say("client pid {}: {}", peer.pid, s.message());
    }
  }

  /// Binds the dmabuf `peer` passed (`fd`) to a client queue of its own; `reply` says
  /// how, or why not.
  void bind_dmabuf(Peer* peer, std::span<const std::byte> bytes, net::Fd fd, rq::BindFlowReply* reply) {
    auto request = rq::decode_bind_dmabuf(bytes);
    auto refuse = [&](int err, std::string why) {
      reply->error = err;
      reply->message = std::move(why);
      say("client pid {}: refused its dmabuf: {}", peer->pid, reply->message);
    };
    if (!request) return refuse(EINVAL, request.status().message());
    if (!fd.valid()) return refuse(EINVAL, "a bind-dmabuf request must carry the dmabuf's descriptor");
    if (o_.client_queues == 0) {
      return refuse(EOPNOTSUPP, "this rxq binds no clients' dmabufs (start it with --client-queues N)");
    }
    if (peer->own) {
      return refuse(EEXIST, peer->own->zcrx
                                ? fmt::format("this client has a queue of its own already (queue {}, "
                                              "reserved for its io_uring zcrx)",
                                              peer->own->queue)
                                : fmt::format("this client's dmabuf is bound already (queue {})", peer->own->queue));
    }
    if (!peer->entries.empty()) {
      return refuse(EBUSY, "this client has flows into rxq's buffer already: give the dmabuf before any flow");
    }
    const off_t end = ::lseek(fd.get(), 0, SEEK_END);
    if (end < 0 || static_cast<uint64_t>(end) != request->dmabuf_size) {
      return refuse(EINVAL, end < 0 ? fmt::format("the descriptor has no size: {}", zc::errno_text(errno))
                                    : fmt::format("the descriptor holds {} bytes, the request says {}", end,
                                                  request->dmabuf_size));
    }
    if (free_client_queues_.empty()) {
      return refuse(EBUSY, fmt::format("all {} queue(s) for clients' own dmabufs are taken", o_.client_queues));
    }
    OwnBinding own;
    own.queue = free_client_queues_.back();
    own.size = request->dmabuf_size;
    zc::KernelError ke;
    const uint32_t queues[] = {own.queue};
    auto b = zc::DevmemBinding::bind_rx(plan_.ifindex, fd.get(), queues, &ke);
    if (b) {
      own.binding.emplace(std::move(*b));
    } else if (!o_.standin) {
      return refuse(ke.err != 0 ? ke.err : EIO, b.status().message());
    }
    own.dmabuf = std::move(fd);
    free_client_queues_.pop_back();
    reply->binding_id = own.binding ? own.binding->id() : 0;
    reply->queue = own.queue;
    reply->rule_location = rq::kNoRule;
    reply->dmabuf_size = own.size;
    reply->flags = rq::kFlagClientDmabuf | (own.binding ? 0u : rq::kFlagStandin);
    if (!own.binding) reply->message = "stand-in mode: not bound (" + b.status().message() + ")";
    say("client pid {}: its dmabuf of {} bytes {} queue {}", peer->pid, own.size,
        own.binding ? fmt::format("bound (binding id {}) to", own.binding->id()) : std::string("taken, unbound, for"),
        own.queue);
    peer->own = std::move(own);
  }

  /// Reserves a client queue for `peer`'s own io_uring zcrx (`with_fd`: the request
  /// carried a descriptor, which it must not); `reply` says which, or why not. Nothing is
  /// bound: the client registers the queue with its ring itself.
  void reserve_queue(Peer* peer, std::span<const std::byte> bytes, bool with_fd, rq::BindFlowReply* reply) {
    auto request = rq::decode_reserve_queue(bytes);
    auto refuse = [&](int err, std::string why) {
      reply->error = err;
      reply->message = std::move(why);
      say("client pid {}: refused a queue for its io_uring zcrx: {}", peer->pid, reply->message);
    };
    if (!request) return refuse(EINVAL, request.status().message());
    if (with_fd) return refuse(EINVAL, "a reserve-queue request must not carry a descriptor");
    if (o_.client_queues == 0) {
      return refuse(EOPNOTSUPP, "this rxq reserves no queues for clients (start it with --client-queues N)");
    }
    if (peer->own) {
      return refuse(EEXIST, fmt::format("this client has a queue of its own already (queue {}, {})", peer->own->queue,
                                        peer->own->zcrx ? "reserved for its io_uring zcrx" : "bound to its dmabuf"));
    }
    if (!peer->entries.empty()) {
      return refuse(EBUSY, "this client has flows into rxq's buffer already: reserve the queue before any flow");
    }
    if (free_client_queues_.empty()) {
      return refuse(EBUSY, fmt::format("all {} client queue(s) are taken", o_.client_queues));
    }
    OwnBinding own;
    own.queue = free_client_queues_.back();
    own.zcrx = true;
    free_client_queues_.pop_back();
    reply->binding_id = plan_.ifindex;  // no binding: the interface the client registers zcrx on
    reply->queue = own.queue;
    reply->rule_location = rq::kNoRule;
    reply->dmabuf_size = 0;
    reply->flags = rq::kFlagClientZcrx | (o_.standin ? rq::kFlagStandin : 0u);
    if (o_.standin) reply->message = "stand-in mode: the interface is left as it is (RSS not changed)";
    say("client pid {}: queue {} reserved for its io_uring zcrx ({} index {})", peer->pid, own.queue, o_.ifname,
        plan_.ifindex);
    peer->own = std::move(own);
  }

  /// Steers `flow` for `peer`; the fd to pass, or -1 with `reply` saying why not (a
  /// client with a queue of its own gets -1 and no error: its flows go to its queue).
  int bind_flow(Peer* peer, const zc::TcpFlow& flow, rq::BindFlowReply* reply) {
    const uint32_t queue = peer->own ? peer->own->queue : plan_.reserved[next_queue_++ % plan_.reserved.size()];
    rq::JournalEntry e;
    e.kind = rq::JournalEntry::Kind::kFlow;
    e.pid = peer->pid;
    e.queue = queue;
    e.flow = flow.describe();
    auto steering = zc::FlowSteering::open(o_.ifname);
    zc::KernelError ke;
    auto location = steering ? steering->insert_rule(flow, queue, &ke) : Result<uint32_t>(steering.status());
    if (location) {
      e.rule_location = *location;
    } else if (o_.standin) {
      reply->flags |= rq::kFlagRuleRefused;
      reply->message = location.status().message();
    } else {
      reply->error = ke.err != 0 ? ke.err : EIO;
      reply->message = location.status().message();
      return -1;
    }
    auto id = journal_.add(e);
    if (!id) {
      if (e.rule_location) (void)steering->delete_rule(*e.rule_location);
      reply->error = EIO;
      reply->message = id.status().message();
      return -1;
    }
    peer->entries.push_back(*id);
    say("client pid {}: {} -> queue {} ({})", peer->pid, e.flow, queue,
        e.rule_location ? fmt::format("rule {}", *e.rule_location) : "no rule: " + reply->message);
    reply->queue = queue;
    reply->rule_location = e.rule_location.value_or(rq::kNoRule);
    if (peer->own && peer->own->zcrx) {
      reply->binding_id = plan_.ifindex;  // as in the reserve-queue reply
      reply->dmabuf_size = 0;
      reply->flags |= rq::kFlagClientZcrx | (o_.standin ? rq::kFlagStandin : 0u);
      return -1;
    }
    if (peer->own) {
      reply->binding_id = peer->own->binding ? peer->own->binding->id() : 0;
      reply->dmabuf_size = peer->own->size;
      reply->flags |= rq::kFlagClientDmabuf | (peer->own->binding ? 0u : rq::kFlagStandin);
      return -1;
    }
    reply->binding_id = binding_ ? binding_->id() : 0;
    reply->dmabuf_size = buffer_.size;
    if (!buffer_.is_dmabuf()) reply->flags |= rq::kFlagStandin;
    return buffer_.fd.get();
  }

  void drop_flows(Peer* peer) {
    for (auto it = peer->entries.rbegin(); it != peer->entries.rend(); ++it) {
      const auto& all = journal_.entries();
      const auto e = std::find_if(all.begin(), all.end(), [&](const rq::JournalEntry& x) { return x.id == *it; });
      if (e == all.end()) continue;
      if (Status s = rq::undo_entry(journal_, *e); !s) {
        fmt::print(stderr, "remora rxq: could not remove client pid {}'s {}: {} (left in the journal)\n", peer->pid,
                   e->flow, s.message());
        continue;
      }
      const std::string flow = e->flow;
      if (Status s = journal_.remove(*it); !s) fmt::print(stderr, "remora rxq: {}\n", s.message());
      say("removed client pid {}'s {}", peer->pid, flow);
    }
    peer->entries.clear();
  }

  ServeOptions o_;
  Plan plan_;
  rq::Journal journal_;
  zc::DmabufSource buffer_;
  std::optional<zc::DevmemBinding> binding_;
  net::Fd listen_;
  net::Fd signals_;
  std::map<int, Peer> peers_;
  size_t next_queue_ = 0;
  std::vector<uint32_t> free_client_queues_;  // reserved for clients' own dmabufs or zcrx, not taken
};

int serve(const ServeOptions& o) {
  auto plan = check_interface(o.ifname, o.queues + o.client_queues, o.standin);
  if (!plan) {
    fmt::print(stderr, "remora rxq serve: {}\n", plan.status().message());
    return kRxqError;
  }
  print_checks(*plan);
  if (!plan->can()) {
    if (!o.standin) {
      fmt::print("remora rxq: {} cannot be a devmem receive interface (the reasons are above); nothing was changed.\n",
                 o.ifname);
      return kRxqRefused;
    }
    say("stand-in mode: going on despite the 'no' answers above, changing nothing on {}", o.ifname);
  }
  auto buffer = o.standin ? standin_buffer(o.dmabuf_size) : zc::best_dmabuf(o.dmabuf_size);
  if (!buffer) {
    fmt::print(stderr, "remora rxq serve: {}\n", buffer.status().message());
    return kRxqError;
  }
  if (!o.standin && !buffer->is_dmabuf()) {
    fmt::print("remora rxq: no dmabuf to bind: {}; nothing was changed.\n", buffer->why_no_dmabuf);
    return kRxqRefused;
  }
  std::string journal_path = o.journal;
  if (journal_path.empty()) {
    ::mkdir("/run/remora", 0755);
    journal_path = fmt::format("/run/remora/rxq-{}.journal", o.ifname);
  }
  auto journal = rq::Journal::create(journal_path, o.ifname, plan->ifindex);
  if (!journal) {
    fmt::print(stderr, "remora rxq serve: {}\n", journal.status().message());
    return kRxqError;
  }
  Server server(o, std::move(*plan), std::move(*journal), std::move(*buffer));
  return server.run();
}

// ---- undo, request ----

int undo(const std::string& path) {
  auto journal = rq::Journal::load(path);
  if (!journal) {
    fmt::print(stderr, "remora rxq undo: {}\n", journal.status().message());
    return kRxqError;
  }
  const size_t n = journal->entries().size();
  const rq::UndoOutcome out = rq::undo_all(&*journal);
  for (const auto& d : out.done) say("undone: {}", d);
  for (const auto& f : out.failed) fmt::print("remora rxq undo: could not undo {}\n", f);
  say("{} of {} entries undone{}", out.done.size(), n, out.ok() ? "; journal removed" : "; the rest stay in the journal");
  return out.ok() ? kRxqOk : kRxqError;
}

Result<std::array<uint8_t, 16>> parse_ip(const std::string& text, bool* ipv6) {
  std::array<uint8_t, 16> a{};
  if (text.empty()) return a;
  const bool v6 = text.find(':') != std::string::npos;
  if (::inet_pton(v6 ? AF_INET6 : AF_INET, text.c_str(), a.data()) != 1) {
    return Status(StatusCode::kInvalidArgument, fmt::format("'{}' is not an IP address", text));
  }
  *ipv6 = *ipv6 || v6;
  return a;
}

int request(const std::string& socket, uint16_t port, uint16_t src_port, const std::string& dst_ip,
            const std::string& src_ip, bool hold) {
  zc::TcpFlow flow;
  flow.dst_port = port;
  flow.src_port = src_port;
  auto dst = parse_ip(dst_ip, &flow.ipv6);
  auto src = dst ? parse_ip(src_ip, &flow.ipv6) : dst;
  if (!dst || !src) {
    fmt::print(stderr, "remora rxq request: {}\n", (!dst ? dst : src).status().message());
    return kRxqUsage;
  }
  flow.dst_addr = *dst;
  flow.src_addr = *src;
  auto client = rq::Client::connect(socket);
  if (!client) {
    fmt::print(stderr, "remora rxq request: {}\n", client.status().message());
    return kRxqError;
  }
  auto lease = client->bind_flow(flow);
  if (!lease) {
    fmt::print(stderr, "remora rxq request: {}\n", lease.status().message());
    return kRxqError;
  }
  const rq::BindFlowReply& r = lease->reply;
  fmt::print("rxq request: {}: binding {} queue {} rule {} buffer {} bytes ({}){}\n", flow.describe(), r.binding_id,
             r.queue, r.rule_location == rq::kNoRule ? "none" : std::to_string(r.rule_location), r.dmabuf_size,
             (r.flags & rq::kFlagStandin) != 0 ? "stand-in memfd" : "dmabuf",
             r.message.empty() ? "" : "; " + r.message);
  if ((r.flags & rq::kFlagStandin) != 0) {
    // Only a stand-in can be read by the CPU: show that the descriptor is rxq's buffer.
    std::string head(kStandinMarker.size(), '\0');
    const ssize_t n = ::pread(lease->dmabuf.get(), head.data(), head.size(), 0);
    head.resize(n > 0 ? static_cast<size_t>(n) : 0);
    fmt::print("rxq request: buffer starts: {}", head);
  }
  std::fflush(stdout);
  if (hold) {
    fmt::print("rxq request: holding the flow until stdin closes\n");
    std::fflush(stdout);
    char c;
    for (;;) {
      const ssize_t n = ::read(STDIN_FILENO, &c, 1);
      if (n == 0 || (n < 0 && errno != EINTR)) break;
    }
  }
  return kRxqOk;
}

}  // namespace

RxqCli::RxqCli(CLI::App* parent) {
  rxq_ = parent->add_subcommand(
      "rxq",
      "the receive data-path manager for devmem TCP: header split, RX queues reserved from RSS, ntuple rules per "
      "flow, the dmabuf bound to the queues and handed to applications over a Unix socket; everything undone when "
      "it stops. On an interface that cannot, it refuses with the reasons and changes nothing (exit 3).");
  rxq_->require_subcommand(1);
  auto add_interface = [this](CLI::App* cmd) {
    cmd->add_option("-i,--ifname", ifname_, "the network interface")->required();
    cmd->add_option("-q,--queues", queues_, "RX queues to reserve for devmem flows (the last ones)")
        ->check(CLI::Range(1u, 1024u));
    cmd->add_option("--client-queues", client_queues_,
                    "more RX queues to reserve, one for each client that hands rxq a dmabuf of its own (its device "
                    "memory, TCPX's model) or reserves a queue for its own io_uring zero-copy receive (zcrx: the "
                    "client registers the queue with its ring), and gets its flows steered there (default 0: none)")
        ->check(CLI::Range(0u, 1024u));
  };
  check_ = rxq_->add_subcommand("check", "what `serve` checks, and why it would refuse (exit 0: it can, 3: it cannot)");
  add_interface(check_);
  serve_ = rxq_->add_subcommand("serve", "set the interface up, bind, and serve applications until SIGINT/SIGTERM");
  add_interface(serve_);
  serve_->add_option("-s,--socket", socket_, "the Unix socket applications connect to")->required();
  serve_->add_option("--journal", journal_, "the restore journal (default /run/remora/rxq-<ifname>.journal)");
  serve_->add_option("--dmabuf-size", dmabuf_size_, "bytes of the buffer to bind (default 64 MiB)")
      ->check(CLI::Range(uint64_t{4096}, uint64_t{1} << 40));
  serve_->add_flag("--standin", standin_,
                   "TEST ONLY: a memfd stands in for the dmabuf and the interface is left as it is (the checks are "
                   "printed, refusals do not stop it); clients and their flows are served and journalled");
  undo_ = rxq_->add_subcommand("undo", "undo what a killed `rxq serve` left, from its journal");
  undo_->add_option("--journal", journal_, "the journal `serve` wrote")->required();
  request_ = rxq_->add_subcommand("request", "ask `rxq serve` to steer a flow, and print its answer");
  request_->add_option("-s,--socket", socket_, "rxq's Unix socket")->required();
  request_->add_option("-p,--port", port_, "the flow's local (destination) TCP port")->required()->check(
      CLI::Range(1, 65535));
  request_->add_option("--src-port", src_port_, "the remote (source) port (default: any)");
  request_->add_option("--dst-ip", dst_ip_, "the local address (default: any)");
  request_->add_option("--src-ip", src_ip_, "the remote address (default: any)");
  request_->add_flag("--hold", hold_, "keep the connection (and so the flow) until stdin closes");
}

bool RxqCli::given() const { return rxq_->parsed(); }

int RxqCli::run() {
  if (check_->parsed()) {
    auto plan = check_interface(ifname_, queues_ + client_queues_, false);
    if (!plan) {
      fmt::print(stderr, "remora rxq check: {}\n", plan.status().message());
      return kRxqError;
    }
    print_checks(*plan);
    fmt::print("remora rxq: {} {} a devmem receive interface.\n", ifname_, plan->can() ? "can be" : "cannot be");
    return plan->can() ? kRxqOk : kRxqRefused;
  }
  if (serve_->parsed()) {
    return serve({.ifname = ifname_,
                  .queues = queues_,
                  .client_queues = client_queues_,
                  .socket = socket_,
                  .journal = journal_,
                  .dmabuf_size = dmabuf_size_,
                  .standin = standin_});
  }
  if (undo_->parsed()) return undo(journal_);
  if (request_->parsed()) return request(socket_, port_, src_port_, dst_ip_, src_ip_, hold_);
  return kRxqUsage;
}

}  // namespace remora::tools
