// transport/endpoint.cc — the endpoint: set-up, tagged send/recv (eager, rendezvous),
// the entry points of one-sided operations and notifications (their parts are
// rma_initiator.cc, rma_target.cc and notifications.cc), the control stream and its
// dispatch, the lingering close, failure, and the callbacks of the parts' Owner
// interfaces.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "core/log.h"
#include "datapath/checksum.h"
#include "net/io.h"
#include "net/same_host.h"
#include "transport/endpoint_core.h"

namespace remora {
namespace detail {

using wire::ChunkFrame;
using wire::CreditFrame;
using wire::CtsFrame;
using wire::CtsStatus;
using wire::EagerFrame;
using wire::GoodbyeFrame;
using wire::RtsFrame;

namespace {
constexpr size_t kEagerPrefix = wire::kFrameHeaderSize + wire::kEagerBodySize;

uint64_t tag_value(Tag t) { return static_cast<uint64_t>(t); }

/// This process's HOST frame (docs/protocol.md, "Same-host pulls").
wire::HostFrame host_frame(bool can_pull) {
  const net::HostIdentity me = net::this_host();
  return wire::HostFrame{.pid = me.pid,
                         .boot_id = me.boot_id,
                         .netns = me.netns,
                         .probe_address = me.probe_address,
                         .probe_value = me.probe_value,
                         .can_pull = can_pull};
}

}  // namespace

EndpointCore::EndpointCore(std::shared_ptr<engine::ProgressEngine> engine, const Config& config, Params params)
    : engine_(std::move(engine)),
      config_(config),
      params_(std::move(params)),
      chunks_(*this, params_.streams, config_.chunk_bytes, params_.peer) {
  data_watch_.resize(params_.streams);
  for (uint16_t i = 0; i < data_watch_.size(); ++i) data_watch_[i].handler = std::make_unique<DataHandler>(this, i);
  ctl_rx_.resize(std::max<size_t>(size_t{64} << 10, 2 * (config_.eager_limit + kEagerPrefix)));
  eager_limit_ = std::min<uint64_t>(config_.eager_limit, params_.peer_eager_limit);
  chunks_.set_checksum(checksum_);
  tx_credit_ = params_.peer_eager_credit;
  staging_anchor_ = std::make_shared<StagingHost*>(static_cast<StagingHost*>(this));
  device_paths_.set_binding_cache(params_.devmem_tx_bindings);
}

EndpointCore::~EndpointCore() {
  staging_anchor_.reset();
  // Receives still waiting for device copies (the context is going away): now.
  for (auto& [op, why] : staged_failing_) op->req->complete(why, op->in.received);
}

void EndpointCore::set_control(net::Fd fd) { control_ = std::move(fd); }

Status EndpointCore::set_data(uint16_t index, net::Fd fd, std::unique_ptr<StreamIn> in) {
  REMORA_RETURN_IF_ERROR(chunks_.attach(index, std::move(fd)));
  if (in != nullptr) attach_stream_in(index, std::move(in));
  return Status::ok();
}

void EndpointCore::attach_stream_in(uint16_t index, std::unique_ptr<StreamIn> in) {
  if (in->devmem() == nullptr) return;
  in->on_arrival([engine = std::weak_ptr(engine_), anchor = std::weak_ptr(staging_anchor_), index] {
    if (auto e = engine.lock()) {
      e->post([anchor, index] {
        if (auto host = anchor.lock()) static_cast<EndpointCore*>(*host)->on_data_event(index, EPOLLIN);
      });
    }
  });
  chunks_.set_stream_in(index, std::move(in));
}

std::unique_ptr<StreamIn> EndpointCore::steer_data_stream(int fd, net::Clock::time_point deadline) {
  const std::string socket(config_.rxq_socket.data());
  if (socket.empty() || params_.domains == nullptr || params_.domains->empty() ||
      config_.device_path == DevicePathMode::kStaging || !devmem_rx_refused_.is_ok()) {
    return std::make_unique<StreamIn>(fd);
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - net::Clock::now());
  if (devmem_rx_lease_ == nullptr) {
    auto lease = DevmemRxLease::open(socket);
    if (!lease) {
      devmem_rx_refused_ = lease.status().with_context("devmem RX: REMORA_RXQ_SOCKET");
      REMORA_LOG(kWarn, "endpoint to {}: {}", params_.peer, devmem_rx_refused_.message());
      return std::make_unique<StreamIn>(fd);
    }
    if (config_.device_path == DevicePathMode::kZcrx) {
      // io_uring zcrx: a queue rxq reserves for us, registered with our own ring; its area
      // host memory, or with REMORA_RXQ_DEVICE_AREA a dmabuf of our first device domain.
      MemoryDomain* device = config_.rxq_device_area > 0 ? params_.domains->front() : nullptr;
      if (Status reserved =
              (*lease)->reserve_zcrx(device != nullptr ? config_.rxq_device_area : config_.zcrx_area, device,
                                     std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(10000)));
          !reserved) {
        devmem_rx_refused_ =
            reserved.with_context(device != nullptr ? fmt::format("zcrx: REMORA_RXQ_DEVICE_AREA={} of {} memory",
                                                                  config_.rxq_device_area, device->name())
                                                    : std::string("zcrx"));
        REMORA_LOG(kWarn, "endpoint to {}: {}", params_.peer, devmem_rx_refused_.message());
        return std::make_unique<StreamIn>(fd);
      }
    } else if (config_.rxq_device_area > 0) {
      // TCPX's model: our own receive area in device memory, bound by rxq to a queue of
      // ours, before the first stream is steered.
      MemoryDomain& domain = *params_.domains->front();
      if (Status bound =
              (*lease)->bind_area(domain, config_.rxq_device_area,
                                  std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(10000)));
          !bound) {
        devmem_rx_refused_ = bound.with_context(
            fmt::format("devmem RX: REMORA_RXQ_DEVICE_AREA={} of {} memory", config_.rxq_device_area, domain.name()));
        REMORA_LOG(kWarn, "endpoint to {}: {}", params_.peer, devmem_rx_refused_.message());
        return std::make_unique<StreamIn>(fd);
      }
    }
    devmem_rx_lease_ = std::move(*lease);
  }
  auto in =
      devmem_rx_lease_->steer(fd, std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(10000)));
  if (!in) {
    // Streams steered before stay steered (rxq keeps their rules while the lease is
    // open) and are read through their receivers; device receives then stage. With
    // none steered yet the lease goes: rxq may have installed this flow's rule before
    // the answer was refused here, and closing the lease removes it (no payload can
    // have come on this stream yet).
    devmem_rx_refused_ = in.status().with_context(devmem_rx_lease_->zcrx() ? "zcrx" : "devmem RX");
    REMORA_LOG(kWarn, "endpoint to {}: {}", params_.peer, devmem_rx_refused_.message());
    if (devmem_rx_lease_->streams_steered() == 0) devmem_rx_lease_.reset();
    return std::make_unique<StreamIn>(fd);
  }
  return std::move(*in);
}

bool EndpointCore::all_streams_attached() const noexcept { return chunks_.all_attached(); }

void EndpointCore::settle_devmem_rx() {
  if (devmem_rx_lease_ != nullptr && devmem_rx_lease_->streams_steered() == chunks_.streams()) {
    const bool zcrx = devmem_rx_lease_->zcrx();
    (zcrx ? device_paths_.set_zcrx_rx(Status(StatusCode::kOk, devmem_rx_lease_->describe()))
          : device_paths_.set_devmem_rx(Status(StatusCode::kOk, devmem_rx_lease_->describe())));
    devmem_rx_ = std::make_shared<DevmemRxContext>(DevmemRxContext{
        .engine = engine_, .host = staging_anchor_, .kind = zcrx ? DataPathKind::kZcrx : DataPathKind::kDevmem});
  } else if (config_.device_path == DevicePathMode::kZcrx) {
    device_paths_.set_zcrx_rx(Status(
        StatusCode::kUnsupported,
        config_.rxq_socket[0] == '\0'
            ? std::string("REMORA_RXQ_SOCKET is unset: no `remora rxq serve` reserves a queue for this endpoint's "
                          "io_uring zcrx and steers its data streams there")
            : fmt::format("{} of {} data streams read by zcrx; {}",
                          devmem_rx_lease_ ? devmem_rx_lease_->streams_steered() : 0, chunks_.streams(),
                          devmem_rx_refused_.is_ok() ? std::string("the context had no device memory domain when "
                                                                   "the endpoint was made")
                                                     : devmem_rx_refused_.message())));
  } else if (config_.rxq_socket[0] == '\0') {
    device_paths_.set_devmem_rx(Status(StatusCode::kUnsupported,
                                       "REMORA_RXQ_SOCKET is unset: no `remora rxq serve` steers this endpoint's data "
                                       "streams to devmem RX queues"));
  } else if (!devmem_rx_refused_.is_ok()) {
    device_paths_.set_devmem_rx(Status(
        StatusCode::kUnsupported,
        fmt::format("{} of {} data streams steered; {}", devmem_rx_lease_ ? devmem_rx_lease_->streams_steered() : 0,
                    chunks_.streams(), devmem_rx_refused_.message())));
  } else if (devmem_rx_lease_ == nullptr) {
    device_paths_.set_devmem_rx(Status(StatusCode::kUnsupported,
                                       "this endpoint's data streams were not steered: the context had no device "
                                       "memory domain when it was made (or REMORA_DEVICE_PATH excludes devmem)"));
  }
}

