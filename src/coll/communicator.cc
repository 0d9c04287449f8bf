// The public Communicator: argument checks, kInPlace resolution, and dispatch to the
// algorithms (algorithms.h) through CommCore::run (blocking) or post (asynchronous).
#include "remora/communicator.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <type_traits>

#include <fmt/format.h>

#include "coll/algorithms.h"
#include "coll/comm_access.h"
#include "coll/comm_core.h"
#include "coll/device_stage.h"
#include "coll/reduce.h"
#include "coll/shm_segment.h"
#include "engine/request_state.h"

namespace remora {

using coll::Algo;
using coll::CollConfig;
using coll::CommCore;
using coll::Op;

namespace {

/// A collective checked and ready to run: `body`, or (a collective on host memory
/// that runs whole, coll/device_stage.h) `whole` over its `count` elements, which a
/// blocking call runs without wrapping it in a Body of its own.
struct Prepared {
  Status check;
  CommCore::Body body;
  coll::DeviceStage::SegmentFn whole = {};
  size_t count = 0;
};

Status invalid(std::string message) { return Status(StatusCode::kInvalidArgument, std::move(message)); }

/// A buffer of `count` elements: null only when empty; kInPlace only where allowed.
Status check_buffer(const char* what, const void* p, size_t count, DataType type, bool in_place_ok) {
  if (p == kInPlace) return in_place_ok ? Status::ok() : invalid(fmt::format("{}: kInPlace is not allowed here", what));
  if (count != 0 && p == nullptr) return invalid(fmt::format("{}: null buffer for {} elements", what, count));
  // count * element size * 16 must not wrap (a multiplication: a division here costs a
  // small collective more than all its checks together).
  size_t wrapped = 0;
  if (__builtin_mul_overflow(count, size_of(type) * 16, &wrapped)) {
    return invalid(fmt::format("{}: {} elements is too many", what, count));
  }
  return Status::ok();
}

Status check_op(DataType type, ReduceOp op) {
  if (!coll::supported(type, op)) {
    return invalid(fmt::format("reduction {} is not defined for {}", to_string(op), to_string(type)));
  }
  return Status::ok();
}

Status check_counts(const char* what, std::span<const size_t> counts, std::span<const size_t> displs, int size,
                    DataType type) {
  if (counts.size() != static_cast<size_t>(size) || displs.size() != static_cast<size_t>(size)) {
    return invalid(fmt::format("{}: counts and displacements need {} entries each (got {} and {})", what, size,
                               counts.size(), displs.size()));
  }
  // (displacement + count) * element size must not wrap: the algorithms compute byte
  // offsets from them without further checks.
  const size_t limit = SIZE_MAX / 16 / size_of(type);
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] > limit || displs[i] > limit - counts[i]) {
      return invalid(
          fmt::format("{}: block {} (count {}, displacement {}) is out of range", what, i, counts[i], displs[i]));
    }
  }
  return Status::ok();
}

Status first_error(std::initializer_list<Status> checks) {
  for (const Status& s : checks) {
    if (!s.is_ok()) return s;
  }
  return Status::ok();
}

const void* resolve(const void* send, void* recv) { return send == kInPlace ? recv : send; }
const void* in_place_null(const void* send) { return send == kInPlace ? nullptr : send; }

}  // namespace

Communicator::Communicator(std::shared_ptr<CommCore> core) noexcept : core_(std::move(core)) {}

Communicator::~Communicator() {
  // run() waits for the posted operations first; an empty body costs nothing on the wire.
  if (core_) (void)core_->run([](Op&) { return Status::ok(); });
}

int Communicator::rank() const noexcept { return core_->rank(); }
int Communicator::size() const noexcept { return core_->size(); }
uint32_t Communicator::id() const noexcept { return core_->id(); }
void Communicator::abort() { core_->abort(); }
Status Communicator::failure() const { return core_->failure(); }

