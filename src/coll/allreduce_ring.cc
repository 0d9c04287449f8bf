// coll/allreduce_ring.cc — the ring family: the pipelined ring reduce-scatter by puts
// into the right neighbour's registered scratch with notifications, the ring allreduce
// (that reduce-scatter overlapped with a send/recv ring allgather), its two-level form,
// and reduce_scatter's large path, that reduce-scatter alone.
#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <functional>
#include <vector>

#include "coll/algo_helpers.h"
#include "coll/algorithms.h"
#include "coll/reduce.h"

namespace remora::coll {
namespace {

// Ring notification low bits: bit 15 says "credit" (sent back by the consumer), the
// rest is the piece index modulo 2^15 (at most kSlots are in flight, so it identifies
// the piece).
constexpr uint16_t kCreditBit = 0x8000;
constexpr uint64_t kIndexMask = 0x7FFF;
constexpr int kSlots = 4;

/// A rank's registered ring scratch and its neighbours' keys, set up on the first
/// ring operation of a communicator and kept for its lifetime (registration is
/// expensive; a communicator keeps running the same ring).
///
/// Layout: kSlots slots of slot_bytes each, then one 8-byte credit word. The left
/// neighbour puts pieces into the slots (piece k into slot k % kSlots) with a data
/// notification; the right neighbour puts into the credit word with a credit
/// notification when it has consumed a piece we put into its slots.
struct RingState {
  std::vector<std::byte> memory;
  Region region;
  RemoteKey right_key;  ///< the right neighbour's scratch (we put data there)
  RemoteKey left_key;   ///< the left neighbour's scratch (we put credits there)
  size_t slot_bytes = 0;
  bool ready = false;
  uint64_t credit_source = 0;  ///< what credit puts carry (nobody reads it)
};

/// Notifications a ring took that belong to another: to a later operation (a
/// neighbour that finished this one may already be putting the next one's pieces, its
/// credits proving the slots are free, while we still wait for our last credits), or to
/// another ring of this one (a two-level allreduce runs rings over parts of the
/// communicator, and a neighbour in one may already be at work in the other). One per
/// communicator, shared by its rings.
struct RingMail {
  std::deque<World::Incoming> early;
};

Status ring_setup(Op& op, RingState& st) {
  if (st.ready) return Status::ok();
  const int n = op.size();
  const int r = op.rank();
  st.slot_bytes = op.comm().config().pipeline_bytes / 8 * 8;
  st.memory.assign(kSlots * st.slot_bytes + sizeof(uint64_t), std::byte{0});
  auto region = op.comm().world().context().register_memory(st.memory.data(), st.memory.size(),
                                                           Access::kLocalWrite | Access::kRemoteWrite);
  if (!region) return region.status().with_context("ring scratch registration");
  auto key = region->remote_key(0, st.memory.size(), Access::kRemoteWrite);
  if (!key) return key.status().with_context("ring scratch key");
  const auto mine = key->serialize();
  std::array<std::byte, RemoteKey::kSerializedSize> from_left{}, from_right{};
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  Request reqs[4] = {op.recv(left, from_left.data(), from_left.size(), kStepKeyToRight),
                     op.recv(right, from_right.data(), from_right.size(), kStepKeyToLeft),
                     op.send(right, mine.data(), mine.size(), kStepKeyToRight),
                     op.send(left, mine.data(), mine.size(), kStepKeyToLeft)};
  REMORA_RETURN_IF_ERROR(op.wait_all(reqs));
  if (reqs[0].bytes() != mine.size() || reqs[1].bytes() != mine.size()) {
    return protocol("ring scratch key of the wrong size");
  }
  auto lk = RemoteKey::deserialize(from_left);
  auto rk = RemoteKey::deserialize(from_right);
  if (!lk || !rk) return protocol("malformed ring scratch key from a neighbour");
  st.left_key = *lk;
  st.right_key = *rk;
  st.region = std::move(*region);
  st.ready = true;
  return Status::ok();
}

/// Next notification of this op from the ring's neighbours (world ranks): from the
/// stash first, stashing any other.
Status next_notification(Op& op, std::deque<World::Incoming>& early, int left_world, int right_world,
                         World::Incoming* out) {
  const uint64_t mine = op.notify_value(0) >> 16;
  auto ours = [&](const World::Incoming& in) {
    return (in.note.value >> 16) == mine && (in.from == left_world || in.from == right_world);
  };
  for (auto it = early.begin(); it != early.end(); ++it) {
    if (ours(*it)) {
      *out = *it;
      early.erase(it);
      return Status::ok();
    }
  }
  while (true) {
    REMORA_RETURN_IF_ERROR(op.wait_notification(out, {(op.rank() + op.size() - 1) % op.size(), (op.rank() + 1) % op.size()}));
    if (ours(*out)) return Status::ok();
    if (early.size() >= 8 * kSlots) return protocol("ring: notifications of another operation pile up");
    early.push_back(*out);
  }
}

/// One piece of the ring sequence: `len` elements at element offset `off` of block `block`.
struct Piece {
  int block;
  size_t off;  ///< from the block's start
  size_t len;
};

/// How the ring reduce-scatter reads and writes the caller's vectors.
struct RingBlocks {
  std::span<const size_t> counts;  ///< elements of each block
  /// Where element `off` of block b of this rank's contribution is, and where the
  /// partial/final sum of that element goes. Pieces never cross a multiple of `part`
  /// elements of a block (0: one part), so a block may lie in parts apart.
  std::function<const std::byte*(int b, size_t off)> src;
  std::function<std::byte*(int b, size_t off)> acc;
  size_t part = 0;
};

/// Pipelined ring reduce-scatter: after it, this rank's acc(owned) holds the full
/// reduction of block `owned` = (rank + 1 + shift) mod n; other blocks of acc hold
/// partial sums. At step s a rank puts block (rank - s + shift) to its right
/// neighbour and receives block (rank - s - 1 + shift) from the left, piece by piece:
/// a piece goes into the receiver's slot k % kSlots with a notification; the receiver
/// reduces it into acc (op(own, incoming): a fixed order) and puts a credit back; a
/// sender never has more than kSlots pieces unconsumed at its right neighbour. The
/// loop is driven only by notifications (data from the left, credits from the right),
/// so it cannot deadlock waiting for one kind while the other is due.
///
/// `on_final`, when set, is called with each piece of the owned block as soon as it
/// holds the full reduction (before the remaining credits come in), so the allgather
/// can start forwarding it while the reduce-scatter drains.
Status ring_reduce_scatter(Op& op, RingState& st, DataType type, ReduceOp rop, const RingBlocks& blk, int shift,
                           const std::function<void(const Piece&)>& on_final = {}) {
  const int n = op.size();
  const int r = op.rank();
  const size_t es = size_of(type);
  std::deque<World::Incoming>& early = op.comm().state<RingMail>("ring_mail").early;
  const size_t piece_elems = st.slot_bytes / es;
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const int left_world = op.world_rank(left), right_world = op.world_rank(right);
  const auto mod = [n](int x) { return ((x % n) + n) % n; };
  REMORA_ASSIGN_OR_RETURN(Endpoint* const to_right, op.endpoint(right));
  REMORA_ASSIGN_OR_RETURN(Endpoint* const to_left, op.endpoint(left));

  // E: the blocks of steps 0..n-1, cut into pieces. We send E[0, sends); we receive
  // E[first_recv, end) (the left neighbour's sequence is ours shifted by one step).
  std::vector<Piece> seq;
  size_t first_recv = 0, sends = 0;
  for (int s = 0; s < n; ++s) {
    if (s == 1) first_recv = seq.size();
    if (s == n - 1) sends = seq.size();
    const int b = mod(r - s + shift);
    const size_t count = blk.counts[static_cast<size_t>(b)];
    for (size_t off = 0, len = 0; off < count; off += len) {
      len = std::min(piece_elems, count - off);
      if (blk.part != 0) len = std::min(len, blk.part - off % blk.part);
      seq.push_back({b, off, len});
    }
  }
  const size_t recvs = seq.size() - first_recv;

  std::vector<Request> reqs;
  reqs.reserve(sends + recvs);
  // acked: our right neighbour consumed every piece below it (it consumes in order);
  // credits: how many credits came (the loop ends when all did, so none is left over
  // to confuse the next operation).
  size_t sent = 0, acked = 0, credits = 0, done = 0;
  bool arrived[kSlots] = {};
  while (done < recvs || credits < sends) {
    // Put every piece that is ready (data reduced here already) and has a free slot.
    while (sent < sends && sent < acked + kSlots && (sent < first_recv || sent - first_recv < done)) {
      const Piece& p = seq[sent];
      const std::byte* from = sent < first_recv ? blk.src(p.block, p.off) : blk.acc(p.block, p.off);
      reqs.push_back(to_right->put(std::span(from, p.len * es), st.right_key,
                                   (sent % kSlots) * st.slot_bytes,
                                   {.notify = op.notify_value(static_cast<uint16_t>(sent & kIndexMask))}));
      ++sent;
    }
    // Consume the next piece if it is here.
    if (done < recvs && arrived[done % kSlots]) {
      arrived[done % kSlots] = false;
      const Piece& p = seq[first_recv + done];
      const std::byte* slot = st.memory.data() + (done % kSlots) * st.slot_bytes;
      reduce_to(type, rop, blk.acc(p.block, p.off), blk.src(p.block, p.off), slot, p.len);
      reqs.push_back(
          to_left->put(std::as_bytes(std::span(&st.credit_source, 1)), st.left_key, kSlots * st.slot_bytes,
                       {.notify = op.notify_value(static_cast<uint16_t>(kCreditBit | (done & kIndexMask)))}));
      if (on_final && first_recv + done >= sends) on_final(p);
      ++done;
      continue;
    }
    World::Incoming in;
    Status s = next_notification(op, early, left_world, right_world, &in);
    if (!s.is_ok()) return abandon(op, reqs, s);
    const uint64_t low = in.note.value & 0xFFFF;
    if (low & kCreditBit) {
      const size_t ahead = (low - acked) & kIndexMask;
      const size_t behind = (acked - low) & kIndexMask;  // a credit overtaken by a later one
      if (in.from != right_world || (acked + ahead >= sent && behind > kSlots) || credits >= sends) {
        return abandon(op, reqs, protocol("ring: unexpected credit"));
      }
      if (acked + ahead < sent) acked = acked + ahead + 1;
      ++credits;
    } else {
      const size_t idx = done + ((low - done) & kIndexMask);
      if (in.from != left_world || idx >= recvs || idx >= done + kSlots || arrived[idx % kSlots] ||
          in.note.offset != (idx % kSlots) * st.slot_bytes || in.note.length != seq[first_recv + idx].len * es) {
        return abandon(op, reqs, protocol("ring: unexpected piece"));
      }
      arrived[idx % kSlots] = true;
    }
  }
  return op.wait_all(reqs);
}

/// Near-equal blocks: the first count % n blocks get one element more.
void split_blocks(size_t count, int n, std::vector<size_t>& offsets, std::vector<size_t>& counts) {
  offsets.resize(static_cast<size_t>(n));
  counts.resize(static_cast<size_t>(n));
  size_t off = 0;
  for (size_t b = 0; b < static_cast<size_t>(n); ++b) {
    counts[b] = count / static_cast<size_t>(n) + (b < count % static_cast<size_t>(n) ? 1 : 0);
    offsets[b] = off;
    off += counts[b];
  }
}

/// Ring allgather of the blocks of a ring allreduce: this rank owns block `owned`;
/// at step s it sends block (owned - s) to the right and receives block
/// (owned - s - 1) from the left, piece by piece (so a piece is forwarded as soon as
/// it lands), straight into `buf` (the receives are posted up front, so rendezvous
/// data lands zero-copy). Step 0's pieces are the owned block's, handed over by the
/// reduce-scatter one by one as they are final (send_owned); finish() runs the rest.
/// Both neighbours cut blocks into pieces of the same `piece_elems`, so a receive
/// always matches one send.
class RingAllgather {
 public:
  RingAllgather(Op& op, std::byte* buf, size_t es, std::span<const size_t> offsets, std::span<const size_t> counts,
                int owned, size_t piece_elems)
      : op_(op), buf_(buf), es_(es), offsets_(offsets), counts_(counts), owned_(owned), piece_(piece_elems) {
    const int n = op.size();
    left_ = (op.rank() + n - 1) % n;
    right_ = (op.rank() + 1) % n;
    for (int s = 0; s < n - 1; ++s) {
      const size_t b = block(owned_ - s - 1);
      for (size_t off = 0; off < counts_[b]; off += piece_) {
        const size_t len = std::min(piece_, counts_[b] - off) * es_;
        recvs_.push_back(op.recv(left_, buf_ + (offsets_[b] + off) * es_, len, kStepAllgather));
        recv_bytes_.push_back(len);
      }
    }
  }

