// datapath/bounce.cc — see bounce.h.
#include "datapath/bounce.h"

#include <cerrno>
#include <utility>

#include "datapath/staging.h"

namespace remora::detail {
// --- the copies ----------------------------------------------------------------------

bool InlineCopies::open() {
  if (region_ && !region_->begin()) revoked_ = true;
  return !revoked_;
}

void InlineCopies::close() noexcept {
  if (region_) region_->end();
}

Status InlineCopies::track(Result<std::unique_ptr<AsyncCopy>> copy, std::function<void(const Status&)> done) {
  if (!copy) {
    close();
    return copy.status();
  }
  ++*copying_;
  std::function<void()> close_bracket;
  if (region_) close_bracket = [region = region_] { region->end(); };
  when_copied(
      engine_, std::move(*copy),
      [copying = std::weak_ptr<size_t>(copying_), done = std::move(done)](const Status& s) {
        if (auto left = copying.lock()) --*left;
        done(s);
      },
      std::move(close_bracket));
  return Status(StatusCode::kInProgress, "copying");
}

// --- into device memory -------------------------------------------------------------

Status InlineCopyIn::place(std::span<const std::byte> bytes, ChunkSink::InlinePlaced done) {
  if (bytes.empty()) return Status::ok();
  if (!copies_.open()) return revoked_status();
  // The bytes live in the control stream's buffer only for this call: the copy takes
  // its own (an inline payload is at most the eager limit).
  auto held = std::make_shared<std::vector<std::byte>>(bytes.begin(), bytes.end());
  return copies_.track(copies_.device().copy_from_host(dst_, held->data(), held->size()),
                       [held, done = std::move(done)](const Status& s) { done(s); });
}

net::IoResult BounceSink::read(StreamIn& /*in*/, uint64_t /*offset*/, uint64_t /*len*/, uint64_t* asked) {
  *asked = 0;
  return net::IoResult{.kind = net::IoResult::Kind::kError, .err = EPROTO};
}

// --- out of device memory -------------------------------------------------------------

BounceSource::BounceSource(std::shared_ptr<engine::ProgressEngine> engine, MemoryDomain& device, const std::byte* src,
                           uint64_t length, std::shared_ptr<const RegionAccess> region)
    : copies_(std::move(engine), device, std::move(region)), src_(src), length_(length) {}

BounceSource::~BounceSource() = default;

net::IoResult BounceSource::write(int fd, uint64_t offset, uint64_t len) {
  return net::send_some(fd, bytes_.data() + offset, len);
}

Status BounceSource::copy_inline(Duration timeout) {
  if (inline_ready()) return Status::ok();
  bytes_.resize(length_);
  auto copy = copies_.device().copy_to_host(bytes_.data(), src_, length_);
  Status copied = copy ? (*copy)->wait(timeout) : copy.status();
  if (copied.is_ok()) copied_ = true;
  return copied;
}

Status BounceSource::read_inline(uint64_t length, const InlineNow& now, InlineLater later) {
  if (copied_) {
    now(std::span<const std::byte>(bytes_.data(), length));
    return Status::ok();
  }
  if (!copies_.open()) return revoked_status();
  if (length == 0) {
    now({});
    copies_.close();
    return Status::ok();
  }
  auto held = std::make_shared<std::vector<std::byte>>(length);
  return copies_.track(copies_.device().copy_to_host(held->data(), src_, length),
                       [held, later = std::move(later)](const Status& s) {
                         later(s.is_ok() ? std::span<const std::byte>(*held) : std::span<const std::byte>(), s);
                       });
}

}  // namespace remora::detail
