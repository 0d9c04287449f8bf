// datapath/staging.cc — see staging.h.
#include "datapath/staging.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "datapath/checksum.h"

namespace remora::detail {
namespace {

/// Tells the host now: only from a copy's end, which runs at the start of a progress
/// round, never inside a scheduler call.
void notify_progress(const std::weak_ptr<StagingHost*>& host) {
  if (auto h = host.lock()) (*h)->staging_progressed();
}

/// Tells the host at the next progress round: from inside a scheduler call (chunk_sent,
/// chunk_arrived) or a destructor, where going on at once would re-enter the scheduler.
void notify_progress_later(const StagingContext& ctx) {
  ctx.engine->post([host = ctx.host] { notify_progress(host); });
}

}  // namespace

void when_copied(const std::shared_ptr<engine::ProgressEngine>& engine, std::unique_ptr<AsyncCopy> copy,
                 std::function<void(const Status&)> done, std::function<void()> first) {
  std::shared_ptr<AsyncCopy> held(std::move(copy));
  AsyncCopy* raw = held.get();
  std::weak_ptr<engine::ProgressEngine> weak = engine;
  // `held` rides along so that the copy's handle lives until its end is handled.
  raw->on_done([weak, held, done = std::move(done), first = std::move(first)]() mutable {
    if (first) first();
    if (auto e = weak.lock()) {
      e->post([held, done = std::move(done)] { done(held->test()); });
    }
  });
}

namespace {
/// What ends a copy's RegionAccess bracket on the copy's thread; nothing without one.
std::function<void()> close_bracket(const std::shared_ptr<const RegionAccess>& access) {
  if (!access) return {};
  return [access] { access->end(); };
}
}  // namespace

// --- the pool -------------------------------------------------------------------

Result<std::shared_ptr<StagingPool>> StagingPool::create(MemoryDomain& domain, size_t buffers, size_t buffer_bytes) {
  if (buffers == 0 || buffer_bytes == 0) return Status(StatusCode::kInvalidArgument, "empty staging pool");
  const size_t total = buffers * buffer_bytes;
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    return Status(StatusCode::kNoResource,
                  fmt::format("cannot map {} staging buffers of {} bytes: {}", buffers, buffer_bytes, std::strerror(errno)));
  }
  if (Status s = domain.prepare_staging(base, total); !s.is_ok()) {
    munmap(base, total);
    return Status(s.code(), fmt::format("staging buffers for {} memory: {}", domain.name(), s.message()));
  }
  return std::shared_ptr<StagingPool>(new StagingPool(domain, static_cast<std::byte*>(base), buffers, buffer_bytes));
}

StagingPool::StagingPool(MemoryDomain& domain, std::byte* base, size_t count, size_t buffer_bytes)
    : domain_(domain), base_(base), count_(count), buffer_bytes_(buffer_bytes) {
  free_.reserve(count);
  for (size_t i = count; i-- > 0;) free_.push_back(base + i * buffer_bytes);
}

StagingPool::~StagingPool() {
  domain_.release_staging(base_, count_ * buffer_bytes_);
  munmap(base_, count_ * buffer_bytes_);
}

std::byte* StagingPool::acquire() noexcept {
  if (free_.empty()) return nullptr;
  std::byte* b = free_.back();
  free_.pop_back();
  return b;
}

void StagingPool::release(std::byte* buffer) noexcept { free_.push_back(buffer); }

// --- sending --------------------------------------------------------------------

StagingSource::StagingSource(StagingContext ctx, const std::byte* device, uint64_t length,
                             std::shared_ptr<const RegionAccess> access)
    : ctx_(std::move(ctx)),
      device_(device),
      length_(length),
      access_(std::move(access)),
      self_(std::make_shared<StagingSource*>(this)) {}

std::unique_ptr<StagingSource> StagingSource::for_resends(StagingContext ctx, const std::byte* device, uint64_t length,
                                                          std::shared_ptr<const RegionAccess> access) {
  auto source = std::make_unique<StagingSource>(std::move(ctx), device, length, std::move(access));
  source->next_ = length;  // every chunk counts as staged once: prepare() stages it again
  return source;
}