Status EndpointCore::activate() {
  if (!control_.valid() || !all_streams_attached()) return Status(StatusCode::kInternal, "activate before all streams attached");
  settle_devmem_rx();
  // The control stream is watched for EPOLLOUT only while a send is blocked
  // (watch_control_output). Otherwise, with edge-triggered interest, every arriving
  // frame would also queue an EPOLLOUT report: after a spinning poller has already
  // read the frame directly, the next epoll_wait would still return it, costing the
  // poller a dispatch and one more epoll_wait per frame on a get's critical path.
  auto hid = engine_->add(control_.get(), &control_handler_, ctl_blocked_ ? kControlEvents | EPOLLOUT : kControlEvents);
  if (!hid) return hid.status();
  control_hid_ = *hid;
  ctl_watch_out_ = ctl_blocked_;
  for (uint16_t i = 0; i < data_watch_.size(); ++i) {
    auto dh = engine_->add(chunks_.fd(i), data_watch_[i].handler.get());
    if (!dh) return dh.status();
    data_watch_[i].hid = *dh;
  }
  state_ = State::kActive;
  start_liveness();
  if (same_host_negotiated()) {
    // Who this side is: a peer on the same host may answer that it can read our memory.
    append_frame(host_frame(/*can_pull=*/false));
    flush_control();
  } else {
    same_host_reason_ = config_.same_host_pulls ? "the peer does not offer same-host pulls (REMORA_SAME_HOST=off there)"
                                                : "REMORA_SAME_HOST=off";
  }
  // Bytes may have arrived before registration; edge-triggered epoll would not report them.
  read_control();
  for (uint16_t i = 0; i < data_watch_.size() && alive(); ++i) read_stream(i);
  return Status::ok();
}

// ---------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------

Status EndpointCore::inactive() const {
  if (state_ == State::kActive) return Status::ok();
  return failure_.is_ok() ? Status(StatusCode::kAborted, "endpoint is not active") : failure_;
}

Status EndpointCore::admission() const {
  if (Status down = inactive(); !down) return down;
  const uint64_t outstanding = outstanding_ + initiator_.outstanding();
  if (outstanding >= config_.max_outstanding) {
    return Status(StatusCode::kNoResource, "endpoint has " + std::to_string(outstanding) +
                                               " outstanding operations (REMORA_MAX_OUTSTANDING); wait for some first");
  }
  return Status::ok();
}

Request EndpointCore::send(std::span<const std::byte> data, Tag tag) {
  engine::ProgressEngine::Guard guard(*engine_);
  if (Status refused = admission(); !refused)
    return detail::make_request(RequestState::completed(std::move(refused), 0, tag));
  const uint64_t cost = data.size() + wire::kEagerCreditOverhead;
  // Device memory always goes by rendezvous: its bytes are staged chunk by chunk.
  MemoryDomain* device = device_of(data.data(), data.size());
  if (device == nullptr && travels_inline(data.size()) && tx_credit_ >= cost) {
    tx_credit_ -= cost;
    size_t at = ctl_tx_.size();
    const size_t prefix = kEagerPrefix + (checksum_ ? wire::kCrcSize : 0);
    ctl_tx_.resize(at + prefix + data.size());
    const uint32_t crc = checksum_ ? checksum_of(data) : 0;
    wire::encode_eager_prefix(tag, static_cast<uint32_t>(data.size()), std::span(ctl_tx_).subspan(at, prefix),
                              checksum_ ? &crc : nullptr);
    if (!data.empty()) std::memcpy(ctl_tx_.data() + at + prefix, data.data(), data.size());
    ++stats_.eager_sent;
    ++stats_.messages_sent;
    stats_.bytes_sent += data.size();
    flush_control();
    // The payload is copied: the caller's buffer is free now.
    return detail::make_request(RequestState::completed(Status::ok(), data.size(), tag));
  }
  auto op = std::make_unique<SendOp>();
  op->req = RequestState::make(engine_, tag);
  op->tag = tag;
  op->id = next_send_id_++;
  op->source = HostSource(data.data());
  op->out.kind = wire::ChunkKind::kMessage;
  op->out.owner = op->id;
  op->out.length = data.size();
  op->out.source = &op->source;
  if (device != nullptr) {
    if (Status path = choose_device_path(*device, data.data(), data.size(), /*tx=*/true, &op->devmem); !path) {
      return detail::make_request(RequestState::completed(std::move(path), 0, tag));
    }
  }
  if (op->devmem) {
    op->devmem_source = std::make_unique<DevmemSource>(*op->devmem, devmem_streams_, op->id);
    op->out.source = op->devmem_source.get();
  } else if (device != nullptr) {
    auto staging = staging_for(device, /*tx=*/true);
    if (!staging) return detail::make_request(RequestState::completed(staging.status(), 0, tag));
    op->staged = std::make_unique<StagingSource>(std::move(*staging), data.data(), data.size());
    op->out.source = op->staged.get();
    // Start staging now: the copies overlap the RTS/CTS round trip.
    (void)op->staged->prepare(0, std::min<uint64_t>(config_.chunk_bytes, data.size()));
    ++stats_.staged_transfers;
  }
  Request r = detail::make_request(op->req);
  append_frame(RtsFrame{op->id, tag, op->out.length});
  sends_.emplace(op->id, std::move(op));
  ++outstanding_;
  ++stats_.rendezvous_sent;
  flush_control();
  return r;
}

Request EndpointCore::recv(std::span<std::byte> buffer, Tag tag) {
  engine::ProgressEngine::Guard guard(*engine_);
  // After the peer's orderly close, what it sent before is still ours to receive.
  const bool arrived_only = keep_arrived_;
  if (!arrived_only) {
    if (Status refused = admission(); !refused)
      return detail::make_request(RequestState::completed(std::move(refused), 0, tag));
  }
  auto op = std::make_unique<RecvOp>();
  op->req = RequestState::make(engine_, tag);
  op->buffer = buffer.data();
  op->sink = HostSink(buffer.data());
  op->in.kind = wire::ChunkKind::kMessage;
  op->in.sink = &op->sink;
  op->capacity = buffer.size();
  op->tag = tag;
  op->device = device_of(buffer.data(), buffer.size());
  if (op->device != nullptr) {
    if (Status path = choose_device_path(*op->device, buffer.data(), buffer.size(), /*tx=*/false, nullptr,
                                         /*drives_devmem_rx=*/true);
        !path) {
      return detail::make_request(RequestState::completed(std::move(path), 0, tag));
    }
    op->devmem_rx = rx_zero_copy();
    op->zcrx_rx = last_device_path_ == DataPath::kZcrx;
    auto staging = staging_for(op->device, /*tx=*/false);
    if (!staging) return detail::make_request(RequestState::completed(staging.status(), 0, tag));
    op->staging = std::move(*staging);
  }
  Request r = detail::make_request(op->req);

  if (std::optional<Unexpected> u = matcher_.take_unexpected(tag)) {
    if (u->eager && !u->corrupt.is_ok()) {
      ++stats_.messages_received;
      op->req->complete(u->corrupt, 0);
      if (!arrived_only) return_credit(u->payload.size() + wire::kEagerCreditOverhead);
    } else if (u->eager) {
      deliver_eager(*op, u->payload);
      if (!arrived_only) return_credit(u->payload.size() + wire::kEagerCreditOverhead);
    } else {
      ++outstanding_;
      match_rendezvous(std::move(op), u->send_id, u->length);
    }
    flush_control();
    return r;
  }
  if (arrived_only) {
    op->req->complete(failure_, 0);
    return r;
  }
  ++outstanding_;
  matcher_.post(std::move(op));
  return r;
}

