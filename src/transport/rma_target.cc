// transport/rma_target.cc — see rma_target.h. The target's rule (authenticate the key,
// then range, right and alignment, before any byte is touched) is described in
// docs/architecture.md ("One-sided operations"); the wire rules in docs/protocol.md.
#include "transport/rma_target.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "core/log.h"
#include "datapath/checksum.h"
#include "datapath/segments.h"

namespace remora::detail {

using wire::RmaStatus;

namespace {

/// Above the 57-bit user address space of 5-level paging: no real buffer is this large.
constexpr uint64_t kLargestHonestPut = uint64_t{1} << 57;

RmaStatus verdict_of(StatusCode code) {
  switch (code) {
    case StatusCode::kOutOfRange: return RmaStatus::kOutOfRange;
    case StatusCode::kAccessDenied: return RmaStatus::kAccessDenied;
    default: return RmaStatus::kInvalidKey;
  }
}

}  // namespace

RmaTarget::RmaTarget(Owner& owner, Notifications& notifications, DataPaths& paths, const MemoryRegistry* registry,
                     Limits limits, std::string peer, EndpointStats& stats)
    : owner_(owner),
      notifications_(notifications),
      paths_(paths),
      registry_(registry),
      limits_(limits),
      peer_(std::move(peer)),
      stats_(stats) {}

RmaTarget::~RmaTarget() = default;

RmaStatus RmaTarget::check_access(const wire::KeyBytes& key_bytes, uint64_t offset, uint64_t length, Access needed,
                                  RegionAccess* access) {
  auto key = RemoteKey::deserialize(key_bytes);
  if (!key) {
    REMORA_LOG(kDebug, "peer {}: refused a malformed key: {}", peer_, key.status().message());
    ++stats_.refused;
    return RmaStatus::kInvalidKey;
  }
  if (registry_ == nullptr) {
    ++stats_.refused;
    return RmaStatus::kInvalidKey;
  }
  auto granted = acquire_access(*registry_, *key, offset, length, needed);
  if (!granted) {
    REMORA_LOG(kDebug, "peer {}: refused access: {}", peer_, granted.status().message());
    ++stats_.refused;
    return verdict_of(granted.status().code());
  }
  *access = std::move(*granted);
  return RmaStatus::kOk;
}

bool RmaTarget::admit(uint64_t op_id) {
  if (served_puts_.contains(op_id) || served_gets_.contains(op_id)) {
    owner_.protocol_error("request reuses the id " + std::to_string(op_id) + " of an operation still in service");
    return false;
  }
  if (served_puts_.size() + served_gets_.size() + unsent_resps_.size() >= limits_.window) {
    owner_.protocol_error("more than " + std::to_string(limits_.window) +
                          " one-sided requests in service (REMORA_RMA_WINDOW advertised in the handshake)");
    return false;
  }
  return true;
}

RmaStatus RmaTarget::choose_end(const TransferSpec& spec, std::string_view what, PathEnd* end) {
  Result<PathEnd> chosen = paths_.choose(spec);
  if (!chosen) {
    // Host memory always has its end: this is device memory.
    REMORA_LOG(kWarn, "peer {}: a {} {} memory takes no path: {}", peer_, what, spec.memory.device->name(),
               chosen.status().to_string());
    return RmaStatus::kDeviceFailed;
  }
  *end = std::move(*chosen);
  return RmaStatus::kOk;
}

void RmaTarget::send_resp(uint64_t op_id, RmaStatus status, uint64_t value) {
  queue_resp(wire::RespFrame{.op_id = op_id, .status = status, .value = value, .inline_data = false, .payload = {}});
}

std::shared_ptr<RegionAccess> RmaTarget::share_access(RegionAccess& granted, bool served_inline) {
  if (served_inline && granted.device() == nullptr) return {std::shared_ptr<void>(), &granted};
  return std::make_shared<RegionAccess>(std::move(granted));
}

RmaStatus RmaTarget::segmented_end(const wire::KeyBytes& key, wire::SegmentList segments, uint64_t length,
                                   Direction direction, std::shared_ptr<RegionAccess>* access, PathEnd* end) {
  // One access covers every segment: each lies inside it, so inside the key's window.
  uint64_t lo = UINT64_MAX, hi = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const wire::Segment seg = segments[i];  // the decoder checked that none ends past 2^64
    lo = std::min(lo, seg.offset);
    hi = std::max(hi, seg.offset + seg.length);
  }
  RegionAccess granted;
  const RmaStatus verdict = check_access(
      key, lo, hi - lo, direction == Direction::kReceive ? Access::kRemoteWrite : Access::kRemoteRead, &granted);
  *access = std::make_shared<RegionAccess>(std::move(granted));
  if (verdict != RmaStatus::kOk) return verdict;
  if ((*access)->device() != nullptr) {
    // An initiator sends segments for keys of host memory only (their kind says so).
    REMORA_LOG(kWarn, "peer {}: refused a segmented request of {} memory: segments move host memory only", peer_,
               (*access)->device()->name());
    ++stats_.refused;
    return RmaStatus::kDeviceFailed;
  }
  std::vector<SegmentMap::Piece> pieces(segments.size());
  for (size_t i = 0; i < segments.size(); ++i)
    pieces[i] = {.at = segments[i].offset - lo, .length = segments[i].length};
  SegmentMap map(std::move(pieces));
  *end =
      direction == Direction::kReceive
          ? PathEnd::segmented_sink(
                std::make_unique<SegmentedRegionSink>(access->get(), &paths_.discard_sink(), std::move(map)), length)
          : PathEnd::segmented_source(std::make_unique<SegmentedRegionSource>(access->get(), std::move(map)), length);
  return RmaStatus::kOk;
}

