// core/status.cc — status code names, Status formatting, and the abort behind
// Result::value() on an error.
#include "remora/status.h"

#include <cstdio>
#include <cstdlib>

#include "remora/types.h"

namespace remora {

std::string_view to_string(StatusCode code) noexcept {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInProgress: return "in_progress";
    case StatusCode::kNoResource: return "no_resource";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kInvalidKey: return "invalid_key";
    case StatusCode::kAccessDenied: return "access_denied";
    case StatusCode::kOutOfRange: return "out_of_range";
    case StatusCode::kTruncated: return "truncated";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kPeerFailed: return "peer_failed";
    case StatusCode::kUnreachable: return "unreachable";
    case StatusCode::kProtocol: return "protocol";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kAborted: return "aborted";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kDeviceFailed: return "device_failed";
    case StatusCode::kDataCorrupt: return "data_corrupt";
  }
  return "unknown";
}

std::string_view to_string(MemoryKind kind) noexcept {
  switch (kind) {
    case MemoryKind::kHost: return "host";
    case MemoryKind::kCuda: return "cuda";
    case MemoryKind::kDmabuf: return "dmabuf";
  }
  // remora::testing::kTestDeviceKind (remora/testing/test_device.h), which core cannot see.
  return static_cast<uint8_t>(kind) == 3 ? "test-device" : "unknown";
}

std::string Status::to_string() const {
  std::string out(remora::to_string(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

Status Status::with_context(std::string_view prefix) const {
  if (is_ok()) return *this;
  std::string msg(prefix);
  msg += ": ";
  msg += message_;
  return {code_, std::move(msg)};
}

namespace detail {

void result_value_on_error(const Status& status) noexcept {
  // One write, so the line is not interleaved with other threads' output.
  const std::string line = "remora: Result::value() called on an error: " + status.to_string() + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace detail

}  // namespace remora