template <typename Post>
Request EndpointCore::post_one_sided(const Post& post, const void* local, size_t length, std::string_view what,
                                     MemoryDomain** inline_device) {
  engine::ProgressEngine::Guard guard(*engine_);
  if (Status refused = admission(); !refused)
    return detail::make_request(RequestState::completed(std::move(refused), 0, Tag{}));
  std::optional<StagingContext> staging;
  std::unique_ptr<DevmemTxSend> devmem;
  if (MemoryDomain* d = device_of(local, length)) {
    const bool tx = what == "put";
    // A chunked put can go by devmem TX; an inline one travels in its PUT frame.
    const bool chunked_put = tx && inline_device == nullptr;
    // A chunked get can go by devmem RX (when every data stream is steered).
    const bool chunked_get = what == "get" && !travels_inline(length);
    if (Status path = choose_device_path(*d, local, length, tx, chunked_put ? &devmem : nullptr, chunked_get); !path) {
      return detail::make_request(RequestState::completed(path.with_context(what), 0, Tag{}));
    }
    if (inline_device != nullptr) {
      // An inline put of device memory: its bytes are copied to host memory first,
      // without the lock (put_from_device_inline); nothing is posted here.
      *inline_device = d;
      return Request();
    }
    if (devmem == nullptr) {
      // Device memory: its bytes are staged.
      auto made = staging_for(d, tx);
      if (!made) return detail::make_request(RequestState::completed(made.status().with_context(what), 0, Tag{}));
      staging = std::move(*made);
      if (!rx_zero_copy()) ++stats_.staged_transfers;
    }
  }
  RmaInitiator::Posted posted = post(staging ? &*staging : nullptr, std::move(devmem));
  if (posted.issued) {
    // One round at most: the first chunks go out from this thread, and the rest moves
    // on progress rounds (the progress thread's, or a waiting thread's), so posting
    // returns in bounded time however large the put.
    pump(/*one_round=*/true);  // may complete (and free) the op
    if (posted.pushes_data) engine_->driven_by_caller();  // see there: this thread just pushed data
  }
  return std::move(posted.request);
}

Request EndpointCore::put(std::span<const std::byte> local, const RemoteKey& key, uint64_t offset,
                          const PutOptions& options) {
  const bool inline_class = travels_inline(local.size());
  MemoryDomain* inline_device = nullptr;
  Request r = post_one_sided(
      [&](const StagingContext* staging, std::unique_ptr<DevmemTxSend> devmem) {
        return initiator_.put(local, key, offset, options, inline_class, staging, {}, std::move(devmem),
                              &devmem_streams_);
      },
      local.data(), local.size(), "put", inline_class ? &inline_device : nullptr);
  if (inline_device != nullptr) return put_from_device_inline(*inline_device, local, key, offset, options);
  return r;
}

Request EndpointCore::put_from_device_inline(MemoryDomain& device, std::span<const std::byte> local,
                                             const RemoteKey& key, uint64_t offset, const PutOptions& options) {
  // Its bytes travel in the PUT frame: copy them to host memory first, without the
  // progress lock (the copy is at most the eager limit).
  std::vector<std::byte> bounce(local.size());
  auto copy = device.copy_to_host(bounce.data(), local.data(), local.size());
  Status copied = copy ? (*copy)->wait(std::chrono::milliseconds(config_.wait_timeout_ms)) : copy.status();
  if (!copied) {
    return detail::make_request(RequestState::completed(
        copied.with_context(fmt::format("put of {} bytes from {} memory", local.size(), device.name())), 0, Tag{}));
  }
  engine::ProgressEngine::Guard guard(*engine_);
  if (Status refused = admission(); !refused)
    return detail::make_request(RequestState::completed(std::move(refused), 0, Tag{}));
  ++stats_.staged_transfers;
  RmaInitiator::Posted posted =
      initiator_.put(local, key, offset, options, /*inline_class=*/true, nullptr, std::move(bounce));
  if (posted.issued) pump(/*one_round=*/true);
  return std::move(posted.request);
}

Request EndpointCore::get(std::span<std::byte> local, const RemoteKey& key, uint64_t offset) {
  return post_one_sided(
      [&](const StagingContext* staging, std::unique_ptr<DevmemTxSend>) {
        // A chunked get into device memory goes by devmem RX when every data stream is
        // steered (post_one_sided chose the path just now).
        const bool inline_class = travels_inline(local.size());
        if (staging != nullptr && !inline_class && rx_zero_copy()) {
          return initiator_.get(local, key, offset, inline_class, staging, devmem_rx_);
        }
        return initiator_.get(local, key, offset, inline_class, staging);
      },
      local.data(), local.size(), "get");
}

Request EndpointCore::atomic(uint64_t* result, const RemoteKey& key, uint64_t offset, wire::AtomicOp op,
                             uint64_t operand, uint64_t compare) {
  return post_one_sided(
      [&](const StagingContext*, std::unique_ptr<DevmemTxSend>) {
        return initiator_.atomic(result, key, offset, op, operand, compare);
      },
      nullptr, 0, "atomic");
}

Request EndpointCore::flush() {
  engine::ProgressEngine::Guard guard(*engine_);
  if (Status down = inactive(); !down) return detail::make_request(RequestState::completed(std::move(down), 0, Tag{}));
  return initiator_.flush();
}

void EndpointCore::run_handler_later() {
  engine_->defer([self = shared_from_this()] { self->notifications_.run_handler(); });
}

void EndpointCore::close(wire::GoodbyeReason reason) {
  engine::ProgressEngine::Guard guard(*engine_);
  keep_arrived_ = false;
  if (state_ == State::kFailed) {
    matcher_.clear_unexpected();
    return;
  }
  if (state_ == State::kActive && control_.valid()) {
    append_frame(GoodbyeFrame{static_cast<uint32_t>(reason)});
    flush_control();
    if (reason == wire::GoodbyeReason::kClosed && state_ == State::kActive) {
      // The sockets are taken out of the endpoint, so fail_locked leaves them open;
      // the control socket's queue goes with them (fail_locked clears what is left).
      std::vector<LingeringClose::Socket> data;
      for (uint16_t i = 0; i < data_watch_.size(); ++i) {
        net::Fd fd = chunks_.take(i);
        if (fd.valid()) data.push_back({std::move(fd), data_watch_[i].hid});
      }
      linger_ = std::make_shared<LingeringClose>(
          engine_, params_.peer, LingeringClose::Socket{std::move(control_), control_hid_}, std::move(data),
          std::move(ctl_tx_), ctl_tx_off_, [weak = weak_from_this()] {
            if (auto self = weak.lock()) self->end_linger();
          });
    }
  }
  fail_locked(Status(StatusCode::kAborted, reason == wire::GoodbyeReason::kAborted ? "endpoint aborted locally"
                                                                                     : "endpoint closed locally"));
  if (linger_) linger_->start();
}

void EndpointCore::end_linger() {
  if (!linger_) return;
  linger_->stop();
  linger_.reset();
  notify_closed();
}

void EndpointCore::notify_closed() {
  if (!on_closed_) return;
  // Deferred: we may be inside one of our own handlers.
  auto fn = std::move(on_closed_);
  on_closed_ = nullptr;
  EndpointId id = params_.id;
  engine_->add_timer(engine::Clock::now(), [fn = std::move(fn), id] { fn(id); });
}

bool EndpointCore::closed_by_peer() const {
  engine::ProgressEngine::Guard guard(*engine_);
  return state_ == State::kFailed && peer_goodbye_ == wire::GoodbyeReason::kClosed;
}

bool EndpointCore::peer_said_goodbye() const {
  engine::ProgressEngine::Guard guard(*engine_);
  return peer_goodbye_.has_value();
}

bool EndpointCore::failed() const {
  engine::ProgressEngine::Guard guard(*engine_);
  return state_ == State::kFailed;
}

Status EndpointCore::failure() const {
  engine::ProgressEngine::Guard guard(*engine_);
  return failure_;
}

// ---------------------------------------------------------------------------
// Device memory
// ---------------------------------------------------------------------------

MemoryDomain* EndpointCore::device_of(const void* p, size_t n) const {
  // An empty buffer has no bytes to stage: it takes the host path whatever it points at.
  if (params_.domains == nullptr || params_.domains->empty() || p == nullptr || n == 0) return nullptr;
  for (MemoryDomain* d : *params_.domains) {
    if (d->owns(p, n)) return d;
  }
  return nullptr;
}