void RmaTarget::serve_put(const wire::PutFrame& f) {
  RegionAccess granted;  // what `access` points at when served inline: kept to the end
  std::shared_ptr<RegionAccess> access;
  PathEnd sink;
  RmaStatus verdict;
  if (f.segments.empty()) {
    verdict = check_access(f.key, f.offset, f.length, Access::kRemoteWrite, &granted);
    access = share_access(granted, f.inline_data);
    if (verdict == RmaStatus::kOk) {
      verdict = choose_end({.direction = Direction::kReceive,
                            .cls = f.inline_data ? TransferClass::kInline : TransferClass::kChunked,
                            .memory = TransferMemory::of_region(access, f.length)},
                           "put into", &sink);
    }
  } else {
    verdict = segmented_end(f.key, f.segments, f.length, Direction::kReceive, &access, &sink);
  }
  if (verdict == RmaStatus::kOk && f.has_notify && notifications_.full(limits_.notifications)) {
    ++stats_.refused;
    verdict = RmaStatus::kNoResource;
  }
  if (f.inline_data) {
    serve_inline_put(f, verdict, access, std::move(sink));
    return;
  }

  // A large put's bytes follow its frame whatever the verdict, and a refused one is
  // drained before its RESP: the claim costs a window slot for as long as the bytes
  // take, never memory. But no process has a buffer beyond the 57-bit address space
  // (5-level paging), so a larger claim is not an initiator's mistake to drain; it is
  // refused at once as a violation, and the endpoint ends.
  if (f.length > kLargestHonestPut) {
    owner_.protocol_error("PUT announces " + std::to_string(f.length) +
                          " bytes, more than any process can address; nothing was allocated for it");
    return;
  }
  auto sp = std::make_unique<ServedPut>();
  sp->op_id = f.op_id;
  sp->segmented = !f.segments.empty();
  sp->verdict = verdict;
  sp->has_notify = f.has_notify && verdict == RmaStatus::kOk;
  sp->notify = f.notify;
  sp->access = access;
  // A refused put's bytes come anyway: they are drained.
  sp->end = verdict == RmaStatus::kOk ? std::move(sink) : paths_.discard(f.length);
  sp->in.kind = wire::ChunkKind::kPut;
  sp->in.id = f.op_id;
  sp->in.length = f.length;
  sp->in.sink = sp->end.sink(sp->in);
  if (sp->has_notify) notifications_.promise();
  served_puts_.emplace(f.op_id, std::move(sp));
}

