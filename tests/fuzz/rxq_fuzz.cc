// tests/fuzz/rxq_fuzz.cc — libFuzzer harness for `remora rxq`'s Unix-socket protocol
// (zerocopy/rxq_protocol.h): the input as a client's request to rxq (any kind) and as rxq's reply
// to a client. Whatever decodes re-encodes to exactly the input (the decoders are
// strict: no field or reserved byte is ignored), within its stated bounds; anything
// else is kProtocol with a reason.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_check.h"
#include "zerocopy/rxq_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remora::zerocopy;
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);

  auto request = rxq::decode_request(in);
  if (request.is_ok()) {
    REMORA_FUZZ_CHECK(request->flow.dst_port != 0, "a request names the receiver's port");
    const auto again = rxq::encode(*request);
    REMORA_FUZZ_CHECK(std::equal(again.begin(), again.end(), in.begin(), in.end()), "request round trip");
    (void)request->flow.describe();
  } else {
    REMORA_FUZZ_CHECK(request.status().code() == remora::StatusCode::kProtocol, "a bad request is kProtocol");
    REMORA_FUZZ_CHECK(!request.status().message().empty(), "a refusal says why");
  }

  auto type = rxq::request_type(in);
  auto dmabuf = rxq::decode_bind_dmabuf(in);
  if (dmabuf.is_ok()) {
    REMORA_FUZZ_CHECK(type.is_ok() && *type == rxq::kTypeBindDmabuf, "a bind-dmabuf request says its type");
    REMORA_FUZZ_CHECK(dmabuf->dmabuf_size != 0, "a bind-dmabuf request names a size");
    REMORA_FUZZ_CHECK(!request.is_ok(), "no message is both requests");
    const auto again = rxq::encode(*dmabuf);
    REMORA_FUZZ_CHECK(std::equal(again.begin(), again.end(), in.begin(), in.end()), "bind-dmabuf round trip");
  } else {
    REMORA_FUZZ_CHECK(dmabuf.status().code() == remora::StatusCode::kProtocol, "a bad request is kProtocol");
  }
  if (request.is_ok()) REMORA_FUZZ_CHECK(type.is_ok() && *type == rxq::kTypeBindFlow, "a flow request says its type");

  auto reserve = rxq::decode_reserve_queue(in);
  if (reserve.is_ok()) {
    REMORA_FUZZ_CHECK(type.is_ok() && *type == rxq::kTypeReserveQueue, "a reserve-queue request says its type");
    REMORA_FUZZ_CHECK(!request.is_ok() && !dmabuf.is_ok(), "no message is two requests");
    const auto again = rxq::encode(*reserve);
    REMORA_FUZZ_CHECK(std::equal(again.begin(), again.end(), in.begin(), in.end()), "reserve-queue round trip");
  } else {
    REMORA_FUZZ_CHECK(reserve.status().code() == remora::StatusCode::kProtocol, "a bad request is kProtocol");
    REMORA_FUZZ_CHECK(!reserve.status().message().empty(), "a refusal says why");
  }
  if (type.is_ok()) {
    REMORA_FUZZ_CHECK(*type == rxq::kTypeBindFlow || *type == rxq::kTypeBindDmabuf || *type == rxq::kTypeReserveQueue,
                      "a request of a known type");
  }

  auto reply = rxq::decode_reply(in);
  if (reply.is_ok()) {
    REMORA_FUZZ_CHECK(reply->error >= 0, "errnos are positive");
    REMORA_FUZZ_CHECK(reply->message.size() <= rxq::kMaxReplyMessage, "the message within its bound");
    REMORA_FUZZ_CHECK((reply->flags & ~rxq::kKnownFlags) == 0, "only known flags");
    REMORA_FUZZ_CHECK(reply->type == rxq::kTypeBindFlowReply || reply->type == rxq::kTypeBindDmabufReply ||
                          reply->type == rxq::kTypeReserveQueueReply,
                      "a reply of a known type");
    const bool zcrx = (reply->flags & rxq::kFlagClientZcrx) != 0;
    REMORA_FUZZ_CHECK(!zcrx || (reply->flags & rxq::kFlagClientDmabuf) == 0, "one kind of client queue");
    if (reply->error == 0) {
      REMORA_FUZZ_CHECK(zcrx == (reply->dmabuf_size == 0), "a size exactly when the buffer is not a zcrx queue's");
      if (reply->type == rxq::kTypeReserveQueueReply) REMORA_FUZZ_CHECK(zcrx, "a reserved queue is for zcrx");
    }
    const auto again = rxq::encode(*reply);
    REMORA_FUZZ_CHECK(std::equal(again.begin(), again.end(), in.begin(), in.end()), "reply round trip");
  } else {
    REMORA_FUZZ_CHECK(reply.status().code() == remora::StatusCode::kProtocol, "a bad reply is kProtocol");
    REMORA_FUZZ_CHECK(!reply.status().message().empty(), "a refusal says why");
  }
  return 0;
}
