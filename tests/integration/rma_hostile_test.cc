// Hostile peers against a passive RMA target: a raw socket that speaks the wire by hand
// (support/raw_rma.h) attacks a real remora_rma_target process, whose registered region
// sits between two guard zones. Whatever the peer sends, the target must
//   - answer a bad request (forged, stale or malformed key; range; right; alignment)
//     with the specific RESP status, write nothing, and keep the endpoint usable;
//   - fail only the endpoint of a protocol violation and go on serving new peers;
//   - never write outside the granted bytes (guard and region checksums), never crash,
//     and keep its memory bounded under floods (peak RSS).
// The test keeps a mirror of what the region must hold and compares checksums.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <ostream>

#include "itest_util.h"
#include "support/raw_rma.h"
#include "support/raw_wire.h"
#include "support/rma_target.h"
#include "support/test_data.h"

namespace remora::itest {
namespace {

using namespace std::chrono_literals;
using raw::KeyBytes;
using rma_target::Target;
using wire::AtomicOp;
using wire::RmaStatus;
namespace kf = raw::key_field;

/// How long a failed endpoint's connections may take to be closed by the target.
constexpr auto kCloseDeadline = 10s;
/// Peak-RSS growth the floods may cause (the target holds 1 MiB of region; anything that
/// buffers per request without bound blows far past this).
constexpr uint64_t kMaxGrowthKb = 64 * 1024;

}  // namespace
}  // namespace remora::itest

namespace remora::wire {
inline void PrintTo(RmaStatus s, std::ostream* os) { *os << itest::raw::to_string(s); }
}  // namespace remora::wire

namespace remora::itest {
namespace {

std::vector<std::byte> stream_bytes(uint64_t seed, uint64_t offset, size_t length) {
  std::vector<std::byte> out(length);
  fill_stream(seed, offset, out);
  return out;
}

/// What the registered region must hold, byte for byte.
class Mirror {
 public:
  void reset(size_t size, uint64_t seed) {
    bytes_.assign(size, std::byte{0});
    fill_stream(seed, 0, bytes_);
  }
  uint64_t hash() const { return XXH3_64bits(bytes_.data(), bytes_.size()); }
  void write(uint64_t offset, std::span<const std::byte> data) {
    std::memcpy(bytes_.data() + offset, data.data(), data.size());
  }
  std::span<const std::byte> slice(uint64_t offset, uint64_t length) const { return {bytes_.data() + offset, length}; }
  uint64_t word(uint64_t offset) const {
    uint64_t v = 0;
    std::memcpy(&v, bytes_.data() + offset, sizeof v);
    return v;
  }
  void set_word(uint64_t offset, uint64_t v) { std::memcpy(bytes_.data() + offset, &v, sizeof v); }

 private:
  std::vector<std::byte> bytes_;
};

KeyBytes with_field(KeyBytes key, size_t at, size_t size, uint64_t value) {
  raw::set_key_field(key, at, size, value);
  return key;
}

uint32_t region_of(const KeyBytes& key) { return static_cast<uint32_t>(raw::key_field_value(key, kf::kRegion, 4)); }

// ---------------------------------------------------------------------------
// The operations under attack
// ---------------------------------------------------------------------------

enum class Op { kPutInline, kPutChunked, kGetInline, kGetChunked, kFetchAdd, kCompareSwap };

const char* op_name(Op op) {
  switch (op) {
    case Op::kPutInline: return "PutInline";
    case Op::kPutChunked: return "PutChunked";
    case Op::kGetInline: return "GetInline";
    case Op::kGetChunked: return "GetChunked";
    case Op::kFetchAdd: return "FetchAdd";
    case Op::kCompareSwap: return "CompareSwap";
  }
  return "?";
}

bool is_put(Op op) { return op == Op::kPutInline || op == Op::kPutChunked; }
bool is_get(Op op) { return op == Op::kGetInline || op == Op::kGetChunked; }
bool is_atomic(Op op) { return op == Op::kFetchAdd || op == Op::kCompareSwap; }

/// The right an op needs, as rights letters, and the letters of every other right.
char needed_right(Op op) { return is_put(op) ? 'w' : is_get(op) ? 'r' : 'a'; }
std::string other_rights(Op op) {
  std::string all = "rwa";
  all.erase(all.find(needed_right(op)), 1);
  return all;
}

/// Lengths on both sides of the 16 KiB inline bound of puts and gets; the chunked ones are not
/// multiples of the raw chunk size, so the last chunk is short.
uint64_t op_length(Op op) {
  switch (op) {
    case Op::kPutInline:
    case Op::kGetInline: return 1000;
    case Op::kPutChunked: return 3 * raw::kRawChunkBytes + 5;
    case Op::kGetChunked: return 200'003;
    case Op::kFetchAdd:
    case Op::kCompareSwap: return 8;
  }
  return 0;
}

// ---------------------------------------------------------------------------
// Fixture: one target per test, a mirror of its region, checks
// ---------------------------------------------------------------------------

class RmaTargetTest : public ::testing::Test {
 protected:
  void start(const Target::Options& options = {}) {
    std::string err;
    target_ = Target::spawn(REMORA_RMA_TARGET_PATH, options, &err);
    ASSERT_TRUE(target_) << "remora_rma_target did not start: " << err;
    mirror_.reset(target_->size(), rma_target::kInitialSeed);
    guard_before_ = stream_hash(rma_target::kGuardBeforeSeed, target_->guard());
    guard_after_ = stream_hash(rma_target::kGuardAfterSeed, target_->guard());
    auto rss = target_->rss_kb();
    ASSERT_TRUE(rss) << target_->last_error();
  }

  void TearDown() override {
    if (target_) {
      EXPECT_TRUE(target_->quit()) << "the target did not shut down cleanly: " << target_->last_error();
    }
  }

  size_t size() const { return target_->size(); }

  /// Region == mirror, both guards untouched.
  void expect_memory(const std::string& when) {
    auto s = target_->sums();
    ASSERT_TRUE(s) << when << ": " << target_->last_error();
    EXPECT_EQ(s->before, guard_before_) << when << ": the guard zone BEFORE the region was written";
    EXPECT_EQ(s->after, guard_after_) << when << ": the guard zone AFTER the region was written";
    EXPECT_EQ(s->region, mirror_.hash()) << when << ": the region does not hold what it must";
  }

  void expect_notes(const std::vector<rma_target::Note>& expected, const std::string& when) {
    auto n = target_->notes();
    ASSERT_TRUE(n) << target_->last_error();
    EXPECT_EQ(*n, expected) << when;
  }

  void connect(raw::RmaClient& client, const raw::RmaClient::Options& options = {}) {
    const std::string err = client.connect(target_->port(), options);
    ASSERT_EQ(err, "") << "raw handshake with the target";
    ASSERT_GT(client.target_window(), 0u) << "the target's HELLO_ACK carries no rma_window";
    ASSERT_TRUE(target_->await_endpoints(++connections_)) << target_->last_error();
  }