StagingSource::~StagingSource() {
  self_.reset();  // copies still in flight return their buffers when they end
  for (Slot& s : slots_) {
    if (s.copied) give_back(s);
  }
}

void StagingSource::give_back(const Slot& s) {
  if (!s.own) ctx_.pool->release(s.buffer);
}

StagingSource::Slot* StagingSource::slot(uint64_t index) {
  for (Slot& s : slots_) {
    if (s.index == index) return &s;
  }
  return nullptr;
}

void StagingSource::stage_ahead() {
  while (next_ < length_) {
    std::byte* buffer = ctx_.pool->acquire();
    if (buffer == nullptr) return;  // a chunk_sent or another transfer's will free one
    const uint64_t index = next_ / ctx_.chunk_bytes;
    const uint64_t at = next_;
    const uint64_t len = std::min<uint64_t>(ctx_.chunk_bytes, length_ - at);
    next_ += len;
    if (access_ && !access_->begin()) {
      // Deregistered: the rest goes out as zeros, and the served GET says revoked.
      revoked_ = true;
      std::memset(buffer, 0, len);
      slots_.push_back(Slot{index, buffer, true, Status::ok(), nullptr});
      continue;
    }
    if (!copy_out(index, buffer, at, len, nullptr)) return;
  }
}

bool StagingSource::copy_out(uint64_t index, std::byte* buffer, uint64_t at, uint64_t len,
                             std::shared_ptr<std::vector<std::byte>> own) {
  auto copy = ctx_.pool->domain().copy_to_host(buffer, device_ + at, len);
  if (!copy) {
    if (access_) access_->end();
    slots_.push_back(Slot{index, buffer, true, copy.status(), std::move(own)});
    return false;
  }
  slots_.push_back(Slot{index, buffer, false, Status::ok(), own});
  std::weak_ptr<StagingSource*> self = self_;
  // `own` rides along: the copy writes into it even if this source is gone by then. A
  // pool buffer goes back to the pool then.
  when_copied(
      ctx_.engine, std::move(*copy),
      [self, pool = ctx_.pool, buffer, own, index, host = ctx_.host](const Status& status) {
        if (auto s = self.lock()) {
          (*s)->copied(index, status);
        } else if (!own) {
          pool->release(buffer);
        }
        notify_progress(host);
      },
      close_bracket(access_));
  return true;
}

void StagingSource::copied(uint64_t index, const Status& status) {
  Slot* s = slot(index);
  if (s == nullptr) return;
  s->copied = true;
  s->status = status;
}

void StagingSource::restage(uint64_t index) {
  const uint64_t at = index * ctx_.chunk_bytes;
  const uint64_t len = std::min<uint64_t>(ctx_.chunk_bytes, length_ - at);
  auto own = std::make_shared<std::vector<std::byte>>(len);
  std::byte* buffer = own->data();
  if (access_ && !access_->begin()) {
    // Zeros in its place would land as data: the chunk cannot go again.
    slots_.push_back(
        Slot{index, buffer, true,
             Status(StatusCode::kInvalidKey, "the region was deregistered before a chunk of it could be staged again"),
             own});
    return;
  }
  (void)copy_out(index, buffer, at, len, std::move(own));
}

Status StagingSource::prepare(uint64_t offset, uint64_t /*len*/) {
  stage_ahead();
  const uint64_t index = offset / ctx_.chunk_bytes;
  // Staged before and given back after it was sent: asked again (failover).
  if (offset < next_ && slot(index) == nullptr) restage(index);
  const Slot* s = slot(index);
  if (s == nullptr || !s->copied) return Status(StatusCode::kInProgress, "staging");
  return s->status;
}

net::IoResult StagingSource::write(int fd, uint64_t offset, uint64_t len) {
  const Slot* s = slot(offset / ctx_.chunk_bytes);  // prepare() said it is there
  return net::send_some(fd, s->buffer + offset % ctx_.chunk_bytes, len);
}

std::optional<uint32_t> StagingSource::checksum(uint64_t offset, uint64_t length) {
  const Slot* s = slot(offset / ctx_.chunk_bytes);  // prepare() said it is there
  if (s == nullptr) return std::nullopt;
  return checksum_of({s->buffer + offset % ctx_.chunk_bytes, length});
}

