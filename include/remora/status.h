// remora/status.h — error values used across the whole public API.
//
// Every fallible call returns a `Status` or a `Result<T>`; no exception crosses
// the API. Both are [[nodiscard]]: ignoring an error is a compile warning. Taking the
// value of a Result that holds an error (value(), operator*, operator->) is a
// programming error, not an exception: it prints the error to stderr and aborts.
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
  kDeviceFailed,     ///< a device (accelerator) copy or registration failed; the message says which
  kDataCorrupt,      ///< a transfer's bytes failed their end-to-end checksum (REMORA_CHECKSUM); the message says where
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

namespace detail {
/// Prints "remora: Result::value() called on an error: <code>: <message>" to stderr
/// and calls std::abort(). The out-of-line slow path of Result's accessors.
[[noreturn]] void result_value_on_error(const Status& status) noexcept;
}  // namespace detail

/// A value or an error Status. Set only on success (UCX's discipline).
///
/// value(), operator* and operator-> require is_ok(). Called on an error they do not
/// throw: they print one line to stderr,
///   remora: Result::value() called on an error: <code>: <message>
/// (the Status's to_string(), e.g. "invalid_argument: REMORA_STREAMS: ...") and call
/// std::abort(), so `Context::create().value()` in a program that cannot go on without
/// a context still says why it stopped. Check is_ok() (or use REMORA_ASSIGN_OR_RETURN)
/// where an error is something to handle. The check is one predictable branch.
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

  /// The value; on an error, prints it and aborts (see the class comment).
  T& value() & { return *checked(); }
  const T& value() const& { return *checked(); }
  T&& value() && { return std::move(*checked()); }
  T* operator->() { return checked(); }
  const T* operator->() const { return checked(); }
  T& operator*() & { return *checked(); }
  const T& operator*() const& { return *checked(); }

 private:
  T* checked() {
    if (v_.index() != 0) [[unlikely]] {
      detail::result_value_on_error(*std::get_if<1>(&v_));
    }
    return std::get_if<0>(&v_);
  }
  const T* checked() const {
    if (v_.index() != 0) [[unlikely]] {
      detail::result_value_on_error(*std::get_if<1>(&v_));
    }
    return std::get_if<0>(&v_);
  }

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
