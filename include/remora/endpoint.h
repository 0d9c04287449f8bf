// remora/endpoint.h — a connection to one peer: tagged two-sided messaging and
// one-sided remote memory access (put, get, notify, atomics, flush).
//
// An Endpoint is one TCP control stream plus K payload-only data streams. Small
// messages travel inline on the control stream (eager); large ones are announced
// (RTS), accepted by the matching receive (CTS), and cut into chunks spread over the
// data streams — each chunk lands directly in the posted receive buffer.
//
// Matching: a recv matches the oldest unmatched message with the same tag from this
// endpoint; messages with the same tag are received in send order. Different tags
// complete in any order.
//
// One-sided RMA: the peer registered a Region and handed us its RemoteKey (any way it
// liked). put/get/fetch_add/compare_swap name that key and an offset inside the key's
// window; the peer's progress thread serves them — its application makes no call
// (passive target). Before it places or reads a single byte, the target checks the
// key's secret and generation (a deregistered region's keys are dead), that
// [offset, offset+length) lies inside the key's window (overflow-safe) and that the
// key and the region both grant the right (remote write for put, remote read for
// get, remote atomic for atomics). A refused operation fails with that specific
// code (kInvalidKey, kOutOfRange, kAccessDenied, kInvalidArgument for a misaligned
// atomic), the target's memory is untouched, and the endpoint stays usable.
//
// Completion and ordering (see docs/architecture.md, "RMA semantics"):
// - put: the request completes when the TARGET has placed every byte (remote
//   completion) or refused the put; its status is the target's verdict. The local
//   buffer must stay valid until then. There is no separate local-completion event.
// - put with a notification: the target queues the 64-bit value exactly once, after
//   all of the put's bytes are visible in its memory, and only then acknowledges.
// - get: completes when every byte is in the local buffer (or with the refusal).
// - fetch_add / compare_swap: 8-byte-aligned u64 words, executed with hardware atomics
//   (by the target, or between processes of one host by the initiator itself through a
//   mapping of the target's pool memory), so they are atomic with respect to every other
//   remora atomic on that word from any peer (and to std::atomic_ref use by the target).
//   Atomics posted on one endpoint execute at the target in posting order.
// - Puts and gets are NOT ordered with each other: chunks of different operations
//   travel over different data streams. flush() is the fence: it completes when every
//   put and atomic posted on this endpoint before it has completed at the target.
// - Small puts (<= the eager limit) travel inline on the control stream and are copied
//   once into the region; larger puts and get responses travel over the data streams
//   and are received straight into the destination memory.
//
// Failure: if the peer goes away (EOF, reset) or violates the protocol, every
// outstanding request fails with kPeerFailed (or kProtocol) and later calls fail
// immediately. Other endpoints of the context are unaffected.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "remora/memory.h"
#include "remora/request.h"
#include "remora/status.h"
#include "remora/types.h"

