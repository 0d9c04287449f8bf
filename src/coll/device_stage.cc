// coll/device_stage.cc — see device_stage.h.
#include "coll/device_stage.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "coll/algorithms.h"
#include "remora/context.h"

namespace remora::coll {

DeviceStage::DeviceStage(CommCore& comm) : comm_(comm) {}

void* DeviceStage::stage(const void* p, size_t bytes, bool written, size_t blocks, size_t out_blocks, size_t stride) {
  if (p == nullptr || p == kInPlace || bytes == 0) return const_cast<void*>(p);
  MemoryDomain* device = comm_.world().context().device_domain_of(p, bytes);
  if (device == nullptr) return const_cast<void*>(p);
  auto host = std::make_shared<std::vector<std::byte>>(bytes);
  staged_.push_back(Staged{device, const_cast<void*>(p), bytes, written, host, blocks, out_blocks, stride});
  return host->data();
}

const void* DeviceStage::in(const void* p, size_t bytes) { return stage(p, bytes, false); }
void* DeviceStage::inout(void* p, size_t bytes) { return stage(p, bytes, true); }

const void* DeviceStage::in_blocks(const void* p, size_t count, size_t blocks, size_t elem) {
  return stage(p, count * blocks * elem, false, blocks, blocks, count);
}
void* DeviceStage::inout_blocks(void* p, size_t count, size_t blocks, size_t out_blocks, size_t elem) {
  return stage(p, count * blocks * elem, true, blocks, out_blocks, count);
}

DeviceStage::SegmentBlocks DeviceStage::segment_blocks(const void* original, const void* mapped, size_t count,
                                                       size_t blocks, size_t elem, size_t first, size_t m) {
  auto* base = static_cast<std::byte*>(const_cast<void*>(mapped));
  if (base == nullptr || mapped == kInPlace) return {base, count};
  if (mapped == original) return {base + first * elem, count};  // host memory: its own layout
  return {base + blocks * first * elem, m};                     // staged: the segment's blocks packed
}

namespace {
/// The copy's host buffer stays alive until the copy has ended, also when a wait for
/// it gives up first (the collective fails and its body, which owns the buffer, goes).
void keep_until_done(AsyncCopy& copy, const std::shared_ptr<std::vector<std::byte>>& host) {
  copy.on_done([host] {});
}

Status copy_and_wait(Result<std::unique_ptr<AsyncCopy>> copy, const std::shared_ptr<std::vector<std::byte>>& host,
                     Duration timeout, std::string_view what, const MemoryDomain& domain, size_t bytes) {
  if (copy) keep_until_done(**copy, host);
  Status s = copy ? (*copy)->wait(timeout) : copy.status();
  if (s.is_ok()) return s;
  return s.with_context(fmt::format("collective: staging {} bytes {} {} memory", bytes, what, domain.name()));
}

/// Copies block `i` of segment [first, first + m) of `s` in (device to host, into the
/// segment's packed layout: device_stage.h) or out.
Result<std::unique_ptr<AsyncCopy>> copy_segment_block(const DeviceStage::Staged& s, bool in, size_t elem, size_t i,
                                                      size_t first, size_t m) {
  std::byte* host = s.host->data() + (s.blocks * first + i * m) * elem;
  std::byte* device = static_cast<std::byte*>(s.device) + (i * s.stride + first) * elem;
  return in ? s.domain->copy_to_host(host, device, m * elem) : s.domain->copy_from_host(device, host, m * elem);
}

/// Waits for every copy of `copies` (each bounded by what is left of the op), clears
/// it, and returns the first failure.
Status wait_copies(std::vector<std::unique_ptr<AsyncCopy>>& copies, const Op& op, const char* what) {
  Status first;
  for (auto& c : copies) {
    const auto left = op.deadline() - Clock::now();
    Status s = c->wait(left > Clock::duration::zero() ? Duration(left) : Duration(std::chrono::milliseconds(1)));
    if (!s.is_ok() && first.is_ok()) first = s.with_context(fmt::format("collective: staging a segment {}", what));
  }
  copies.clear();
  return first;
}

/// The pipelined form (device_stage.h): segment k's collective while segment k + 1 is
/// copied in and segment k - 1 out. Whatever fails, every copy started is waited for
/// before this returns: the host buffers go when the body does.
Status run_segments(Op& op, const std::vector<DeviceStage::Staged>& staged, size_t count, size_t elem, size_t segment,
                    const DeviceStage::SegmentFn& run) {
  const size_t segments = (count + segment - 1) / segment;
  std::vector<std::unique_ptr<AsyncCopy>> ins, outs;
  const auto start = [&](bool in, size_t k, std::vector<std::unique_ptr<AsyncCopy>>& into) -> Status {
    const size_t first = k * segment, n = std::min(segment, count - first);
    for (const DeviceStage::Staged& s : staged) {
      if (!in && !s.written) continue;
      for (size_t i = 0; i < (in ? s.blocks : s.out_blocks); ++i) {
        auto copy = copy_segment_block(s, in, elem, i, first, n);
        if (!copy) {
          return copy.status().with_context(
              fmt::format("collective: staging a segment {} {} memory", in ? "out of" : "into", s.domain->name()));
        }
        keep_until_done(**copy, s.host);
        into.push_back(std::move(*copy));
      }
    }
    return Status::ok();
  };
  Status status = start(true, 0, ins);
  if (status.is_ok()) status = wait_copies(ins, op, "out of device memory");
  for (size_t k = 0; k < segments && status.is_ok(); ++k) {
    if (k + 1 < segments) status = start(true, k + 1, ins);
    if (!status.is_ok()) break;
    const size_t first = k * segment;
    Op part(op.comm(), op.comm().reserve_seq(), op.deadline(), op.config());
    status = run(part, first, std::min(segment, count - first));
    if (status.is_ok()) status = start(false, k, outs);
    if (status.is_ok()) status = wait_copies(ins, op, "out of device memory");
  }
  Status in_flight = wait_copies(ins, op, "out of device memory");
  Status written = wait_copies(outs, op, "into device memory");
  if (!status.is_ok()) return status;
  return in_flight.is_ok() ? written : in_flight;
}

}  // namespace

bool DeviceStage::segmented(size_t count, size_t elem, size_t blocks, size_t* segment) const noexcept {
  const size_t elems = elem == 0 || blocks == 0 ? 0 : comm_.config().device_segment_bytes / (elem * blocks);
  if (segment != nullptr) *segment = elems;
  return elems != 0 && count / 4 >= elems;
}

CommCore::Body DeviceStage::wrap_segmented(size_t count, size_t elem, size_t blocks, SegmentFn run) {
  size_t segment = 0;
  if (!segmented(count, elem, blocks, &segment)) {
    return wrap([run = std::move(run), count](Op& op) { return run(op, 0, count); });
  }
  return [run = std::move(run), staged = std::move(staged_), count, elem, segment](Op& op) -> Status {
    // Whether any rank has device memory: every rank's pattern must be the same.
    uint8_t mine = staged.empty() ? 0 : 1, any = 0;
    Op agree(op.comm(), op.comm().reserve_seq(), op.deadline(), op.config());
    REMORA_RETURN_IF_ERROR(allreduce(agree, &mine, &any, 1, DataType::kUint8, ReduceOp::kMax));
    if (any == 0) return run(op, 0, count);  // host memory everywhere: as without staging
    return run_segments(op, staged, count, elem, segment, run);
  };
}

CommCore::Body DeviceStage::wrap(CommCore::Body body) {
  if (staged_.empty()) return body;
  return [body = std::move(body), staged = std::move(staged_)](Op& op) -> Status {
    const Duration timeout = op.config().timeout;
    for (const Staged& s : staged) {
      REMORA_RETURN_IF_ERROR(copy_and_wait(s.domain->copy_to_host(s.host->data(), s.device, s.bytes), s.host, timeout,
                                           "out of", *s.domain, s.bytes));
    }
    REMORA_RETURN_IF_ERROR(body(op));
    for (const Staged& s : staged) {
      if (!s.written) continue;
      REMORA_RETURN_IF_ERROR(copy_and_wait(s.domain->copy_from_host(s.device, s.host->data(), s.bytes), s.host, timeout,
                                           "into", *s.domain, s.bytes));
    }
    return Status::ok();
  };
}

}  // namespace remora::coll
