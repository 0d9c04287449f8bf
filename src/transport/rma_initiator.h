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
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>

#include "engine/progress.h"
#include "engine/request_state.h"
#include "remora/endpoint.h"
#include "transport/chunk_io.h"
#include "transport/chunk_scheduler.h"
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
  /// `inline_class`: the data travels in the PUT frame (else in chunks).
  Posted put(std::span<const std::byte> local, const RemoteKey& key, uint64_t offset, const PutOptions& options,
             bool inline_class);
  /// `inline_class`: the data comes back in the RESP frame (else in chunks).
  Posted get(std::span<std::byte> local, const RemoteKey& key, uint64_t offset, bool inline_class);
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

  /// Operations posted and not complete (those waiting for the window included).
  size_t outstanding() const noexcept { return ops_.size(); }
  /// Completes every operation and flush with `why` and forgets them.
  void fail(const Status& why);

 private:
  struct Op {
    enum class Kind : uint8_t { kPut, kGet, kAtomic };
    Kind kind = Kind::kPut;
    uint64_t id = 0;
    uint64_t seq = 0;  // puts and atomics: flush order
    std::shared_ptr<RequestState> req;
    wire::KeyBytes key{};
    uint64_t offset = 0;
    uint64_t length = 0;
    bool inline_class = false;  // the data travels in the PUT / RESP frame
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
  struct Flush {
    uint64_t covers = 0;  // completes when no put/atomic with seq <= covers is pending
    std::shared_ptr<RequestState> req;
    Status first_error;
  };

  static std::unique_ptr<Op> new_op(Op::Kind kind, const RemoteKey& key, uint64_t offset, uint64_t length,
                                    bool inline_class);
  Posted post(std::unique_ptr<Op> op);
  void issue(Op* op);
  void issue_waiting();
  void complete(Op* op, const Status& s);
  void maybe_finish_get(Op* op);
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
};

}  // namespace remora::detail
