// Tests for core/status.cc: Status and Result, and what taking the value of an error
// does (prints the status, then aborts: no exception crosses the API).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <memory>
#include <string>
#include <utility>

#include "remora/config.h"
#include "remora/status.h"

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
