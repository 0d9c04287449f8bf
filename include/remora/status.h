// remora/status.h — error values used across the whole public API.
//
// Every fallible call returns a `Status` or a `Result<T>`; no exception crosses
// the API. Both are [[nodiscard]]: ignoring an error is a compile warning.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace remora {

/// The closed set of error kinds. The message carries the detail.
enum class StatusCode : uint8_t {
  kOk = 0,
  kInProgress,       ///< operation started but not complete (Request::test)
  kNoResource,       ///< back-pressure or an exhausted budget; retry later or raise the budget
  kInvalidArgument,  ///< the caller passed something malformed
  kInvalidKey,       ///< a remote key is forged, stale or unknown
  kAccessDenied,     ///< the key lacks the access right the operation needs
  kOutOfRange,       ///< offset/length outside what was registered or granted
  kTruncated,        ///< a message is larger than the receive buffer posted for it
  kTimeout,          ///< a bounded wait expired
  kPeerFailed,       ///< the peer disappeared (EOF, reset) or sent something fatal
  kUnreachable,      ///< could not resolve or connect to the peer
  kProtocol,         ///< malformed frame, bad handshake or version mismatch
  kUnsupported,      ///< feature not available here (and the message says why)
  kAborted,          ///< cancelled locally (endpoint closed, context destroyed)
  kInternal,         ///< an invariant broke; please report
};

/// Stable lower-case name of a code, e.g. "peer_failed".
std::string_view to_string(StatusCode code) noexcept;

/// A code plus a human-readable message telling the user what happened and what to do.
/// Cheap to copy when ok (no allocation). Thread-compatible.
class [[nodiscard]] Status {
 public:
  Status() noexcept = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() noexcept { return {}; }

  bool is_ok() const noexcept { return code_ == StatusCode::kOk; }
  explicit operator bool() const noexcept { return is_ok(); }
  StatusCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  /// "peer_failed: connection reset by peer"
  std::string to_string() const;

  /// Prefixes context to the message, keeping the code: "connect 10.0.0.1:7100: ...".
  Status with_context(std::string_view prefix) const;

  friend bool operator==(const Status& a, const Status& b) noexcept {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

/// A value or an error Status. Set only on success (UCX's discipline).
template <typename T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::decay_t<T>, Status>, "Result<Status> makes no sense");

 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::in_place_index<1>, std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<1>(v_).is_ok()) {
      v_.template emplace<1>(StatusCode::kInternal, "Result constructed from an ok Status without a value");
    }
  }

  bool is_ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return is_ok(); }

  /// The error, or ok.
  Status status() const { return is_ok() ? Status() : std::get<1>(v_); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& operator*() & { return std::get<0>(v_); }
  const T& operator*() const& { return std::get<0>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace remora

#define REMORA_CONCAT_INNER_(a, b) a##b
#define REMORA_CONCAT_(a, b) REMORA_CONCAT_INNER_(a, b)

/// Returns the Status from the enclosing function if `expr` is not ok.
#define REMORA_RETURN_IF_ERROR(expr)                     \
  do {                                                   \
    ::remora::Status remora_status_ = (expr);            \
    if (!remora_status_.is_ok()) return remora_status_;  \
  } while (0)

/// `REMORA_ASSIGN_OR_RETURN(auto x, make_x());`
#define REMORA_ASSIGN_OR_RETURN(lhs, expr) \
  REMORA_ASSIGN_OR_RETURN_IMPL_(REMORA_CONCAT_(remora_result_, __LINE__), lhs, expr)
#define REMORA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.is_ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
