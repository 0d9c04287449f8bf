// coll/device_stage.cc — see device_stage.h.
#include "coll/device_stage.h"

#include <utility>

#include <fmt/format.h>

#include "remora/context.h"

namespace remora::coll {

DeviceStage::DeviceStage(CommCore& comm) : comm_(comm) {}

void* DeviceStage::stage(const void* p, size_t bytes, bool written) {
  if (p == nullptr || p == kInPlace || bytes == 0) return const_cast<void*>(p);
  MemoryDomain* device = comm_.world().context().device_domain_of(p, bytes);
  if (device == nullptr) return const_cast<void*>(p);
  auto host = std::make_shared<std::vector<std::byte>>(bytes);
  staged_.push_back(Staged{device, const_cast<void*>(p), bytes, written, host});
  return host->data();
}

const void* DeviceStage::in(const void* p, size_t bytes) { return stage(p, bytes, false); }
void* DeviceStage::inout(void* p, size_t bytes) { return stage(p, bytes, true); }

namespace {
Status copy_and_wait(Result<std::unique_ptr<AsyncCopy>> copy, Duration timeout, std::string_view what,
                     const MemoryDomain& domain, size_t bytes) {
  Status s = copy ? (*copy)->wait(timeout) : copy.status();
  if (s.is_ok()) return s;
  return s.with_context(fmt::format("collective: staging {} bytes {} {} memory", bytes, what, domain.name()));
}
}  // namespace

CommCore::Body DeviceStage::wrap(CommCore::Body body) {
  if (staged_.empty()) return body;
  return [body = std::move(body), staged = std::move(staged_)](Op& op) -> Status {
    const Duration timeout = op.config().timeout;
    for (const Staged& s : staged) {
      REMORA_RETURN_IF_ERROR(copy_and_wait(s.domain->copy_to_host(s.host->data(), s.device, s.bytes), timeout,
                                           "out of", *s.domain, s.bytes));
    }
    REMORA_RETURN_IF_ERROR(body(op));
    for (const Staged& s : staged) {
      if (!s.written) continue;
      REMORA_RETURN_IF_ERROR(copy_and_wait(s.domain->copy_from_host(s.device, s.host->data(), s.bytes), timeout,
                                           "into", *s.domain, s.bytes));
    }
    return Status::ok();
  };
}

}  // namespace remora::coll
