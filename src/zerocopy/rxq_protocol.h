// zerocopy/rxq_protocol.h — the Unix-socket protocol between `remora rxq serve` (the
// receive data-path manager) and an application that wants its devmem flows steered:
// the message layouts, encoded and decoded byte by byte (little-endian, no struct
// copies), and decoded strictly: a message of the wrong size, magic, type, a nonzero
// reserved byte or a field out of range is refused with the reason. The one description
// of the format is docs/protocol.md ("`remora rxq`'s Unix-socket protocol"); kRxq*Bytes pin its sizes.
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
//
// Or a client may ask for a queue of its own for its io_uring zero-copy receive (zcrx):
// a ReserveQueueRequest. The application registers that queue with its own ring
// (IORING_REGISTER_ZCRX_IFQ, with the interface's index and the queue id); rxq binds
// nothing, it only takes a client queue for it and answers with a BindFlowReply of type
// kTypeReserveQueueReply whose binding_id holds the interface's index (ifindex_of). The
// client's flows then go to that queue, and their replies carry kFlagClientZcrx and no
// descriptor. The queue goes back to rxq when the connection does.
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
inline constexpr uint16_t kTypeReserveQueue = 3;
inline constexpr uint16_t kTypeReserveQueueReply = 0x8003;
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
/// The flow lands in a queue the client registered for io_uring zcrx: no fd comes.
inline constexpr uint32_t kFlagClientZcrx = 1u << 3;
inline constexpr uint32_t kKnownFlags = kFlagStandin | kFlagRuleRefused | kFlagClientDmabuf | kFlagClientZcrx;

/// A client's request: steer `flow` to one of rxq's reserved queues and give me the dmabuf.
struct BindFlowRequest {
  TcpFlow flow;
};

/// A client's request: bind my dmabuf (its descriptor comes with the request) to a queue
/// of my own, and steer my flows there from now on.
struct BindDmabufRequest {
  uint64_t dmabuf_size = 0;  ///< the descriptor's bytes (rxq checks them against it)
};

/// A client's request: reserve a queue of my own for my io_uring zcrx (I register it with
/// my ring myself), and steer my flows there from now on. It carries nothing.
struct ReserveQueueRequest {};

/// rxq's answer (to any request; `type` says which).
struct BindFlowReply {
  uint16_t type = kTypeBindFlowReply;  ///< kTypeBindFlowReply, kTypeBindDmabufReply or kTypeReserveQueueReply
  int32_t error = 0;               ///< 0: done (an fd comes with it); else a positive errno
  /// The devmem binding (bind-rx's id; 0 in stand-in mode). With kFlagClientZcrx (every
  /// kTypeReserveQueueReply success) it holds the interface's index instead, the one the
  /// client registers zcrx on: read it with ifindex_of.
  uint32_t binding_id = 0;
  uint32_t queue = 0;              ///< the RX queue the flow is steered to
  uint32_t rule_location = kNoRule;
  uint64_t dmabuf_size = 0;        ///< bytes of the buffer whose fd comes with the reply; 0 with kFlagClientZcrx
  uint32_t flags = 0;              ///< kFlag*
  std::string message;             ///< why not (error), or a note; at most kMaxReplyMessage bytes
};

/// The interface index a zcrx client registers its queue on: a reply with kFlagClientZcrx
/// carries it in binding_id (there is no binding).
inline uint32_t ifindex_of(const BindFlowReply& r) { return r.binding_id; }

std::vector<std::byte> encode(const BindFlowRequest& r);
std::vector<std::byte> encode(const BindDmabufRequest& r);
std::vector<std::byte> encode(const ReserveQueueRequest& r);
std::vector<std::byte> encode(const BindFlowReply& r);
/// A request's type (kTypeBindFlow, kTypeBindDmabuf or kTypeReserveQueue), after checking
/// its size and magic; kProtocol otherwise, or for another type.
Result<uint16_t> request_type(std::span<const std::byte> bytes);
/// Strict decoders: kProtocol naming the first thing wrong.
Result<BindFlowRequest> decode_request(std::span<const std::byte> bytes);
Result<BindDmabufRequest> decode_bind_dmabuf(std::span<const std::byte> bytes);
Result<ReserveQueueRequest> decode_reserve_queue(std::span<const std::byte> bytes);
/// Any reply type (BindFlowReply::type says which).
Result<BindFlowReply> decode_reply(std::span<const std::byte> bytes);

}  // namespace remora::zerocopy::rxq