void RmaTarget::serve_inline_put(const wire::PutFrame& f, RmaStatus verdict, std::shared_ptr<RegionAccess> access,
                                 PathEnd sink) {
  if (verdict == RmaStatus::kOk && f.has_crc) {
    // Checked before a byte is placed: a corrupt inline put writes nothing.
    if (const uint32_t got = checksum_of(f.payload); got != f.crc) {
      REMORA_LOG(kWarn, "{}",
                 checksum_mismatch(fmt::format("a put (the peer's op id {})", f.op_id), 0, f.length, f.crc, got, peer_)
                     .message());
      ++stats_.refused;
      verdict = RmaStatus::kChecksum;
    }
  }
  if (verdict == RmaStatus::kOk) {
    const Status placed = sink.place_inline(f.payload, [this, op_id = f.op_id] {
      return [weak = std::weak_ptr<RmaTarget*>(self_), op_id](const Status& s) {
        if (auto self = weak.lock()) (*self)->inline_put_placed(op_id, s);
      };
    });
    if (placed.code() == StatusCode::kInProgress) {
      // Into device memory: in service until the copy ends (inline_put_placed).
      auto sp = std::make_unique<ServedPut>();
      sp->op_id = f.op_id;
      sp->has_notify = f.has_notify;
      sp->notify = f.notify;
      sp->inline_copy = true;
      sp->in.kind = wire::ChunkKind::kPut;
      sp->in.id = f.op_id;
      sp->in.length = f.length;
      sp->access = std::move(access);
      sp->end = std::move(sink);
      if (sp->has_notify) notifications_.promise();
      served_puts_.emplace(f.op_id, std::move(sp));
      return;
    }
    if (!placed.is_ok() && sink.revoked()) {
      verdict = RmaStatus::kRevoked;
    } else if (!placed.is_ok()) {
      REMORA_LOG(kWarn, "peer {}: put into {} memory: {}", peer_, sink.device()->name(), placed.to_string());
      verdict = RmaStatus::kDeviceFailed;
    }
  }
  if (verdict == RmaStatus::kOk) {
    ++stats_.served_puts;
    if (f.has_notify) {
      notifications_.deliver(Notification{
          .value = f.notify, .region = access->region(), .offset = access->region_offset(), .length = f.length});
    }
  }
  send_resp(f.op_id, verdict);
}

void RmaTarget::inline_put_placed(uint64_t op_id, const Status& placed) {
  auto it = served_puts_.find(op_id);
  if (it == served_puts_.end()) return;  // the endpoint failed meanwhile
  if (!placed.is_ok()) {
    REMORA_LOG(kWarn, "peer {}: put into device memory: {}", peer_, placed.to_string());
    it->second->in.failure = placed;
  }
  put_received(op_id);
  owner_.replies_queued();
}

RxTransfer* RmaTarget::put_transfer(uint64_t op_id) {
  auto it = served_puts_.find(op_id);
  return it == served_puts_.end() || it->second->inline_copy ? nullptr : &it->second->in;
}

void RmaTarget::put_received(uint64_t op_id) {
  auto it = served_puts_.find(op_id);
  if (it == served_puts_.end()) return;
  ServedPut* sp = it->second.get();
  if (sp->has_notify) notifications_.settle();
  if (sp->verdict == RmaStatus::kOk && sp->end.revoked()) sp->verdict = RmaStatus::kRevoked;
  // A host RegionSink fails a chunk only on a checksum mismatch (the RESP names the
  // chunk); any other failed chunk is a device copy's (or the initiator aborted: it
  // knows why already).
  uint64_t value = 0;
  if (sp->verdict == RmaStatus::kOk && sp->in.failure.code() == StatusCode::kDataCorrupt) {
    REMORA_LOG(kWarn, "{}", sp->in.failure.message());
    sp->verdict = RmaStatus::kChecksum;
    value = sp->in.corrupt_at;
  } else if (sp->verdict == RmaStatus::kOk && !sp->in.failure.is_ok()) {
    sp->verdict = RmaStatus::kDeviceFailed;
  }
  if (sp->verdict == RmaStatus::kOk) {
    ++stats_.served_puts;
    if (sp->segmented) ++stats_.served_segmented;
    count_zero_copy(stats_, sp->end);
    if (sp->has_notify) {
      notifications_.deliver(Notification{.value = sp->notify,
                                          .region = sp->access->region(),
                                          .offset = sp->access->region_offset(),
                                          .length = sp->in.length});
    }
  }
  send_resp(sp->op_id, sp->verdict, value);
  served_puts_.erase(it);
}