Result<StagingContext> EndpointCore::staging_for(MemoryDomain* domain, bool tx) {
  auto it = std::find_if(staging_pools_.begin(), staging_pools_.end(),
                         [&](const StagingPools& p) { return p.domain == domain; });
  if (it == staging_pools_.end()) {
    staging_pools_.push_back(StagingPools{domain, nullptr, nullptr});
    it = staging_pools_.end() - 1;
  }
  std::shared_ptr<StagingPool>& pool = tx ? it->tx : it->rx;
  if (!pool) {
    auto made = StagingPool::create(*domain, config_.staging_buffers, config_.chunk_bytes);
    if (!made) return made.status().with_context("endpoint to " + params_.peer);
    pool = std::move(*made);
  }
  return StagingContext{.engine = engine_, .pool = pool, .host = staging_anchor_, .chunk_bytes = config_.chunk_bytes};
}

Status EndpointCore::choose_device_path(MemoryDomain& domain, const void* p, size_t n, bool tx,
                                        std::unique_ptr<DevmemTxSend>* devmem, bool drives_devmem_rx) {
  Result<PathChoice> choice =
      device_paths_.choose(domain, p, n, tx, /*drives_devmem_tx=*/devmem != nullptr, drives_devmem_rx);
  if (!choice) {
    ++stats_.device_path_refusals;
    stats_.device_path = "refused";
    stats_.device_path_reason = choice.status().message();
    return choice.status();
  }
  if (choice->path == DataPath::kDevmem && devmem != nullptr) {
    // The NIC reads the memory after sendmsg returns: every data stream reports those
    // reads' end on its error queue.
    for (uint16_t i = 0; i < chunks_.streams(); ++i) {
      if (Status s = devmem_streams_.enable(chunks_.fd(i)); !s) {
        ++stats_.device_path_refusals;
        stats_.device_path = "refused";
        stats_.device_path_reason = "devmem TX: data stream " + std::to_string(i) + ": " + s.message();
        return Status(StatusCode::kUnsupported, stats_.device_path_reason);
      }
    }
    *devmem = std::move(choice->devmem_tx);
  }
  last_device_path_ = choice->path;
  stats_.device_path = std::string(data_path_name(choice->path));
  stats_.device_path_reason = std::move(choice->reason);
  return Status::ok();
}

void EndpointCore::devmem_send_completed(uint64_t id) {
  if (id & kDevmemPutCookie) {
    initiator_.devmem_completed(id & ~kDevmemPutCookie);
    return;
  }
  if (id & kDevmemServedGetCookie) {
    target_.devmem_completed(id & ~kDevmemServedGetCookie);
    return;
  }
  auto it = sends_.find(id);
  if (it == sends_.end() || !it->second->devmem_source) return;  // failed already
  SendOp* op = it->second.get();
  op->devmem_source->completed();
  if (op->awaiting_completions && op->devmem_source->pending() == 0) {
    ++stats_.devmem_transfers;
    complete_send(op, Status::ok());
  }
}

void EndpointCore::fail_staged_recv(std::unique_ptr<RecvOp> op, const Status& why) {
  if (op->staged && op->staged->in_flight() > 0) {
    staged_failing_.emplace_back(std::move(op), why);  // staging_progressed completes it
    return;
  }
  op->req->complete(why, op->in.received);
}

void EndpointCore::staged_chunk_placed(RxTransfer& t, uint64_t length, const Status& status) {
  if (state_ == State::kActive || state_ == State::kDraining) chunks_.chunk_placed(&t, length, status);
}

void EndpointCore::staging_progressed() {
  std::erase_if(staged_failing_, [](auto& entry) {
    if (entry.first->staged->in_flight() > 0) return false;
    entry.first->req->complete(entry.second, entry.first->in.received);
    return true;
  });
  std::erase_if(staged_sends_ending_, [](auto& entry) {
    if (entry.first->staged->in_flight() > 0) return false;
    entry.first->req->complete(entry.second, entry.first->out.written);
    return true;
  });
  initiator_.staging_progressed();
  if (state_ != State::kActive && state_ != State::kDraining) return;
  chunks_.unstall();
  if (state_ == State::kDraining) maybe_finalize();
  if (state_ == State::kActive) pump();
}

EndpointStats EndpointCore::stats() const {
  engine::ProgressEngine::Guard guard(*engine_);
  EndpointStats st = stats_;
  st.chunks_sent = chunks_.chunks_sent();
  st.chunks_per_stream = chunks_.chunks_per_stream();
  st.chunks_pulled = chunks_.chunks_pulled();
  st.bytes_pulled = chunks_.bytes_pulled();
  st.huge_pages_promoted = chunks_.huge_pages_promoted();
  st.same_host_reason = chunks_.pull_rx() ? std::string() : same_host_reason_;
  return st;
}

// ---------------------------------------------------------------------------
// Failure
// ---------------------------------------------------------------------------

void EndpointCore::protocol_error(std::string message) {
  Status s(StatusCode::kProtocol, "peer " + params_.peer + " violated the protocol: " + std::move(message));
  REMORA_LOG(kWarn, "{}", s.message());
  fail_locked(s);
}

void EndpointCore::fail_locked(const Status& why) {
  if (state_ == State::kFailed) {
    if (linger_) end_linger();  // the context is going away: stop lingering
    return;
  }
  bool was_setup = state_ == State::kSetup;
  state_ = State::kFailed;
  liveness_.stop();
  failure_ = why;
  if (!was_setup) REMORA_LOG(kInfo, "endpoint {} to {} failed: {}", static_cast<uint64_t>(params_.id), params_.peer, why.to_string());

  chunks_.clear();
  for (uint16_t i = 0; i < data_watch_.size(); ++i) {
    if (chunks_.fd(i) >= 0) engine_->remove(chunks_.fd(i), data_watch_[i].hid);
  }
  chunks_.close_all();
  if (control_.valid()) {
    engine_->remove(control_.get(), control_hid_);
    control_.reset();
  }
  // Complete in a stable order: sends, matched receives, posted receives.
  for (auto& [id, op] : sends_) {
    const uint64_t written = op->out.written;  // before the move below
    finish_staged_send(std::move(op), why, written);
  }
  sends_.clear();
  for (auto& [id, op] : recvs_) fail_staged_recv(std::move(op), why);
  recvs_.clear();
  fail_one_sided(why);
  matcher_.fail_posted(why);
  if (!keep_arrived_) matcher_.clear_unexpected();
  outstanding_ = 0;
  ctl_tx_.clear();
  ctl_tx_off_ = 0;
  target_.control_cleared();
  ctl_resp_only_ = true;
  hold_resps_ = false;
  if (!linger_) notify_closed();  // else once the linger ends
}

void EndpointCore::fail_one_sided(const Status& why) {
  initiator_.fail(why);
  target_.fail();
  notifications_.fail();
}

void EndpointCore::handle_control_eof(const Status& why) {
  Status reason = why;
  if (peer_goodbye_ == wire::GoodbyeReason::kAborted) {
    reason = Status(StatusCode::kPeerFailed, "peer " + params_.peer + " aborted the endpoint (it gave up after a failure)");
  } else if (peer_goodbye_ == wire::GoodbyeReason::kClosed) {
    reason = Status(StatusCode::kPeerFailed, "peer " + params_.peer + " closed the endpoint");
    // An orderly close: the eager messages it sent before stay receivable. A
    // rendezvous announcement cannot complete any more (its sender is gone).
    matcher_.drop_rts();
    keep_arrived_ = true;
  }
  // Everything already announced on the data streams may still arrive: keep the
  // receives whose chunks are all announced, fail the rest. One-sided operations
  // need the control stream for their replies: they all fail now (their announced
  // bytes are drained into scratch so message chunks behind them still land).
  bool any_left = false;
  for (auto& [id, op] : recvs_) {
    if (op->in.announced < op->in.length) op->in.doomed = true;
    any_left = true;
  }
  if (!any_left) {
    fail_locked(reason);
    return;
  }
  chunks_.redirect([](const RxTransfer& t) { return t.kind != wire::ChunkKind::kMessage; }, &drain_);
  // A PULL not read yet belongs to a send that did not complete at the peer (it
  // completes at its PULLED): its memory is the peer's again, and what it holds now is
  // not the message.
  chunks_.distrust_pulls(Status(StatusCode::kPeerFailed, "peer " + params_.peer +
                                                             " ended the endpoint before this side read a chunk "
                                                             "out of its memory (same-host pull)"));
  engine_->remove(control_.get(), control_hid_);
  control_.reset();
  state_ = State::kDraining;
  failure_ = reason;
  for (auto& [id, op] : sends_) {
    const uint64_t written = op->out.written;  // before the move below
    finish_staged_send(std::move(op), reason, written);
  }
  outstanding_ -= sends_.size();
  chunks_.clear_tx();
  sends_.clear();
  fail_one_sided(reason);
  outstanding_ -= matcher_.fail_posted(reason);
  if (!keep_arrived_) matcher_.clear_unexpected();
  // Doomed receives whose announced bytes are all in already fail now.
  std::vector<RecvOp*> done;
  for (auto& [id, op] : recvs_) {
    if (op->in.doomed && op->in.complete()) done.push_back(op.get());
  }
  for (RecvOp* op : done) finish_recv(op);
  for (uint16_t i = 0; i < data_watch_.size() && state_ == State::kDraining; ++i) read_stream(i);
  if (state_ == State::kDraining) chunks_.read_pulls();  // PULLs announced before the end
  maybe_finalize();
}