namespace remora {

namespace detail {
class EndpointCore;
struct ContextInternals;  // the library's own access (src/transport/context_core.h)
}

/// One rail of an endpoint (Config::rails, docs/rails.md): a local address and the
/// peer's address its data streams connect, or, on the connecting side, a rail that was
/// skipped and why.
struct RailStats {
  std::string local_address;                    ///< "10.0.1.5" (this side's end of the rail's streams)
  /// "10.0.1.9:7100": the listener's address on the connecting side; on the listening
  /// side the peer's address with the port of the rail's first stream (its streams come
  /// from several ports of that address).
  std::string peer_address;
  std::string interface;                        ///< the local interface, where this side named its rails ("" otherwise)
  uint32_t streams = 0;                         ///< data streams on this rail
  uint64_t bytes_sent = 0, bytes_received = 0;  ///< payload bytes on its streams
  uint64_t chunks_sent = 0, chunks_received = 0;  ///< chunks on its streams
  /// Its streams that broke and were retired (failover; EndpointStats::failover).
  uint32_t streams_retired = 0;
  /// "up" (its streams carry chunks), "down" (every stream of it broke and was retired:
  /// the chunks go on the other rails; `reason` says why, and on the connecting side how
  /// often it is tried again) or "skipped" (the connecting side could not reach the peer
  /// from this rail; `reason` says why, and it has no streams).
  std::string state;
  std::string reason;
};

/// Counters for one endpoint.
struct EndpointStats {
  uint64_t messages_sent = 0, messages_received = 0;
  uint64_t bytes_sent = 0, bytes_received = 0;
  uint64_t eager_sent = 0, rendezvous_sent = 0;
  uint64_t chunks_sent = 0;
  std::vector<uint64_t> chunks_per_stream;  ///< chunks sent on each data stream
  /// The data streams grouped by the local and peer addresses they connect: one entry
  /// without rails (REMORA_RAILS unset on both sides), one per rail with them, and, on
  /// the connecting side, the rails it skipped (docs/rails.md).
  std::vector<RailStats> rails;
  /// Failover (Config::failover) is on for this endpoint: both sides offer it and it has
  /// two data streams or more. streams_retired: data streams that broke and were given
  /// up; chunks_resent: chunks sent again on the others because of that.
  bool failover = false;
  uint32_t streams_retired = 0;
  uint64_t chunks_resent = 0;
  /// Retired data streams connected again once their rail worked again (both sides
  /// offer it; the connecting side tries once per peer timeout).
  uint32_t streams_rejoined = 0;
  /// Workers (Config::progress_threads above 1): chunk parts they took off the data
  /// streams, and their bytes (the rest was read by the progress thread).
  uint64_t worker_jobs = 0;
  uint64_t worker_bytes = 0;
  /// Send workers (the same threads): chunk parts they put on the data streams, and
  /// their bytes (the rest was written by the progress thread).
  uint64_t worker_send_jobs = 0;
  uint64_t worker_send_bytes = 0;
  /// Times the control stream broke and was connected again, with nothing lost or
  /// repeated (both sides offer it: failover on, two data streams or more; docs/rails.md).
  uint32_t control_resumed = 0;
  /// Same-host pulls (Config::same_host_pulls): chunks this side announced for the peer
  /// to read out of its memory itself (counted in chunks_sent, on no data stream), and
  /// bytes this side read out of the peer's memory.
  uint64_t chunks_pulled = 0, bytes_pulled = 0;
  /// 2 MiB frames of this side's memory that the peer pulled again and again, collapsed
  /// into huge pages (Config::pull_huge_pages).
  uint64_t huge_pages_promoted = 0;
  /// Why this side does not read the peer's chunks out of its memory ("" when it does, or
  /// before the peer said who it is): another host, REMORA_SAME_HOST=off, the kernel's refusal.
  std::string same_host_reason;
  /// Shared-memory channel (docs/protocol.md): whether this side's control stream (every
  /// frame: messages' eager payloads, one-sided requests and replies, credits, chunk
  /// announcements) goes to the peer through a ring in memory both processes map
  /// (shm_tx), and whether the peer's comes to this side that way (shm_rx). Bulk chunks
  /// still move by pulls or on the data streams.
  bool shm_tx = false, shm_rx = false;
  /// Why the control stream is not in shared memory both ways ("" when it is, or while
  /// it is being set up): the same-host reasons above, or the kernel's refusal.
  std::string shm_reason;
  /// Direct mappings (docs/guide.md, "Same-host pulls"): puts and gets of at most 16 KiB
  /// and atomics, counted in `puts`, `gets` and `atomics`, that this side did through its
  /// own mapping of the peer's memory (pool buffers of a same-host peer): complete when
  /// the call returned, or for a put with a notification once the peer queued it (the
  /// peer only queues the notification: its served_* counters do not count them); and
  /// why the last key the peer did not let this side map was refused ("" if none was).
  uint64_t direct = 0;
  std::string direct_reason;
  /// This side's address and port of the endpoint's control stream ("" once it is
  /// closed): what tells it from the data streams in `ss` or a capture.
  std::string control_address;
  /// The cipher sealing every connection of this endpoint (REMORA_ENCRYPT):
  /// "aes256gcm" or "chacha20poly1305"; "" when they travel in clear.
  std::string encryption;
  // One-sided operations this side initiated, and those it served as the target.
  uint64_t puts = 0, gets = 0, atomics = 0;
  uint64_t rma_bytes_put = 0, rma_bytes_got = 0;
  uint64_t served_puts = 0, served_gets = 0, served_atomics = 0;
  /// Of `puts` and `gets`: segmented requests, each carrying several items of one batch
  /// (put_batch, get_batch) between host memory on both sides; of `served_puts` and
  /// `served_gets`: those served.
  uint64_t segmented = 0, served_segmented = 0;
  uint64_t refused = 0;  ///< operations this side refused as the target (bad key, range, right)
  uint64_t notifications = 0;  ///< notifications delivered to this side
  /// Transfers (sends, receives, puts, gets, in either role) whose memory on this side
  /// was a device's and moved through pinned staging buffers, and their bytes. Staging
  /// is the device path whenever devmem TCP or io_uring zero-copy receive cannot take a
  /// transfer: always for served gets, inline puts and eager messages in this
  /// version; for message receives, chunked gets and served chunked puts unless
  /// `remora rxq` steered every data stream (REMORA_RXQ_SOCKET) or the endpoint reads
  /// them through a device-less zcrx queue (REMORA_ZCRX_MODE=copy); and for
  /// message sends and chunked puts unless the memory exports a dmabuf that
  /// REMORA_DEVMEM_IFNAME binds for transmit (see docs/device-memory.md and `remora
  /// doctor`).
  uint64_t staged_transfers = 0, staged_bytes = 0;
  /// Device transfers that went by devmem TCP (message sends and chunked puts, counted
  /// once the kernel reported the NIC done with their memory; message receives,
  /// chunked gets and served chunked puts, once placed) and by io_uring zero-copy receive
  /// (the same receives, once placed).
  uint64_t devmem_transfers = 0, zcrx_transfers = 0;
  /// Device transfers refused because the path REMORA_DEVICE_PATH demands could not take them.
  uint64_t device_path_refusals = 0;
  /// The path the last device-memory transfer took ("staging", "devmem", "zcrx", or
  /// "refused"; empty before the first) and why: sends, receives, puts and gets of this
  /// side's device memory, and peers' puts and gets of its regions of device memory.
  /// The reason names each faster path passed over, with the
  /// kernel's or the configuration's reason (REMORA_DEVICE_PATH, docs/device-memory.md).
  std::string device_path;
  std::string device_path_reason;
};

/// The two operands of compare_swap, named so that they cannot be swapped unnoticed:
/// `ep->compare_swap(&old, key, offset, {.expected = 0, .desired = 1})`.
struct CompareSwap {
  uint64_t expected = 0;  ///< the value the word must hold for the swap to happen
  uint64_t desired = 0;   ///< the value it then takes
};

/// Options of a put.
struct PutOptions {
  /// A 64-bit value delivered to the target (Endpoint::poll_notification /
  /// wait_notification / the notification handler) exactly once, after the data.
  std::optional<uint64_t> notify = std::nullopt;
};

/// A notification delivered by a put with PutOptions::notify.
struct Notification {
  uint64_t value = 0;
  RegionId region{};    ///< the region the put wrote
  uint64_t offset = 0;  ///< where in the region (bytes from the region's start)
  uint64_t length = 0;  ///< bytes the put wrote
};

/// One transfer of a batch (Endpoint::put_batch, Endpoint::get_batch): `local.size()`
/// bytes between `local` and the peer's memory at `remote_offset` within `key`'s window.
/// A put only reads `local`.
struct TransferItem {
  std::span<std::byte> local;
  RemoteKey key;
  uint64_t remote_offset = 0;
};

class Endpoint;

/// A receive of the first message with `tag` that arrives on any of `endpoints`
/// (MPI_ANY_SOURCE over a set of endpoints of one context). Null entries are skipped,
/// so the index of an endpoint can be a rank. Before the request completes, `*matched`
/// (if not null) is set to the index of the endpoint whose message was received.
///
/// The receive matches exactly one message: on each endpoint it takes the oldest
/// unmatched message with `tag`, as Endpoint::recv does, and a message it does not
/// take stays for the next receive on its endpoint (order per endpoint and tag is
/// kept, whichever form receives). Among messages already waiting on several
/// endpoints when it is posted, the one on the lowest index is taken. Size, truncation
/// and buffer lifetime are as for Endpoint::recv.
///
/// Errors: kInvalidArgument for no endpoint or endpoints of different contexts; an
/// endpoint that cannot receive any more (failed, aborted, closed by this side, out of
/// outstanding-op slots) fails the receive with its status, unless another endpoint
/// already delivered; an endpoint whose peer closed orderly only drops out (what it
/// sent before still counts), and the receive fails with kPeerFailed once every
/// endpoint has dropped out. Each endpoint holds the receive as an outstanding op until
/// a message with `tag` next arrives there or the next receive with `tag` is posted
/// there. Thread-safe.
Request recv_any(std::span<Endpoint* const> endpoints, std::span<std::byte> buffer, Tag tag, int* matched);

/// Thread-safe: any thread may post operations.
class Endpoint {
 public:
  /// Closes the endpoint (see close()).
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  /// Sends `data` with `tag`. The buffer must stay valid until the request completes.
  /// Fails immediately (in the request) with kNoResource when max_outstanding ops are
  /// posted, kPeerFailed/kAborted when the endpoint is down.
  Request send(std::span<const std::byte> data, Tag tag);
  /// Posts a receive of a message with `tag` into `buffer`. A message longer than the
  /// buffer completes this request with kTruncated and no byte of it is written. A
  /// rendezvous sender (messages above the eager limit) fails with kTruncated too; an
  /// eager send completed locally before the receiver matched it, so only the
  /// receiver learns of the truncation.
  Request recv(std::span<std::byte> buffer, Tag tag);

