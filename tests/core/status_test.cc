// Tests for core/status.cc: Status and Result, and what taking the value of an error
// does (prints the status, then aborts: no exception crosses the API).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "remora/config.h"
#include "remora/status.h"
#include "remora/types.h"

namespace remora {
namespace {

TEST(Status, OkHasNoMessageAndErrorsCarryCodeAndMessage) {
  Status ok;
  EXPECT_TRUE(ok.is_ok());
  EXPECT_EQ(ok.to_string(), "ok");
  Status s(StatusCode::kPeerFailed, "connection reset");
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.to_string(), "peer_failed: connection reset");
  Status c = s.with_context("connect 10.0.0.1:7100");
  EXPECT_EQ(c.code(), StatusCode::kPeerFailed);
  EXPECT_EQ(c.message(), "connect 10.0.0.1:7100: connection reset");
  EXPECT_TRUE(Status().with_context("x").is_ok());
}

TEST(Result, HoldsValueOrErrorNeverAnOkError) {
  Result<int> v = 42;
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(*v, 42);
  Result<int> e = Status(StatusCode::kTimeout, "late");
  ASSERT_FALSE(e.is_ok());
  EXPECT_EQ(e.status().code(), StatusCode::kTimeout);
  // An ok Status without a value is a programming error, reported, not a silent success.
  Result<int> bad = Status();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInternal);
}

// The names are part of every message a user sees and scripts grep for: each code has
// its own, fixed, and none falls through to "unknown".
TEST(Status, EveryCodeHasItsOwnStableName) {
  const std::pair<StatusCode, std::string_view> names[] = {
      {StatusCode::kOk, "ok"},
      {StatusCode::kInProgress, "in_progress"},
      {StatusCode::kNoResource, "no_resource"},
      {StatusCode::kInvalidArgument, "invalid_argument"},
      {StatusCode::kInvalidKey, "invalid_key"},
      {StatusCode::kAccessDenied, "access_denied"},
      {StatusCode::kOutOfRange, "out_of_range"},
      {StatusCode::kTruncated, "truncated"},
      {StatusCode::kTimeout, "timeout"},
      {StatusCode::kPeerFailed, "peer_failed"},
      {StatusCode::kUnreachable, "unreachable"},
      {StatusCode::kProtocol, "protocol"},
      {StatusCode::kUnsupported, "unsupported"},
      {StatusCode::kAborted, "aborted"},
      {StatusCode::kInternal, "internal"},
      {StatusCode::kDeviceFailed, "device_failed"},
      {StatusCode::kDataCorrupt, "data_corrupt"},
  };
  std::set<std::string_view> seen;
  for (const auto& [code, name] : names) {
    EXPECT_EQ(to_string(code), name);
    EXPECT_TRUE(seen.insert(to_string(code)).second) << "two codes share the name " << name;
  }
  // The list above is the whole closed set: the values run 0..kDataCorrupt without gaps.
  EXPECT_EQ(static_cast<size_t>(StatusCode::kDataCorrupt) + 1, std::size(names));
  EXPECT_EQ(to_string(static_cast<StatusCode>(static_cast<int>(StatusCode::kDataCorrupt) + 1)), "unknown");
}

TEST(Status, ToStringOfAnErrorWithoutMessageIsTheCodeAlone) {
  EXPECT_EQ(Status(StatusCode::kAborted, "").to_string(), "aborted");
  EXPECT_EQ(Status(StatusCode::kTimeout, "x").to_string(), "timeout: x");
}

TEST(Status, WithContextKeepsEveryCodeAndNestsOutsideIn) {
  for (int c = 1; c <= static_cast<int>(StatusCode::kInternal); ++c) {
    const auto code = static_cast<StatusCode>(c);
    const Status s = Status(code, "inner").with_context("middle").with_context("outer");
    EXPECT_EQ(s.code(), code) << to_string(code);
    EXPECT_EQ(s.message(), "outer: middle: inner");
    EXPECT_FALSE(s.is_ok());
  }
  const Status ok = Status::ok().with_context("ignored");
  EXPECT_TRUE(ok.is_ok());
  EXPECT_EQ(ok.message(), "") << "an ok status takes no context";
}