void EndpointCore::maybe_finalize() {
  if (state_ == State::kDraining && recvs_.empty()) fail_locked(failure_);
}

// ---------------------------------------------------------------------------
// Control stream
// ---------------------------------------------------------------------------

void EndpointCore::append_frame(const wire::Frame& frame) {
  if (!std::holds_alternative<wire::RespFrame>(frame)) ctl_resp_only_ = false;
  if (checksum_) {
    // The one place inline payloads get their CRC (an inline PUT's data, a GET's inline
    // reply, read by the caller inside its region bracket); EAGER is encoded in send()
    // and chunks are announced with theirs by the scheduler.
    if (const auto* put = std::get_if<wire::PutFrame>(&frame); put != nullptr && put->inline_data) {
      wire::PutFrame f = *put;
      f.has_crc = true;
      f.crc = checksum_of(f.payload);
      return append_encoded(f);
    }
    if (const auto* resp = std::get_if<wire::RespFrame>(&frame); resp != nullptr && resp->inline_data) {
      wire::RespFrame f = *resp;
      f.has_crc = true;
      f.crc = checksum_of(f.payload);
      return append_encoded(f);
    }
  }
  append_encoded(frame);
}

void EndpointCore::append_encoded(const wire::Frame& frame) {
  size_t n = wire::encoded_size(frame);
  size_t at = ctl_tx_.size();
  ctl_tx_.resize(at + n);
  wire::encode(frame, std::span(ctl_tx_).subspan(at, n));
}

bool EndpointCore::crc_as_negotiated(bool has_crc, std::string_view frame) {
  if (has_crc == checksum_) return true;
  protocol_error(checksum_ ? fmt::format("{} without the CRC-32C this endpoint negotiated (REMORA_CHECKSUM=crc32c)", frame)
                           : fmt::format("{} with a CRC on an endpoint without checksums", frame));
  return false;
}

void EndpointCore::flush_control() {
  if (!control_.valid() || ctl_blocked_) return;
  if (hold_resps_ && ctl_resp_only_ && ctl_tx_off_ < ctl_tx_.size()) {
    if (!hold_release_queued_) {
      hold_release_queued_ = true;
      engine_->at_next_round([weak = weak_from_this()] {
        if (auto self = weak.lock()) self->release_held_resps();
      });
    }
    return;
  }
  if (rx_credit_owed_ > 0 && ctl_tx_off_ < ctl_tx_.size()) {
    // Piggyback owed credit on traffic we send anyway.
    uint64_t owed = rx_credit_owed_;
    rx_credit_owed_ = 0;
    rx_credit_used_ -= owed;
    append_frame(CreditFrame{owed});
  }
  while (ctl_tx_off_ < ctl_tx_.size()) {
    const net::IoResult r = net::send_some(control_.get(), ctl_tx_.data() + ctl_tx_off_, ctl_tx_.size() - ctl_tx_off_);
    if (r.moved() && r.bytes > 0) {
      ctl_tx_off_ += r.bytes;
      target_.control_sent(ctl_tx_off_);
      continue;
    }
    if (r.would_block()) {
      ctl_blocked_ = true;
      if (!ctl_watch_out_) watch_control_output(true);
      return;
    }
    handle_control_eof(net::errno_status(r.err, "send on control stream to " + params_.peer));
    return;
  }
  ctl_tx_.clear();
  ctl_tx_off_ = 0;
  target_.control_cleared();
  ctl_resp_only_ = true;
  hold_resps_ = false;
}

void EndpointCore::watch_control_output(bool on) {
  if (state_ != State::kActive) return;
  Status s = engine_->modify(control_.get(), control_hid_, on ? kControlEvents | EPOLLOUT : kControlEvents);
  if (!s.is_ok()) {
    fail_locked(s);
    return;
  }
  ctl_watch_out_ = on;
}

void EndpointCore::release_held_resps() {
  hold_release_queued_ = false;
  hold_resps_ = false;
  if (state_ == State::kActive) flush_control();
}

void EndpointCore::on_control_event(uint32_t events) {
  if (state_ != State::kActive) {
    if (linger_) linger_->progress();  // closed: the sockets are draining (see close)
    return;
  }
  if ((events & EPOLLOUT) && ctl_blocked_) {
    ctl_blocked_ = false;
    flush_control();
    if (!ctl_blocked_ && ctl_watch_out_) watch_control_output(false);  // all sent: stop watching
  }
  if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) ctl_hup_ = true;
  if (state_ == State::kActive && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) read_control();
}

bool EndpointCore::read_control() {
  bool got = false;
  const wire::DecodeLimits limits{static_cast<uint32_t>(config_.eager_limit)};
  while (state_ == State::kActive) {
    if (rx_end_ == ctl_rx_.size()) {
      // Make room: move the partial frame to the front.
      std::memmove(ctl_rx_.data(), ctl_rx_.data() + rx_begin_, rx_end_ - rx_begin_);
      rx_end_ -= rx_begin_;
      rx_begin_ = 0;
    }
    const size_t space = ctl_rx_.size() - rx_end_;
    const net::IoResult r = net::recv_some(control_.get(), ctl_rx_.data() + rx_end_, space);
    if (r.would_block()) break;
    if (r.error()) {
      handle_control_eof(net::errno_status(r.err, "recv on control stream from " + params_.peer));
      return got;
    }
    if (r.eof()) {
      handle_control_eof(Status(StatusCode::kPeerFailed, "peer " + params_.peer + " closed the connection"));
      return true;
    }
    const size_t n = r.bytes;
    liveness_.heard();
    rx_end_ += n;
    got = true;
    while (state_ == State::kActive && rx_begin_ < rx_end_) {
      auto decoded = wire::decode_frame(std::span(ctl_rx_).subspan(rx_begin_, rx_end_ - rx_begin_), limits);
      if (!decoded) {
        if (decoded.status().code() == StatusCode::kInProgress) break;
        protocol_error(decoded.status().message());
        return true;
      }
      rx_begin_ += decoded->consumed;
      handle_frame(decoded->frame);
    }
    if (rx_begin_ == rx_end_) rx_begin_ = rx_end_ = 0;
    // A short read drained the socket; new bytes raise a new edge. Skipping the
    // recv that would return EAGAIN saves a syscall per message — but not once the
    // peer hung up: the FIN came with the same edge, and only a read sees the EOF.
    if (n < space && !ctl_hup_) break;
  }
  if (got && state_ == State::kActive) pump();  // nothing read, nothing new to send
  return got;
}

int EndpointCore::poll_control() {
  if (state_ != State::kActive || !chunks_.idle()) return -1;
  return read_control() ? 1 : 0;
}

void EndpointCore::handle_frame(const wire::Frame& frame) {
  std::visit(
      [this](const auto& f) {
        using T = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<T, EagerFrame>) handle_eager(f);
        else if constexpr (std::is_same_v<T, RtsFrame>) handle_rts(f);
        else if constexpr (std::is_same_v<T, CtsFrame>) handle_cts(f);
        else if constexpr (std::is_same_v<T, ChunkFrame>) handle_chunk(f);
        else if constexpr (std::is_same_v<T, CreditFrame>) handle_credit(f);
        else if constexpr (std::is_same_v<T, GoodbyeFrame>) handle_goodbye(f);
        else if constexpr (std::is_same_v<T, wire::RespFrame>) {
          if (!f.inline_data || crc_as_negotiated(f.has_crc, "RESP with inline data")) initiator_.handle_resp(f);
        }
        else if constexpr (std::is_same_v<T, wire::AbortFrame>) handle_abort(f);
        else if constexpr (std::is_same_v<T, wire::HeartbeatFrame>) handle_heartbeat(f);
        else if constexpr (std::is_same_v<T, wire::HostFrame>)
          handle_host(f);
        else if constexpr (std::is_same_v<T, wire::PullFrame>)
          handle_pull(f);
        else if constexpr (std::is_same_v<T, wire::PulledFrame>)
          handle_pulled(f);
        else serve_request(f);  // PUT, GET, ATOMIC
      },
      frame);
}