namespace {
// `call`: the communicator's configuration with the call's CollectiveOptions applied.
Status run(CommCore& c, Prepared p, const Result<CollConfig>& call) {
  if (!p.check.is_ok()) return p.check;
  if (!call.is_ok()) return call.status();
  if (p.whole) return c.run([&](Op& op) { return p.whole(op, 0, p.count); }, *call);
  return c.run(p.body, *call);
}
Request post(CommCore& c, Prepared p, const Result<CollConfig>& call) {
  Status check = p.check.is_ok() ? call.status() : p.check;
  if (!check.is_ok()) return detail::make_request(detail::RequestState::completed(check, 0, Tag{}));
  if (p.whole) {
    return c.post([whole = std::move(p.whole), count = p.count](Op& op) { return whole(op, 0, count); }, *call);
  }
  return c.post(std::move(p.body), *call);
}
Result<CollConfig> call_config(CommCore& c, CollectiveKind kind, const CollectiveOptions& options) {
  return coll::call_config(c.config(), kind, options);
}
/// The operations CollectiveKind does not name: their one algorithm family.
Result<CollConfig> call_config(CommCore& c, std::string_view what, Algo only, const CollectiveOptions& options) {
  return coll::call_config(c.config(), what, {only}, nullptr, options);
}

/// An allgatherv's: the ring, under its name (kRing: one ring, host by host where the
/// ranks span hosts, never the allgather's two levels).
Result<CollConfig> allgatherv_config(CommCore& c, const CollectiveOptions& options) {
  return coll::call_config(c.config(), "allgatherv", {Algo::kRing}, &CollConfig::allgather, options);
}

/// An alltoallv's: pairwise, as an alltoall's, and under its name (kPairwise: by
/// messages even where the blocks fit the shared segment).
Result<CollConfig> alltoallv_config(CommCore& c, const CollectiveOptions& options) {
  return coll::call_config(c.config(), "alltoallv", {Algo::kPairwise}, &CollConfig::alltoall, options);
}

/// The bytes a v-form's buffer spans: the end of its furthest block.
size_t extent(std::span<const size_t> counts, std::span<const size_t> displs, DataType type) {
  size_t end = 0;
  for (size_t i = 0; i < counts.size() && i < displs.size(); ++i) {
    if (counts[i] != 0) end = std::max(end, displs[i] + counts[i]);
  }
  return end * size_of(type);
}

/// `body`, its buffers of device memory staged through host memory (coll/device_stage.h),
/// once `check` passed (nothing is allocated for a refused call). `stage` maps the
/// buffers and returns the body over the mapped ones.
template <typename Stage>
Prepared prepare(CommCore& c, Status check, Stage stage) {
  if (!check.is_ok()) return {std::move(check), {}};
  coll::DeviceStage staging(c);
  CommCore::Body body = stage(staging);
  return {Status::ok(), staging.wrap(std::move(body))};
}

/// As prepare, for a collective whose buffers are `blocks` blocks of `count` elements
/// of `elem` bytes (one block: allreduce, reduce, broadcast, scan; a block per rank:
/// allgather, gather, scatter, alltoall, reduce_scatter): `stage` maps the buffers and
/// returns what runs the collective on elements [first, first + m) of every block of
/// the mapped ones, so that device buffers can be staged segment by segment
/// (coll/device_stage.h).
template <typename Stage>
Prepared prepare_segmented(CommCore& c, Status check, size_t count, size_t elem, size_t blocks, Stage stage) {
  if (!check.is_ok()) return {std::move(check), {}};
  coll::DeviceStage staging(c);
  coll::DeviceStage::SegmentFn run = stage(staging);
  if (staging.runs_whole(count, elem, blocks)) return {Status::ok(), {}, std::move(run), count};
  return {Status::ok(), staging.wrap_segmented(count, elem, blocks, std::move(run))};
}
template <typename Stage>
Prepared prepare_elementwise(CommCore& c, Status check, size_t count, size_t elem, Stage stage) {
  return prepare_segmented(c, std::move(check), count, elem, 1, std::move(stage));
}

/// The blocks of segment [first, first + m) of a buffer of `n` blocks of `count`
/// elements (`mapped` is what DeviceStage made of `original`), as a v-form takes them:
/// a base, m elements per block, and each block's displacement from the base.
struct SegmentLayout {
  void* base = nullptr;
  std::vector<size_t> counts, displs;
  bool packed = false;  ///< staged: the blocks lie one after the other
};
SegmentLayout segment_layout(const void* original, const void* mapped, size_t count, size_t n, size_t elem,
                             size_t first, size_t m) {
  SegmentLayout l;
  const auto b = coll::DeviceStage::segment_blocks(original, mapped, count, n, elem, first, m);
  l.base = b.base;
  l.packed = mapped != original;
  l.counts.assign(n, m);
  for (size_t i = 0; i < n; ++i) l.displs.push_back(i * b.stride);
  return l;
}

/// The blocks of `l` packed one after the other into `scratch` (for a collective that
/// has no v-form, when the buffer is host memory and so keeps its own layout).
const void* packed(const SegmentLayout& l, size_t elem, std::vector<std::byte>& scratch) {
  if (l.packed) return l.base;
  const size_t m = l.counts.empty() ? 0 : l.counts[0];
  scratch.resize(l.counts.size() * m * elem);
  for (size_t i = 0; i < l.counts.size(); ++i) {
    std::memcpy(scratch.data() + i * m * elem, static_cast<const std::byte*>(l.base) + l.displs[i] * elem, m * elem);
  }
  return scratch.data();
}

/// Element `first` of a buffer of `elem`-byte elements (nullptr and kInPlace stay).
template <typename T>
T* at(T* p, size_t first, size_t elem) {
  if (p == nullptr || p == kInPlace) return p;
  using Byte = std::conditional_t<std::is_const_v<T>, const std::byte, std::byte>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(p) + first * elem);
}

