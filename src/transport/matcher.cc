// transport/matcher.cc — see matcher.h.
#include "transport/matcher.h"

#include <utility>

namespace remora::detail {

std::unique_ptr<RecvOp> Matcher::take_posted(Tag tag) {
  auto it = posted_.find(key(tag));
  if (it == posted_.end()) return nullptr;
  std::unique_ptr<RecvOp> op = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) posted_.erase(it);
  return op;
}

void Matcher::post(std::unique_ptr<RecvOp> op) {
  const uint64_t k = key(op->tag);
  posted_[k].push_back(std::move(op));
}

size_t Matcher::fail_posted(const Status& why) {
  size_t n = 0;
  for (auto& [tag, q] : posted_) {
    for (auto& op : q) op->req->complete(why, 0);
    n += q.size();
  }
  posted_.clear();
  return n;
}

std::optional<Unexpected> Matcher::take_unexpected(Tag tag) {
  auto it = unexpected_.find(key(tag));
  if (it == unexpected_.end()) return std::nullopt;
  Unexpected u = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) unexpected_.erase(it);
  if (!u.eager) --unexpected_rts_;
  return u;
}

void Matcher::add_eager(Tag tag, std::span<const std::byte> payload, Status corrupt) {
  Unexpected u;
  u.eager = true;
  u.corrupt = std::move(corrupt);
  u.payload.assign(payload.begin(), payload.end());
  u.length = payload.size();
  unexpected_[key(tag)].push_back(std::move(u));
}

bool Matcher::add_rts(Tag tag, uint64_t send_id, uint64_t length, uint64_t max) {
  if (unexpected_rts_ >= max) return false;
  ++unexpected_rts_;
  Unexpected u;
  u.send_id = send_id;
  u.length = length;
  unexpected_[key(tag)].push_back(std::move(u));
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
