// datapath/chunk_scheduler.cc — see chunk_scheduler.h.
#include "datapath/chunk_scheduler.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "core/log.h"
#include "datapath/checksum.h"
#include "net/same_host.h"
#include "net/seal.h"

namespace remora::detail {

/// How sinks read the PULLs of a same-host peer: out of its memory, at the address the
/// front chunk's PULL named. A read never waits and never ends the stream; one that
/// comes back empty found the peer's range unmapped (EFAULT).
class ChunkScheduler::PullIn final : public StreamIn {
 public:
  explicit PullIn(pid_t pid) noexcept : pid_(pid) {}
  void at(uint64_t address) noexcept { next_ = address; }
  net::IoResult recv_some(std::byte* dst, size_t len) override {
    net::IoResult r = net::read_peer(pid_, dst, next_, len);
    if (r.moved() && r.bytes == 0 && len > 0) r = net::IoResult{net::IoResult::Kind::kError, 0, EFAULT};
    if (r.moved()) {
      next_ += r.bytes;
      return r;
    }
    // The peer is gone (ESRCH), announced memory it has not mapped (EFAULT: it broke
    // the protocol), or the kernel stopped allowing the read (EPERM: it dropped its
    // dumpable flag, or changed credentials).
    const StatusCode code = r.err == ESRCH    ? StatusCode::kPeerFailed
                            : r.err == EFAULT ? StatusCode::kProtocol
                                              : StatusCode::kPeerFailed;
    set_failure(Status(code, fmt::format("{} bytes at 0x{:x} in pid {}: {}", len, next_, pid_, std::strerror(r.err))));
    return r;
  }
  net::IoResult recv_scattered(const iovec* buffers, int count, uint64_t* asked) override {
    return recv_first(buffers, count, asked);
  }
  bool short_read_drains() const noexcept override { return false; }
  uint64_t read_limit() const noexcept override { return 0; }  // one process_vm_readv per chunk
  pid_t pid() const noexcept { return pid_; }