// One Prepared per operation; the blocking and asynchronous forms share it.
Prepared prep_barrier() {
  return {Status::ok(), [](Op& op) { return coll::barrier(op); }};
}
Prepared prep_broadcast(CommCore& c, void* buf, size_t count, DataType type, int root) {
  const size_t e = size_of(type);
  return prepare_elementwise(c, first_error({c.check_root(root), check_buffer("broadcast", buf, count, type, false)}),
                             count, e, [&](coll::DeviceStage& st) -> coll::DeviceStage::SegmentFn {
                               void* b = st.inout(buf, count * e);
                               return [=](Op& op, size_t first, size_t n) {
                                 return coll::broadcast(op, at(b, first, e), n, type, root);
                               };
                             });
}
Prepared prep_reduce(CommCore& c, const void* send, void* recv, size_t count, DataType type, ReduceOp rop, int root) {
  const bool is_root = c.rank() == root;
  const size_t e = size_of(type);
  return prepare_elementwise(
      c,
      first_error({c.check_root(root), check_op(type, rop), check_buffer("reduce send", send, count, type, is_root),
                   check_buffer("reduce recv", is_root ? recv : nullptr, is_root ? count : 0, type, false)}),
      count, e, [&](coll::DeviceStage& st) -> coll::DeviceStage::SegmentFn {
        const size_t bytes = count * e;
        const void* s = st.in(send, bytes);
        void* r = st.inout(is_root ? recv : nullptr, is_root ? bytes : 0);
        if (!is_root) r = recv;
        return [=](Op& op, size_t first, size_t n) {
          return coll::reduce(op, at(resolve(s, r), first, e), at(r, first, e), n, type, rop, root);
        };
      });
}
Prepared prep_allreduce(CommCore& c, const void* send, void* recv, size_t count, DataType type, ReduceOp rop) {
  const size_t e = size_of(type);
  return prepare_elementwise(c,
                             first_error({check_op(type, rop), check_buffer("allreduce send", send, count, type, true),
                                          check_buffer("allreduce recv", recv, count, type, false)}),
                             count, e, [&](coll::DeviceStage& st) -> coll::DeviceStage::SegmentFn {
                               const size_t bytes = count * e;
                               const void* s = st.in(send, bytes);
                               void* r = st.inout(recv, bytes);
                               return [=](Op& op, size_t first, size_t n) {
                                 return coll::allreduce(op, at(resolve(s, r), first, e), at(r, first, e), n, type, rop);
                               };
                             });
}
Prepared prep_gather(CommCore& c, const void* send, void* recv, size_t count, DataType type, int root) {
  const bool is_root = c.rank() == root;
  const size_t e = size_of(type), n = static_cast<size_t>(c.size());
  return prepare_segmented(
      c,
      first_error({c.check_root(root), check_buffer("gather send", send, count, type, is_root),
                   check_buffer("gather recv", is_root ? recv : nullptr, is_root ? count * n : 0, type, false)}),
      count, e, n, [&](coll::DeviceStage& st) -> coll::DeviceStage::SegmentFn {
        const void* s = st.in(send, count * e);
        void* r = is_root ? st.inout_blocks(recv, count, n, n, e) : recv;
        return [=](Op& op, size_t first, size_t m) {
          if (m == count) return coll::gather(op, in_place_null(s), r, count, type, root);
          const SegmentLayout l = segment_layout(recv, r, count, n, e, first, m);
          return coll::gatherv(op, in_place_null(at(s, first, e)), m, l.base, l.counts, l.displs, type, root);
        };
      });
}
Prepared prep_gatherv(CommCore& c, const void* send, size_t send_count, void* recv, std::span<const size_t> counts,
                      std::span<const size_t> displs, DataType type, int root) {
  const bool is_root = c.rank() == root;
  return prepare(c,
                 first_error({c.check_root(root), check_buffer("gatherv send", send, send_count, type, is_root),
                              is_root ? check_counts("gatherv", counts, displs, c.size(), type) : Status::ok(),
                              check_buffer("gatherv recv", is_root ? recv : nullptr, is_root ? 1 : 0, type, false)}),
                 [&](coll::DeviceStage& st) -> CommCore::Body {
                   const void* s = st.in(send, send_count * size_of(type));
                   void* r = is_root ? st.inout(recv, extent(counts, displs, type)) : recv;
                   return [=](Op& op) {
                     return coll::gatherv(op, in_place_null(s), send_count, r, counts, displs, type, root);
                   };
                 });
}
Prepared prep_scatter(CommCore& c, const void* send, void* recv, size_t count, DataType type, int root) {
  const bool is_root = c.rank() == root;
  const size_t e = size_of(type), n = static_cast<size_t>(c.size());
  return prepare_segmented(
      c,
      first_error({c.check_root(root),
                   check_buffer("scatter send", is_root ? send : nullptr, is_root ? count * n : 0, type, false),
                   check_buffer("scatter recv", recv, count, type, is_root)}),
      count, e, n, [&](coll::DeviceStage& st) -> coll::DeviceStage::SegmentFn {
        const void* s = is_root ? st.in_blocks(send, count, n, e) : send;
        void* r = st.inout(recv, count * e);
        return [=](Op& op, size_t first, size_t m) {
          void* mine = r == kInPlace ? nullptr : r;
          if (m == count) return coll::scatter(op, s, mine, count, type, root);
          const SegmentLayout l = segment_layout(send, s, count, n, e, first, m);
          return coll::scatterv(op, l.base, l.counts, l.displs, at(mine, first, e), m, type, root);
        };
      });
}
Prepared prep_scatterv(CommCore& c, const void* send, std::span<const size_t> counts, std::span<const size_t> displs,
                       void* recv, size_t recv_count, DataType type, int root) {
  const bool is_root = c.rank() == root;
  return prepare(c,
                 first_error({c.check_root(root),
                              is_root ? check_counts("scatterv", counts, displs, c.size(), type) : Status::ok(),
                              check_buffer("scatterv send", is_root ? send : nullptr, is_root ? 1 : 0, type, false),
                              check_buffer("scatterv recv", recv, recv_count, type, is_root)}),
                 [&](coll::DeviceStage& st) -> CommCore::Body {
                   const void* s = is_root ? st.in(send, extent(counts, displs, type)) : send;
                   void* r = st.inout(recv, recv_count * size_of(type));
                   return [=](Op& op) {
                     return coll::scatterv(op, s, counts, displs, r == kInPlace ? nullptr : r, recv_count, type, root);
                   };
                 });
}
Prepared prep_allgather(CommCore& c, const void* send, void* recv, size_t count, DataType type) {
  const size_t e = size_of(type), n = static_cast<size_t>(c.size());
  return prepare_segmented(c,
                           first_error({check_buffer("allgather send", send, count, type, true),
                                        check_buffer("allgather recv", recv, count * n, type, false)}),
                           count, e, n, [&](coll::DeviceStage& st) -> coll::DeviceStage::SegmentFn {
                             const void* s = st.in(send, count * e);
                             void* r = st.inout_blocks(recv, count, n, n, e);
                             return [=](Op& op, size_t first, size_t m) {
                               if (m == count) return coll::allgather(op, in_place_null(s), r, count, type);
                               const SegmentLayout l = segment_layout(recv, r, count, n, e, first, m);
                               return coll::allgatherv(op, in_place_null(at(s, first, e)), m, l.base, l.counts,
                                                       l.displs, type);
                             };
                           });
}
Prepared prep_allgatherv(CommCore& c, const void* send, size_t send_count, void* recv, std::span<const size_t> counts,
                         std::span<const size_t> displs, DataType type) {
  return prepare(c,
                 first_error({check_buffer("allgatherv send", send, send_count, type, true),
                              check_counts("allgatherv", counts, displs, c.size(), type)}),
                 [&](coll::DeviceStage& st) -> CommCore::Body {
                   const void* s = st.in(send, send_count * size_of(type));
                   void* r = st.inout(recv, extent(counts, displs, type));
                   return [=](Op& op) {
                     return coll::allgatherv(op, in_place_null(s), send_count, r, counts, displs, type);
                   };
                 });
}
Prepared prep_reduce_scatter(CommCore& c, const void* send, void* recv, size_t recv_count, DataType type,
                             ReduceOp rop) {
  const size_t e = size_of(type), n = static_cast<size_t>(c.size());
  const bool in_place = send == kInPlace;
  return prepare_segmented(
      c,
      first_error({check_op(type, rop), check_buffer("reduce_scatter send", send, recv_count * n, type, true),
                   check_buffer("reduce_scatter recv", recv, in_place ? recv_count * n : recv_count, type, false)}),
      recv_count, e, n, [&](coll::DeviceStage& st) -> coll::DeviceStage::SegmentFn {
        // In place, the input is recv's n blocks and the result its first block.
        const void* s = in_place ? kInPlace : st.in_blocks(send, recv_count, n, e);
        void* r = in_place ? st.inout_blocks(recv, recv_count, n, 1, e) : st.inout(recv, recv_count * e);
        return [=](Op& op, size_t first, size_t m) {
          if (m == recv_count) return coll::reduce_scatter(op, resolve(s, r), r, recv_count, type, rop);
          // No v-form: a segment's input must be packed (staged buffers are already).
          const SegmentLayout l = in_place ? segment_layout(recv, r, recv_count, n, e, first, m)
                                           : segment_layout(send, s, recv_count, n, e, first, m);
          std::vector<std::byte> scratch;
          const void* input = packed(l, e, scratch);
          // Staged in place: the result goes to the segment's first packed block, which
          // is what is written back (out_blocks 1); host memory: straight into recv.
          void* out = in_place && l.packed ? l.base : at(r, first, e);
          return coll::reduce_scatter(op, input, out, m, type, rop);
        };
      });
}
Prepared prep_alltoall(CommCore& c, const void* send, void* recv, size_t count, DataType type) {
  const size_t e = size_of(type), n = static_cast<size_t>(c.size());
  return prepare_segmented(c,
                           first_error({check_buffer("alltoall send", send, count * n, type, false),
                                        check_buffer("alltoall recv", recv, count * n, type, false)}),
                           count, e, n, [&](coll::DeviceStage& st) -> coll::DeviceStage::SegmentFn {
                             const void* s = st.in_blocks(send, count, n, e);
                             void* r = st.inout_blocks(recv, count, n, n, e);
                             return [=](Op& op, size_t first, size_t m) {
                               if (m == count) return coll::alltoall(op, s, r, count, type);
                               const SegmentLayout ls = segment_layout(send, s, count, n, e, first, m);
                               const SegmentLayout lr = segment_layout(recv, r, count, n, e, first, m);
                               return coll::alltoallv(op, ls.base, ls.counts, ls.displs, lr.base, lr.counts, lr.displs,
                                                      type);
                             };
                           });
}
Prepared prep_alltoallv(CommCore& c, const void* send, std::span<const size_t> scounts, std::span<const size_t> sdispls,
                        void* recv, std::span<const size_t> rcounts, std::span<const size_t> rdispls, DataType type) {
  return prepare(c,
                 first_error({check_counts("alltoallv send", scounts, sdispls, c.size(), type),
                              check_counts("alltoallv recv", rcounts, rdispls, c.size(), type),
                              check_buffer("alltoallv send", send, 0, type, false),
                              check_buffer("alltoallv recv", recv, 0, type, false)}),
                 [&](coll::DeviceStage& st) -> CommCore::Body {
                   const void* s = st.in(send, extent(scounts, sdispls, type));
                   void* r = st.inout(recv, extent(rcounts, rdispls, type));
                   return [=](Op& op) { return coll::alltoallv(op, s, scounts, sdispls, r, rcounts, rdispls, type); };
                 });
}
Prepared prep_scan(CommCore& c, bool exclusive, const void* send, void* recv, size_t count, DataType type,
                   ReduceOp rop) {
  // A prefix has no single divisor that kAvg could mean (the communicator's size? the
  // prefix's length?), so scans refuse it rather than pick one silently.
  Status no_avg = rop == ReduceOp::kAvg ? invalid("avg is not defined for scan and exscan") : Status::ok();
  const size_t e = size_of(type);
  return prepare_elementwise(
      c,
      first_error({no_avg, check_op(type, rop), check_buffer("scan send", send, count, type, true),
                   check_buffer("scan recv", recv, count, type, false)}),
      count, e, [&](coll::DeviceStage& st) -> coll::DeviceStage::SegmentFn {
        const void* s = st.in(send, count * e);
        void* r = st.inout(recv, count * e);
        return [=](Op& op, size_t first, size_t m) {
          const void* in = at(resolve(s, r), first, e);
          void* out = at(r, first, e);
          return exclusive ? coll::exscan(op, in, out, m, type, rop) : coll::scan(op, in, out, m, type, rop);
        };
      });
}

}  // namespace

