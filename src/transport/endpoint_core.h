// transport/endpoint_core.h — the state machine of one endpoint, composed of parts:
// EndpointCore keeps set-up, control-stream framing and dispatch (each frame goes to
// the part that handles it), the one place that decides whether data travels inline on
// the control stream or in chunks (transfer_class), and the one failure path
// (fail_locked, handle_control_eof), which fails every part. Its own protocols are in
// files named for them: messages.cc (send and recv: eager or rendezvous), eager.cc
// (EAGER and CREDIT), rendezvous.cc (RTS, CTS and a message's chunks), one_sided.cc (the
// entry points of one-sided operations and the dispatch of the peer's requests),
// data_streams.cc (the chunk scheduler's owner), same_host_pulls.cc (HOST, PULL, PULLED);
// endpoint.cc keeps set-up, framing, dispatch and failure. The parts, each behind a
// narrow interface this class implements:
//   - DataPaths (datapath/data_paths.h): how each operation's bytes move; the one place
//     its source or sink is chosen, for its memory and transfer class;
//   - Matcher (matcher.h): posted receives and unexpected messages;
//   - ChunkScheduler (datapath/chunk_scheduler.h): the data streams and their chunks,
//     moved through ChunkSources and ChunkSinks; this class says what completing one means;
//   - RmaInitiator (rma_initiator.h): the one-sided operations this side initiates;
//   - RmaTarget (rma_target.h): the peer's one-sided requests this side serves;
//   - Notifications (notifications.h): what notified puts delivered to this side;
//   - LingeringClose (linger.h): the sockets of a closed endpoint;
//   - Liveness (liveness.h): the heartbeat, and the verdict on a silent peer.
//
// Everything here runs with the progress lock held (the engine's mutex); public
// Endpoint methods take it. Ops are owned by the maps below and by the parts; the
// scheduler's queues point into them and are cleared before an op is destroyed.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/log.h"
#include "datapath/chunk_io.h"
#include "datapath/chunk_scheduler.h"
#include "datapath/data_paths.h"
#include "datapath/path_end.h"
#include "datapath/rejoin_backoff.h"
#include "datapath/staging.h"
#include "engine/progress.h"
#include "engine/request_state.h"
#include "net/seal.h"
#include "net/socket.h"
#include "remora/config.h"
#include "remora/endpoint.h"
#include "transport/direct_map.h"
#include "transport/linger.h"
#include "transport/liveness.h"
#include "transport/matcher.h"
#include "transport/notifications.h"
#include "transport/rma_initiator.h"
#include "transport/rma_target.h"
#include "transport/shm_channel.h"
#include "wire/frame.h"
#include "wire/handshake.h"