  /// Runs a valid `op` with `key` and checks the reply, the data and the memory.
  void valid_op(raw::RmaClient& c, Op op, const KeyBytes& key, const std::string& when) {
    std::string err;
    const uint64_t length = op_length(op);
    if (is_put(op)) {
      const uint64_t offset = 12'345;
      const auto data = stream_bytes(0x5EED + static_cast<uint64_t>(op), 0, length);
      const uint64_t notify = 0x600D'0000 + notes_.size();
      auto r = c.put(key, offset, data, notify, &err);
      ASSERT_TRUE(r) << when << ": valid " << op_name(op) << ": " << err;
      ASSERT_EQ(r->status, RmaStatus::kOk) << when << ": valid " << op_name(op);
      mirror_.write(offset, data);
      notes_.push_back({notify, region_of(key), offset, length});
      expect_memory(when + ", after a valid " + op_name(op));
      expect_notes(notes_, when + ": the valid put's notification");
    } else if (is_get(op)) {
      const uint64_t offset = 23'456;
      auto r = c.get(key, offset, length, &err);
      ASSERT_TRUE(r) << when << ": valid " << op_name(op) << ": " << err;
      ASSERT_EQ(r->status, RmaStatus::kOk) << when << ": valid " << op_name(op);
      ASSERT_EQ(r->data.size(), length);
      EXPECT_EQ(r->inline_data, op == Op::kGetInline)
          << "GET of " << length << " bytes, inline bound " << c.inline_bound();
      EXPECT_EQ(r->chunk_bytes, op == Op::kGetInline ? 0 : length) << "bytes announced by CHUNK(kind=get)";
      const auto expected = mirror_.slice(offset, length);
      EXPECT_TRUE(std::equal(r->data.begin(), r->data.end(), expected.begin()))
          << when << ": a valid GET returned the wrong bytes";
    } else {
      const uint64_t offset = 4096 + 8;
      const uint64_t before = mirror_.word(offset);
      auto r = op == Op::kFetchAdd ? c.atomic(key, offset, AtomicOp::kFetchAdd, 0x1111, 0, &err)
                                   : c.atomic(key, offset, AtomicOp::kCompareSwap, 0xC0FFEE, before, &err);
      ASSERT_TRUE(r) << when << ": valid " << op_name(op) << ": " << err;
      ASSERT_EQ(r->status, RmaStatus::kOk) << when << ": valid " << op_name(op);
      EXPECT_EQ(r->value, before) << when << ": the atomic's previous value";
      mirror_.set_word(offset, op == Op::kFetchAdd ? before + 0x1111 : 0xC0FFEE);
      expect_memory(when + ", after a valid " + op_name(op));
    }
  }

  /// A new connection works: chunked PUT, GET it back, an atomic.
  void expect_serves_new_peer(const std::string& when) {
    ASSERT_TRUE(target_->alive()) << when << ": " << target_->last_error();
    raw::RmaClient fresh;
    connect(fresh);
    for (Op op : {Op::kPutChunked, Op::kGetChunked, Op::kPutInline, Op::kFetchAdd}) {
      valid_op(fresh, op, target_->key(), when + ", new connection");
    }
  }