AlgorithmChoice Communicator::algorithm(CollectiveKind kind, size_t bytes, const CollectiveOptions& options) const {
  auto call = coll::call_config(core_->config(), kind, options);
  if (!call.is_ok()) return {"invalid", 0};
  const coll::Algo a = coll::select_algorithm(kind, *call, size(), bytes);
  if (core_->shm_on() && a != coll::Algo::kLocal &&
      (coll::shm_takes(kind, *call, bytes, *core_->shm()) || coll::two_level_takes(kind, *call, bytes, *core_->shm()))) {
    return coll::shm_algorithm(kind, *call, bytes, *core_->shm());
  }
  if (core_->shm_on() && a == coll::Algo::kTree && !core_->shm()->flat() &&
      (kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce)) {
    // The tree among the groups' representatives, then within each group.
    const coll::ShmPlan& plan = *core_->shm();
    return {"tree", coll::algorithm_steps(kind, a, static_cast<int>(plan.leaders.size())) +
                        coll::algorithm_steps(kind, a, plan.widest)};
  }
  return {coll::to_string(a), coll::algorithm_steps(kind, a, size())};
}

// --- point to point -------------------------------------------------------------------

namespace {
/// A user tag takes the low 32 bits of the wire tag (comm_core.h).
Status check_tag(const char* what, Tag tag) {
  const auto value = static_cast<uint64_t>(tag);
  if (value > UINT32_MAX) return invalid(fmt::format("{}: tag {} does not fit in 32 bits", what, value));
  return Status::ok();
}
}  // namespace