void StagingSource::chunk_sent(uint64_t offset, uint64_t /*length*/) {
  const uint64_t index = offset / ctx_.chunk_bytes;
  const auto it = std::find_if(slots_.begin(), slots_.end(), [&](const Slot& s) { return s.index == index; });
  if (it == slots_.end()) return;
  give_back(*it);
  slots_.erase(it);
  notify_progress_later(ctx_);  // the buffer may stage a chunk of another transfer
}

// --- receiving ------------------------------------------------------------------

StagingSink::StagingSink(StagingContext ctx, std::byte* device, RxTransfer* t,
                         std::shared_ptr<const RegionAccess> access)
    : PlacingSink(ctx.engine, ctx.pool->domain(), device, t, access),
      ctx_(std::move(ctx)),
      device_(device),
      access_(std::move(access)),
      self_(std::make_shared<StagingSink*>(this)) {}

StagingSink::~StagingSink() {
  self_.reset();
  for (const Open& o : open_) {
    if (!o.oversized) ctx_.pool->release(o.buffer);
  }
  if (!open_.empty()) notify_progress_later(ctx_);
}

StagingSink::Open* StagingSink::open(uint64_t offset) {
  for (Open& o : open_) {
    if (offset >= o.offset && offset - o.offset < o.length) return &o;
  }
  return nullptr;
}

bool StagingSink::begin_chunk(uint64_t offset, uint64_t length) {
  for (const Open& o : open_) {
    if (o.offset == offset && o.length == length) return true;  // read again from its start
  }
  if (length > ctx_.pool->buffer_bytes()) {
    // The sender's chunks are longer than our buffers: this one gets memory of its own
    // (not prepared with the domain, so its copy may be slower). Matching
    // REMORA_CHUNK_SIZE on both sides avoids it.
    auto oversized = std::make_shared<std::vector<std::byte>>(length);
    std::byte* buffer = oversized->data();
    open_.push_back(Open{offset, length, buffer, std::move(oversized)});
    return true;
  }
  std::byte* buffer = ctx_.pool->acquire();
  if (buffer == nullptr) return false;
  open_.push_back(Open{offset, length, buffer, nullptr});
  return true;
}

net::IoResult StagingSink::read(StreamIn& in, uint64_t offset, uint64_t len, uint64_t* asked) {
  const Open* o = open(offset);  // begin_chunk took it
  *asked = len;
  return in.recv_some(o->buffer + (offset - o->offset), len);
}

std::optional<uint32_t> StagingSink::checksum(uint64_t offset, uint64_t length) {
  const Open* o = open(offset);
  if (o == nullptr || o->offset != offset) return std::nullopt;
  return checksum_of({o->buffer, length});
}

Status StagingSink::chunk_arrived(uint64_t offset, uint64_t length) {
  const auto it = std::find_if(open_.begin(), open_.end(), [&](const Open& o) { return o.offset == offset; });
  std::byte* buffer = it->buffer;
  std::shared_ptr<std::vector<std::byte>> oversized = std::move(it->oversized);
  open_.erase(it);
  // Gives the chunk's memory back: to the pool, or frees it.
  auto give_back = [pool = ctx_.pool, buffer, oversized]() {
    if (!oversized) pool->release(buffer);
  };
  if (access_ && !access_->begin()) {
    // Deregistered: the chunk is dropped, and the served PUT says revoked.
    revoked_ = true;
    give_back();
    notify_progress_later(ctx_);
    return Status::ok();
  }
  auto copy = ctx_.pool->domain().copy_from_host(device_ + offset, buffer, length);
  if (!copy) {
    if (access_) access_->end();
    give_back();
    notify_progress_later(ctx_);
    return copy.status();
  }
  ++in_flight_;
  std::weak_ptr<StagingSink*> self = self_;
  when_copied(ctx_.engine, std::move(*copy),
              [self, give_back, length, host = ctx_.host](const Status& status) {
                give_back();
                if (auto s = self.lock()) {
                  --(*s)->in_flight_;
                  if (auto h = host.lock()) (*h)->staged_chunk_placed(*(*s)->t_, length, status);
                }
                notify_progress(host);
              },
              close_bracket(access_));
  return Status(StatusCode::kInProgress, "copying to device");
}

}  // namespace remora::detail
