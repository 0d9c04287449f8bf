// Rendezvous store over real loopback sockets: every operation, waiting gets completed
// by other clients, timeouts naming keys, concurrent counters, hostile frames, a server
// that goes away or starts late.
#include "remora/store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace remora {
namespace {

using namespace std::chrono_literals;

std::string text(const std::vector<std::byte>& v) { return {reinterpret_cast<const char*>(v.data()), v.size()}; }

struct Fixture {
  std::unique_ptr<StoreServer> server;
  std::string address;
  Fixture() {
    auto s = StoreServer::start("127.0.0.1:0");
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    server = std::move(*s);
    address = "127.0.0.1:" + std::to_string(server->port());
  }
  std::unique_ptr<Store> client() const {
    auto c = Store::connect(address, 10s);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    return c.is_ok() ? std::move(*c) : nullptr;
  }
};

/// A raw TCP connection to the server, for frames the client would never send.
int raw_connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{.tv_sec = 20, .tv_usec = 0};  // a bug fails instead of hanging
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

void append_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}

/// True when the server closed the connection (EOF) rather than answering.
bool closed_by_server(int fd) {
  char buf[64];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

TEST(Store, SetGetCheckRemove) {
  Fixture f;
  auto c = f.client();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->local_host(), "127.0.0.1");
  EXPECT_FALSE(*c->check("k"));
  ASSERT_TRUE(c->set("k", "hello").is_ok());
  EXPECT_TRUE(*c->check("k"));
  auto v = c->get("k", 1s);
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_EQ(text(*v), "hello");
  ASSERT_TRUE(c->set("k", "").is_ok());  // overwrite with an empty value
  EXPECT_EQ(text(*c->get("k", 1s)), "");
  EXPECT_TRUE(*c->remove("k"));
  EXPECT_FALSE(*c->remove("k"));
  EXPECT_FALSE(*c->check("k"));
}