Request Communicator::isend(const void* buf, size_t count, DataType type, int peer, Tag tag) {
  Status s =
      first_error({core_->check_peer(peer), check_buffer("send", buf, count, type, false), check_tag("send", tag)});
  if (!s.is_ok()) return detail::make_request(detail::RequestState::completed(s, 0, Tag{}));
  return core_->send_user(buf, count * size_of(type), peer, static_cast<uint32_t>(tag));
}
Request Communicator::irecv(void* buf, size_t count, DataType type, int peer, Tag tag) {
  Status s =
      first_error({core_->check_peer(peer), check_buffer("recv", buf, count, type, false), check_tag("recv", tag)});
  if (!s.is_ok()) return detail::make_request(detail::RequestState::completed(s, 0, Tag{}));
  return core_->recv_user(buf, count * size_of(type), peer, static_cast<uint32_t>(tag));
}
Request Communicator::irecv_any(void* buf, size_t count, DataType type, Tag tag, int* source) {
  Status s = first_error({check_buffer("recv", buf, count, type, false), check_tag("recv", tag)});
  if (s.is_ok() && size() < 2) s = invalid("recv from any rank: this communicator has no other rank");
  if (!s.is_ok()) return detail::make_request(detail::RequestState::completed(s, 0, Tag{}));
  return core_->recv_user_any(buf, count * size_of(type), static_cast<uint32_t>(tag), source);
}
Request Communicator::put(int peer, std::span<const std::byte> local, const RemoteKey& key, uint64_t remote_offset,
                          std::optional<uint32_t> notify) {
  Status s = core_->check_peer(peer);
  if (s.is_ok() && local.data() == nullptr && !local.empty()) s = invalid("put: null buffer");
  if (!s.is_ok()) return detail::make_request(detail::RequestState::completed(s, 0, Tag{}));
  return core_->put_user(peer, local, key, remote_offset, notify);
}
Result<uint32_t> Communicator::wait_notification(int from, Duration timeout) {
  if (Status s = core_->check_peer(from); !s.is_ok()) return s;
  if (timeout == kDefaultTimeout) timeout = core_->config().timeout;
  if (timeout < Duration::zero()) return invalid("wait_notification: negative timeout");
  return core_->wait_user_notification(from, timeout);
}
Status Communicator::send(const void* buf, size_t count, DataType type, int peer, Tag tag) {
  return isend(buf, count, type, peer, tag).wait(core_->config().timeout);
}
Status Communicator::recv(void* buf, size_t count, DataType type, int peer, Tag tag) {
  return irecv(buf, count, type, peer, tag).wait(core_->config().timeout);
}