  // --- one-sided operations (initiator) ---------------------------------------

  /// Writes `local` into the peer's memory at `remote_offset` within `key`'s window.
  /// Completes when the target placed every byte (and, with options.notify, queued
  /// the notification). Errors from the target: kInvalidKey (forged, stale or
  /// unknown key), kOutOfRange, kAccessDenied (no remote-write right), kNoResource
  /// (the target's notification queue is full; nothing was written).
  /// A zero-length put is checked like any other (key, right, range) and writes
  /// nothing: it succeeds at every `remote_offset` from 0 to the window's length, the
  /// end included (and notifies, with options.notify), and fails with kOutOfRange
  /// beyond it.
  Request put(std::span<const std::byte> local, const RemoteKey& key, uint64_t remote_offset,
              const PutOptions& options = {});
  /// Reads the peer's memory at `remote_offset` within `key`'s window into `local`
  /// (local.size() bytes). Needs the remote-read right. Not covered by flush(): wait
  /// on its request. A zero-length get succeeds at every `remote_offset` from 0 to the
  /// window's length, the end included, and fails with kOutOfRange beyond it.
  Request get(std::span<std::byte> local, const RemoteKey& key, uint64_t remote_offset);
  /// Atomically adds `value` to the u64 at `remote_offset`; the previous value is
  /// stored in *result (if not null) before the request completes. The word must be
  /// 8-byte aligned in the target's address space (kInvalidArgument otherwise) and the
  /// key must grant remote atomics.
  Request fetch_add(uint64_t* result, const RemoteKey& key, uint64_t remote_offset, uint64_t value);
  /// Atomically replaces the u64 at `remote_offset` with `operands.desired` if it
  /// equals `operands.expected`; the previous value goes to *result (if not null)
  /// either way (so the swap happened exactly when *result == expected). Alignment and
  /// rights as for fetch_add.
  Request compare_swap(uint64_t* result, const RemoteKey& key, uint64_t remote_offset, CompareSwap operands);
  /// Completes when every put and atomic posted on this endpoint before the call has
  /// completed at the target. Status: ok if every put and atomic posted since the
  /// previous flush succeeded, else the first failure among them (so fire-and-forget
  /// puts still report errors); the endpoint's failure if it fails first.
  Request flush();

