// datapath/bounce.cc — see bounce.h.
#include "datapath/bounce.h"

#include <cerrno>
#include <utility>

#include "datapath/staging.h"

namespace remora::detail {
namespace {

/// What closes a copy's bracket on the thread that ends it; nothing without a region.
std::function<void()> bracket_closer(const std::shared_ptr<const RegionAccess>& region) {
  if (!region) return {};
  return [region] { region->end(); };
}

}  // namespace

// --- into device memory -------------------------------------------------------------

InlineCopyIn::InlineCopyIn(std::shared_ptr<engine::ProgressEngine> engine, MemoryDomain& device, std::byte* dst,
                           std::shared_ptr<const RegionAccess> region)
    : engine_(std::move(engine)), device_(&device), dst_(dst), region_(std::move(region)) {}

Status InlineCopyIn::place(std::span<const std::byte> bytes, ChunkSink::InlinePlaced done) {
  if (bytes.empty()) return Status::ok();
  if (region_ && !region_->begin()) {
    revoked_ = true;
    return revoked_status();
  }
  // The bytes live in the control stream's buffer only for this call: the copy takes
  // its own (an inline payload is at most the eager limit).
  auto held = std::make_shared<std::vector<std::byte>>(bytes.begin(), bytes.end());
  auto copy = device_->copy_from_host(dst_, held->data(), held->size());
  if (!copy) {
    if (region_) region_->end();
    return copy.status();
  }
  ++*copying_;
  when_copied(
      engine_, std::move(*copy),
      [copying = std::weak_ptr<size_t>(copying_), held, done = std::move(done)](const Status& s) {
        if (auto left = copying.lock()) --*left;
        done(s);
      },
      bracket_closer(region_));
  return Status(StatusCode::kInProgress, "copying");
}

net::IoResult BounceSink::read(StreamIn& /*in*/, uint64_t /*offset*/, uint64_t /*len*/, uint64_t* asked) {
  *asked = 0;
  return net::IoResult{.kind = net::IoResult::Kind::kError, .err = EPROTO};
}

// --- out of device memory -------------------------------------------------------------

BounceSource::BounceSource(std::shared_ptr<engine::ProgressEngine> engine, MemoryDomain& device, const std::byte* src,
                           uint64_t length, std::shared_ptr<const RegionAccess> region)
    : engine_(std::move(engine)), device_(&device), src_(src), length_(length), region_(std::move(region)) {}

BounceSource::~BounceSource() = default;

net::IoResult BounceSource::write(int fd, uint64_t offset, uint64_t len) {
  return net::send_some(fd, bytes_.data() + offset, len);
}

Status BounceSource::copy_inline(Duration timeout) {
  if (inline_ready()) return Status::ok();
  bytes_.resize(length_);
  auto copy = device_->copy_to_host(bytes_.data(), src_, length_);
  Status copied = copy ? (*copy)->wait(timeout) : copy.status();
  if (copied.is_ok()) copied_ = true;
  return copied;
}

Status BounceSource::read_inline(uint64_t length, const InlineNow& now, InlineLater later) {
  if (copied_) {
    now(std::span<const std::byte>(bytes_.data(), length));
    return Status::ok();
  }
  if (region_ && !region_->begin()) {
    revoked_ = true;
    return revoked_status();
  }
  if (length == 0) {
    now({});
    if (region_) region_->end();
    return Status::ok();
  }
  auto held = std::make_shared<std::vector<std::byte>>(length);
  auto copy = device_->copy_to_host(held->data(), src_, length);
  if (!copy) {
    if (region_) region_->end();
    return copy.status();
  }
  ++*copying_;
  when_copied(
      engine_, std::move(*copy),
      [copying = std::weak_ptr<size_t>(copying_), held, later = std::move(later)](const Status& s) {
        if (auto left = copying.lock()) --*left;
        later(s.is_ok() ? std::span<const std::byte>(*held) : std::span<const std::byte>(), s);
      },
      bracket_closer(region_));
  return Status(StatusCode::kInProgress, "copying");
}

}  // namespace remora::detail
