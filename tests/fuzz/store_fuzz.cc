// tests/fuzz/store_fuzz.cc — libFuzzer harness for the rendezvous store's protocol
// (coll/store_protocol.h): the input as a client's byte stream to the server (requests
// one after another, each wait's key list too), and as a reply to a client. Checks
// that a decoded request lies within the input and re-encodes to exactly the bytes it
// consumed, that "incomplete" is said only while a request could still be short of its
// announced length, and that every refusal has a reason.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "coll/store_protocol.h"
#include "fuzz_check.h"

namespace {

using namespace remora::detail::store_protocol;
using remora::StatusCode;

bool within(std::span<const std::byte> part, std::span<const std::byte> whole) {
  return part.empty() || (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

void check_wait_keys(std::span<const std::byte> value) {
  auto keys = decode_wait_keys(value);
  if (!keys.is_ok()) {
    REMORA_FUZZ_CHECK(keys.status().code() == StatusCode::kProtocol, "a bad key list is a protocol error");
    return;
  }
  REMORA_FUZZ_CHECK(!keys->empty(), "a key list holds at least one key");
  for (const auto& k : *keys) REMORA_FUZZ_CHECK(!k.empty() && k.size() <= kMaxKey, "keys are 1..1024 bytes");
  std::vector<std::byte> again;
  encode_wait_keys(again, *keys);
  REMORA_FUZZ_CHECK(std::equal(again.begin(), again.end(), value.begin(), value.end()), "key list round trip");
}

void check_requests(std::span<const std::byte> in) {
  std::span<const std::byte> rest = in;
  while (!rest.empty()) {
    auto r = decode_request(rest);
    if (!r.is_ok()) {
      const StatusCode code = r.status().code();
      REMORA_FUZZ_CHECK(code == StatusCode::kProtocol || code == StatusCode::kInProgress, "decode status");
      REMORA_FUZZ_CHECK(!r.status().message().empty(), "a refusal says why");
      if (code == StatusCode::kInProgress) REMORA_FUZZ_CHECK(rest.size() < kMaxRequest, "incomplete beyond the limit");
      return;
    }
    REMORA_FUZZ_CHECK(r->consumed >= kFixedRequestBytes && r->consumed <= rest.size(), "consumed within the input");
    const auto taken = rest.first(r->consumed);
    REMORA_FUZZ_CHECK(within(std::as_bytes(std::span(r->key)), taken), "the key lies in the request");
    REMORA_FUZZ_CHECK(within(r->value, taken), "the value lies in the request");
    REMORA_FUZZ_CHECK(r->key.size() <= kMaxKey && r->value.size() <= kMaxValue, "within the limits");
    REMORA_FUZZ_CHECK(r->key.empty() == (r->op == Op::kWait), "an empty key only for wait");
    std::vector<std::byte> again;
    encode_request(again, r->op, r->key, r->value, r->timeout_ms);
    REMORA_FUZZ_CHECK(std::equal(again.begin(), again.end(), taken.begin(), taken.end()), "request round trip");
    if (r->op == Op::kWait) check_wait_keys(r->value);
    rest = rest.subspan(r->consumed);
  }
}

void check_reply(std::span<const std::byte> in) {
  auto h = decode_reply_header(in);
  if (!h.is_ok()) {
    const StatusCode code = h.status().code();
    REMORA_FUZZ_CHECK(code == StatusCode::kProtocol || (code == StatusCode::kInProgress && in.size() < kReplyHeaderBytes),
                      "reply header status");
    return;
  }
  REMORA_FUZZ_CHECK(h->payload_bytes <= kMaxReplyPayload, "reply payload within the limit");
  const size_t body = std::min<size_t>(h->payload_bytes, in.size() - kReplyHeaderBytes);
  std::vector<std::byte> again;
  encode_reply(again, h->status, in.subspan(kReplyHeaderBytes, body));
  REMORA_FUZZ_CHECK(std::equal(again.begin(), again.begin() + kReplyHeaderBytes, in.begin()) ||
                        body != h->payload_bytes,
                    "reply header round trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  check_requests(in);
  check_wait_keys(in);
  check_reply(in);
  return 0;
}
