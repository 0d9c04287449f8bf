// datapath/chunk_scheduler.h — the data path of an endpoint: K payload-only data
// streams, the chunks queued to write on each (chosen dynamically: the stream with the
// fewest queued bytes) and the chunks expected on each (in the order their CHUNK frames
// were announced), and the moving of bytes between those streams and each transfer's
// ChunkSource or ChunkSink (chunk_io.h).
//
// It owns the streams' sockets and queues, nothing else: what a transfer is for (a
// message, a put, a get) and what completing it means is the Owner's (the endpoint),
// told through callbacks. It never blocks; it gives way when the Owner says another
// thread wants the lock, and resume() goes on from there. Every call runs with the
// progress lock held.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "datapath/chunk_io.h"
#include "datapath/stream_workers.h"
#include "net/same_host.h"
#include "net/socket.h"
#include "remora/status.h"
#include "wire/frame.h"

namespace remora::detail {

/// Bytes this side writes to the data streams for one operation.
struct TxTransfer {
  wire::ChunkKind kind = wire::ChunkKind::kMessage;
  uint64_t owner = 0;      ///< the Owner's key for the operation
  uint64_t chunk_id = 0;   ///< the id its CHUNK frames name
  uint64_t length = 0;
  uint64_t scheduled = 0;  ///< bytes assigned to streams
  uint64_t written = 0;    ///< bytes the kernel accepted
  ChunkSource* source = nullptr;
  Status failure;          ///< the source failed it (prepare): nothing after `scheduled` goes out
  /// Failover (ChunkScheduler::enable_failover) keeps it until the peer confirmed every
  /// chunk (RECEIVED), so that a chunk on a stream that breaks can be sent again: then
  /// it is done once `confirmed` (not `written`) is complete, and the Owner hears
  /// written() when every byte is in the kernel.
  bool confirm = false;
  bool written_told = false;  ///< written() was called
  uint64_t confirmed = 0;     ///< bytes of chunks the peer said it read whole

  /// Every byte that will be written of it is in the kernel.
  bool all_written() const noexcept { return written == length || (!failure.is_ok() && written == scheduled); }
  /// The scheduler is done with it: all written, and, with `confirm`, all confirmed.
  bool done() const noexcept {
    const uint64_t mark = confirm ? confirmed : written;
    return mark == length || (!failure.is_ok() && mark == scheduled);
  }
};

/// Bytes this side reads from the data streams for one operation.
struct RxTransfer {
  wire::ChunkKind kind = wire::ChunkKind::kMessage;
  uint64_t id = 0;         ///< the Owner's key; CHUNK frames name it
  uint64_t length = 0;
  uint64_t announced = 0;  ///< bytes covered by CHUNK frames
  uint64_t received = 0;   ///< bytes read off the streams
  uint64_t placed = 0;     ///< bytes of finished chunks (placed, or failed)
  bool doomed = false;     ///< no more chunks will be announced: complete at `announced`
  Status failure;          ///< the first chunk the sink failed (or that failed its checksum), if any
  /// The offset of the first chunk whose CRC-32C did not match (failure is then
  /// kDataCorrupt); UINT64_MAX while none did.
  uint64_t corrupt_at = UINT64_MAX;
  ChunkSink* sink = nullptr;

