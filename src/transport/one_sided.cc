// transport/one_sided.cc — the endpoint's side of one-sided operations: the entry points
// (put, get, the atomics, flush), which admit an operation, choose its source or sink
// (DataPaths::choose) and hand it to the RMA initiator (rma_initiator.h), then make its
// first round of progress; and the dispatch of the peer's PUT, GET and ATOMIC requests
// to the RMA target (rma_target.h), with the check of a PUT's inline class. The wire
// rules are in docs/protocol.md ("One-sided operations").
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "datapath/segments.h"
#include "transport/endpoint_core.h"

namespace remora::detail {

Result<PathEnd> EndpointCore::choose_one_sided(Direction direction, std::span<const std::byte> local) {
  // A put's zero-copy sends (devmem TX) are reported done under the id it is about to
  // get, with the put bit.
  return paths_.choose({.direction = direction,
                        .cls = rma_class(local.size()),
                        .memory = paths_.memory_of(local.data(), local.size()),
                        .zero_copy_id = kDevmemPutCookie | initiator_.next_op_id()});
}

template <typename Post>
Request EndpointCore::post_one_sided(std::string_view what, Direction direction, std::span<const std::byte> local,
                                     const Post& post) {
  PathEnd end;
  {
    engine::ProgressEngine::Guard guard(*engine_);
    if (Status refused = admission(); !refused) return failed_request(std::move(refused));
    Result<PathEnd> chosen = choose_one_sided(direction, local);
    if (!chosen) return failed_request(chosen.status().with_context(what));
    end = std::move(*chosen);
    if (end.inline_ready()) {
      count_posted(stats_, end);
      return after_posting(post(std::move(end)));
    }
  }
  // An inline put of device memory: its bytes travel in the PUT frame, so they are
  // copied to host memory first, without the progress lock (at most the eager limit).
  if (Status copied = end.copy_inline(std::chrono::milliseconds(config_.wait_timeout_ms)); !copied) {
    return failed_request(
        copied.with_context(fmt::format("{} of {} bytes from {} memory", what, end.length(), end.device()->name())));
  }
  engine::ProgressEngine::Guard guard(*engine_);
  if (Status refused = admission(); !refused) return failed_request(std::move(refused));
  count_posted(stats_, end);
  return after_posting(post(std::move(end)));
}

Request EndpointCore::after_posting(RmaInitiator::Posted posted) {
  if (posted.issued) {
    // One round at most: the first chunks go out from this thread, and the rest moves
    // on progress rounds (the progress thread's, or a waiting thread's), so posting
    // returns in bounded time however large the put.
    pump(/*one_round=*/true);                             // may complete (and free) the op
    if (posted.pushes_data) engine_->driven_by_caller();  // see there: this thread just pushed data
  }
  return std::move(posted.request);
}

Request EndpointCore::put(std::span<const std::byte> local, const RemoteKey& key, uint64_t offset,
                          const PutOptions& options) {
  if (Request done = try_direct(Direction::kSend, local, key, offset, options.notify); done.valid()) return done;
  return post_one_sided("put", Direction::kSend, local,
                        [&](PathEnd source) { return initiator_.put(std::move(source), key, offset, options); });
}

Request EndpointCore::get(std::span<std::byte> local, const RemoteKey& key, uint64_t offset) {
  if (Request done = try_direct(Direction::kReceive, local, key, offset); done.valid()) return done;
  return post_one_sided("get", Direction::kReceive, local,
                        [&](PathEnd sink) { return initiator_.get(std::move(sink), key, offset); });
}

size_t EndpointCore::post_batch(std::span<const TransferItem> items, Direction direction, std::vector<Request>& out) {
  const char* what = direction == Direction::kSend ? "put" : "get";
  size_t posted = 0;
  bool issued = false, pushes_data = false;
  {
    engine::ProgressEngine::Guard guard(*engine_);
    for (const TransferItem& it : items) {
      if (Status refused = admission(); !refused) {
        out.push_back(failed_request(std::move(refused)));
        ++posted;
        continue;
      }
      Result<PathEnd> chosen = choose_one_sided(direction, it.local);
      if (!chosen) {
        out.push_back(failed_request(chosen.status().with_context(what)));
        ++posted;
        continue;
      }
      if (!chosen->inline_ready()) break;  // a copy first, without the lock: put() does it
      count_posted(stats_, *chosen);
      RmaInitiator::Posted p = direction == Direction::kSend
                                   ? initiator_.put(std::move(*chosen), it.key, it.remote_offset, PutOptions{})
                                   : initiator_.get(std::move(*chosen), it.key, it.remote_offset);
      issued |= p.issued;
      pushes_data |= p.pushes_data;
      out.push_back(std::move(p.request));
      ++posted;
    }
    if (issued) {
      pump(/*one_round=*/true);
      if (pushes_data) engine_->driven_by_caller();
    }
  }
  return posted;
}

namespace {

/// Whether the key grants `direction`'s right over the item's range, as the target checks.
bool granted(const TransferItem& it, Direction direction) {
  const Access needed = direction == Direction::kSend ? Access::kRemoteWrite : Access::kRemoteRead;
  return it.key.kind == MemoryKind::kHost && has_access(it.key.access, needed) && it.remote_offset <= it.key.length &&
         it.local.size() <= it.key.length - it.remote_offset;
}

}  // namespace

std::vector<std::vector<size_t>> EndpointCore::segment_groups(std::span<const TransferItem> items,
                                                              Direction direction) {
  std::vector<std::vector<size_t>> groups;
  if (!config_.segments || (params_.peer_capabilities & wire::kCapSegments) == 0 || items.size() < 2) return groups;
  engine::ProgressEngine::Guard guard(*engine_);
  if (chunks_.pull_tx() || peer_pid_ != 0) return groups;
  std::vector<uint64_t> bytes;  // of each group
  std::vector<size_t> open;     // groups with room, at most one per key
  for (size_t i = 0; i < items.size(); ++i) {
    const TransferItem& it = items[i];
    if (it.local.empty() || !granted(it, direction) || !paths_.memory_of(it.local.data(), it.local.size()).on_host()) {
      continue;
    }
    auto same_key = std::ranges::find_if(open, [&](size_t g) { return items[groups[g].front()].key == it.key; });
    if (same_key == open.end()) {
      groups.emplace_back();
      bytes.push_back(0);
      same_key = open.insert(open.end(), groups.size() - 1);
    }
    const size_t g = *same_key;
    groups[g].push_back(i);
    bytes[g] += it.local.size();
    if (groups[g].size() == wire::kMaxSegments) open.erase(same_key);
  }
  std::vector<std::vector<size_t>> kept;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].size() >= 2 && bytes[g] > wire::kMaxInlineRma) kept.push_back(std::move(groups[g]));
  }
  return kept;
}