  /// Sends `len` elements at `off` of the owned block (step 0, in order).
  void send_owned(size_t off, size_t len) {
    const size_t b = block(owned_);
    sends_.push_back(op_.send(right_, buf_ + (offsets_[b] + off) * es_, len * es_, kStepAllgather));
  }

  /// Forwards steps 1..n-2 as their pieces land and waits for everything.
  Status finish() {
    size_t k = 0;  // next receive to forward
    for (int s = 1; s < op_.size() - 1; ++s) {
      const size_t b = block(owned_ - s);
      for (size_t off = 0; off < counts_[b]; off += piece_) {
        Status w = op_.wait(recvs_[k], recv_bytes_[k]);
        if (!w.is_ok()) return fail(w);
        sends_.push_back(op_.send(right_, buf_ + (offsets_[b] + off) * es_, recv_bytes_[k], kStepAllgather));
        ++k;
      }
    }
    for (; k < recvs_.size(); ++k) {
      Status w = op_.wait(recvs_[k], recv_bytes_[k]);
      if (!w.is_ok()) return fail(w);
    }
    return op_.wait_all(sends_);
  }

  /// Abandons every request (the op failed with `why`) and returns `why`.
  Status fail(Status why) {
    recvs_.insert(recvs_.end(), sends_.begin(), sends_.end());
    return abandon(op_, recvs_, std::move(why));
  }