  bool complete() const noexcept { return placed == length || (doomed && placed == announced); }
};

class ChunkScheduler {
 public:
  /// The endpoint the scheduler works for.
  class Owner {
   public:
    virtual ~Owner() = default;
    /// Announce a chunk on the control stream (a CHUNK frame) before its bytes go out.
    virtual void announce(const wire::ChunkFrame& frame) = 0;
    /// Announce a chunk the peer reads out of this side's memory itself (a PULL frame).
    virtual void announce_pull(const wire::PullFrame& frame) = 0;
    /// Tell the peer its oldest unanswered PULL was read (a PULLED frame).
    virtual void answer_pull(const wire::PulledFrame& frame) = 0;
    /// Every byte of `t` is in the kernel, or, when t.failure is set, every byte that
    /// was announced before its source failed. `t` may be destroyed in the call.
    virtual void sent(TxTransfer& t) = 0;
    /// Every announced chunk of `t` is finished (t.failure says whether one failed).
    /// `t` may be destroyed in the call.
    virtual void received(RxTransfer& t) = 0;
    /// A data stream's send or recv failed (`index`: UINT16_MAX for the same-host pulls).
    virtual void stream_failed(uint16_t index, const Status& why) = 0;
    /// Failover: every byte of `t` is in the kernel (sent() follows once the peer
    /// confirmed every chunk). Called once per transfer.
    virtual void written(TxTransfer& /*t*/) {}
    /// Failover: this side has now read `chunks` chunks whole off stream `index` (the
    /// Owner tells the peer with RECEIVED before any frame it queues later).
    virtual void chunk_read(uint16_t /*index*/, uint64_t /*chunks*/) {}
    /// Failover: a chunk could not be sent again (its source cannot, or its region was
    /// deregistered): the endpoint must fail.
    virtual void resend_failed(const Status& why) { stream_failed(UINT16_MAX, why); }
    /// A data stream ended while chunks were expected on it.
    virtual void stream_ended(uint16_t index) = 0;
    /// True when another thread waits for the progress lock: stop soon.
    virtual bool should_yield() = 0;
    /// Call resume() at the next progress round (the scheduler gave way).
    virtual void resume_later() = 0;
    /// Runs `fn` with the progress lock held at the next progress round. Called from a
    /// worker's thread (set_workers), never with the lock; must not block.
    virtual void post(std::function<void()> fn) = 0;
  };

  /// `peer` names the other side in error messages.
  ChunkScheduler(Owner& owner, uint32_t streams, uint64_t chunk_bytes, std::string peer);
  /// Cancels the workers' jobs (waiting for them to let go).
  ~ChunkScheduler();
  ChunkScheduler(const ChunkScheduler&) = delete;
  ChunkScheduler& operator=(const ChunkScheduler&) = delete;

  uint32_t streams() const noexcept { return static_cast<uint32_t>(streams_.size()); }
  /// REMORA_CHECKSUM=crc32c on this endpoint: every chunk announced carries its
  /// source's CRC-32C, and every chunk expected must carry one, checked against its
  /// sink's bytes once they are in (a mismatch fails the transfer with kDataCorrupt;
  /// the stream stays in step).
  void set_checksum(bool on) noexcept { checksum_ = on; }
  /// kProtocol for an out-of-range or duplicate index.
  Status attach(uint16_t index, net::Fd fd);
  bool all_attached() const noexcept;
  int fd(uint16_t index) const noexcept { return streams_[index].fd.get(); }
  /// Hands a stream's socket over (the lingering close keeps it open).
  net::Fd take(uint16_t index) {
    settle_rx_job(streams_[index], /*count=*/false);
    settle_tx_job(streams_[index], TxSettle::kForget);
    streams_[index].in.reset();
    return std::move(streams_[index].fd);
  }
  /// How sinks read stream `index` from now on (attach gives it a plain StreamIn; a
  /// stream steered to devmem RX queues gets its devmem receiver's). `in` reads the
  /// stream's socket.
  void set_stream_in(uint16_t index, std::unique_ptr<StreamIn> in) {
    settle_rx_job(streams_[index], /*count=*/false);
    streams_[index].in = std::move(in);
    streams_[index].offload = false;
  }
  StreamIn* stream_in(uint16_t index) noexcept { return streams_[index].in.get(); }
  /// Closes every socket that was not taken.
  void close_all();
  /// Forgets every queued chunk and transfer (their operations are gone). Callbacks in
  /// progress see it and return.
  void clear();
  /// Forgets what was to be sent (the sending operations are gone); what is expected
  /// stays queued and is still read.
  void clear_tx();

  // --- sending ----------------------------------------------------------------
  /// `t` has chunks to schedule; it stays referenced until sent() or clear().
  void ready(TxTransfer* t) {
    t->confirm = failover_ && t->source->can_resend();
    ready_.push_back(t);
  }
  /// Assigns chunks of ready transfers to streams with room (announcing each); true
  /// if it assigned any.
  bool schedule();
  /// Writes what each stream has queued until it would block.
  void write_all();
  /// The stream reported room (EPOLLOUT).
  void writable(uint16_t index);
  /// Streams stopped by a full socket whose kernel send queue is empty now (SIOCOUTQ),
  /// their EPOLLOUT edge not seen: they have room whatever the edge, and are written
  /// again at the next write_all. How many. A rate-aware scheduler looks at every
  /// sample (schedule); the owner calls this now and then (its heartbeat tick).
  /// Seen under ThreadSanitizer's timing: a 200 Mbit/s rail's stream waited 1.7 s of a
  /// 4 s transfer with its socket writable and no edge reported to the progress engine
  /// (another epoll instance watching the same socket had one). A stream found drained
  /// before its edge is handled is written sooner too (about 30 times in such a test).
  uint32_t unblock_drained();

