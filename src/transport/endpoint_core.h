// transport/endpoint_core.h — the state machine of one endpoint: control stream
// framing and dispatch, tag matching, eager credits, rendezvous (RTS/CTS), one-sided
// operations (rma.cc), the lingering close, and failure. The data streams and their
// chunks are the ChunkScheduler's (chunk_scheduler.h); this class tells it what each
// transfer's bytes are (a ChunkSource or ChunkSink) and what completing one means.
//
// Everything here runs with the progress lock held (the engine's mutex); public
// Endpoint methods take it. Ops are owned by the maps below; the scheduler's queues
// point into them and are cleared before an op is destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/progress.h"
#include "engine/request_state.h"
#include "mem/region_access.h"
#include "net/socket.h"
#include "remora/config.h"
#include "remora/endpoint.h"
#include "transport/chunk_io.h"
#include "transport/chunk_scheduler.h"
#include "transport/linger.h"
#include "transport/matcher.h"
#include "transport/staging.h"
#include "wire/frame.h"

namespace remora::detail {

class ContextCore;

class EndpointCore : public std::enable_shared_from_this<EndpointCore>,
                     private ChunkScheduler::Owner,
                     private StagingHost {
 public:
  struct Params {
    EndpointId id{};
    uint32_t streams = 1;
    uint32_t peer_eager_limit = 0;
    uint32_t peer_eager_credit = 0;
    uint32_t peer_rma_window = 1;
    const MemoryRegistry* registry = nullptr;  ///< the context's; outlives every active endpoint
    /// The context's device domains (Context::add_memory_domain); read with the lock held.
    const std::vector<MemoryDomain*>* domains = nullptr;
    std::string peer;
  };

  EndpointCore(std::shared_ptr<engine::ProgressEngine> engine, const Config& config, Params params);
  ~EndpointCore();

  // --- setup, lock held -----------------------------------------------------
  void set_control(net::Fd fd);
  /// kProtocol for an out-of-range or duplicate index.
  Status set_data(uint16_t index, net::Fd fd);
  bool all_streams_attached() const noexcept;
  /// Registers every socket with the engine and starts serving. Lock held.
  Status activate();
  /// Called by the context when the endpoint is gone for good (lock held) so it can
  /// forget it. May be null.
  void set_on_closed(std::function<void(EndpointId)> fn) { on_closed_ = std::move(fn); }

  // --- public API (takes the lock) ------------------------------------------
  Request send(std::span<const std::byte> data, Tag tag);
  Request recv(std::span<std::byte> buffer, Tag tag);
  Request put(std::span<const std::byte> local, const RemoteKey& key, uint64_t offset, const PutOptions& options);
  Request get(std::span<std::byte> local, const RemoteKey& key, uint64_t offset);
  Request atomic(uint64_t* result, const RemoteKey& key, uint64_t offset, wire::AtomicOp op, uint64_t operand,
                 uint64_t compare);
  Request flush();
  std::optional<Notification> poll_notification();
  Result<Notification> wait_notification(Duration timeout);
  void set_notification_handler(std::function<void(const Notification&)> handler);
  /// Closes with GOODBYE `reason` (kClosed for Endpoint::close, kAborted for abort).
  void close(wire::GoodbyeReason reason);
  bool failed() const;
  bool closed_by_peer() const;
  Status failure() const;
  EndpointId id() const noexcept { return params_.id; }
  const std::string& peer() const noexcept { return params_.peer; }
  uint32_t streams() const noexcept { return params_.streams; }
  EndpointStats stats() const;
  std::shared_ptr<engine::ProgressEngine> engine() const noexcept { return engine_; }

  // --- lock held ------------------------------------------------------------
  /// Fails every outstanding op with `why` and closes the sockets. Idempotent.
  void fail_locked(const Status& why);

 private:
  struct SendOp {
    std::shared_ptr<RequestState> req;
    Tag tag{};
    uint64_t id = 0;
    uint64_t recv_id = 0;
    HostSource source;
    std::unique_ptr<StagingSource> staged;  // device memory: out.source is this
    TxTransfer out;
  };
  /// An operation this side initiated.
  struct RmaOp {
    enum class Kind : uint8_t { kPut, kGet, kAtomic };
    Kind kind = Kind::kPut;
    uint64_t id = 0;
    uint64_t seq = 0;  // puts and atomics: flush order
    std::shared_ptr<RequestState> req;
    wire::KeyBytes key{};
    uint64_t offset = 0;
    uint64_t length = 0;
    bool inline_class = false;  // length <= eager limit: data travels in the PUT / RESP frame
    // put
    const std::byte* src = nullptr;
    bool has_notify = false;
    uint64_t notify = 0;
    HostSource source;
    TxTransfer out;
    // get
    std::byte* dst = nullptr;
    HostSink sink;
    RxTransfer in;
    // atomic
    wire::AtomicOp atomic = wire::AtomicOp::kFetchAdd;
    uint64_t operand = 0, compare = 0;
    uint64_t* result = nullptr;
    bool issued = false;     // the request frame is on its way; counts against the peer's window
    bool responded = false;  // RESP arrived
    Status status;           // the RESP's verdict
  };
  /// A large PUT this side serves as the target (inline ones are served at once).
  struct ServedPut {
    uint64_t op_id = 0;
    RegionAccess access;
    wire::RmaStatus verdict = wire::RmaStatus::kOk;
    bool has_notify = false;
    uint64_t notify = 0;
    RegionSink sink;  // refused: the bytes go to the endpoint's DiscardSink instead
    RxTransfer in;
  };
  /// A large GET this side serves as the target.
  struct ServedGet {
    uint64_t op_id = 0;
    RegionAccess access;
    RegionSource source;
    TxTransfer out;
  };
  struct Flush {
    uint64_t covers = 0;  // completes when no put/atomic with seq <= covers is pending
    std::shared_ptr<RequestState> req;
    Status first_error;
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
  void handle_frame(const wire::Frame& frame);
  void handle_eager(const wire::EagerFrame& f);
  void handle_rts(const wire::RtsFrame& f);
  void handle_cts(const wire::CtsFrame& f);
  void handle_chunk(const wire::ChunkFrame& f);
  void handle_credit(const wire::CreditFrame& f);
  void handle_goodbye(const wire::GoodbyeFrame& f);
  void handle_put(const wire::PutFrame& f);
  void handle_get(const wire::GetFrame& f);
  void handle_atomic(const wire::AtomicFrame& f);
  void handle_resp(const wire::RespFrame& f);
  void handle_abort(const wire::AbortFrame& f);
  void handle_control_eof(const Status& why);

  // RMA helpers (rma.cc)
  Request post_rma(std::unique_ptr<RmaOp> op);
  void issue_rma(RmaOp* op);
  void issue_waiting_rma();
  void complete_rma(RmaOp* op, const Status& s);
  void maybe_finish_get(RmaOp* op);
  /// Validates a peer's request; on success `access` holds the bytes.
  wire::RmaStatus check_access(const wire::KeyBytes& key_bytes, uint64_t offset, uint64_t length, Access needed,
                               RegionAccess* access);
  /// Window and duplicate-id checks for a new request; false (endpoint failed) if violated.
  bool admit_served_request(uint64_t op_id);
  void send_resp(uint64_t op_id, wire::RmaStatus status, uint64_t value = 0);
  void finish_served_put(ServedPut* sp);
  void deliver_notification(const Notification& n);
  void wake_notification_waiters();
  void run_notification_handler();
  void fail_rma_locked(const Status& why);

  // matching helpers
  void deliver_eager(RecvOp& op, std::span<const std::byte> payload);
  void match_rendezvous(std::unique_ptr<RecvOp> op, uint64_t send_id, uint64_t length);
  void return_credit(uint64_t cost);

  // device memory
  /// The device domain whose memory [p, p+n) is; null for host memory (and always
  /// when the context has no device domains: one branch on the hot path).
  MemoryDomain* device_of(const void* p, size_t n) const;
  /// The endpoint's staging for `domain` in one direction, its pool made (and prepared
  /// with the domain) on first use.
  Result<StagingContext> staging_for(MemoryDomain* domain, bool tx);
  /// Completes a failed receive whose copies into device memory are still in flight
  /// once they have ended (then nothing writes to its buffer any more), else now.
  void fail_staged_recv(std::unique_ptr<RecvOp> op, const Status& why);
  // StagingHost
  void staged_chunk_placed(RxTransfer& t, uint64_t length, const Status& status) override;
  void staging_progressed() override;

  // ChunkScheduler::Owner
  void announce(const wire::ChunkFrame& frame) override { append_frame(frame); }
  void sent(TxTransfer& t) override;
  void received(RxTransfer& t) override;
  void stream_failed(const Status& why) override { fail_locked(why); }
  void stream_ended(uint16_t index) override;
  bool should_yield() override { return engine_->lock_wanted(); }
  void resume_later() override { queue_resume(); }

  // output
  void append_frame(const wire::Frame& frame);
  void flush_control();
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
  void complete_send(SendOp* op, const Status& s);
  void finish_recv(RecvOp* op);
  RxTransfer* find_in(wire::ChunkKind kind, uint64_t id);
  void maybe_finalize();

  void protocol_error(std::string message);
  /// ok if a new operation may be posted now; else why not (endpoint down, too many outstanding).
  Status admission() const;
  bool alive() const noexcept { return state_ == State::kActive; }

  enum class State { kSetup, kActive, kDraining, kFailed };

  std::shared_ptr<engine::ProgressEngine> engine_;
  Config config_;
  Params params_;
  State state_ = State::kSetup;
  Status failure_;
  std::function<void(EndpointId)> on_closed_;

  net::Fd control_;
  engine::HandlerId control_hid_;
  ControlHandler control_handler_{this};
  // The scheduler holds pointers into the ops below and into discard_; it never
  // dereferences them while being destroyed.
  DiscardSink discard_;  // refused and revoked bytes are read here and dropped
  ChunkScheduler chunks_;
  std::vector<DataWatch> data_watch_;

  bool resume_queued_ = false;  // resume() is queued for the next progress round

  struct StagingPools {
    MemoryDomain* domain;
    std::shared_ptr<StagingPool> tx, rx;
  };
  std::vector<StagingPools> staging_pools_;
  /// What staged sources and sinks hold to reach this endpoint; reset first thing in
  /// the destructor, so late copy ends find nobody.
  std::shared_ptr<StagingHost*> staging_anchor_;
  /// Failed receives waiting for their device copies to end (fail_staged_recv).
  std::vector<std::pair<std::unique_ptr<RecvOp>, Status>> staged_failing_;

  std::vector<std::byte> ctl_tx_;
  size_t ctl_tx_off_ = 0;
  bool ctl_blocked_ = false;
  bool ctl_watch_out_ = false;  // the control stream is watched for EPOLLOUT (while blocked)
  // RESP coalescing. When a notification goes to a thread waiting for it, that thread
  // usually answers at once (a put back, a send); its frame then carries the RESPs in
  // the same segment instead of a segment of their own (on loopback each small segment
  // costs several microseconds on both sides). The RESPs wait only while ctl_tx_ holds
  // nothing else, and at most until the next progress round of any thread: the
  // waiter's next poll, or the progress thread's (within REMORA_PROGRESS_LINGER_US).
  bool ctl_resp_only_ = true;      // the unsent part of ctl_tx_ is RESP frames only
  bool hold_resps_ = false;        // a notification just went to a waiting thread
  bool hold_release_queued_ = false;
  void release_held_resps();
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
  uint64_t outstanding_ = 0;
  std::unordered_map<uint64_t, std::unique_ptr<SendOp>> sends_;
  std::unordered_map<uint64_t, std::unique_ptr<RecvOp>> recvs_;  // matched rendezvous receives
  Matcher matcher_;  // posted receives and unexpected messages
  /// After an orderly close the sockets linger until what was queued is delivered
  /// (see transport/linger.h); events on them go there. Null otherwise.
  std::shared_ptr<LingeringClose> linger_;
  /// The linger is over (by itself, or stopped because the context goes away).
  void end_linger();
  /// Tells the context (deferred) that this endpoint is gone for good.
  void notify_closed();

  /// The GOODBYE reason the peer sent, if it sent one.
  std::optional<wire::GoodbyeReason> peer_goodbye_;
  /// The peer closed orderly (GOODBYE kClosed, then EOF): eager messages that arrived
  /// before stay in matcher_ and receives still match them. Cleared by close().
  bool keep_arrived_ = false;

  // One-sided operations this side initiated.
  uint64_t next_rma_id_ = 1;
  uint64_t next_rma_seq_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<RmaOp>> rma_ops_;
  std::deque<RmaOp*> rma_waiting_;  // posted while the peer's window was full
  uint64_t rma_issued_ = 0;         // request frames sent, RESP not yet received
  // Completion flags of puts/atomics from seq_base_ on (seq_done_[i] is seq seq_base_ + i);
  // the front is always a pending one, so "anything pending up to seq s" is
  // !seq_done_.empty() && seq_base_ <= s. No allocation per operation.
  std::deque<bool> seq_done_;
  uint64_t seq_base_ = 1;
  bool pending_through(uint64_t seq) const noexcept { return !seq_done_.empty() && seq_base_ <= seq; }
  std::deque<Flush> flushes_;
  uint64_t flushed_through_ = 0;  // the last seq an earlier flush covered
  Status unflushed_failure_;      // first failure of a put/atomic no flush has covered yet
  // Operations this side serves as the target.
  std::unordered_map<uint64_t, std::unique_ptr<ServedPut>> served_puts_;
  std::unordered_map<uint64_t, std::unique_ptr<ServedGet>> served_gets_;
  // End offsets in ctl_tx_ of RESPs not yet accepted by the kernel. They count
  // against the window: a peer that floods requests and never reads its replies
  // runs into it instead of growing ctl_tx_ without bound.
  std::deque<size_t> unsent_resps_;
  // After the control stream died, announced one-sided chunks still queued on the
  // data streams are drained into this transfer (their ops are gone).
  RxTransfer drain_ = drain_transfer(&discard_);
  static RxTransfer drain_transfer(DiscardSink* sink) {
    RxTransfer t;
    t.kind = wire::ChunkKind::kPut;
    t.length = UINT64_MAX;  // never complete
    t.sink = sink;
    return t;
  }
  // Notifications delivered to this side.
  std::deque<Notification> notes_;
  uint64_t notes_promised_ = 0;  // served puts in flight that will queue one
  std::deque<std::shared_ptr<RequestState>> note_waiters_;
  std::shared_ptr<std::function<void(const Notification&)>> note_handler_;
  std::deque<Notification> note_handler_queue_;
  bool note_delivering_ = false;

  EndpointStats stats_;
};

}  // namespace remora::detail