void EndpointCore::serve_request(const wire::PutFrame& f) {
  if (f.inline_data && !crc_as_negotiated(f.has_crc, "inline PUT")) return;
  if (!target_.admit(f.op_id)) return;
  if (f.inline_data != travels_inline(f.length)) {
    protocol_error(fmt::format("PUT of {} bytes {} inline (negotiated eager limit {})", f.length,
                               f.inline_data ? "sent" : "not sent", eager_limit_));
    return;
  }
  target_.serve_put(f);
}

void EndpointCore::serve_request(const wire::GetFrame& f) {
  if (target_.admit(f.op_id)) target_.serve_get(f, travels_inline(f.length));
}

void EndpointCore::serve_request(const wire::AtomicFrame& f) {
  if (target_.admit(f.op_id)) target_.serve_atomic(f);
}

void EndpointCore::deliver_eager(RecvOp& op, std::span<const std::byte> payload) {
  ++stats_.messages_received;
  if (payload.size() > op.capacity) {
    op.req->complete(Status(StatusCode::kTruncated, "message of " + std::to_string(payload.size()) +
                                                        " bytes does not fit the receive buffer of " +
                                                        std::to_string(op.capacity) + " bytes (tag " +
                                                        std::to_string(tag_value(op.tag)) + ")"),
                     payload.size());
    return;
  }
  stats_.bytes_received += payload.size();
  if (op.device != nullptr && !payload.empty()) {
    // Into device memory: the payload is copied out of the control stream's buffer
    // first, and the receive completes when the device copy has ended.
    ++stats_.staged_transfers;
    stats_.staged_bytes += payload.size();
    if (op.devmem_rx) {
      // Posted for devmem RX, but the message came on the control stream: it staged.
      last_device_path_ = DataPath::kStaging;
      stats_.device_path = std::string(data_path_name(DataPath::kStaging));
      stats_.device_path_reason = fmt::format(
          "devmem RX was chosen for this receive, but the message ({} bytes, at most the eager limit) came inline on "
          "the control stream: copied to {} memory from there",
          payload.size(), op.device->name());
    }
    auto held = std::make_shared<std::vector<std::byte>>(payload.begin(), payload.end());
    auto copy = op.device->copy_from_host(op.buffer, held->data(), held->size());
    if (!copy) {
      op.req->complete(copy.status(), 0);
      return;
    }
    when_copied(engine_, std::move(*copy), [req = op.req, held](const Status& s) {
      req->complete(s, s.is_ok() ? held->size() : 0);
    });
    return;
  }
  if (!payload.empty()) std::memcpy(op.buffer, payload.data(), payload.size());
  op.req->complete(Status::ok(), payload.size());
}

void EndpointCore::return_credit(uint64_t cost) {
  rx_credit_owed_ += cost;
  if (rx_credit_owed_ >= config_.eager_credit / 4) {
    uint64_t owed = rx_credit_owed_;
    rx_credit_owed_ = 0;
    rx_credit_used_ -= owed;
    append_frame(CreditFrame{owed});
  }
}

void EndpointCore::handle_eager(const EagerFrame& f) {
  if (!crc_as_negotiated(f.has_crc, "EAGER")) return;
  uint64_t cost = f.payload.size() + wire::kEagerCreditOverhead;
  rx_credit_used_ += cost;
  if (rx_credit_used_ > config_.eager_credit) {
    protocol_error("eager messages exceed the granted credit of " + std::to_string(config_.eager_credit) + " bytes");
    return;
  }
  // A payload that fails its checksum fails the receive it matches, and nothing else.
  Status corrupt;
  if (f.has_crc) {
    if (const uint32_t got = checksum_of(f.payload); got != f.crc) {
      corrupt = checksum_mismatch(fmt::format("a message (tag {})", tag_value(f.tag)), 0, f.payload.size(), f.crc,
                                  got, params_.peer);
      REMORA_LOG(kWarn, "{}", corrupt.message());
    }
  }
  if (std::unique_ptr<RecvOp> op = matcher_.take_posted(f.tag)) {
    --outstanding_;
    if (corrupt.is_ok()) {
      deliver_eager(*op, f.payload);
    } else {
      ++stats_.messages_received;
      op->req->complete(corrupt, 0);
    }
    return_credit(cost);
    return;
  }
  matcher_.add_eager(f.tag, f.payload, std::move(corrupt));
}

void EndpointCore::match_rendezvous(std::unique_ptr<RecvOp> op, uint64_t send_id, uint64_t length) {
  // op is counted in outstanding_.
  if (length > op->capacity) {
    append_frame(CtsFrame{send_id, 0, CtsStatus::kTruncated});
    ++stats_.messages_received;
    --outstanding_;
    op->req->complete(Status(StatusCode::kTruncated, "message of " + std::to_string(length) +
                                                         " bytes does not fit the receive buffer of " +
                                                         std::to_string(op->capacity) + " bytes (tag " +
                                                         std::to_string(tag_value(op->tag)) + ")"),
                      length);
    return;
  }
  op->in.id = next_recv_id_++;
  op->in.length = length;
  append_frame(CtsFrame{send_id, op->in.id, CtsStatus::kProceed});
  if (length == 0) {
    ++stats_.messages_received;
    --outstanding_;
    op->req->complete(Status::ok(), 0);
    return;
  }
  if (op->devmem_rx) {
    op->staged = std::make_unique<DevmemSink>(devmem_rx_, op->device, op->buffer, &op->in);
    op->in.sink = op->staged.get();
  } else if (op->device != nullptr) {
    op->staged = std::make_unique<StagingSink>(op->staging, op->buffer, &op->in);
    op->in.sink = op->staged.get();
    ++stats_.staged_transfers;
  }
  const uint64_t id = op->in.id;
  recvs_.emplace(id, std::move(op));
}

void EndpointCore::handle_rts(const RtsFrame& f) {
  if (std::unique_ptr<RecvOp> op = matcher_.take_posted(f.tag)) {
    match_rendezvous(std::move(op), f.send_id, f.length);
    return;
  }
  if (!matcher_.add_rts(f.tag, f.send_id, f.length, config_.max_unexpected)) {
    protocol_error("more than " + std::to_string(config_.max_unexpected) +
                   " unexpected message announcements (REMORA_MAX_UNEXPECTED)");
  }
}

void EndpointCore::handle_cts(const CtsFrame& f) {
  auto it = sends_.find(f.send_id);
  if (it == sends_.end() || it->second->recv_id != 0) {
    protocol_error("CTS for unknown send id " + std::to_string(f.send_id));
    return;
  }
  SendOp* op = it->second.get();
  if (f.status == CtsStatus::kTruncated) {
    complete_send(op, Status(StatusCode::kTruncated, "the peer's receive buffer is smaller than the " +
                                                          std::to_string(op->out.length) + "-byte message (tag " +
                                                          std::to_string(tag_value(op->tag)) + ")"));
    return;
  }
  if (f.recv_id == 0) {
    protocol_error("CTS with receive id 0");
    return;
  }
  op->recv_id = f.recv_id;
  op->out.chunk_id = f.recv_id;
  ++stats_.messages_sent;
  if (op->out.length == 0) {
    complete_send(op, Status::ok());
    return;
  }
  chunks_.ready(&op->out);
}

RxTransfer* EndpointCore::find_in(wire::ChunkKind kind, uint64_t id) {
  switch (kind) {
    case wire::ChunkKind::kMessage: {
      auto it = recvs_.find(id);
      return it == recvs_.end() ? nullptr : &it->second->in;
    }
    case wire::ChunkKind::kPut: return target_.put_transfer(id);
    case wire::ChunkKind::kGet: return initiator_.get_transfer(id);
  }
  return nullptr;
}

RxTransfer* EndpointCore::find_announced(std::string_view frame, wire::ChunkKind kind, uint64_t id) {
  RxTransfer* op = find_in(kind, id);
  if (op == nullptr) {
    static constexpr const char* kWhat[] = {"receive", "put", "get"};
    protocol_error(fmt::format("{} for unknown {} id {}", frame, kWhat[static_cast<uint8_t>(kind)], id));
  }
  return op;
}