// --- collectives ------------------------------------------------------------------------

Status Communicator::barrier(const CollectiveOptions& options) {
  return run(*core_, prep_barrier(), call_config(*core_, CollectiveKind::kBarrier, options));
}
Request Communicator::ibarrier(const CollectiveOptions& options) {
  return post(*core_, prep_barrier(), call_config(*core_, CollectiveKind::kBarrier, options));
}
Status Communicator::broadcast(void* buf, size_t count, DataType type, int root, const CollectiveOptions& options) {
  return run(*core_, prep_broadcast(*core_, buf, count, type, root),
             call_config(*core_, CollectiveKind::kBroadcast, options));
}
Request Communicator::ibroadcast(void* buf, size_t count, DataType type, int root, const CollectiveOptions& options) {
  return post(*core_, prep_broadcast(*core_, buf, count, type, root),
              call_config(*core_, CollectiveKind::kBroadcast, options));
}
Status Communicator::reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root,
                            const CollectiveOptions& options) {
  return run(*core_, prep_reduce(*core_, send, recv, count, type, op, root),
             call_config(*core_, CollectiveKind::kReduce, options));
}
Request Communicator::ireduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root,
                              const CollectiveOptions& options) {
  return post(*core_, prep_reduce(*core_, send, recv, count, type, op, root),
              call_config(*core_, CollectiveKind::kReduce, options));
}
Status Communicator::allreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                               const CollectiveOptions& options) {
  return run(*core_, prep_allreduce(*core_, send, recv, count, type, op),
             call_config(*core_, CollectiveKind::kAllreduce, options));
}
Request Communicator::iallreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                                 const CollectiveOptions& options) {
  return post(*core_, prep_allreduce(*core_, send, recv, count, type, op),
              call_config(*core_, CollectiveKind::kAllreduce, options));
}
Status Communicator::gather(const void* send, void* recv, size_t count, DataType type, int root,
                            const CollectiveOptions& options) {
  return run(*core_, prep_gather(*core_, send, recv, count, type, root),
             call_config(*core_, CollectiveKind::kGather, options));
}
Request Communicator::igather(const void* send, void* recv, size_t count, DataType type, int root,
                              const CollectiveOptions& options) {
  return post(*core_, prep_gather(*core_, send, recv, count, type, root),
              call_config(*core_, CollectiveKind::kGather, options));
}
Status Communicator::gatherv(const void* send, size_t send_count, void* recv, std::span<const size_t> recv_counts,
                             std::span<const size_t> displs, DataType type, int root,
                             const CollectiveOptions& options) {
  return run(*core_, prep_gatherv(*core_, send, send_count, recv, recv_counts, displs, type, root),
             call_config(*core_, "gatherv", Algo::kLinear, options));
}
Request Communicator::igatherv(const void* send, size_t send_count, void* recv, std::span<const size_t> recv_counts,
                               std::span<const size_t> displs, DataType type, int root,
                               const CollectiveOptions& options) {
  return post(*core_, prep_gatherv(*core_, send, send_count, recv, recv_counts, displs, type, root),
              call_config(*core_, "gatherv", Algo::kLinear, options));
}
Status Communicator::scatter(const void* send, void* recv, size_t count, DataType type, int root,
                             const CollectiveOptions& options) {
  return run(*core_, prep_scatter(*core_, send, recv, count, type, root),
             call_config(*core_, CollectiveKind::kScatter, options));
}
Request Communicator::iscatter(const void* send, void* recv, size_t count, DataType type, int root,
                               const CollectiveOptions& options) {
  return post(*core_, prep_scatter(*core_, send, recv, count, type, root),
              call_config(*core_, CollectiveKind::kScatter, options));
}
Status Communicator::scatterv(const void* send, std::span<const size_t> send_counts, std::span<const size_t> displs,
                              void* recv, size_t recv_count, DataType type, int root,
                              const CollectiveOptions& options) {
  return run(*core_, prep_scatterv(*core_, send, send_counts, displs, recv, recv_count, type, root),
             call_config(*core_, "scatterv", Algo::kLinear, options));
}
Request Communicator::iscatterv(const void* send, std::span<const size_t> send_counts, std::span<const size_t> displs,
                                void* recv, size_t recv_count, DataType type, int root,
                                const CollectiveOptions& options) {
  return post(*core_, prep_scatterv(*core_, send, send_counts, displs, recv, recv_count, type, root),
              call_config(*core_, "scatterv", Algo::kLinear, options));
}
Status Communicator::allgather(const void* send, void* recv, size_t count, DataType type,
                               const CollectiveOptions& options) {
  return run(*core_, prep_allgather(*core_, send, recv, count, type),
             call_config(*core_, CollectiveKind::kAllgather, options));
}
Request Communicator::iallgather(const void* send, void* recv, size_t count, DataType type,
                                 const CollectiveOptions& options) {
  return post(*core_, prep_allgather(*core_, send, recv, count, type),
              call_config(*core_, CollectiveKind::kAllgather, options));
}
Status Communicator::allgatherv(const void* send, size_t send_count, void* recv, std::span<const size_t> recv_counts,
                                std::span<const size_t> displs, DataType type, const CollectiveOptions& options) {
  return run(*core_, prep_allgatherv(*core_, send, send_count, recv, recv_counts, displs, type),
             allgatherv_config(*core_, options));
}
Request Communicator::iallgatherv(const void* send, size_t send_count, void* recv, std::span<const size_t> recv_counts,
                                  std::span<const size_t> displs, DataType type, const CollectiveOptions& options) {
  return post(*core_, prep_allgatherv(*core_, send, send_count, recv, recv_counts, displs, type),
              allgatherv_config(*core_, options));
}
Status Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op,
                                    const CollectiveOptions& options) {
  return run(*core_, prep_reduce_scatter(*core_, send, recv, recv_count, type, op),
             call_config(*core_, CollectiveKind::kReduceScatter, options));
}
Request Communicator::ireduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op,
                                      const CollectiveOptions& options) {
  return post(*core_, prep_reduce_scatter(*core_, send, recv, recv_count, type, op),
              call_config(*core_, CollectiveKind::kReduceScatter, options));
}
Status Communicator::alltoall(const void* send, void* recv, size_t count, DataType type,
                              const CollectiveOptions& options) {
  return run(*core_, prep_alltoall(*core_, send, recv, count, type),
             call_config(*core_, CollectiveKind::kAlltoall, options));
}
Request Communicator::ialltoall(const void* send, void* recv, size_t count, DataType type,
                                const CollectiveOptions& options) {
  return post(*core_, prep_alltoall(*core_, send, recv, count, type),
              call_config(*core_, CollectiveKind::kAlltoall, options));
}
Status Communicator::alltoallv(const void* send, std::span<const size_t> send_counts,
                               std::span<const size_t> send_displs, void* recv, std::span<const size_t> recv_counts,
                               std::span<const size_t> recv_displs, DataType type, const CollectiveOptions& options) {
  return run(*core_, prep_alltoallv(*core_, send, send_counts, send_displs, recv, recv_counts, recv_displs, type),
             alltoallv_config(*core_, options));
}
Request Communicator::ialltoallv(const void* send, std::span<const size_t> send_counts,
                                 std::span<const size_t> send_displs, void* recv, std::span<const size_t> recv_counts,
                                 std::span<const size_t> recv_displs, DataType type, const CollectiveOptions& options) {
  return post(*core_, prep_alltoallv(*core_, send, send_counts, send_displs, recv, recv_counts, recv_displs, type),
              alltoallv_config(*core_, options));
}
Status Communicator::scan(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                          const CollectiveOptions& options) {
  return run(*core_, prep_scan(*core_, false, send, recv, count, type, op),
             call_config(*core_, "scan", Algo::kRecursiveDoubling, options));
}
Request Communicator::iscan(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                            const CollectiveOptions& options) {
  return post(*core_, prep_scan(*core_, false, send, recv, count, type, op),
              call_config(*core_, "scan", Algo::kRecursiveDoubling, options));
}
Status Communicator::exscan(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                            const CollectiveOptions& options) {
  return run(*core_, prep_scan(*core_, true, send, recv, count, type, op),
             call_config(*core_, "exscan", Algo::kRecursiveDoubling, options));
}
Request Communicator::iexscan(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                              const CollectiveOptions& options) {
  return post(*core_, prep_scan(*core_, true, send, recv, count, type, op),
              call_config(*core_, "exscan", Algo::kRecursiveDoubling, options));
}

