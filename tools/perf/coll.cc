// tools/perf/coll.cc — remora bench coll: nccl-tests' operations and table over
// remora::Communicator, with a point-to-point reference measured in the same run.
//
// Every rank of the job runs run_coll. Per operation and size, and per placement
// (out-of-place, then in-place, where the operation has that form):
//   1. fill the inputs with data whose result is known and poison the outputs;
//   2. run the operation once and, with the check, count the elements of this rank's
//      result that differ from the expected ones (the #wrong column sums them);
//   3. warm up, meet at a barrier, and time `iters` operations back to back: this
//      rank's average; the row shows the slowest rank's (an allreduce with max), as
//      nccl-tests does.
// Data: the movement operations (broadcast, gather, scatter, allgather, alltoall) move
// blocks of a pattern seeded by (size, placement, source rank, destination rank), so a
// block in the wrong slot, a shifted or stale one never matches. The reductions reduce
// small integers (sum: -2..2, min/max: -8..8, prod: one factor of 2, 3, -1 or -2 per
// element, the rest 1; avg: values whose sum is ranks × an integer), so every partial
// result is exact in every type and the expected result is bit for bit what any
// correct order of combination gives: exact up to 128 ranks for bf16 sums (64 for avg),
// 1024 for fp16 (512 for avg), without limit that matters for the other types.
//
// The reference (unless disabled): before the table, ranks 0 and 1 run remora bench
// p2p's bibw window and lat ping-pong (p2p.cc's loops, over a Link that is their
// Communicator's isend/irecv) while the other ranks wait at a barrier: per-direction
// bandwidth at every size >= 1 MiB of the run, and the 4 KiB round trip. Ratios
// compare each row with it: busbw / per-direction bandwidth, and time / (steps × RTT)
// where steps is what Communicator::algorithm reports for the row.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pattern.h"
#include "session.h"

namespace remora::perf {
namespace {

using internal::BufferSet;
using internal::default_step;
using internal::Link;
using internal::Step;
using internal::StepKind;
using Clock = std::chrono::steady_clock;

constexpr std::byte kPoison{0xA5};
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr size_t kMiB = size_t{1} << 20;
/// The reference exchanges use a window of up to 64 messages, at most 64 MiB in flight.
constexpr size_t kReferenceWindowBytes = 64 * kMiB;
/// The targets (allreduce only).
constexpr double kBandwidthTarget = 0.8;
constexpr double kLatencyTarget = 2.0;

enum class Placement : uint8_t { kOutOfPlace, kInPlace };

std::string_view to_string(Placement p) { return p == Placement::kOutOfPlace ? "out-of-place" : "in-place"; }

bool is_reduction(CollectiveKind op) {
  return op == CollectiveKind::kAllreduce || op == CollectiveKind::kReduce || op == CollectiveKind::kReduceScatter;
}
bool is_rooted(CollectiveKind op) {
  return op == CollectiveKind::kReduce || op == CollectiveKind::kBroadcast || op == CollectiveKind::kGather ||
         op == CollectiveKind::kScatter;
}
/// Operations whose buffer is cut into one block per rank.
bool has_blocks(CollectiveKind op) {
  return op == CollectiveKind::kAllgather || op == CollectiveKind::kReduceScatter || op == CollectiveKind::kAlltoall ||
         op == CollectiveKind::kGather || op == CollectiveKind::kScatter;
}
/// broadcast has one buffer (MPI's form is in place by nature); alltoall has no in-place
/// form; barrier moves nothing and is shown once.
bool has_form(CollectiveKind op, Placement p) {
  if (op == CollectiveKind::kBroadcast) return p == Placement::kInPlace;
  if (op == CollectiveKind::kAlltoall || op == CollectiveKind::kBarrier) return p == Placement::kOutOfPlace;
  return true;
}
bool is_unsigned(DataType t) { return t == DataType::kUint8 || t == DataType::kUint32 || t == DataType::kUint64; }

/// One size of one operation: the call's count argument, and nccl-tests' size/count.
struct Geometry {
  size_t count = 0;  ///< elements, as passed to the call (per-rank block where there are blocks)
  size_t size = 0;   ///< bytes, the table's size
};

Geometry geometry(CollectiveKind op, size_t requested, size_t es, int n) {
  if (op == CollectiveKind::kBarrier) return {};
  if (has_blocks(op)) {
    const size_t count = requested / (static_cast<size_t>(n) * es);
    return {count, count * static_cast<size_t>(n) * es};
  }
  return {requested / es, requested / es * es};
}

// --- data ------------------------------------------------------------------------------

using Encode = void (*)(int64_t v, std::byte* out);

template <typename T>
void encode_as(int64_t v, std::byte* out) {
  const auto x = static_cast<T>(v);  // integers wrap (two's complement), as the kernels do
  std::memcpy(out, &x, sizeof x);
}
/// IEEE binary16 of an integer with |v| <= 2048 (exact).
void encode_half(int64_t v, std::byte* out) {
  uint16_t h = 0;
  if (v != 0) {
    const uint16_t sign = v < 0 ? 0x8000 : 0;
    const auto a = static_cast<uint64_t>(v < 0 ? -v : v);
    const int e = 63 - __builtin_clzll(a);
    const uint64_t mant = (e <= 10 ? a << (10 - e) : a >> (e - 10)) & 0x3FF;
    h = static_cast<uint16_t>(sign | ((e + 15) << 10) | mant);
  }
  std::memcpy(out, &h, sizeof h);
}
/// bfloat16 of an integer with |v| <= 256 (exact: the top half of its float).
void encode_bfloat(int64_t v, std::byte* out) {
  const auto f = static_cast<float>(v);
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  const auto b = static_cast<uint16_t>(bits >> 16);
  std::memcpy(out, &b, sizeof b);
}
Encode encoder(DataType t) {
  switch (t) {
    case DataType::kInt8: return encode_as<int8_t>;
    case DataType::kUint8: return encode_as<uint8_t>;
    case DataType::kInt32: return encode_as<int32_t>;
    case DataType::kUint32: return encode_as<uint32_t>;
    case DataType::kInt64: return encode_as<int64_t>;
    case DataType::kUint64: return encode_as<uint64_t>;
    case DataType::kFloat16: return encode_half;
    case DataType::kBFloat16: return encode_bfloat;
    case DataType::kFloat32: return encode_as<float>;
    case DataType::kFloat64: return encode_as<double>;
  }
  return encode_as<uint8_t>;
}

/// The inputs of a reduction (element i of rank r) and its expected result, as exact
/// integers (see the file comment).
class ReductionData {
 public:
  ReductionData(DataType type, ReduceOp op, int ranks, uint64_t seed)
      : op_(op),
        ranks_(ranks),
        es_(size_of(type)),
        signed_(!is_unsigned(type)),
        encode_(encoder(type)),
        common_(mix64(seed ^ 0xC011EC7ull)) {
    for (int r = 0; r < ranks; ++r) rank_seeds_.push_back(mix64(seed + static_cast<uint64_t>(r + 1) * kGolden));
  }

