// coll/algo_data.cc — the movement collectives: barrier, broadcast, gather(v),
// scatter(v), allgather(v), alltoall(v). Type-agnostic: only the element size matters.
//
// Algorithms and when they are chosen (CollConfig overrides where there is a choice;
// the choice itself is made in algo_select.cc):
// - barrier: dissemination, ceil(log2 n) rounds of zero-byte messages.
// - broadcast: binomial tree, or a pipelined chain (pieces of pipeline_bytes, each
//   rank forwards a piece as soon as it has it). Auto picks the chain when the
//   message is at least 4 pieces and there are more than 2 ranks: below that the
//   pipeline cannot fill, and with 2 ranks the tree is one direct message anyway.
// - gather(v)/scatter(v): linear at the root, every receive/send posted at once, so
//   data lands in (or leaves from) the caller's buffer at its displacement directly.
// - allgather: for small results (up to 64 KiB, algo_select.cc) log2(n) rounds: recursive
//   doubling when n is a power of two, Bruck otherwise (REMORA_ALLGATHER_ALGO=rd means
//   this pair); else a ring, which receives straight into place. allgatherv: always
//   the ring (its blocks need not be contiguous or equal, which both log-round
//   algorithms rely on).
// - alltoall(v): pairwise exchange, at most kPairwiseWindow steps in flight.
//
// Every rank sends its messages even for zero counts (a zero-byte message still
// matches), so ranks that disagree on counts get kProtocol/kTruncated from the size
// check instead of one side moving on while the other waits.
#include <algorithm>
#include <cstring>
#include <deque>
#include <vector>

#include <fmt/format.h>

#include "coll/algorithms.h"

namespace remora::coll {
namespace {

/// Pieces of a broadcast chain in flight per rank (posted receives ahead, and
/// unfinished forwards): enough to keep both links of a rank busy.
constexpr size_t kChainWindow = 4;
/// Steps of a pairwise exchange in flight: bounds the posted operations per rank
/// while still overlapping several peers.
constexpr size_t kPairwiseWindow = 8;

/// Requests of one algorithm in posting order, each with the size its receive must
/// have. The destructor waits for whatever is left, so no return path can leave a
/// request posted into caller memory.
class Inflight {
 public:
  explicit Inflight(Op& op) : op_(op) {}
  ~Inflight() { (void)finish(); }
  Inflight(const Inflight&) = delete;
  Inflight& operator=(const Inflight&) = delete;

  void recv(int peer, void* data, size_t bytes, uint32_t step = 0) {
    pending_.push_back({op_.recv(peer, data, bytes, step), bytes});
  }
  void send(int peer, const void* data, size_t bytes, uint32_t step = 0) {
    pending_.push_back({op_.send(peer, data, bytes, step), SIZE_MAX});
  }
  size_t size() const noexcept { return pending_.size(); }

  /// Waits for the oldest request. On the first failure the world is failed (its
  /// endpoints close, so every other request ends at once) and that failure is
  /// returned from now on.
  Status wait_oldest() {
    Entry e = std::move(pending_.front());
    pending_.pop_front();
    Status s = op_.wait(e.request, e.expected);
    if (!s.is_ok() && first_.is_ok()) {
      first_ = s;
      op_.comm().world().fail(s);
      // A request that timed out is still posted: closing the endpoints ended it, but
      // make sure before the caller's buffer is given back.
      if (!e.request.done()) (void)e.request.wait(std::chrono::seconds(10));
    }
    return first_;
  }
  /// Waits for everything; the first failure (earlier ones included).
  Status finish() {
    while (!pending_.empty()) (void)wait_oldest();
    return first_;
  }