  std::unique_ptr<Target> target_;
  Mirror mirror_;
  uint64_t guard_before_ = 0, guard_after_ = 0;
  std::vector<rma_target::Note> notes_;
  uint64_t connections_ = 0;  ///< raw handshakes completed with this target
};

// ---------------------------------------------------------------------------
// Refusals: each bad request gets its status, writes nothing, and the connection
// carries on (a valid op of the same kind succeeds right after).
// ---------------------------------------------------------------------------

enum class Bad {
  kForgedSecret,
  kDeregistered,     // region deregistered, key used afterwards
  kStaleGeneration,  // region deregistered and registered again: the old key
  kUnknownRegion,
  kBadVersion,
  kNonzeroReserved,
  kWrappingWindow,
  kUnknownAccessBits,
  kUnknownKind,
  kWrongKind,        // a well-formed key claiming CUDA memory for a host region
  kPastEndByOne,     // the access's last byte is the first one after the region
  kFarOffset,
  kOffsetWraps,      // offset + length wraps 2^64
  kHugeLength,       // GET of 2^63 bytes
  kKeyWindowBeyondRegion,
  kKeyWindowAfterRegion,  // a window starting at the region's end (the after-guard)
  kBeyondSubWindow,  // a legitimate sub-window key, access crossing the window's end
  kKeyLacksRight,
  kForgedRights,  // a key lacking the right, its rights bits rewritten to claim it
  kRegionLacksRight,
  kMisaligned,
  kMisalignedWindow,  // offset aligned within a window that is not
};

struct BadCase {
  Bad bad;
  const char* name;
  RmaStatus expected;
};

constexpr BadCase kBadCases[] = {
    {Bad::kForgedSecret, "ForgedSecret", RmaStatus::kInvalidKey},
    {Bad::kDeregistered, "Deregistered", RmaStatus::kInvalidKey},
    {Bad::kStaleGeneration, "StaleGeneration", RmaStatus::kInvalidKey},
    {Bad::kUnknownRegion, "UnknownRegion", RmaStatus::kInvalidKey},
    {Bad::kBadVersion, "BadVersion", RmaStatus::kInvalidKey},
    {Bad::kNonzeroReserved, "NonzeroReserved", RmaStatus::kInvalidKey},
    {Bad::kWrappingWindow, "WrappingWindow", RmaStatus::kInvalidKey},
    {Bad::kUnknownAccessBits, "UnknownAccessBits", RmaStatus::kInvalidKey},
    {Bad::kUnknownKind, "UnknownKind", RmaStatus::kInvalidKey},
    {Bad::kWrongKind, "WrongKind", RmaStatus::kInvalidKey},
    {Bad::kPastEndByOne, "PastEndByOne", RmaStatus::kOutOfRange},
    {Bad::kFarOffset, "FarOffset", RmaStatus::kOutOfRange},
    {Bad::kOffsetWraps, "OffsetWraps", RmaStatus::kOutOfRange},
    {Bad::kHugeLength, "HugeLength", RmaStatus::kOutOfRange},
    // A key whose window was rewritten no longer authenticates: kInvalidKey, never
    // kOutOfRange, which would tell the forger about the region's size.
    {Bad::kKeyWindowBeyondRegion, "KeyWindowBeyondRegion", RmaStatus::kInvalidKey},
    {Bad::kKeyWindowAfterRegion, "KeyWindowAfterRegion", RmaStatus::kInvalidKey},
    {Bad::kBeyondSubWindow, "BeyondSubWindow", RmaStatus::kOutOfRange},
    {Bad::kKeyLacksRight, "KeyLacksRight", RmaStatus::kAccessDenied},
    {Bad::kForgedRights, "ForgedRights", RmaStatus::kInvalidKey},
    {Bad::kRegionLacksRight, "RegionLacksRight", RmaStatus::kAccessDenied},
    {Bad::kMisaligned, "Misaligned", RmaStatus::kMisaligned},
    {Bad::kMisalignedWindow, "MisalignedWindow", RmaStatus::kMisaligned},
};

bool applies(Bad bad, Op op) {
  switch (bad) {
    case Bad::kHugeLength: return op == Op::kGetChunked;  // a refused PUT's bytes must still be sent
    case Bad::kMisaligned:
    case Bad::kMisalignedWindow: return is_atomic(op);
    default: return true;
  }
}

struct RefusalParam {
  Op op;
  BadCase bad;
};

void PrintTo(const RefusalParam& p, std::ostream* os) { *os << op_name(p.op) << "_" << p.bad.name; }

std::vector<RefusalParam> refusal_params() {
  std::vector<RefusalParam> out;
  for (Op op : {Op::kPutInline, Op::kPutChunked, Op::kGetInline, Op::kGetChunked, Op::kFetchAdd, Op::kCompareSwap}) {
    for (const BadCase& b : kBadCases) {
      if (applies(b.bad, op)) out.push_back({op, b});
    }
  }
  return out;
}

class Refusal : public RmaTargetTest, public ::testing::WithParamInterface<RefusalParam> {};

TEST_P(Refusal, AnsweredWithItsStatusNothingWrittenConnectionStaysUsable) {
  const Op op = GetParam().op;
  const BadCase bad = GetParam().bad;
  ASSERT_NO_FATAL_FAILURE(start());
  raw::RmaClient c;
  ASSERT_NO_FATAL_FAILURE(connect(c));
  ASSERT_EQ(c.inline_bound(), 16u * 1024) << "the op lengths assume a 16 KiB inline bound";
  ASSERT_GT(op_length(Op::kPutChunked), c.inline_bound());

  // The bad request: which key, where, how long. Default: a fine request.
  const KeyBytes good = target_->key();
  KeyBytes key = good;
  uint64_t length = op_length(op);
  uint64_t offset = is_atomic(op) ? 64 : 100;
  const uint64_t n = size();
  switch (bad.bad) {
    case Bad::kForgedSecret:
      key = with_field(good, kf::kSecret, 8, raw::key_field_value(good, kf::kSecret, 8) ^ 0x0000'0100'0000'0001ull);
      break;
    case Bad::kDeregistered:
      ASSERT_TRUE(target_->dereg()) << target_->last_error();
      break;
    case Bad::kStaleGeneration:
      ASSERT_TRUE(target_->dereg()) << target_->last_error();
      ASSERT_TRUE(target_->reg("rwa")) << target_->last_error();
      ASSERT_EQ(region_of(target_->key()), region_of(good)) << "the re-registration reused no slot; not a stale-generation case";
      ASSERT_NE(raw::key_field_value(target_->key(), kf::kGeneration, 4), raw::key_field_value(good, kf::kGeneration, 4));
      break;
    case Bad::kUnknownRegion: key = with_field(good, kf::kRegion, 4, 0x7777); break;
    case Bad::kBadVersion: key = with_field(good, kf::kVersion, 1, 2); break;
    case Bad::kNonzeroReserved: key = with_field(good, kf::kReserved, 4, 0x10); break;
    case Bad::kWrappingWindow:
      key = with_field(with_field(good, kf::kOffset, 8, ~uint64_t{0} - 4095), kf::kLength, 8, 8192);
      offset = 0;
      break;
    case Bad::kUnknownAccessBits:
      key = with_field(good, kf::kAccess, 2, raw::key_field_value(good, kf::kAccess, 2) | 0x100);
      break;
    case Bad::kUnknownKind: key = with_field(good, kf::kKind, 1, 9); break;
    case Bad::kWrongKind: key = with_field(good, kf::kKind, 1, 1); break;
    case Bad::kPastEndByOne: offset = is_atomic(op) ? n : n - length + 1; break;
    case Bad::kFarOffset: offset = uint64_t{1} << 40; break;
    case Bad::kOffsetWraps: offset = ~uint64_t{0} - 7; break;
    case Bad::kHugeLength:
      offset = 0;
      length = uint64_t{1} << 63;
      break;
    case Bad::kKeyWindowBeyondRegion:
      key = with_field(good, kf::kLength, 8, n + 4096);
      break;
    case Bad::kKeyWindowAfterRegion:
      key = with_field(with_field(good, kf::kOffset, 8, n), kf::kLength, 8, 64 * 1024);
      offset = 0;
      break;
    case Bad::kBeyondSubWindow: {
      const uint64_t window = ((length + 7) / 8) * 8 + 64;
      auto k = target_->window_key(4096, window, "rwa");
      ASSERT_TRUE(k) << target_->last_error();
      key = *k;
      offset = is_atomic(op) ? window : window - length + 8;
      break;
    }
    case Bad::kKeyLacksRight: {
      auto k = target_->window_key(0, n, other_rights(op));
      ASSERT_TRUE(k) << target_->last_error();
      key = *k;
      break;
    }
    case Bad::kForgedRights: {
      auto k = target_->window_key(0, n, other_rights(op));
      ASSERT_TRUE(k) << target_->last_error();
      key = with_field(*k, kf::kAccess, 2, static_cast<uint32_t>(kRemoteAccessMask));
      break;
    }
    case Bad::kRegionLacksRight: {
      ASSERT_TRUE(target_->dereg()) << target_->last_error();
      auto k = target_->reg(other_rights(op));
      ASSERT_TRUE(k) << target_->last_error();
      // The region does not hold the right the op needs, so neither does its key.
      // (A key whose rights bits were rewritten to claim it is forged: see ForgedRights.)
      key = *k;
      break;
    }
    case Bad::kMisaligned: offset = 64 + 4; break;
    case Bad::kMisalignedWindow: {
      auto k = target_->window_key(4, 64, "rwa");
      ASSERT_TRUE(k) << target_->last_error();
      key = *k;
      offset = 8;
      break;
    }
  }

  // Send it. Refused chunked PUTs still carry their data (the target drains it).
  std::string err;
  std::optional<raw::Reply> r;
  if (is_put(op)) {
    const auto data = stream_bytes(0xBAD, 0, length);
    r = c.put(key, offset, data, uint64_t{0xBAD0'0001}, &err);
  } else if (is_get(op)) {
    r = c.get(key, offset, length, &err);
  } else {
    r = op == Op::kFetchAdd ? c.atomic(key, offset, AtomicOp::kFetchAdd, 0x5151, 0, &err)
                            : c.atomic(key, offset, AtomicOp::kCompareSwap, 0xDEAD, mirror_.word(64), &err);
  }
  ASSERT_TRUE(r) << op_name(op) << " " << bad.name << ": no RESP (" << err
                 << "); refusals must be answered, not fail the endpoint";
  EXPECT_EQ(r->status, bad.expected) << op_name(op) << " " << bad.name;
  if (is_get(op)) {
    EXPECT_FALSE(r->inline_data) << "a refused GET carried data";
    EXPECT_EQ(r->chunk_bytes, 0u) << "a refused GET sent CHUNK(kind=get) data";
  }
  expect_memory(std::string("after the refused ") + op_name(op) + " " + bad.name);
  expect_notes({}, "a refused put delivered a notification");

  // Undo what the case did to the region, then the same connection must still work.
  if (bad.bad == Bad::kDeregistered || bad.bad == Bad::kRegionLacksRight) {
    ASSERT_TRUE(target_->dereg()) << target_->last_error();
    ASSERT_TRUE(target_->reg("rwa")) << target_->last_error();
  }
  valid_op(c, op, target_->key(), std::string("after ") + bad.name);
  if (bad.bad == Bad::kDeregistered || bad.bad == Bad::kStaleGeneration) {
    // The stale key stays refused after a valid op with the fresh one.
    auto again = c.get(good, 0, 8, &err);
    ASSERT_TRUE(again) << err;
    EXPECT_EQ(again->status, RmaStatus::kInvalidKey) << "a deregistered region's key worked again";
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, Refusal, ::testing::ValuesIn(refusal_params()), [](const auto& param_info) {
  return std::string(op_name(param_info.param.op)) + "_" + param_info.param.bad.name;
});

// ---------------------------------------------------------------------------
// Other statuses and the legal edges
// ---------------------------------------------------------------------------

using RmaTarget = RmaTargetTest;

// A large PUT validated at its PUT frame, then the region deregistered before any data
// arrived: every byte is drained, nothing written, RESP revoked.
TEST_F(RmaTarget, PutRevokedMidwayDrainsAndAnswersRevoked) {
  ASSERT_NO_FATAL_FAILURE(start());
  raw::RmaClient c;
  ASSERT_NO_FATAL_FAILURE(connect(c));
  const KeyBytes key = target_->key();
  const auto data = stream_bytes(0xBAD, 0, op_length(Op::kPutChunked));
  const uint64_t put_id = c.next_op_id();
  ASSERT_EQ(c.send_put_announce(put_id, key, 0, data.size(), uint64_t{0xBAD}), "");
  // Frames are served in order: once this atomic is answered, the PUT was validated.
  std::string err;
  auto fence = c.atomic(key, 64, AtomicOp::kFetchAdd, 0, 0, &err);
  ASSERT_TRUE(fence) << err;
  ASSERT_EQ(fence->status, RmaStatus::kOk);
  ASSERT_TRUE(target_->dereg()) << target_->last_error();
  ASSERT_EQ(c.send_put_data(put_id, data), "");
  auto r = c.read_reply(&err);
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->op_id, put_id);
  EXPECT_EQ(r->status, RmaStatus::kRevoked);
  expect_memory("after a put revoked midway");
  expect_notes({}, "a revoked put delivered a notification");
  ASSERT_TRUE(target_->reg("rwa")) << target_->last_error();
  valid_op(c, Op::kPutChunked, target_->key(), "after a revoked put");
}

// The notification queue is bounded (REMORA_MAX_UNEXPECTED): a put with NOTIFY beyond it
// is refused with no_resource and writes nothing; once drained, notifying puts work.
TEST_F(RmaTarget, NotificationQueueFullAnswersNoResource) {
  constexpr uint32_t kQueue = 4;
  ASSERT_NO_FATAL_FAILURE(start({.env = {"REMORA_MAX_UNEXPECTED=" + std::to_string(kQueue)}}));
  raw::RmaClient c;
  ASSERT_NO_FATAL_FAILURE(connect(c));
  const KeyBytes key = target_->key();
  std::string err;
  std::vector<rma_target::Note> expected;
  for (uint32_t i = 0; i < kQueue; ++i) {
    const auto data = stream_bytes(0x90 + i, 0, 64);
    auto r = c.put(key, 1024 * i, data, uint64_t{1000 + i}, &err);
    ASSERT_TRUE(r) << err;
    ASSERT_EQ(r->status, RmaStatus::kOk) << "notifying put " << i << " of a queue of " << kQueue;
    mirror_.write(1024 * i, data);
    expected.push_back({1000 + i, region_of(key), 1024 * i, 64});
  }
  for (Op op : {Op::kPutInline, Op::kPutChunked}) {
    auto r = c.put(key, 8192, stream_bytes(0xBAD, 0, op_length(op)), uint64_t{0xF00}, &err);
    ASSERT_TRUE(r) << err;
    EXPECT_EQ(r->status, RmaStatus::kNoResource) << op_name(op) << " with NOTIFY beyond the queue";
  }
  // A put without NOTIFY needs no queue slot.
  const auto plain = stream_bytes(0x77, 0, 100);
  auto r = c.put(key, 50'000, plain, std::nullopt, &err);
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->status, RmaStatus::kOk) << "a put without NOTIFY refused while the notification queue is full";
  mirror_.write(50'000, plain);
  expect_memory("after no_resource refusals");
  expect_notes(expected, "exactly the accepted notifications, in order");
  notes_ = expected;  // drained by the target's `notes`
  valid_op(c, Op::kPutChunked, key, "after the queue drained");
}

// Zero-length operations are legal: the key is still checked, a notification delivered.
TEST_F(RmaTarget, ZeroLengthPutIsValidatedAndNotifies) {
  ASSERT_NO_FATAL_FAILURE(start());
  raw::RmaClient c;
  ASSERT_NO_FATAL_FAILURE(connect(c));
  const KeyBytes key = target_->key();
  std::string err;
  auto bad = c.put(with_field(key, kf::kSecret, 8, 1), 0, {}, uint64_t{1}, &err);
  ASSERT_TRUE(bad) << err;
  EXPECT_EQ(bad->status, RmaStatus::kInvalidKey) << "a zero-length put skipped key validation";
  auto out = c.put(key, size() + 1, {}, uint64_t{2}, &err);
  ASSERT_TRUE(out) << err;
  EXPECT_EQ(out->status, RmaStatus::kOutOfRange) << "a zero-length put past the region's end";
  auto ok = c.put(key, size(), {}, uint64_t{3}, &err);
  ASSERT_TRUE(ok) << err;
  EXPECT_EQ(ok->status, RmaStatus::kOk) << "a zero-length put at the region's end is inside it";
  auto get = c.get(key, 17, 0, &err);
  ASSERT_TRUE(get) << err;
  EXPECT_EQ(get->status, RmaStatus::kOk);
  EXPECT_TRUE(get->data.empty());
  notes_.push_back({3, region_of(key), size(), 0});
  expect_notes(notes_, "one notification, from the zero-length put that was accepted");
  expect_memory("after zero-length ops");
}

// The last bytes of the region are as legal as the first: each op at both edges.
TEST_F(RmaTarget, OpsAtBothEdgesOfTheRegionSucceed) {
  ASSERT_NO_FATAL_FAILURE(start());
  raw::RmaClient c;
  ASSERT_NO_FATAL_FAILURE(connect(c));
  const KeyBytes key = target_->key();
  std::string err;
  for (Op op : {Op::kPutInline, Op::kPutChunked, Op::kGetInline, Op::kGetChunked, Op::kFetchAdd}) {
    const uint64_t len = op_length(op);
    for (uint64_t off : {uint64_t{0}, size() - len}) {
      const std::string where = std::string(op_name(op)) + " at offset " + std::to_string(off);
      if (is_put(op)) {
        const auto data = stream_bytes(0xED6E + off, 0, len);
        auto r = c.put(key, off, data, std::nullopt, &err);
        ASSERT_TRUE(r) << where << ": " << err;
        EXPECT_EQ(r->status, RmaStatus::kOk) << where;
        mirror_.write(off, data);
      } else if (is_get(op)) {
        auto r = c.get(key, off, len, &err);
        ASSERT_TRUE(r) << where << ": " << err;
        ASSERT_EQ(r->status, RmaStatus::kOk) << where;
        ASSERT_EQ(r->data.size(), len);
        const auto expected = mirror_.slice(off, len);
        EXPECT_TRUE(std::equal(r->data.begin(), r->data.end(), expected.begin())) << where;
      } else {
        auto r = c.atomic(key, off, AtomicOp::kFetchAdd, 3, 0, &err);
        ASSERT_TRUE(r) << where << ": " << err;
        ASSERT_EQ(r->status, RmaStatus::kOk) << where;
        EXPECT_EQ(r->value, mirror_.word(off)) << where;
        mirror_.set_word(off, mirror_.word(off) + 3);
      }
    }
  }
  expect_memory("after ops at both edges");
}

// A key for a sub-window addresses from the window's start: writes land at
// key.offset + offset, notifications report the offset from the region's start.
TEST_F(RmaTarget, SubWindowKeyAddressesFromItsWindow) {
  ASSERT_NO_FATAL_FAILURE(start());
  raw::RmaClient c;
  ASSERT_NO_FATAL_FAILURE(connect(c));
  std::string err;
  for (Op op : {Op::kPutInline, Op::kPutChunked}) {
    const uint64_t len = op_length(op);
    const uint64_t window_at = op == Op::kPutInline ? 4096 : 300'000;
    auto key = target_->window_key(window_at, len + 100, "w");
    ASSERT_TRUE(key) << target_->last_error();
    const auto data = stream_bytes(0x5B + len, 0, len);
    auto r = c.put(*key, 100, data, uint64_t{len}, &err);
    ASSERT_TRUE(r) << op_name(op) << ": " << err;
    ASSERT_EQ(r->status, RmaStatus::kOk) << op_name(op) << " through a window key";
    mirror_.write(window_at + 100, data);
    notes_.push_back({len, region_of(*key), window_at + 100, len});
    expect_memory(std::string(op_name(op)) + " through a window key");
  }
  auto atomic_key = target_->window_key(8192, 64, "a");
  ASSERT_TRUE(atomic_key) << target_->last_error();
  const uint64_t before = mirror_.word(8192 + 56);
  auto r = c.atomic(*atomic_key, 56, AtomicOp::kCompareSwap, 0xAB, before, &err);
  ASSERT_TRUE(r) << err;
  ASSERT_EQ(r->status, RmaStatus::kOk);
  EXPECT_EQ(r->value, before);
  mirror_.set_word(8192 + 56, 0xAB);
  expect_memory("compare_swap through a window key");
  expect_notes(notes_, "notification offsets count from the region's start");
}

// The inline/large boundary is min(both eager limits, 16 KiB): with a peer announcing less
// than the target's 64 KiB, 8 KiB puts arrive chunked and 8 KiB GETs must be answered chunked.
TEST_F(RmaTarget, NegotiatedEagerLimitIsTheSmallerOne) {
  ASSERT_NO_FATAL_FAILURE(start());
  raw::RmaClient c;
  ASSERT_NO_FATAL_FAILURE(connect(c, {.eager_limit = 4096}));
  ASSERT_EQ(c.inline_bound(), 4096u);
  const KeyBytes key = target_->key();
  std::string err;
  const auto data = stream_bytes(0x8888, 0, 8192);
  auto p = c.put(key, 300, data, std::nullopt, &err);  // send_put: non-inline above 4096
  ASSERT_TRUE(p) << err;
  ASSERT_EQ(p->status, RmaStatus::kOk);
  mirror_.write(300, data);
  for (uint64_t len : {uint64_t{4096}, uint64_t{4097}, uint64_t{8192}}) {
    auto g = c.get(key, 300, len, &err);
    ASSERT_TRUE(g) << "GET of " << len << " with a 4096-byte negotiated limit: " << err;
    ASSERT_EQ(g->status, RmaStatus::kOk);
    EXPECT_EQ(g->inline_data, len <= 4096) << "GET of " << len << " bytes answered in the wrong class";
    ASSERT_EQ(g->data.size(), len);
    const auto expected = mirror_.slice(300, len);
    EXPECT_TRUE(std::equal(g->data.begin(), g->data.end(), expected.begin()));
  }
  expect_memory("after puts and gets across the negotiated limit");
}

// Exactly the target's window of requests in service is legal: that many large PUTs
// announced before any of their data, then all the data; every one is answered ok.
TEST_F(RmaTarget, FullWindowOfPutsInServiceIsLegal) {
  ASSERT_NO_FATAL_FAILURE(start({.rma_window = 16}));
  raw::RmaClient c;
  ASSERT_NO_FATAL_FAILURE(connect(c));
  ASSERT_EQ(c.target_window(), 16u) << "the target announced another window than it was given";
  const KeyBytes key = target_->key();
  const uint64_t len = c.inline_bound() + 1;
  std::vector<uint64_t> ids;
  for (uint32_t i = 0; i < c.target_window(); ++i) {
    ids.push_back(c.next_op_id());
    ASSERT_EQ(c.send_put_announce(ids.back(), key, i * 50'000, len), "");
  }
  for (uint32_t i = 0; i < c.target_window(); ++i) {
    const auto data = stream_bytes(0xF1F1 + i, 0, len);
    ASSERT_EQ(c.send_put_data(ids[i], data), "");
    mirror_.write(i * 50'000, data);
  }
  std::map<uint64_t, RmaStatus> seen;
  std::string err;
  for (uint32_t i = 0; i < c.target_window(); ++i) {
    auto r = c.read_reply(&err);
    ASSERT_TRUE(r) << "reply " << i << ": " << err;
    EXPECT_TRUE(seen.emplace(r->op_id, r->status).second) << "two RESPs for op " << r->op_id;
  }
  for (uint64_t id : ids) EXPECT_EQ(seen[id], RmaStatus::kOk) << "put op " << id;
  expect_memory("after a full window of large puts");
}

// Inline GETs (each reply at the inline bound, wire::kMaxInlineRma) whose replies
// (16 MiB in all) do not fit in the sockets' buffers (the target's send buffer grows to
// tcp_wmem's 4 MiB at most; ours is fixed at a few hundred KiB),
// and which we read only once the target has served them all (a notifying PUT sent
// behind them has arrived): the target's control stream must then be waiting for room,
// which it watches for (EPOLLOUT) only then. As we read, it resumes: every reply arrives
// whole, and the endpoint stays usable.
TEST_F(RmaTarget, InlineRepliesBeyondTheSocketBuffersAllArriveOnceThePeerReads) {
  constexpr uint64_t kLength = wire::kMaxInlineRma;
  constexpr uint32_t kGets = (16u << 20) / kLength;
  ASSERT_NO_FATAL_FAILURE(start({.rma_window = 2 * kGets, .eager_limit = kLength}));
  raw::RmaClient c;
  ASSERT_NO_FATAL_FAILURE(connect(c, {.eager_limit = kLength, .eager_credit = 2 * kLength}));
  ASSERT_EQ(c.inline_bound(), kLength) << "the negotiated inline bound";
  // A fixed receive buffer: no autotuning up to tcp_rmem's maximum (32 MiB here).
  const int rcvbuf = 256 * 1024;
  ASSERT_EQ(::setsockopt(c.control().fd(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf), 0) << std::strerror(errno);
  const KeyBytes key = target_->key();
  std::map<uint64_t, uint64_t> gets;  // op id -> offset
  for (uint32_t i = 0; i < kGets; ++i) {
    const uint64_t id = c.next_op_id();
    const uint64_t offset = (i * 16'411) % (size() - kLength);
    gets[id] = offset;
    ASSERT_EQ(c.send_get(id, key, offset, kLength), "");
  }
  const uint64_t put_id = c.next_op_id();
  const uint64_t put_offset = size() - 8;
  const auto put_data = stream_bytes(0xB10C, 0, 8);
  ASSERT_EQ(c.send_put(put_id, key, put_offset, put_data, 0xB10C), "");
  // Frames are served in order: once the PUT's notification is there, every GET's reply
  // is queued behind a socket that cannot take it all.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    auto n = target_->notes();
    ASSERT_TRUE(n) << target_->last_error();
    if (!n->empty()) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the target did not serve the PUT behind the GETs";
  }
  notes_.push_back({0xB10C, region_of(key), put_offset, 8});
  expect_notes(notes_, "the PUT behind the GETs");
  std::string err;
  bool put_answered = false;
  for (uint32_t i = 0; i < kGets + 1; ++i) {
    auto r = c.read_reply(&err);
    ASSERT_TRUE(r) << "reply " << i << " of " << kGets + 1 << ": " << err;
    ASSERT_EQ(r->status, RmaStatus::kOk) << "op " << r->op_id;
    if (r->op_id == put_id) {
      EXPECT_FALSE(put_answered) << "two RESPs for the PUT";
      put_answered = true;
      continue;
    }
    auto it = gets.find(r->op_id);
    ASSERT_NE(it, gets.end()) << "a reply for op " << r->op_id << ", which is not (or no longer) outstanding";
    EXPECT_TRUE(r->inline_data) << "op " << r->op_id;
    ASSERT_EQ(r->data.size(), kLength) << "op " << r->op_id;
    const auto expected = mirror_.slice(it->second, kLength);  // served before the PUT
    EXPECT_TRUE(std::equal(r->data.begin(), r->data.end(), expected.begin()))
        << "GET op " << r->op_id << " returned the wrong bytes";
    gets.erase(it);
  }
  EXPECT_TRUE(gets.empty());
  EXPECT_TRUE(put_answered);
  mirror_.write(put_offset, put_data);
  expect_memory("after replies that waited for room");
  valid_op(c, Op::kFetchAdd, key, "after replies that waited for room");
  valid_op(c, Op::kGetInline, key, "after replies that waited for room");
}

// ---------------------------------------------------------------------------
// Protocol violations: only that endpoint fails (the target closes all its
// connections); nothing is written; the process serves the next peer.
// ---------------------------------------------------------------------------

struct ViolationContext {
  raw::RmaClient& c;
  Target& target;
  const Mirror& mirror;
  uint64_t size;
};

struct Violation {
  const char* name;
  /// Sends the violation; returns "" or why it could not be sent.
  std::string (*send)(ViolationContext&);
  bool peer_closes = false;  ///< the raw peer closes itself (truncation cases)
};

void PrintTo(const Violation& v, std::ostream* os) { *os << v.name; }

std::vector<uint8_t> header(uint8_t type, uint8_t flags, uint32_t body_length) {
  return raw::Bytes().u8(type).u8(flags).u16(0).u32(body_length).bytes();
}

/// A fixed-size RMA body (zeros but for an op id and a key) with an arbitrary header.
std::vector<uint8_t> rma_frame(uint8_t type, uint8_t flags, size_t body_size, const KeyBytes& key) {
  std::vector<uint8_t> body(body_size, 0);
  if (body_size > 0) body[0] = 1;  // op id 1
  if (body_size >= 48) std::memcpy(body.data() + 8, key.data(), key.size());
  return raw::frame(type, body, flags);
}

std::string send(ViolationContext& v, const std::vector<uint8_t>& bytes) { return v.c.send_control(bytes); }

const Violation kViolations[] = {
    // Truncation: the peer vanishes mid-frame.
    {"TruncatedPutFrameThenClose",
     [](ViolationContext& v) {
       auto f = raw::put_frame(1, v.target.key(), 0, 100, std::nullopt, true,
                               v.mirror.slice(0, 100));
       f.resize(40);
       std::string e = send(v, f);
       v.c.close();
       return e;
     },
     true},
    {"TruncatedInlinePayloadThenClose",
     [](ViolationContext& v) {
       auto f = raw::put_frame(1, v.target.key(), 0, 1000, std::nullopt, true, v.mirror.slice(0, 1000));
       f.resize(f.size() - 500);
       std::string e = send(v, f);
       v.c.close();
       return e;
     },
     true},
    {"TruncatedChunkDataThenClose",
     [](ViolationContext& v) {
       // The bytes are what the region already holds, so a partial write changes nothing.
       const uint64_t len = 100'000;
       std::string e = v.c.send_put_announce(1, v.target.key(), 0, len);
       if (e.empty()) e = send(v, raw::chunk_frame(1, 0, static_cast<uint32_t>(len), 0, wire::ChunkKind::kPut));
       if (e.empty()) e = v.c.send_data(0, v.mirror.slice(0, len / 2));
       v.c.close();
       return e;
     },
     true},
    // Headers no frame may have.
    {"AbsurdBodyLengthPut", [](ViolationContext& v) { return send(v, header(7, 0, 0xFFFF'FFF0u)); }},
    {"AbsurdBodyLengthInlinePut", [](ViolationContext& v) { return send(v, header(7, 0x02, 0xFFFF'FFF0u)); }},
    {"AbsurdBodyLengthGet", [](ViolationContext& v) { return send(v, header(8, 0, 0xFFFF'FFF0u)); }},
    {"AbsurdBodyLengthResp", [](ViolationContext& v) { return send(v, header(10, 0x01, 0xFFFF'FFF0u)); }},
    {"ShortAtomicBody", [](ViolationContext& v) { return send(v, rma_frame(9, 0, 72, v.target.key())); }},
    {"UnknownType11", [](ViolationContext& v) { return send(v, rma_frame(11, 0, 64, v.target.key())); }},
    {"UnknownType255", [](ViolationContext& v) { return send(v, rma_frame(255, 0, 64, v.target.key())); }},
    {"PutFlag0x04", [](ViolationContext& v) { return send(v, rma_frame(7, 0x04, 72, v.target.key())); }},
    {"PutFlag0x80", [](ViolationContext& v) { return send(v, rma_frame(7, 0x80, 72, v.target.key())); }},
    {"GetFlag0x01", [](ViolationContext& v) { return send(v, rma_frame(8, 0x01, 64, v.target.key())); }},
    {"AtomicFlag0x01",
     [](ViolationContext& v) {
       auto f = raw::atomic_frame(1, v.target.key(), 64, AtomicOp::kFetchAdd, 1, 0);
       f[1] = 0x01;
       return send(v, f);
     }},
    {"RespFlag0x02",
     [](ViolationContext& v) {
       auto f = raw::resp_frame(1, RmaStatus::kOk, 0);
       f[1] = 0x02;
       return send(v, f);
     }},
    {"ChunkKind3",
     [](ViolationContext& v) {
       auto f = raw::chunk_frame(1, 0, 100, 0, wire::ChunkKind::kPut);
       f[1] = 0x03;
       return send(v, f);
     }},
    // Bodies no frame may have.
    {"AtomicOpcode0",
     [](ViolationContext& v) {
       auto f = raw::atomic_frame(1, v.target.key(), 64, AtomicOp::kFetchAdd, 1, 0);
       f[8 + 56] = 0;
       return send(v, f);
     }},
    {"AtomicOpcode3",
     [](ViolationContext& v) {
       auto f = raw::atomic_frame(1, v.target.key(), 64, AtomicOp::kFetchAdd, 1, 0);
       f[8 + 56] = 3;
       return send(v, f);
     }},
    {"AtomicNonzeroReserved",
     [](ViolationContext& v) {
       auto f = raw::atomic_frame(1, v.target.key(), 64, AtomicOp::kFetchAdd, 1, 0);
       f[8 + 60] = 1;
       return send(v, f);
     }},
    {"FetchAddWithCompare",
     [](ViolationContext& v) {
       auto f = raw::atomic_frame(1, v.target.key(), 64, AtomicOp::kFetchAdd, 1, 0);
       f[8 + 72] = 1;
       return send(v, f);
     }},
    {"PutNotifyValueWithoutFlag",
     [](ViolationContext& v) {
       auto f = raw::put_frame(1, v.target.key(), 0, 8, std::nullopt, true, v.mirror.slice(0, 8));
       f[8 + 64] = 1;
       return send(v, f);
     }},
    {"InlinePutLengthMismatch",
     [](ViolationContext& v) {
       auto f = raw::put_frame(1, v.target.key(), 0, 64, std::nullopt, true, v.mirror.slice(0, 64));
       f[8 + 56] = 65;  // length field says 65, 64 bytes follow
       return send(v, f);
     }},
    {"RespUnknownStatus",
     [](ViolationContext& v) {
       auto f = raw::resp_frame(1, RmaStatus::kOk, 0);
       f[8 + 8] = 7;
       return send(v, f);
     }},
    // Chunks the target never asked for.
    {"ChunkForUnknownPut",
     [](ViolationContext& v) {
       std::string e = send(v, raw::chunk_frame(999, 0, 1000, 0, wire::ChunkKind::kPut));
       return e.empty() ? v.c.send_data(0, v.mirror.slice(0, 1000)) : e;
     }},
    {"GetDataChunkToTarget",
     [](ViolationContext& v) {
       std::string e = send(v, raw::chunk_frame(1, 0, 1000, 0, wire::ChunkKind::kGet));
       return e.empty() ? v.c.send_data(0, v.mirror.slice(0, 1000)) : e;
     }},
    {"ChunkBeyondPutLength",
     [](ViolationContext& v) {
       // The put ends at the region's end: the bogus chunk's tail would land in the guard.
       const uint64_t len = 50'000;
       std::string e = v.c.send_put_announce(1, v.target.key(), v.size - len, len);
       if (e.empty()) e = send(v, raw::chunk_frame(1, len - 100, 200, 0, wire::ChunkKind::kPut));
       if (e.empty()) e = v.c.send_data(0, std::vector<std::byte>(200, std::byte{0xEE}));
       return e;
     }},
    {"ChunkOffsetWraps",
     [](ViolationContext& v) {
       const uint64_t len = 50'000;
       std::string e = v.c.send_put_announce(1, v.target.key(), 0, len);
       if (e.empty()) e = send(v, raw::chunk_frame(1, ~uint64_t{0} - 99, 200, 0, wire::ChunkKind::kPut));
       if (e.empty()) e = v.c.send_data(0, std::vector<std::byte>(200, std::byte{0xEE}));
       return e;
     }},
    // Chunks that stay inside the put but do not tile it: repeated, overlapping or out of
    // order, they could bring the byte count to the put's length with part of it never
    // written (a successful RESP over stale memory). The bytes sent are the region's own,
    // so only the verdict (the endpoint fails) tells the target refused them.
    {"ChunkRepeatedToFakeCompletion",
     [](ViolationContext& v) {
       const uint64_t half = v.c.inline_bound() + 1000, len = 2 * half;
       std::string e = v.c.send_put_announce(1, v.target.key(), 0, len);
       for (int i = 0; i < 2 && e.empty(); ++i) {
         e = send(v, raw::chunk_frame(1, 0, half, 0, wire::ChunkKind::kPut));
         if (e.empty()) e = v.c.send_data(0, v.mirror.slice(0, half));
       }
       return e;
     }},
    {"ChunkOverlapsThePrevious",
     [](ViolationContext& v) {
       const uint64_t len = 2 * (v.c.inline_bound() + 1000);
       std::string e = v.c.send_put_announce(1, v.target.key(), 0, len);
       if (e.empty()) e = send(v, raw::chunk_frame(1, 0, 2000, 0, wire::ChunkKind::kPut));
       if (e.empty()) e = v.c.send_data(0, v.mirror.slice(0, 2000));
       // [1000, len - 1000): the count reaches len, the last 1000 bytes are never written.
       if (e.empty()) e = send(v, raw::chunk_frame(1, 1000, len - 2000, 0, wire::ChunkKind::kPut));
       if (e.empty()) e = v.c.send_data(0, v.mirror.slice(1000, len - 2000));
       return e;
     }},
    {"ChunkLeavesAGap",
     [](ViolationContext& v) {
       const uint64_t len = 2 * (v.c.inline_bound() + 1000);
       std::string e = v.c.send_put_announce(1, v.target.key(), 0, len);
       if (e.empty()) e = send(v, raw::chunk_frame(1, 1000, len - 1000, 0, wire::ChunkKind::kPut));
       if (e.empty()) e = v.c.send_data(0, v.mirror.slice(1000, len - 1000));
       return e;
     }},
    {"ChunkOnStreamBeyondK",
     [](ViolationContext& v) {
       const uint64_t len = 50'000;
       std::string e = v.c.send_put_announce(1, v.target.key(), 0, len);
       if (e.empty()) e = send(v, raw::chunk_frame(1, 0, 1000, v.c.streams(), wire::ChunkKind::kPut));
       return e;
     }},
    // The inline/large class rule.
    {"InlinePutAboveEagerLimit",
     [](ViolationContext& v) {
       const auto data = v.mirror.slice(0, v.c.inline_bound() + 1);
       return send(v, raw::put_frame(1, v.target.key(), 0, data.size(), std::nullopt, true, data));
     }},
    {"NonInlinePutAtEagerLimit",
     [](ViolationContext& v) {
       std::string e = v.c.send_put_announce(1, v.target.key(), 0, v.c.inline_bound());
       return e.empty() ? v.c.send_put_data(1, v.mirror.slice(0, v.c.inline_bound())) : e;
     }},
    {"NonInlinePutOfZeroBytes", [](ViolationContext& v) { return v.c.send_put_announce(1, v.target.key(), 0, 0); }},
    // Op ids and the window.
    {"DuplicateInFlightPutId",
     [](ViolationContext& v) {
       const uint64_t len = v.c.inline_bound() + 1;
       std::string e = v.c.send_put_announce(1, v.target.key(), 0, len);
       return e.empty() ? v.c.send_put_announce(1, v.target.key(), 100'000, len) : e;
     }},
    // Stricter reading: op ids number ALL of an initiator's RMA ops, so an atomic reusing
    // the id of a PUT still in service is a duplicate too.
    {"AtomicReusesInFlightPutId",
     [](ViolationContext& v) {
       std::string e = v.c.send_put_announce(1, v.target.key(), 0, v.c.inline_bound() + 1);
       return e.empty() ? v.c.send_atomic(1, v.target.key(), 64, AtomicOp::kFetchAdd, 1) : e;
     }},
    {"GetReusesInFlightPutId",
     [](ViolationContext& v) {
       std::string e = v.c.send_put_announce(1, v.target.key(), 0, v.c.inline_bound() + 1);
       return e.empty() ? send(v, raw::get_frame(1, v.target.key(), 0, 64)) : e;
     }},
    {"WindowExceeded",
     [](ViolationContext& v) {
       const uint64_t len = v.c.inline_bound() + 1;
       for (uint64_t id = 1; id <= uint64_t{v.c.target_window()} + 1; ++id) {
         if (std::string e = v.c.send_put_announce(id, v.target.key(), 0, len); !e.empty()) {
           // The target may already have failed the endpoint at window + 1.
           return id == uint64_t{v.c.target_window()} + 1 ? std::string() : e;
         }
       }
       return std::string();
     }},
    {"RespForOpNeverIssued", [](ViolationContext& v) { return send(v, raw::resp_frame(77, RmaStatus::kOk, 0)); }},
    {"InlineRespForOpNeverIssued",
     [](ViolationContext& v) {
       const auto data = v.mirror.slice(0, 16);
       return send(v, raw::encode_frame(wire::RespFrame{
                          .op_id = 1, .status = RmaStatus::kOk, .value = 0, .inline_data = true, .payload = data}));
     }},
};

class RmaViolation : public RmaTargetTest, public ::testing::WithParamInterface<Violation> {};

TEST_P(RmaViolation, FailsOnlyThatEndpointAndTargetServesTheNextPeer) {
  ASSERT_NO_FATAL_FAILURE(start());
  raw::RmaClient c;
  ASSERT_NO_FATAL_FAILURE(connect(c));
  // A valid op first, so what follows is the violation's doing.
  valid_op(c, Op::kFetchAdd, target_->key(), "before the violation");
  ViolationContext v{c, *target_, mirror_, size()};
  const std::string sent = GetParam().send(v);
  // A send may fail because the target already dropped us; that is fine.
  if (!GetParam().peer_closes) {
    EXPECT_TRUE(c.wait_all_closed(kCloseDeadline))
        << GetParam().name << ": the target kept the violating endpoint's connections open"
        << (sent.empty() ? "" : " (send: " + sent + ")");
  }
  ASSERT_TRUE(target_->alive()) << GetParam().name << ": " << target_->last_error();
  expect_memory(std::string("after the violation ") + GetParam().name);
  expect_serves_new_peer(std::string("after the violation ") + GetParam().name);
}

INSTANTIATE_TEST_SUITE_P(Frames, RmaViolation, ::testing::ValuesIn(kViolations),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// ---------------------------------------------------------------------------
// Pipelining and floods: memory stays bounded, nothing crashes
// ---------------------------------------------------------------------------

/// Keeps exactly the target's window of fetch_adds in flight, reading as it goes.
/// Atomics on one endpoint run in posting order, so op k sees initial + (k - 1).
TEST_F(RmaTarget, WindowedAtomicPipelineIsExactAndMemoryFlat) {
  ASSERT_NO_FATAL_FAILURE(start());
  raw::RmaClient c;
  ASSERT_NO_FATAL_FAILURE(connect(c));
  const KeyBytes key = target_->key();
  const auto base = target_->rss_kb();
  ASSERT_TRUE(base) << target_->last_error();
  const uint64_t total = scaled<uint64_t>(200'000, 20'000);
  const uint64_t word_at = 4096;
  const uint64_t initial = mirror_.word(word_at);
  std::map<uint64_t, uint64_t> first_id;  // op id -> its index among the atomics
  uint64_t posted = 0, answered = 0;
  std::string err;
  while (answered < total) {
    while (posted < total && posted - answered < c.target_window()) {
      const uint64_t id = c.next_op_id();
      first_id[id] = posted++;
      ASSERT_EQ(c.send_atomic(id, key, word_at, AtomicOp::kFetchAdd, 1), "");
    }
    auto r = c.read_reply(&err);
    ASSERT_TRUE(r) << "after " << answered << " replies: " << err;
    ASSERT_EQ(r->status, RmaStatus::kOk);
    auto it = first_id.find(r->op_id);
    ASSERT_NE(it, first_id.end()) << "RESP for op " << r->op_id << ", not in flight";
    ASSERT_EQ(r->value, initial + it->second) << "atomic #" << it->second << " did not run in posting order";
    first_id.erase(it);
    ++answered;
  }
  mirror_.set_word(word_at, initial + total);
  expect_memory("after the windowed atomic pipeline");
  const auto after = target_->rss_kb();
  ASSERT_TRUE(after) << target_->last_error();
  EXPECT_LT(after->second, base->second + kMaxGrowthKb) << "peak RSS grew by " << (after->second - base->second)
                                                        << " kB over " << total << " windowed atomics";
}

/// Windowed inline and large PUTs and GETs mixed, reading replies as they come.
TEST_F(RmaTarget, WindowedPutGetPipelineIsCorrect) {
  ASSERT_NO_FATAL_FAILURE(start());
  raw::RmaClient c;
  ASSERT_NO_FATAL_FAILURE(connect(c));
  const KeyBytes key = target_->key();
  // Puts go to the second half of the region and write the position-addressable stream
  // kSeed wherever they land, so overlapping puts (unordered among themselves) still
  // leave a known result; GETs read the first half, which nothing writes.
  constexpr uint64_t kSeed = 0x51;
  const uint64_t half = size() / 2;
  const auto pattern = stream_bytes(kSeed, 0, size());
  const uint64_t total = scaled<uint64_t>(3000, 600);
  Rng rng(7);
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> gets;  // op id -> {offset, length}
  std::vector<std::pair<uint64_t, uint64_t>> puts;
  uint64_t posted = 0, answered = 0;
  std::string err;
  while (answered < total) {
    while (posted < total && posted - answered < c.target_window()) {
      const bool large = rng.unit() < 0.2;
      const uint64_t len = large ? rng.uniform(c.inline_bound() + 1, 100'000) : rng.uniform(0, c.inline_bound());
      const uint64_t id = c.next_op_id();
      if ((posted % 2) == 0) {
        const uint64_t off = rng.uniform(half, size() - len);
        ASSERT_EQ(c.send_put(id, key, off, std::span(pattern).subspan(off, len)), "");
        puts.emplace_back(off, len);
      } else {
        const uint64_t off = rng.uniform(0, half - len);
        gets[id] = {off, len};
        ASSERT_EQ(c.send_get(id, key, off, len), "");
      }
      ++posted;
    }
    auto r = c.read_reply(&err);
    ASSERT_TRUE(r) << "after " << answered << " replies: " << err;
    ASSERT_EQ(r->status, RmaStatus::kOk) << "op " << r->op_id;
    if (auto it = gets.find(r->op_id); it != gets.end()) {
      const auto [off, len] = it->second;
      ASSERT_EQ(r->data.size(), len) << "GET op " << r->op_id;
      const auto expected = mirror_.slice(off, len);
      ASSERT_TRUE(std::equal(r->data.begin(), r->data.end(), expected.begin())) << "GET op " << r->op_id;
      gets.erase(it);
    }
    ++answered;
  }
  EXPECT_TRUE(gets.empty());
  for (const auto& [off, len] : puts) mirror_.write(off, std::span(pattern).subspan(off, len));
  expect_memory("after the windowed put/get pipeline");
}

/// A peer that never reads its replies floods the target with `frame_for(id)` (frames
/// of one size); whatever the target does about it (back-pressure, or failing the
/// endpoint), its peak RSS stays bounded and it survives. Afterwards the peer reads what
/// the target still answers, so the peak covers everything the target chose to serve.
/// `get_length`: the frames are GETs of that many bytes (their data is read and dropped).
template <typename FrameFor>
void never_reading_flood(raw::RmaClient& c, Target& target, uint64_t count, FrameFor frame_for, const char* what,
                         std::optional<uint64_t> get_length = std::nullopt) {
  const auto base = target.rss_kb();
  ASSERT_TRUE(base) << target.last_error();
  const size_t frame_size = frame_for(1).size();
  std::vector<uint8_t> batch;
  uint64_t offered = 0;
  size_t bytes_sent = 0;
  raw::Flow flow = raw::Flow::kSent;
  while (offered < count && flow == raw::Flow::kSent) {
    batch.clear();
    for (int i = 0; i < 256 && offered < count; ++i) {
      const auto f = frame_for(++offered);
      ASSERT_EQ(f.size(), frame_size);
      batch.insert(batch.end(), f.begin(), f.end());
    }
    size_t sent = 0;
    flow = raw::send_bounded(c.control().fd(), batch, 3000ms, &sent);
    bytes_sent += sent;
  }
  const uint64_t complete = bytes_sent / frame_size;
  if (get_length) {
    for (uint64_t id = 1; id <= complete; ++id) c.expect_get(id, *get_length, false);
  }
  uint64_t answered = 0;
  std::string err;
  while (answered < complete) {
    auto r = c.read_reply(&err);
    if (!r) break;
    ++answered;
  }
  EXPECT_EQ(err.find("timed out"), std::string::npos)
      << what << ": the target neither answered the requests it had in full nor closed the connection: " << err;
  const auto after = target.rss_kb();
  ASSERT_TRUE(after) << what << ": the target did not answer after the flood: " << target.last_error();
  const char* outcome = flow == raw::Flow::kSent ? "all sent" : flow == raw::Flow::kStalled ? "back-pressure" : "closed";
  std::printf("[   INFO   ] %s: %llu requests offered, %llu sent whole, %llu answered, outcome: %s, peak RSS %+lld kB\n",
              what, static_cast<unsigned long long>(offered), static_cast<unsigned long long>(complete),
              static_cast<unsigned long long>(answered), outcome,
              static_cast<long long>(after->second) - static_cast<long long>(base->second));
  EXPECT_LT(after->second, base->second + kMaxGrowthKb)
      << what << ": peak RSS grew by " << (after->second - base->second) << " kB (" << complete
      << " requests sent whole, " << answered << " answered, outcome: " << outcome << ")";
  c.close();
  ASSERT_TRUE(target.alive()) << target.last_error();
}

TEST_F(RmaTarget, NeverReadingAtomicFloodKeepsMemoryBounded) {
  ASSERT_NO_FATAL_FAILURE(start());
  raw::RmaClient c;
  ASSERT_NO_FATAL_FAILURE(connect(c));
  const KeyBytes key = target_->key();
  const uint64_t word_at = 8192;
  never_reading_flood(c, *target_, scaled<uint64_t>(3'000'000, 300'000),
                      [&](uint64_t id) { return raw::atomic_frame(id, key, word_at, AtomicOp::kFetchAdd, 1, 0); },
                      "fetch_add flood");
  // How many ran is unknown: read the word back over a new connection.
  raw::RmaClient fresh;
  ASSERT_NO_FATAL_FAILURE(connect(fresh));
  std::string err;
  auto r = fresh.atomic(key, word_at, AtomicOp::kFetchAdd, 0, 0, &err);
  ASSERT_TRUE(r) << err;
  ASSERT_EQ(r->status, RmaStatus::kOk);
  mirror_.set_word(word_at, r->value);
  expect_memory("after the atomic flood");
  expect_serves_new_peer("after the atomic flood");
}

TEST_F(RmaTarget, NeverReadingInlineGetFloodKeepsMemoryBounded) {
  // Each 72-byte GET asks for eager_limit bytes back: a target that keeps reading and
  // queueing answers would need gigabytes.
  ASSERT_NO_FATAL_FAILURE(start());
  raw::RmaClient c;
  ASSERT_NO_FATAL_FAILURE(connect(c));
  const KeyBytes key = target_->key();
  const uint64_t len = c.inline_bound();
  never_reading_flood(c, *target_, scaled<uint64_t>(20'000, 5'000),
                      [&](uint64_t id) { return raw::get_frame(id, key, (id * 4096) % (size() - len), len); },
                      "inline GET flood", len);
  expect_memory("after the GET flood");
  expect_serves_new_peer("after the GET flood");
}

TEST_F(RmaTarget, NeverReadingLargeGetFloodKeepsMemoryBounded) {
  ASSERT_NO_FATAL_FAILURE(start());
  raw::RmaClient c;
  ASSERT_NO_FATAL_FAILURE(connect(c));
  const KeyBytes key = target_->key();
  const uint64_t len = 256 * 1024;
  never_reading_flood(c, *target_, scaled<uint64_t>(20'000, 2'000),
                      [&](uint64_t id) { return raw::get_frame(id, key, 0, len); }, "large GET flood", len);
  expect_memory("after the large GET flood");
  expect_serves_new_peer("after the large GET flood");
}

TEST_F(RmaTarget, NeverReadingNotifyingPutFloodKeepsMemoryBounded) {
  // Inline puts with NOTIFY, rewriting what the region already holds (so however many
  // ran, the region is unchanged) and filling the notification queue.
  ASSERT_NO_FATAL_FAILURE(start());
  raw::RmaClient c;
  ASSERT_NO_FATAL_FAILURE(connect(c));
  const KeyBytes key = target_->key();
  const uint64_t len = c.inline_bound();
  never_reading_flood(c, *target_, scaled<uint64_t>(20'000, 4'000),
                      [&](uint64_t id) {
                        const uint64_t off = (id * 4096) % (size() - len);
                        return raw::put_frame(id, key, off, len, id, true, mirror_.slice(off, len));
                      },
                      "notifying inline PUT flood");
  expect_memory("after the PUT flood");
}

}  // namespace
}  // namespace remora::itest