  // --- receiving ----------------------------------------------------------------
  /// A CHUNK frame announced [offset, offset + length) of `t` on `stream`, with `crc`
  /// when it carries one: checks it against `t` (in order, inside, non-empty; a CRC iff
  /// checksums are on) and queues it. The violation's description if the frame breaks
  /// the protocol (nothing is queued then), else "".
  std::string expect(RxTransfer* t, uint16_t stream, uint64_t offset, uint64_t length,
                     std::optional<uint32_t> crc = std::nullopt);
  /// Reads what the stream holds for its queued chunks.
  void read(uint16_t index);
  /// The stream reported a hang-up: read to its end, never stop at a short read.
  void hung_up(uint16_t index) { streams_[index].eof = true; }
  /// An asynchronous sink finished `length` bytes of `t` (ok, or the chunk's error).
  void chunk_placed(RxTransfer* t, uint64_t length, const Status& status);
  /// Chunks of transfers `drop` selects go to `drain` from now on (their operations
  /// are gone but their bytes are still coming).
  void redirect(const std::function<bool(const RxTransfer&)>& drop, RxTransfer* drain);
  /// Goes on where read() gave way.
  void resume();
  /// Reads the streams a sink stalled (begin_chunk said no); its owner calls this when
  /// the sink has room again.
  void unstall();

  // --- workers (stream_workers.h; REMORA_PROGRESS_THREADS) -------------------------
  /// From now on the rest of a chunk of at least `min_bytes` is moved by `workers`, off
  /// the progress thread, where its memory is host memory that stays put:
  /// - received where its sink lends it (ChunkSink::host_destination), by worker i for
  ///   stream i; the stream is not read here meanwhile;
  /// - sent where its source lends it (ChunkSource::gather_begin: a plain send of host
  ///   memory, not a chunk sent again after a stream broke), by worker i + N/2 of N for
  ///   stream i (so that a stream's two directions, and one endpoint's sends beside
  ///   another's receives, go to different workers where there are two or more); the
  ///   stream is not written here meanwhile.
  /// The chunk is finished here once the job reports (through Owner::post). Device
  /// memory, devmem, zero-copy sends and same-host pulls stay on the progress thread.
  /// `workers` outlives the scheduler.
  void set_workers(StreamWorkers* workers, uint64_t min_bytes) noexcept {
    workers_ = workers;
    worker_min_ = min_bytes;
  }
  /// Takes every stream back from the workers (cancel, wait), forgetting what they
  /// moved: the Owner calls it before the memory it lent them (its operations' sources
  /// and sinks) goes away.
  void cancel_jobs() {
    for (Stream& s : streams_) {
      settle_rx_job(s, /*count=*/false);
      settle_tx_job(s, TxSettle::kForget);
    }
  }
  /// The peer acknowledged bytes (a put's RESP) whose send worker has not reported yet:
  /// takes every send job back now and counts what it wrote, the Owner told as the
  /// reports would have told it.
  void reap_tx_jobs() {
    const uint64_t epoch = epoch_;
    for (Stream& s : streams_) {
      if (!settle_tx_job(s, TxSettle::kReport) || epoch != epoch_) return;
    }
  }
  /// Chunks (or parts of chunks) the workers received, and their bytes.
  uint64_t worker_jobs() const noexcept { return worker_jobs_; }
  uint64_t worker_bytes() const noexcept { return worker_bytes_; }
  /// Chunks (or parts of chunks) the workers sent, and their bytes.
  uint64_t worker_send_jobs() const noexcept { return worker_send_jobs_; }
  uint64_t worker_send_bytes() const noexcept { return worker_send_bytes_; }

