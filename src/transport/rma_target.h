// transport/rma_target.h — the passive target of one endpoint: serving the peer's PUT,
// GET and ATOMIC requests while the application makes no call. It owns admission (at
// most this side's REMORA_RMA_WINDOW requests in service, an id never reused while its
// operation is), the key check before a single byte is touched (a refusal is a RESP
// with its verdict, and the endpoint stays usable), the large puts and gets in service
// with their sinks and sources (every touch of the memory bracketed by a RegionAccess,
// see chunk_io.h), and the rule that RESPs the kernel has not taken yet count against
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

#include "datapath/chunk_io.h"
#include "datapath/chunk_scheduler.h"
#include "datapath/devmem_path.h"
#include "datapath/devmem_tx_path.h"
#include "datapath/staging.h"
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
    /// Staging for a region of `domain`'s (device) memory: `tx` for what a GET reads.
    virtual Result<StagingContext> staging_for(MemoryDomain* domain, bool tx) = 0;
    /// Picks (and records) the data path of a transfer of [p, p+n) of `domain`'s memory;
    /// the refusal when the path the configuration demands cannot be taken. `chunked`:
    /// its bytes move on the data streams (not inline in a frame). `devmem` (a chunked
    /// get's reply, which devmem TX can send): set when the path is devmem TX.
    virtual Status choose_target_path(MemoryDomain& domain, const void* p, size_t n, bool tx, bool chunked,
                                      std::unique_ptr<DevmemTxSend>* devmem) = 0;
    /// The data streams as devmem TX uses them (for a reply choose_target_path sent
    /// that way); their completions come back through RmaTarget::devmem_completed.
    virtual DevmemTxStreams* devmem_tx_streams() { return nullptr; }
    /// The devmem receive a put into device memory goes by, when the path just chosen
    /// (choose_device_path) was devmem RX; null: it stages.
    virtual std::shared_ptr<DevmemRxContext> devmem_rx_chosen() { return nullptr; }
    /// The engine that device copies report their end to.
    virtual const std::shared_ptr<engine::ProgressEngine>& progress_engine() const = 0;
    /// RESPs were queued outside the owner's own dispatch (a device copy ended): send them.
    virtual void replies_queued() = 0;
  };

  struct Limits {
    uint64_t window = 1;         ///< requests in service at once (this side's REMORA_RMA_WINDOW)
    uint64_t notifications = 0;  ///< notifications queued or promised at most (REMORA_MAX_UNEXPECTED)
  };

  /// Keys are checked against `registry` (null: every key is refused); refused and
  /// revoked bytes are drained through `discard`; `peer` names the other side in logs.
  RmaTarget(Owner& owner, Notifications& notifications, DiscardSink& discard, const MemoryRegistry* registry,
            Limits limits, std::string peer, EndpointStats& stats);
  ~RmaTarget();
  RmaTarget(const RmaTarget&) = delete;
  RmaTarget& operator=(const RmaTarget&) = delete;

  /// The window and duplicate-id checks for a new request, before it is served; false
  /// if the peer broke them (reported: the endpoint has failed).
  bool admit(uint64_t op_id);
  /// Serves an admitted PUT whose inline class the endpoint has checked (f.inline_data).
  void serve_put(const wire::PutFrame& f);
  /// Serves an admitted GET; `inline_class`: the data goes back in the RESP.
  void serve_get(const wire::GetFrame& f, bool inline_class);
  /// Serves an admitted ATOMIC.
  void serve_atomic(const wire::AtomicFrame& f);

  /// The transfer a CHUNK of put `op_id` feeds; null unless that large put is in service.
  RxTransfer* put_transfer(uint64_t op_id);
  /// Every announced chunk of put `op_id` is in: RESP, and its notification.
  void put_received(uint64_t op_id);
  /// Every byte of get `op_id`'s reply is in the kernel: RESP (by devmem TX: once the
  /// kernel reported every sendmsg of it done, devmem_completed).
  void get_sent(uint64_t op_id);
  /// The kernel reported a sendmsg of the devmem reply `seq` (kDevmemServedGetCookie's
  /// number) complete.
  void devmem_completed(uint64_t seq);

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
    std::shared_ptr<RegionAccess> access = std::make_shared<RegionAccess>();
    wire::RmaStatus verdict = wire::RmaStatus::kOk;
    bool has_notify = false;
    uint64_t notify = 0;
    RegionSink sink;                      // refused: the bytes go to the DiscardSink instead
    std::unique_ptr<PlacingSink> staged;  // device memory (staging or devmem RX): in.sink is this
    bool devmem_rx = false;               // staged is a DevmemSink
    bool zcrx_rx = false;                 // ... reading zcrx streams
    bool inline_copy = false;
    RxTransfer in;
  };
  /// A large GET in service, or an inline one out of device memory waiting for its copy.
  struct ServedGet {
    uint64_t op_id = 0;
    std::shared_ptr<RegionAccess> access = std::make_shared<RegionAccess>();
    RegionSource source;
    std::unique_ptr<StagingSource> staged;  // device memory: out.source is this
    std::unique_ptr<DevmemTxSend> devmem;   // device memory by devmem TX: its binding ...
    std::unique_ptr<DevmemSource> devmem_source;  // ... and out.source (after `devmem`: it reads it)
    uint64_t devmem_seq = 0;                      // its cookie's number
    bool awaiting_completions = false;            // sent; the kernel has yet to report sendmsgs done
    bool inline_copy = false;
    TxTransfer out;
  };

  /// Validates a peer's request; on success `access` holds the bytes.
  wire::RmaStatus check_access(const wire::KeyBytes& key_bytes, uint64_t offset, uint64_t length, Access needed,
                               RegionAccess* access);
  /// kOk for host memory, or when the endpoint found a path for this device transfer;
  /// kDeviceFailed (logged) when the path the configuration demands cannot be taken.
  wire::RmaStatus choose_device_path(const RegionAccess& access, uint64_t length, bool tx, bool chunked,
                                     std::string_view what, std::unique_ptr<DevmemTxSend>* devmem = nullptr);
  /// RESP for a served get whose reply is out (and, by devmem TX, reported done).
  void finish_served_get(std::unordered_map<uint64_t, std::unique_ptr<ServedGet>>::iterator it);
  void send_resp(uint64_t op_id, wire::RmaStatus status, uint64_t value = 0);
  /// Device memory: an inline PUT's bytes copied into it, or an inline GET's out of it,
  /// then the RESP (the request stays in service meanwhile).
  void serve_device_inline_put(const wire::PutFrame& f, std::shared_ptr<RegionAccess> access);
  void serve_device_inline_get(const wire::GetFrame& f, std::shared_ptr<RegionAccess> access);
  void device_get_copied(uint64_t op_id, std::span<const std::byte> bytes, const Status& copy);
  void queue_resp(const wire::RespFrame& frame) { unsent_resps_.push_back(owner_.queue_resp(frame)); }

  Owner& owner_;
  Notifications& notifications_;
  DiscardSink& discard_;
  const MemoryRegistry* registry_;
  Limits limits_;
  std::string peer_;
  EndpointStats& stats_;

  std::unordered_map<uint64_t, std::unique_ptr<ServedPut>> served_puts_;
  std::unordered_map<uint64_t, std::unique_ptr<ServedGet>> served_gets_;
  std::unordered_map<uint64_t, uint64_t> devmem_gets_;  // devmem reply number -> the get's op_id
  uint64_t next_devmem_get_ = 1;
  // Positions in the owner's control queue just after each RESP the kernel has not
  // taken yet; each counts against the window.
  std::deque<size_t> unsent_resps_;
  /// What a device copy's end holds to reach this target (it may be gone by then).
  std::shared_ptr<RmaTarget*> self_ = std::make_shared<RmaTarget*>(this);
};

}  // namespace remora::detail