TEST(Store, LargeValueRoundTrips) {
  Fixture f;
  auto c = f.client();
  ASSERT_TRUE(c);
  std::vector<std::byte> big(8u << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  ASSERT_TRUE(c->set("big", big).is_ok());
  auto v = f.client()->get("big", 5s);
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_TRUE(*v == big);
}

TEST(Store, ClientRejectsOverLimitKeysAndValues) {
  Fixture f;
  auto c = f.client();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->set(std::string(1025, 'k'), "v").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->set("", "v").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(c->set(std::string(1024, 'k'), "v").is_ok());
  std::vector<std::byte> huge((64u << 20) + 1);
  EXPECT_EQ(c->set("huge", huge).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(c->set("after", "still fine").is_ok());
}

TEST(Store, WaitingGetIsCompletedByAnotherClientsSet) {
  Fixture f;
  auto waiter = f.client();
  auto setter = f.client();
  ASSERT_TRUE(waiter && setter);
  Result<std::vector<std::byte>> got = Status(StatusCode::kInternal, "not run");
  std::thread t([&] { got = waiter->get("late", 20s); });
  ASSERT_TRUE(setter->set("late", "value").is_ok());
  t.join();
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(text(*got), "value");
}

TEST(Store, WaitForSeveralKeysFromSeveralClients) {
  Fixture f;
  auto waiter = f.client();
  ASSERT_TRUE(waiter);
  const std::vector<std::string> keys{"a", "b", "c"};
  Status s(StatusCode::kInternal, "not run");
  std::thread t([&] { s = waiter->wait(keys, 20s); });
  std::vector<std::thread> setters;
  for (const auto& k : keys) {
    setters.emplace_back([&, k] {
      auto c = f.client();
      ASSERT_TRUE(c);
      EXPECT_TRUE(c->set(k, k).is_ok());
    });
  }
  for (auto& th : setters) th.join();
  t.join();
  EXPECT_TRUE(s.is_ok()) << s.to_string();
}

TEST(Store, TimeoutNamesTheMissingKeys) {
  Fixture f;
  auto c = f.client();
  ASSERT_TRUE(c);
  auto g = c->get("nobody-sets-this", 50ms);
  ASSERT_EQ(g.status().code(), StatusCode::kTimeout);
  EXPECT_NE(g.status().message().find("nobody-sets-this"), std::string::npos) << g.status().message();

  ASSERT_TRUE(c->set("present", "x").is_ok());
  const std::vector<std::string> keys{"present", "absent-1", "absent-2"};
  Status s = c->wait(keys, 50ms);
  ASSERT_EQ(s.code(), StatusCode::kTimeout);
  EXPECT_NE(s.message().find("\"absent-1\""), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("\"absent-2\""), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("\"present\""), std::string::npos) << s.message();
  // The connection stays usable after a timeout.
  EXPECT_TRUE(*c->check("present"));
}

TEST(Store, WaitMissingReturnsTheKeysStillAbsentInTheirOrder) {
  Fixture f;
  auto c = f.client();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->set("b", "x").is_ok());
  ASSERT_TRUE(c->set("d", "x").is_ok());
  const std::vector<std::string> keys{"e", "b", "a", "d", "c"};
  auto missing = c->wait_missing(keys, 50ms);
  ASSERT_TRUE(missing.is_ok()) << missing.status().to_string();
  EXPECT_EQ(*missing, (std::vector<std::string>{"e", "a", "c"}));
  // The same timeout through wait(): a message without the binary list after it.
  Status s = c->wait(keys, 20ms);
  ASSERT_EQ(s.code(), StatusCode::kTimeout);
  EXPECT_EQ(s.message().find('\0'), std::string::npos) << "the message carries the NUL and the key list";
  EXPECT_NE(s.message().find("\"a\""), std::string::npos) << s.message();
  for (const char* k : {"a", "c", "e"}) ASSERT_TRUE(c->set(k, "y").is_ok());
  missing = c->wait_missing(keys, 10s);
  ASSERT_TRUE(missing.is_ok()) << missing.status().to_string();
  EXPECT_TRUE(missing->empty());
  // Bad keys are refused before anything is sent, as by wait().
  const std::vector<std::string> bad{"ok", ""};
  EXPECT_EQ(c->wait_missing(bad, 10ms).status().code(), StatusCode::kInvalidArgument);
}

TEST(Store, WaitMissingKnowsTheMissingKeysWhenTheServerGoesRightAfter) {
  Fixture f;
  auto c = f.client();
  ASSERT_TRUE(c);
  const std::vector<std::string> keys{"never-1", "never-2"};
  auto missing = c->wait_missing(keys, 30ms);
  f.server.reset();  // what Communicator::init's rank 0 does when it gives up
  ASSERT_TRUE(missing.is_ok()) << missing.status().to_string();
  EXPECT_EQ(*missing, keys);
  EXPECT_EQ(c->wait_missing(keys, 30ms).status().code(), StatusCode::kPeerFailed);
}

TEST(Store, AddIsAtomicAcrossClientsAndThreads) {
  Fixture f;
  constexpr int kClients = 4, kThreadsPerClient = 2, kAdds = 200;
  std::vector<std::unique_ptr<Store>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(f.client());
  std::vector<std::thread> threads;
  std::atomic<int64_t> max_seen{0};
  for (int i = 0; i < kClients * kThreadsPerClient; ++i) {
    threads.emplace_back([&, i] {
      Store& c = *clients[static_cast<size_t>(i % kClients)];
      for (int n = 0; n < kAdds; ++n) {
        auto v = c.add("counter", 3);
        ASSERT_TRUE(v.is_ok()) << v.status().to_string();
        int64_t prev = max_seen.load();
        while (*v > prev && !max_seen.compare_exchange_weak(prev, *v)) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const int64_t expected = int64_t{3} * kClients * kThreadsPerClient * kAdds;
  EXPECT_EQ(max_seen.load(), expected);
  EXPECT_EQ(*clients[0]->add("counter", 0), expected);
  EXPECT_EQ(*clients[0]->add("counter", -expected), 0);
  EXPECT_EQ(text(*clients[1]->get("counter", 1s)), "0");  // counters read as decimal text
}

TEST(Store, AddOnANonCounterIsInvalidArgument) {
  Fixture f;
  auto c = f.client();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->set("word", "hello").is_ok());
  EXPECT_EQ(c->add("word", 1).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(c->set("num", "41").is_ok());
  EXPECT_EQ(*c->add("num", 1), 42);
  EXPECT_EQ(*c->add("fresh", -5), -5);
}

TEST(Store, MalformedFramesCloseOnlyThatClient) {
  Fixture f;
  auto good = f.client();
  ASSERT_TRUE(good);
  ASSERT_TRUE(good->set("k", "v").is_ok());
  Result<std::vector<std::byte>> parked = Status(StatusCode::kInternal, "not run");
  std::thread waiter([&] { parked = f.client()->get("later", 20s); });

  struct Case {
    const char* what;
    std::string frame;
  };
  std::vector<Case> cases;
  cases.push_back({"unknown op", std::string("\x63\x01\x00\x00\x00k", 6)});
  {
    std::string s("\x01", 1);
    append_u32(s, 1025);  // key over the limit
    cases.push_back({"oversize key", s});
  }
  {
    std::string s("\x01", 1);
    append_u32(s, 1);
    s += "k";
    append_u32(s, (64u << 20) + 1);  // value over the limit, never sent
    cases.push_back({"oversize value", s});
  }
  {
    std::string s("\x02", 1);
    append_u32(s, 0);  // get with an empty key
    cases.push_back({"empty key", s});
  }
  {
    std::string s("\x03", 1);  // wait whose key list lies about its lengths
    append_u32(s, 0);
    append_u32(s, 6);
    append_u32(s, 100);
    s += "ab";
    s.append(8, '\0');
    cases.push_back({"bad key list", s});
  }
  for (const auto& c : cases) {
    const int fd = raw_connect(f.server->port());
    ASSERT_EQ(::send(fd, c.frame.data(), c.frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(c.frame.size()));
    EXPECT_TRUE(closed_by_server(fd)) << c.what;
    ::close(fd);
    // Everyone else is still served.
    auto v = good->get("k", 1s);
    ASSERT_TRUE(v.is_ok()) << c.what << ": " << v.status().to_string();
    EXPECT_EQ(text(*v), "v");
  }
  ASSERT_TRUE(good->set("later", "done").is_ok());
  waiter.join();
  ASSERT_TRUE(parked.is_ok()) << parked.status().to_string();
  EXPECT_EQ(text(*parked), "done");
}

TEST(Store, ServerGoneFailsCallsWithPeerFailed) {
  Fixture f;
  auto c = f.client();
  auto parked_client = f.client();
  ASSERT_TRUE(c && parked_client);
  ASSERT_TRUE(c->set("k", "v").is_ok());
  Result<std::vector<std::byte>> parked = Status(StatusCode::kInternal, "not run");
  std::thread t([&] { parked = parked_client->get("never", 60s); });
  // The parked get either reached the server (then the close fails it) or finds the
  // server gone: kPeerFailed either way.
  f.server.reset();
  t.join();
  EXPECT_EQ(parked.status().code(), StatusCode::kPeerFailed) << parked.status().to_string();
  EXPECT_EQ(c->get("k", 1s).status().code(), StatusCode::kPeerFailed);
  EXPECT_EQ(c->set("k", "v").code(), StatusCode::kPeerFailed);
}

TEST(Store, ConnectRetriesUntilTheServerStarts) {
  uint16_t port = 0;
  {
    auto probe = StoreServer::start("127.0.0.1:0");  // a port that was free a moment ago
    ASSERT_TRUE(probe.is_ok());
    port = (*probe)->port();
  }
  const std::string address = "127.0.0.1:" + std::to_string(port);
  Result<std::unique_ptr<Store>> client = Status(StatusCode::kInternal, "not run");
  std::thread t([&] { client = Store::connect(address, 20s); });
  auto server = StoreServer::start(address);
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  t.join();
  ASSERT_TRUE(client.is_ok()) << client.status().to_string();
  ASSERT_TRUE((*client)->set("k", "v").is_ok());
  EXPECT_EQ(text(*(*client)->get("k", 1s)), "v");
}

TEST(Store, ConnectTimesOutNamingTheAddress) {
  uint16_t port = 0;
  {
    auto probe = StoreServer::start("127.0.0.1:0");
    ASSERT_TRUE(probe.is_ok());
    port = (*probe)->port();
  }
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto c = Store::connect(address, 100ms);
  ASSERT_EQ(c.status().code(), StatusCode::kTimeout);
  EXPECT_NE(c.status().message().find(address), std::string::npos) << c.status().message();
  EXPECT_EQ(Store::connect("no-port-here", 100ms).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace remora
