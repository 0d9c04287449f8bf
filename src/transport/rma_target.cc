// transport/rma_target.cc — see rma_target.h. The target's rule (authenticate the key,
// then range, right and alignment, before any byte is touched) is described in
// docs/architecture.md ("One-sided operations"); the wire rules in docs/protocol.md.
#include "transport/rma_target.h"

#include <atomic>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "core/log.h"
#include "datapath/checksum.h"

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

RmaStatus RmaTarget::choose_device_path(const RegionAccess& access, uint64_t length, bool tx, bool chunked,
                                        std::string_view what, std::unique_ptr<DevmemTxSend>* devmem) {
  MemoryDomain* device = access.device();
  if (device == nullptr) return RmaStatus::kOk;
  if (Status path = owner_.choose_target_path(*device, access.address(), length, tx, chunked, devmem); !path) {
    REMORA_LOG(kWarn, "peer {}: a {} {} memory takes no path: {}", peer_, what, device->name(), path.to_string());
    return RmaStatus::kDeviceFailed;
  }
  return RmaStatus::kOk;
}

void RmaTarget::send_resp(uint64_t op_id, RmaStatus status, uint64_t value) {
  queue_resp(wire::RespFrame{.op_id = op_id, .status = status, .value = value, .inline_data = false, .payload = {}});
}

