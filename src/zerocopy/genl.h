// zerocopy/genl.h — generic netlink with libmnl, shared by the netdev and ethtool
// families: a message under construction (Message), pure parsing of received bytes
// (attribute tables, NLMSG_ERROR / NLMSG_DONE with their extended ack, the controller's
// family reply) and the one place that talks to the kernel (Socket::transact). Builders
// and parsers take and give bytes, so tests check them without a socket.
#pragma once

#include <linux/netlink.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "remora/status.h"
#include "zerocopy/kernel_error.h"

struct mnl_socket;

namespace remora::zerocopy::nl {

/// A netlink message being built: nlmsghdr, genlmsghdr, then attributes appended with
/// libmnl (put_* below). The buffer is fixed at construction; appending past it is a
/// programming error caught by the put_* helpers (they abort with a message).
class Message {
 public:
  /// A generic netlink request for `family` (its id), command `cmd`, `version`, with
  /// nlmsg_flags `flags` (NLM_F_REQUEST is added) and sequence number `seq`.
  Message(uint16_t family, uint8_t cmd, uint8_t version, uint16_t flags, uint32_t seq, size_t capacity = 512);

  nlmsghdr* header() { return header_; }
  uint32_t seq() const { return header_->nlmsg_seq; }
  /// The message as it stands (nlmsg_len bytes).
  std::span<const std::byte> bytes() const { return {buf_.data(), header_->nlmsg_len}; }

  void put_u8(uint16_t type, uint8_t value);
  void put_u32(uint16_t type, uint32_t value);
  void put_strz(uint16_t type, std::string_view value);
  /// Opens a nested attribute (NLA_F_NESTED set); close it with end_nest.
  nlattr* begin_nest(uint16_t type);
  void end_nest(nlattr* nest);

 private:
  void check_room(size_t payload) const;
  std::vector<std::byte> buf_;  // operator new's alignment: enough for nlmsghdr
  nlmsghdr* header_;
};

/// A received message, checked: at least a header, nlmsg_len within the bytes, and
/// aligned for nlmsghdr. kProtocol otherwise.
Result<const nlmsghdr*> as_message(std::span<const std::byte> bytes);

/// Attributes of one level, indexed by type (nullptr where absent). Holds pointers into
/// the message it was parsed from.
class AttrTable {
 public:
  explicit AttrTable(uint16_t max_type) : attrs_(static_cast<size_t>(max_type) + 1, nullptr) {}
  const nlattr* operator[](uint16_t type) const { return type < attrs_.size() ? attrs_[type] : nullptr; }
  void set(uint16_t type, const nlattr* a) {
    if (type < attrs_.size()) attrs_[type] = a;
  }

 private:
  std::vector<const nlattr*> attrs_;
};

/// The attributes of a generic netlink message (after its genlmsghdr). Types above
/// `max_type` are skipped (newer kernels add attributes). kProtocol on malformed TLVs.
Result<AttrTable> parse_genl_attrs(const nlmsghdr* msg, uint16_t max_type);
/// The attributes inside a nest.
Result<AttrTable> parse_nested(const nlattr* nest, uint16_t max_type);
/// Every attribute inside a nest, in order (for multi-attrs, whose types repeat).
Result<std::vector<const nlattr*>> nested_list(const nlattr* nest);

/// Typed reads that check the payload length (kProtocol naming `what` if it is wrong).
Result<uint8_t> get_u8(const nlattr* a, std::string_view what);
Result<uint16_t> get_u16(const nlattr* a, std::string_view what);
Result<uint32_t> get_u32(const nlattr* a, std::string_view what);
Result<uint64_t> get_u64(const nlattr* a, std::string_view what);
/// A NUL-terminated string attribute.
Result<std::string> get_string(const nlattr* a, std::string_view what);
/// u32 if present, nullopt if absent; an error if present and malformed.
Result<std::optional<uint32_t>> get_optional_u32(const AttrTable& t, uint16_t type, std::string_view what);
/// One optional u32 attribute and where it goes, for get_optional_u32s.
struct OptionalU32 {
  uint16_t type;
  std::optional<uint32_t>* out;
  std::string_view what;
};
/// get_optional_u32 of each field in turn; the first malformed one is the error.
Status get_optional_u32s(const AttrTable& t, std::initializer_list<OptionalU32> fields);

/// The attributes of a family's reply: checks it is a message whose generic netlink
/// command is `cmd` (kProtocol naming `what` otherwise), then parse_genl_attrs.
Result<AttrTable> reply_attrs(std::span<const std::byte> reply, uint8_t cmd, uint16_t max_type, std::string_view what);

/// The kernel's answer to a request, when it is NLMSG_ERROR (error 0 is the ACK) or
/// NLMSG_DONE (a dump's end, which carries an error of its own): the errno (positive)
/// and the extended ack (message, offending attribute, missing attribute).
Result<KernelError> parse_error(const nlmsghdr* msg);

/// What the controller says about a family (CTRL_CMD_GETFAMILY).
struct FamilyInfo {
  uint16_t id = 0;
  uint32_t version = 0;
  std::vector<uint32_t> ops;  ///< command numbers this kernel implements
  bool has_op(uint32_t cmd) const;
};

/// CTRL_CMD_GETFAMILY for `name`, to GENL_ID_CTRL, with NLM_F_ACK.
Message build_get_family(uint32_t seq, std::string_view name);
/// The controller's reply (CTRL_CMD_NEWFAMILY) to build_get_family.
Result<FamilyInfo> parse_family(std::span<const std::byte> reply);

/// A Status for a kernel refusal: the code from the errno (EPERM/EACCES kAccessDenied,
/// EOPNOTSUPP/ENOTSUP/ENOENT kUnsupported, ENODEV/EINVAL/ERANGE/EBADF kInvalidArgument,
/// EBUSY/EEXIST/ENOMEM/ENOSPC kNoResource, else kInternal) and the message
/// "<what>: <errno name> (<text>): <extack message> — <hint>" (hint omitted when empty).
Status refusal_status(std::string_view what, const KernelError& refusal, std::string_view hint = {});

/// A bound NETLINK_GENERIC socket (libmnl), with extended acks on and the original
/// request left out of error replies (NETLINK_CAP_ACK). Move-only; closing it ends every
/// binding made through it. One request at a time: not thread-safe.
class Socket {
 public:
  /// Opens and binds the socket. Replies are awaited at most `reply_timeout`.
  static Result<Socket> open(int reply_timeout_ms = 5000);
  Socket(Socket&& o) noexcept;
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();

  uint32_t next_seq() { return ++seq_; }
  uint32_t port_id() const;

  /// Sends `request` and reads until the kernel's final word on it: the ACK (or error)
  /// of an NLM_F_ACK request, or NLMSG_DONE of a dump. Every other message for this
  /// request is handed to `on_reply` (its error stops the exchange, after draining).
  /// A refusal by the kernel fills `*refusal` (when given) and is returned as
  /// refusal_status(what, ..., hint). kTimeout when no answer comes in time.
  Status transact(const Message& request, const std::function<Status(std::span<const std::byte>)>& on_reply,
                  std::string_view what, KernelError* refusal = nullptr, std::string_view hint = {});

  /// Resolves a family by name: kUnsupported naming it when this kernel has none.
  Result<FamilyInfo> resolve(std::string_view family);

 private:
  explicit Socket(mnl_socket* s) : socket_(s) {}
  mnl_socket* socket_ = nullptr;
  uint32_t seq_ = 0;
  std::vector<std::byte> rx_;
};

}  // namespace remora::zerocopy::nl