 private:
  struct Entry {
    Request request;
    size_t expected;
  };
  Op& op_;
  std::deque<Entry> pending_;
  Status first_;
};

std::byte* at(void* base, size_t offset) { return static_cast<std::byte*>(base) + offset; }
const std::byte* at(const void* base, size_t offset) { return static_cast<const std::byte*>(base) + offset; }

/// Where one rank's block lies in a buffer, in bytes.
struct Span {
  size_t offset;
  size_t bytes;
};

/// The caller's own block: copied unless it is already there (in-place, or the same
/// address passed twice).
void copy_block(void* dst, const void* src, size_t bytes) {
  if (bytes != 0 && dst != src) std::memmove(dst, src, bytes);
}

/// A rank's own contribution must fit the slot the v-form gave it; same codes as a
/// peer's message of the wrong size would get.
Status check_own(const char* what, size_t have, size_t slot) {
  if (have == slot) return Status::ok();
  return Status(have > slot ? StatusCode::kTruncated : StatusCode::kProtocol,
                fmt::format("{}: this rank's own block has {} elements where its slot has {}", what, have, slot));
}

int mod(int a, int n) { return ((a % n) + n) % n; }

// --- broadcast ---------------------------------------------------------------------

Status broadcast_tree(Op& op, void* buf, size_t bytes, int root) {
  const int n = op.size();
  const int vr = mod(op.rank() - root, n);
  Inflight io(op);
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      io.recv(mod(vr - mask + root, n), buf, bytes);
      REMORA_RETURN_IF_ERROR(io.wait_oldest());
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < n) io.send(mod(vr + mask + root, n), buf, bytes);
  }
  return io.finish();
}

Status broadcast_chain(Op& op, void* buf, size_t bytes, int root, size_t piece) {
  const int n = op.size();
  const int vr = mod(op.rank() - root, n);
  const int prev = vr == 0 ? -1 : mod(op.rank() - 1, n);
  const int next = vr == n - 1 ? -1 : mod(op.rank() + 1, n);
  // At least one piece: a zero-byte broadcast still travels (see the file comment).
  const size_t pieces = bytes == 0 ? 1 : (bytes + piece - 1) / piece;
  auto len = [&](size_t i) { return std::min(piece, bytes - std::min(bytes, i * piece)); };
  // Receives ahead of use and forwards not yet finished, kept in separate queues so
  // that "wait for piece i" never waits behind an unrelated send.
  Inflight recvs(op), sends(op);
  size_t posted = 0;
  for (size_t i = 0; i < pieces; ++i) {
    if (prev >= 0) {
      while (posted < pieces && posted < i + kChainWindow) {
        recvs.recv(prev, at(buf, posted * piece), len(posted));
        ++posted;
      }
      REMORA_RETURN_IF_ERROR(recvs.wait_oldest());
    }
    if (next >= 0) {
      sends.send(next, at(buf, i * piece), len(i));
      if (sends.size() > kChainWindow) REMORA_RETURN_IF_ERROR(sends.wait_oldest());
    }
  }
  Status s = sends.finish();
  Status r = recvs.finish();
  return s.is_ok() ? r : s;
}

// --- allgather ---------------------------------------------------------------------

/// Ring: at step s a rank forwards the block it received at step s-1 (its own at
/// s = 0) to the right and receives the next one from the left straight into place.
/// Every receive is posted up front (they match in order on one tag).
/// `block(i)` is {offset, bytes} of rank i's block in recv.
template <typename BlockOf>
Status allgather_ring(Op& op, void* recv, BlockOf block) {
  const int n = op.size();
  const int r = op.rank();
  const int left = mod(r - 1, n), right = mod(r + 1, n);
  Inflight recvs(op), sends(op);
  for (int s = 0; s < n - 1; ++s) {
    const auto b = static_cast<size_t>(mod(r - s - 1, n));
    const Span x = block(b);
    recvs.recv(left, at(recv, x.offset), x.bytes);
  }
  for (int s = 0; s < n - 1; ++s) {
    if (s > 0) REMORA_RETURN_IF_ERROR(recvs.wait_oldest());
    const auto b = static_cast<size_t>(mod(r - s, n));
    const Span x = block(b);
    sends.send(right, at(recv, x.offset), x.bytes);
  }
  Status s = recvs.finish();
  Status t = sends.finish();
  return s.is_ok() ? t : s;
}

/// Recursive doubling (n a power of two, equal contiguous blocks): at distance d the
/// rank exchanges the d blocks its group holds with the partner group's d blocks.
Status allgather_rd(Op& op, void* recv, size_t block) {
  const int n = op.size();
  const int r = op.rank();
  uint32_t round = 0;
  for (int d = 1; d < n; d <<= 1, ++round) {
    const int partner = r ^ d;
    const auto mine = static_cast<size_t>(r & ~(d - 1));
    const auto theirs = static_cast<size_t>(partner & ~(d - 1));
    const size_t len = block * static_cast<size_t>(d);
    REMORA_RETURN_IF_ERROR(op.sendrecv(partner, at(recv, mine * block), len, partner, at(recv, theirs * block), len, round));
  }
  return Status::ok();
}