void EndpointCore::handle_chunk(const ChunkFrame& f) {
  RxTransfer* op = find_announced("CHUNK", f.kind, f.recv_id);
  if (op == nullptr) return;
  if (std::string violation = chunks_.expect(op, f.stream, f.offset, f.length,
                                             f.has_crc ? std::optional<uint32_t>(f.crc) : std::nullopt);
      !violation.empty()) {
    protocol_error(std::move(violation));
    return;
  }
  read_stream(f.stream);
}

bool EndpointCore::same_host_negotiated() const noexcept {
  return config_.same_host_pulls && (params_.peer_capabilities & wire::kCapSameHost) != 0;
}

void EndpointCore::handle_host(const wire::HostFrame& f) {
  if (!same_host_negotiated()) {
    protocol_error("HOST on an endpoint without same-host pulls negotiated");
    return;
  }
  if (f.can_pull) {
    // The peer read our probe: it reads our chunks itself from now on.
    if (chunks_.pull_tx()) {
      protocol_error("HOST with can_pull twice");
      return;
    }
    chunks_.enable_pull_tx(config_.pull_huge_pages);
    return;  // read_control pumps: ready transfers go as PULLs
  }
  if (host_heard_) {
    protocol_error("a second HOST identity");
    return;
  }
  host_heard_ = true;
  // A stream steered to devmem or zcrx RX takes its bytes from a NIC queue; such an
  // endpoint's peer is on another host anyway, and this side keeps it on TCP.
  for (uint16_t i = 0; i < chunks_.streams(); ++i) {
    if (chunks_.stream_in(i) != nullptr && chunks_.stream_in(i)->devmem() != nullptr) {
      same_host_reason_ = "this side receives into device memory through devmem or zcrx RX queues";
      return;
    }
  }
  same_host_reason_ = net::same_host_refusal(net::HostIdentity{.pid = f.pid,
                                                               .boot_id = f.boot_id,
                                                               .netns = f.netns,
                                                               .probe_address = f.probe_address,
                                                               .probe_value = f.probe_value});
  if (!same_host_reason_.empty()) {
    REMORA_LOG(kDebug, "endpoint to {}: chunks stay on TCP: {}", params_.peer, same_host_reason_);
    return;
  }
  chunks_.enable_pull_rx(static_cast<pid_t>(f.pid));
  append_frame(host_frame(/*can_pull=*/true));
}

void EndpointCore::handle_pull(const wire::PullFrame& f) {
  RxTransfer* op = find_announced("PULL", f.kind, f.recv_id);
  if (op == nullptr) return;
  if (std::string violation = chunks_.expect_pull(op, f.offset, f.length, f.address,
                                                  f.has_crc ? std::optional<uint32_t>(f.crc) : std::nullopt);
      !violation.empty()) {
    protocol_error(std::move(violation));
    return;
  }
  chunks_.read_pulls();
  if (state_ == State::kDraining) maybe_finalize();
}

void EndpointCore::handle_pulled(const wire::PulledFrame& f) {
  if (std::string violation = chunks_.pulled(f.kind, f.recv_id, f.length); !violation.empty()) {
    protocol_error(std::move(violation));
  }
}

void EndpointCore::handle_abort(const wire::AbortFrame& f) {
  RxTransfer* in = find_in(f.kind, f.id);
  if (in == nullptr || in->doomed) {
    static constexpr const char* kWhat[] = {"receive", "put", "get"};
    protocol_error(std::string("ABORT for unknown ") + kWhat[static_cast<uint8_t>(f.kind)] + " id " +
                   std::to_string(f.id));
    return;
  }
  // What was announced still arrives; nothing more will be.
  in->doomed = true;
  if (in->failure.is_ok()) {
    in->failure = Status(f.code, fmt::format("peer {} stopped sending after {} of {} bytes: its side of the transfer "
                                             "failed ({})",
                                             params_.peer, in->announced, in->length, to_string(f.code)));
  }
  if (in->complete()) received(*in);
}

void EndpointCore::handle_credit(const CreditFrame& f) {
  if (f.bytes > params_.peer_eager_credit || tx_credit_ > params_.peer_eager_credit - f.bytes) {
    protocol_error("CREDIT returns more than was granted");
    return;
  }
  tx_credit_ += f.bytes;
}

void EndpointCore::handle_goodbye(const GoodbyeFrame& f) {
  if (f.reason != static_cast<uint32_t>(wire::GoodbyeReason::kClosed) &&
      f.reason != static_cast<uint32_t>(wire::GoodbyeReason::kAborted)) {
    protocol_error("GOODBYE with unknown reason " + std::to_string(f.reason));
    return;
  }
  peer_goodbye_ = static_cast<wire::GoodbyeReason>(f.reason);
}

// ---------------------------------------------------------------------------
// Data streams
// ---------------------------------------------------------------------------

void EndpointCore::pump(bool one_round) {
  // Schedule chunks onto streams with room, announce them, push bytes; repeat while
  // streams drain fast enough to take more. Stop only when nothing more can be
  // scheduled (every stream holds a chunk it could not write, or nothing is ready):
  // only then is a later EPOLLOUT edge guaranteed to call us again. Stopping earlier
  // (one round for a posting thread; another thread waiting for the lock) leaves
  // streams with room and no edge to come, so resume() goes on at the next round.
  while (state_ == State::kActive) {
    bool scheduled = chunks_.schedule();
    flush_control();
    if (state_ != State::kActive) return;
    chunks_.write_all();
    if (state_ != State::kActive) return;
    if (!scheduled) break;
    if (one_round || engine_->lock_wanted()) {
      queue_resume();
      break;
    }
  }
  // Finishing a chunk may have queued a reply (a served GET's RESP).
  if (state_ == State::kActive && ctl_tx_off_ < ctl_tx_.size()) flush_control();
}

void EndpointCore::queue_resume() {
  if (resume_queued_) return;
  resume_queued_ = true;
  engine_->at_next_round([weak = weak_from_this()] {
    if (auto self = weak.lock()) self->resume();
  });
}

void EndpointCore::resume() {
  resume_queued_ = false;
  if (state_ != State::kActive && state_ != State::kDraining) return;
  chunks_.resume();
  if (state_ == State::kDraining) maybe_finalize();
  if (state_ == State::kActive) pump();
}

void EndpointCore::sent(TxTransfer& out) {
  switch (out.kind) {
    case wire::ChunkKind::kMessage: {
      auto it = sends_.find(out.owner);
      if (it == sends_.end()) return;
      if (!out.failure.is_ok()) {
        // Its source failed after part of it was announced: the receiver must hear
        // that nothing more comes.
        append_frame(wire::AbortFrame{.id = out.chunk_id, .kind = out.kind, .code = out.failure.code()});
        complete_send(it->second.get(), out.failure);
        return;
      }
      if (it->second->staged) stats_.staged_bytes += out.length;
      if (it->second->devmem_source) {
        // Complete once the NIC has read every byte (devmem_send_completed).
        if (it->second->devmem_source->pending() > 0) {
          it->second->awaiting_completions = true;
          return;
        }
        ++stats_.devmem_transfers;
      }
      complete_send(it->second.get(), Status::ok());
      return;
    }
    case wire::ChunkKind::kPut:
      // The put completes at its RESP, which the target sends only once every byte is
      // in (an earlier RESP is a protocol violation, see RmaInitiator::handle_resp). A
      // put whose device memory could not be staged was cut short: the target hears
      // that nothing more comes, and answers.
      if (!out.failure.is_ok()) {
        append_frame(wire::AbortFrame{.id = out.chunk_id, .kind = out.kind, .code = out.failure.code()});
      }
      return;
    case wire::ChunkKind::kGet:
      // A served get out of device memory that could not be staged was cut short: the
      // initiator hears that nothing more comes (the RESP then says device_failed).
      if (!out.failure.is_ok()) {
        append_frame(wire::AbortFrame{.id = out.chunk_id, .kind = out.kind, .code = out.failure.code()});
      }
      target_.get_sent(out.owner);
      return;
  }
}

void EndpointCore::complete_send(SendOp* op, const Status& s) {
  if (s.is_ok()) stats_.bytes_sent += op->out.length;
  --outstanding_;
  const uint64_t bytes = s.is_ok() ? op->out.length : op->out.written;
  auto node = sends_.extract(op->id);
  finish_staged_send(std::move(node.mapped()), s, bytes);
}

void EndpointCore::finish_staged_send(std::unique_ptr<SendOp> op, const Status& why, uint64_t bytes) {
  if (op->staged && op->staged->in_flight() > 0) {
    staged_sends_ending_.emplace_back(std::move(op), why);  // staging_progressed completes it
    return;
  }
  op->req->complete(why, bytes);
}

