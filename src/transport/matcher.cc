// transport/matcher.cc — see matcher.h.
#include "transport/matcher.h"

#include <utility>

namespace remora::detail {

template <class Map>
typename Map::mapped_type& Matcher::queue(Map& map, typename Map::node_type& spare, uint64_t k) {
  if (auto it = map.find(k); it != map.end()) return it->second;
  if (spare.empty()) return map[k];
  spare.key() = k;
  return map.insert(std::move(spare)).position->second;
}

template <class Map>
void Matcher::retire(Map& map, typename Map::node_type& spare, typename Map::iterator it) {
  typename Map::node_type node = map.extract(it);
  if (spare.empty()) spare = std::move(node);
}

std::unique_ptr<RecvOp> Matcher::take_posted(Tag tag, size_t* dropped) {
  for (size_t i = 0; i < few_.size();) {
    if (few_[i]->tag != tag) {
      ++i;
      continue;
    }
    std::unique_ptr<RecvOp> op = std::move(few_[i]);
    few_.erase(few_.begin() + static_cast<std::ptrdiff_t>(i));
    if (!op->claim || op->claim->take(op->claim_index)) return op;
    if (dropped != nullptr) ++*dropped;  // another endpoint took this receive
  }
  if (posted_.empty()) return nullptr;
  auto it = posted_.find(key(tag));
  if (it == posted_.end()) return nullptr;
  std::unique_ptr<RecvOp> op;
  while (!it->second.empty() && !op) {
    op = std::move(it->second.front());
    it->second.pop_front();
    if (op->claim && !op->claim->take(op->claim_index)) {
      op.reset();  // another endpoint took this receive
      if (dropped != nullptr) ++*dropped;
    }
  }
  if (it->second.empty()) retire(posted_, spare_posted_, it);
  return op;
}

size_t Matcher::post(std::unique_ptr<RecvOp> op) {
  const Tag tag = op->tag;
  auto decided = [tag](const std::unique_ptr<RecvOp>& o) { return o->tag == tag && o->claim && o->claim->decided(); };
  size_t dropped = std::erase_if(few_, decided);
  if (posted_.empty() && few_.size() < kFewPosted) {
    few_.push_back(std::move(op));
    return dropped;
  }
  auto& q = queue(posted_, spare_posted_, key(tag));
  dropped += std::erase_if(q, decided);
  q.push_back(std::move(op));
  return dropped;
}

size_t Matcher::fail_posted(const Status& why, bool orderly) {
  auto fail = [&](const RecvOp& op) {
    if (!op.claim) {
      op.req->complete(why, 0);
    } else if (!orderly || op.claim->live.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      if (op.claim->take(op.claim_index)) op.req->complete(why, 0);
    }
  };
  for (const auto& op : few_) fail(*op);
  size_t n = few_.size();
  few_.clear();
  for (auto& [tag, q] : posted_) {
    for (const auto& op : q) fail(*op);
    n += q.size();
  }
  posted_.clear();
  return n;
}

bool Matcher::has_unexpected(Tag tag) const { return !unexpected_.empty() && unexpected_.contains(key(tag)); }

std::optional<Unexpected> Matcher::take_unexpected(Tag tag) {
  if (unexpected_.empty()) return std::nullopt;  // every receive asks: no hashing when none waits
  auto it = unexpected_.find(key(tag));
  if (it == unexpected_.end()) return std::nullopt;
  Unexpected u = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) retire(unexpected_, spare_unexpected_, it);
  if (!u.eager) --unexpected_rts_;
  return u;
}

void Matcher::add_eager(Tag tag, std::span<const std::byte> payload, Status corrupt) {
  Unexpected u;
  u.eager = true;
  u.corrupt = std::move(corrupt);
  u.payload.assign(payload.begin(), payload.end());
  u.length = payload.size();
  queue(unexpected_, spare_unexpected_, key(tag)).push_back(std::move(u));
}

bool Matcher::add_rts(Tag tag, uint64_t send_id, uint64_t length, uint64_t max) {
  if (unexpected_rts_ >= max) return false;
  ++unexpected_rts_;
  Unexpected u;
  u.send_id = send_id;
  u.length = length;
  queue(unexpected_, spare_unexpected_, key(tag)).push_back(std::move(u));
  return true;
}

void Matcher::drop_rts() {
  for (auto it = unexpected_.begin(); it != unexpected_.end();) {
    std::erase_if(it->second, [](const Unexpected& u) { return !u.eager; });
    it = it->second.empty() ? unexpected_.erase(it) : std::next(it);
  }
  unexpected_rts_ = 0;
}

void Matcher::clear_unexpected() {
  unexpected_.clear();
  unexpected_rts_ = 0;
}

}  // namespace remora::detail