  // --- same-host pulls (net/same_host.h, docs/protocol.md) ------------------------
  /// Chunks announced as PULLs and not yet answered, at most.
  static constexpr size_t kPullWindow = 8;
  /// The peer reads this side's memory itself (it sent HOST with can_pull): from now on
  /// the chunks of transfers whose source has host_bytes() are announced as PULLs (at
  /// most kPullWindow unanswered) and written to no stream; a transfer is sent once
  /// every PULL of it is answered. `huge_pages`: the memory so announced again and again
  /// is collapsed into huge pages (net::HugePagePromoter, Config::pull_huge_pages).
  void enable_pull_tx(bool huge_pages) noexcept {
    pull_tx_ = true;
    promote_ = huge_pages;
  }
  /// This side reads the chunks the peer PULLs out of process `pid` (it told the peer
  /// it can).
  void enable_pull_rx(pid_t pid);
  bool pull_tx() const noexcept { return pull_tx_; }
  bool pull_rx() const noexcept { return pull_in_ != nullptr; }
  /// A PULL frame announced [offset, offset + length) of `t` at `address` in the peer:
  /// checked and queued as expect() does; "" or the violation.
  std::string expect_pull(RxTransfer* t, uint64_t offset, uint64_t length, uint64_t address,
                          std::optional<uint32_t> crc = std::nullopt);
  /// Reads the queued PULLs out of the peer's memory, answering each once read.
  void read_pulls();
  /// The control stream ended: the peer's sends and puts whose PULLs this side has not
  /// read yet did not complete there, and their memory may be reused by now. Each such
  /// chunk read from now on fails its transfer with `why` (nothing pulled after the
  /// peer's end completes an operation here).
  void distrust_pulls(const Status& why) { distrust_ = why; }
  /// A PULLED frame: the peer read the oldest PULL this side has not seen answered.
  /// "" or the violation (nothing unanswered, or another chunk).
  std::string pulled(wire::ChunkKind kind, uint64_t recv_id, uint64_t length);

  /// Nothing is queued or waiting to be scheduled, in either direction.
  bool idle() const noexcept;
  /// Nothing for schedule() or write_all() to do: no transfer ready, no chunk to send
  /// again, none queued on a stream.
  bool sends_nothing() const noexcept;
  uint64_t chunks_sent() const noexcept { return chunks_sent_; }
  /// Chunks this side announced as PULLs (counted in chunks_sent too), and the bytes
  /// this side pulled out of the peer.
  uint64_t chunks_pulled() const noexcept { return chunks_pulled_; }
  uint64_t bytes_pulled() const noexcept { return bytes_pulled_; }
  /// 2 MiB frames of the memory this side announced for pulling that it collapsed into
  /// huge pages.
  uint64_t huge_pages_promoted() const noexcept { return promoter_.promoted(); }
  const std::vector<uint64_t>& chunks_per_stream() const noexcept { return chunks_per_stream_; }
  /// Per data stream: payload bytes the kernel accepted, bytes read, chunks read.
  /// A worker's job counts from its first system call on, not from its report.
  uint64_t bytes_sent(uint16_t index) const noexcept {
    const Stream& s = streams_[index];
    return s.written_total + (s.tx_job ? s.tx_job->moved() : 0);
  }
  uint64_t bytes_received(uint16_t index) const noexcept {
    const Stream& s = streams_[index];
    return s.read_total + (s.rx_job ? s.rx_job->moved() : 0);
  }
  uint64_t chunks_received(uint16_t index) const noexcept {
    return streams_[index].chunks_read + streams_[index].chunks_read_before;
  }

  // --- choosing a stream by measured rate (rails) ---------------------------------
  /// The streams run over paths of different rates (several rails): each chunk goes to
  /// the stream expected to deliver it first, (bytes queued here + bytes in its kernel
  /// send queue, SIOCOUTQ + the chunk) / its measured rate (the bytes the peer
  /// acknowledged per second while it was busy, sampled at most every kRateSample),
  /// and waits for that stream when it has no room (unless a slower stream with room
  /// would still deliver the chunk before the rest of the transfer is through:
  /// keeps_pace), so a slow rail gets its share of chunks but not the transfer's last
  /// ones. Off: the stream with the fewest queued bytes, as without rails. Streams whose
  /// measured rates lie within 3x of each other (rates_differ) count as equal and take
  /// that choice too, without waiting.
  void set_rate_aware(bool on) noexcept { rate_aware_ = on; }
  bool rate_aware() const noexcept { return rate_aware_; }
  /// Instead (REMORA_RAIL_SPLIT=equal, a reference to compare with): each chunk to the
  /// next stream in turn, waiting for it when it has no room, so every stream carries an
  /// equal share of a transfer whatever its rate, as NCCL's socket transport does.
  void set_equal_split(bool on) noexcept { equal_split_ = on; }
  /// The last schedule() left chunks waiting for a stream that had no room, and that
  /// stream has room now: schedule again (no event would say so).
  bool waiting_stream_has_room() const noexcept;
  /// The measured rate of stream `index` in bytes per second (0: not measured yet).
  double rate(uint16_t index) const noexcept { return streams_[index].rate; }
  /// Whether measured rates (bytes/s; 0: not measured, ignored) differ enough that
  /// chunks are placed by rate: the fastest above 3x the slowest. nullopt with fewer
  /// than two measured: the choice stays as it was (a slow rail that forgot its rate
  /// while idle is tried again by rate, as an unmeasured stream counts as fast).
  static std::optional<bool> rates_differ(std::span<const double> rates) noexcept;