  int64_t value(int r, size_t i) const {
    switch (op_) {
      case ReduceOp::kSum: return small(rank_seeds_[static_cast<size_t>(r)], i, 5, signed_ ? 2 : 0);
      case ReduceOp::kMin:
      case ReduceOp::kMax: return small(rank_seeds_[static_cast<size_t>(r)], i, 17, signed_ ? 8 : 0);
      case ReduceOp::kProd: {
        const uint64_t x = common_ + i * kGolden;
        return static_cast<int>((x >> 40) % static_cast<uint64_t>(ranks_)) == r ? factor(x) : 1;
      }
      case ReduceOp::kAvg: {
        // Ranks pair up (0,1), (2,3), ...: one adds 1, its partner -1; an odd last rank 0.
        const uint64_t x = common_ + i * kGolden;
        if (r >= ranks_ - ranks_ % 2) return centre(x);
        return centre(x) + ((((x >> 33) & 1) == static_cast<uint64_t>(r % 2)) ? 1 : -1);
      }
    }
    return 0;
  }

  int64_t expected(size_t i) const {
    switch (op_) {
      case ReduceOp::kProd: return factor(common_ + i * kGolden);  // one rank's factor, the rest 1
      case ReduceOp::kAvg: return centre(common_ + i * kGolden);   // the sum is ranks × this
      default: break;
    }
    int64_t acc = value(0, i);
    for (int r = 1; r < ranks_; ++r) {
      const int64_t v = value(r, i);
      acc = op_ == ReduceOp::kSum ? acc + v : op_ == ReduceOp::kMin ? std::min(acc, v) : std::max(acc, v);
    }
    return acc;
  }

  /// out[j] = value(r, first + j) for j < count.
  void fill(int r, std::byte* out, size_t first, size_t count) const {
    for (size_t j = 0; j < count; ++j) encode_(value(r, first + j), out + j * es_);
  }
  /// Elements j < count of `got` that differ from expected(first + j).
  uint64_t count_wrong(const std::byte* got, size_t first, size_t count) const {
    uint64_t wrong = 0;
    std::byte want[8];
    for (size_t j = 0; j < count; ++j) {
      encode_(expected(first + j), want);
      if (std::memcmp(got + j * es_, want, es_) != 0) ++wrong;
    }
    return wrong;
  }

 private:
  /// Uniform-ish in [-offset, modulus - 1 - offset], from the top bits of a Weyl sequence.
  static int64_t small(uint64_t seed, size_t i, uint64_t modulus, int64_t offset) {
    return static_cast<int64_t>(((seed + i * kGolden) >> 40) % modulus) - offset;
  }
  /// 2, 3, and for signed types also -1, -2.
  int64_t factor(uint64_t x) const {
    const auto k = static_cast<int64_t>((x >> 32) & 3);
    if (k < 2 || !signed_) return 2 + (k & 1);
    return 1 - k;
  }
  static int64_t centre(uint64_t x) { return static_cast<int64_t>((x >> 40) % 7) - 3; }