/// Bruck (any n, equal blocks): at distance d a rank sends the min(d, n-d) blocks it
/// holds (its own first) to r-d and receives as many from r+d. The blocks collect in
/// rotated order in a scratch buffer, so this is for small results only.
Status allgather_bruck(Op& op, void* recv, size_t block) {
  const int n = op.size();
  const int r = op.rank();
  std::vector<std::byte> rotated(static_cast<size_t>(n) * block);
  copy_block(rotated.data(), at(recv, static_cast<size_t>(r) * block), block);
  uint32_t round = 0;
  for (int d = 1; d < n; d <<= 1, ++round) {
    const size_t len = static_cast<size_t>(std::min(d, n - d)) * block;
    REMORA_RETURN_IF_ERROR(op.sendrecv(mod(r - d, n), rotated.data(), len, mod(r + d, n),
                                       at(rotated.data(), static_cast<size_t>(d) * block), len, round));
  }
  for (int i = 1; i < n; ++i) {
    copy_block(at(recv, static_cast<size_t>(mod(r + i, n)) * block), at(rotated.data(), static_cast<size_t>(i) * block),
               block);
  }
  return Status::ok();
}

// --- alltoall ----------------------------------------------------------------------

/// Pairwise exchange: step k sends to r+k and receives from r-k, so every pair
/// meets at the same step; at most kPairwiseWindow steps are in flight.
/// `out(i)` / `in(i)` are {offset, bytes} of the blocks for / from rank i.
template <typename OutOf, typename InOf>
Status alltoall_pairwise(Op& op, const void* send, OutOf out, void* recv, InOf in) {
  const int n = op.size();
  const int r = op.rank();
  const auto me = static_cast<size_t>(r);
  copy_block(at(recv, in(me).offset), at(send, out(me).offset), out(me).bytes);
  Inflight io(op);
  for (int k = 1; k < n; ++k) {
    const auto to = static_cast<size_t>(mod(r + k, n));
    const auto from = static_cast<size_t>(mod(r - k, n));
    io.recv(static_cast<int>(from), at(recv, in(from).offset), in(from).bytes);
    io.send(static_cast<int>(to), at(send, out(to).offset), out(to).bytes);
    while (io.size() > 2 * kPairwiseWindow) REMORA_RETURN_IF_ERROR(io.wait_oldest());
  }
  return io.finish();
}

}  // namespace

Status barrier(Op& op) {
  const int n = op.size();
  const int r = op.rank();
  uint32_t round = 0;
  for (int d = 1; d < n; d <<= 1, ++round) {
    REMORA_RETURN_IF_ERROR(op.sendrecv(mod(r + d, n), nullptr, 0, mod(r - d, n), nullptr, 0, round));
  }
  return Status::ok();
}

Status broadcast(Op& op, void* buf, size_t count, DataType type, int root) {
  const int n = op.size();
  if (n == 1) return Status::ok();
  const size_t bytes = count * size_of(type);
  const size_t piece = std::max<size_t>(op.config().pipeline_bytes, 1);
  const Algo algo = select_algorithm(CollectiveKind::kBroadcast, op.config(), n, bytes);
  return algo == Algo::kChain ? broadcast_chain(op, buf, bytes, root, piece) : broadcast_tree(op, buf, bytes, root);
}

Status gather(Op& op, const void* send, void* recv, size_t count, DataType type, int root) {
  const int n = op.size();
  const size_t block = count * size_of(type);
  if (op.rank() != root) return op.sendrecv(root, send, block, -1, nullptr, 0);
  if (send != nullptr) copy_block(at(recv, static_cast<size_t>(root) * block), send, block);
  Inflight io(op);
  for (int p = 0; p < n; ++p) {
    if (p != root) io.recv(p, at(recv, static_cast<size_t>(p) * block), block);
  }
  return io.finish();
}