// --- split ------------------------------------------------------------------------------

Result<std::unique_ptr<Communicator>> Communicator::split(int color, int key) {
  struct Entry {
    int32_t color;
    int32_t key;
    uint32_t next_id;
  };
  const int n = size();
  std::vector<Entry> all(static_cast<size_t>(n));
  all[static_cast<size_t>(rank())] = {color < 0 ? -1 : color, key, core_->world().next_comm_id()};
  // Everyone tells everyone (a small all-to-all of 12-byte entries).
  Status s = core_->run([&](Op& op) {
    std::vector<Request> reqs;
    for (int p = 0; p < n; ++p) {
      if (p == op.rank()) continue;
      reqs.push_back(op.recv(p, &all[static_cast<size_t>(p)], sizeof(Entry)));
      reqs.push_back(op.send(p, &all[static_cast<size_t>(op.rank())], sizeof(Entry)));
    }
    return op.wait_all(reqs);
  });
  if (!s.is_ok()) return s;
  uint32_t floor = 0;
  std::vector<int32_t> colors;
  for (const Entry& e : all) {
    floor = std::max(floor, e.next_id);
    if (e.color >= 0) colors.push_back(e.color);
  }
  std::sort(colors.begin(), colors.end());
  colors.erase(std::unique(colors.begin(), colors.end()), colors.end());
  constexpr uint32_t kMaxCommId = (1u << 23) - 2;  // the top id is reserved for the mesh hello
  if (floor + colors.size() > kMaxCommId) {
    return Status(StatusCode::kNoResource, "split: communicator ids exhausted (2^23 per job)");
  }
  core_->world().note_comm_ids_used(floor + static_cast<uint32_t>(colors.size()));
  if (color < 0) return std::unique_ptr<Communicator>{};
  const uint32_t id =
      floor + static_cast<uint32_t>(std::lower_bound(colors.begin(), colors.end(), color) - colors.begin());
  std::vector<int> order;  // comm ranks of the parent with my colour, by (key, parent rank)
  for (int p = 0; p < n; ++p) {
    if (all[static_cast<size_t>(p)].color == color) order.push_back(p);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return all[static_cast<size_t>(a)].key < all[static_cast<size_t>(b)].key; });
  std::vector<int> members;
  int my_rank = -1;
  for (int p : order) {
    if (p == rank()) my_rank = static_cast<int>(members.size());
    members.push_back(core_->world_rank(p));
  }
  auto child = std::make_shared<CommCore>(core_->world_ptr(), id, std::move(members), my_rank, core_->config());
  return coll::CommAccess::make(std::move(child));
}

}  // namespace remora