void RmaTarget::serve_get(const wire::GetFrame& f, TransferClass cls) {
  RegionAccess granted;  // what `access` points at when served inline: kept to the end
  std::shared_ptr<RegionAccess> access;
  PathEnd source;
  RmaStatus verdict;
  if (!f.segments.empty()) {
    verdict = segmented_end(f.key, f.segments, f.length, Direction::kSend, &access, &source);
  } else {
    verdict = check_access(f.key, f.offset, f.length, Access::kRemoteRead, &granted);
    access = share_access(granted, cls == TransferClass::kInline);
    if (verdict == RmaStatus::kOk) {
      // A chunked reply from device memory can go by zero-copy sends (devmem TX): they
      // are reported done under this number.
      verdict = choose_end({.direction = Direction::kSend,
                            .cls = cls,
                            .memory = TransferMemory::of_region(access, f.length),
                            .zero_copy_id = kDevmemServedGetCookie | next_zero_copy_get_},
                           "get from", &source);
    }
  }
  if (cls == TransferClass::kInline) {
    serve_inline_get(f.op_id, verdict, access, std::move(source));
    return;
  }
  if (verdict != RmaStatus::kOk) {
    send_resp(f.op_id, verdict);  // nothing announced: the initiator completes on this
    return;
  }
  auto sg = std::make_unique<ServedGet>();
  sg->op_id = f.op_id;
  sg->segmented = !f.segments.empty();
  sg->access = access;
  sg->end = std::move(source);
  sg->out.kind = wire::ChunkKind::kGet;
  sg->out.owner = f.op_id;
  sg->out.chunk_id = f.op_id;
  sg->out.length = f.length;
  sg->out.source = sg->end.source();
  if (sg->end.zero_copy()) {
    // The NIC reads the region: each sendmsg bracketed until the kernel reports it done.
    sg->zero_copy_seq = next_zero_copy_get_++;
    zero_copy_gets_.emplace(sg->zero_copy_seq, f.op_id);
  }
  owner_.send_chunks(&sg->out);
  served_gets_.emplace(f.op_id, std::move(sg));
}

void RmaTarget::serve_inline_get(uint64_t op_id, RmaStatus verdict, std::shared_ptr<RegionAccess> access,
                                 PathEnd source) {
  if (verdict == RmaStatus::kOk) {
    const Status read = source.read_inline(
        [&](std::span<const std::byte> bytes) {
          queue_resp(wire::RespFrame{
              .op_id = op_id, .status = RmaStatus::kOk, .value = 0, .inline_data = true, .payload = bytes});
        },
        [this, op_id] {
          return [weak = std::weak_ptr<RmaTarget*>(self_), op_id](std::span<const std::byte> bytes, const Status& s) {
            if (auto self = weak.lock()) (*self)->inline_get_read(op_id, bytes, s);
          };
        });
    if (read.is_ok()) {
      ++stats_.served_gets;
      return;
    }
    if (read.code() == StatusCode::kInProgress) {
      // Out of device memory: in service until the copy ends (inline_get_read).
      auto sg = std::make_unique<ServedGet>();
      sg->op_id = op_id;
      sg->access = std::move(access);
      sg->end = std::move(source);
      sg->inline_copy = true;
      served_gets_.emplace(op_id, std::move(sg));
      return;
    }
    if (source.revoked()) {
      verdict = RmaStatus::kRevoked;
    } else {
      REMORA_LOG(kWarn, "peer {}: get from {} memory: {}", peer_, source.device()->name(), read.to_string());
      verdict = RmaStatus::kDeviceFailed;
    }
  }
  send_resp(op_id, verdict);
}