Status gatherv(Op& op, const void* send, size_t send_count, void* recv, std::span<const size_t> recv_counts,
               std::span<const size_t> displs, DataType type, int root) {
  const int n = op.size();
  const size_t elem = size_of(type);
  if (op.rank() != root) return op.sendrecv(root, send, send_count * elem, -1, nullptr, 0);
  const auto me = static_cast<size_t>(root);
  if (send != nullptr) {
    REMORA_RETURN_IF_ERROR(check_own("gatherv", send_count, recv_counts[me]));
    copy_block(at(recv, displs[me] * elem), send, send_count * elem);
  }
  Inflight io(op);
  for (int p = 0; p < n; ++p) {
    const auto i = static_cast<size_t>(p);
    if (p != root) io.recv(p, at(recv, displs[i] * elem), recv_counts[i] * elem);
  }
  return io.finish();
}

Status scatter(Op& op, const void* send, void* recv, size_t count, DataType type, int root) {
  const int n = op.size();
  const size_t block = count * size_of(type);
  if (op.rank() != root) return op.sendrecv(-1, nullptr, 0, root, recv, block);
  // recv == nullptr: in-place, the root's block stays in send.
  if (recv != nullptr) copy_block(recv, at(send, static_cast<size_t>(root) * block), block);
  Inflight io(op);
  for (int p = 0; p < n; ++p) {
    if (p != root) io.send(p, at(send, static_cast<size_t>(p) * block), block);
  }
  return io.finish();
}

Status scatterv(Op& op, const void* send, std::span<const size_t> send_counts, std::span<const size_t> displs,
                void* recv, size_t recv_count, DataType type, int root) {
  const int n = op.size();
  const size_t elem = size_of(type);
  if (op.rank() != root) return op.sendrecv(-1, nullptr, 0, root, recv, recv_count * elem);
  const auto me = static_cast<size_t>(root);
  if (recv != nullptr) {
    REMORA_RETURN_IF_ERROR(check_own("scatterv", send_counts[me], recv_count));
    copy_block(recv, at(send, displs[me] * elem), recv_count * elem);
  }
  Inflight io(op);
  for (int p = 0; p < n; ++p) {
    const auto i = static_cast<size_t>(p);
    if (p != root) io.send(p, at(send, displs[i] * elem), send_counts[i] * elem);
  }
  return io.finish();
}

Status allgather(Op& op, const void* send, void* recv, size_t count, DataType type) {
  const int n = op.size();
  const size_t block = count * size_of(type);
  if (send != nullptr) copy_block(at(recv, static_cast<size_t>(op.rank()) * block), send, block);
  if (n == 1) return Status::ok();
  const Algo algo = select_algorithm(CollectiveKind::kAllgather, op.config(), n, block);
  if (algo == Algo::kRecursiveDoubling) return allgather_rd(op, recv, block);
  if (algo == Algo::kBruck) return allgather_bruck(op, recv, block);
  return allgather_ring(op, recv, [block](size_t i) { return Span{i * block, block}; });
}

Status allgatherv(Op& op, const void* send, size_t send_count, void* recv, std::span<const size_t> recv_counts,
                  std::span<const size_t> displs, DataType type) {
  const size_t elem = size_of(type);
  const auto me = static_cast<size_t>(op.rank());
  if (send != nullptr) {
    REMORA_RETURN_IF_ERROR(check_own("allgatherv", send_count, recv_counts[me]));
    copy_block(at(recv, displs[me] * elem), send, send_count * elem);
  }
  if (op.size() == 1) return Status::ok();
  return allgather_ring(op, recv, [&](size_t i) { return Span{displs[i] * elem, recv_counts[i] * elem}; });
}

Status alltoall(Op& op, const void* send, void* recv, size_t count, DataType type) {
  const size_t block = count * size_of(type);
  auto same = [block](size_t i) { return Span{i * block, block}; };
  return alltoall_pairwise(op, send, same, recv, same);
}

Status alltoallv(Op& op, const void* send, std::span<const size_t> send_counts, std::span<const size_t> send_displs,
                 void* recv, std::span<const size_t> recv_counts, std::span<const size_t> recv_displs, DataType type) {
  const size_t elem = size_of(type);
  const auto me = static_cast<size_t>(op.rank());
  REMORA_RETURN_IF_ERROR(check_own("alltoallv", send_counts[me], recv_counts[me]));
  return alltoall_pairwise(
      op, send, [&](size_t i) { return Span{send_displs[i] * elem, send_counts[i] * elem}; }, recv,
      [&](size_t i) { return Span{recv_displs[i] * elem, recv_counts[i] * elem}; });
}

}  // namespace remora::coll