  // --- failover (docs/protocol.md, "Failover") -----------------------------------
  /// Both sides offer failover: every chunk written is kept until the peer confirms it
  /// (confirmed()), chunk_read() reports each chunk read whole, and a stream can be
  /// retired and its chunks sent again on the others.
  void enable_failover() noexcept { failover_ = true; }
  bool failover() const noexcept { return failover_; }
  /// A RECEIVED frame: the peer read `chunks` chunks whole off stream `index` so far.
  /// Transfers whose every chunk is confirmed are reported sent. "" or the violation.
  std::string confirmed(uint16_t index, uint64_t chunks);
  /// This side gives stream `index` up: it is never read or written again (its socket
  /// goes to StreamIn::retire, which closes it, or keeps it shut down until a devmem
  /// stream's placements in flight ended; the Owner removed it from its poller first),
  /// its expected chunks are owed (the peer sends them again, resend_expected), and
  /// nothing more is scheduled on it. Returns the chunks read whole off it, for this
  /// side's RETIRE; an error when a chunk expected on it cannot be received again
  /// (ChunkSink::can_reread).
  Result<uint64_t> retire(uint16_t index);
  bool retired(uint16_t index) const noexcept { return streams_[index].retired; }
  /// Streams not retired.
  uint32_t live_streams() const noexcept;
  /// The peer's RETIRE: it read `chunks` chunks whole off stream `index` (which this
  /// side has retired already) and reads no more. Those are confirmed; every other
  /// chunk this side put on the stream is sent again on the others (CHUNK with
  /// RESEND). "" or the violation; a chunk that cannot be sent again fails through
  /// resend_failed.
  std::string peer_retired(uint16_t index, uint64_t chunks);
  /// A CHUNK with RESEND: must be exactly a chunk this side is owed (from a retired
  /// stream); it is read off `stream` like any other. "" or the violation.
  std::string expect_resend(wire::ChunkKind kind, uint64_t id, uint16_t stream, uint64_t offset, uint64_t length,
                            std::optional<uint32_t> crc = std::nullopt);
  /// Which path (rail) each stream travels; streams of one path share its fate.
  void set_stream_paths(std::vector<uint16_t> paths) { paths_ = std::move(paths); }
  /// Streams that have chunks awaiting confirmation and saw none confirmed for
  /// `timeout` while a live stream on another path works (confirmed one within
  /// `timeout`, or has nothing outstanding): a link that stopped without an error (a NIC
  /// or cable down) looks like this. Streams of one path are never judged against each
  /// other (on a slow link one waits behind another for seconds: measured, 3 MiB over
  /// 8 Mbit/s), and all stalled at once is the peer's silence, not a stream's.
  std::vector<uint16_t> stalled(std::chrono::steady_clock::time_point now,
                                std::chrono::steady_clock::duration timeout) const;
  /// Every live stream's wait for a confirmation counts from now: RECEIVED frames
  /// travel on the control stream, and while it was down none could come.
  void restart_progress_clocks();
  /// Chunks sent again, and retired streams, since the endpoint began.
  uint64_t chunks_resent() const noexcept { return chunks_resent_; }
  uint32_t streams_retired() const noexcept { return streams_retired_; }

  // --- rejoin (docs/protocol.md, "Failover") --------------------------------------
  /// Stream `index` is retired on both sides (this side retired it and the peer's RETIRE
  /// came): it may be connected again.
  bool rejoinable(uint16_t index) const noexcept {
    return failover_ && streams_[index].retired && streams_[index].peer_retired;
  }
  /// A rejoinable stream runs again over `fd`, its chunk counts (RECEIVED, RETIRE) from
  /// 0; `tx`: chunks may go on it now (else once enable_tx: the listening side waits for
  /// the peer's REJOINED). The Owner adds it to its poller.
  Status reinstate(uint16_t index, net::Fd fd, bool tx);
  /// A reinstated stream that was not sending takes chunks from now on.
  bool enable_tx(uint16_t index);
  /// Streams connected again since the endpoint began.
  uint32_t streams_rejoined() const noexcept { return streams_rejoined_; }

