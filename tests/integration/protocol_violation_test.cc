// Control-stream protocol violations by a raw peer that completed the handshake by
// hand (control connection plus K data connections): the library side fails its
// outstanding requests with kProtocol or kPeerFailed, closes the connections, and the
// listener goes on serving other clients.
#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <ostream>

#include "itest_util.h"
#include "support/exchange.h"
#include "support/raw_wire.h"
#include "support/scripts.h"

namespace remora::itest {
namespace {

using namespace std::chrono_literals;

struct Violation {
  const char* name;
  std::vector<uint8_t> (*frame)(uint32_t eager_limit);
  uint64_t capabilities = 0;  ///< the raw peer's HELLOs offer these
};

constexpr uint64_t kFailover = uint64_t{1} << 10;  // docs/protocol.md, capability bit 10
constexpr uint64_t kRejoin = uint64_t{1} << 11;    // capability bit 11
constexpr uint64_t kHeartbeat = uint64_t{1} << 0;  // capability bit 0
constexpr uint64_t kResume = uint64_t{1} << 12;    // capability bit 12
constexpr uint64_t kResumeCaps = kHeartbeat | kFailover | kRejoin | kResume;

std::vector<uint8_t> unknown_type(uint32_t) { return raw::frame(0xEE, {}); }
std::vector<uint8_t> type_zero(uint32_t) { return raw::frame(0, {}); }
std::vector<uint8_t> nonzero_reserved(uint32_t) { return raw::frame(5, raw::Bytes().u64(64).bytes(), 0, 0x0101); }
std::vector<uint8_t> credit_wrong_length(uint32_t) { return raw::frame(5, raw::Bytes().u32(64).bytes()); }
std::vector<uint8_t> eager_over_limit(uint32_t limit) {
  return raw::eager(5, std::vector<uint8_t>(static_cast<size_t>(limit) + 1, 0x42));
}
std::vector<uint8_t> chunk_unknown_recv(uint32_t) {
  return raw::frame(4, raw::Bytes().u64(0x123456789ull).u64(0).u32(1024).u16(0).u16(0).bytes());
}
std::vector<uint8_t> huge_body_length(uint32_t) { return raw::frame(1, raw::Bytes().u64(5).bytes(), 0, 0, 0xFFFFFFF0u); }

// Unexpected eager messages beyond the 1 MiB credit the library grants by default:
// the receiver's unexpected-message memory must stay bounded, so this is fatal.
std::vector<uint8_t> eager_beyond_credit(uint32_t limit) {
  std::vector<uint8_t> out;
  const size_t frames = (size_t{1} << 20) / (limit + 64) + 2;
  for (size_t i = 0; i < frames; ++i) {
    auto f = raw::eager(0xFEED, std::vector<uint8_t>(limit, 0x42));
    out.insert(out.end(), f.begin(), f.end());
  }
  return out;
}
std::vector<uint8_t> credit_never_granted(uint32_t) { return raw::frame(5, raw::Bytes().u64(uint64_t{1} << 40).bytes()); }
std::vector<uint8_t> cts_unknown_send(uint32_t) {
  return raw::frame(3, raw::Bytes().u64(0xABCDEF).u64(1).u32(0).u32(0).bytes());
}
// GOODBYE's reason is 0 (closed) or 1 (aborted): a peer's close must mean one of them.
// Direct mappings need the shared-memory channel both ways, which a raw TCP peer never has.
std::vector<uint8_t> map_without_direct_map(uint32_t) {
  return raw::frame(21, raw::Bytes().u32(1).u32(0).u32(0).u32(0).u64(0).zeros(40).bytes());
}
std::vector<uint8_t> placed_without_direct_map(uint32_t) {
  return raw::frame(22, raw::Bytes().zeros(40).u64(0).u64(8).u64(7).bytes());
}
std::vector<uint8_t> placed_short_without_negotiation(uint32_t) {
  return raw::frame(23, raw::Bytes().u32(1).u32(8).u64(0).u64(7).u64(0).bytes());
}
std::vector<uint8_t> goodbye_unknown_reason(uint32_t) { return raw::frame(6, raw::Bytes().u32(7).u32(0).bytes()); }

// Failover's frames (docs/protocol.md, "Failover"). Without the capability on both sides
// none of them may be sent; with it, each count and each resent chunk must be one the
// library side can account for, and retiring every stream leaves nothing to fail over to.
std::vector<uint8_t> received_frame(uint16_t stream, uint64_t chunks) {
  return raw::frame(17, raw::Bytes().u16(stream).u16(0).u32(0).u64(chunks).bytes());
}
std::vector<uint8_t> retire_frame(uint16_t stream, uint64_t chunks) {
  return raw::frame(18, raw::Bytes().u16(stream).u16(0).u32(0).u64(chunks).bytes());
}
std::vector<uint8_t> received_without_failover(uint32_t) { return received_frame(0, 0); }
std::vector<uint8_t> retire_without_failover(uint32_t) { return retire_frame(0, 0); }
std::vector<uint8_t> resend_without_failover(uint32_t) {
  return raw::frame(4, raw::Bytes().u64(1).u64(0).u32(1024).u16(0).u16(0).bytes(), 0x40);
}
std::vector<uint8_t> resend_not_owed(uint32_t) {
  return raw::frame(4, raw::Bytes().u64(1).u64(0).u32(1024).u16(1).u16(0).bytes(), 0x40);
}
std::vector<uint8_t> received_beyond_written(uint32_t) { return received_frame(0, 1); }
std::vector<uint8_t> retire_beyond_written(uint32_t) { return retire_frame(1, 3); }
std::vector<uint8_t> retire_unknown_stream(uint32_t) { return retire_frame(9, 0); }
std::vector<uint8_t> rejoined_frame(uint16_t stream) {
  return raw::frame(19, raw::Bytes().u16(stream).u16(0).u32(0).u64(0).bytes());
}
// REJOINED: only for a stream the listening side took back (a rejoin HELLO), and only
// where both offered rejoin.
std::vector<uint8_t> rejoined_without_rejoin(uint32_t) { return rejoined_frame(1); }
std::vector<uint8_t> rejoined_live_stream(uint32_t) { return rejoined_frame(1); }
std::vector<uint8_t> rejoined_unknown_stream(uint32_t) { return rejoined_frame(7); }
// HANDLED (docs/protocol.md, "Resuming the control stream"): only where both resume, never
// beyond what this side sent, RESUMED only first on a resumed connection.
std::vector<uint8_t> handled_frame(uint64_t bytes, uint8_t flags = 0) {
  return raw::frame(20, raw::Bytes().u64(bytes).bytes(), flags);
}
std::vector<uint8_t> handled_without_resume(uint32_t) { return handled_frame(0); }
std::vector<uint8_t> handled_beyond_sent(uint32_t) { return handled_frame(uint64_t{1} << 40); }
std::vector<uint8_t> handled_resumed_not_resumed(uint32_t) { return handled_frame(0, 0x01); }
std::vector<uint8_t> retire_every_stream(uint32_t) {
  std::vector<uint8_t> out = retire_frame(0, 0);
  const std::vector<uint8_t> second = retire_frame(1, 0);
  out.insert(out.end(), second.begin(), second.end());
  return out;
}

/// A data HELLO (or one of another `role` that names an endpoint) on `s` (from a raw peer
/// offering `caps`); the HELLO_ACK's status, -1 when the connection closed without one.
/// `acked_index`: the ACK's stream index.
int data_hello(raw::Socket& s, uint64_t id, uint64_t token, uint16_t index, uint16_t count, uint64_t caps,
               int* acked_index = nullptr, uint8_t role = 2) {
  std::string err;
  raw::Hello dh;
  dh.role = role;
  dh.endpoint_id = id;
  dh.attach_token = token;
  dh.stream_index = index;
  dh.stream_count = count;
  dh.capabilities = caps;
  if (!s.send_all(raw::encode(dh), &err)) return -1;
  auto r = s.recv_exact(raw::kHelloSize, 10s, &err);
  if (!r) return -1;
  if (acked_index != nullptr) *acked_index = raw::decode_ack(*r).stream_index;
  return raw::decode_ack(*r).status;
}

/// A raw peer's endpoint with two data connections, made by hand against `port`.
struct RawPeer {
  raw::Socket ctl;
  raw::HelloAck ack;
  std::vector<raw::Socket> data;
};
void raw_handshake(uint16_t port, uint64_t caps, RawPeer* p, uint32_t eager_credit = 1024 * 1024) {
  std::string err;
  p->ctl = raw::Socket::connect_to("127.0.0.1", port, &err);
  ASSERT_TRUE(p->ctl.valid()) << err;
  raw::Hello h;
  h.stream_count = 2;
  h.capabilities = caps;
  h.eager_credit = eager_credit;
  ASSERT_TRUE(p->ctl.send_all(raw::encode(h), &err)) << err;
  auto ack_bytes = p->ctl.recv_exact(raw::kHelloSize, 10s, &err);
  ASSERT_TRUE(ack_bytes) << err;
  p->ack = raw::decode_ack(*ack_bytes);
  ASSERT_EQ(p->ack.status, 0);
  ASSERT_GT(p->ack.eager_limit, 0u);
  for (uint16_t i = 0; i < 2; ++i) {
    p->data.push_back(raw::Socket::connect_to("127.0.0.1", port, &err));
    ASSERT_TRUE(p->data.back().valid()) << err;
    int acked_index = -1;
    ASSERT_EQ(data_hello(p->data.back(), p->ack.endpoint_id, p->ack.attach_token, i, 2, caps, &acked_index), 0)
        << "data connection " << i;
    EXPECT_EQ(acked_index, i);
  }
}

/// A context listening on loopback, with a raw peer's endpoint made by hand against it
/// (raw_handshake). The context and its listener live as long as the session.
struct RawSession {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Listener> listener;
  RawPeer peer;
};
void open_raw_session(uint64_t caps, RawSession* s, uint32_t eager_credit = 1024 * 1024) {
  s->ctx = make_context(2);
  ASSERT_TRUE(s->ctx);
  auto lr = s->ctx->listen("127.0.0.1:0");
  ASSERT_TRUE(lr) << describe(lr.status());
  s->listener = std::move(lr).value();
  raw_handshake(s->listener->port(), caps, &s->peer, eager_credit);
}

void PrintTo(const Violation& v, std::ostream* os) { *os << v.name; }

class ProtocolViolation : public ::testing::TestWithParam<Violation> {};

TEST_P(ProtocolViolation, FailsOutstandingRequestsAndListenerKeepsServing) {
  // Handshake by hand: control HELLO, then K = 2 data HELLOs with the id and token.
  RawSession session;
  open_raw_session(GetParam().capabilities, &session);
  if (HasFatalFailure()) return;
  auto& listener = session.listener;
  const uint16_t port = listener->port();
  std::string err;
  RawPeer& raw_peer = session.peer;
  raw::Socket& ctl = raw_peer.ctl;
  const raw::HelloAck& ack = raw_peer.ack;
  std::vector<raw::Socket>& data = raw_peer.data;
  auto ar = listener->accept(10s);
  ASSERT_TRUE(ar) << "the hand-made handshake did not produce an endpoint: " << describe(ar.status());
  std::shared_ptr<Endpoint> ep = std::move(ar).value();
  EXPECT_EQ(ep->data_streams(), 2u);

  // A well-formed EAGER first, so a failure below is the violation's doing.
  std::vector<std::byte> first(64), big(1 << 20), other(64), send_buf(1 << 20, std::byte{7});
  struct CloseOnExit {
    std::shared_ptr<Endpoint>& ep;
    ~CloseOnExit() {
      if (ep) ep->close();
    }
  } close_on_exit{ep};
  Request r0 = ep->recv(first, Tag{5});
  const std::vector<uint8_t> hello_msg = {'r', 'a', 'w', ' ', 'h', 'e', 'l', 'l', 'o'};
  ASSERT_TRUE(ctl.send_all(raw::eager(5, hello_msg), &err)) << err;
  ASSERT_TRUE(r0.wait(10s).is_ok()) << "a hand-built EAGER frame was not delivered";
  ASSERT_EQ(r0.bytes(), hello_msg.size());
  EXPECT_EQ(std::memcmp(first.data(), hello_msg.data(), hello_msg.size()), 0);

  // Outstanding work: receives (one large) and a rendezvous send the raw peer ignores.
  Request r1 = ep->recv(big, Tag{5});
  Request r2 = ep->recv(other, Tag{6});
  Request s1 = ep->send(send_buf, Tag{7});

  ASSERT_TRUE(ctl.send_all(GetParam().frame(ack.eager_limit), &err)) << err;
  for (auto [name, r] : {std::pair{"recv tag 5", &r1}, std::pair{"recv tag 6", &r2}, std::pair{"send tag 7", &s1}}) {
    const Status s = r->wait(10s);
    EXPECT_TRUE(s.code() == StatusCode::kProtocol || s.code() == StatusCode::kPeerFailed)
        << name << " after a protocol violation: " << describe(s);
  }
  EXPECT_TRUE(ep->failed());
  EXPECT_TRUE(ctl.wait_closed(10s)) << "the library kept the violating control connection open";
  for (auto& d : data) EXPECT_TRUE(d.wait_closed(10s)) << "the library kept a data connection of the failed endpoint";

  // The listener serves a well-behaved peer process afterwards.
  auto peer = spawn_peer({"--role=connect", "--address=127.0.0.1:" + std::to_string(port), "--scenario=zero",
                          "--seed=3", "--close=follow"});
  auto ar2 = listener->accept(20s);
  ASSERT_TRUE(ar2) << "accept after the violation: " << describe(ar2.status());
  std::shared_ptr<Endpoint> ep2 = std::move(ar2).value();
  EXPECT_EQ(zero_sender(*ep2, 3), "");
  EXPECT_EQ(zero_receiver(*ep2, 103), "");
  EXPECT_EQ(close_handshake(*ep2, true, 30s), "");
  ep2.reset();
  expect_peer_success(*peer);
}

INSTANTIATE_TEST_SUITE_P(
    Frames, ProtocolViolation,
    ::testing::Values(
        Violation{"UnknownType", unknown_type}, Violation{"TypeZero", type_zero},
        Violation{"NonzeroReserved", nonzero_reserved}, Violation{"FixedFrameWrongLength", credit_wrong_length},
        Violation{"EagerOverLimit", eager_over_limit}, Violation{"ChunkForUnknownReceive", chunk_unknown_recv},
        Violation{"HugeBodyLength", huge_body_length}, Violation{"EagerBeyondCredit", eager_beyond_credit},
        Violation{"CreditNeverGranted", credit_never_granted}, Violation{"CtsForUnknownSend", cts_unknown_send},
        Violation{"GoodbyeUnknownReason", goodbye_unknown_reason},
        Violation{"MapWithoutDirectMapping", map_without_direct_map},
        Violation{"PlacedWithoutDirectMapping", placed_without_direct_map},
        Violation{"PlacedShortWithoutNegotiation", placed_short_without_negotiation},
        Violation{"ReceivedWithoutFailover", received_without_failover},
        Violation{"RetireWithoutFailover", retire_without_failover},
        Violation{"ResendChunkWithoutFailover", resend_without_failover},
        Violation{"ResendChunkNotOwed", resend_not_owed, kFailover},
        Violation{"ReceivedBeyondWhatWasWritten", received_beyond_written, kFailover},
        Violation{"RetireBeyondWhatWasWritten", retire_beyond_written, kFailover},
        Violation{"RetireUnknownStream", retire_unknown_stream, kFailover},
        Violation{"RetireEveryStream", retire_every_stream, kFailover},
        Violation{"RejoinedWithoutRejoin", rejoined_without_rejoin, kFailover},
        Violation{"RejoinedOfALiveStream", rejoined_live_stream, kFailover | kRejoin},
        Violation{"RejoinedUnknownStream", rejoined_unknown_stream, kFailover | kRejoin},
        Violation{"HandledWithoutResume", handled_without_resume, kHeartbeat | kFailover | kRejoin},
        Violation{"HandledBeyondWhatWasSent", handled_beyond_sent, kResumeCaps},
        Violation{"HandledResumedOnAConnectionNotResumed", handled_resumed_not_resumed, kResumeCaps}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

// Rejoin HELLOs (docs/protocol.md, "Failover"): a stream of an active endpoint may be
// connected again only with the endpoint's id and token, the same stream count, and
// only once both sides retired it. Each forgery is refused and the endpoint goes on;
// the real rejoin is then accepted, and after REJOINED the endpoint still works.
TEST(Rejoin, ForgedRejoinsAreRefusedAndTheRealOneIsTaken) {
  RawSession session;
  open_raw_session(kFailover | kRejoin, &session);
  if (HasFatalFailure()) return;
  auto& listener = session.listener;
  const uint16_t port = listener->port();
  std::string err;
  RawPeer& raw_peer = session.peer;
  raw::Socket& ctl = raw_peer.ctl;
  const raw::HelloAck& ack = raw_peer.ack;
  std::vector<raw::Socket>& data = raw_peer.data;
  ASSERT_NE(ack.capabilities & kRejoin, 0u) << "the library does not offer rejoin";
  auto rejoin_hello = [&](raw::Socket& s, uint64_t id, uint64_t token, uint16_t index, uint16_t count) {
    return data_hello(s, id, token, index, count, kFailover | kRejoin);
  };
  auto ar = listener->accept(10s);
  ASSERT_TRUE(ar) << describe(ar.status());
  std::shared_ptr<Endpoint> ep = std::move(ar).value();
  std::vector<std::byte> got(64);
  // An EAGER through the control stream: the endpoint serves (and read what came before).
  auto expect_serves = [&](uint64_t tag) {
    Request r = ep->recv(got, Tag{tag});
    const std::vector<uint8_t> msg = {'s', 't', 'i', 'l', 'l'};
    ASSERT_TRUE(ctl.send_all(raw::eager(tag, msg), &err)) << err;
    ASSERT_TRUE(r.wait(10s).is_ok()) << "the endpoint stopped serving";
    EXPECT_EQ(r.bytes(), msg.size());
  };
  auto refused = [&](const char* what, uint64_t id, uint64_t token, uint16_t index, uint16_t count) {
    SCOPED_TRACE(what);
    raw::Socket s = raw::Socket::connect_to("127.0.0.1", port, &err);
    const int status = rejoin_hello(s, id, token, index, count);
    EXPECT_NE(status, 0) << "a forged rejoin was accepted";
    EXPECT_TRUE(s.wait_closed(10s)) << "a refused rejoin stays open";
    EXPECT_FALSE(ep->failed());
  };
  refused("a live stream", ack.endpoint_id, ack.attach_token, 1, 2);

  // The raw side gives stream 1 up (nothing was sent on it); the library retires it too
  // and says so: its RETIRE comes back on the control stream.
  ASSERT_TRUE(ctl.send_all(retire_frame(1, 0), &err)) << err;
  data[1] = raw::Socket();
  for (;;) {
    auto header = ctl.recv_exact(8, 10s, &err);
    ASSERT_TRUE(header) << "no RETIRE came back: " << err;
    const uint32_t body = static_cast<uint32_t>(raw::get_le(header->data() + 4, 4));
    auto rest = ctl.recv_exact(body, 10s, &err);
    ASSERT_TRUE(rest) << err;
    if ((*header)[0] == 18) break;
  }
  refused("a wrong token", ack.endpoint_id, ack.attach_token ^ 1, 1, 2);
  refused("an unknown endpoint", ack.endpoint_id + 1, ack.attach_token, 1, 2);
  refused("another stream count", ack.endpoint_id, ack.attach_token, 1, 3);
  refused("a stream not retired", ack.endpoint_id, ack.attach_token, 0, 2);
  expect_serves(11);

  raw::Socket back = raw::Socket::connect_to("127.0.0.1", port, &err);
  ASSERT_EQ(rejoin_hello(back, ack.endpoint_id, ack.attach_token, 1, 2), 0) << "the real rejoin was refused";
  ASSERT_TRUE(ctl.send_all(rejoined_frame(1), &err)) << err;
  expect_serves(12);
  EXPECT_EQ(ep->stats().streams_rejoined, 1u);
  EXPECT_EQ(ep->stats().streams_retired, 1u);
  refused("the same stream twice", ack.endpoint_id, ack.attach_token, 1, 2);
  ep->abort();
}

/// Reads one whole frame off `s`: its type, flags and body; nullopt (with `err`) if none came.
struct RawFrame {
  uint8_t type = 0, flags = 0;
  std::vector<uint8_t> body;
  size_t size() const { return 8 + body.size(); }
};
std::optional<RawFrame> read_frame(raw::Socket& s, std::string* err) {
  auto header = s.recv_exact(8, 10s, err);
  if (!header) return std::nullopt;
  const auto body_length = static_cast<uint32_t>(raw::get_le(header->data() + 4, 4));
  auto body = s.recv_exact(body_length, 10s, err);
  if (!body) return std::nullopt;
  return RawFrame{(*header)[0], (*header)[1], std::move(*body)};
}

/// A resume HELLO (role 4) on `s`; the HELLO_ACK's status, -1 when the connection closed
/// without one.
int resume_hello(raw::Socket& s, uint64_t id, uint64_t token, uint16_t count, uint16_t index = 0) {
  return data_hello(s, id, token, index, count, kResumeCaps, nullptr, /*role=*/4);
}

// Resuming the control stream (docs/protocol.md): a resume HELLO is taken only with the
// endpoint's id, token and stream count; each forgery is refused and the endpoint goes
// on. The real one replaces the control connection (the library closes the old one,
// which it had not seen break), and the exchange is exact: the library says it handled
// exactly the bytes the raw side sent, and after the raw side says which of the
// library's frames it handled, the library sends the ones after those, in order, and
// none of those before: of six messages, three were read before and the next three
// come, once each. Stale HANDLEDs replayed after that are ignored.
TEST(Resume, ForgedResumesAreRefusedAndTheRealOneReplaysExactlyWhatWasNotHandled) {
  RawSession session;
  open_raw_session(kResumeCaps, &session);
  if (HasFatalFailure()) return;
  auto& listener = session.listener;
  const uint16_t port = listener->port();
  std::string err;
  RawPeer& raw_peer = session.peer;
  const raw::HelloAck& ack = raw_peer.ack;
  ASSERT_NE(ack.capabilities & kResume, 0u) << "the library does not offer resumption";
  auto ar = listener->accept(10s);
  ASSERT_TRUE(ar) << describe(ar.status());
  std::shared_ptr<Endpoint> ep = std::move(ar).value();

  // One message from the raw side: the bytes the library handled of its stream.
  const std::vector<uint8_t> still = {'s', 't', 'i', 'l', 'l'};
  const std::vector<uint8_t> eager11 = raw::eager(11, still);
  std::vector<std::byte> got(64);
  Request r11 = ep->recv(got, Tag{11});
  ASSERT_TRUE(raw_peer.ctl.send_all(eager11, &err)) << err;
  ASSERT_TRUE(r11.wait(10s).is_ok());
  // Six messages from the library, each above the replay's copy size (so that each
  // keeps a replay buffer of its own, which the RESUMED count below frees); the raw side
  // reads the first three.
  constexpr size_t kMessage = 5000;
  for (uint64_t i = 0; i < 6; ++i) {
    const std::vector<std::byte> msg(kMessage, std::byte{static_cast<uint8_t>(i)});
    ASSERT_TRUE(ep->send(msg, Tag{100 + i}).wait(10s).is_ok());
  }
  uint64_t handled = 0;
  for (uint64_t tag = 100; tag < 103;) {
    auto f = read_frame(raw_peer.ctl, &err);
    ASSERT_TRUE(f) << err;
    handled += f->size();
    if (f->type != 1) continue;  // a heartbeat's probe, say
    ASSERT_EQ(raw::get_le(f->body.data(), 8), tag);
    ++tag;
  }

  auto refused = [&](const char* what, uint64_t id, uint64_t token, uint16_t count, uint16_t index = 0) {
    SCOPED_TRACE(what);
    raw::Socket s = raw::Socket::connect_to("127.0.0.1", port, &err);
    EXPECT_NE(resume_hello(s, id, token, count, index), 0) << "a forged resume was accepted";
    EXPECT_TRUE(s.wait_closed(10s)) << "a refused resume stays open";
    EXPECT_FALSE(ep->failed());
  };
  refused("a wrong token", ack.endpoint_id, ack.attach_token ^ 1, 2);
  refused("an unknown endpoint", ack.endpoint_id + 1, ack.attach_token, 2);
  refused("another stream count", ack.endpoint_id, ack.attach_token, 3);
  refused("a stream index", ack.endpoint_id, ack.attach_token, 2, 1);
  EXPECT_EQ(ep->stats().control_resumed, 0u);

  raw::Socket back = raw::Socket::connect_to("127.0.0.1", port, &err);
  ASSERT_EQ(resume_hello(back, ack.endpoint_id, ack.attach_token, 2), 0) << "the real resume was refused";
  EXPECT_TRUE(raw_peer.ctl.wait_closed(10s)) << "the old control connection stays open";
  auto first = read_frame(back, &err);
  ASSERT_TRUE(first) << err;
  ASSERT_EQ(first->type, 20) << "the first frame on a resumed connection is not HANDLED";
  EXPECT_EQ(first->flags, 0x01);
  EXPECT_EQ(raw::get_le(first->body.data(), 8), eager11.size()) << "the library handled another count of bytes";
  ASSERT_TRUE(back.send_all(handled_frame(handled, 0x01), &err)) << err;
  for (uint64_t tag = 103; tag < 106;) {
    auto f = read_frame(back, &err);
    ASSERT_TRUE(f) << err;
    if (f->type != 1) continue;
    ASSERT_EQ(raw::get_le(f->body.data(), 8), tag) << "a message came again, or one was skipped";
    EXPECT_EQ(f->body.size(), 8u + kMessage);
    EXPECT_EQ(f->body[8], static_cast<uint8_t>(tag - 100));
    ++tag;
  }
  // A HANDLED the raw side sent before the break and sends again in its replay (its
  // count below the RESUMED one, and below what the library already forgot): stale,
  // taken as such. (The library failed the endpoint on it once: a protocol error.)
  ASSERT_TRUE(back.send_all(handled_frame(handled - 1), &err)) << err;
  ASSERT_TRUE(back.send_all(handled_frame(0), &err)) << err;
  // Both ways work on the new connection.
  Request r12 = ep->recv(got, Tag{12});
  ASSERT_TRUE(back.send_all(raw::eager(12, still), &err)) << err;
  ASSERT_TRUE(r12.wait(10s).is_ok()) << "nothing arrives on the resumed connection";
  EXPECT_EQ(r12.bytes(), still.size());
  ASSERT_TRUE(ep->send(std::vector<std::byte>(4), Tag{106}).wait(10s).is_ok());
  for (;;) {
    auto f = read_frame(back, &err);
    ASSERT_TRUE(f) << err;
    if (f->type != 1) continue;
    EXPECT_EQ(raw::get_le(f->body.data(), 8), 106u);
    break;
  }
  EXPECT_EQ(ep->stats().control_resumed, 1u);
  EXPECT_FALSE(ep->failed());
  ep->abort();
}

// A peer that reads everything and never says what it handled (no HANDLED) would make
// the library keep every control byte it sent for a replay: past 64 MiB the endpoint
// fails, saying why, instead of growing without bound. The raw peer grants credit for
// 4 GiB of eager messages, so the library sends them inline, and drains its control
// connection until the library closes it.
TEST(Resume, APeerThatNeverAcknowledgesFailsTheEndpointAtTheReplayBound) {
  RawSession session;
  open_raw_session(kResumeCaps, &session, 0xFFFFFFFFu);
  if (HasFatalFailure()) return;
  auto& listener = session.listener;
  RawPeer& raw_peer = session.peer;
  auto ar = listener->accept(10s);
  ASSERT_TRUE(ar) << describe(ar.status());
  std::shared_ptr<Endpoint> ep = std::move(ar).value();
  auto drained = std::async(std::launch::async, [&] {
    size_t total = 0;
    raw_peer.ctl.wait_closed(60s, &total);
    return total;
  });
  const std::vector<std::byte> msg(raw::Hello{}.eager_limit, std::byte{0x5A});
  Status last;
  size_t sent = 0;
  while (sent < (size_t{80} << 20)) {
    last = ep->send(msg, Tag{1}).wait(10s);
    if (!last.is_ok()) break;
    sent += msg.size();
  }
  // An eager send completes once queued: under load the raw peer drains slower than
  // the sends queue, and the bound (on bytes the kernel took) trips only once the
  // queue reached it. A receive ends with the endpoint's failure then.
  if (last.is_ok()) {
    std::byte none[8];
    last = ep->recv(none, Tag{2}).wait(30s);
  }
  EXPECT_EQ(last.code(), StatusCode::kProtocol) << describe(last);
  EXPECT_NE(last.message().find("acknowledged none of the last"), std::string::npos) << last.message();
  // The bound counts control bytes: 16 KiB messages and their 16-byte headers.
  EXPECT_GE(sent, (size_t{64} << 20) / (msg.size() + 16) * msg.size()) << "it failed before the bound";
  EXPECT_TRUE(ep->failed());
  EXPECT_GE(drained.get(), size_t{64} << 20);
}

}  // namespace
}  // namespace remora::itest