void RmaTarget::serve_put(const wire::PutFrame& f) {
  auto access = std::make_shared<RegionAccess>();
  RmaStatus verdict = check_access(f.key, f.offset, f.length, Access::kRemoteWrite, access.get());
  if (verdict == RmaStatus::kOk) {
    verdict = choose_device_path(*access, f.length, /*tx=*/false, /*chunked=*/!f.inline_data, "put into");
  }
  if (verdict == RmaStatus::kOk && f.has_notify && notifications_.full(limits_.notifications)) {
    ++stats_.refused;
    verdict = RmaStatus::kNoResource;
  }

  if (f.inline_data) {
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
    if (verdict == RmaStatus::kOk && f.length > 0 && access->device() != nullptr) {
      serve_device_inline_put(f, std::move(access));
      return;
    }
    if (verdict == RmaStatus::kOk && f.length > 0) {
      if (access->begin()) {
        std::memcpy(access->address(), f.payload.data(), f.length);
        access->end();
      } else {
        verdict = RmaStatus::kRevoked;
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
  sp->verdict = verdict;
  sp->has_notify = f.has_notify && verdict == RmaStatus::kOk;
  sp->notify = f.notify;
  sp->access = std::move(access);
  sp->in.kind = wire::ChunkKind::kPut;
  sp->in.id = f.op_id;
  sp->in.length = f.length;
  std::shared_ptr<DevmemRxContext> devmem =
      sp->verdict == RmaStatus::kOk && sp->access->device() != nullptr ? owner_.devmem_rx_chosen() : nullptr;
  if (devmem != nullptr) {
    // Every data stream is steered: the chunks are placed from the bound buffer.
    sp->zcrx_rx = devmem->kind == DataPathKind::kZcrx;
    sp->staged = std::make_unique<DevmemSink>(std::move(devmem), sp->access->device(), sp->access->address(), &sp->in,
                                              sp->access);
    sp->in.sink = sp->staged.get();
    sp->devmem_rx = true;
  } else if (sp->verdict == RmaStatus::kOk && sp->access->device() != nullptr) {
    auto staging = owner_.staging_for(sp->access->device(), /*tx=*/false);
    if (staging) {
      sp->staged = std::make_unique<StagingSink>(std::move(*staging), sp->access->address(), &sp->in, sp->access);
      sp->in.sink = sp->staged.get();
    } else {
      REMORA_LOG(kWarn, "peer {}: a put into {} memory cannot be staged: {}", peer_, sp->access->device()->name(),
                 staging.status().to_string());
      sp->verdict = RmaStatus::kDeviceFailed;
      sp->has_notify = false;
    }
  }
  if (sp->in.sink == nullptr) {
    if (sp->verdict == RmaStatus::kOk) {
      sp->sink = RegionSink(sp->access.get(), &discard_);
      sp->in.sink = &sp->sink;
    } else {
      sp->in.sink = &discard_;  // the initiator sends the bytes anyway; they are drained
    }
  }
  if (sp->has_notify) notifications_.promise();
  served_puts_.emplace(f.op_id, std::move(sp));
}

void RmaTarget::serve_device_inline_put(const wire::PutFrame& f, std::shared_ptr<RegionAccess> access) {
  auto sp = std::make_unique<ServedPut>();
  sp->op_id = f.op_id;
  sp->has_notify = f.has_notify;
  sp->notify = f.notify;
  sp->inline_copy = true;
  sp->in.kind = wire::ChunkKind::kPut;
  sp->in.id = f.op_id;
  sp->in.length = f.length;
  sp->access = access;
  MemoryDomain& device = *access->device();
  if (!access->begin()) {
    sp->verdict = RmaStatus::kRevoked;
    send_resp(f.op_id, sp->verdict);
    return;
  }
  // The payload lives in the control stream's buffer only for this call.
  auto held = std::make_shared<std::vector<std::byte>>(f.payload.begin(), f.payload.end());
  auto copy = device.copy_from_host(access->address(), held->data(), held->size());
  if (!copy) {
    access->end();
    REMORA_LOG(kWarn, "peer {}: put into {} memory: {}", peer_, device.name(), copy.status().to_string());
    send_resp(f.op_id, RmaStatus::kDeviceFailed);
    return;
  }
  if (sp->has_notify) notifications_.promise();
  const uint64_t op_id = f.op_id;
  served_puts_.emplace(op_id, std::move(sp));
  when_copied(
      owner_.progress_engine(), std::move(*copy),
      [weak = std::weak_ptr<RmaTarget*>(self_), op_id, held](const Status& s) {
        auto self = weak.lock();
        if (!self) return;
        RmaTarget& t = **self;
        auto it = t.served_puts_.find(op_id);
        if (it == t.served_puts_.end()) return;  // the endpoint failed meanwhile
        if (!s.is_ok()) {
          REMORA_LOG(kWarn, "peer {}: put into device memory: {}", t.peer_, s.to_string());
          it->second->in.failure = s;
        }
        t.put_received(op_id);
        t.owner_.replies_queued();
      },
      [access] { access->end(); });
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
  if (sp->verdict == RmaStatus::kOk && (sp->sink.revoked() || (sp->staged && sp->staged->revoked()))) {
    sp->verdict = RmaStatus::kRevoked;
  }
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
    if (sp->devmem_rx) ++(sp->zcrx_rx ? stats_.zcrx_transfers : stats_.devmem_transfers);
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

void RmaTarget::serve_get(const wire::GetFrame& f, bool inline_class) {
  auto access = std::make_shared<RegionAccess>();
  RmaStatus verdict = check_access(f.key, f.offset, f.length, Access::kRemoteRead, access.get());
  // A chunked reply from device memory can go by devmem TX (`devmem` set then).
  std::unique_ptr<DevmemTxSend> devmem;
  if (verdict == RmaStatus::kOk) {
    verdict = choose_device_path(*access, f.length, /*tx=*/true, /*chunked=*/!inline_class, "get from",
                                 inline_class || owner_.devmem_tx_streams() == nullptr ? nullptr : &devmem);
  }
  if (inline_class) {
    if (verdict == RmaStatus::kOk && f.length > 0 && access->device() != nullptr) {
      serve_device_inline_get(f, std::move(access));
      return;
    }
    if (verdict == RmaStatus::kOk) {
      if (access->begin()) {
        queue_resp(wire::RespFrame{.op_id = f.op_id,
                                   .status = RmaStatus::kOk,
                                   .value = 0,
                                   .inline_data = true,
                                   .payload = std::span<const std::byte>(access->address(), f.length)});
        access->end();
        ++stats_.served_gets;
        return;
      }
      verdict = RmaStatus::kRevoked;
    }
    send_resp(f.op_id, verdict);
    return;
  }
  StagingContext staging;
  if (verdict == RmaStatus::kOk && access->device() != nullptr && devmem == nullptr) {
    auto made = owner_.staging_for(access->device(), /*tx=*/true);
    if (made) {
      staging = std::move(*made);
    } else {
      REMORA_LOG(kWarn, "peer {}: a get from {} memory cannot be staged: {}", peer_, access->device()->name(),
                 made.status().to_string());
      verdict = RmaStatus::kDeviceFailed;
    }
  }
  if (verdict != RmaStatus::kOk) {
    send_resp(f.op_id, verdict);  // nothing announced: the initiator completes on this
    return;
  }
  auto sg = std::make_unique<ServedGet>();
  sg->op_id = f.op_id;
  sg->access = std::move(access);
  sg->source = RegionSource(sg->access.get());
  sg->out.kind = wire::ChunkKind::kGet;
  sg->out.owner = f.op_id;
  sg->out.chunk_id = f.op_id;
  sg->out.length = f.length;
  sg->out.source = &sg->source;
  if (staging.pool) {
    sg->staged = std::make_unique<StagingSource>(std::move(staging), sg->access->address(), f.length, sg->access);
    sg->out.source = sg->staged.get();
  } else if (devmem != nullptr) {
    // The NIC reads the region: each sendmsg bracketed until the kernel reports it done.
    sg->devmem = std::move(devmem);
    sg->devmem_seq = next_devmem_get_++;
    sg->devmem_source = std::make_unique<DevmemSource>(*sg->devmem, *owner_.devmem_tx_streams(),
                                                       kDevmemServedGetCookie | sg->devmem_seq, sg->access.get());
    sg->out.source = sg->devmem_source.get();
    devmem_gets_.emplace(sg->devmem_seq, f.op_id);
  }
  owner_.send_chunks(&sg->out);
  served_gets_.emplace(f.op_id, std::move(sg));
}

void RmaTarget::serve_device_inline_get(const wire::GetFrame& f, std::shared_ptr<RegionAccess> access) {
  MemoryDomain& device = *access->device();
  if (!access->begin()) {
    send_resp(f.op_id, RmaStatus::kRevoked);
    return;
  }
  auto held = std::make_shared<std::vector<std::byte>>(f.length);
  auto copy = device.copy_to_host(held->data(), access->address(), held->size());
  if (!copy) {
    access->end();
    REMORA_LOG(kWarn, "peer {}: get from {} memory: {}", peer_, device.name(), copy.status().to_string());
    send_resp(f.op_id, RmaStatus::kDeviceFailed);
    return;
  }
  auto sg = std::make_unique<ServedGet>();
  sg->op_id = f.op_id;
  sg->access = access;
  sg->inline_copy = true;
  served_gets_.emplace(f.op_id, std::move(sg));
  when_copied(
      owner_.progress_engine(), std::move(*copy),
      [weak = std::weak_ptr<RmaTarget*>(self_), op_id = f.op_id, held](const Status& s) {
        if (auto self = weak.lock()) (*self)->device_get_copied(op_id, *held, s);
      },
      [access] { access->end(); });
}

void RmaTarget::device_get_copied(uint64_t op_id, std::span<const std::byte> bytes, const Status& copy) {
  auto it = served_gets_.find(op_id);
  if (it == served_gets_.end()) return;  // the endpoint failed meanwhile
  served_gets_.erase(it);
  if (!copy.is_ok()) {
    REMORA_LOG(kWarn, "peer {}: get from device memory: {}", peer_, copy.to_string());
    send_resp(op_id, RmaStatus::kDeviceFailed);
    owner_.replies_queued();
    return;
  }
  ++stats_.served_gets;
  queue_resp(
      wire::RespFrame{.op_id = op_id, .status = RmaStatus::kOk, .value = 0, .inline_data = true, .payload = bytes});
  owner_.replies_queued();
}

void RmaTarget::get_sent(uint64_t op_id) {
  auto it = served_gets_.find(op_id);
  if (it == served_gets_.end()) return;
  ServedGet* sg = it->second.get();
  if (sg->devmem_source && sg->devmem_source->pending() > 0) {
    sg->awaiting_completions = true;  // the NIC still reads the region: RESP once it is done
    return;
  }
  finish_served_get(it);
}

void RmaTarget::devmem_completed(uint64_t seq) {
  auto d = devmem_gets_.find(seq);
  if (d == devmem_gets_.end()) return;  // finished (or failed) already
  auto it = served_gets_.find(d->second);
  if (it == served_gets_.end()) return;
  ServedGet* sg = it->second.get();
  sg->devmem_source->completed();
  if (sg->awaiting_completions && sg->devmem_source->pending() == 0) {
    finish_served_get(it);
    owner_.replies_queued();  // from the error queue's drain, outside the control dispatch
  }
}

void RmaTarget::finish_served_get(std::unordered_map<uint64_t, std::unique_ptr<ServedGet>>::iterator it) {
  ServedGet* sg = it->second.get();
  RmaStatus status = RmaStatus::kOk;
  if (!sg->out.failure.is_ok()) {
    status = RmaStatus::kDeviceFailed;  // cut short: the endpoint sent ABORT
  } else if (sg->source.revoked() || (sg->staged && sg->staged->revoked()) ||
             (sg->devmem_source && sg->devmem_source->revoked())) {
    status = RmaStatus::kRevoked;
  } else {
    ++stats_.served_gets;
    if (sg->devmem_source) ++stats_.devmem_transfers;
  }
  send_resp(sg->op_id, status);
  if (sg->devmem_seq != 0) devmem_gets_.erase(sg->devmem_seq);
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
  served_gets_.clear();  // devmem replies' brackets still open end with their sources
  devmem_gets_.clear();
}

}  // namespace remora::detail
