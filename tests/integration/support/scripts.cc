#include "support/scripts.h"

#include <cstring>
#include <vector>

#include "remora/config.h"
#include "remora/request.h"
#include "support/test_data.h"

namespace remora::itest {
namespace {

constexpr std::byte kPoison{0x5A};

std::vector<std::byte> content(uint64_t seed, size_t size) {
  std::vector<std::byte> v(size);
  fill_stream(seed, 0, v);
  return v;
}

std::string describe(const Status& s) { return std::string(to_string(s.code())) + " (" + s.message() + ")"; }

std::string expect_code(const char* what, const Status& s, StatusCode want) {
  if (s.code() == want) return {};
  return std::string(what) + ": expected " + std::string(to_string(want)) + ", got " + describe(s);
}

std::string expect_ok(const char* what, const Status& s) { return expect_code(what, s, StatusCode::kOk); }

// Sends `size` bytes of stream `seed` on `tag` and waits.
Status send_one(Endpoint& ep, uint64_t seed, size_t size, uint64_t tag) {
  auto data = content(seed, size);
  return ep.send(data, Tag{tag}).wait(kStepTimeout);
}

// A posted receive with its own poisoned buffer.
struct Rx {
  std::vector<std::byte> buf;
  Request r;
  Rx(Endpoint& ep, size_t len, uint64_t tag) : buf(len, kPoison) { r = ep.recv(buf, Tag{tag}); }
  Rx(const Rx&) = delete;
  // Waits, then checks ok, bytes(), tag(), content and untouched tail.
  std::string check(const char* what, uint64_t seed, size_t size, uint64_t tag) const {
    const Status s = r.wait(kStepTimeout);
    if (!s.is_ok()) return std::string(what) + ": " + describe(s);
    if (r.bytes() != size) return std::string(what) + ": bytes() = " + std::to_string(r.bytes()) + ", expected " + std::to_string(size);
    if (r.tag() != Tag{tag}) return std::string(what) + ": wrong tag() " + std::to_string(static_cast<uint64_t>(r.tag()));
    auto want = content(seed, size);
    if (size != 0 && std::memcmp(buf.data(), want.data(), size) != 0) {
      size_t i = 0;
      while (buf[i] == want[i]) ++i;
      return std::string(what) + ": content differs from byte " + std::to_string(i);
    }
    for (size_t j = size; j < buf.size(); ++j) {
      if (buf[j] != kPoison) return std::string(what) + ": buffer written past the message end at byte " + std::to_string(j);
    }
    return {};
  }
};

#define RETURN_IF_FAILED(expr)        \
  do {                                \
    std::string e_ = (expr);          \
    if (!e_.empty()) return e_;       \
  } while (0)

constexpr size_t kMiB = 1 << 20;
/// The default eager limit (the scripts' contexts keep it): the largest eager message.
constexpr size_t kEager = Config{}.eager_limit;

}  // namespace

// ---------------------------------------------------------------------------
// truncation
// ---------------------------------------------------------------------------

std::string truncation_sender(Endpoint& ep, uint64_t seed) {
  // Rendezvous message into a buffer half its size: the send fails too (CTS status 1).
  RETURN_IF_FAILED(expect_code("truncation: 1 MiB rendezvous send into a 512 KiB receive",
                               send_one(ep, seed + 1, kMiB, 10), StatusCode::kTruncated));
  RETURN_IF_FAILED(expect_ok("truncation: the next 1 MiB send on the same tag", send_one(ep, seed + 2, kMiB, 10)));
  // Eager: the protocol has no truncation notice for EAGER, so the sender may see ok.
  {
    const Status s = send_one(ep, seed + 3, 1000, 11);
    if (!s.is_ok() && s.code() != StatusCode::kTruncated) return "truncation: 1000-byte eager send: " + describe(s);
  }
  RETURN_IF_FAILED(expect_ok("truncation: the next eager send on the same tag", send_one(ep, seed + 4, 1000, 11)));
  // One byte too small, right at the eager limit.
  RETURN_IF_FAILED(expect_code("truncation: a send one byte over the eager limit into a receive at it",
                               send_one(ep, seed + 5, kEager + 1, 14), StatusCode::kTruncated));
  {
    const Status s = send_one(ep, seed + 6, kEager, 14);
    if (!s.is_ok() && s.code() != StatusCode::kTruncated) {
      return "truncation: a send at the eager limit into one byte less: " + describe(s);
    }
  }
  RETURN_IF_FAILED(
      expect_ok("truncation: a send at the eager limit after two truncations", send_one(ep, seed + 7, kEager, 14)));
  // Several truncations in flight at once, then an intact one.
  {
    auto a = content(seed + 8, 2 * kMiB);
    Request r1 = ep.send(a, Tag{15});
    Request r2 = ep.send(a, Tag{15});
    Request r3 = ep.send(a, Tag{15});
    RETURN_IF_FAILED(expect_code("truncation: in-flight #1", r1.wait(kStepTimeout), StatusCode::kTruncated));
    RETURN_IF_FAILED(expect_code("truncation: in-flight #2", r2.wait(kStepTimeout), StatusCode::kTruncated));
    RETURN_IF_FAILED(expect_ok("truncation: in-flight #3 (fits)", r3.wait(kStepTimeout)));
  }
  return {};
}

std::string truncation_receiver(Endpoint& ep, uint64_t seed) {
  {
    Rx small(ep, 512 * 1024, 10);
    RETURN_IF_FAILED(expect_code("truncation: 512 KiB receive of a 1 MiB message", small.r.wait(kStepTimeout),
                                 StatusCode::kTruncated));
  }
  { Rx ok(ep, kMiB, 10); RETURN_IF_FAILED(ok.check("truncation: 1 MiB message after a truncation", seed + 2, kMiB, 10)); }
  {
    Rx small(ep, 100, 11);
    RETURN_IF_FAILED(expect_code("truncation: 100-byte receive of a 1000-byte eager message", small.r.wait(kStepTimeout),
                                 StatusCode::kTruncated));
  }
  { Rx ok(ep, 1000, 11); RETURN_IF_FAILED(ok.check("truncation: eager message after a truncation", seed + 4, 1000, 11)); }
  {
    Rx small(ep, kEager, 14);
    RETURN_IF_FAILED(expect_code("truncation: a receive at the eager limit of a message one byte over",
                                 small.r.wait(kStepTimeout), StatusCode::kTruncated));
  }
  {
    Rx small(ep, kEager - 1, 14);
    RETURN_IF_FAILED(expect_code("truncation: a receive one byte under the eager limit of a message at it",
                                 small.r.wait(kStepTimeout), StatusCode::kTruncated));
  }
  {
    Rx ok(ep, kEager, 14);
    RETURN_IF_FAILED(ok.check("truncation: an exact receive at the eager limit", seed + 7, kEager, 14));
  }
  {
    Rx a(ep, kMiB, 15), b(ep, 2 * kMiB - 1, 15), c(ep, 2 * kMiB + 5, 15);
    RETURN_IF_FAILED(expect_code("truncation: in-flight 1 MiB receive", a.r.wait(kStepTimeout), StatusCode::kTruncated));
    RETURN_IF_FAILED(expect_code("truncation: in-flight 2 MiB - 1 receive", b.r.wait(kStepTimeout), StatusCode::kTruncated));
    RETURN_IF_FAILED(c.check("truncation: in-flight receive that fits", seed + 8, 2 * kMiB, 15));
  }
  if (ep.failed()) return "truncation: endpoint failed after truncations: " + describe(ep.failure());
  return {};
}

// ---------------------------------------------------------------------------
// zero-byte messages
// ---------------------------------------------------------------------------

std::string zero_sender(Endpoint& ep, uint64_t seed) {
  RETURN_IF_FAILED(expect_ok("zero: 0-byte send (empty span)", ep.send({}, Tag{20}).wait(kStepTimeout)));
  RETURN_IF_FAILED(expect_ok("zero: 5-byte send", send_one(ep, seed + 1, 5, 20)));
  RETURN_IF_FAILED(expect_ok("zero: 0-byte send", ep.send({}, Tag{20}).wait(kStepTimeout)));
  // A burst of 0-byte messages on several tags, all in flight at once.
  std::vector<Request> rs;
  for (int i = 0; i < 200; ++i) rs.push_back(ep.send({}, Tag{static_cast<uint64_t>(21 + i % 3)}));
  RETURN_IF_FAILED(expect_ok("zero: 200 0-byte sends", wait_all(rs, kStepTimeout)));
  for (const Request& r : rs) {
    if (r.bytes() != 0) return "zero: 0-byte send reports bytes() = " + std::to_string(r.bytes());
  }
  RETURN_IF_FAILED(expect_ok("zero: a 20000-byte send after the burst", send_one(ep, seed + 2, 20000, 21)));
  return {};
}

std::string zero_receiver(Endpoint& ep, uint64_t seed) {
  {
    Request r = ep.recv({}, Tag{20});
    RETURN_IF_FAILED(expect_ok("zero: 0-byte message into an empty span", r.wait(kStepTimeout)));
    if (r.bytes() != 0) return "zero: bytes() = " + std::to_string(r.bytes()) + " for a 0-byte message";
  }
  { Rx a(ep, 64, 20); RETURN_IF_FAILED(a.check("zero: 5-byte message after a 0-byte one", seed + 1, 5, 20)); }
  { Rx b(ep, 64, 20); RETURN_IF_FAILED(b.check("zero: 0-byte message into a 64-byte buffer", 0, 0, 20)); }
  std::vector<std::unique_ptr<Rx>> rx;
  for (int i = 0; i < 200; ++i) rx.push_back(std::make_unique<Rx>(ep, i % 2 == 0 ? 0 : 16, 21 + i % 3));
  for (size_t i = 0; i < rx.size(); ++i) RETURN_IF_FAILED(rx[i]->check("zero: burst of 0-byte messages", 0, 0, 21 + i % 3));
  { Rx c(ep, 20000, 21); RETURN_IF_FAILED(c.check("zero: 20000-byte message after the burst", seed + 2, 20000, 21)); }
  return {};
}

// ---------------------------------------------------------------------------
// receives posted after arrival
// ---------------------------------------------------------------------------

namespace {
struct Unexp {
  uint64_t tag;
  size_t size;
};
constexpr Unexp kUnexpected[] = {{30, 100},      {31, kEager + 1}, {30, 0},
                                 {31, 3 * kMiB}, {30, kEager},     {31, 512 * 1024 + 1}};
}  // namespace

std::string unexpected_sender(Endpoint& ep, uint64_t seed) {
  std::vector<std::vector<std::byte>> data;
  std::vector<Request> rs;
  for (size_t i = 0; i < std::size(kUnexpected); ++i) data.push_back(content(seed + 10 + i, kUnexpected[i].size));
  for (size_t i = 0; i < std::size(kUnexpected); ++i) rs.push_back(ep.send(data[i], Tag{kUnexpected[i].tag}));
  auto marker = content(seed + 1, 8);
  rs.push_back(ep.send(marker, Tag{39}));
  RETURN_IF_FAILED(expect_ok("unexpected: sends", wait_all(rs, kStepTimeout)));
  return {};
}

std::string unexpected_receiver(Endpoint& ep, uint64_t seed) {
  { Rx m(ep, 8, 39); RETURN_IF_FAILED(m.check("unexpected: marker", seed + 1, 8, 39)); }
  // Everything on tags 30/31 has been announced by now; post in reverse tag order.
  std::vector<std::unique_ptr<Rx>> rx(std::size(kUnexpected));
  for (uint64_t tag : {31, 30}) {
    for (size_t i = 0; i < std::size(kUnexpected); ++i) {
      if (kUnexpected[i].tag == tag) rx[i] = std::make_unique<Rx>(ep, kUnexpected[i].size + 7, tag);
    }
  }
  for (size_t i = 0; i < std::size(kUnexpected); ++i) {
    const std::string what = "unexpected: message #" + std::to_string(i) + " (tag " + std::to_string(kUnexpected[i].tag) +
                             ", " + std::to_string(kUnexpected[i].size) + " bytes)";
    RETURN_IF_FAILED(rx[i]->check(what.c_str(), seed + 10 + i, kUnexpected[i].size, kUnexpected[i].tag));
  }
  return {};
}

// ---------------------------------------------------------------------------
// out-of-order completion across tags
// ---------------------------------------------------------------------------

std::string out_of_order_sender(Endpoint& ep, uint64_t seed) {
  auto big = content(seed + 1, 64 * kMiB);
  auto small = content(seed + 2, 10);
  auto mid = content(seed + 3, 100 * 1024);
  Request a = ep.send(big, Tag{40});
  Request b = ep.send(small, Tag{41});
  Request c = ep.send(mid, Tag{42});
  RETURN_IF_FAILED(expect_ok("out-of-order: small send on tag 41", b.wait(kStepTimeout)));
  RETURN_IF_FAILED(expect_ok("out-of-order: 100 KiB send on tag 42", c.wait(kStepTimeout)));
  RETURN_IF_FAILED(expect_ok("out-of-order: 64 MiB send on tag 40", a.wait(kStepTimeout)));
  auto big2 = content(seed + 4, 32 * kMiB);
  auto small2 = content(seed + 5, 1024);
  Request d = ep.send(big2, Tag{43});
  Request e = ep.send(small2, Tag{44});
  RETURN_IF_FAILED(expect_ok("out-of-order: second round", wait_all(std::vector<Request>{d, e}, kStepTimeout)));
  return {};
}

std::string out_of_order_receiver(Endpoint& ep, uint64_t seed) {
  {
    Rx b(ep, 10, 41), c(ep, 100 * 1024, 42);
    // The 64 MiB message on tag 40 was sent first, but no receive for it exists yet:
    // these must complete anyway.
    RETURN_IF_FAILED(b.check("out-of-order: small message on tag 41 before tag 40 is posted", seed + 2, 10, 41));
    RETURN_IF_FAILED(c.check("out-of-order: 100 KiB message on tag 42 before tag 40 is posted", seed + 3, 100 * 1024, 42));
    Rx a(ep, 64 * kMiB, 40);
    RETURN_IF_FAILED(a.check("out-of-order: 64 MiB message on tag 40, posted last", seed + 1, 64 * kMiB, 40));
  }
  {
    Rx d(ep, 32 * kMiB, 43), e(ep, 1024, 44);
    RETURN_IF_FAILED(e.check("out-of-order: 1 KiB on tag 44 waited for first", seed + 5, 1024, 44));
    RETURN_IF_FAILED(d.check("out-of-order: 32 MiB on tag 43", seed + 4, 32 * kMiB, 43));
  }
  return {};
}

// ---------------------------------------------------------------------------
// many outstanding operations
// ---------------------------------------------------------------------------

std::string many_outstanding(Endpoint& ep, uint64_t seed, uint32_t side, size_t count) {
  PlanOptions po{.seed = seed, .direction = side, .count = count, .max_size = 64 * 1024, .fixed_size = 0, .tags = 4};
  const Plan out = make_plan(po);
  po.direction = 1 - side;
  const Plan in = make_plan(po);
  std::vector<Request> reqs;
  reqs.reserve(2 * count);
  for (const MessageSpec& m : out.messages) reqs.push_back(ep.send(out.content(m), m.tag));
  std::vector<std::vector<std::byte>> bufs;
  bufs.reserve(count);
  for (const MessageSpec& m : in.messages) {
    bufs.emplace_back(m.size + m.recv_slack, kPoison);
    reqs.push_back(ep.recv(bufs.back(), m.tag));
  }
  const Status all = wait_all(reqs, std::chrono::seconds(60));
  for (size_t i = 0; i < count; ++i) {
    const Request& r = reqs[i];
    const MessageSpec& m = out.messages[i];
    if (!r.done()) return "outstanding: send #" + std::to_string(i) + " not done after wait_all: " + describe(all);
    const Status s = r.wait(std::chrono::seconds(0));
    if (!s.is_ok()) return "outstanding: send #" + std::to_string(i) + " (" + std::to_string(m.size) + " bytes): " + describe(s);
  }
  for (size_t i = 0; i < count; ++i) {
    const Request& r = reqs[count + i];
    const MessageSpec& m = in.messages[i];
    const std::string what = "outstanding: recv #" + std::to_string(i) + " (" + std::to_string(m.size) + " bytes)";
    if (!r.done()) return what + " not done after wait_all: " + describe(all);
    const Status s = r.wait(std::chrono::seconds(0));
    if (!s.is_ok()) return what + ": " + describe(s);
    if (r.bytes() != m.size) return what + ": bytes() = " + std::to_string(r.bytes());
    auto want = in.content(m);
    if (m.size != 0 && std::memcmp(bufs[i].data(), want.data(), m.size) != 0) return what + ": content differs";
    for (size_t j = m.size; j < bufs[i].size(); ++j) {
      if (bufs[i][j] != kPoison) return what + ": written past the message end";
    }
  }
  if (!all.is_ok()) return "outstanding: wait_all returned " + describe(all) + " although every request succeeded";
  return {};
}

}  // namespace remora::itest
