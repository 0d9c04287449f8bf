// transport/rma_target.h — the passive target of one endpoint: serving the peer's PUT,
// GET and ATOMIC requests while the application makes no call. It owns admission (at
// most this side's REMORA_RMA_WINDOW requests in service, an id never reused while its
// operation is), the key check before a single byte is touched (a refusal is a RESP
// with its verdict, and the endpoint stays usable), the large puts and gets in service
// with the one sink or source each holds (DataPaths::choose, for the region's memory:
// every touch of it bracketed by a RegionAccess, see chunk_io.h), and the rule that
// RESPs the kernel has not taken yet count against
// the window: a peer that floods requests and never reads its replies runs into the
// window instead of growing the control stream's queue without bound.
//
// It knows nothing of matching, sends or the initiator side: it asks its Owner (the
// endpoint) to queue RESPs on the control stream and a large get's reply on the data
// streams, reports protocol violations to it, and delivers notifications to
// Notifications. Whether a request's data travels inline is the endpoint's decision.
// Runs under the progress lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "datapath/chunk_scheduler.h"
#include "datapath/data_paths.h"
#include "datapath/path_end.h"
#include "mem/region_access.h"
#include "remora/endpoint.h"
#include "transport/notifications.h"
#include "wire/frame.h"

namespace remora::detail {

class RmaTarget {
 public:
  /// The endpoint the target serves on.
  class Owner {
   public:
    virtual ~Owner() = default;
    /// Queue `frame` on the control stream; returns the length of the control stream's
    /// output queue just after it (control_sent() later reports it taken).
    virtual size_t queue_resp(const wire::RespFrame& frame) = 0;
    /// `t` (a large get's reply) is ready for the data streams; it stays referenced
    /// until the owner's chunk scheduler reports it sent or the endpoint fails.
    virtual void send_chunks(TxTransfer* t) = 0;
    /// The peer broke the protocol: the endpoint fails (fail() runs before this returns).
    virtual void protocol_error(std::string message) = 0;
    /// RESPs were queued outside the owner's own dispatch (a device copy ended): send them.
    virtual void replies_queued() = 0;
  };

  struct Limits {
    uint64_t window = 1;         ///< requests in service at once (this side's REMORA_RMA_WINDOW)
    uint64_t notifications = 0;  ///< notifications queued or promised at most (REMORA_MAX_UNEXPECTED)
  };

  /// Keys are checked against `registry` (null: every key is refused); `paths` gives
  /// each request's sink or source (and drains refused bytes); `peer` names the other
  /// side in logs.
  RmaTarget(Owner& owner, Notifications& notifications, DataPaths& paths, const MemoryRegistry* registry, Limits limits,
            std::string peer, EndpointStats& stats);
  ~RmaTarget();
  RmaTarget(const RmaTarget&) = delete;
  RmaTarget& operator=(const RmaTarget&) = delete;

  /// The window and duplicate-id checks for a new request, before it is served; false
  /// if the peer broke them (reported: the endpoint has failed).
  bool admit(uint64_t op_id);
  /// Serves an admitted PUT whose inline class the endpoint has checked (f.inline_data).
  void serve_put(const wire::PutFrame& f);
  /// Serves an admitted GET; kInline: the data goes back in the RESP.
  void serve_get(const wire::GetFrame& f, TransferClass cls);
  /// Serves an admitted ATOMIC.
  void serve_atomic(const wire::AtomicFrame& f);

  /// The transfer a CHUNK of put `op_id` feeds; null unless that large put is in service.
  RxTransfer* put_transfer(uint64_t op_id);
  /// Every announced chunk of put `op_id` is in: RESP, and its notification.
  void put_received(uint64_t op_id);
  /// Every byte of get `op_id`'s reply is in the kernel: RESP (by zero-copy sends: once
  /// the kernel reported every one of them done, zero_copy_released).
  void get_sent(uint64_t op_id, const TxTransfer* out = nullptr);
  /// Failover: every byte of get `op_id`'s reply is in the kernel: RESP now (the get
  /// leaves the window), or once the kernel reported every devmem sendmsg of it done;
  /// its source is kept until get_sent, once the initiator confirmed every chunk.
  void get_written(uint64_t op_id);
  /// The kernel reported a zero-copy send of the reply `seq` (kDevmemServedGetCookie's
  /// number) done.
  void zero_copy_released(uint64_t seq);

  /// The kernel took the control stream's output queue up to `position`.
  void control_sent(size_t position) {
    while (!unsent_resps_.empty() && unsent_resps_.front() <= position) unsent_resps_.pop_front();
  }
  /// The control stream's output queue was emptied (all sent, or dropped).
  void control_cleared() { unsent_resps_.clear(); }
  /// A large PUT or GET is in service (the peer's liveness matters to it).
  bool serving() const noexcept { return !served_puts_.empty() || !served_gets_.empty(); }
  /// Forgets every request in service (the endpoint failed; their RESPs cannot go out).
  void fail();