 private:
  struct TxChunk {
    TxTransfer* t;
    uint64_t start;      // the chunk's first byte, in the transfer
    uint64_t offset;     // next byte to write, in the transfer
    uint64_t remaining;
    bool resend = false;  // sent again after its first stream was retired
  };
  /// A chunk written whole and not yet confirmed (failover), or one to send again.
  /// t is null where the transfer was not kept (its source cannot send again).
  struct Unconfirmed {
    TxTransfer* t;
    uint64_t start;
    uint64_t length;
  };
  struct RxChunk {
    RxTransfer* t;
    uint64_t start;      // the chunk's first byte, in the transfer
    uint64_t length;
    uint64_t done;       // bytes read so far
    bool begun;          // the sink took it (begin_chunk)
    bool has_crc;        // the CHUNK frame carried `crc`
    uint32_t crc;
    uint64_t remote = 0;   // a PULL: the chunk's address in the peer
    uint64_t recv_id = 0;  // the id and kind its CHUNK or PULL named (a PULLED, a resent CHUNK)
    wire::ChunkKind kind = wire::ChunkKind::kMessage;
  };
  struct Stream {
    net::Fd fd;
    std::unique_ptr<StreamIn> in;  // how sinks read fd
    std::deque<TxChunk> txq;
    uint64_t queued = 0;  // bytes in txq
    std::deque<RxChunk> rxq;
    bool tx_blocked = false;
    bool eof = false;
    bool rx_resume = false;  // read() gave way with bytes possibly left
    bool rx_stalled = false;  // the front chunk's sink had no room (begin_chunk)
    uint64_t written_total = 0;  // payload bytes the kernel accepted
    uint64_t read_total = 0;     // payload bytes read
    uint64_t chunks_read = 0;
    // Rate measurement (rate_aware_): the bytes acknowledged (written_total - SIOCOUTQ)
    // at the last sample, when it was, whether the stream was busy then, the kernel's
    // send queue then, and the rate (bytes/s, an average of samples; 0: unknown).
    uint64_t acked_at_sample = 0;
    std::chrono::steady_clock::time_point sampled_at{};
    std::chrono::steady_clock::time_point busy_at{};  // last sample that found it busy
    bool busy_at_sample = false;
    uint64_t outq = 0;
    double rate = 0;
    // Failover: chunks written whole, oldest first, not yet confirmed; how many the
    // peer confirmed; whether this side retired the stream, and whether the peer did.
    std::deque<Unconfirmed> unconfirmed;
    uint64_t chunks_confirmed = 0;
    // When a chunk was last confirmed, or when the stream last went from nothing
    // outstanding to something (stalled()).
    std::chrono::steady_clock::time_point progress_at{};
    bool retired = false;
    bool peer_retired = false;
    // Rejoin: chunks may be scheduled on it (false between a reinstate on the listening
    // side and the peer's REJOINED), and the chunks read in its earlier lives (stats).
    bool tx_ok = true;
    uint64_t chunks_read_before = 0;
    // Receive workers: the job that has the stream now (null: none), the stream's
    // index, and whether an edge came while it had it (the socket is read again then).
    // `offload`: its StreamIn is the plain one attach() made (set_stream_in clears it).
    std::shared_ptr<StreamWorkers::Ticket> rx_job;
    bool edge_during_job = false;
    bool offload = false;
    // Send workers: the job that writes the front chunk now (null: none), and whether
    // the stream reported room (EPOLLOUT) while it had it.
    std::shared_ptr<StreamWorkers::Ticket> tx_job;
    bool writable_during_job = false;
  };
  /// Samples each stream's acknowledged bytes (SIOCOUTQ) where kRateSample has passed
  /// (and unblocks a stream found drained, as unblock_drained does).
  void sample_rates();
  /// `s` waits for EPOLLOUT with chunks queued (not handed to a send worker).
  static bool waits_for_room(const Stream& s) noexcept {
    return s.tx_blocked && !s.retired && !s.tx_job && !s.txq.empty();
  }
  /// Clears `s`'s block if it waits for room; true if it did.
  bool unblock(Stream& s);
  void log_unblocked(uint32_t now) const;
  bool any_blocked() const noexcept { return std::any_of(streams_.begin(), streams_.end(), waits_for_room); }
  /// The stream that would deliver a new chunk first, by measured rate.
  uint16_t fastest_finish() const;
  /// When fastest_finish()'s stream has no room: the stream with room that would
  /// deliver a new chunk first, if it would still deliver it before all streams
  /// together got through their loads and the ready transfers' unscheduled bytes;
  /// else -1 (the chunk waits for the faster stream).
  int keeps_pace() const;
  /// The fastest measured rate (1 when none is measured): what an unmeasured stream counts as.
  double fastest_rate() const noexcept;
  /// Bytes ahead of a new chunk on `s`: queued here and in its kernel send queue.
  uint64_t load(const Stream& s) const noexcept;
  /// The first ready transfer whose next chunk may go now (ready_.end() if none); a
  /// transfer whose source failed leaves ready_ and, if nothing of it is left to
  /// write, is reported sent (then `epoch_` may have moved).
  std::deque<TxTransfer*>::iterator next_preparable(uint64_t epoch);
  void write(uint16_t index);
  /// Chunks one sendmsg may carry.
  static constexpr int kGatherMax = 16;
  /// The front chunks of `s` whose sources can be gathered (ChunkSource::gather_begin),
  /// at most kGatherMax, as buffers; how many (0: the front one cannot). Each one's
  /// source holds its bytes until ungather().
  int gather(const Stream& s, std::array<iovec, kGatherMax>& iov) const;
  /// Ends the holds of the first `n` queued chunks' sources (gather()'s).
  void ungather(const Stream& s, int n) const;
  /// `bytes` of the front chunk of `s` went into the kernel (taken off `*left`): counts
  /// them, and finishes the chunk and its transfer where they are whole. false when a
  /// callback moved `epoch_` (the caller returns).
  bool advance(Stream& s, uint64_t bytes, uint64_t* left);
  /// advance()'s counting without its callbacks: the front chunk's `bytes` are in the
  /// kernel; a chunk so finished leaves the queue (to await confirmation, with failover).
  /// Returns the chunk's transfer.
  TxTransfer* count_written(Stream& s, uint64_t bytes);
  /// Reads `s`'s queued chunks: data stream `index`, or the PULLs (pulls_in_).
  void read(Stream& s, uint16_t index);
  /// `bytes` more of the front chunk of `s` are in its memory: counts them, and where
  /// the chunk is whole finishes it. false when a callback moved `epoch_`.
  bool consumed(Stream& s, uint16_t index, uint64_t bytes);
  /// Hands the rest of `s`'s front chunk to a receive worker where it may go; true if
  /// it did.
  bool offer_rx_job(Stream& s, uint16_t index);
  /// The job `ticket` of stream `index` reported (posted by its worker).
  void rx_job_done(uint16_t index, const std::shared_ptr<StreamWorkers::Ticket>& ticket);
  /// Takes `s`'s job back now (cancel, wait): `count`: the bytes it received count in
  /// the front chunk (they are in its memory); else they are forgotten with it.
  void settle_rx_job(Stream& s, bool count);
  /// Hands the rest of `s`'s front chunk to a send worker where it may go; true if it did.
  bool offer_tx_job(Stream& s, uint16_t index);
  /// The send job `ticket` of stream `index` reported (posted by its worker).
  void tx_job_done(uint16_t index, const std::shared_ptr<StreamWorkers::Ticket>& ticket);
  /// What settle_tx_job does with the bytes the job wrote (they are in the kernel):
  /// forget them (the chunks are being forgotten too); count them in the front chunk's
  /// progress as advance() does but without telling the Owner (the caller is retiring
  /// the stream: what the peer did not read whole goes again, and sent() follows the
  /// confirmations); or count them and tell the Owner, as the job's report would have.
  enum class TxSettle { kForget, kCount, kReport };
  /// Takes `s`'s send job back now (cancel, wait), if it has one. false when a callback
  /// (kReport) moved `epoch_`.
  bool settle_tx_job(Stream& s, TxSettle how);
  /// Counts the queued bytes of `s` that a sealing layer put into the kernel without
  /// telling the last sender (net::sealed_take_sent: a send job offered less than the
  /// progress thread had offered before it), as settle_tx_job counts a job's (kCount or
  /// kReport). The peer can have read them whole, so its RECEIVED or RETIRE may count
  /// them. false when a callback (kReport) moved `epoch_`.
  bool take_sealed_sent(Stream& s, TxSettle how);
  /// The checks expect() and expect_pull() share; "" or the violation.
  std::string check_expected(const RxTransfer* t, const char* frame, uint64_t offset, uint64_t length,
                             bool has_crc) const;
  /// Announces the next chunk of `t`, `size` bytes, as a CHUNK on `stream` or a PULL
  /// (stream < 0): false when the source cannot checksum it (the transfer then failed).
  bool announce_next(TxTransfer* t, uint64_t size, int stream);
  void finish_chunk(RxTransfer* t, uint64_t start, uint64_t length, bool has_crc, uint32_t crc);
  /// The least loaded stream that is not retired (schedule's choice without rates).
  uint16_t least_loaded() const;
  /// The next stream in turn that is not retired (equal_split_).
  uint16_t next_in_turn() const;
  /// The stream the next chunk goes to, by the mode above. Rails measured alike take the
  /// least-queued choice too: choosing by rate among equals waits for one stream while
  /// another has room, and read at CPU speed that cost a few percent (bench/results/rails.md).
  uint16_t choose_stream() const {
    if (equal_split_) return next_in_turn();
    return by_rate() ? fastest_finish() : least_loaded();
  }
  bool by_rate() const noexcept { return rate_aware_ && by_rate_ && !equal_split_; }
  /// Whether chunks wait for the chosen stream when it is full (else any stream with room).
  bool waits_for_choice() const noexcept { return by_rate() || equal_split_; }
  /// Queues the chunks waiting in resend_ on streams with room, each once its source
  /// prepared it again (staged device memory copies it out anew: the rest wait behind
  /// it until the copy ends); false if it gave up (a chunk could not be sent again:
  /// resend_failed was called).
  bool schedule_resends(bool* scheduled);
  /// Nothing written or to write on `s` awaits confirmation.
  static bool settled(const Stream& s) noexcept { return s.txq.empty() && s.unconfirmed.empty(); }
  /// Queues `c` on stream `index` (starting the stall clock if it was settled).
  void enqueue(uint16_t index, const TxChunk& c);
  /// Confirms the oldest `n` unconfirmed chunks of `s`; false if epoch_ moved.
  bool confirm_oldest(Stream& s, uint64_t n);