  // --- batches (built on put, get and the Request machinery: src/transport/batch.cc) ---

  /// Posts the items' puts, all at once, and returns one Request that completes when
  /// every put has completed at the target (as put() says) or failed. Its status is ok,
  /// or the failure of the lowest-numbered item that failed (all of them are still
  /// waited for); bytes() is the sum of the items' lengths. Each item is checked like a
  /// put of its own (key, right, range), so an item that fails leaves the others'
  /// bytes placed. The local buffers must stay valid until the Request completes.
  /// Items may name different keys (regions) of the peer. Items of one key between
  /// host memory on both sides may travel as one segmented request (up to 1024 of
  /// them: REMORA_SEGMENTS, EndpointStats::segmented), which moves a list of small
  /// blocks about as fast as one buffer; their range and right are checked against the
  /// key here first, so only a failure that strikes the whole key (a forged or revoked
  /// key, a corrupted chunk under REMORA_CHECKSUM) fails the items of one request
  /// together.
  ///
  /// With options.notify, the target receives exactly one notification, and only
  /// after every item's bytes are visible in its memory: once all the puts succeeded
  /// the batch posts a zero-length put carrying the value at the LAST item's key and
  /// remote_offset (so the Notification names that region and offset, length 0), and
  /// completes when the target queued it. If any item fails, no notification is sent.
  /// This costs one round trip more than the data alone. An empty batch completes at
  /// once with ok, or with kInvalidArgument when it asks for a notification (it would
  /// have no key to name).
  Request put_batch(std::span<const TransferItem> items, const PutOptions& options = {});
  /// Posts the items' gets, all at once; one Request that completes when every byte
  /// of every item is in its local buffer, or with the failure of the lowest-numbered
  /// item that failed (after all of them ended). bytes() is the sum of the lengths.
  /// Items of one key may travel as one segmented request, as put_batch's.
  Request get_batch(std::span<const TransferItem> items);