void EndpointCore::finish_recv(RecvOp* op) {
  if (!op->in.failure.is_ok()) {
    op->req->complete(op->in.failure, op->in.received);  // a chunk failed, or the sender aborted
  } else if (op->in.doomed) {
    op->req->complete(failure_.is_ok() ? Status(StatusCode::kPeerFailed, "peer went away mid-message") : failure_,
                      op->in.received);
  } else {
    ++stats_.messages_received;
    stats_.bytes_received += op->in.length;
    if (op->devmem_rx) {
      ++(op->zcrx_rx ? stats_.zcrx_transfers : stats_.devmem_transfers);
    } else if (op->staged) {
      stats_.staged_bytes += op->in.length;
    }
    op->req->complete(Status::ok(), op->in.length);
  }
  --outstanding_;
  recvs_.erase(op->in.id);
}

void EndpointCore::received(RxTransfer& in) {
  switch (in.kind) {
    case wire::ChunkKind::kMessage: {
      auto it = recvs_.find(in.id);
      if (it != recvs_.end()) finish_recv(it->second.get());
      return;
    }
    case wire::ChunkKind::kPut: target_.put_received(in.id); return;
    case wire::ChunkKind::kGet: initiator_.get_received(in.id); return;
  }
}

void EndpointCore::read_stream(uint16_t index) {
  if (state_ != State::kActive && state_ != State::kDraining) return;
  chunks_.read(index);
  if (state_ == State::kDraining) maybe_finalize();
}

void EndpointCore::stream_ended(uint16_t index) {
  if (state_ == State::kActive && control_.valid()) {
    // A peer closing orderly hands GOODBYE and its control stream's FIN to the
    // kernel before it ends its data streams, but this side may see a data stream
    // end first (its event was harvested first; on a network the streams race).
    // Read the control stream before judging: a GOODBYE there makes this the
    // orderly close it is. (read_control may end the endpoint's active state and
    // re-read this stream itself; then there is nothing left to do here.)
    read_control();
    if (state_ == State::kActive && peer_goodbye_.has_value()) {
      handle_control_eof(Status(StatusCode::kPeerFailed, "peer " + params_.peer + " said GOODBYE"));
    }
    if (state_ != State::kActive) return;
  }
  fail_locked(Status(StatusCode::kPeerFailed, "peer " + params_.peer + " closed data stream " +
                                                  std::to_string(index) + " in the middle of a message"));
}

void EndpointCore::on_data_event(uint16_t index, uint32_t events) {
  if (state_ != State::kActive && state_ != State::kDraining) {
    if (linger_) linger_->progress();  // closed: the sockets are draining (see close)
    return;
  }
  if (events & EPOLLIN) liveness_.heard();
  if ((events & EPOLLERR) && devmem_streams_.enabled(chunks_.fd(index))) {
    // Zero-copy completions of devmem sends (a socket error, if that is what this is,
    // is read below as before).
    Status s = devmem_streams_.drain(chunks_.fd(index), [this](uint64_t id) { devmem_send_completed(id); });
    if (!s) {
      fail_locked(s.with_context("devmem TX completions on data stream " + std::to_string(index)));
      return;
    }
  }
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    if (events & (EPOLLRDHUP | EPOLLHUP)) chunks_.hung_up(index);
    read_stream(index);
  }
  if (state_ == State::kActive && (events & EPOLLOUT)) {
    chunks_.writable(index);
    if (state_ == State::kActive) pump();
  }
  // Finishing a chunk may have queued a reply (a served PUT's RESP).
  if (state_ == State::kActive && ctl_tx_off_ < ctl_tx_.size()) flush_control();
}

// ---------------------------------------------------------------------------
// Liveness (transport/liveness.h): the endpoint's side of the heartbeat
// ---------------------------------------------------------------------------

void EndpointCore::start_liveness() {
  // TCP_USER_TIMEOUT on every stream (Liveness::user_timeout_ms): data unacknowledged
  // that long (a link gone down) fails the socket, whatever the heartbeat sees.
  const uint32_t user_timeout = Liveness::user_timeout_ms(config_.peer_timeout_ms);
  Status s = Liveness::set_user_timeout(control_.get(), user_timeout);
  for (uint16_t i = 0; i < data_watch_.size() && s.is_ok(); ++i) s = Liveness::set_user_timeout(chunks_.fd(i), user_timeout);
  if (!s.is_ok()) REMORA_LOG(kWarn, "endpoint to {}: {}; a dead link is noticed by heartbeats only", params_.peer, s.message());
  if (!liveness_.probes()) {
    REMORA_LOG(kInfo, "peer {} does not answer heartbeats (an older remora): a stopped peer is not noticed",
               params_.peer);
  }
  liveness_.start(weak_from_this());
}

bool EndpointCore::awaiting_peer() const {
  // A thread waiting for a notification awaits the peer as a posted receive does: without
  // it, a wait_notification() on a stopped peer with nothing else outstanding ran to its
  // own timeout instead of failing at the peer timeout (found by the fault matrix,
  // tests/faults, put-in × sigstop).
  return outstanding_ > 0 || initiator_.outstanding() > 0 || target_.serving() || !recvs_.empty() || !chunks_.idle() ||
         ctl_tx_off_ < ctl_tx_.size() || notifications_.waited_for();
}

void EndpointCore::read_input() {
  if (state_ == State::kActive) read_control();
  for (uint16_t i = 0; i < data_watch_.size() && (state_ == State::kActive || state_ == State::kDraining); ++i) {
    read_stream(i);
  }
}

void EndpointCore::send_probe(uint64_t seq) {
  if (state_ != State::kActive || !control_.valid()) return;  // draining: nothing to probe with
  append_frame(wire::HeartbeatFrame{.seq = seq, .reply = false});
  flush_control();
}

void EndpointCore::handle_heartbeat(const wire::HeartbeatFrame& f) {
  if (f.reply) {
    liveness_.replied(f.seq);
    return;
  }
  append_frame(wire::HeartbeatFrame{.seq = f.seq, .reply = true});  // read_control's pump flushes it
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Endpoint (public handle)
// ---------------------------------------------------------------------------

Endpoint::Endpoint(std::shared_ptr<detail::EndpointCore> core) noexcept : core_(std::move(core)) {}
Endpoint::~Endpoint() {
  if (core_) core_->close(wire::GoodbyeReason::kClosed);
}
Request Endpoint::send(std::span<const std::byte> data, Tag tag) { return core_->send(data, tag); }
Request Endpoint::recv(std::span<std::byte> buffer, Tag tag) { return core_->recv(buffer, tag); }
void Endpoint::close() { core_->close(wire::GoodbyeReason::kClosed); }
void Endpoint::abort() { core_->close(wire::GoodbyeReason::kAborted); }
bool Endpoint::failed() const { return core_->failed(); }
bool Endpoint::closed_by_peer() const { return core_->closed_by_peer(); }
bool Endpoint::peer_said_goodbye() const { return core_->peer_said_goodbye(); }
Status Endpoint::failure() const { return core_->failure(); }
EndpointId Endpoint::id() const { return core_->id(); }
std::string Endpoint::peer_address() const { return core_->peer(); }
uint32_t Endpoint::data_streams() const { return core_->streams(); }
EndpointStats Endpoint::stats() const { return core_->stats(); }

Request Endpoint::put(std::span<const std::byte> local, const RemoteKey& key, uint64_t remote_offset,
                      const PutOptions& options) {
  return core_->put(local, key, remote_offset, options);
}
Request Endpoint::get(std::span<std::byte> local, const RemoteKey& key, uint64_t remote_offset) {
  return core_->get(local, key, remote_offset);
}
Request Endpoint::fetch_add(uint64_t* result, const RemoteKey& key, uint64_t remote_offset, uint64_t value) {
  return core_->atomic(result, key, remote_offset, wire::AtomicOp::kFetchAdd, value, 0);
}
Request Endpoint::compare_swap(uint64_t* result, const RemoteKey& key, uint64_t remote_offset, CompareSwap operands) {
  return core_->atomic(result, key, remote_offset, wire::AtomicOp::kCompareSwap, operands.desired, operands.expected);
}
Request Endpoint::flush() { return core_->flush(); }
std::optional<Notification> Endpoint::poll_notification() { return core_->poll_notification(); }
Result<Notification> Endpoint::wait_notification(Duration timeout) {
  const engine::WaitBound bound(timeout, *core_->engine());
  return bound.explain(core_->wait_notification(bound.timeout()));
}
void Endpoint::set_notification_handler(std::function<void(const Notification&)> handler) {
  core_->set_notification_handler(std::move(handler));
}

}  // namespace remora
