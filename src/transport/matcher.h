// transport/matcher.h — two-sided tag matching for one endpoint: the receives posted
// before their message arrived, and the messages (eager payloads, rendezvous
// announcements) that arrived before their receive, each queue per tag in order, so a
// receive matches the oldest unmatched message with its tag and messages with one tag
// are received in send order. It decides nothing about credits, CTS or chunks: the
// endpoint does that with what it takes out of here. Runs under the progress lock.
#pragma once

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

/// A posted receive: where its message goes.
struct RecvOp {
  std::shared_ptr<RequestState> req;
  uint64_t capacity = 0;
  Tag tag{};
  /// Where the message's bytes go, chosen when the receive is posted (DataPaths::choose):
  /// an eager message is placed through it, a rendezvous one's chunks land through its
  /// sink (`in.sink`).
  PathEnd end;
  RxTransfer in;
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
  /// The oldest posted receive for `tag`, taken out; null if none.
  std::unique_ptr<RecvOp> take_posted(Tag tag);
  void post(std::unique_ptr<RecvOp> op);
  /// Completes every posted receive with `why` and forgets them; how many there were.
  size_t fail_posted(const Status& why);

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
  static uint64_t key(Tag tag) { return static_cast<uint64_t>(tag); }
  std::unordered_map<uint64_t, std::deque<std::unique_ptr<RecvOp>>> posted_;
  std::unordered_map<uint64_t, std::deque<Unexpected>> unexpected_;
  uint64_t unexpected_rts_ = 0;
};

}  // namespace remora::detail