  ReduceOp op_;
  int ranks_;
  size_t es_;
  bool signed_;
  Encode encode_;
  uint64_t common_;
  std::vector<uint64_t> rank_seeds_;
};

/// The movement operations' blocks: a pattern per (source, destination).
uint64_t block_seed(uint64_t seed, int from, int to) {
  return mix64(mix64(seed ^ static_cast<uint64_t>(from + 1)) + static_cast<uint64_t>(to + 1) * kGolden);
}

/// Elements of `got` (es bytes each) that differ from the pattern `seed`; `scratch`
/// holds at least got.size() bytes.
uint64_t wrong_in_block(std::span<const std::byte> got, uint64_t seed, size_t es, std::span<std::byte> scratch) {
  const auto want = scratch.first(got.size());
  fill_pattern(want, seed);
  if (std::memcmp(got.data(), want.data(), got.size()) == 0) return 0;
  uint64_t wrong = 0;
  for (size_t off = 0; off < got.size(); off += es) wrong += std::memcmp(got.data() + off, want.data() + off, es) != 0;
  return wrong;
}

/// Page-aligned memory for the collectives (never registered: the Communicator takes
/// any memory, as MPI does).
class HostBuffer {
 public:
  explicit HostBuffer(size_t bytes) {
    const size_t rounded = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
    data_.reset(static_cast<std::byte*>(std::aligned_alloc(4096, rounded)));
  }
  bool ok() const { return data_ != nullptr; }
  std::span<std::byte> span(size_t bytes) const { return {data_.get(), bytes}; }
  std::byte* data() const { return data_.get(); }
  std::span<std::byte> block(size_t index, size_t bytes) const { return {data_.get() + index * bytes, bytes}; }

