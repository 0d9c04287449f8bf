// coll/algo_helpers.h — what the algorithm files share: Inflight (requests in posting
// order, none left behind), byte addressing, own-block copies and checks, the op
// steps (tags) of the reductions, per-communicator scratch, and abandon().
#pragma once

#include <array>
#include <cstddef>
#include <cstring>
#include <memory_resource>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "coll/comm_core.h"
#include "remora/request.h"
#include "remora/status.h"

namespace remora::coll {

// --- movement: barrier, broadcast, gather, scatter, allgather, alltoall ---------------

/// Requests of one algorithm in posting order, each with the size its receive must
/// have. The destructor waits for whatever is left, so no return path can leave a
/// request posted into caller memory. The queue lives in the object's own bytes up to
/// kInline requests and on the heap beyond (a std::deque allocated twice per queue:
/// four times per 4 KiB allreduce, bench/results/coll.md).
class Inflight {
 public:
  explicit Inflight(Op& op) : op_(op) { pending_.reserve(kInline); }
  ~Inflight() { (void)finish(); }
  Inflight(const Inflight&) = delete;
  Inflight& operator=(const Inflight&) = delete;

  void recv(int peer, void* data, size_t bytes, uint32_t step = 0) {
    pending_.push_back({op_.recv(peer, data, bytes, step), bytes});
  }
  void send(int peer, const void* data, size_t bytes, uint32_t step = 0) {
    pending_.push_back({op_.send(peer, data, bytes, step), SIZE_MAX});
  }
  size_t size() const noexcept { return pending_.size() - oldest_; }

  /// Waits for the oldest request. On the first failure the world is failed (its
  /// endpoints close, so every other request ends at once) and that failure is
  /// returned from now on.
  Status wait_oldest() {
    Entry e = std::move(pending_[oldest_++]);
    if (oldest_ == pending_.size()) {
      pending_.clear();
      oldest_ = 0;
    } else if (oldest_ >= 64 && 2 * oldest_ >= pending_.size()) {
      // A long pipeline that never drains: drop the waited-for front.
      pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(oldest_));
      oldest_ = 0;
    }
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
    while (size() > 0) (void)wait_oldest();
    return first_;
  }

 private:
  struct Entry {
    Request request;
    size_t expected;
  };
  static constexpr size_t kInline = 32;
  Op& op_;
  alignas(Entry) std::array<std::byte, kInline * sizeof(Entry)> inline_;  // before pending_: outlives it
  std::pmr::monotonic_buffer_resource memory_{inline_.data(), inline_.size()};
  std::pmr::vector<Entry> pending_{&memory_};  // [oldest_, size()) are still posted
  size_t oldest_ = 0;
  Status first_;
};

inline std::byte* at(void* base, size_t offset) { return static_cast<std::byte*>(base) + offset; }
inline const std::byte* at(const void* base, size_t offset) { return static_cast<const std::byte*>(base) + offset; }

/// Where one rank's block lies in a buffer, in bytes.
struct Span {
  size_t offset;
  size_t bytes;
};

/// The caller's own block: copied unless it is already there (in-place, or the same
/// address passed twice).
inline void copy_block(void* dst, const void* src, size_t bytes) {
  if (bytes != 0 && dst != src) std::memmove(dst, src, bytes);
}

/// A rank's own contribution must fit the slot the v-form gave it; same codes as a
/// peer's message of the wrong size would get.
inline Status check_own(const char* what, size_t have, size_t slot) {
  if (have == slot) return Status::ok();
  return Status(have > slot ? StatusCode::kTruncated : StatusCode::kProtocol,
                fmt::format("{}: this rank's own block has {} elements where its slot has {}", what, have, slot));
}

inline int mod(int a, int n) { return ((a % n) + n) % n; }

/// A binomial tree of `n` places rooted at place 0, seen from place `vr`: the place it
/// receives from (-1 at the root) and the places it sends to, the farthest subtree
/// first (the order broadcast_tree sends in).
struct BinomialEdges {
  int parent = -1;
  std::array<int, 32> children{};
  int count = 0;
  std::span<const int> sends() const noexcept { return std::span(children).first(static_cast<size_t>(count)); }
};
inline BinomialEdges binomial_edges(int vr, int n) {
  BinomialEdges e;
  int mask = 1;
  while (mask < n && (vr & mask) == 0) mask <<= 1;
  if (mask < n) e.parent = vr - mask;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < n) e.children[static_cast<size_t>(e.count++)] = vr + mask;
  }
  return e;
}

// --- reductions: allreduce, reduce, reduce_scatter, scan --------------------------------

// Op steps (tags) used below. Every algorithm of one op uses its own steps only.
constexpr uint32_t kStepKeyToRight = 1;
constexpr uint32_t kStepKeyToLeft = 2;
constexpr uint32_t kStepAllgather = 3;
constexpr uint32_t kStepData = 4;
constexpr uint32_t kStepFoldIn = 5;
constexpr uint32_t kStepFoldOut = 6;

inline Status protocol(std::string message) { return Status(StatusCode::kProtocol, std::move(message)); }

/// Byte helpers: algorithms address vectors in elements, the wire in bytes.
inline std::byte* at(void* p, size_t elems, size_t es) { return static_cast<std::byte*>(p) + elems * es; }
inline const std::byte* at(const void* p, size_t elems, size_t es) {
  return static_cast<const std::byte*>(p) + elems * es;
}

inline std::byte* grow(std::vector<std::byte>& v, size_t bytes) {
  if (v.size() < bytes) v.resize(bytes);
  return v.data();
}

/// Fails the world (so every request posted by this op completes at once), waits for
/// them, and returns `why`: no request may outlive the op into caller memory.
inline Status abandon(Op& op, std::span<const Request> reqs, Status why) {
  op.comm().world().fail(why);
  (void)op.wait_all(reqs);
  return why;
}

}  // namespace remora::coll