TEST(Status, EqualityComparesCodeAndMessage) {
  EXPECT_EQ(Status(StatusCode::kTimeout, "a"), Status(StatusCode::kTimeout, "a"));
  EXPECT_FALSE(Status(StatusCode::kTimeout, "a") == Status(StatusCode::kTimeout, "b"));
  EXPECT_FALSE(Status(StatusCode::kTimeout, "a") == Status(StatusCode::kAborted, "a"));
  EXPECT_EQ(Status(), Status::ok());
  EXPECT_TRUE(static_cast<bool>(Status()));
  EXPECT_FALSE(static_cast<bool>(Status(StatusCode::kInternal, "")));
}

TEST(Status, MemoryKindNamesAreStable) {
  EXPECT_EQ(to_string(MemoryKind::kHost), "host");
  EXPECT_EQ(to_string(MemoryKind::kCuda), "cuda");
  EXPECT_EQ(to_string(MemoryKind::kDmabuf), "dmabuf");
}

TEST(Result, AssignOrReturnPassesTheValueOnAndTheErrorUp) {
  auto half = [](int x) -> Result<int> {
    if (x % 2 != 0) return Status(StatusCode::kInvalidArgument, "odd");
    return x / 2;
  };
  auto quarter = [&](int x) -> Result<int> {
    REMORA_ASSIGN_OR_RETURN(int h, half(x));
    REMORA_ASSIGN_OR_RETURN(int q, half(h));
    return q;
  };
  ASSERT_TRUE(quarter(8).is_ok());
  EXPECT_EQ(*quarter(8), 2);
  EXPECT_EQ(quarter(6).status().code(), StatusCode::kInvalidArgument);  // 3 is odd
  EXPECT_EQ(quarter(6).status().message(), "odd");
  EXPECT_TRUE(Result<int>(5).status().is_ok());
}

Status fails_in_the_middle(int* reached) {
  REMORA_RETURN_IF_ERROR(Status());
  *reached = 1;
  REMORA_RETURN_IF_ERROR(Status(StatusCode::kInvalidArgument, "stop"));
  *reached = 2;
  return Status();
}

TEST(Result, ReturnIfErrorStopsAtTheFirstError) {
  int reached = 0;
  EXPECT_EQ(fails_in_the_middle(&reached).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reached, 1);
}

TEST(Result, ValueOfAnOkResultIsTheValue) {
  Result<std::string> r = std::string("kept");
  EXPECT_EQ(r.value(), "kept");
  EXPECT_EQ(r->size(), 4u);
  EXPECT_EQ(*r, "kept");
  const Result<std::string>& cr = r;
  EXPECT_EQ(cr.value(), "kept");
  EXPECT_EQ(std::move(r).value(), "kept");
  Result<std::unique_ptr<int>> owned = std::make_unique<int>(7);
  std::unique_ptr<int> p = std::move(owned).value();  // move-only values move out
  EXPECT_EQ(*p, 7);
}

// The message the death tests expect: one line naming the accessor, then the
// Status's to_string() — its code and its message.
constexpr const char* kValueOfError = "remora: Result::value\\(\\) called on an error: ";

// Before, value() on an error threw std::bad_variant_access out of the API, and a
// program that did not catch it ended in std::terminate without a word about why.
TEST(ResultDeathTest, ValueOfAnErrorPrintsCodeAndMessageThenAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Result<int> e = Status(StatusCode::kTimeout, "no peer connected within 5000 ms");
  const std::string want = std::string(kValueOfError) + "timeout: no peer connected within 5000 ms";
  EXPECT_DEATH((void)e.value(), want);
  EXPECT_DEATH((void)*e, want);
  Result<std::string> s = Status(StatusCode::kPeerFailed, "connection reset by 10.0.0.2:7100");
  const std::string want_s = std::string(kValueOfError) + "peer_failed: connection reset by 10\\.0\\.0\\.2:7100";
  EXPECT_DEATH((void)s->size(), want_s);
  EXPECT_DEATH((void)std::move(s).value(), want_s);
  Result<std::string>& ref = s;
  EXPECT_DEATH((void)ref.value(), want_s);
}

// The case: a malformed REMORA_* variable and a `.value()` straight on the
// result (as the README writes Context::create().value(), which reads the same config).
TEST(ResultDeathTest, MalformedEnvironmentNamesTheVariableWhenValueIsTaken) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        ::setenv("REMORA_STREAMS", "abc", 1);  // in the child only
        (void)Config::from_env().value();
      },
      std::string(kValueOfError) + "invalid_argument: REMORA_STREAMS: ");
}

}  // namespace
}  // namespace remora
