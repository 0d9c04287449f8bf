// transport/rma_initiator.h — the one-sided operations this side initiates on one
// endpoint (put, get, fetch_add, compare_swap, flush), from posting to completion.
// It owns the operations in flight; the peer's request window (at most the peer's
// REMORA_RMA_WINDOW requests without their RESP; later ones wait, in posting order);
// flush order (puts and atomics are numbered as posted: a flush completes once none
// up to its number is pending, with the first error among those no earlier flush
// covered); completion; and the checks of each RESP against the operation it answers.
//
// It knows nothing of the target side, of messages or of the data streams: it asks
// its Owner (the endpoint) to queue request frames on the control stream and a large
// put's chunks on the data streams, and reports protocol violations to it. Whether an
// operation's data travels inline is the endpoint's decision, given at posting; the
// endpoint also admits the operation (active, not too many outstanding) and makes
// progress after it. Runs under the progress lock.
//
// Each put and get holds one end of the data path (a PathEnd the endpoint chose with
// DataPaths::choose: host memory, staging, devmem, a bounce for inline device memory)
// and asks it, whatever the path, for an inline put's bytes, to place an inline get's
// reply, whether copies of its memory are in flight and whether the NIC still reads it.
// A failed copy fails its operation only (a chunked put's target hears of it through
// ABORT). An operation that fails while copies of its memory are in flight completes
// only once they have ended: its buffer is the application's again only when nothing
// touches it any more.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "datapath/chunk_scheduler.h"
#include "datapath/path_end.h"
#include "engine/progress.h"
#include "engine/request_state.h"
#include "remora/endpoint.h"
#include "wire/frame.h"

namespace remora::detail {

class RmaInitiator {
 public:
  /// The endpoint the initiator works for.
  class Owner {
   public:
    virtual ~Owner() = default;
    /// Queue a PUT, GET or ATOMIC frame on the control stream.
    virtual void queue_request(const wire::Frame& frame) = 0;
    /// `t` (a large put's data) is ready for the data streams; it stays referenced
    /// until the owner's chunk scheduler reports it sent or the endpoint fails.
    virtual void send_chunks(TxTransfer* t) = 0;
    /// The peer broke the protocol: the endpoint fails (fail() runs before this returns).
    virtual void protocol_error(std::string message) = 0;
    /// The peer has every byte of a put whose sending is not counted whole yet: send
    /// workers may have written the rest without their reports having come. Count what
    /// they wrote now (ChunkScheduler::reap_tx_jobs).
    virtual void settle_sends() {}
  };

  /// `engine` makes the requests (may be null: requests that only complete); at most
  /// `peer_window` requests are issued without their RESP; `peer` names the other side
  /// in error messages.
  RmaInitiator(Owner& owner, std::shared_ptr<engine::ProgressEngine> engine, uint64_t peer_window, std::string peer,
               EndpointStats& stats);
  ~RmaInitiator();
  RmaInitiator(const RmaInitiator&) = delete;
  RmaInitiator& operator=(const RmaInitiator&) = delete;

  /// What posting did.
  struct Posted {
    Request request;
    bool issued = false;       ///< its frame is queued now (else it waits for the peer's window)
    bool pushes_data = false;  ///< issued, and a chunked put: its data is ready for the streams
  };
  /// A put of `source`'s bytes (its class says inline or chunked; an inline source's
  /// bytes can be read at once, PathEnd::inline_ready). A source of zero-copy sends
  /// reports them done under the id the put gets (next_op_id() when it was chosen);
  /// the put then completes once both its RESP came and every send was released.
  /// With `segments` (wire::encode_segments; offset 0, a chunked source) the put writes
  /// those pieces of the key's window, its bytes back to back in them.
  Posted put(PathEnd source, const RemoteKey& key, uint64_t offset, const PutOptions& options,
             std::vector<std::byte> segments = {});
  /// The id the next operation posted gets.
  uint64_t next_op_id() const noexcept { return next_id_; }
  /// The kernel reported a zero-copy send of put `op_id` done.
  void zero_copy_released(uint64_t op_id);
  /// A get into `sink`'s memory (its class says whether the reply comes inline).
  /// With `segments`, as put's.
  Posted get(PathEnd sink, const RemoteKey& key, uint64_t offset, std::vector<std::byte> segments = {});
  /// `compare` is used by kCompareSwap only.
  Posted atomic(uint64_t* result, const RemoteKey& key, uint64_t offset, wire::AtomicOp op, uint64_t operand,
                uint64_t compare);
  /// Completes once every put and atomic posted so far has, with the first error among
  /// those that no earlier flush covered (gets are not covered).
  Request flush();

  /// A RESP from the peer: checked against the operation it names, which completes.
  void handle_resp(const wire::RespFrame& f);
  /// The transfer a CHUNK of get `op_id`'s reply feeds; null unless `op_id` is a
  /// chunked get that was issued and has no RESP yet.
  RxTransfer* get_transfer(uint64_t op_id);
  /// Every announced chunk of get `op_id`'s reply is in (placed or failed).
  void get_received(uint64_t op_id);