 private:
  /// A large PUT in service (inline ones into host memory are served at once; into
  /// device memory they are in service until their copy ends: inline_copy).
  struct ServedPut {
    uint64_t op_id = 0;
    std::shared_ptr<RegionAccess> access = std::make_shared<RegionAccess>();  // outlives `end`
    wire::RmaStatus verdict = wire::RmaStatus::kOk;
    bool has_notify = false;
    uint64_t notify = 0;
    PathEnd end;  // the region's sink; refused: the discard sink
    bool inline_copy = false;
    bool segmented = false;
    RxTransfer in;
  };
  /// A large GET in service, or an inline one out of device memory waiting for its copy.
  struct ServedGet {
    uint64_t op_id = 0;
    std::shared_ptr<RegionAccess> access = std::make_shared<RegionAccess>();  // outlives `end`
    PathEnd end;                                                              // the region's source
    uint64_t zero_copy_seq = 0;     // its cookie's number, when its sends are zero-copy
    bool awaiting_release = false;  // sent; the kernel has yet to report zero-copy sends done
    bool inline_copy = false;
    bool segmented = false;
    TxTransfer out;
  };

  /// Validates a peer's request; on success `access` holds the bytes.
  wire::RmaStatus check_access(const wire::KeyBytes& key_bytes, uint64_t offset, uint64_t length, Access needed,
                               RegionAccess* access);
  /// `granted` as the data path takes it: shared, for a request served over time; but
  /// host memory served inline is placed or read before the serve_* call returns, so it
  /// gets a pointer to `granted` that owns nothing (a small put or get allocates none).
  static std::shared_ptr<RegionAccess> share_access(RegionAccess& granted, bool served_inline);
  /// The granted region's end for `spec` (DataPaths::choose); kDeviceFailed (logged)
  /// when no path takes its device memory.
  wire::RmaStatus choose_end(const TransferSpec& spec, std::string_view what, PathEnd* end);
  /// A segmented request's end (its `segments` of `key`'s window, `length` bytes in all
  /// as the decoder checked; `direction` is this side's): one access covering them all, checked as check_access checks
  /// one range, and their source or sink over it (datapath/segments.h). Host memory only: a region of device memory is
  /// refused with kDeviceFailed.
  wire::RmaStatus segmented_end(const wire::KeyBytes& key, wire::SegmentList segments, uint64_t length,
                                Direction direction, std::shared_ptr<RegionAccess>* access, PathEnd* end);
  /// An inline PUT: its bytes placed (kInProgress: in service until the copy ends), then the RESP.
  void serve_inline_put(const wire::PutFrame& f, wire::RmaStatus verdict, std::shared_ptr<RegionAccess> access,
                        PathEnd sink);
  void inline_put_placed(uint64_t op_id, const Status& placed);
  /// An inline GET: its bytes read into the RESP (kInProgress: in service until the copy ends).
  void serve_inline_get(uint64_t op_id, wire::RmaStatus verdict, std::shared_ptr<RegionAccess> access, PathEnd source);
  void inline_get_read(uint64_t op_id, std::span<const std::byte> bytes, const Status& read);
  /// RESP for a served get whose reply is out (and, by zero-copy sends, released).
  /// RESP for the get, and forget it (`keep`: move it to answered_gets_).
  void finish_served_get(std::unordered_map<uint64_t, std::unique_ptr<ServedGet>>::iterator it, bool keep = false);
  void send_resp(uint64_t op_id, wire::RmaStatus status, uint64_t value = 0);
  void queue_resp(const wire::RespFrame& frame) { unsent_resps_.push_back(owner_.queue_resp(frame)); }

  Owner& owner_;
  Notifications& notifications_;
  DataPaths& paths_;
  const MemoryRegistry* registry_;
  Limits limits_;
  std::string peer_;
  EndpointStats& stats_;

  std::unordered_map<uint64_t, std::unique_ptr<ServedPut>> served_puts_;
  std::unordered_map<uint64_t, std::unique_ptr<ServedGet>> served_gets_;
  /// Answered gets whose chunks the initiator has yet to confirm (failover), by their
  /// transfer: the initiator may reuse the op id meanwhile.
  std::unordered_map<const TxTransfer*, std::unique_ptr<ServedGet>> answered_gets_;
  std::unordered_map<uint64_t, uint64_t> zero_copy_gets_;  // zero-copy reply number -> the get's op_id
  uint64_t next_zero_copy_get_ = 1;
  // Positions in the owner's control queue just after each RESP the kernel has not
  // taken yet; each counts against the window.
  std::deque<size_t> unsent_resps_;
  /// What an inline copy's end holds to reach this target (it may be gone by then).
  std::shared_ptr<RmaTarget*> self_ = std::make_shared<RmaTarget*>(this);
};

}  // namespace remora::detail