 private:
  std::unique_ptr<std::byte, decltype(&std::free)> data_{nullptr, &std::free};
};

struct Buffers {
  HostBuffer send, recv, scratch;
};

/// One placement of one size of one operation, on this rank.
struct Case {
  std::function<void()> prepare;  ///< inputs filled, outputs poisoned
  std::function<Status()> run;    ///< the collective
  std::function<uint64_t()> verify;
  std::span<std::byte> output;  ///< what this rank checks (fault injection damages it)
};

struct CaseParams {
  Communicator& comm;
  CollectiveKind op;
  Placement placement;
  Geometry g;
  DataType type;
  ReduceOp redop;
  int root;
  uint64_t seed;
  bool alltoallv = false;   ///< CollOptions::alltoallv
  bool allgatherv = false;  ///< CollOptions::allgatherv
};

Case make_case(const CaseParams& p, const Buffers& b, const std::shared_ptr<const ReductionData>& red) {
  Communicator& c = p.comm;
  const int n = c.size();
  const int r = c.rank();
  const size_t es = size_of(p.type);
  const size_t count = p.g.count;
  const size_t block = count * es;  // bytes of one rank's block (blocked ops) or the vector
  const bool in_place = p.placement == Placement::kInPlace;
  const bool root = r == p.root;
  std::byte* send = b.send.data();
  std::byte* recv = b.recv.data();
  const auto poison = [](std::span<std::byte> s) { std::fill(s.begin(), s.end(), kPoison); };
  const auto seed = [s = p.seed](int from, int to = 0) { return block_seed(s, from, to); };
  /// The blocks of `buf` (n of `block` bytes), each checked against pattern seed(from(i), to(i)).
  const auto blocks_wrong = [&b, es, block, n](std::byte* buf, const std::function<uint64_t(int)>& seed_of) {
    uint64_t wrong = 0;
    for (int i = 0; i < n; ++i) {
      wrong += wrong_in_block({buf + static_cast<size_t>(i) * block, block}, seed_of(i), es, b.scratch.span(block));
    }
    return wrong;
  };
  const DataType t = p.type;
  const ReduceOp rop = p.redop;
  const int rt = p.root;
  Case k;
  switch (p.op) {
    case CollectiveKind::kBarrier:
      k.prepare = [] {};
      k.run = [&c] { return c.barrier(); };
      k.verify = [] { return uint64_t{0}; };
      break;
    case CollectiveKind::kAllreduce:
      k.prepare = [=, &b] {
        red->fill(r, in_place ? recv : send, 0, count);
        if (!in_place) poison(b.recv.span(block));
      };
      k.run = [=, &c] { return c.allreduce(in_place ? kInPlace : send, recv, count, t, rop); };
      k.verify = [=] { return red->count_wrong(recv, 0, count); };
      k.output = b.recv.span(block);
      break;
    case CollectiveKind::kReduce:
      // In place: the root passes kInPlace; the others reduce from recv (nccl-tests'
      // in-place: send and receive buffer are one).
      k.prepare = [=, &b] {
        red->fill(r, in_place ? recv : send, 0, count);
        if (!in_place && root) poison(b.recv.span(block));
      };
      k.run = [=, &c] { return c.reduce(in_place ? (root ? kInPlace : recv) : send, recv, count, t, rop, rt); };
      k.verify = [=] { return root ? red->count_wrong(recv, 0, count) : 0; };
      if (root) k.output = b.recv.span(block);
      break;
    case CollectiveKind::kReduceScatter:
      // The input covers n blocks (global element indices); rank r's result is block r.
      k.prepare = [=, &b] {
        red->fill(r, in_place ? recv : send, 0, count * static_cast<size_t>(n));
        if (!in_place) poison(b.recv.span(block));
      };
      k.run = [=, &c] { return c.reduce_scatter(in_place ? kInPlace : send, recv, count, t, rop); };
      k.verify = [=] { return red->count_wrong(recv, static_cast<size_t>(r) * count, count); };
      k.output = b.recv.span(block);
      break;
    case CollectiveKind::kBroadcast:
      k.prepare = [=, &b] {
        if (root) {
          fill_pattern(b.recv.span(block), seed(rt));
        } else {
          poison(b.recv.span(block));
        }
      };
      k.run = [=, &c] { return c.broadcast(recv, count, t, rt); };
      k.verify = [=, &b] { return wrong_in_block(b.recv.span(block), seed(rt), es, b.scratch.span(block)); };
      k.output = b.recv.span(block);
      break;
    case CollectiveKind::kAllgather:
      k.prepare = [=, &b] {
        poison(b.recv.span(block * static_cast<size_t>(n)));
        fill_pattern(in_place ? b.recv.block(static_cast<size_t>(r), block) : b.send.span(block), seed(r));
      };
      if (p.allgatherv) {
        // Every count the same, the blocks in rank order: allgather's data, allgatherv's path.
        auto counts = std::make_shared<std::vector<size_t>>(static_cast<size_t>(n), count);
        auto displs = std::make_shared<std::vector<size_t>>(static_cast<size_t>(n));
        for (size_t i = 0; i < displs->size(); ++i) (*displs)[i] = i * count;
        k.run = [=, &c] { return c.allgatherv(in_place ? kInPlace : send, count, recv, *counts, *displs, t); };
      } else {
        k.run = [=, &c] { return c.allgather(in_place ? kInPlace : send, recv, count, t); };
      }
      k.verify = [=] { return blocks_wrong(recv, [&](int i) { return seed(i); }); };
      k.output = b.recv.span(block * static_cast<size_t>(n));
      break;
    case CollectiveKind::kAlltoall:
      k.prepare = [=, &b] {
        for (int d = 0; d < n; ++d) fill_pattern(b.send.block(static_cast<size_t>(d), block), seed(r, d));
        poison(b.recv.span(block * static_cast<size_t>(n)));
      };
      if (p.alltoallv) {
        // Every count the same, the blocks in rank order: alltoall's data, alltoallv's path.
        auto counts = std::make_shared<std::vector<size_t>>(static_cast<size_t>(n), count);
        auto displs = std::make_shared<std::vector<size_t>>(static_cast<size_t>(n));
        for (size_t i = 0; i < displs->size(); ++i) (*displs)[i] = i * count;
        k.run = [=, &c] { return c.alltoallv(send, *counts, *displs, recv, *counts, *displs, t); };
      } else {
        k.run = [=, &c] { return c.alltoall(send, recv, count, t); };
      }
      k.verify = [=] { return blocks_wrong(recv, [&](int from) { return seed(from, r); }); };
      k.output = b.recv.span(block * static_cast<size_t>(n));
      break;
    case CollectiveKind::kGather:
      k.prepare = [=, &b] {
        if (root) poison(b.recv.span(block * static_cast<size_t>(n)));
        fill_pattern(in_place && root ? b.recv.block(static_cast<size_t>(r), block) : b.send.span(block), seed(r));
      };
      k.run = [=, &c] { return c.gather(in_place && root ? kInPlace : send, recv, count, t, rt); };
      k.verify = [=] { return root ? blocks_wrong(recv, [&](int i) { return seed(i); }) : 0; };
      if (root) k.output = b.recv.span(block * static_cast<size_t>(n));
      break;
    case CollectiveKind::kScatter:
      // In place, the root's own block stays in send: that is what it checks.
      k.prepare = [=, &b] {
        if (root) {
          for (int d = 0; d < n; ++d) fill_pattern(b.send.block(static_cast<size_t>(d), block), seed(d));
        }
        poison(b.recv.span(block));
      };
      k.run = [=, &c] { return c.scatter(send, in_place && root ? kInPlace : recv, count, t, rt); };
      k.output = in_place && root ? b.send.block(static_cast<size_t>(r), block) : b.recv.span(block);
      k.verify = [=, &b, out = k.output] { return wrong_in_block(out, seed(r), es, b.scratch.span(block)); };
      break;
  }
  return k;
}

/// The rank whose result fault injection damages: one that checks something.
int corrupting_rank(CollectiveKind op, int root, int n) {
  if (op == CollectiveKind::kReduce || op == CollectiveKind::kGather) return root;
  if (op == CollectiveKind::kBroadcast) return (root + 1) % n;  // a receiver (the root itself alone)
  return n - 1;
}

// --- one row ---------------------------------------------------------------------------

struct RunContext {
  Communicator& comm;
  const CollOptions& o;
  const Buffers& buffers;
};

Status measure(RunContext& x, const CaseParams& p, const Step& st, CollTiming* out) {
  Communicator& c = x.comm;
  std::shared_ptr<const ReductionData> red;
  if (is_reduction(p.op)) red = std::make_shared<ReductionData>(p.type, p.redop, c.size(), p.seed);
  Case k = make_case(p, x.buffers, red);
  const std::string label = fmt::format("{} {} {}", op_name(p.op, x.o), format_size(p.g.size),
                                        p.placement == Placement::kInPlace ? "in" : "out");
  const uint64_t total = uint64_t{1} + st.warmup + st.iters;
  const auto progress = [&](uint64_t done) {
    if (x.o.progress && c.rank() == 0) x.o.progress(label, done, total);
  };

  k.prepare();
  REMORA_RETURN_IF_ERROR(k.run().with_context(fmt::format("{} (checked run)", to_string(p.placement))));
  uint64_t wrong = 0;
  if (x.o.check) {
    if (x.o.inject_corruption && c.rank() == corrupting_rank(p.op, p.root, c.size()) && !k.output.empty()) {
      k.output[k.output.size() / 2] ^= std::byte{0x01};
    }
    wrong = k.verify();
  }
  for (uint32_t i = 0; i < st.warmup; ++i) {
    REMORA_RETURN_IF_ERROR(k.run());
    progress(2 + i);
  }
  REMORA_RETURN_IF_ERROR(c.barrier());
  const Clock::time_point t0 = Clock::now();
  for (uint32_t i = 0; i < st.iters; ++i) {
    REMORA_RETURN_IF_ERROR(k.run());
    if ((i & 7) == 0) progress(2 + st.warmup + i);
  }
  double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / std::max<uint32_t>(st.iters, 1);
  REMORA_RETURN_IF_ERROR(c.allreduce(kInPlace, &us, 1, DataType::kFloat64, ReduceOp::kMax));
  REMORA_RETURN_IF_ERROR(c.allreduce(kInPlace, &wrong, 1, DataType::kUint64, ReduceOp::kSum));
  out->ran = true;
  out->time_us = us;
  out->algbw_gbps = us > 0 ? static_cast<double>(p.g.size) / us / 1e3 : 0;  // bytes/us = MB/s
  out->busbw_gbps = out->algbw_gbps * bus_factor(p.op, c.size());
  out->wrong = wrong;
  return Status::ok();
}

Result<CollRow> run_row(RunContext& x, CollectiveKind op, size_t requested) {
  Communicator& c = x.comm;
  const size_t es = size_of(x.o.type);
  const Geometry g = geometry(op, requested, es, c.size());
  CollRow row;
  row.op = op;
  row.requested = requested;
  row.size = g.size;
  row.count = g.size / es;
  const Step st = default_step(StepKind::kCollective, g.size, 1, x.o.iters, x.o.warmup);
  row.iterations = st.iters;
  row.warmup = st.warmup;
  for (Placement pl : {Placement::kOutOfPlace, Placement::kInPlace}) {
    if (!has_form(op, pl)) continue;
    const uint64_t seed =
        mix64(mix64(requested) ^ ((uint64_t{static_cast<uint8_t>(op)} << 8) | static_cast<uint8_t>(pl)));
    const CaseParams p{.comm = c,
                       .op = op,
                       .placement = pl,
                       .g = g,
                       .type = x.o.type,
                       .redop = x.o.redop,
                       .root = x.o.root,
                       .seed = seed,
                       .alltoallv = x.o.alltoallv,
                       .allgatherv = x.o.allgatherv};
    CollTiming* t = pl == Placement::kOutOfPlace ? &row.out_of_place : &row.in_place;
    REMORA_RETURN_IF_ERROR(
        measure(x, p, st, t).with_context(fmt::format("{} of {}", op_name(op, x.o), format_size(g.size))));
  }
  // Asked after the runs: what ran (a communicator's shared segment is set up by its
  // first barrier or allreduce).
  const AlgorithmChoice algo = c.algorithm(op, g.count * es);
  row.algorithm = std::string(algo.name);
  row.steps = algo.steps;
  return row;
}

// --- the reference ---------------------------------------------------------------------

/// A Link over one peer of a communicator (Communicator::isend/irecv, user tags).
class CommLink final : public Link {
 public:
  CommLink(Communicator& comm, int peer) : comm_(comm), peer_(peer) {}
  Request send(std::span<const std::byte> data, Tag tag) override {
    return comm_.isend(data.data(), data.size(), DataType::kUint8, peer_, tag);
  }
  Request recv(std::span<std::byte> data, Tag tag) override {
    return comm_.irecv(data.data(), data.size(), DataType::kUint8, peer_, tag);
  }