namespace remora::detail {

class ContextCore;

class EndpointCore final : public std::enable_shared_from_this<EndpointCore>,
                           private ChunkScheduler::Owner,
                           private RmaInitiator::Owner,
                           private RmaTarget::Owner,
                           private Notifications::Owner,
                           private StagingHost,
                           private Liveness::Owner {
 public:
  struct Params {
    EndpointId id{};
    uint32_t streams = 1;
    uint32_t peer_eager_limit = 0;
    uint32_t peer_eager_credit = 0;
    uint32_t peer_rma_window = 1;
    const MemoryRegistry* registry = nullptr;  ///< the context's; outlives every active endpoint
    /// The context's devmem TX bindings of registered regions (null: none kept).
    std::shared_ptr<DevmemTxBindingCache> devmem_tx_bindings;
    /// The context's device domains (Context::add_memory_domain); read with the lock held.
    const std::vector<MemoryDomain*>* domains = nullptr;
    /// The context's workers (REMORA_PROGRESS_THREADS above 1), else null.
    std::shared_ptr<StreamWorkers> stream_workers;
    std::string peer;
    uint64_t peer_capabilities = 0;  ///< the peer's HELLO / HELLO_ACK capability bits (wire/handshake.h)
  };

  EndpointCore(std::shared_ptr<engine::ProgressEngine> engine, const Config& config, Params params);
  ~EndpointCore();

  // --- setup, lock held -----------------------------------------------------
  void set_control(net::Fd fd);
  /// kProtocol for an out-of-range or duplicate index.
  /// Attaches data stream `index`; `in` (from steer_data_stream) is how it is read.
  Status set_data(uint16_t index, net::Fd fd, std::unique_ptr<StreamIn> in = nullptr);
  /// Before any payload can arrive on data stream socket `fd`: with REMORA_RXQ_SOCKET
  /// set and device memory domains in the context, asks rxq to steer its flow to devmem
  /// RX queues (one rxq connection per endpoint, open for its life) and returns the
  /// stream's devmem StreamIn; otherwise, or when rxq or the kernel refuse (the reason
  /// is kept for the path choice), a plain one. Blocks up to `deadline` (rxq's answer).
  std::unique_ptr<StreamIn> steer_data_stream(int fd, net::Clock::time_point deadline) {
    return paths_.steer(fd, deadline);
  }
  /// The same for data stream `index`, attached already (the accepting side).
  void steer_stream(uint16_t index, net::Clock::time_point deadline) {
    attach_stream_in(index, steer_data_stream(chunks_.fd(index), deadline));
  }
  /// Data stream `index` is read through `in` when it is a devmem or zcrx one (a zcrx
  /// stream's arrivals are posted to the engine as data events: its socket does not
  /// stay readable).
  void attach_stream_in(uint16_t index, std::unique_ptr<StreamIn> in);
  bool all_streams_attached() const noexcept;
  /// The connecting side's rails it could not use (RailStats with state "skipped"), and
  /// the interface name of each local address it bound (for EndpointStats::rails).
  void set_rail_notes(std::vector<RailStats> skipped, std::vector<std::pair<std::string, std::string>> interfaces) {
    skipped_rails_ = std::move(skipped);
    rail_interfaces_ = std::move(interfaces);
  }
  /// Registers every socket with the engine and starts serving. Lock held.
  Status activate();

  // Rejoin (data_streams.cc; docs/protocol.md "Failover"): a data stream retired on both
  // sides is connected again by the connecting side, through the listener, when both
  // offer kCapRejoin. Lock held for all of these.
  /// Connecting side: `connect_again(index)` starts an attempt (off the progress thread)
  /// that ends in rejoin_done. Set by ContextCore::connect.
  void set_rejoiner(std::function<void(uint16_t)> connect_again) { rejoiner_ = std::move(connect_again); }
  /// Listening side: what a rejoin HELLO must carry (the attach token of the first
  /// handshake), and the cipher its stream must be sealed with (none: in clear).
  void allow_rejoin(uint64_t token, std::optional<net::SealCipher> cipher) {
    rejoin_token_ = token;
    rejoin_cipher_ = cipher;
  }
  /// Listening side: whether a rejoin HELLO with `token` may attach stream `index` now.
  bool rejoin_wanted(uint64_t token, uint16_t index) const noexcept;
  const std::optional<net::SealCipher>& rejoin_cipher() const noexcept { return rejoin_cipher_; }
  /// Listening side: the rejoin HELLO was accepted; the stream is read from now on and
  /// written once the peer's REJOINED came.
  Status rejoin_accept(uint16_t index, net::Fd fd);
  /// Connecting side: the attempt for `index` ended: `fd` connected and sealed, or the
  /// reason it failed (tried again a peer timeout later).
  void rejoin_done(uint16_t index, net::Fd fd, const Status& why);
  // Resuming the control stream (resume.cc; docs/protocol.md "Resuming the control
  // stream"): a control connection that resets is connected again by the connecting side,
  // through the listener, when both offer kCapResume; each side then replays what the
  // other had not handled. Lock held for all of these.
  /// Connecting side: `connect_again(n)` starts attempt n (off the progress thread) that
  /// ends in resume_done. Set by ContextCore::connect.
  /// The control connection's path that went quiet: a resumption after the liveness
  /// verdict tries the other paths first.
  struct QuietPath {
    net::SockAddr local;
    net::SockAddr peer;
  };
  /// How the connecting side connects the control stream again: attempt `n` (0, 1, ...:
  /// the paths in turn), avoiding `quiet` where another path is left (null: any).
  using Resumer = std::function<void(uint32_t n, const QuietPath* quiet)>;
  void set_resumer(Resumer connect_again) { resumer_ = std::move(connect_again); }
  /// Listening side: whether this context still listens (a resume comes through a listener).
  void set_listening(std::function<bool()> listening) { listening_ = std::move(listening); }
  /// Listening side: whether a resume HELLO with `token` may take the control stream now.
  bool resume_wanted(uint64_t token) const noexcept;
  /// Listening side: the resume HELLO was accepted, its ACK sent and the connection
  /// sealed: `fd` is the control stream from now on (an old one still open is dropped).
  void resume_accept(net::Fd fd);
  /// Connecting side: the attempt ended: `fd` connected, answered and sealed, or why not;
  /// `refused`: nothing listens where the endpoint first connected.
  void resume_done(net::Fd fd, const Status& why, bool refused);
  /// Called by the context when the endpoint is gone for good (lock held) so it can
  /// forget it. May be null.
  void set_on_closed(std::function<void(EndpointId)> fn) { on_closed_ = std::move(fn); }

  // --- public API (takes the lock) ------------------------------------------
  Request send(std::span<const std::byte> data, Tag tag);
  Request recv(std::span<std::byte> buffer, Tag tag);
  /// This endpoint's part of a receive from any of several endpoints (recv_any.cc):
  /// takes `claim` with a message that already arrived, or posts a copy that may take
  /// it later; does nothing once the claim is decided or when the peer closed and sent
  /// nothing more for `tag`. An endpoint that cannot receive fails the claim.
  void post_claimed(std::span<std::byte> buffer, Tag tag, const std::shared_ptr<RecvClaim>& claim, int index);
  Request put(std::span<const std::byte> local, const RemoteKey& key, uint64_t offset, const PutOptions& options);
  Request get(std::span<std::byte> local, const RemoteKey& key, uint64_t offset);
  /// Puts (or gets) of many items under one hold of the lock, their frames sent together
  /// and pumped once (batch.cc): a list of small blocks then costs the peer one wake-up,
  /// not one per item. Appends one Request per item to `out`, in order; an item whose
  /// memory needs a copy before posting (device memory travelling inline) ends the run:
  /// returns how many items were posted, and the caller posts the rest one by one.
  size_t post_batch(std::span<const TransferItem> items, Direction direction, std::vector<Request>& out);
  /// The items of a batch that go as segmented requests (docs/protocol.md "Segments"),
  /// in groups of one key, each of 2 to wire::kMaxSegments items and more bytes than
  /// travel inline: items whose memory on both sides is host memory and whose range the
  /// key grants (so a group is refused only where each of its items would have been),
  /// where the peer takes segments and neither side reads the other's memory (same-host
  /// pulls move blocks with one copy). Empty when none qualify.
  std::vector<std::vector<size_t>> segment_groups(std::span<const TransferItem> items, Direction direction);
  /// Posts the items `group` of `items` (one of segment_groups') as one segmented put or get.
  Request post_segmented(std::span<const TransferItem> items, std::span<const size_t> group, Direction direction);
  Request atomic(uint64_t* result, const RemoteKey& key, uint64_t offset, wire::AtomicOp op, uint64_t operand,
                 uint64_t compare);
  Request flush();
  std::optional<Notification> poll_notification() { return notifications_.poll(); }
  Result<Notification> wait_notification(Duration timeout) { return notifications_.wait(timeout); }
  void set_notification_handler(std::function<void(const Notification&)> handler) {
    notifications_.set_handler(std::move(handler));
  }
  /// Closes with GOODBYE `reason` (kClosed for Endpoint::close, kAborted for abort).
  void close(wire::GoodbyeReason reason);
  bool failed() const;
  bool closed_by_peer() const;
  bool peer_said_goodbye() const;
  Status failure() const;
  /// Endpoint::watch_peer (any thread).
  void watch_peer(bool on) noexcept {
    if (on) {
      peer_watchers_.fetch_add(1, std::memory_order_relaxed);
    } else {
      peer_watchers_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  EndpointId id() const noexcept { return params_.id; }
  const std::string& peer() const noexcept { return params_.peer; }
  uint32_t streams() const noexcept { return params_.streams; }
  EndpointStats stats() const;
  std::shared_ptr<engine::ProgressEngine> engine() const noexcept { return engine_; }

  // --- lock held ------------------------------------------------------------
  /// Fails every outstanding op with `why` and closes the sockets. Idempotent.
  void fail_locked(const Status& why);

 private:
  /// A rendezvous send.
  struct SendOp {
    std::shared_ptr<RequestState> req;
    Tag tag{};
    uint64_t id = 0;
    uint64_t recv_id = 0;
    PathEnd end;                    // where its bytes come from (DataPaths::choose); out.source is its source
    bool awaiting_release = false;  // every byte is in the kernel; zero-copy sends not all released
    TxTransfer out;
  };
  class ControlHandler final : public engine::EventHandler {
   public:
    explicit ControlHandler(EndpointCore* ep) : ep_(ep) {}
    void on_event(uint32_t events) override { ep_->on_control_event(events); }
    bool pollable() const override { return true; }
    int poll_read() override { return ep_->poll_control(); }

   private:
    EndpointCore* ep_;
  };
  /// The eventfd of the shared-memory channel (shm_channel.h): the peer wrote into this
  /// side's ring, or read from its own and made room.
  class RingHandler final : public engine::EventHandler {
   public:
    explicit RingHandler(EndpointCore* ep) : ep_(ep) {}
    void on_event(uint32_t events) override { ep_->on_ring_event(events); }
    bool pollable() const override { return true; }
    int poll_read() override { return ep_->poll_control(); }
    int poll_round() override { return ep_->poll_ring(/*arm=*/false); }
    int arm_for_sleep() override { return ep_->poll_ring(/*arm=*/true); }

   private:
    EndpointCore* ep_;
  };
  class DataHandler final : public engine::EventHandler {
   public:
    DataHandler(EndpointCore* ep, uint16_t index) : ep_(ep), index_(index) {}
    void on_event(uint32_t events) override { ep_->on_data_event(index_, events); }

   private:
    EndpointCore* ep_;
    uint16_t index_;
  };
  /// A data stream's registration with the engine (its socket is the scheduler's).
  struct DataWatch {
    engine::HandlerId hid;
    std::unique_ptr<DataHandler> handler;
  };

  // events
  void on_control_event(uint32_t events);
  /// What the control stream is watched for, plus EPOLLOUT while a send is blocked.
  static constexpr uint32_t kControlEvents = EPOLLIN | EPOLLRDHUP;
  void watch_control_output(bool on);
  void on_data_event(uint16_t index, uint32_t events);
  /// Reads and handles what the control stream holds; true if any bytes were read.
  bool read_control();
  /// read_control without an event (a spinning poller's direct read): 1 if it read
  /// something, 0 if not, -1 (no system call) while bulk data is moving on the data
  /// streams: then every poll should be an epoll_wait, which also sees their EPOLLOUT
  /// and EPOLLIN (measured: direct control reads during a 1 MiB stream cost 17%).
  int poll_control();
  /// The shared-memory ring, polled in every progress round (arm: before the progress
  /// thread sleeps, asking the peer to wake it; engine::EventHandler::poll_round): 1 if
  /// anything was read, else 0. Unlike poll_control, also while data moves (no system
  /// call). Lock held.
  int poll_ring(bool arm);
  void handle_frame(const wire::Frame& frame);
  void handle_eager(const wire::EagerFrame& f);
  void handle_rts(const wire::RtsFrame& f);
  void handle_cts(const wire::CtsFrame& f);
  void handle_chunk(const wire::ChunkFrame& f);
  /// The transfer a CHUNK, PULL or ABORT (`frame`) names, or null after failing the
  /// endpoint with a protocol error naming it.
  RxTransfer* find_announced(std::string_view frame, wire::ChunkKind kind, uint64_t id);
  void handle_credit(const wire::CreditFrame& f);
  void handle_goodbye(const wire::GoodbyeFrame& f);
  void handle_abort(const wire::AbortFrame& f);
  void handle_heartbeat(const wire::HeartbeatFrame& f);
  // Failover (data_streams.cc; docs/protocol.md "Failover"): RECEIVED confirms chunks
  // read whole; RETIRE gives a data stream up, and its unconfirmed chunks go again.
  void handle_received(const wire::ReceivedFrame& f);
  void handle_retire(const wire::RetireFrame& f);
  /// Gives data stream `index` up (`why`: it broke, or the peer retired it): out of the
  /// poller, closed, and RETIRE sent; the last live stream's loss fails the endpoint.
  void retire_stream(uint16_t index, const Status& why);
  void handle_rejoined(const wire::RejoinedFrame& f);
  // Resuming the control stream (resume.cc).
  /// Whether a broken control connection is waited out now: both sides offer it, no
  /// shared-memory channel, no GOODBYE came, and the connecting side can connect again
  /// (the listening side: it still listens).
  bool can_resume() const noexcept;
  /// The control connection broke (`why`: a reset, not an end): drops it and waits for it
  /// to be connected again (the connecting side tries at once). False (nothing done) if
  /// the endpoint cannot resume.
  bool begin_resume(const Status& why);
  /// Connecting side: starts an attempt unless one is in flight.
  void maybe_resume();
  /// `fd` is the control stream from now on: HANDLED (RESUMED) first, then the replay
  /// once the peer's came.
  void install_control(net::Fd fd);
  void handle_handled(const wire::HandledFrame& f);
  /// Counts a frame of `size` bytes handled off the control stream (and acknowledges
  /// every kAckEvery bytes).
  void count_handled(size_t size, bool is_handled_frame);
  /// Queues HANDLED with what was handled, if anything but HANDLED frames came since.
  void acknowledge_handled();
  /// The control output's first `size` bytes were all sent: kept for a replay (or dropped).
  void control_output_sent();
  /// Whether sent control bytes are kept until the peer handled them.
  bool keeps_replay() const noexcept { return resume_ok_ && shm_ == nullptr; }
  /// HANDLED goes at least every this many bytes handled (and on a liveness tick).
  static constexpr uint64_t kAckEvery = uint64_t{256} << 10;
  /// Sent control bytes the peer has not handled beyond this fail the endpoint: a healthy
  /// peer acknowledges long before (kAckEvery), so the replay buffer stays small.
  static constexpr uint64_t kReplayLimit = uint64_t{64} << 20;
  /// Sent output of at most kReplayCopy bytes is copied behind the last replay buffer
  /// while that stays within kReplayBuffer; larger output is kept in its own buffer.
  static constexpr size_t kReplayCopy = size_t{4} << 10;
  static constexpr size_t kReplayBuffer = size_t{256} << 10;
  /// Handled replay buffers kept for the next output, up to this much capacity in all, so
  /// that a stream of large frames (eager messages, inline get replies: a window of 64
  /// of 16 KiB makes a megabyte of output in one round) reuses memory between two
  /// HANDLED (kAckEvery) instead of allocating and faulting in a buffer per round. They
  /// are given back on the first tick that finds nothing sent since the one before. At
  /// most kSpareBuffers of them: enough for every buffer of one HANDLED's worth of
  /// messages just above kReplayCopy (64 of 4 KiB), which otherwise went back to malloc
  /// at each HANDLED and were faulted in again (a page fault per 4 KiB message).
  static constexpr size_t kSpareBytes = size_t{4} << 20;
  static constexpr size_t kSpareBuffers = 256;
  /// Keeps `buffer` (handled by the peer) for a later output if it fits in kSpareBytes.
  void keep_spare(std::vector<std::byte>&& buffer);
  /// The largest spare buffer, or an empty one.
  std::vector<std::byte> take_spare();
  /// Per liveness tick while resuming: fails the endpoint past resume_limit(), else tries again.
  void check_resume();
  /// On a liveness tick: starts an attempt for each rejoinable stream whose time came.
  void maybe_rejoin();
  // Same-host pulls (docs/protocol.md): HOST says who the peer is (and, with can_pull,
  // that it reads this side's memory); PULL announces a chunk to read out of the peer;
  // PULLED answers one of ours.
  bool same_host_negotiated() const noexcept;
  /// This process's HOST frame.
  static wire::HostFrame host_frame(bool can_pull);
  void handle_host(const wire::HostFrame& f);
  void handle_pull(const wire::PullFrame& f);
  void handle_pulled(const wire::PulledFrame& f);
  // The shared-memory channel (same_host_channel.cc; docs/protocol.md): the control
  // stream moves into rings in shared memory once both sides took the other's.
  bool shm_negotiated() const noexcept;
  /// Makes this side's ring and OFFERs it (the peer passed the same-host checks).
  void offer_shm();
  void handle_shm(const wire::ShmFrame& f);
  /// SWITCH, once this side took the peer's ring and the peer took this side's.
  void maybe_switch_tx();
  void on_ring_event(uint32_t events);
  /// After the peer's SWITCH the control socket carries nothing: an event on it is the
  /// peer's EOF or reset (read the ring dry first: what it wrote before it died), or
  /// bytes it had no right to send.
  void control_event_after_switch(uint32_t events);
  /// Drops the ring's registration with the engine and the channel (it ended).
  void release_shm();
  // Direct mappings (direct_map.h; docs/protocol.md): a small put or get with a key the
  // peer granted is a memcpy through a mapping of the peer's memory.
  bool direct_negotiated() const noexcept { return direct_negotiated_; }
  /// Both sides number their GRANTs and take PLACED_SHORT frames (kCapPlacedShort).
  bool placed_short_negotiated() const noexcept { return placed_short_negotiated_; }
  /// A put (`local` into the peer's window) or get done through a mapping: a completed
  /// request; an invalid Request when it must go the usual way (and then, for a key
  /// never seen, a MAP REQUEST is queued for the next one). A put's `notify` goes in a
  /// PLACED frame, on one of the places the peer's CREDITs gave this side.
  Request try_direct(Direction direction, std::span<const std::byte> local, const RemoteKey& key, uint64_t offset,
                     std::optional<uint64_t> notify = std::nullopt);
  /// An atomic done through a mapping (a hardware atomic on the peer's word); an invalid
  /// Request when it must go the usual way.
  Request try_direct_atomic(uint64_t* result, const RemoteKey& key, uint64_t offset, wire::AtomicOp op,
                            uint64_t operand, uint64_t compare);
  /// Where [offset, offset + length) of `key`'s window is mapped here, when this side may
  /// go through the mapping now (lock held): the channel up both ways, the key granted,
  /// nothing in flight the usual way, `local` (if any) host memory. A key never seen is
  /// asked about (MAP REQUEST) and goes the usual way meanwhile.
  DirectMaps::Found direct_target(const RemoteKey& key, uint64_t offset, uint64_t length, Access needed,
                                  std::span<const std::byte> local);
  void handle_map(const wire::MapFrame& f);
  /// The peer put through its mapping of a key this side granted: its notification.
  void handle_placed(const wire::PlacedFrame& f);
  /// The same in short, with the count of this side's PLACED frames the peer handled.
  void handle_placed_short(const wire::PlacedShortFrame& f);
  /// Both forms: the notification of the put through the mapping of `key` (or the
  /// protocol error it is), then the ACK, held back while a woken waiter's answer may
  /// carry it (PLACED_SHORT: placed_ack_held_), at once otherwise.
  void deliver_placed(const Result<RemoteKey>& key, uint64_t offset, uint64_t length, uint64_t notify);
  /// Queues a MAP ACK when this side handled PLACED frames the peer was not told of.
  void ack_placed();
  /// A held ACK (placed_ack_held_) no answer carried goes now.
  void release_placed_ack();
  /// Gives the peer places in this side's notification queue for its PLACED frames, up
  /// to DirectGrants::kCredits (bounded by REMORA_MAX_UNEXPECTED), half of them at a time.
  void credit_placed();
  /// A request for the RMA target: the target admits it, this side checks (a PUT) or
  /// decides (a GET's reply) its inline class, the target serves it.
  void serve_request(const wire::PutFrame& f);
  void serve_request(const wire::GetFrame& f);
  void serve_request(const wire::AtomicFrame& f);
  void handle_control_eof(const Status& why);
  /// Sets TCP_USER_TIMEOUT on every stream and starts the heartbeat (activate).
  void start_liveness();

  /// The one place that decides how data travels: a message (given credit) of at most
  /// the negotiated eager limit goes inline on the control stream, and so do a put's
  /// data and a get's reply of at most that and wire::kMaxInlineRma (rma_class); longer
  /// ones go in chunks on the data streams.
  TransferClass transfer_class(uint64_t length) const noexcept {
    return length <= eager_limit_ ? TransferClass::kInline : TransferClass::kChunked;
  }
  TransferClass rma_class(uint64_t length) const noexcept {
    return length <= wire::kMaxInlineRma ? transfer_class(length) : TransferClass::kChunked;
  }
  static Request failed_request(Status why, Tag tag = Tag{});

  // messages (messages.cc, eager.cc, rendezvous.cc)
  static constexpr size_t kEagerPrefix = wire::kFrameHeaderSize + wire::kEagerBodySize;
  /// What the largest frame with an inline payload adds to the payload (an inline PUT
  /// with its CRC).
  static constexpr size_t kMaxFramePrefix = wire::kFrameHeaderSize + wire::kPutBodySize + wire::kCrcSize;
  /// The control stream's receive buffer to start with (80 KiB per endpoint in all:
  /// docs/scaling.md); it grows once to two of the largest frames when one does not fit.
  static constexpr size_t kControlRxStart = size_t{64} << 10;
  /// An EAGER frame with `memory`'s bytes (host memory; `cost` of credit taken) on the
  /// control stream; the send completes at once.
  Request send_eager(const TransferMemory& memory, Tag tag, uint64_t cost);
  /// An RTS; the send completes once its chunks are written (and released).
  Request send_rendezvous(const TransferMemory& memory, Tag tag);
  /// A posted receive met an unexpected message of its tag.
  void match_unexpected(std::unique_ptr<RecvOp> op, Unexpected u, bool arrived_only);
  /// A receive into `buffer` completing `req`, its sink chosen for its memory
  /// (DataPaths::choose); the failure when no path takes it.
  Result<std::unique_ptr<RecvOp>> make_recv(std::span<std::byte> buffer, Tag tag, std::shared_ptr<RequestState> req);
  void deliver_eager(RecvOp& op, std::span<const std::byte> payload);
  /// A receive that ended, kept (emptied) for the next make_recv: it was made on the
  /// application's thread and often ended on the progress thread, where freeing it cost
  /// more than the rest of the receive's bookkeeping.
  void recycle(std::unique_ptr<RecvOp> op);
  void match_rendezvous(std::unique_ptr<RecvOp> op, uint64_t send_id, uint64_t length);
  void return_credit(uint64_t cost);
  /// A send's or receive's message did not fit (kTruncated, naming the tag).
  static Status truncated(uint64_t length, uint64_t capacity, Tag tag);
  /// Every byte of a message send is in the kernel (or its source failed).
  void message_sent(TxTransfer& out);
  void complete_send(SendOp* op, const Status& s);
  void finish_recv(RecvOp* op);
  /// Completes a failed receive whose copies into device memory are still in flight
  /// once they have ended (then nothing writes to its buffer any more), else now.
  void fail_staged_recv(std::unique_ptr<RecvOp> op, const Status& why);
  /// Completes a send with `why` (and `bytes`) once no copy out of its device memory is
  /// in flight (chunks staged ahead of one that failed), else now.
  void finish_staged_send(std::unique_ptr<SendOp> op, const Status& why, uint64_t bytes);
  /// Destroys the send (and what it holds), then completes its request.
  static void release_then_complete(std::unique_ptr<SendOp> op, Status status, uint64_t bytes);

  // one-sided operations (one_sided.cc)
  /// Admits a put or get (`what`) of `local`, chooses its source or sink, posts it with
  /// `post(end)` and makes its first round of progress. An inline put of device memory
  /// has its bytes copied to host memory first, without the lock.
  template <typename Post>
  Request post_one_sided(std::string_view what, Direction direction, std::span<const std::byte> local,
                         const Post& post);
  Request after_posting(RmaInitiator::Posted posted);
  /// The source (put) or sink (get) of a one-sided operation on `local`. Lock held.
  Result<PathEnd> choose_one_sided(Direction direction, std::span<const std::byte> local);
  /// The one-sided parts' share of a failure.
  void fail_one_sided(const Status& why);

  // data paths
  /// The kernel reported a zero-copy send done under cookie `id`: a message send's id, or
  /// a put's or a served get's (devmem_tx_path.h's cookie bits).
  void zero_copy_released(uint64_t id);
  void replies_queued() override {
    if (state_ == State::kActive || state_ == State::kDraining) flush_control();
  }
  // StagingHost
  void staged_chunk_placed(RxTransfer& t, uint64_t length, const Status& status) override;
  void staging_progressed() override;

  // ChunkScheduler::Owner
  void announce(const wire::ChunkFrame& frame) override { append_frame(frame); }
  void announce_pull(const wire::PullFrame& frame) override { append_frame(frame); }
  void answer_pull(const wire::PulledFrame& frame) override { append_frame(frame); }
  void sent(TxTransfer& t) override;
  void received(RxTransfer& t) override;
  void stream_failed(uint16_t index, const Status& why) override;
  void written(TxTransfer& t) override;
  void chunk_read(uint16_t index, uint64_t chunks) override;
  void resend_failed(const Status& why) override { fail_locked(why); }
  void stream_ended(uint16_t index) override;
  bool should_yield() override { return engine_->lock_wanted(); }
  void resume_later() override { queue_resume(); }
  void post(std::function<void()> fn) override;

  // RmaInitiator::Owner and RmaTarget::Owner (protocol_error below serves both)
  void queue_request(const wire::Frame& frame) override { append_frame(frame); }
  size_t queue_resp(const wire::RespFrame& frame) override {
    append_frame(frame);
    return ctl_tx_.size();
  }
  void send_chunks(TxTransfer* t) override { chunks_.ready(t); }
  void settle_sends() override { chunks_.reap_tx_jobs(); }

  // Notifications::Owner
  Status inactive() const override;
  void run_handler_later() override;
  // See the RESP coalescing below: only where the control stream is a socket. A write
  // into the shared-memory ring costs less than the wait for the answer's frame.
  void waiter_woken() override { hold_resps_ = shm_ == nullptr || !shm_->tx_on(); }

  // Liveness::Owner (liveness.h: the heartbeat and the silent-peer verdict)
  bool awaiting_peer() const override;
  void read_input() override;
  void send_probe(uint64_t seq) override;
  bool peer_silent(const Status& why) override;
  bool reconnecting() const override { return resuming_since_.has_value(); }
  void check_streams(std::chrono::steady_clock::duration timeout) override;
  bool watches_path() const override;
  bool path_quiet() override;

  // output
  /// Queues a frame on the control stream; with checksums, gives inline payloads their CRC.
  void append_frame(const wire::Frame& frame);
  void append_encoded(const wire::Frame& frame);
  void flush_control();
  /// Nothing is left in the control stream's queue: no RESP waits unsent, and the next
  /// frame queued starts a queue of RESPs only.
  void control_queue_empty() noexcept;
  /// Schedules chunks onto streams with room, announces them and writes. With
  /// `one_round` (a thread posting an operation) it writes at most one round, about a
  /// chunk per stream, so posting returns in bounded time whatever the size; otherwise
  /// it goes on while the streams take more, giving way when another thread wants the
  /// lock (lock_wanted). Work left over goes on at the next progress round (resume).
  void pump(bool one_round = false);
  /// Queues resume() for the next progress round of any thread (once).
  void queue_resume();
  /// Continues what pump and read_stream left when they gave way.
  void resume();
  /// Reads a data stream's chunks (the scheduler), then ends a draining endpoint
  /// once nothing is left to read.
  void read_stream(uint16_t index);
  RxTransfer* find_in(wire::ChunkKind kind, uint64_t id);
  void maybe_finalize();

  void protocol_error(std::string message) override;
  /// ok if a new operation may be posted now; else why not (endpoint down, too many outstanding).
  Status admission() const;
  bool alive() const noexcept { return state_ == State::kActive; }

  enum class State { kSetup, kActive, kDraining, kFailed };

  std::shared_ptr<engine::ProgressEngine> engine_;
  Config config_;
  Params params_;
  /// REMORA_CHECKSUM=crc32c: every payload carries its CRC-32C, and every payload that
  /// arrives must carry one (both sides agreed at connect: datapath/checksum.h).
  const bool checksum_ = config_.checksum == ChecksumMode::kCrc32c;
  /// Whether a frame's CRC flag is what this endpoint negotiated; a protocol error if not.
  bool crc_as_negotiated(bool has_crc, std::string_view frame);
  State state_ = State::kSetup;
  Status failure_;
  std::function<void(EndpointId)> on_closed_;

  net::Fd control_;
  engine::HandlerId control_hid_;
  ControlHandler control_handler_{this};
  // The scheduler holds pointers into the ops below and into the data paths' discard
  // sink; it never dereferences them while being destroyed.
  DataPaths paths_{{.config = &config_,
                    .engine = engine_,
                    .domains = params_.domains,
                    .devmem_tx_bindings = params_.devmem_tx_bindings,
                    .peer = params_.peer,
                    .stats = &stats_,
                    .host = this,
                    .streams = &chunks_}};
  ChunkScheduler chunks_;
  std::vector<DataWatch> data_watch_;
  // Rails (EndpointStats::rails): the streams grouped by their local and peer
  // addresses at activate(), each stream's group, and the connecting side's notes.
  /// Groups the data streams into rails by their addresses; several rails make the
  /// scheduler choose streams by measured rate.
  void group_rails();
  std::vector<RailStats> rails_;
  std::vector<uint16_t> stream_rail_;
  std::vector<std::string> retired_why_;  // per data stream: why it was last retired
  std::vector<RailStats> skipped_rails_;
  std::vector<std::pair<std::string, std::string>> rail_interfaces_;  // local address, interface

  bool resume_queued_ = false;  // resume() is queued for the next progress round

  // Rejoin (see set_rejoiner / allow_rejoin).
  std::function<void(uint16_t)> rejoiner_;
  std::vector<bool> rejoining_;                                   // per data stream: an attempt is in flight
  std::vector<RejoinBackoff> rejoin_backoff_;                     // per data stream: when the next may start
  uint64_t rejoin_token_ = 0;                                     // 0: no rejoin here
  /// Since when every data stream is retired (docs/rails.md), and why the last went: the
  /// endpoint waits for one to be connected again, bounded by reconnect_limit().
  std::optional<std::chrono::steady_clock::time_point> streamless_since_;
  std::string streamless_why_;
  std::string rejoin_error_;  // why the connecting side's last rejoin attempt failed ("" if it did not)
  /// Whether the endpoint may lose its last data stream and wait for a rejoin: both sides
  /// rejoin, and heartbeats (whose tick bounds the wait) run.
  bool may_lose_every_stream() const noexcept;
  /// How long the endpoint waits for a connection to come back (every data stream gone,
  /// or the control stream): the connecting side first (it knows why its attempts fail).
  std::chrono::steady_clock::duration reconnect_limit() const noexcept;
  /// "within N ms (what the limit is)" and the last attempt's error, for the failure.
  std::string reconnect_limit_words(const std::string& last_attempt) const;
  /// How long a resumption begun by the liveness verdict (peer_silent) may take: half
  /// the peer timeout, at least 2 s, for the connecting side; twice that for the
  /// listening side, whose peer may reach its own verdict up to a tick later.
  std::chrono::steady_clock::duration stall_limit() const noexcept;
  /// Whether this is the listening side of a control stream that broke while the peer
  /// ended every data stream as well (TCP says its FIN or reset came on each, or the
  /// endpoint has none): what a peer process's end looks like, its kernel closing every
  /// connection (with a reset where bytes were unread). A live peer's connecting side
  /// sees the same break and connects again at once. Such a wait is bounded by
  /// orphan_limit().
  bool orphaned() const;
  /// The peer timeout, at least 1 s.
  std::chrono::steady_clock::duration orphan_limit() const noexcept;
  /// The bound of the resumption under way: stall_limit(), orphan_limit() or reconnect_limit().
  std::chrono::steady_clock::duration resume_limit() const;
  /// Why the control connection's own path looks gone: bytes on it unacknowledged at
  /// the TCP level for half the peer timeout or more, with the peer's window open or
  /// its probes unanswered (a stopped peer's kernel still acknowledges them, or closes
  /// its window and answers the probes; net::tcp_path_stalled). nullopt
  /// where it does not.
  std::optional<std::string> control_path_stalled() const;
  /// Where the control connection's path looks gone (control_path_stalled) and another
  /// rail may reach the peer: begins a resumption bounded by stall_limit() (by
  /// reconnect_limit() when `idle`: nothing of either side's is waiting on it), which
  /// fails with `why` if no other path answers, and answers true. False, with nothing
  /// done, otherwise.
  bool resume_quiet_path(const Status& why, bool idle);
  std::optional<net::SealCipher> rejoin_cipher_;

  /// Failed receives waiting for their device copies to end (fail_staged_recv).
  std::vector<std::pair<std::unique_ptr<RecvOp>, Status>> staged_failing_;
  /// Ended sends waiting for the copies out of their device memory to end (finish_staged_send).
  std::vector<std::pair<std::unique_ptr<SendOp>, Status>> staged_sends_ending_;

  std::vector<std::byte> ctl_tx_;
  size_t ctl_tx_off_ = 0;
  // The end of what was last offered to the socket: a sealing layer (net/seal.h) may have
  // sealed bytes up to here that it has not reported sent, so they are not changed.
  size_t ctl_tx_offered_ = 0;
  // Resumption's accounting (resume.cc). Offsets count the control stream's bytes since
  // the endpoint began, one way each, HANDLED (RESUMED) frames not counted.
  bool resume_ok_ = false;                     // both sides offer kCapResume, failover and heartbeats run (activate)
  uint64_t ctl_tx_base_ = 0;                   // the offset of ctl_tx_[0]
  uint64_t tx_high_ = 0;                       // the highest offset sent to the kernel
  std::deque<std::vector<std::byte>> replay_;  // sent, not yet handled by the peer: [replay_base_, ctl_tx_base_)
  uint64_t replay_base_ = 0;
  std::vector<std::vector<std::byte>> spare_;  // replay buffers handled by the peer, for reuse
  size_t spare_bytes_ = 0;                     // their capacity in all (kSpareBytes)
  uint64_t tx_high_at_tick_ = 0;               // tx_high_ at the last tick (check_resume)
  uint64_t peer_handled_ = 0;                  // the peer's latest HANDLED
  uint64_t rx_handled_ = 0;                    // bytes of the peer's frames handled
  uint64_t rx_acked_ = 0;                      // rx_handled_ in this side's latest HANDLED
  bool rx_unacked_ = false;                    // a frame other than HANDLED was handled since
  std::vector<std::byte> ctl_pre_;  // sent before ctl_tx_ on a resumed connection: HANDLED (RESUMED), the replay
  size_t ctl_pre_off_ = 0;
  bool resume_handshake_ = false;  // on a resumed connection, the peer's HANDLED (RESUMED) has not come yet
  std::optional<std::chrono::steady_clock::time_point> resuming_since_;  // the control connection is down
  std::string resume_why_;                                               // why it broke
  // The break is the liveness verdict on a control connection whose bytes went
  // unacknowledged (its path may be down, not the peer): bounded by stall_limit(), and
  // failing with silent_why_ (the verdict) when no other path answers.
  bool resume_stalled_ = false;
  bool resume_idle_ = false;  // resume_stalled_ found by an idle probe (path_quiet): reconnect_limit() bounds it
  std::string silent_why_;
  std::optional<QuietPath> quiet_path_;  // the stalled control connection's addresses
  std::string resume_error_;       // why the connecting side's last attempt failed
  bool resume_in_flight_ = false;  // connecting side: an attempt is running
  uint32_t resume_attempts_ = 0;   // connecting side: attempts started since the endpoint began
  uint32_t control_resumed_ = 0;
  Resumer resumer_;
  std::function<bool()> listening_;
  bool ctl_blocked_ = false;
  int ctl_send_failed_ = 0;     // flush_control is reading what the peer sent before its send failed (its errno)
  bool ctl_watch_out_ = false;  // the control stream is watched for EPOLLOUT (while blocked)
  // RESP coalescing. When a notification goes to a thread waiting for it, that thread
  // usually answers at once (a put back, a send); its frame then carries the RESPs in
  // the same segment instead of a segment of their own (on loopback each small segment
  // costs several microseconds on both sides). The RESPs wait only while ctl_tx_ holds
  // nothing else, and at most until the next progress round of any thread: the
  // waiter's next poll, or the progress thread's (within REMORA_PROGRESS_LINGER_US).
  // Not on the shared-memory channel: there a frame of its own costs a ring write, and
  // holding the RESPs only delayed the initiator (`bench rma --mode notify_lat` took
  // 0.73 of the time once they were sent at once; bench/results/p2p.md).
  bool ctl_resp_only_ = true;  // the unsent part of ctl_tx_ is RESP (and RECEIVED) frames only
  // The last RECEIVED appended (chunk_read): while it is the last frame in ctl_tx_ and
  // not yet offered to the socket, a later count for the same stream overwrites it
  // instead of adding a frame.
  size_t received_at_ = SIZE_MAX;
  bool hold_resps_ = false;        // a notification just went to a waiting thread
  bool hold_release_queued_ = false;
  void release_held_resps();
  // A PLACED frame's notification went to a waiting thread, whose answer may carry the
  // ACK (PLACED_SHORT): what it did not carry goes the next time the control stream is
  // read (read_control: the next round of any thread, at the latest when the progress
  // thread arms the ring before it sleeps).
  bool placed_ack_held_ = false;
  // Whether the last held ACK (or any owed one) went in an answer's PLACED_SHORT; while
  // not, ACKs are held only every 64th time (acks_not_held_ counts), to find out again.
  bool answers_carry_acks_ = true;
  uint32_t acks_not_held_ = 0;
  // Both from the configuration and the peer's capabilities, fixed at construction.
  bool direct_negotiated_ = false;
  bool placed_short_negotiated_ = false;
  bool ctl_hup_ = false;  // epoll reported a hang-up: read to EOF, never stop at a short read
  std::vector<std::byte> ctl_rx_;
  size_t rx_begin_ = 0;
  size_t rx_end_ = 0;

  uint64_t eager_limit_ = 0;  // min(ours, peer's)
  uint64_t tx_credit_ = 0;    // bytes of eager we may still send
  uint64_t rx_credit_used_ = 0;
  uint64_t rx_credit_owed_ = 0;

  uint64_t next_send_id_ = 1;
  uint64_t next_recv_id_ = 1;
  uint64_t outstanding_ = 0;  // two-sided operations; one-sided ones are the initiator's
  std::atomic<uint32_t> peer_watchers_{0};  // Endpoint::watch_peer: counts as outstanding
  std::unordered_map<uint64_t, std::unique_ptr<SendOp>> sends_;
  std::unordered_map<uint64_t, std::unique_ptr<RecvOp>> recvs_;  // matched rendezvous receives
  Matcher matcher_;  // posted receives and unexpected messages
  std::vector<std::unique_ptr<RecvOp>> spare_recvs_;  // recycle()'s, at most kSpareRecvs
  static constexpr size_t kSpareRecvs = 8;
  SpareStates<4> spare_recv_states_;  // receives' states, used again once their Requests are gone
  /// After an orderly close the sockets linger until what was queued is delivered
  /// (see transport/linger.h); events on them go there. Null otherwise.
  std::shared_ptr<LingeringClose> linger_;
  /// The linger is over (by itself, or stopped because the context goes away).
  void end_linger();
  /// Tells the context (deferred) that this endpoint is gone for good.
  void notify_closed();

  /// The GOODBYE reason the peer sent, if it sent one.
  std::optional<wire::GoodbyeReason> peer_goodbye_;
  bool host_heard_ = false;       // the peer's HOST identity came
  uint32_t peer_pid_ = 0;         // its pid, once its probe was read (same_host_reason_ "")
  std::shared_ptr<ShmChannel> shm_;  // the shared-memory channel (null: none offered, or ended)
  RingHandler ring_handler_{this};
  bool shm_peer_offered_ = false;   // the peer's OFFER came
  bool shm_peer_accepted_ = false;  // the peer took this side's ring
  bool ring_arm_ = false;  // read_control asks the peer to wake this side if the ring is empty (poll_ring)
  bool shm_rx_switch_now_ = false;  // the peer's SWITCH was just decoded: read the ring from here on
  std::string shm_reason_;          // why the control stream is not (all) in shared memory
  DirectMaps direct_;               // the peer's memory this side maps (direct_map.h)
  DirectGrants grants_;             // the keys of this side's memory the peer maps
  std::string same_host_reason_;  // why this side does not read the peer's memory ("" when it does)
  std::string encryption_;        // the cipher sealing the connections, set at activate ("" in clear)
  /// The peer closed orderly (GOODBYE kClosed, then EOF): eager messages that arrived
  /// before stay in matcher_ and receives still match them. Cleared by close().
  bool keep_arrived_ = false;

  // After the control stream died, announced one-sided chunks still queued on the
  // data streams are drained into this transfer (their ops are gone).
  RxTransfer drain_ = drain_transfer(&paths_.discard_sink());
  static RxTransfer drain_transfer(DiscardSink* sink) {
    RxTransfer t;
    t.kind = wire::ChunkKind::kPut;
    t.length = UINT64_MAX;  // never complete
    t.sink = sink;
    return t;
  }
  EndpointStats stats_;  // the parts below count into it

  // The one-sided parts. Declared after the scheduler, so destroyed before it (it
  // points into their operations); the target delivers into notifications_.
  Notifications notifications_{*this, engine_, params_.peer, stats_};
  RmaInitiator initiator_{*this, engine_, params_.peer_rma_window, params_.peer, stats_};
  /// Notices a silent peer (REMORA_PEER_TIMEOUT_MS); ticks from activate() until failure.
  Liveness liveness_{*this, engine_, config_.peer_timeout_ms, (params_.peer_capabilities & wire::kCapHeartbeat) != 0,
                     params_.peer};
  RmaTarget target_{*this,
                    notifications_,
                    paths_,
                    params_.registry,
                    {.window = config_.rma_window, .notifications = config_.max_unexpected},
                    params_.peer,
                    stats_};
};

}  // namespace remora::detail