 private:
  pid_t pid_;
  uint64_t next_ = 0;
};

ChunkScheduler::ChunkScheduler(Owner& owner, uint32_t streams, uint64_t chunk_bytes, std::string peer)
    : owner_(owner),
      chunk_bytes_(chunk_bytes),
      peer_(std::move(peer)),
      streams_(streams),
      chunks_per_stream_(streams, 0) {}

Status ChunkScheduler::attach(uint16_t index, net::Fd fd) {
  if (index >= streams_.size()) return Status(StatusCode::kProtocol, "data stream index out of range");
  if (streams_[index].fd.valid()) return Status(StatusCode::kProtocol, "data stream attached twice");
  // schedule() takes the bytes queued here as a stream's load, but the kernel's send
  // buffer (autotuned up to 4 MiB) would take several chunks more before the stream
  // looked full: a slowed stream went on taking chunks that later transfers, completed
  // in order, then waited for (NCCL plugin benchmark, docs/nccl.md: 1 MiB messages over
  // 4 streams, one at 1 Gbit/s, 0.56-0.99x the equal split; with at most a chunk unsent
  // in the kernel 1.37-1.56x, with two 1.17x, four 0.89x). It costs the sender more
  // wake-ups and sends of less than a chunk (about 2.5x the sendto calls). Best effort:
  // a socket that is not TCP (the unit tests' socket pairs) keeps its buffer.
  const int unsent = static_cast<int>(std::min<uint64_t>(chunk_bytes_, INT_MAX));
  (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &unsent, sizeof unsent);
  streams_[index].in = std::make_unique<StreamIn>(fd.get());
  streams_[index].offload = true;
  streams_[index].fd = std::move(fd);
  return Status::ok();
}

ChunkScheduler::~ChunkScheduler() { cancel_jobs(); }

bool ChunkScheduler::all_attached() const noexcept {
  return std::all_of(streams_.begin(), streams_.end(), [](const Stream& s) { return s.fd.valid(); });
}

void ChunkScheduler::close_all() {
  for (Stream& s : streams_) {
    settle_rx_job(s, /*count=*/false);
    settle_tx_job(s, TxSettle::kForget);
    s.in.reset();
    s.fd.reset();
  }
}

void ChunkScheduler::clear() {
  for (Stream& s : streams_) {
    settle_rx_job(s, /*count=*/false);  // its operations are gone, and so is its memory soon
    settle_tx_job(s, TxSettle::kForget);
    s.txq.clear();
    s.queued = 0;
    s.unconfirmed.clear();
    s.rxq.clear();
    s.rx_resume = false;
    s.rx_stalled = false;
  }
  pulls_out_.clear();
  pulls_in_.rxq.clear();
  pulls_in_.rx_resume = false;
  pulls_in_.rx_stalled = false;
  ready_.clear();
  resend_.clear();
  owed_.clear();
  ++epoch_;
}

void ChunkScheduler::clear_tx() {
  for (Stream& s : streams_) {
    settle_tx_job(s, TxSettle::kForget);  // the sending operations are gone
    s.txq.clear();
    s.queued = 0;
    s.unconfirmed.clear();
  }
  pulls_out_.clear();  // the control stream is gone: no PULLED can come
  ready_.clear();
  resend_.clear();
  ++epoch_;
}

bool ChunkScheduler::idle() const noexcept {
  return ready_.empty() && pulls_out_.empty() && pulls_in_.rxq.empty() && resend_.empty() && owed_.empty() &&
         std::all_of(streams_.begin(), streams_.end(),
                     [](const Stream& s) { return s.txq.empty() && s.rxq.empty() && s.unconfirmed.empty(); });
}

bool ChunkScheduler::sends_nothing() const noexcept {
  return ready_.empty() && resend_.empty() &&
         std::all_of(streams_.begin(), streams_.end(), [](const Stream& s) { return s.txq.empty(); });
}

// --- sending ---------------------------------------------------------------------

std::deque<TxTransfer*>::iterator ChunkScheduler::next_preparable(uint64_t epoch) {
  auto it = ready_.begin();
  while (it != ready_.end()) {
    TxTransfer* t = *it;
    const Status p = t->source->prepare(t->scheduled, std::min<uint64_t>(chunk_bytes_, t->length - t->scheduled));
    if (p.is_ok()) return it;
    if (p.code() == StatusCode::kInProgress) {
      ++it;  // not staged yet: a later transfer may go first
      continue;
    }
    t->failure = p;
    it = ready_.erase(it);
    if (t->done()) {
      owner_.sent(*t);
      if (epoch != epoch_) return ready_.end();
      it = ready_.begin();
    }
  }
  return it;
}

namespace {
/// How often a stream's acknowledged bytes are sampled for its rate: often enough to
/// follow a rail whose rate changes, rarely enough that the ioctl costs nothing.
constexpr std::chrono::microseconds kRateSample{2000};
/// Two samples further apart than this give only a lower bound of the rate.
constexpr std::chrono::microseconds kRateGap{4 * kRateSample};
/// A stream idle this long forgets its rate, so that a rail found slow is tried again.
constexpr std::chrono::milliseconds kRateForget{200};
/// Rails whose measured rates are within this factor of each other count as equal.
constexpr double kRateSpread = 3;
}  // namespace

std::optional<bool> ChunkScheduler::rates_differ(std::span<const double> rates) noexcept {
  double lowest = 0;
  double highest = 0;
  int measured = 0;
  for (const double r : rates) {
    if (r <= 0) continue;
    lowest = measured == 0 ? r : std::min(lowest, r);
    highest = std::max(highest, r);
    ++measured;
  }
  if (measured < 2) return std::nullopt;
  return highest > kRateSpread * lowest;
}

void ChunkScheduler::sample_rates() {
  const auto now = std::chrono::steady_clock::now();
  bool sampled = false;
  uint32_t unblocked = 0;
  for (uint16_t i = 0; i < streams_.size(); ++i) {
    Stream& s = streams_[i];
    if (!s.fd.valid() || now - s.sampled_at < kRateSample) continue;
    int outq = 0;
    if (::ioctl(s.fd.get(), SIOCOUTQ, &outq) != 0 || outq < 0) continue;
    // What a send worker put in the kernel counts already (the kernel's queue holds it).
    // The worker may send between the ioctl and the read of its count, so this can run
    // ahead of what the peer acknowledged by those bytes; the next sample may then see
    // less. Acknowledged bytes never go back: the count is held where it was, never
    // subtracted below it (an unsigned wrap there read as a rate of exabytes per second,
    // and the rail whose stream had it took every chunk, starving the others).
    const uint64_t written = bytes_sent(i);
    const uint64_t acked =
        std::max(s.acked_at_sample, written - std::min<uint64_t>(written, static_cast<uint64_t>(outq)));
    const bool busy = outq > 0;
    // A stream busy at both samples gives its rate. One that was busy at the first and
    // drained before the second gives a lower bound (it was idle part of the time):
    // taken only when above the estimate, else a stream fast enough to drain between
    // samples would never be measured and would count as slow as the slowest. An
    // idle stream's acknowledged bytes say nothing. Samples further apart than
    // kRateGap (the progress thread busy elsewhere, or nothing to schedule meanwhile)
    // are lower bounds too: the stream may have drained and been fed again in between.
    // Taken whole, one such sample put a 200 Mbit/s rail's rate far below its own, and
    // the rail, no longer fed, idled until it forgot it (2 of 128 chunks instead of 14).
    if (s.busy_at_sample) {
      const auto gap = now - s.sampled_at;
      const double sample = static_cast<double>(acked - s.acked_at_sample) / std::chrono::duration<double>(gap).count();
      const bool close = gap <= kRateGap;
      // (A distant lower bound is no first estimate: unmeasured, the stream counts as fast.)
      if ((busy && close) || (sample > s.rate && (close || s.rate != 0))) {
        s.rate = s.rate == 0 ? sample : 0.75 * s.rate + 0.25 * sample;
      }
    }
    if (busy) s.busy_at = now;
    // Room with no edge seen (unblock_drained).
    if (outq == 0 && unblock(s)) ++unblocked;
    if (!busy && s.rate != 0 && now - s.busy_at > kRateForget) s.rate = 0;
    s.acked_at_sample = acked;
    s.sampled_at = now;
    s.busy_at_sample = busy;
    s.outq = static_cast<uint64_t>(outq);
    sampled = true;
  }
  if (unblocked > 0) log_unblocked(unblocked);
  if (!sampled) return;
  std::vector<double> rates;
  rates.reserve(streams_.size());
  for (const Stream& s : streams_) {
    if (!s.retired && s.tx_ok) rates.push_back(s.rate);
  }
  by_rate_ = rates_differ(rates).value_or(by_rate_);
}

double ChunkScheduler::fastest_rate() const noexcept {
  double fastest = 0;
  for (const Stream& s : streams_) fastest = std::max(fastest, s.rate);
  return fastest == 0 ? 1 : fastest;
}

uint64_t ChunkScheduler::load(const Stream& s) const noexcept {
  // Bytes a send worker moved are in the kernel's queue (outq), no longer queued here.
  return s.queued - (s.tx_job ? std::min(s.queued, s.tx_job->moved()) : 0) + s.outq;
}

uint16_t ChunkScheduler::fastest_finish() const {
  // A stream not measured yet counts as fast as the fastest measured one (it is tried);
  // with none measured, every stream counts alike and the least loaded wins.
  const double fastest = fastest_rate();
  int best = -1;
  double best_finish = 0;
  for (uint16_t i = 0; i < streams_.size(); ++i) {
    const Stream& s = streams_[i];
    if (s.retired || !s.tx_ok) continue;
    const double finish = static_cast<double>(load(s) + chunk_bytes_) / (s.rate > 0 ? s.rate : fastest);
    if (best < 0 || finish < best_finish) {
      best = i;
      best_finish = finish;
    }
  }
  return static_cast<uint16_t>(std::max(best, 0));
}

int ChunkScheduler::keeps_pace() const {
  // The chunk would finish later on a slower stream than on the chosen one, but the
  // chosen one has no room: a chunk given to the slower stream now still finishes
  // before every stream together would get through what is left to send (the streams'
  // loads and the ready transfers' unscheduled bytes at the streams' summed rate), so
  // it shortens the transfer instead of holding back its end. Without this, a
  // 200 Mbit/s rail beside a 1 Gbit/s one idled for most of each 64 MiB transfer: a
  // chunk always finished sooner behind the fast rail's short queue.
  const double fastest = fastest_rate();
  int best = -1;
  double best_finish = 0;
  double rates = 0;
  double loads = 0;
  for (uint16_t i = 0; i < streams_.size(); ++i) {
    const Stream& s = streams_[i];
    if (s.retired || !s.tx_ok) continue;
    const double rate = s.rate > 0 ? s.rate : fastest;
    rates += rate;
    loads += static_cast<double>(load(s));
    if (s.queued >= chunk_bytes_) continue;
    const double finish = static_cast<double>(load(s) + chunk_bytes_) / rate;
    if (best < 0 || finish < best_finish) {
      best = i;
      best_finish = finish;
    }
  }
  if (best < 0) return -1;
  // Only as much of the ready transfers as the answer needs is summed.
  double left = loads;
  for (const TxTransfer* t : ready_) {
    if (left >= best_finish * rates) return best;
    if (pull_tx_ && t->source->host_bytes() != nullptr) continue;  // pulled, not streamed
    left += static_cast<double>(t->length - t->scheduled);
  }
  return left >= best_finish * rates ? best : -1;
}

uint16_t ChunkScheduler::least_loaded() const {
  int best = -1;
  for (uint16_t i = 0; i < streams_.size(); ++i) {
    if (streams_[i].retired || !streams_[i].tx_ok) continue;
    if (best < 0 || streams_[i].queued < streams_[static_cast<size_t>(best)].queued) best = i;
  }
  return static_cast<uint16_t>(std::max(best, 0));
}

uint16_t ChunkScheduler::next_in_turn() const {
  for (size_t k = 0; k < streams_.size(); ++k) {
    const size_t i = (next_turn_ + k) % streams_.size();
    if (!streams_[i].retired && streams_[i].tx_ok) return static_cast<uint16_t>(i);
  }
  return 0;  // all retired (the caller sees it)
}

bool ChunkScheduler::waiting_stream_has_room() const noexcept {
  return waiting_for_ >= 0 && streams_[static_cast<size_t>(waiting_for_)].queued < chunk_bytes_;
}

bool ChunkScheduler::schedule() {
  bool scheduled = false;
  const uint64_t epoch = epoch_;
  waiting_for_ = -1;
  if (rate_aware_ && (!ready_.empty() || !resend_.empty() || any_blocked())) sample_rates();
  // Chunks of a retired stream first: their transfers wait for nothing else.
  if (!resend_.empty() && (!schedule_resends(&scheduled) || epoch != epoch_ || !resend_.empty())) return scheduled;
  while (!ready_.empty()) {
    // The stream with the fewest queued bytes (with rails of clearly different rates:
    // the one expected to deliver the chunk first, or a slower one that keeps pace),
    // if it has room for another chunk.
    uint16_t best = choose_stream();
    // None usable (every stream retired, or the one left not yet writable after its
    // rejoin): chunks wait, except those a same-host peer pulls.
    const bool usable = !streams_[best].retired && streams_[best].tx_ok;
    bool stream_room = usable && streams_[best].queued < chunk_bytes_;
    if (usable && !stream_room && by_rate()) {
      if (const int other = keeps_pace(); other >= 0) {
        best = static_cast<uint16_t>(other);
        stream_room = true;
      }
    }
    if (usable && !stream_room && waits_for_choice()) waiting_for_ = best;
    const bool pull_room = pull_tx_ && pulls_out_.size() < kPullWindow;
    if (!stream_room && !pull_room) break;
    const auto it = next_preparable(epoch);
    if (epoch != epoch_ || it == ready_.end()) break;
    TxTransfer* t = *it;
    // A same-host peer reads host memory itself; the rest goes on the streams.
    const bool pull = pull_tx_ && t->source->host_bytes() != nullptr;
    if (pull ? !pull_room : !stream_room) break;
    const uint64_t size = std::min<uint64_t>(chunk_bytes_, t->length - t->scheduled);
    if (!announce_next(t, size, pull ? -1 : best)) {
      ready_.erase(it);
      if (t->done()) {
        owner_.sent(*t);
        if (epoch != epoch_) break;
      }
      continue;
    }
    t->scheduled += size;
    if (t->scheduled == t->length) ready_.erase(it);
    if (!pull) next_turn_ = best + 1u;
    scheduled = true;
  }
  return scheduled;
}

bool ChunkScheduler::announce_next(TxTransfer* t, uint64_t size, int stream) {
  std::optional<uint32_t> crc;
  if (checksum_) {
    crc = t->source->checksum(t->scheduled, size);
    if (!crc) {
      // A memory path whose bytes are not on the host here (none is driven in this
      // version): refuse the rest rather than send it unchecked.
      t->failure = Status(StatusCode::kUnsupported,
                          "REMORA_CHECKSUM=crc32c: this memory's data path cannot checksum its chunks");
      return false;
    }
  }
  const TxChunk chunk{t, t->scheduled, t->scheduled, size};
  if (stream < 0) {
    const auto address = reinterpret_cast<uintptr_t>(t->source->host_bytes() + t->scheduled);
    if (promote_) promoter_.announced(address, size);
    owner_.announce_pull(wire::PullFrame{.recv_id = t->chunk_id,
                                         .offset = t->scheduled,
                                         .length = static_cast<uint32_t>(size),
                                         .address = address,
                                         .kind = t->kind,
                                         .has_crc = crc.has_value(),
                                         .crc = crc.value_or(0)});
    pulls_out_.push_back(chunk);
    ++chunks_pulled_;
  } else {
    const auto index = static_cast<uint16_t>(stream);
    owner_.announce(wire::ChunkFrame{t->chunk_id, t->scheduled, static_cast<uint32_t>(size), index, t->kind,
                                     crc.has_value(), crc.value_or(0)});
    enqueue(index, chunk);
    ++chunks_per_stream_[index];
  }
  ++chunks_sent_;
  return true;
}

void ChunkScheduler::write_all() {
  const uint64_t epoch = epoch_;
  for (uint16_t i = 0; i < streams_.size() && epoch == epoch_; ++i) write(i);
}

void ChunkScheduler::writable(uint16_t index) {
  Stream& s = streams_[index];
  if (s.retired) return;
  if (s.tx_job) {
    s.writable_during_job = true;  // a send worker has the stream: it writes on after
    return;
  }
  s.tx_blocked = false;
  write(index);
}

bool ChunkScheduler::unblock(Stream& s) {
  if (!waits_for_room(s)) return false;
  s.tx_blocked = false;
  ++streams_unblocked_;
  return true;
}

uint32_t ChunkScheduler::unblock_drained() {
  uint32_t unblocked = 0;
  for (Stream& s : streams_) {
    if (!waits_for_room(s)) continue;
    // Nothing unsent or unacknowledged: below TCP_NOTSENT_LOWAT and the send buffer.
    int outq = 0;
    if (::ioctl(s.fd.get(), SIOCOUTQ, &outq) != 0 || outq != 0) continue;
    if (unblock(s)) ++unblocked;
  }
  if (unblocked > 0) log_unblocked(unblocked);
  return unblocked;
}

void ChunkScheduler::log_unblocked(uint32_t now) const {
  REMORA_LOG(kTrace,
             "data streams to {}: {} blocked with an empty send queue and no EPOLLOUT seen yet; written again "
             "({} so far)",
             peer_, now, streams_unblocked_);
}

void ChunkScheduler::write(uint16_t index) {
  Stream& s = streams_[index];
  if (s.retired || s.tx_job) return;
  const uint64_t epoch = epoch_;
  while (!s.txq.empty() && !s.tx_blocked) {
    if (offer_tx_job(s, index)) return;
    TxChunk& c = s.txq.front();
    // Several small chunks queued behind each other (a list of blocks) go in one
    // sendmsg where their sources allow it; otherwise the chunk's source writes it.
    std::array<iovec, kGatherMax> iov;  // gather fills what it returns
    int gathered = s.txq.size() > 1 ? gather(s, iov) : 0;  // one chunk alone: no hold to take
    if (gathered == 1) {
      ungather(s, 1);  // one chunk: its source writes it
      gathered = 0;
    }
    net::IoResult r;
    if (gathered > 1) {
      r = net::send_some_gathered(s.fd.get(), iov.data(), gathered);
      ungather(s, gathered);
    } else {
      r = c.resend ? c.t->source->write_again(s.fd.get(), c.offset, c.remaining)
                   : c.t->source->write(s.fd.get(), c.offset, c.remaining);
    }
    if (r.would_block()) {
      s.tx_blocked = true;
      return;
    }
    if (!r.moved() && c.resend && r.err == EKEYREVOKED) {
      owner_.resend_failed(Status(StatusCode::kInvalidKey,
                                  fmt::format("a chunk of a served get to {} could not be sent again after its data "
                                              "stream broke: the region was deregistered meanwhile",
                                              peer_)));
      return;
    }
    if (!r.moved()) {
      owner_.stream_failed(index,
                           net::errno_status(r.err, "send on data stream " + std::to_string(index) + " to " + peer_));
      return;
    }
    // The bytes moved belong to the queued chunks in order.
    uint64_t left = r.bytes;
    do {
      if (!advance(s, std::min(left, s.txq.front().remaining), &left) || epoch != epoch_) return;
    } while (left > 0 && !s.txq.empty());
  }
}

int ChunkScheduler::gather(const Stream& s, std::array<iovec, kGatherMax>& iov) const {
  int n = 0;
  for (const TxChunk& c : s.txq) {
    if (n == kGatherMax || c.resend) break;
    const std::byte* bytes = c.t->source->gather_begin();
    if (bytes == nullptr) break;
    iov[static_cast<size_t>(n++)] = iovec{const_cast<std::byte*>(bytes + c.offset), c.remaining};
  }
  return n;
}

void ChunkScheduler::ungather(const Stream& s, int n) const {
  for (auto it = s.txq.begin(); n > 0; ++it, --n) it->t->source->gather_end();
}

bool ChunkScheduler::offer_tx_job(Stream& s, uint16_t index) {
  if (workers_ == nullptr) return false;
  const TxChunk& c = s.txq.front();
  if (c.resend || c.remaining < worker_min_) return false;  // sent again: write_again here
  const std::byte* bytes = c.t->source->gather_begin();
  if (bytes == nullptr) return false;  // not host memory sent plainly (or not now)
  s.writable_during_job = false;
  auto slot = std::make_shared<std::shared_ptr<StreamWorkers::Ticket>>();
  StreamWorkers::TxJob job{.fd = s.fd.get(),
                           .src = bytes + c.offset,
                           .len = c.remaining,
                           .source = c.t->source,
                           // As offer_rx_job's: posted, so it runs after `slot` is filled.
                           .done = [this, index, slot] { owner_.post([this, index, slot] { tx_job_done(index, *slot); }); }};
  s.tx_job = workers_->submit(index + workers_->threads() / 2, std::move(job));
  *slot = s.tx_job;
  ++worker_send_jobs_;
  return true;
}

void ChunkScheduler::tx_job_done(uint16_t index, const std::shared_ptr<StreamWorkers::Ticket>& ticket) {
  if (index >= streams_.size()) return;
  Stream& s = streams_[index];
  if (!ticket || s.tx_job != ticket) return;  // taken back meanwhile (settle_tx_job)
  const StreamWorkers::Result r = ticket->result();
  s.tx_job.reset();
  worker_send_bytes_ += r.got;
  const uint64_t epoch = epoch_;
  // The job had the front chunk's rest; the bytes it sent are that chunk's.
  const bool whole = !s.txq.empty() && r.got == s.txq.front().remaining;
  if (r.got > 0 && !s.txq.empty()) {
    uint64_t left = r.got;
    if (!advance(s, r.got, &left) || epoch != epoch_) return;
  }
  if (r.last.error()) {
    owner_.stream_failed(index,
                         net::errno_status(r.last.err, "send on data stream " + std::to_string(index) + " to " + peer_));
    return;
  }
  // The chunk is in the kernel, or the socket had no room a while: write on (at once
  // where room was reported meanwhile or the chunk is whole; else at the next edge).
  if (!std::exchange(s.writable_during_job, false) && !whole) {
    s.tx_blocked = true;
    return;
  }
  write(index);
}

bool ChunkScheduler::settle_tx_job(Stream& s, TxSettle how) {
  if (!s.tx_job) return true;
  const StreamWorkers::Result r = s.tx_job->cancel();
  s.tx_job.reset();
  worker_send_bytes_ += r.got;
  s.writable_during_job = false;
  s.tx_blocked = false;  // what stopped the job (no room, an error) is met again by the next write
  if (how == TxSettle::kForget || r.got == 0 || s.txq.empty()) return true;
  if (how == TxSettle::kCount) {
    (void)count_written(s, r.got);
    return true;
  }
  uint64_t left = r.got;
  const uint64_t epoch = epoch_;
  return advance(s, r.got, &left) && epoch == epoch_;
}

bool ChunkScheduler::take_sealed_sent(Stream& s, TxSettle how) {
  const uint64_t epoch = epoch_;
  while (!s.txq.empty() && s.fd.valid()) {
    const uint64_t n = net::sealed_take_sent(s.fd.get(), s.txq.front().remaining);
    if (n == 0) return true;
    if (how == TxSettle::kCount) {
      (void)count_written(s, n);
      continue;
    }
    uint64_t left = n;
    if (!advance(s, n, &left) || epoch != epoch_) return false;
  }
  return true;
}

TxTransfer* ChunkScheduler::count_written(Stream& s, uint64_t bytes) {
  TxChunk& c = s.txq.front();
  c.offset += bytes;
  c.remaining -= bytes;
  s.queued -= bytes;
  s.written_total += bytes;
  s.outq += bytes;  // in the kernel now, until the next sample says what left
  TxTransfer* t = c.t;
  t->written += bytes;
  if (c.remaining == 0) {
    const uint64_t start = c.start, length = c.offset - c.start;
    s.txq.pop_front();
    t->source->chunk_sent(start, length);
    if (failover_) s.unconfirmed.push_back(Unconfirmed{t->confirm ? t : nullptr, start, length});
  }
  return t;
}

bool ChunkScheduler::advance(Stream& s, uint64_t bytes, uint64_t* left) {
  const uint64_t epoch = epoch_;
  *left -= bytes;
  TxTransfer* t = count_written(s, bytes);
  if (t->confirm && !t->written_told && t->all_written()) {
    t->written_told = true;
    owner_.written(*t);
    if (epoch != epoch_) return false;
  }
  if (t->done()) {
    owner_.sent(*t);
    if (epoch != epoch_) return false;
  }
  return true;
}

// --- receiving -------------------------------------------------------------------

std::string ChunkScheduler::check_expected(const RxTransfer* t, const char* frame, uint64_t offset, uint64_t length,
                                           bool has_crc) const {
  if (has_crc != checksum_) {
    return checksum_ ? fmt::format("{} without the CRC-32C this endpoint negotiated (REMORA_CHECKSUM=crc32c)", frame)
                     : fmt::format("{} with a CRC on an endpoint without checksums", frame);
  }
  if (length == 0 || offset > t->length || length > t->length - offset || length > t->length - t->announced) {
    return fmt::format("{} [{}, +{}) outside the {}-byte message", frame, offset, length, t->length);
  }
  // Chunks of one operation are announced in order, each starting where the previous
  // ended. Anything else (a repeat, an overlap, a gap) could complete the operation
  // with bytes of it never written: a put would report success over stale memory.
  if (offset != t->announced) {
    return fmt::format("{} [{}, +{}) does not start at {}, where the operation's previous chunk ended", frame, offset,
                       length, t->announced);
  }
  return {};
}

std::string ChunkScheduler::expect(RxTransfer* t, uint16_t stream, uint64_t offset, uint64_t length,
                                   std::optional<uint32_t> crc) {
  if (crc.has_value() == checksum_ && stream >= streams_.size()) {
    return "CHUNK names data stream " + std::to_string(stream) + " of " + std::to_string(streams_.size());
  }
  if (std::string violation = check_expected(t, "CHUNK", offset, length, crc.has_value()); !violation.empty()) {
    return violation;
  }
  t->announced += length;
  RxChunk c{t, offset, length, 0, false, crc.has_value(), crc.value_or(0), 0, t->id, t->kind};
  if (streams_[stream].retired) {
    owed_.push_back(c);  // announced before the peer heard that this side retired the stream: it comes again
  } else {
    streams_[stream].rxq.push_back(c);
  }
  return {};
}

void ChunkScheduler::enable_pull_rx(pid_t pid) {
  auto in = std::make_unique<PullIn>(pid);
  pull_in_ = in.get();
  pulls_in_.in = std::move(in);
}

std::string ChunkScheduler::expect_pull(RxTransfer* t, uint64_t offset, uint64_t length, uint64_t address,
                                        std::optional<uint32_t> crc) {
  if (pull_in_ == nullptr) return "PULL to a side that did not say it can read the peer's memory";
  if (std::string violation = check_expected(t, "PULL", offset, length, crc.has_value()); !violation.empty()) {
    return violation;
  }
  t->announced += length;
  pulls_in_.rxq.push_back(
      RxChunk{t, offset, length, 0, false, crc.has_value(), crc.value_or(0), address, t->id, t->kind});
  return {};
}

void ChunkScheduler::read_pulls() {
  if (pull_in_ == nullptr) return;
  read(pulls_in_, UINT16_MAX);
}

std::string ChunkScheduler::pulled(wire::ChunkKind kind, uint64_t recv_id, uint64_t length) {
  if (pulls_out_.empty()) return "PULLED with no PULL unanswered";
  const TxChunk c = pulls_out_.front();
  if (c.t->kind != kind || c.t->chunk_id != recv_id || c.remaining != length) {
    return fmt::format("PULLED (kind {}, id {}, {} bytes) does not answer the oldest PULL (kind {}, id {}, {} bytes)",
                       static_cast<int>(kind), recv_id, length, static_cast<int>(c.t->kind), c.t->chunk_id,
                       c.remaining);
  }
  pulls_out_.pop_front();
  TxTransfer* t = c.t;
  t->written += length;
  t->confirmed += length;  // a PULLED is the peer's word that it has the bytes
  t->source->chunk_sent(c.start, length);
  if (t->done()) owner_.sent(*t);
  return {};
}

void ChunkScheduler::read(uint16_t index) { read(streams_[index], index); }

void ChunkScheduler::read(Stream& s, uint16_t index) {
  if (!s.in) return;  // closed, or handed to the lingering close
  if (s.rx_job) {
    s.edge_during_job = true;  // a receive worker has the stream: it reads on after
    return;
  }
  const bool pulls = &s == &pulls_in_;
  const uint64_t epoch = epoch_;
  while (!s.rxq.empty()) {
    RxChunk& c = s.rxq.front();
    RxTransfer* t = c.t;
    if (!c.begun) {
      if (!t->sink->begin_chunk(c.start, c.length)) {
        s.rx_stalled = true;  // unstall() reads on; the bytes raise no new edge
        return;
      }
      c.begun = true;
    }
    if (c.done == c.length) {  // whole, taken back from a worker unfinished (settle_rx_job)
      if (!consumed(s, index, 0)) return;
      continue;
    }
    if (!pulls && offer_rx_job(s, index)) return;
    if (pulls) pull_in_->at(c.remote + c.done);
    // `asked` is what the sink asked the kernel for: the rest of the chunk (at most the
    // stream's read_limit), or a scratch buffer's worth when it drains. A read shorter
    // than that drained the socket; one that fills it did not, and stopping there would
    // strand the rest (edge-triggered: no new edge comes for bytes already queued).
    uint64_t asked = 0;
    const uint64_t limit = s.in->read_limit();
    const uint64_t rest = c.length - c.done;
    net::IoResult r = t->sink->read(*s.in, c.start + c.done, limit != 0 ? std::min(rest, limit) : rest, &asked);
    if (r.would_block()) return;
    if (pulls && r.error() && r.err == EFAULT && c.kind == wire::ChunkKind::kGet) {
      // A served get's region was unmapped in the peer while this side read it: it was
      // deregistered (the peer does not wait for these reads) and freed. The get fails
      // (its RESP says revoked, or should have); the chunk counts as read, unread, so
      // that the PULL is answered and the endpoint goes on.
      if (t->failure.is_ok()) {
        t->failure = Status(StatusCode::kInvalidKey,
                            fmt::format("the region a get read from {} was unmapped while it was read (deregistered "
                                        "and freed by the peer)",
                                        peer_));
      }
      r = net::IoResult{net::IoResult::Kind::kBytes, c.length - c.done, 0};
      asked = r.bytes;
    }
    if (r.error()) {
      const std::string where =
          pulls ? fmt::format("process_vm_readv of a PULLed chunk from {} (pid {})", peer_, pull_in_->pid())
                : "recv on data stream " + std::to_string(index) + " from " + peer_;
      Status why = s.in->take_failure();
      owner_.stream_failed(pulls ? UINT16_MAX : index,
                           why.is_ok() ? net::errno_status(r.err, where) : why.with_context(where));
      return;
    }
    if (r.eof()) {
      owner_.stream_ended(index);
      return;
    }
    const bool short_read = r.bytes < asked;
    if (!consumed(s, index, r.bytes) || epoch != epoch_) return;
    // Drained; the next bytes raise a new edge. (Not proven on a devmem stream: its
    // reads go on until one would block.)
    if (short_read && !s.eof && s.in->short_read_drains()) break;
    if (!s.rxq.empty() && owner_.should_yield()) {
      // Another thread waits for the lock: give way; resume() reads on (the bytes
      // already queued raise no new edge).
      s.rx_resume = true;
      owner_.resume_later();
      break;
    }
  }
}

bool ChunkScheduler::consumed(Stream& s, uint16_t index, uint64_t bytes) {
  const bool pulls = &s == &pulls_in_;
  const uint64_t epoch = epoch_;
  RxChunk& c = s.rxq.front();
  RxTransfer* t = c.t;
  c.done += bytes;
  s.read_total += bytes;
  t->received += bytes;
  if (pulls) bytes_pulled_ += bytes;
  if (c.done < c.length) return true;
  const uint64_t start = c.start, length = c.length;
  const bool has_crc = c.has_crc;
  const uint32_t crc = c.crc;
  if (pulls) {
    // Read: the peer's memory is its own again. (A transfer redirected to the
    // drain still answers with the id and kind the PULL named.)
    owner_.answer_pull(
        wire::PulledFrame{.recv_id = c.recv_id, .length = static_cast<uint32_t>(length), .kind = c.kind});
  }
  s.rxq.pop_front();
  ++s.chunks_read;
  if (failover_ && !pulls) owner_.chunk_read(index, s.chunks_read);
  if (pulls && !distrust_.is_ok() && t->failure.is_ok()) t->failure = distrust_;
  finish_chunk(t, start, length, has_crc, crc);
  return epoch == epoch_;
}

bool ChunkScheduler::offer_rx_job(Stream& s, uint16_t index) {
  if (workers_ == nullptr || !s.offload || s.eof) return false;
  RxChunk& c = s.rxq.front();
  const uint64_t rest = c.length - c.done;
  if (rest < worker_min_) return false;
  std::byte* dst = c.t->sink->host_destination(c.start + c.done);
  if (dst == nullptr) return false;
  s.edge_during_job = false;
  auto slot = std::make_shared<std::shared_ptr<StreamWorkers::Ticket>>();
  StreamWorkers::RxJob job{.in = s.in.get(),
                     .dst = dst,
                     .len = rest,
                     .piece = s.in->read_limit(),
                     .sink = c.t->sink,
                     // On the worker. The posted call runs under the progress lock, so
                     // after this side (which holds it) filled `slot` below.
                     .done = [this, index, slot] { owner_.post([this, index, slot] { rx_job_done(index, *slot); }); }};
  s.rx_job = workers_->submit(index, std::move(job));
  *slot = s.rx_job;
  ++worker_jobs_;
  return true;
}

void ChunkScheduler::rx_job_done(uint16_t index, const std::shared_ptr<StreamWorkers::Ticket>& ticket) {
  if (index >= streams_.size()) return;
  Stream& s = streams_[index];
  if (!ticket || s.rx_job != ticket) return;  // taken back meanwhile (settle_rx_job)
  const StreamWorkers::Result r = ticket->result();
  s.rx_job.reset();
  worker_bytes_ += r.got;
  const uint64_t epoch = epoch_;
  const bool whole = r.got > 0 && !s.rxq.empty() && r.got == s.rxq.front().length - s.rxq.front().done;
  if (r.got > 0 && !s.rxq.empty() && (!consumed(s, index, r.got) || epoch != epoch_)) return;
  if (r.last.error()) {
    const std::string where = "recv on data stream " + std::to_string(index) + " from " + peer_;
    Status why = s.in ? s.in->take_failure() : Status::ok();
    owner_.stream_failed(index, why.is_ok() ? net::errno_status(r.last.err, where) : why.with_context(where));
    return;
  }
  if (r.last.eof()) {
    owner_.stream_ended(index);
    return;
  }
  // The chunk is whole, or the socket was empty a while: read on (at once where an
  // edge came meanwhile or the chunk is whole; else the next edge does).
  if (std::exchange(s.edge_during_job, false) || whole) read(s, index);
}

void ChunkScheduler::settle_rx_job(Stream& s, bool count) {
  if (!s.rx_job) return;
  const StreamWorkers::Result r = s.rx_job->cancel();
  s.rx_job.reset();
  worker_bytes_ += r.got;
  if (count && r.got > 0 && !s.rxq.empty()) {
    // In the chunk's memory: counted, not finished (read() finishes it).
    RxChunk& c = s.rxq.front();
    c.done += r.got;
    s.read_total += r.got;
    c.t->received += r.got;
  }
  // An error or end it met is met again by the next read.
  s.edge_during_job = false;
}

void ChunkScheduler::finish_chunk(RxTransfer* t, uint64_t start, uint64_t length, bool has_crc, uint32_t crc) {
  if (has_crc) {
    // Checked before the sink places the chunk (a staging sink copies it on to the
    // device): the bytes checked are the ones that arrived. A mismatch fails the
    // transfer; the chunk is still placed, keeping the sink and the stream in step.
    const std::optional<uint32_t> got = t->sink->checksum(start, length);
    if (got && *got != crc && t->corrupt_at == UINT64_MAX) {
      static constexpr const char* kWhat[] = {"a message (receive id {})", "a put (the peer's op id {})",
                                              "a get (op id {})"};
      t->corrupt_at = start;
      if (t->failure.is_ok()) {
        t->failure = checksum_mismatch(fmt::format(fmt::runtime(kWhat[static_cast<uint8_t>(t->kind)]), t->id), start,
                                       length, crc, *got, peer_);
      }
    }
  }
  const Status s = t->sink->chunk_arrived(start, length);
  if (s.code() == StatusCode::kInProgress) return;  // the sink calls chunk_placed later
  chunk_placed(t, length, s);
}

void ChunkScheduler::chunk_placed(RxTransfer* t, uint64_t length, const Status& status) {
  if (!status.is_ok() && t->failure.is_ok()) t->failure = status;
  t->placed += length;
  if (t->complete()) owner_.received(*t);
}

void ChunkScheduler::redirect(const std::function<bool(const RxTransfer&)>& drop, RxTransfer* drain) {
  bool stalled = false;
  std::vector<Stream*> all;
  for (Stream& s : streams_) all.push_back(&s);
  all.push_back(&pulls_in_);
  for (Stream* each : all) {
    Stream& s = *each;
    if (s.rx_job && !s.rxq.empty() && drop(*s.rxq.front().t)) {
      // A worker writes into the memory of an operation that is gone: take the chunk
      // back (what it read counts); the drain reads the rest.
      settle_rx_job(s, /*count=*/true);
      s.rx_resume = true;
      stalled = true;
    }
    for (RxChunk& c : s.rxq) {
      if (drop(*c.t)) c.t = drain;
    }
    if (s.rx_stalled && !s.rxq.empty() && s.rxq.front().t == drain) {
      // Its sink had no room and is gone now; the drain has room.
      s.rx_stalled = false;
      s.rx_resume = true;
      stalled = true;
    }
  }
  for (RxChunk& c : owed_) {
    if (drop(*c.t)) c.t = drain;
  }
  if (stalled) owner_.resume_later();
}

void ChunkScheduler::unstall() {
  const uint64_t epoch = epoch_;
  for (uint16_t i = 0; i < streams_.size() && epoch == epoch_; ++i) {
    if (std::exchange(streams_[i].rx_stalled, false)) read(i);
  }
  if (epoch == epoch_ && std::exchange(pulls_in_.rx_stalled, false)) read_pulls();
}

void ChunkScheduler::resume() {
  const uint64_t epoch = epoch_;
  for (uint16_t i = 0; i < streams_.size() && epoch == epoch_; ++i) {
    if (std::exchange(streams_[i].rx_resume, false)) read(i);
  }
  if (epoch == epoch_ && std::exchange(pulls_in_.rx_resume, false)) read_pulls();
}

}  // namespace remora::detail