void RmaTarget::inline_get_read(uint64_t op_id, std::span<const std::byte> bytes, const Status& read) {
  auto it = served_gets_.find(op_id);
  if (it == served_gets_.end()) return;  // the endpoint failed meanwhile
  served_gets_.erase(it);
  if (!read.is_ok()) {
    REMORA_LOG(kWarn, "peer {}: get from device memory: {}", peer_, read.to_string());
    send_resp(op_id, RmaStatus::kDeviceFailed);
    owner_.replies_queued();
    return;
  }
  ++stats_.served_gets;
  queue_resp(
      wire::RespFrame{.op_id = op_id, .status = RmaStatus::kOk, .value = 0, .inline_data = true, .payload = bytes});
  owner_.replies_queued();
}

void RmaTarget::get_written(uint64_t op_id) {
  auto it = served_gets_.find(op_id);
  if (it == served_gets_.end()) return;
  if (it->second->end.unreleased() > 0) {
    // Devmem: every byte is in the kernel, but the NIC still reads the region.
    it->second->awaiting_release = true;
    return;
  }
  finish_served_get(it, /*keep=*/true);
}

void RmaTarget::get_sent(uint64_t op_id, const TxTransfer* out) {
  if (out != nullptr && answered_gets_.erase(out) > 0) return;
  auto it = served_gets_.find(op_id);
  if (it == served_gets_.end()) return;
  ServedGet* sg = it->second.get();
  if (sg->end.unreleased() > 0) {
    sg->awaiting_release = true;  // the NIC still reads the region: RESP once it is done
    return;
  }
  finish_served_get(it);
}

void RmaTarget::zero_copy_released(uint64_t seq) {
  auto z = zero_copy_gets_.find(seq);
  if (z == zero_copy_gets_.end()) return;  // finished (or failed) already
  auto it = served_gets_.find(z->second);
  if (it == served_gets_.end()) return;
  ServedGet* sg = it->second.get();
  sg->end.released();
  if (sg->awaiting_release && sg->end.unreleased() == 0) {
    // Answered at get_written's wait, before the peer confirmed every chunk (failover):
    // kept until it did, as get_written keeps it.
    finish_served_get(it, /*keep=*/!sg->out.done());
    owner_.replies_queued();  // from the error queue's drain, outside the control dispatch
  }
}

void RmaTarget::finish_served_get(std::unordered_map<uint64_t, std::unique_ptr<ServedGet>>::iterator it, bool keep) {
  ServedGet* sg = it->second.get();
  RmaStatus status = RmaStatus::kOk;
  if (!sg->out.failure.is_ok()) {
    status = RmaStatus::kDeviceFailed;  // cut short: the endpoint sent ABORT
  } else if (sg->end.revoked()) {
    status = RmaStatus::kRevoked;
  } else {
    ++stats_.served_gets;
    if (sg->segmented) ++stats_.served_segmented;
    count_zero_copy(stats_, sg->end);
  }
  send_resp(sg->op_id, status);
  if (sg->zero_copy_seq != 0) zero_copy_gets_.erase(sg->zero_copy_seq);
  if (keep) answered_gets_.emplace(&sg->out, std::move(it->second));
  served_gets_.erase(it);
}

void RmaTarget::serve_atomic(const wire::AtomicFrame& f) {
  RegionAccess access;
  RmaStatus verdict = check_access(f.key, f.offset, sizeof(uint64_t), Access::kRemoteAtomic, &access);
  uint64_t previous = 0;
  if (verdict == RmaStatus::kOk && reinterpret_cast<uintptr_t>(access.address()) % alignof(uint64_t) != 0) {
    ++stats_.refused;
    verdict = RmaStatus::kMisaligned;
  }
  if (verdict == RmaStatus::kOk) {
    if (access.begin()) {
      std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(access.address()));
      if (f.op == wire::AtomicOp::kFetchAdd) {
        previous = word.fetch_add(f.operand, std::memory_order_acq_rel);
      } else {
        previous = f.compare;
        word.compare_exchange_strong(previous, f.operand, std::memory_order_acq_rel);
      }
      access.end();
      ++stats_.served_atomics;
    } else {
      verdict = RmaStatus::kRevoked;
    }
  }
  send_resp(f.op_id, verdict, verdict == RmaStatus::kOk ? previous : 0);
}

void RmaTarget::fail() {
  served_puts_.clear();
  served_gets_.clear();  // zero-copy replies' brackets still open end with their sources
  answered_gets_.clear();
  zero_copy_gets_.clear();
}

}  // namespace remora::detail