 private:
  size_t block(int x) const {
    const int n = op_.size();
    return static_cast<size_t>(((x % n) + n) % n);
  }

  Op& op_;
  std::byte* buf_;
  size_t es_;
  std::span<const size_t> offsets_, counts_;
  int owned_;
  size_t piece_;
  int left_ = 0, right_ = 0;
  std::vector<Request> recvs_, sends_;
  std::vector<size_t> recv_bytes_;  ///< what each receive must bring
};

}  // namespace

/// The ring allreduce over `op`, its ring state named `ring` (one per set of ranks
/// that runs rings: the communicator, or a two-level allreduce's parts of it).
Status allreduce_ring(Op& op, const char* ring, const void* send, void* recv, size_t count, DataType type,
                      ReduceOp rop) {
  const int n = op.size();
  const size_t es = size_of(type);
  std::vector<size_t> offsets, counts;
  split_blocks(count, n, offsets, counts);
  RingState& st = op.comm().state<RingState>(ring);
  REMORA_RETURN_IF_ERROR(ring_setup(op, st));
  RingBlocks blk{counts,
                 [&](int b, size_t off) { return at(send, offsets[static_cast<size_t>(b)] + off, es); },
                 [&](int b, size_t off) { return at(recv, offsets[static_cast<size_t>(b)] + off, es); }};
  const int owned = (op.rank() + 1) % n;
  std::byte* const owned_at = at(recv, offsets[static_cast<size_t>(owned)], es);
  RingAllgather ag(op, static_cast<std::byte*>(recv), es, offsets, counts, owned, st.slot_bytes / es);
  Status rs = ring_reduce_scatter(op, st, type, rop, blk, 0, [&](const Piece& p) {
    if (rop == ReduceOp::kAvg) finish_avg(type, at(owned_at, p.off, es), p.len, n);
    ag.send_owned(p.off, p.len);
  });
  if (!rs.is_ok()) return ag.fail(rs);
  return ag.finish();
}

namespace {

/// The messages a rank past the lanes and its lane cut a block of `elems` elements
/// into, so that the lane reduces one while the next travels: pieces of kFoldPiece
/// bytes (whole elements), the last one shorter. The lane takes at most kFoldWindow
/// pieces from each such rank at a time, so its scratch stays a few MiB a rank
/// whatever the vector's size.
constexpr size_t kFoldPiece = size_t{1} << 20;
constexpr size_t kFoldWindow = 4;
size_t fold_piece_elems(size_t es) { return std::max<size_t>(kFoldPiece / es, 1); }
template <typename Each>
void fold_pieces(size_t elems, size_t es, Each each) {
  const size_t piece = fold_piece_elems(es);
  for (size_t off = 0; off < elems; off += piece) each(off, std::min(piece, elems - off));
}

}  // namespace

Status allreduce_two_level(Op& local, Op& across, Op* group, const void* send, void* recv, size_t count, DataType type,
                           ReduceOp rop, int ranks) {
  const int n = local.size();
  const size_t es = size_of(type);
  const ReduceOp partial = rop == ReduceOp::kAvg ? ReduceOp::kSum : rop;
  std::vector<size_t> offsets, counts;
  split_blocks(count, n, offsets, counts);
  const auto owned = static_cast<size_t>((local.rank() + 1) % n);
  const size_t mine = counts[owned];
  std::byte* const owned_at = at(recv, offsets[owned], es);
  // The ranks of the group past its lanes each send this rank their part of the block
  // it ends the reduce-scatter with, in pieces, which join that block before the step
  // across, and get the block back once final. Their first pieces travel while the
  // ring runs, into a window of kFoldWindow slots for each; a slot takes the next piece
  // once its own joined the block.
  const auto past = static_cast<size_t>(group != nullptr ? group->size() - n : 0);
  const size_t piece_in = fold_piece_elems(es);
  const size_t pieces_in = (mine + piece_in - 1) / piece_in;
  const size_t window = std::min(pieces_in, kFoldWindow);
  std::byte* const in = past > 0 ? grow(local.comm().scratch().b, past * window * piece_in * es) : nullptr;
  auto slot = [&](size_t x, size_t p) { return in + (x * window + p % window) * piece_in * es; };
  std::vector<Request> ins;  // piece p of rank x past the lanes at p * past + x, in order
  auto take = [&](size_t p) {
    for (size_t x = 0; x < past; ++x) {
      const size_t len = std::min(piece_in, mine - p * piece_in);
      ins.push_back(group->recv(n + static_cast<int>(x), slot(x, p), len * es, kStepData));
    }
  };
  for (size_t p = 0; p < window && past > 0; ++p) take(p);
  // A group of one lane (the narrowest group has one rank) has no ring within: its lane
  // reduces the whole vector, read where it lies.
  const std::byte* held = owned_at;
  RingState& st = local.comm().state<RingState>("reduce_ring.local");
  if (n > 1) {
    if (Status setup = ring_setup(local, st); !setup.is_ok()) return past > 0 ? abandon(*group, ins, setup) : setup;
  } else {
    held = static_cast<const std::byte*>(send);
  }
  RingBlocks blk{counts, [&](int b, size_t off) { return at(send, offsets[static_cast<size_t>(b)] + off, es); },
                 [&](int b, size_t off) { return at(recv, offsets[static_cast<size_t>(b)] + off, es); }};
  const size_t piece = n > 1 ? st.slot_bytes / es : mine;
  RingAllgather ag(local, static_cast<std::byte*>(recv), es, offsets, counts, static_cast<int>(owned), piece);
  Status s = n > 1 ? ring_reduce_scatter(local, st, type, partial, blk, 0) : Status::ok();
  for (size_t p = 0; s.is_ok() && past > 0 && p < pieces_in; ++p) {
    const size_t off = p * piece_in, len = std::min(piece_in, mine - off);
    for (size_t x = 0; s.is_ok() && x < past; ++x) {
      s = group->wait(ins[p * past + x], len * es);
      if (s.is_ok())
        reduce_to(type, partial, at(owned_at, off, es), at(x == 0 ? held : owned_at, off, es), slot(x, p), len);
    }
    if (s.is_ok() && p + window < pieces_in) take(p + window);
  }
  if (past > 0) held = owned_at;
  if (s.is_ok() && mine > 0) {
    // Every rank of `across` has the same index here, so the same block.
    const bool ring = select_algorithm(CollectiveKind::kAllreduce, across.config(), across.size(), mine * es) ==
                      Algo::kRing;
    s = ring ? allreduce_ring(across, "reduce_ring.across", held, owned_at, mine, type, partial)
             : allreduce_rd(across, held, owned_at, mine, type, partial);
    if (s.is_ok() && rop == ReduceOp::kAvg) finish_avg(type, owned_at, mine, ranks);
  }
  if (!s.is_ok()) return ag.fail(past > 0 ? abandon(*group, ins, s) : s);
  std::vector<Request> back;
  for (size_t x = 0; x < past; ++x)
    back.push_back(group->send(n + static_cast<int>(x), owned_at, mine * es, kStepData));
  for (size_t off = 0; n > 1 && off < mine; off += piece) ag.send_owned(off, std::min(piece, mine - off));
  s = ag.finish();
  if (past == 0) return s;
  return s.is_ok() ? group->wait_all(back) : abandon(*group, back, s);
}

Status allreduce_past_lanes(Op& group, int lanes, const void* send, void* recv, size_t count, DataType type) {
  const size_t es = size_of(type);
  std::vector<size_t> offsets, counts;
  split_blocks(count, lanes, offsets, counts);
  // Block b goes to the lane that ends the reduce-scatter with it (allreduce_two_level's
  // `owned`: lane b - 1), in pieces (fold_pieces), and comes back from it final.
  std::vector<Request> reqs;
  for (int b = 0; b < lanes; ++b) {
    const auto at_b = static_cast<size_t>(b);
    reqs.push_back(group.recv((b - 1 + lanes) % lanes, at(recv, offsets[at_b], es), counts[at_b] * es, kStepData));
  }
  for (int b = 0; b < lanes; ++b) {
    const auto at_b = static_cast<size_t>(b);
    fold_pieces(counts[at_b], es, [&](size_t off, size_t len) {
      reqs.push_back(group.send((b - 1 + lanes) % lanes, at(send, offsets[at_b] + off, es), len * es, kStepData));
    });
  }
  for (int b = 0; b < lanes; ++b) {
    const auto at_b = static_cast<size_t>(b);
    Status w = group.wait(reqs[at_b], counts[at_b] * es);
    if (!w.is_ok()) return abandon(group, reqs, w);
  }
  return group.wait_all(std::span<const Request>(reqs).subspan(static_cast<size_t>(lanes)));
}

Status reduce_scatter_ring(Op& op, const char* ring, std::span<const int> blocks, const void* send, void* recv,
                           size_t recv_count, DataType type, ReduceOp rop) {
  const int n = op.size();
  const auto me = static_cast<size_t>(op.rank());
  const size_t es = size_of(type);
  const size_t block_bytes = recv_count * es;
  const bool in_place = send == recv;
  // With shift -1 the ring leaves block i on rank i of `op`: the block of the
  // communicator's rank blocks[i]. Partial sums of the other blocks go to recv's own
  // input area when in place, else to scratch.
  std::vector<size_t> offsets(static_cast<size_t>(n)), counts(static_cast<size_t>(n), recv_count);
  for (size_t b = 0; b < offsets.size(); ++b) {
    offsets[b] = (blocks.empty() ? b : static_cast<size_t>(blocks[b])) * recv_count;
  }
  std::byte* partials = in_place ? static_cast<std::byte*>(recv) : grow(op.comm().scratch().c, block_bytes * offsets.size());
  RingBlocks blk{counts,
                 [&](int b, size_t off) { return at(send, offsets[static_cast<size_t>(b)] + off, es); },
                 [&](int b, size_t off) -> std::byte* {
                   if (!in_place && static_cast<size_t>(b) == me) return at(recv, off, es);
                   return partials + (offsets[static_cast<size_t>(b)] + off) * es;
                 }};
  RingState& st = op.comm().state<RingState>(ring);
  REMORA_RETURN_IF_ERROR(ring_setup(op, st));
  REMORA_RETURN_IF_ERROR(ring_reduce_scatter(op, st, type, rop, blk, -1));
  if (in_place && offsets[me] != 0) std::memmove(recv, at(recv, offsets[me], es), block_bytes);
  if (rop == ReduceOp::kAvg) finish_avg(type, recv, recv_count, n);
  return Status::ok();
}

namespace {

/// The runs of a reduce_scatter over `lanes` lanes of `groups` groups: run i is the
/// communicator ranks whose blocks lane i carries, group by group, in each group the
/// rank at index i and then the one at index i + lanes where there is one.
std::vector<std::vector<int>> lane_runs(std::span<const int> by_index, size_t groups, size_t lanes) {
  std::vector<std::vector<int>> runs(lanes);
  for (size_t i = 0; i < lanes; ++i) {
    for (size_t g = 0; g < groups; ++g) {
      for (size_t index = i; index * groups + g < by_index.size(); index += lanes) {
        if (by_index[index * groups + g] >= 0) runs[i].push_back(by_index[index * groups + g]);
      }
    }
  }
  return runs;
}

}  // namespace

Status reduce_scatter_two_level(Op& local, Op& across, Op* group, std::span<const int> by_index, const void* send,
                                void* recv, size_t recv_count, DataType type, ReduceOp rop) {
  const auto groups = static_cast<size_t>(across.size());
  const auto lanes = static_cast<size_t>(local.size());
  const auto me = static_cast<size_t>(local.rank());
  const size_t es = size_of(type);
  const ReduceOp partial = rop == ReduceOp::kAvg ? ReduceOp::kSum : rop;
  const int ranks =
      static_cast<int>(by_index.size() - static_cast<size_t>(std::count(by_index.begin(), by_index.end(), -1)));
  // The ring within the group's lanes over runs (lane_runs), each block read where it
  // lies in the input, one part each; the partial sums go to scratch, run by run. Lane
  // i ends with run i's sum over the lanes.
  const std::vector<std::vector<int>> run = lane_runs(by_index, groups, lanes);
  std::vector<size_t> counts(lanes), starts(lanes);
  for (size_t i = 0, at_run = 0; i < lanes; at_run += counts[i], ++i) {
    counts[i] = run[i].size() * recv_count;
    starts[i] = at_run;
  }
  std::byte* runs = grow(local.comm().scratch().a, static_cast<size_t>(ranks) * recv_count * es);
  // The ranks of the group past its lanes each send this lane their own part of its run,
  // which joins its sum over the lanes; the message travels while the ring runs.
  const int past = group != nullptr ? group->size() - static_cast<int>(lanes) : 0;
  const size_t mine = counts[me];
  std::vector<Request> ins;
  std::byte* const in = past > 0 ? grow(local.comm().scratch().b, static_cast<size_t>(past) * mine * es) : nullptr;
  for (int x = 0; x < past; ++x) {
    ins.push_back(
        group->recv(static_cast<int>(lanes) + x, in + static_cast<size_t>(x) * mine * es, mine * es, kStepData));
  }
  RingBlocks blk{counts,
                 [&](int b, size_t off) {
                   const auto rank = static_cast<size_t>(run[static_cast<size_t>(b)][off / recv_count]);
                   return at(send, rank * recv_count + off % recv_count, es);
                 },
                 [&](int b, size_t off) { return at(runs, starts[static_cast<size_t>(b)] + off, es); }, recv_count};
  RingState& st = local.comm().state<RingState>("reduce_ring.local");
  Status s = ring_setup(local, st);
  if (s.is_ok()) s = ring_reduce_scatter(local, st, type, partial, blk, -1);
  std::byte* const sum = at(runs, starts[me], es);
  for (int x = 0; s.is_ok() && x < past; ++x) {
    s = group->wait(ins[static_cast<size_t>(x)], mine * es);
    if (s.is_ok()) reduce_to(type, partial, sum, sum, in + static_cast<size_t>(x) * mine * es, mine);
  }
  if (!s.is_ok()) return past > 0 ? abandon(*group, ins, s) : s;
  if (by_index.size() == lanes * groups) {
    // Groups of one size: this rank's block of its run, from the ranks at its index.
    REMORA_RETURN_IF_ERROR(reduce_scatter_ring(across, "reduce_ring.across", {}, sum, recv, recv_count, type, partial));
    if (rop == ReduceOp::kAvg) finish_avg(type, recv, recv_count, ranks);
    return Status::ok();
  }
  // Otherwise lane i of group g ends with the blocks of the ranks at i and i + lanes of
  // g (one or two: its part of the run), in place in the run's sum.
  std::vector<size_t> part(groups, 0), part_at(groups, 0);
  for (size_t g = 0; g < groups; ++g) {
    for (size_t index = me; index * groups + g < by_index.size(); index += lanes) {
      if (by_index[index * groups + g] >= 0) part[g] += recv_count;
    }
  }
  for (size_t g = 1; g < groups; ++g) part_at[g] = part_at[g - 1] + part[g - 1];
  RingBlocks parts{part, [&](int b, size_t off) { return at(sum, part_at[static_cast<size_t>(b)] + off, es); },
                   [&](int b, size_t off) { return at(sum, part_at[static_cast<size_t>(b)] + off, es); }, recv_count};
  RingState& ast = across.comm().state<RingState>("reduce_ring.across");
  REMORA_RETURN_IF_ERROR(ring_setup(across, ast));
  REMORA_RETURN_IF_ERROR(ring_reduce_scatter(across, ast, type, partial, parts, -1));
  std::byte* const own = at(sum, part_at[static_cast<size_t>(across.rank())], es);
  const size_t held = part[static_cast<size_t>(across.rank())] / recv_count;
  if (rop == ReduceOp::kAvg) finish_avg(type, own, held * recv_count, ranks);
  std::memcpy(recv, own, recv_count * es);
  if (held < 2) return Status::ok();
  Request out = group->send(static_cast<int>(me + lanes), at(own, recv_count, es), recv_count * es, kStepData);
  return group->wait(out);
}

Status reduce_scatter_past_lanes(Op& group, int lanes, size_t groups, std::span<const int> by_index, const void* send,
                                 void* recv, size_t recv_count, DataType type) {
  const size_t es = size_of(type);
  const std::vector<std::vector<int>> run = lane_runs(by_index, groups, static_cast<size_t>(lanes));
  const size_t whole = by_index.size() * recv_count;
  std::byte* packed = grow(group.comm().scratch().c, whole * es);
  // This rank's part of each lane's run, laid out as the run is, one message per lane;
  // then its block from the lane `lanes` places before it (posted after the packing: in
  // place, recv is the input).
  std::vector<Request> reqs;
  std::byte* next = packed;
  for (int i = 0; i < lanes; ++i) {
    const std::byte* start = next;
    for (int rank : run[static_cast<size_t>(i)]) {
      std::memcpy(next, at(send, static_cast<size_t>(rank) * recv_count, es), recv_count * es);
      next += recv_count * es;
    }
    reqs.push_back(group.send(i, start, static_cast<size_t>(next - start), kStepData));
  }
  reqs.push_back(group.recv(group.rank() - lanes, recv, recv_count * es, kStepData));
  Status w = group.wait(reqs.back(), recv_count * es);
  if (!w.is_ok()) return abandon(group, reqs, w);
  return group.wait_all(std::span<const Request>(reqs).first(reqs.size() - 1));
}

}  // namespace remora::coll