  // --- notifications (target) ---------------------------------------------------

  /// The oldest undelivered notification, if any. Drives progress once.
  std::optional<Notification> poll_notification();
  /// Waits up to `timeout` (spinning, then blocking) for a notification. kTimeout when
  /// none arrived; the endpoint's failure once it failed and the queue is empty.
  /// Without a timeout (kDefaultTimeout) the wait is bounded by the context's
  /// Config::wait_timeout_ms (REMORA_WAIT_TIMEOUT_MS), and its kTimeout names that
  /// variable; kForever waits until a notification comes or the endpoint fails.
  /// The acknowledgement of the put that carried a notification handed to this call
  /// rides with this thread's next frame on the endpoint (a put or send in answer), so
  /// a ping-pong costs one segment per direction; it goes on its own at the next
  /// progress round of any thread of the context, within REMORA_PROGRESS_LINGER_US.
  Result<Notification> wait_notification(Duration timeout = kDefaultTimeout);
  template <typename Rep, typename Period>
  Result<Notification> wait_notification(std::chrono::duration<Rep, Period> timeout) {
    return wait_notification(std::chrono::duration_cast<Duration>(timeout));
  }
  /// Delivers notifications to `handler` instead of the queue (queued ones first).
  /// The handler runs on a progress-driving thread without remora's locks held, so it
  /// may call remora; keep it short. An empty function restores queueing.
  void set_notification_handler(std::function<void(const Notification&)> handler);

  /// Closes the endpoint because this side is done with it: outstanding requests fail
  /// with kAborted; the peer sees an orderly close (closed_by_peer() there) and can
  /// still receive the messages this side sent before. Messages whose sends completed
  /// but that were still queued (eager) or in the kernel (rendezvous) are delivered
  /// after close() returns: the sockets linger until they are sent and the peer has
  /// closed too, the peer takes nothing for 10 s, or the context is destroyed.
  /// Idempotent.
  void close();
  /// Like close(), but tells the peer this side gave up after a failure: the peer
  /// fails as if this side had died (closed_by_peer() stays false there), and what
  /// it had received but not yet matched is dropped.
  void abort();

  /// True once the endpoint has failed for good: the peer went away, broke the
  /// protocol, closed or aborted, or this side called close()/abort(). Every request
  /// outstanding then has completed with failure(), and new calls fail at once.
  bool failed() const;
  /// True once the endpoint failed because the peer called close() (not abort(), not
  /// a crash or a reset). Receives still match the eager messages that arrived before
  /// the close (up to the eager limit); any other operation fails with kPeerFailed.
  bool closed_by_peer() const;
  /// True once the peer sent GOODBYE, with close() or abort(): it was alive when the
  /// endpoint ended. An endpoint that failed with kPeerFailed without it lost a peer
  /// that died, was cut off or fell silent (EOF, reset, REMORA_PEER_TIMEOUT_MS).
  /// Communicator::failed_ranks() tells a dead rank from a survivor that gave up this way.
  bool peer_said_goodbye() const;
  /// Why the endpoint failed (ok if it has not).
  Status failure() const;
  /// Watches the peer while nothing is outstanding: between watch_peer(true) and the
  /// matching watch_peer(false) the endpoint's heartbeat runs as if an operation were
  /// outstanding, so a peer that died or stopped fails the endpoint within
  /// REMORA_PEER_TIMEOUT_MS. For a thread that waits on the peer by other means (a
  /// communicator's shared memory does). Calls nest; thread-safe.
  void watch_peer(bool on);
  /// This endpoint's id within its context (the handshake names it; logs show it).
  EndpointId id() const;
  /// The peer's "host:port" as this side connected to it or accepted it from.
  std::string peer_address() const;
  /// K, the number of payload-only data streams (REMORA_STREAMS of the side that
  /// connected; both sides use the connector's count).
  uint32_t data_streams() const;
  /// A snapshot of the counters. Thread-safe.
  EndpointStats stats() const;

 private:
  friend struct detail::ContextInternals;
  friend Request recv_any(std::span<Endpoint* const> endpoints, std::span<std::byte> buffer, Tag tag, int* matched);
  explicit Endpoint(std::shared_ptr<detail::EndpointCore> core) noexcept;
  std::shared_ptr<detail::EndpointCore> core_;
};

}  // namespace remora
