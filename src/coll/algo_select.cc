// coll/algo_select.cc — which algorithm each collective runs, by size, rank count and
// CollConfig (REMORA_*_ALGO, REMORA_RING_THRESHOLD, REMORA_COLL_PIPELINE). The one
// place that decides: the entry points (collectives.cc) dispatch on select_algorithm,
// and Communicator::algorithm reports it. Why each rule is what it is: the comment at
// the top of collectives.cc.
#include <algorithm>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "coll/algorithms.h"

namespace remora::coll {
namespace {

/// Recursive doubling (or Bruck) for allgather up to this many result bytes: log2 n
/// latency beats the ring's n-1 steps; above, the ring's neighbour-only traffic wins.
constexpr size_t kAllgatherRdMaxBytes = size_t{64} * 1024;

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

/// ceil(log2 n) for n >= 1.
int ceil_log2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

/// bytes * n without wrapping (the query takes any size; the collectives' own
/// arguments were range-checked before they get here).
size_t times(size_t bytes, int n) {
  const auto m = static_cast<size_t>(n);
  return bytes > SIZE_MAX / m ? SIZE_MAX : bytes * m;
}

Algo allreduce_family(const CollConfig& c, int n, size_t bytes) {
  if (c.allreduce != Algo::kAuto) return c.allreduce == Algo::kRing ? Algo::kRing : Algo::kRecursiveDoubling;
  return bytes >= ring_threshold_for(c, n) ? Algo::kRing : Algo::kRecursiveDoubling;
}

}  // namespace

size_t ring_threshold_for(const CollConfig& c, int n) noexcept {
  if (c.ring_threshold) return *c.ring_threshold;
  return n == 2 ? kRingThresholdTwoRanks : kRingThreshold;
}

Algo select_algorithm(CollectiveKind kind, const CollConfig& c, int n, size_t bytes) noexcept {
  if (n < 2) return Algo::kLocal;
  switch (kind) {
    case CollectiveKind::kBarrier: return Algo::kDissemination;
    case CollectiveKind::kBroadcast: {
      // Even a zero-byte broadcast travels (it synchronises like any other message).
      if (c.broadcast == Algo::kTree || c.broadcast == Algo::kChain) return c.broadcast;
      const size_t piece = std::max<size_t>(c.pipeline_bytes, 1);
      return bytes >= 4 * piece && n > 2 ? Algo::kChain : Algo::kTree;
    }
    case CollectiveKind::kReduce:
      if (bytes == 0) return Algo::kLocal;
      return c.reduce == Algo::kChain || (c.reduce == Algo::kAuto && n > 2 && bytes >= ring_threshold_for(c, n))
                 ? Algo::kChain
                 : Algo::kTree;
    case CollectiveKind::kAllreduce:
      if (bytes == 0) return Algo::kLocal;
      return allreduce_family(c, n, bytes);
    case CollectiveKind::kReduceScatter:
      if (bytes == 0) return Algo::kLocal;
      return allreduce_family(c, n, times(bytes, n));  // the whole input decides
    case CollectiveKind::kAllgather: {
      Algo a = c.allgather;
      if (a == Algo::kBruck) return a;
      if (a != Algo::kRing && a != Algo::kRecursiveDoubling) {
        a = times(bytes, n) <= kAllgatherRdMaxBytes ? Algo::kRecursiveDoubling : Algo::kRing;
      }
      if (a == Algo::kRecursiveDoubling && !is_power_of_two(n)) return Algo::kBruck;
      return a;
    }
    case CollectiveKind::kGather:
    case CollectiveKind::kScatter: return Algo::kLinear;
    case CollectiveKind::kAlltoall: return Algo::kPairwise;
  }
  return Algo::kLocal;
}

Result<CollConfig> call_config(const CollConfig& base, CollectiveKind kind, const CollectiveOptions& options) {
  const std::string_view what = to_string(kind);
  switch (kind) {
    case CollectiveKind::kBarrier: return call_config(base, what, {Algo::kDissemination}, nullptr, options);
    case CollectiveKind::kBroadcast:
      return call_config(base, what, {Algo::kTree, Algo::kChain}, &CollConfig::broadcast, options);
    case CollectiveKind::kReduce:
      return call_config(base, what, {Algo::kTree, Algo::kChain}, &CollConfig::reduce, options);
    case CollectiveKind::kAllreduce:
    case CollectiveKind::kReduceScatter:
      return call_config(base, what, {Algo::kRing, Algo::kRecursiveDoubling}, &CollConfig::allreduce, options);
    case CollectiveKind::kAllgather:
      return call_config(base, what, {Algo::kRing, Algo::kRecursiveDoubling, Algo::kBruck}, &CollConfig::allgather,
                         options);
    case CollectiveKind::kGather:
    case CollectiveKind::kScatter: return call_config(base, what, {Algo::kLinear}, nullptr, options);
    case CollectiveKind::kAlltoall: return call_config(base, what, {Algo::kPairwise}, &CollConfig::alltoall, options);
  }
  return Status(StatusCode::kInternal, "call_config: unknown collective");
}

int algorithm_steps(CollectiveKind kind, Algo algo, int n) noexcept {
  if (n < 2) return 0;
  switch (algo) {
    case Algo::kLocal: return 0;
    case Algo::kRing: return kind == CollectiveKind::kAllreduce ? 2 * (n - 1) : n - 1;
    case Algo::kRecursiveDoubling: {
      if (kind == CollectiveKind::kAllgather) return ceil_log2(n);
      int p = 1, rounds = 0;
      while (p * 2 <= n) {
        p *= 2;
        ++rounds;
      }
      return rounds + (p < n ? 2 : 0);
    }
    case Algo::kBruck:
    case Algo::kTree:
    case Algo::kDissemination: return ceil_log2(n);
    case Algo::kChain:
    case Algo::kPairwise: return n - 1;
    case Algo::kLinear: return 1;
    case Algo::kAuto: return 0;
  }
  return 0;
}

}  // namespace remora::coll

namespace remora {

std::string_view to_string(CollAlgorithm algorithm) noexcept {
  if (static_cast<unsigned>(algorithm) > static_cast<unsigned>(CollAlgorithm::kBruck)) return "?";
  return coll::to_string(static_cast<coll::Algo>(algorithm));
}

Result<CollAlgorithm> parse_coll_algorithm(std::string_view name) {
  std::string names;
  for (int a = 0; a <= static_cast<int>(CollAlgorithm::kBruck); ++a) {
    const auto algorithm = static_cast<CollAlgorithm>(a);
    if (name == to_string(algorithm)) return algorithm;
    if (!names.empty()) names += ", ";
    names += to_string(algorithm);
  }
  return Status(StatusCode::kInvalidArgument,
                fmt::format("unknown collective algorithm '{}': use one of {}", name, names));
}

std::string_view to_string(CollectiveKind kind) noexcept {
  switch (kind) {
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kReduce: return "reduce";
    case CollectiveKind::kAllreduce: return "allreduce";
    case CollectiveKind::kGather: return "gather";
    case CollectiveKind::kScatter: return "scatter";
    case CollectiveKind::kAllgather: return "allgather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAlltoall: return "alltoall";
  }
  return "?";
}

Result<CollectiveKind> parse_collective_kind(std::string_view name) {
  std::string names;
  for (int k = 0; k <= static_cast<int>(CollectiveKind::kAlltoall); ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    if (name == to_string(kind)) return kind;
    if (!names.empty()) names += ", ";
    names += to_string(kind);
  }
  return Status(StatusCode::kInvalidArgument, fmt::format("unknown collective '{}': use one of {}", name, names));
}

}  // namespace remora
