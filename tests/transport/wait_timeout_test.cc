// Tests of the bound on waits given no timeout (remora::kDefaultTimeout): every public
// wait — Request::wait, wait_all, Listener::accept, Endpoint::wait_notification — ends
// with kTimeout naming REMORA_WAIT_TIMEOUT_MS once the context's wait_timeout_ms has
// passed, and only remora::kForever, passed by name, waits without a deadline. Two
// contexts in one process, real sockets on loopback. No assertion on how long anything
// took: a wait that should end is run on its own thread and given a minute, so a wait
// that does not end fails the test instead of hanging the suite.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "remora/remora.h"

namespace remora {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kBoundMs = 300;  // the contexts' wait_timeout_ms
constexpr auto kHang = 60s;         // far beyond the bound: a wait this long never ends

struct Pair {
  std::unique_ptr<Context> server_ctx, client_ctx;
  std::unique_ptr<Listener> listener;
  std::shared_ptr<Endpoint> server, client;
};

Pair make_pair() {
  const ContextOptions opts{.wait_timeout_ms = kBoundMs, .ignore_env = true};
  Pair p;
  p.server_ctx = Context::create(opts).value();
  p.client_ctx = Context::create(opts).value();
  p.listener = p.server_ctx->listen("127.0.0.1:0").value();
  p.client = p.client_ctx->connect(p.listener->address(), 10s).value();
  p.server = p.listener->accept(10s).value();
  return p;
}

/// Runs `wait` on its own thread; its Status, or a failure when it is still waiting
/// after kHang (then `unblock` ends it, so the test can clean up).
Status bounded(const std::function<Status()>& wait, const std::function<void()>& unblock) {
  auto f = std::async(std::launch::async, wait);
  if (f.wait_for(kHang) != std::future_status::ready) {
    unblock();
    (void)f.get();
    return Status(StatusCode::kInternal, "the wait was still running after a minute: it has no default bound");
  }
  return f.get();
}

void expect_default_bound_expired(const Status& s, const std::string& what) {
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << what << ": " << s.to_string();
  EXPECT_NE(s.message().find("REMORA_WAIT_TIMEOUT_MS"), std::string::npos)
      << what << ": the message does not say which bound expired: " << s.to_string();
  EXPECT_NE(s.message().find("remora::kForever"), std::string::npos)
      << what << ": the message does not say how to wait without one: " << s.to_string();
}

TEST(WaitTimeout, RequestWaitWithoutATimeoutEndsAtTheContextsBound) {
  Pair p = make_pair();
  std::array<std::byte, 16> buf{};
  const Request never = p.server->recv(buf, Tag{7});  // nobody sends tag 7
  expect_default_bound_expired(bounded([&] { return never.wait(); }, [&] { p.server->close(); }), "Request::wait()");
  const Request both[] = {never, p.client->send({}, Tag{8})};
  expect_default_bound_expired(bounded([&] { return wait_all(both); }, [&] { p.server->close(); }), "wait_all()");
  // The wait gave up; the operation did not: it still completes when a message comes.
  ASSERT_TRUE(p.client->send(std::as_bytes(std::span(buf)), Tag{7}).wait(10s).is_ok());
  EXPECT_TRUE(never.wait(10s).is_ok());
}

TEST(WaitTimeout, AnExplicitTimeoutIsTheCallersAndSaysNothingOfTheDefault) {
  Pair p = make_pair();
  std::array<std::byte, 16> buf{};
  const Status s = p.server->recv(buf, Tag{7}).wait(1ms);
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
  EXPECT_EQ(s.message().find("REMORA_WAIT_TIMEOUT_MS"), std::string::npos) << s.to_string();
}

/// Ends an accept() that is still waiting: a client connects.
void connect_once(Pair& p) { (void)p.client_ctx->connect(p.listener->address(), 10s); }

TEST(WaitTimeout, AcceptWithoutATimeoutEndsAtTheContextsBound) {
  Pair p = make_pair();
  expect_default_bound_expired(bounded([&] { return p.listener->accept().status(); }, [&] { connect_once(p); }),
                               "Listener::accept()");
}

TEST(WaitTimeout, WaitNotificationWithoutATimeoutEndsAtTheContextsBound) {
  Pair p = make_pair();
  expect_default_bound_expired(
      bounded([&] { return p.server->wait_notification().status(); }, [&] { p.server->close(); }),
      "Endpoint::wait_notification()");
}

/// Runs `fn` when it goes out of scope.
struct OnExit {
  std::function<void()> fn;
  ~OnExit() { fn(); }
};

// kForever by name is no deadline at all: each wait below is still waiting when a
// default-bounded wait on the same context has run its bound out, and then completes.
TEST(WaitTimeout, KForeverOutlastsTheDefaultBoundAndCompletes) {
  Pair p = make_pair();
  std::array<std::byte, 16> buf{};
  const Request rx = p.server->recv(buf, Tag{3});
  auto rx_wait = std::async(std::launch::async, [&] { return rx.wait(kForever); });
  auto note_wait = std::async(std::launch::async, [&] { return p.server->wait_notification(kForever); });
  auto accept_wait = std::async(std::launch::async, [&] { return p.listener->accept(kForever); });
  // Should an assertion below return early, the waits still end (the futures' destructors
  // join their threads).
  OnExit unblock{[&] {
    if (accept_wait.valid()) connect_once(p);
    p.server->close();
  }};
  // A default-bounded wait on the server's context ends first: the bound has passed.
  std::array<std::byte, 16> other{};
  const Request other_rx = p.server->recv(other, Tag{4});
  expect_default_bound_expired(bounded([&] { return other_rx.wait(); }, [&] { p.server->close(); }),
                               "Request::wait() beside the kForever ones");

  ASSERT_TRUE(p.client->send(std::as_bytes(std::span(buf)), Tag{3}).wait(10s).is_ok());
  ASSERT_EQ(rx_wait.wait_for(kHang), std::future_status::ready) << "Request::wait(kForever) never completed";
  EXPECT_TRUE(rx_wait.get().is_ok());

  std::vector<std::byte> window(64);
  auto region = p.server_ctx->register_memory(window.data(), window.size(), Access::kRemoteWrite);
  ASSERT_TRUE(region.is_ok()) << region.status().to_string();
  ASSERT_TRUE(p.client->put(std::as_bytes(std::span(buf)), region->remote_key(), 0, {.notify = 9}).wait(10s).is_ok());
  ASSERT_EQ(note_wait.wait_for(kHang), std::future_status::ready) << "wait_notification(kForever) never returned";
  auto note = note_wait.get();
  ASSERT_TRUE(note.is_ok()) << note.status().to_string();
  EXPECT_EQ(note->value, 9u);

  connect_once(p);
  ASSERT_EQ(accept_wait.wait_for(kHang), std::future_status::ready) << "accept(kForever) never returned";
  EXPECT_TRUE(accept_wait.get().is_ok());
}

}  // namespace
}  // namespace remora
