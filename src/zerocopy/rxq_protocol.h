// zerocopy/rxq_protocol.h — the Unix-socket protocol between `remora rxq serve` (the
// receive data-path manager) and an application that wants its devmem flows steered:
// the message layouts, encoded and decoded byte by byte (little-endian, no struct
// copies), and decoded strictly: a message of the wrong size, magic, type, a nonzero
// reserved byte or a field out of range is refused with the reason. The one description
// of the format is docs/device-memory.md ("rxq protocol"); kRxq*Bytes pin its sizes.
//
// One message per SOCK_SEQPACKET packet. The client sends a BindFlowRequest; rxq answers
// with a BindFlowReply and, when it succeeded, the dmabuf's file descriptor in an
// SCM_RIGHTS control message of the same packet. A client keeps its connection open for
// as long as it wants its flows steered: when it closes (or dies), rxq removes its rules.
//
// A client may first hand rxq a dmabuf of its own (TCPX's model: the NIC writes into the
// application's device memory): a BindDmabufRequest with the descriptor in SCM_RIGHTS.
// rxq binds it to a queue of its own reserved for such clients (`--client-queues`) and
// answers with a BindFlowReply of type kTypeBindDmabufReply (no descriptor); the
// client's flows then go to that queue, and their replies carry kFlagClientDmabuf and no
// descriptor. The binding, and the queue, go when the connection does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "remora/status.h"
#include "zerocopy/flow_steering.h"

namespace remora::zerocopy::rxq {

/// "RXQ1" as the first four bytes of every message.
inline constexpr uint32_t kMagic = 0x31515852;
inline constexpr uint16_t kTypeBindFlow = 1;
inline constexpr uint16_t kTypeBindFlowReply = 0x8001;
inline constexpr uint16_t kTypeBindDmabuf = 2;
inline constexpr uint16_t kTypeBindDmabufReply = 0x8002;
inline constexpr size_t kRequestBytes = 48;
inline constexpr size_t kReplyHeaderBytes = 40;
inline constexpr size_t kMaxReplyMessage = 1024;
inline constexpr size_t kMaxReplyBytes = kReplyHeaderBytes + kMaxReplyMessage;
/// The reply's rule_location when no rule was installed.
inline constexpr uint32_t kNoRule = 0xffffffff;

/// Reply flags.
inline constexpr uint32_t kFlagStandin = 1u << 0;       ///< the fd is a memfd stand-in, not a dmabuf (test mode)
inline constexpr uint32_t kFlagRuleRefused = 1u << 1;   ///< stand-in mode: the kernel refused the rule (message says why)
inline constexpr uint32_t kFlagClientDmabuf = 1u << 2;  ///< the flow lands in the client's own dmabuf: no fd comes
inline constexpr uint32_t kKnownFlags = kFlagStandin | kFlagRuleRefused | kFlagClientDmabuf;

/// A client's request: steer `flow` to one of rxq's reserved queues and give me the dmabuf.
struct BindFlowRequest {
  TcpFlow flow;
};

/// A client's request: bind my dmabuf (its descriptor comes with the request) to a queue
/// of my own, and steer my flows there from now on.
struct BindDmabufRequest {
  uint64_t dmabuf_size = 0;  ///< the descriptor's bytes (rxq checks them against it)
};

/// rxq's answer (to either request; `type` says which).
struct BindFlowReply {
  uint16_t type = kTypeBindFlowReply;  ///< kTypeBindFlowReply or kTypeBindDmabufReply
  int32_t error = 0;               ///< 0: done (an fd comes with it); else a positive errno
  uint32_t binding_id = 0;         ///< the devmem binding (bind-rx's id); 0 in stand-in mode
  uint32_t queue = 0;              ///< the RX queue the flow is steered to
  uint32_t rule_location = kNoRule;
  uint64_t dmabuf_size = 0;        ///< bytes of the buffer whose fd comes with the reply
  uint32_t flags = 0;              ///< kFlag*
  std::string message;             ///< why not (error), or a note; at most kMaxReplyMessage bytes
};

std::vector<std::byte> encode(const BindFlowRequest& r);
std::vector<std::byte> encode(const BindDmabufRequest& r);
std::vector<std::byte> encode(const BindFlowReply& r);
/// A request's type (kTypeBindFlow or kTypeBindDmabuf), after checking its size and
/// magic; kProtocol otherwise, or for another type.
Result<uint16_t> request_type(std::span<const std::byte> bytes);
/// Strict decoders: kProtocol naming the first thing wrong.
Result<BindFlowRequest> decode_request(std::span<const std::byte> bytes);
Result<BindDmabufRequest> decode_bind_dmabuf(std::span<const std::byte> bytes);
/// Either reply type (BindFlowReply::type says which).
Result<BindFlowReply> decode_reply(std::span<const std::byte> bytes);

}  // namespace remora::zerocopy::rxq
