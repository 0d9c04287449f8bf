// transport/rma_target.cc — see rma_target.h. The target's rule (authenticate the key,
// then range, right and alignment, before any byte is touched) is described in
// docs/architecture.md ("One-sided operations"); the wire rules in docs/protocol.md.
#include "transport/rma_target.h"

#include <atomic>
#include <cstring>
#include <utility>

#include "core/log.h"

namespace remora::detail {

using wire::RmaStatus;

namespace {

RmaStatus verdict_of(StatusCode code) {
  switch (code) {
    case StatusCode::kOutOfRange: return RmaStatus::kOutOfRange;
    case StatusCode::kAccessDenied: return RmaStatus::kAccessDenied;
    default: return RmaStatus::kInvalidKey;
  }
}

}  // namespace

RmaTarget::RmaTarget(Owner& owner, Notifications& notifications, DiscardSink& discard, const MemoryRegistry* registry,
                     Limits limits, std::string peer, EndpointStats& stats)
    : owner_(owner),
      notifications_(notifications),
      discard_(discard),
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

void RmaTarget::send_resp(uint64_t op_id, RmaStatus status, uint64_t value) {
  queue_resp(wire::RespFrame{.op_id = op_id, .status = status, .value = value, .inline_data = false, .payload = {}});
}

void RmaTarget::serve_put(const wire::PutFrame& f) {
  RegionAccess access;
  RmaStatus verdict = check_access(f.key, f.offset, f.length, Access::kRemoteWrite, &access);
  if (verdict == RmaStatus::kOk && f.has_notify && notifications_.full(limits_.notifications)) {
    ++stats_.refused;
    verdict = RmaStatus::kNoResource;
  }

  if (f.inline_data) {
    if (verdict == RmaStatus::kOk && f.length > 0) {
      if (access.begin()) {
        std::memcpy(access.address(), f.payload.data(), f.length);
        access.end();
      } else {
        verdict = RmaStatus::kRevoked;
      }
    }
    if (verdict == RmaStatus::kOk) {
      ++stats_.served_puts;
      if (f.has_notify) {
        notifications_.deliver(Notification{
            .value = f.notify, .region = access.region(), .offset = access.region_offset(), .length = f.length});
      }
    }
    send_resp(f.op_id, verdict);
    return;
  }

  auto sp = std::make_unique<ServedPut>();
  sp->op_id = f.op_id;
  sp->verdict = verdict;
  sp->has_notify = f.has_notify && verdict == RmaStatus::kOk;
  sp->notify = f.notify;
  sp->access = std::move(access);
  sp->in.kind = wire::ChunkKind::kPut;
  sp->in.id = f.op_id;
  sp->in.length = f.length;
  if (verdict == RmaStatus::kOk) {
    sp->sink = RegionSink(&sp->access, &discard_);
    sp->in.sink = &sp->sink;
  } else {
    sp->in.sink = &discard_;  // the initiator sends the bytes anyway; they are drained
  }
  if (sp->has_notify) notifications_.promise();
  served_puts_.emplace(f.op_id, std::move(sp));
}

RxTransfer* RmaTarget::put_transfer(uint64_t op_id) {
  auto it = served_puts_.find(op_id);
  return it == served_puts_.end() ? nullptr : &it->second->in;
}

void RmaTarget::put_received(uint64_t op_id) {
  auto it = served_puts_.find(op_id);
  if (it == served_puts_.end()) return;
  ServedPut* sp = it->second.get();
  if (sp->has_notify) notifications_.settle();
  if (sp->verdict == RmaStatus::kOk && sp->sink.revoked()) sp->verdict = RmaStatus::kRevoked;
  // A host RegionSink never fails a chunk: a failed chunk is a device copy's (or the
  // initiator aborted: it knows why already).
  if (sp->verdict == RmaStatus::kOk && !sp->in.failure.is_ok()) sp->verdict = RmaStatus::kDeviceFailed;
  if (sp->verdict == RmaStatus::kOk) {
    ++stats_.served_puts;
    if (sp->has_notify) {
      notifications_.deliver(Notification{.value = sp->notify,
                                          .region = sp->access.region(),
                                          .offset = sp->access.region_offset(),
                                          .length = sp->in.length});
    }
  }
  send_resp(sp->op_id, sp->verdict);
  served_puts_.erase(it);
}

void RmaTarget::serve_get(const wire::GetFrame& f, bool inline_class) {
  RegionAccess access;
  RmaStatus verdict = check_access(f.key, f.offset, f.length, Access::kRemoteRead, &access);
  if (inline_class) {
    if (verdict == RmaStatus::kOk) {
      if (access.begin()) {
        queue_resp(wire::RespFrame{.op_id = f.op_id,
                                   .status = RmaStatus::kOk,
                                   .value = 0,
                                   .inline_data = true,
                                   .payload = std::span<const std::byte>(access.address(), f.length)});
        access.end();
        ++stats_.served_gets;
        return;
      }
      verdict = RmaStatus::kRevoked;
    }
    send_resp(f.op_id, verdict);
    return;
  }
  if (verdict != RmaStatus::kOk) {
    send_resp(f.op_id, verdict);  // nothing announced: the initiator completes on this
    return;
  }
  auto sg = std::make_unique<ServedGet>();
  sg->op_id = f.op_id;
  sg->access = std::move(access);
  sg->source = RegionSource(&sg->access);
  sg->out.kind = wire::ChunkKind::kGet;
  sg->out.owner = f.op_id;
  sg->out.chunk_id = f.op_id;
  sg->out.length = f.length;
  sg->out.source = &sg->source;
  owner_.send_chunks(&sg->out);
  served_gets_.emplace(f.op_id, std::move(sg));
}

void RmaTarget::get_sent(uint64_t op_id) {
  auto it = served_gets_.find(op_id);
  if (it == served_gets_.end()) return;
  ServedGet* sg = it->second.get();
  ++stats_.served_gets;
  send_resp(sg->op_id, sg->source.revoked() ? RmaStatus::kRevoked : RmaStatus::kOk);
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
  served_gets_.clear();
}

}  // namespace remora::detail