namespace remora::detail {

// --- failover ----------------------------------------------------------------------

uint32_t ChunkScheduler::live_streams() const noexcept {
  return static_cast<uint32_t>(
      std::count_if(streams_.begin(), streams_.end(), [](const Stream& s) { return !s.retired; }));
}

void ChunkScheduler::enqueue(uint16_t index, const TxChunk& c) {
  Stream& s = streams_[index];
  if (failover_ && settled(s)) s.progress_at = std::chrono::steady_clock::now();
  s.txq.push_back(c);
  s.queued += c.remaining;
}

std::vector<uint16_t> ChunkScheduler::stalled(std::chrono::steady_clock::time_point now,
                                              std::chrono::steady_clock::duration timeout) const {
  std::vector<uint16_t> out;
  if (!failover_) return out;
  auto path = [&](uint16_t i) { return i < paths_.size() ? paths_[i] : uint16_t{0}; };
  std::vector<uint16_t> stalled, working_paths;
  for (uint16_t i = 0; i < streams_.size(); ++i) {
    const Stream& s = streams_[i];
    if (s.retired) continue;
    if (settled(s) || now - s.progress_at < timeout) {
      working_paths.push_back(path(i));
    } else {
      stalled.push_back(i);
    }
  }
  for (uint16_t i : stalled) {
    const bool other_path_works =
        std::any_of(working_paths.begin(), working_paths.end(), [&](uint16_t p) { return p != path(i); });
    if (other_path_works) out.push_back(i);
  }
  return out;
}

void ChunkScheduler::restart_progress_clocks() {
  const auto now = std::chrono::steady_clock::now();
  for (Stream& s : streams_) {
    if (!s.retired) s.progress_at = now;
  }
}

bool ChunkScheduler::confirm_oldest(Stream& s, uint64_t n) {
  const uint64_t epoch = epoch_;
  if (n > 0) s.progress_at = std::chrono::steady_clock::now();
  for (; n > 0; --n) {
    const Unconfirmed u = s.unconfirmed.front();
    s.unconfirmed.pop_front();
    ++s.chunks_confirmed;
    if (u.t == nullptr) continue;
    u.t->confirmed += u.length;
    if (u.t->done()) {
      owner_.sent(*u.t);
      if (epoch != epoch_) return false;
    }
  }
  return true;
}

std::string ChunkScheduler::confirmed(uint16_t index, uint64_t chunks) {
  if (!failover_) return "RECEIVED on an endpoint without failover";
  if (index >= streams_.size()) {
    return fmt::format("RECEIVED names data stream {} of {}", index, streams_.size());
  }
  Stream& s = streams_[index];
  if (s.peer_retired) return fmt::format("RECEIVED for data stream {} after its RETIRE", index);
  // A send worker may have written chunks the peer read before its report came here:
  // take its job back now, so that what it wrote is counted before the count is checked.
  if (chunks >= s.chunks_confirmed && chunks - s.chunks_confirmed > s.unconfirmed.size() &&
      (!settle_tx_job(s, TxSettle::kReport) || !take_sealed_sent(s, TxSettle::kReport))) {
    return {};
  }
  if (chunks < s.chunks_confirmed || chunks - s.chunks_confirmed > s.unconfirmed.size()) {
    return fmt::format("RECEIVED {} chunks of data stream {}, where {} were confirmed and {} more written whole",
                       chunks, index, s.chunks_confirmed, s.unconfirmed.size());
  }
  confirm_oldest(s, chunks - s.chunks_confirmed);
  return {};
}

Result<uint64_t> ChunkScheduler::retire(uint16_t index) {
  Stream& s = streams_[index];
  if (s.retired) return s.chunks_read;
  settle_rx_job(s, /*count=*/true);
  settle_tx_job(s, TxSettle::kCount);
  (void)take_sealed_sent(s, TxSettle::kCount);  // while the socket is there to ask
  for (const RxChunk& c : s.rxq) {
    if (!c.t->sink->can_reread()) {
      return Status(StatusCode::kPeerFailed,
                    fmt::format("data stream {} from {} broke with a chunk of device memory expected on it, which "
                                "cannot be received again",
                                index, peer_));
    }
  }
  for (RxChunk& c : s.rxq) {
    // What was read of it is read again from its start, at the same offsets.
    c.t->received -= c.done;
    s.read_total -= c.done;
    c.done = 0;
    c.begun = false;
    owed_.push_back(c);
  }
  s.rxq.clear();
  s.rx_resume = false;
  s.rx_stalled = false;
  s.retired = true;
  s.tx_blocked = true;
  // The stream decides when its socket closes (a devmem one once its tokens went back).
  if (s.in) s.in->retire(std::move(s.fd));
  s.in.reset();
  s.fd.reset();
  ++streams_retired_;
  return s.chunks_read;
}

Status ChunkScheduler::reinstate(uint16_t index, net::Fd fd, bool tx) {
  if (index >= streams_.size() || !rejoinable(index)) {
    return Status(StatusCode::kInvalidArgument, fmt::format("data stream {} is not retired on both sides", index));
  }
  Stream& s = streams_[index];
  s.chunks_read_before += s.chunks_read;
  s.chunks_read = 0;
  s.chunks_confirmed = 0;
  s.retired = false;
  s.peer_retired = false;
  s.tx_blocked = false;
  s.eof = false;
  s.tx_ok = tx;
  s.acked_at_sample = s.written_total;
  s.sampled_at = {};
  s.busy_at = {};
  s.busy_at_sample = false;
  s.outq = 0;
  s.rate = 0;
  s.progress_at = std::chrono::steady_clock::now();
  REMORA_RETURN_IF_ERROR(attach(index, std::move(fd)));
  ++streams_rejoined_;
  return Status::ok();
}

bool ChunkScheduler::enable_tx(uint16_t index) {
  if (index >= streams_.size() || streams_[index].retired || streams_[index].tx_ok) return false;
  streams_[index].tx_ok = true;
  return true;
}

std::string ChunkScheduler::peer_retired(uint16_t index, uint64_t chunks) {
  if (!failover_) return "RETIRE on an endpoint without failover";
  if (index >= streams_.size()) return fmt::format("RETIRE names data stream {} of {}", index, streams_.size());
  Stream& s = streams_[index];
  if (s.peer_retired) return fmt::format("RETIRE of data stream {} twice", index);
  settle_tx_job(s, TxSettle::kCount);  // none: this side retired it first (retire)
  (void)take_sealed_sent(s, TxSettle::kCount);
  if (chunks < s.chunks_confirmed || chunks - s.chunks_confirmed > s.unconfirmed.size()) {
    return fmt::format("RETIRE of data stream {} after {} chunks, where {} were confirmed and {} more written whole",
                       index, chunks, s.chunks_confirmed, s.unconfirmed.size());
  }
  s.peer_retired = true;
  if (!confirm_oldest(s, chunks - s.chunks_confirmed)) return {};
  // Everything else this side put on the stream goes again, oldest first: chunks
  // written whole but not read whole, then those written in part or not at all.
  std::deque<Unconfirmed> again;
  for (const Unconfirmed& u : s.unconfirmed) {
    if (u.t != nullptr) u.t->written -= u.length;
    again.push_back(u);
  }
  s.unconfirmed.clear();
  for (const TxChunk& c : s.txq) {
    c.t->written -= c.offset - c.start;
    again.push_back(Unconfirmed{c.t->confirm ? c.t : nullptr, c.start, c.offset - c.start + c.remaining});
  }
  s.txq.clear();
  s.queued = 0;
  for (const Unconfirmed& u : again) {
    if (u.t == nullptr) {
      owner_.resend_failed(Status(StatusCode::kPeerFailed,
                                  fmt::format("data stream {} to {} broke with a chunk of device memory on it that "
                                              "cannot be sent again",
                                              index, peer_)));
      return {};
    }
    resend_.push_back(u);
  }
  return {};
}

bool ChunkScheduler::schedule_resends(bool* scheduled) {
  while (!resend_.empty()) {
    const uint16_t best = choose_stream();
    Stream& s = streams_[best];
    if (s.retired || !s.tx_ok) return true;  // none usable yet: they wait for a rejoin
    if (s.queued >= chunk_bytes_) {
      if (waits_for_choice()) waiting_for_ = best;
      return true;
    }
    const Unconfirmed u = resend_.front();
    // Device memory may have to be copied out of the device again first.
    if (const Status p = u.t->source->prepare_again(u.start, u.length); !p.is_ok()) {
      if (p.code() == StatusCode::kInProgress) return true;  // the copy's end schedules again
      owner_.resend_failed(Status(p.code(), fmt::format("a chunk to {} could not be sent again after its data "
                                                        "stream broke: {}",
                                                        peer_, p.message())));
      return false;
    }
    next_turn_ = best + 1u;
    resend_.pop_front();
    std::optional<uint32_t> crc;
    if (checksum_) {
      crc = u.t->source->checksum(u.start, u.length);
      if (!crc) {
        owner_.resend_failed(Status(StatusCode::kUnsupported,
                                    "REMORA_CHECKSUM=crc32c: a chunk sent again could not "
                                    "be checksummed"));
        return false;
      }
    }
    owner_.announce(wire::ChunkFrame{.recv_id = u.t->chunk_id,
                                     .offset = u.start,
                                     .length = static_cast<uint32_t>(u.length),
                                     .stream = best,
                                     .kind = u.t->kind,
                                     .has_crc = crc.has_value(),
                                     .crc = crc.value_or(0),
                                     .resend = true});
    enqueue(best, TxChunk{u.t, u.start, u.start, u.length, /*resend=*/true});
    ++chunks_per_stream_[best];
    ++chunks_resent_;
    *scheduled = true;
  }
  return true;
}

std::string ChunkScheduler::expect_resend(wire::ChunkKind kind, uint64_t id, uint16_t stream, uint64_t offset,
                                          uint64_t length, std::optional<uint32_t> crc) {
  if (!failover_) return "CHUNK with RESEND on an endpoint without failover";
  if (crc.has_value() != checksum_) {
    return checksum_ ? "CHUNK without the CRC-32C this endpoint negotiated (REMORA_CHECKSUM=crc32c)"
                     : "CHUNK with a CRC on an endpoint without checksums";
  }
  if (stream >= streams_.size()) {
    return "CHUNK names data stream " + std::to_string(stream) + " of " + std::to_string(streams_.size());
  }
  // Exactly a chunk this side is owed: nothing it has whole is written twice.
  const auto it = std::find_if(owed_.begin(), owed_.end(), [&](const RxChunk& c) {
    return c.kind == kind && c.recv_id == id && c.start == offset && c.length == length;
  });
  if (it == owed_.end()) {
    return fmt::format("CHUNK sent again [{}, +{}) of id {} (kind {}) is not a chunk this side lacks", offset, length,
                       id, static_cast<int>(kind));
  }
  RxChunk c = *it;
  owed_.erase(it);
  c.has_crc = crc.has_value();
  c.crc = crc.value_or(0);
  if (streams_[stream].retired) {
    owed_.push_back(c);
  } else {
    streams_[stream].rxq.push_back(c);
  }
  return {};
}

}  // namespace remora::detail
