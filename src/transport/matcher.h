// transport/matcher.h — two-sided tag matching for one endpoint: the receives posted
// before their message arrived, and the messages (eager payloads, rendezvous
// announcements) that arrived before their receive, each queue per tag in order, so a
// receive matches the oldest unmatched message with its tag and messages with one tag
// are received in send order. It decides nothing about credits, CTS or chunks: the
// endpoint does that with what it takes out of here. Runs under the progress lock.
//
// A receive from any of several endpoints (remora::recv_any) is posted on each of them,
// every copy holding the same RecvClaim: the first endpoint whose message matches a
// copy takes the claim, and the other copies are dropped wherever they are met later
// (they never match, never touch the buffer and never complete the request).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "datapath/chunk_scheduler.h"
#include "datapath/path_end.h"
#include "engine/request_state.h"
#include "remora/types.h"

namespace remora::detail {

/// What the copies of one receive from any of several endpoints share (see the top of
/// this file). The copies run under their endpoints' progress locks, which may differ:
/// the claim is decided by an atomic exchange.
struct RecvClaim {
  std::shared_ptr<RequestState> req;  ///< the one request every copy completes (the winner only)
  int* matched = nullptr;             ///< where take() writes the winning endpoint's index
  std::atomic<bool> taken{false};
  /// Copies still posted on live endpoints, plus one held by recv_any while it posts:
  /// an orderly close by a peer drops its copy, and the last one dropped fails the claim.
  std::atomic<int> live{1};

  /// True for the one caller that decides the receive (a match, or its failure);
  /// the index of its endpoint is written to *matched before the request completes.
  bool take(int index) noexcept {
    bool expected = false;
    if (!taken.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) return false;
    if (matched != nullptr) *matched = index;
    return true;
  }
  bool decided() const noexcept { return taken.load(std::memory_order_acquire); }
};

/// A posted receive: where its message goes.
struct RecvOp {
  // Every member says how it starts: a provided constructor spares make_unique the
  // zero-filling of the whole object that value-initialization does first.
  RecvOp() noexcept {}  // NOLINT(modernize-use-equals-default)
  std::shared_ptr<RequestState> req;
  uint64_t capacity = 0;
  Tag tag{};
  /// Where the message's bytes go, chosen when the receive is posted (DataPaths::choose):
  /// an eager message is placed through it, a rendezvous one's chunks land through its
  /// sink (`in.sink`).
  PathEnd end;
  RxTransfer in;
  // A copy of a receive from any of several endpoints: its claim, and this endpoint's
  // index among them. Null for an ordinary receive.
  std::shared_ptr<RecvClaim> claim;
  int claim_index = 0;
};

/// A message that arrived before a receive for it was posted.
struct Unexpected {
  bool eager = false;
  std::vector<std::byte> payload;  // eager: the bytes, copied out of the control stream
  uint64_t send_id = 0;            // rendezvous: the sender's id for the CTS
  uint64_t length = 0;
  Status corrupt;                  // eager: the payload failed its checksum; the receive fails with this
};

class Matcher {
 public:
  /// The oldest posted receive for `tag` that may take a message, taken out; null if
  /// none. Copies of receives from any endpoint whose claim another endpoint took are
  /// dropped on the way; `*dropped` (if given) counts them (they were posted).
  std::unique_ptr<RecvOp> take_posted(Tag tag, size_t* dropped = nullptr);
  /// Queues `op`; drops (and returns the count of) the copies for its tag whose claim
  /// is decided, so that repeated receives from any endpoint leave no growing trail.
  size_t post(std::unique_ptr<RecvOp> op);
  /// Completes every posted receive with `why` and forgets them; how many there were.
  /// A copy of a receive from any endpoint fails its claim only if it can still take
  /// it; when `orderly` (the peer closed, other endpoints may still deliver) it fails
  /// it only as the last live copy.
  size_t fail_posted(const Status& why, bool orderly = false);

  /// Whether a message with `tag` arrived before any receive took it.
  bool has_unexpected(Tag tag) const;
  /// The oldest unexpected message for `tag`, taken out; nullopt if none.
  std::optional<Unexpected> take_unexpected(Tag tag);
  /// `corrupt`: the payload failed its checksum (kept for the credit it costs).
  void add_eager(Tag tag, std::span<const std::byte> payload, Status corrupt = Status::ok());
  /// Queues a rendezvous announcement, unless `max` of them are queued already
  /// (false: the peer broke the bound it was given).
  bool add_rts(Tag tag, uint64_t send_id, uint64_t length, uint64_t max);
  /// Drops the rendezvous announcements (their sender closed), keeps eager messages.
  void drop_rts();
  void clear_unexpected();

 private:
  using PostedMap = std::unordered_map<uint64_t, std::deque<std::unique_ptr<RecvOp>>>;
  using UnexpectedMap = std::unordered_map<uint64_t, std::deque<Unexpected>>;
  static uint64_t key(Tag tag) { return static_cast<uint64_t>(tag); }
  /// The queue of `k`, made from the spare entry when there is one.
  template <class Map>
  static typename Map::mapped_type& queue(Map& map, typename Map::node_type& spare, uint64_t k);
  /// Takes out the entry `it` (its queue is empty), keeping it as the spare.
  template <class Map>
  static void retire(Map& map, typename Map::node_type& spare, typename Map::iterator it);
  /// Receives posted while few wait, in post order: a ping-pong or a collective's
  /// exchange has one or two posted at a time, and looking through those costs less
  /// than a map entry put in and taken out per message. Once kFewPosted wait, later
  /// receives queue in posted_ until it empties again; the few are older than any of
  /// those, so they are matched first and each tag keeps its order.
  std::vector<std::unique_ptr<RecvOp>> few_;
  static constexpr size_t kFewPosted = 8;
  PostedMap posted_;
  UnexpectedMap unexpected_;
  // A tag's entry is taken out when its queue empties, so the maps hold only the tags
  // in use. The last entry taken out is kept (with its queue's storage) for the next
  // tag that needs one: a receive matched as it arrives (a ping-pong, one at a time)
  // would otherwise allocate the entry and its queue three times per message.
  PostedMap::node_type spare_posted_;
  UnexpectedMap::node_type spare_unexpected_;
  uint64_t unexpected_rts_ = 0;
};

}  // namespace remora::detail