Request EndpointCore::post_segmented(std::span<const TransferItem> items, std::span<const size_t> group,
                                     Direction direction) {
  std::vector<SegmentMap::Piece> local(group.size());
  std::vector<wire::Segment> remote(group.size());
  uint64_t length = 0;
  for (size_t k = 0; k < group.size(); ++k) {
    const TransferItem& it = items[group[k]];
    local[k] = {.at = reinterpret_cast<uintptr_t>(it.local.data()), .length = it.local.size()};
    remote[k] = {.offset = it.remote_offset, .length = it.local.size()};
    length += it.local.size();
  }
  SegmentMap map(std::move(local));
  PathEnd end = direction == Direction::kSend
                    ? PathEnd::segmented_source(std::make_unique<SegmentedHostSource>(std::move(map)), length)
                    : PathEnd::segmented_sink(std::make_unique<SegmentedHostSink>(std::move(map)), length);
  const RemoteKey& key = items[group.front()].key;
  engine::ProgressEngine::Guard guard(*engine_);
  if (Status refused = admission(); !refused) return failed_request(std::move(refused));
  ++stats_.segmented;
  return after_posting(direction == Direction::kSend
                           ? initiator_.put(std::move(end), key, 0, PutOptions{}, wire::encode_segments(remote))
                           : initiator_.get(std::move(end), key, 0, wire::encode_segments(remote)));
}

Request EndpointCore::atomic(uint64_t* result, const RemoteKey& key, uint64_t offset, wire::AtomicOp op,
                             uint64_t operand, uint64_t compare) {
  if (Request done = try_direct_atomic(result, key, offset, op, operand, compare); done.valid()) return done;
  // The operands travel in the ATOMIC frame and the result in the RESP: no data path.
  engine::ProgressEngine::Guard guard(*engine_);
  if (Status refused = admission(); !refused) return failed_request(std::move(refused));
  return after_posting(initiator_.atomic(result, key, offset, op, operand, compare));
}

Request EndpointCore::flush() {
  engine::ProgressEngine::Guard guard(*engine_);
  if (Status down = inactive(); !down) return failed_request(std::move(down));
  return initiator_.flush();
}

void EndpointCore::serve_request(const wire::PutFrame& f) {
  if (f.inline_data && !crc_as_negotiated(f.has_crc, "inline PUT")) return;
  if (!target_.admit(f.op_id)) return;
  // A segmented put always travels in chunks (the decoder refuses SEGMENTS with INLINE).
  if (f.segments.empty() && f.inline_data != (rma_class(f.length) == TransferClass::kInline)) {
    protocol_error(fmt::format("PUT of {} bytes {} inline (negotiated eager limit {}, inline RMA at most {})", f.length,
                               f.inline_data ? "sent" : "not sent", eager_limit_, wire::kMaxInlineRma));
    return;
  }
  target_.serve_put(f);
  // A notified put the usual way: the queue may have room again for the peer's PLACED
  // frames, if it ran out of places.
  if (f.has_notify && grants_.any()) credit_placed();
}

void EndpointCore::serve_request(const wire::GetFrame& f) {
  // A segmented get's reply always travels in chunks.
  if (target_.admit(f.op_id)) target_.serve_get(f, f.segments.empty() ? rma_class(f.length) : TransferClass::kChunked);
}

void EndpointCore::serve_request(const wire::AtomicFrame& f) {
  if (target_.admit(f.op_id)) target_.serve_atomic(f);
}

void EndpointCore::fail_one_sided(const Status& why) {
  initiator_.fail(why);
  target_.fail();
  notifications_.fail();
}

void EndpointCore::run_handler_later() {
  engine_->defer([self = shared_from_this()] { self->notifications_.run_handler(); });
}

}  // namespace remora::detail
