// zerocopy/token_return.cc — see token_return.h.
#include "zerocopy/token_return.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "zerocopy/kernel_error.h"

namespace remora::zerocopy {

Result<uint32_t> devmem_dontneed(int fd, std::span<const uapi::DmabufToken> ranges) {
  const auto len = static_cast<socklen_t>(ranges.size_bytes());
  const int rc = ::setsockopt(fd, SOL_SOCKET, uapi::kSoDevmemDontneed, ranges.data(), len);
  if (rc >= 0) return static_cast<uint32_t>(rc);
  const int err = errno;
  std::string what = fmt::format("setsockopt(SO_DEVMEM_DONTNEED, {} ranges): {}", ranges.size(), errno_text(err));
  switch (err) {
    case EBADF:
      return Status(StatusCode::kInvalidArgument, what +
                                                      ": not a TCP socket (tokens belong to the devmem TCP socket "
                                                      "they came from)");
    case EINVAL:
      return Status(StatusCode::kInvalidArgument,
                    what + fmt::format(": more than {} ranges, or not a whole number of struct dmabuf_token",
                                       uapi::kMaxDontneedTokens));
    case ENOPROTOOPT:
      return Status(StatusCode::kUnsupported,
                    what + ": this kernel has no devmem TCP (Linux 6.12 or later with CONFIG_PAGE_POOL)");
    case ENOMEM: return Status(StatusCode::kNoResource, what);
    default: return Status(StatusCode::kInternal, what);
  }
}

size_t coalesce_tokens(std::vector<uint32_t>* tokens, std::vector<uapi::DmabufToken>* ranges, uint32_t max_count) {
  std::sort(tokens->begin(), tokens->end());
  const size_t before = tokens->size();
  tokens->erase(std::unique(tokens->begin(), tokens->end()), tokens->end());
  ranges->clear();
  for (const uint32_t token : *tokens) {
    if (!ranges->empty()) {
      uapi::DmabufToken& last = ranges->back();
      // token > last start (sorted, unique), so this never overflows.
      if (token - last.token_start == last.token_count && last.token_count < max_count) {
        ++last.token_count;
        continue;
      }
    }
    ranges->push_back({.token_start = token, .token_count = 1});
  }
  return before - tokens->size();
}

TokenReturner::TokenReturner(int fd, DontneedFn dontneed) : fd_(fd), dontneed_(std::move(dontneed)) {}

Status TokenReturner::flush() {
  if (pending_.empty()) return Status::ok();
  const size_t queued = pending_.size();
  const size_t duplicates = coalesce_tokens(&pending_, &ranges_);
  const size_t tokens = pending_.size();
  pending_.clear();

  std::optional<Status> first_error;
  uint64_t freed = 0, short_by = 0;
  size_t next = 0;
  while (next < ranges_.size()) {
    // One call: as many ranges as both limits allow. coalesce_tokens made every range at
    // most kMaxDontneedFrags long, so a call always takes at least one whole range.
    size_t end = next;
    uint32_t frags = 0;
    while (end < ranges_.size() && end - next < uapi::kMaxDontneedTokens &&
           frags + ranges_[end].token_count <= uapi::kMaxDontneedFrags) {
      frags += ranges_[end].token_count;
      ++end;
    }
    const std::span<const uapi::DmabufToken> batch(ranges_.data() + next, end - next);
    next = end;
    ++stats_.calls;
    Result<uint32_t> done = dontneed_(fd_, batch);
    if (!done) {
      stats_.refused += frags;
      if (!first_error) first_error = done.status();
      continue;
    }
    const uint32_t n = std::min(*done, frags);
    freed += n;
    short_by += frags - n;
    stats_.returned += n;
    stats_.refused += frags - n;
  }
  ranges_.clear();

  if (first_error) {
    return first_error->with_context(fmt::format("returning {} devmem tokens ({} freed by the kernel)", tokens, freed));
  }
  if (short_by > 0) {
    return {StatusCode::kProtocol,
            fmt::format("the kernel freed {} of {} devmem tokens given back: {} were not outstanding on this socket "
                        "(given back already, or tokens of another socket)",
                        freed, tokens, short_by)};
  }
  if (duplicates > 0) {
    return {StatusCode::kInvalidArgument,
            fmt::format("{} of {} devmem tokens were queued twice (each given back once; a fragment consumed twice?)",
                        duplicates, queued)};
  }
  return Status::ok();
}

}  // namespace remora::zerocopy