 private:
  Communicator& comm_;
  int peer_;
};

/// Ranks 0 and 1 measure; the others wait at the barriers around it.
Status measure_reference(Communicator& c, Context& ctx, const CollOptions& o, CollReference* out) {
  std::set<size_t> sizes;  // >= 1 MiB, each once, ascending
  for (size_t s : o.sizes) {
    if (s >= kMiB) sizes.insert(s);
  }
  const char* waiting = "waiting for ranks 0 and 1 to measure the reference";
  REMORA_RETURN_IF_ERROR(c.barrier().with_context(waiting));
  if (c.rank() < 2) {
    const bool driver = c.rank() == 0;
    CommLink link(c, 1 - c.rank());
    BufferSet buffers(ctx, BufferSource::kPool);
    // Both sides' buffers exist before either times anything: a zero-byte handshake.
    const internal::StartFn start = [&link] {
      const std::array<Request, 2> both{link.recv({}, internal::kReadyTag), link.send({}, internal::kReadyTag)};
      return internal::wait_all_ok(both, "reference start");
    };
    const internal::LoopSide side{.link = link,
                                  .buffers = buffers,
                                  .driver = driver,
                                  .start = start,
                                  .progress = driver ? o.progress : nullptr,
                                  .problem = nullptr,  // the reference is timed only; the table checks the collectives
                                  .damage = false};
    for (size_t s : sizes) {
      const auto window = static_cast<uint32_t>(std::clamp<size_t>(kReferenceWindowBytes / s, 1, 64));
      const Step st = default_step(StepKind::kWindow, s, window, o.reference_iters, std::nullopt);
      double seconds = 0;
      REMORA_RETURN_IF_ERROR(internal::run_window(side, P2pMode::kBiBandwidth, window, false, st, &seconds)
                                 .with_context(fmt::format("reference exchange of {}", format_size(s))));
      buffers.release_all();
      const double one_way = static_cast<double>(s) * window * st.iters;
      out->exchanges.push_back({.size = s,
                                .window = window,
                                .iterations = st.iters,
                                .seconds = seconds,
                                .gbps_per_direction = seconds > 0 ? one_way / seconds / 1e9 : 0});
    }
    const Step st = default_step(StepKind::kPingPong, out->pingpong_size, 1, o.reference_iters, std::nullopt);
    std::vector<double> rtt_us;
    REMORA_RETURN_IF_ERROR(
        internal::run_pingpong(side, st, driver ? &rtt_us : nullptr).with_context("reference ping-pong"));
    out->pingpong_iterations = st.iters;
    out->rtt = internal::summarize_latency(std::move(rtt_us), 1);
  }
  REMORA_RETURN_IF_ERROR(c.barrier().with_context(waiting));
  out->measured = true;
  return Status::ok();
}

/// Each row against the reference of the same round (rank 0, once everything is measured).
std::vector<CollRatio> round_ratios(const std::vector<CollRow>& rows, const CollReference& ref) {
  std::vector<CollRatio> out;
  if (!ref.measured) return out;
  for (const CollRow& row : rows) {
    const bool oop = row.out_of_place.ran;
    const CollTiming& t = oop ? row.out_of_place : row.in_place;
    if (!t.ran || row.op == CollectiveKind::kBarrier) continue;
    const bool allreduce = row.op == CollectiveKind::kAllreduce;
    CollRatio base;
    base.op = row.op;
    base.size = row.size;
    base.placement = oop ? "out-of-place" : "in-place";
    base.algorithm = row.algorithm;
    base.steps = row.steps;
    for (const auto& ex : ref.exchanges) {
      if (ex.size != row.requested || ex.gbps_per_direction <= 0) continue;
      CollRatio r = base;
      r.value = t.busbw_gbps;
      r.reference = ex.gbps_per_direction;
      r.ratio = r.value / r.reference;
      r.per_round = {r.ratio};
      if (allreduce) r.target = kBandwidthTarget;
      out.push_back(r);
    }
    if (row.requested == ref.pingpong_size && row.steps > 0 && ref.rtt.avg_us > 0) {
      CollRatio r = base;
      r.bandwidth = false;
      r.value = t.time_us;
      r.reference = row.steps * ref.rtt.avg_us;
      r.ratio = r.value / r.reference;
      r.per_round = {r.ratio};
      r.ratio_p50 = ref.rtt.p50_us > 0 ? r.value / (row.steps * ref.rtt.p50_us) : 0;
      if (allreduce) r.target = kLatencyTarget;
      out.push_back(r);
    }
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

/// The rounds' ratios combined: every round has the same rows and reference sizes, so
/// the i-th ratio of each round is the same metric. Value, reference, ratio and the
/// p50 ratio are each the median over the rounds; per_round keeps every round's ratio.
std::vector<CollRatio> ratios(const std::vector<CollReport::Round>& rounds) {
  if (rounds.empty()) return {};
  std::vector<std::vector<CollRatio>> each;
  for (const auto& r : rounds) each.push_back(round_ratios(r.rows, r.reference));
  std::vector<CollRatio> out = each.front();
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<double> value, reference, ratio, p50;
    for (const auto& e : each) {
      if (i >= e.size()) continue;  // cannot happen: same rows, same reference sizes
      value.push_back(e[i].value);
      reference.push_back(e[i].reference);
      ratio.push_back(e[i].ratio);
      p50.push_back(e[i].ratio_p50);
    }
    out[i].value = median(value);
    out[i].reference = median(reference);
    out[i].ratio = median(ratio);
    out[i].ratio_p50 = median(p50);
    out[i].per_round = std::move(ratio);
  }
  return out;
}

// --- JSON ------------------------------------------------------------------------------

nlohmann::json timing_json(const CollTiming& t, bool checked) {
  if (!t.ran) return nullptr;
  nlohmann::json j = {{"time_us", t.time_us}, {"algbw_GBps", t.algbw_gbps}, {"busbw_GBps", t.busbw_gbps}};
  j["wrong"] = checked ? nlohmann::json(t.wrong) : nlohmann::json(nullptr);
  return j;
}

nlohmann::json results_json(const std::vector<CollRow>& rows, const CollOptions& o, int ranks, bool checked) {
  nlohmann::json out = nlohmann::json::array();
  for (const CollRow& r : rows) {
    out.push_back({{"op", op_name(r.op, o)},
                   {"size", r.size},
                   {"requested", r.requested},
                   {"count", r.count},
                   {"type", to_string(o.type)},
                   {"redop", is_reduction(r.op) ? nlohmann::json(to_string(o.redop)) : nlohmann::json(nullptr)},
                   {"root", is_rooted(r.op) ? o.root : -1},
                   {"algorithm", r.algorithm},
                   {"steps", r.steps},
                   {"bus_factor", bus_factor(r.op, ranks)},
                   {"iterations", r.iterations},
                   {"warmup", r.warmup},
                   {"out_of_place", timing_json(r.out_of_place, checked)},
                   {"in_place", timing_json(r.in_place, checked)}});
  }
  return out;
}

nlohmann::json reference_json(const CollReference& ref) {
  if (!ref.measured) return nullptr;
  nlohmann::json x = nlohmann::json::array();
  for (const auto& e : ref.exchanges) {
    x.push_back({{"size", e.size},
                 {"window", e.window},
                 {"iterations", e.iterations},
                 {"seconds", e.seconds},
                 {"bandwidth_GBps_per_direction", e.gbps_per_direction}});
  }
  return {{"ranks", {0, 1}},
          {"exchange", x},
          {"exchange_is",
           "bidirectional: ranks 0 and 1 each send a window of messages to the other at "
           "once (remora bench p2p --mode bibw over the communicator); bytes one way / time"},
          {"pingpong",
           {{"size", ref.pingpong_size},
            {"iterations", ref.pingpong_iterations},
            {"rtt_us", internal::latency_json(ref.rtt)}}}};
}

nlohmann::json report_json(const CollReport& rep, const CollOptions& o, const nlohmann::json& config) {
  nlohmann::json j = {
      {"tool", "remora bench coll"}, {"version", version_string()}, {"ranks", rep.ranks}, {"launcher", rep.launcher}};
  j["config"] = config;
  j["config"]["ops"] = nlohmann::json::array();
  for (CollectiveKind op : o.ops) j["config"]["ops"].push_back(op_name(op, o));
  j["config"]["sizes"] = o.sizes;
  j["config"]["type"] = to_string(o.type);
  j["config"]["redop"] = to_string(o.redop);
  j["config"]["root"] = o.root;
  j["config"]["iters"] = o.iters ? nlohmann::json(*o.iters) : nlohmann::json("scaled by size");
  j["config"]["warmup"] = o.warmup ? nlohmann::json(*o.warmup) : nlohmann::json("scaled by size");
  j["config"]["check"] = o.check;
  j["config"]["reference"] = o.reference;
  j["config"]["reference_iters"] =
      o.reference_iters ? nlohmann::json(*o.reference_iters) : nlohmann::json("scaled as remora bench p2p");
  j["config"]["inject_corruption"] = o.inject_corruption;
  j["config"]["time"] = "per operation: each rank's average over the timed iterations, the slowest rank's";
  j["config"]["rounds"] = o.rounds;
  j["results"] = results_json(rep.rows, o, rep.ranks, o.check);
  j["reference"] = reference_json(rep.reference);
  // Every round (the first is results/reference above), for the spread behind the ratios.
  j["rounds"] = nlohmann::json::array();
  for (size_t k = 0; k < rep.rounds.size(); ++k) {
    j["rounds"].push_back({{"round", k + 1},
                           {"order", k % 2 == 0 ? "reference, table" : "table, reference"},
                           {"checked", k == 0 && o.check},
                           {"results", results_json(rep.rounds[k].rows, o, rep.ranks, k == 0 && o.check)},
                           {"reference", reference_json(rep.rounds[k].reference)}});
  }
  j["ratios"] = nlohmann::json::array();
  for (const CollRatio& r : rep.ratios) {
    nlohmann::json x = {{"op", op_name(r.op, o)},        {"size", r.size},   {"placement", r.placement},
                        {"algorithm", r.algorithm},      {"steps", r.steps}, {"ratio", r.ratio},
                        {"ratio_per_round", r.per_round}};
    if (r.bandwidth) {
      x["kind"] = "busbw / per-direction bandwidth";
      x["busbw_GBps"] = r.value;
      x["reference_GBps"] = r.reference;
    } else {
      x["kind"] = "time / (steps x RTT)";
      x["time_us"] = r.value;
      x["steps_x_rtt_us"] = r.reference;
      x["ratio_p50"] = r.ratio_p50;
    }
    x["target"] = r.target ? nlohmann::json(fmt::format("{} {}", r.bandwidth ? ">=" : "<=", *r.target)) : nullptr;
    x["met"] = r.target ? nlohmann::json(r.met()) : nullptr;
    j["ratios"].push_back(x);
  }
  j["wrong"] = rep.wrong;
  j["connections"] = {{"rank0_peers", rep.connections.peers},
                      {"rank0_sockets", rep.connections.sockets},
                      {"most_peers", rep.most_peers},
                      {"most_sockets", rep.most_sockets},
                      {"rank0_descriptors", rep.connections.descriptors},
                      {"rank0_descriptor_limit", rep.connections.descriptor_limit},
                      {"rank0_segment_ranks", rep.connections.segment_ranks},
                      {"rank0_no_segment", rep.connections.no_segment}};
  return j;
}

Result<CollReport> run_as_rank(const CollOptions& o, const LaunchInfo& launch) {
  REMORA_ASSIGN_OR_RETURN(auto ctx, Context::create());
  REMORA_ASSIGN_OR_RETURN(auto comm, Communicator::init(*ctx, launch));
  Communicator& c = *comm;
  CollReport rep;
  rep.rank = c.rank();
  rep.ranks = c.size();
  rep.launcher = launch.launcher;

  size_t largest = 0;
  for (size_t s : o.sizes) largest = std::max(largest, s);
  Buffers buffers{HostBuffer(largest), HostBuffer(largest), HostBuffer(largest)};
  if (!buffers.send.ok() || !buffers.recv.ok() || !buffers.scratch.ok()) {
    return Status(StatusCode::kNoResource, fmt::format("out of memory allocating 3 x {} bytes", largest));
  }

  CollOptions unchecked = o;  // the rounds after the first only time
  unchecked.check = false;
  unchecked.inject_corruption = false;
  const auto body = [&]() -> Status {
    for (uint32_t k = 0; k < o.rounds; ++k) {
      CollReport::Round round;
      const bool measure = o.reference && c.size() >= 2;
      const bool reference_first = k % 2 == 0;  // ABBA: reference, table; table, reference; ...
      if (measure && reference_first) REMORA_RETURN_IF_ERROR(measure_reference(c, *ctx, o, &round.reference));
      RunContext x{.comm = c, .o = k == 0 ? o : unchecked, .buffers = buffers};
      for (CollectiveKind op : o.ops) {
        const std::vector<size_t> one = {0};  // barrier: one row
        for (size_t s : op == CollectiveKind::kBarrier ? one : o.sizes) {
          REMORA_ASSIGN_OR_RETURN(CollRow row, run_row(x, op, s));
          rep.wrong += row.out_of_place.wrong + row.in_place.wrong;
          round.rows.push_back(std::move(row));
        }
      }
      if (measure && !reference_first) REMORA_RETURN_IF_ERROR(measure_reference(c, *ctx, o, &round.reference));
      rep.rounds.push_back(std::move(round));
    }
    rep.rows = rep.rounds.front().rows;
    rep.reference = rep.rounds.front().reference;
    return Status::ok();
  };
  if (Status s = body(); !s.is_ok()) {
    c.abort();  // the others fail at once instead of waiting for us
    return s;
  }
  rep.connections = c.connections();
  int64_t most[2] = {rep.connections.peers, static_cast<int64_t>(rep.connections.sockets)};
  REMORA_RETURN_IF_ERROR(c.allreduce(kInPlace, most, 2, DataType::kInt64, ReduceOp::kMax));
  rep.most_peers = static_cast<int>(most[0]);
  rep.most_sockets = static_cast<uint64_t>(most[1]);
  if (rep.rank == 0) {
    rep.ratios = ratios(rep.rounds);
    nlohmann::json config = internal::config_json(*ctx);
    config["coll_timeout"] = "REMORA_COLL_TIMEOUT_MS";
    rep.json = report_json(rep, o, config);
  } else {
    rep.rows.clear();
    rep.rounds.clear();
  }
  return rep;
}

}  // namespace

double bus_factor(CollectiveKind op, int ranks) {
  const double n = ranks;
  switch (op) {
    case CollectiveKind::kAllreduce: return 2 * (n - 1) / n;
    case CollectiveKind::kAllgather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAlltoall:
    case CollectiveKind::kGather:
    case CollectiveKind::kScatter: return (n - 1) / n;
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce: return 1;
    case CollectiveKind::kBarrier: return 0;
  }
  return 0;
}

Status validate(const CollOptions& o, int ranks) {
  const auto invalid = [](std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); };
  if (o.ops.empty()) return invalid("no operation given");
  if (o.sizes.empty()) return invalid("no sizes given");
  if (o.iters && *o.iters == 0) return invalid("--iters must be at least 1");
  if (o.reference_iters && *o.reference_iters == 0) return invalid("--reference-iters must be at least 1");
  if (o.rounds == 0) return invalid("--rounds must be at least 1");
  if (ranks < 1) return invalid("--ranks must be at least 1");
  if (o.expect_ranks && *o.expect_ranks != ranks) {
    return invalid(fmt::format("-n {} but the launcher started {} ranks", *o.expect_ranks, ranks));
  }
  for (CollectiveKind op : o.ops) {
    if (is_rooted(op) && (o.root < 0 || o.root >= ranks)) {
      return invalid(fmt::format("--root {} is not a rank of {} ranks ({} needs one)", o.root, ranks, to_string(op)));
    }
    if (is_reduction(op) && o.redop == ReduceOp::kAvg && !is_floating(o.type)) {
      return invalid(fmt::format("--redop avg needs a floating type, not {}", to_string(o.type)));
    }
  }
  return Status::ok();
}

Result<bool> launched_as_rank() {
  std::set<std::string> set;  // launcher variables that are set
  auto launch = detect_launch([&set](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr || *v == '\0') return std::nullopt;
    set.emplace(name);
    return std::string(v);
  });
  if (launch.is_ok()) return true;
  if (set.empty()) return false;
  const bool many = set.size() > 1;
  return Status(StatusCode::kInvalidArgument,
                fmt::format("{} {} set but {} no job ({}); unset {} to let -n N start ranks on this host",
                            fmt::join(set, ", "), many ? "are" : "is", many ? "describe" : "describes",
                            launch.status().message(), many ? "them" : "it"));
}

Result<CollReport> run_coll(const CollOptions& options) {
  REMORA_ASSIGN_OR_RETURN(LaunchInfo launch, detect_launch());
  CollOptions o = options;
  if (o.sizes.empty()) {
    for (size_t s = 4096; s <= 64 * kMiB; s *= 4) o.sizes.push_back(s);
  }
  const std::string who = fmt::format("rank {} of {}", launch.rank, launch.size);
  if (Status s = validate(o, launch.size); !s.is_ok()) return s.with_context(who);
  auto report = run_as_rank(o, launch);
  if (!report.is_ok()) return report.status().with_context(who);
  return report;
}

}  // namespace remora::perf
