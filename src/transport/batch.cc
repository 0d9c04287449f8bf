// transport/batch.cc — Endpoint::put_batch and Endpoint::get_batch: many puts or gets
// on one endpoint that complete as one Request, with at most one notification after
// all of a put batch's bytes are visible at the target.
//
// Built from what the endpoint already offers and the Request machinery: the items go
// as requests whose Requests report their ends through on_done to a shared countdown;
// the last one to end completes the batch's Request. Items of one key between host
// memory on both sides travel as segmented requests where the peer takes them
// (EndpointCore::segment_groups: one PUT or GET for up to wire::kMaxSegments items,
// their bytes in chunks of the usual size, so a list of small blocks moves like one
// buffer). The other items are ordinary puts or gets, posted together
// (EndpointCore::post_batch: one hold of the lock, admission counted item by item,
// their frames sent at once and pumped once), so that the peer wakes once for a list
// instead of once per block; an item whose device memory must be copied before it is
// posted goes alone through put()/get(), and the rest continue together. The
// notification cannot ride on one of the data puts, because puts are not ordered at the
// target (their chunks travel over different data streams): it goes in a zero-length
// put posted once every data put has completed at the target. That post happens
// outside the completing thread's progress lock: the countdown posts to the engine (any
// thread may), and the engine defers it to a thread that drives progress without the
// lock (as application callbacks run).
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "engine/request_state.h"
#include "transport/endpoint_core.h"

namespace remora {

namespace {

/// The countdown shared by the items of one batch.
struct Batch : std::enable_shared_from_this<Batch> {
  std::shared_ptr<detail::RequestState> req;  ///< the batch's Request
  std::atomic<size_t> pending{0};
  uint64_t bytes = 0;
  std::mutex mutex;                 // guards the two below
  size_t failed_index = std::numeric_limits<size_t>::max();
  Status failure;                   ///< of the lowest-numbered failed item
  // The notification to send once every item succeeded (put batches only).
  std::optional<uint64_t> notify;
  std::shared_ptr<detail::EndpointCore> core;
  RemoteKey notify_key;
  uint64_t notify_offset = 0;

  void item_ended(size_t index, const Status& s) {
    if (!s.is_ok()) {
      std::lock_guard lock(mutex);
      if (index < failed_index) {
        failed_index = index;
        failure = s;
      }
    }
    if (pending.fetch_sub(1, std::memory_order_acq_rel) == 1) all_ended();
  }

  // Runs on the thread that ended the last item (which may hold the progress lock).
  void all_ended() {
    Status first;
    {
      std::lock_guard lock(mutex);
      first = failure;
    }
    if (!first.is_ok() || !notify) {
      req->complete(first, first.is_ok() ? bytes : 0);
      return;
    }
    // Every byte is placed at the target: post the notification from a thread that
    // drives progress without the lock (posting a put takes it).
    std::shared_ptr<engine::ProgressEngine> engine = core->engine();
    std::weak_ptr<engine::ProgressEngine> weak = engine;
    auto self = shared_from_this();
    engine->post([weak, self] {
      if (auto e = weak.lock()) e->defer([self] { self->post_notification(); });
    });
  }

  void post_notification() {
    static const std::byte kNothing{};
    Request r = core->put(std::span<const std::byte>(&kNothing, 0), notify_key, notify_offset,
                          PutOptions{.notify = notify});
    auto self = shared_from_this();
    (void)r.on_done([self, r] {
      Status s = r.test();
      self->req->complete(s, s.is_ok() ? self->bytes : 0);
    });
  }

};

std::shared_ptr<Batch> make_batch(const std::shared_ptr<detail::EndpointCore>& core) {
  auto b = std::make_shared<Batch>();
  b->req = detail::RequestState::make(core->engine(), Tag{});
  return b;
}

// Hooks the Request of the request whose lowest-numbered item is `i` to the countdown.
// Its own state outlives the hook.
void watch(const std::shared_ptr<Batch>& b, size_t i, const Request& r) {
  (void)r.on_done([b, i, r] { b->item_ended(i, r.test()); });
}

// Posts `items`: the segmented groups first, then the rest together
// (EndpointCore::post_batch), and hooks each request to the countdown; an item that
// post_batch leaves (device memory to copy first) goes alone through `one`.
template <typename One>
void post_items(const std::shared_ptr<Batch>& b, detail::EndpointCore& core, std::span<const TransferItem> items,
                detail::Direction direction, const One& one) {
  const std::vector<std::vector<size_t>> groups = core.segment_groups(items, direction);
  std::vector<TransferItem> rest;  // the items no group took, and their numbers
  std::vector<size_t> rest_index;
  if (groups.empty()) {
    rest_index.resize(items.size());
    for (size_t i = 0; i < items.size(); ++i) rest_index[i] = i;
  } else {
    std::vector<bool> grouped(items.size());
    for (const auto& g : groups) {
      for (size_t i : g) grouped[i] = true;
    }
    for (size_t i = 0; i < items.size(); ++i) {
      if (grouped[i]) continue;
      rest.push_back(items[i]);
      rest_index.push_back(i);
    }
  }
  // Every request is counted before the first is watched (one may have ended already).
  b->pending.store(groups.size() + rest_index.size(), std::memory_order_relaxed);
  std::vector<std::pair<size_t, Request>> posted;
  posted.reserve(groups.size());
  for (const auto& g : groups) posted.emplace_back(g.front(), core.post_segmented(items, g, direction));
  const std::span<const TransferItem> singles = groups.empty() ? items : std::span<const TransferItem>(rest);
  std::vector<Request> single;
  single.reserve(singles.size());
  for (size_t at = 0; at < singles.size();) {
    at += core.post_batch(singles.subspan(at), direction, single);
    if (at < singles.size()) single.push_back(one(singles[at++]));
  }
  for (const auto& [i, r] : posted) watch(b, i, r);
  for (size_t k = 0; k < single.size(); ++k) watch(b, rest_index[k], single[k]);
}

}  // namespace

Request Endpoint::put_batch(std::span<const TransferItem> items, const PutOptions& options) {
  if (items.empty()) {
    if (options.notify) {
      return detail::make_request(detail::RequestState::completed(
          Status(StatusCode::kInvalidArgument, "put_batch: a notification needs at least one item to name its region"),
          0, Tag{}));
    }
    return detail::done_request(0, Tag{});
  }
  auto b = make_batch(core_);
  for (const TransferItem& it : items) b->bytes += it.local.size();
  if (options.notify) {
    b->notify = options.notify;
    b->core = core_;
    b->notify_key = items.back().key;
    b->notify_offset = items.back().remote_offset;
  }
  Request batch = detail::make_request(b->req);
  post_items(b, *core_, items, detail::Direction::kSend,
             [this](const TransferItem& it) { return core_->put(it.local, it.key, it.remote_offset, PutOptions{}); });
  return batch;
}

Request Endpoint::get_batch(std::span<const TransferItem> items) {
  if (items.empty()) return detail::done_request(0, Tag{});
  auto b = make_batch(core_);
  for (const TransferItem& it : items) b->bytes += it.local.size();
  Request batch = detail::make_request(b->req);
  post_items(b, *core_, items, detail::Direction::kReceive,
             [this](const TransferItem& it) { return core_->get(it.local, it.key, it.remote_offset); });
  return batch;
}

}  // namespace remora