  /// A notified put this side did through a mapping of the peer's memory and reported
  /// in a PLACED frame (EndpointCore::try_direct): in the put order like any other, so
  /// flush covers it; complete when the peer's MAP ACK counts its PLACED frame handled.
  Request placed(uint64_t length);
  /// The peer handled `handled` PLACED frames since the endpoint began (a running
  /// count): those puts complete. kProtocol for a count that goes back or past what
  /// was sent.
  Status placed_acked(uint64_t handled);
  /// The count the peer's last ACK (or PLACED_SHORT) gave.
  uint64_t placed_handled() const noexcept { return placed_handled_; }

  /// Operations posted and not complete (those waiting for the window included; not
  /// the placed puts, which wait for nothing but their ACK).
  size_t outstanding() const noexcept { return ops_.size(); }
  /// Placed puts waiting for the peer's ACK.
  size_t placed_pending() const noexcept { return placed_.size(); }
  /// Completes every operation and flush with `why` and forgets them; those with
  /// copies of their memory in flight complete when the copies end
  /// (staging_progressed).
  void fail(const Status& why);
  /// Staging went on (a copy ended): failed operations whose copies have all ended complete.
  void staging_progressed();

 private:
  struct Op {
    enum class Kind : uint8_t { kPut, kGet, kAtomic };
    // Every member says how it starts: a provided constructor spares make_unique the
    // zero-filling of the whole object that value-initialization does first.
    Op() noexcept {}  // NOLINT(modernize-use-equals-default)
    Kind kind = Kind::kPut;
    uint64_t id = 0;
    uint64_t seq = 0;  // puts and atomics: flush order
    std::shared_ptr<RequestState> req;
    wire::KeyBytes key{};
    uint64_t offset = 0;
    uint64_t length = 0;
    bool inline_class = false;  // the data travels in the PUT / RESP frame
    std::vector<std::byte> segments;  // a segmented put's or get's list, in wire form
    PathEnd end;                // a put's source, a get's sink (an atomic has none)
    // put
    bool has_notify = false;
    uint64_t notify = 0;
    TxTransfer out;
    bool awaiting_release = false;  // RESP in (verdict in `status`), zero-copy sends not all released
    // get
    RxTransfer in;
    // atomic
    wire::AtomicOp atomic = wire::AtomicOp::kFetchAdd;
    uint64_t operand = 0, compare = 0;
    uint64_t* result = nullptr;
    bool issued = false;     // the request frame is on its way; counts against the peer's window
    bool responded = false;  // RESP arrived
    Status status;           // the RESP's verdict
  };
  struct Flush {
    uint64_t covers = 0;  // completes when no put/atomic with seq <= covers is pending
    std::shared_ptr<RequestState> req;
    Status first_error;
  };

  static std::unique_ptr<Op> new_op(Op::Kind kind, const RemoteKey& key, uint64_t offset, uint64_t length,
                                    bool inline_class);
  Posted post(std::unique_ptr<Op> op);
  void issue(Op* op);
  void issue_put(Op* op);
  void issue_waiting();
  void complete(Op* op, const Status& s);
  void maybe_finish_get(Op* op);
  /// The checks of a RESP against the operation it answers; false after a protocol error.
  bool resp_fits(const Op& op, const wire::RespFrame& f);
  void handle_put_resp(Op* op);
  /// false after a protocol error.
  bool handle_get_resp(Op* op, const wire::RespFrame& f);
  /// An inline get's reply, placed in its memory: complete.
  void reply_placed(uint64_t op_id, const Status& placed);
  bool pending_through(uint64_t seq) const noexcept { return !seq_done_.empty() && seq_base_ <= seq; }

  Owner& owner_;
  std::shared_ptr<engine::ProgressEngine> engine_;
  uint64_t peer_window_;
  std::string peer_;
  EndpointStats& stats_;

  uint64_t next_id_ = 1;
  uint64_t next_seq_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Op>> ops_;
  std::deque<Op*> waiting_;  // posted while the peer's window was full
  uint64_t issued_ = 0;      // request frames sent, RESP not yet received
  // Completion flags of puts/atomics from seq_base_ on (seq_done_[i] is seq seq_base_ + i);
  // the front is always a pending one, so "anything pending up to seq s" is
  // !seq_done_.empty() && seq_base_ <= s. No allocation per operation.
  std::deque<bool> seq_done_;
  uint64_t seq_base_ = 1;
  std::deque<Flush> flushes_;
  uint64_t flushed_through_ = 0;  // the last seq an earlier flush covered
  Status unflushed_failure_;      // first failure of a put/atomic no flush has covered yet
  struct Placed {
    uint64_t seq = 0;
    uint64_t length = 0;
    std::shared_ptr<RequestState> req;
  };
  std::deque<Placed> placed_;  // sent, not yet counted by an ACK (oldest first)
  uint64_t placed_sent_ = 0, placed_handled_ = 0;
  /// Placed puts' states, used again once their Requests are gone.
  SpareStates<2> spare_placed_;
  /// Put `seq` (a put or atomic) completed with `s`: flush order and flushes.
  void seq_completed(uint64_t seq, const Status& s);
  /// Completes the flushes nothing pending holds back any more.
  void finish_flushes();
  /// Failed operations waiting for the copies of their memory to end, and why they failed.
  std::vector<std::pair<std::unique_ptr<Op>, Status>> draining_;
  /// What an inline copy's end holds to reach this initiator (it may be gone by then).
  std::shared_ptr<RmaInitiator*> self_ = std::make_shared<RmaInitiator*>(this);
};

}  // namespace remora::detail