  Owner& owner_;
  uint64_t chunk_bytes_;
  bool checksum_ = false;
  std::string peer_;
  std::vector<Stream> streams_;
  std::deque<TxTransfer*> ready_;
  uint64_t epoch_ = 0;  // clear() moves it: a loop that sees it move after a callback returns
  uint64_t chunks_sent_ = 0;
  std::vector<uint64_t> chunks_per_stream_;
  bool rate_aware_ = false;
  bool by_rate_ = false;  // rate_aware_ and the last sample found the rates apart (rates_differ)
  bool equal_split_ = false;
  size_t next_turn_ = 0;  // equal_split_: the stream whose turn is next
  int waiting_for_ = -1;  // the stream the last schedule() waited for, or -1
  // Same-host pulls.
  class PullIn;
  bool pull_tx_ = false;
  std::deque<TxChunk> pulls_out_;  // announced as PULLs, not yet answered, oldest first
  Stream pulls_in_;                // the PULLs the peer announced, read in order
  PullIn* pull_in_ = nullptr;      // pulls_in_.in, when enabled
  uint64_t chunks_pulled_ = 0;
  uint64_t bytes_pulled_ = 0;
  bool promote_ = false;
  net::HugePagePromoter promoter_;
  Status distrust_;  // distrust_pulls
  // Failover.
  bool failover_ = false;
  std::deque<Unconfirmed> resend_;  // chunks of retired streams to send again, in order
  std::vector<RxChunk> owed_;       // chunks expected on retired streams, to come again
  std::vector<uint16_t> paths_;     // set_stream_paths; empty: one path
  uint64_t chunks_resent_ = 0;
  uint64_t streams_unblocked_ = 0;  // unblock_drained and sample_rates, for the log
  uint32_t streams_retired_ = 0;
  uint32_t streams_rejoined_ = 0;
  // Workers (both directions).
  StreamWorkers* workers_ = nullptr;
  uint64_t worker_min_ = 0;
  uint64_t worker_jobs_ = 0;
  uint64_t worker_bytes_ = 0;
  uint64_t worker_send_jobs_ = 0;
  uint64_t worker_send_bytes_ = 0;
};

}  // namespace remora::detail
