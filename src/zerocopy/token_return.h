// zerocopy/token_return.h — giving devmem fragments back: collects the tokens of
// consumed fragments, coalesces adjacent token ids into ranges, and returns them with
// setsockopt(SO_DEVMEM_DONTNEED) in calls that respect the kernel's per-call limits
// (uapi::kMaxDontneedTokens ranges, uapi::kMaxDontneedFrags tokens), checking how many
// the kernel says it freed. The setsockopt is a function object, so a test can see
// exactly which batches went out; devmem_dontneed() is the real one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "remora/status.h"
#include "zerocopy/uapi.h"

namespace remora::zerocopy {

/// One SO_DEVMEM_DONTNEED call: the number of tokens the kernel freed, or the error it
/// gave. `ranges` respects the kernel's limits when TokenReturner built it.
using DontneedFn = std::function<Result<uint32_t>(int fd, std::span<const uapi::DmabufToken> ranges)>;

/// The real call: setsockopt(fd, SOL_SOCKET, SO_DEVMEM_DONTNEED, ranges). Its return value
/// is the number of tokens freed. Errors name the errno and what it means here: EBADF
/// (not a TCP socket), EINVAL (more than kMaxDontneedTokens ranges, or a length that is
/// not a whole number of ranges), ENOPROTOOPT (a kernel without devmem: before 6.12 or
/// without CONFIG_PAGE_POOL), EFAULT.
Result<uint32_t> devmem_dontneed(int fd, std::span<const uapi::DmabufToken> ranges);

/// Sorts `tokens`, drops duplicates, and coalesces runs of consecutive ids into ranges of
/// at most `max_count` tokens each. Returns the number of duplicates dropped.
size_t coalesce_tokens(std::vector<uint32_t>* tokens, std::vector<uapi::DmabufToken>* ranges,
                       uint32_t max_count = uapi::kMaxDontneedFrags);

/// Collects the tokens of one devmem socket and gives them back in batches.
///
/// Not thread-safe: one owner per socket, the thread that reads it. Tokens are the
/// socket's: give them back on the socket they came from, never on another.
class TokenReturner {
 public:
  struct Stats {
    uint64_t calls = 0;     ///< SO_DEVMEM_DONTNEED calls made
    uint64_t returned = 0;  ///< tokens the kernel said it freed
    uint64_t refused = 0;   ///< tokens given back that the kernel did not free
  };

  /// `fd` is the devmem socket (not owned). `dontneed` defaults to devmem_dontneed.
  explicit TokenReturner(int fd, DontneedFn dontneed = devmem_dontneed);

  /// Queues the token of one consumed fragment. Cheap: no system call, and no allocation
  /// once the queue has grown to its working size.
  void add(uint32_t token) { pending_.push_back(token); }
  size_t pending() const { return pending_.size(); }

  /// Gives back every queued token, in as few calls as the kernel's limits allow
  /// (coalesced ranges; at most kMaxDontneedTokens ranges and kMaxDontneedFrags tokens per
  /// call). The queue is empty afterwards, whatever happened: a token the kernel refused
  /// once is not retried, since its id may already belong to a new fragment.
  ///
  /// Errors: the call's own error (the remaining batches are still sent, so that valid
  /// tokens are not stranded by one bad batch; the first error is returned); kInvalidArgument
  /// when a token was queued twice; kProtocol when the kernel freed fewer tokens than a
  /// batch held (a short return: those tokens were not outstanding on this socket — given
  /// back already, or from another socket). The message counts what was and was not freed.
  Status flush();

  const Stats& stats() const { return stats_; }

 private:
  int fd_;
  DontneedFn dontneed_;
  std::vector<uint32_t> pending_;
  std::vector<uapi::DmabufToken> ranges_;
  Stats stats_;
};

}  // namespace remora::zerocopy
