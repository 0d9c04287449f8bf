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
inline constexpr size_t kRequestBytes = 48;
inline constexpr size_t kReplyHeaderBytes = 40;
inline constexpr size_t kMaxReplyMessage = 1024;
inline constexpr size_t kMaxReplyBytes = kReplyHeaderBytes + kMaxReplyMessage;
/// The reply's rule_location when no rule was installed.
inline constexpr uint32_t kNoRule = 0xffffffff;

/// Reply flags.
inline constexpr uint32_t kFlagStandin = 1u << 0;       ///< the fd is a memfd stand-in, not a dmabuf (test mode)
inline constexpr uint32_t kFlagRuleRefused = 1u << 1;   ///< stand-in mode: the kernel refused the rule (message says why)
inline constexpr uint32_t kKnownFlags = kFlagStandin | kFlagRuleRefused;

/// A client's request: steer `flow` to one of rxq's reserved queues and give me the dmabuf.
struct BindFlowRequest {
  TcpFlow flow;
};

/// rxq's answer.
struct BindFlowReply {
  int32_t error = 0;               ///< 0: done (an fd comes with it); else a positive errno
  uint32_t binding_id = 0;         ///< the devmem binding (bind-rx's id); 0 in stand-in mode
  uint32_t queue = 0;              ///< the RX queue the flow is steered to
  uint32_t rule_location = kNoRule;
  uint64_t dmabuf_size = 0;        ///< bytes of the buffer whose fd comes with the reply
  uint32_t flags = 0;              ///< kFlag*
  std::string message;             ///< why not (error), or a note; at most kMaxReplyMessage bytes
};

std::vector<std::byte> encode(const BindFlowRequest& r);
std::vector<std::byte> encode(const BindFlowReply& r);
/// Strict decoders: kProtocol naming the first thing wrong.
Result<BindFlowRequest> decode_request(std::span<const std::byte> bytes);
Result<BindFlowReply> decode_reply(std::span<const std::byte> bytes);

}  // namespace remora::zerocopy::rxq
