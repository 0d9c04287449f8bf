// zerocopy/genl.cc — see genl.h.
#include "zerocopy/genl.h"

#include <linux/genetlink.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/format.h>
#include <libmnl/libmnl.h>

namespace remora::zerocopy::nl {
namespace {

Status protocol(std::string message) { return {StatusCode::kProtocol, std::move(message)}; }

// Casts from the bytes of a buffer to the netlink structures in it. The buffers are
// aligned (as_message checks received ones; Message's come from operator new), so going
// through void* is sound and keeps -Wcast-align quiet.
template <typename T>
const T* view_as(const void* p) {
  return static_cast<const T*>(p);
}

[[noreturn]] void message_overflow(size_t need, size_t capacity) {
  std::fprintf(stderr, "remora: netlink Message overflow: %zu bytes needed, %zu allocated\n", need, capacity);
  std::abort();
}

/// Walks the attributes of one payload with libmnl, keeping those up to the table's
/// maximum; checks the TLVs cover the payload exactly (libmnl stops silently at a
/// malformed one).
struct WalkState {
  AttrTable* table = nullptr;
  std::vector<const nlattr*>* list = nullptr;
  uint16_t max_type = 0;
  size_t consumed = 0;
};

int walk_cb(const nlattr* attr, void* data) {
  auto* st = static_cast<WalkState*>(data);
  st->consumed += MNL_ALIGN(attr->nla_len);
  if (st->list != nullptr) {
    st->list->push_back(attr);
  } else if (mnl_attr_type_valid(attr, st->max_type) >= 0) {
    st->table->set(mnl_attr_get_type(attr), attr);
  }
  return MNL_CB_OK;
}

Status walk(const void* payload, size_t len, WalkState* st, std::string_view where) {
  if (mnl_attr_parse_payload(payload, len, walk_cb, st) < 0) {
    return protocol(fmt::format("malformed netlink attributes in {}", where));
  }
  if (st->consumed < len) {
    return protocol(fmt::format("malformed netlink attributes in {}: {} of {} bytes form whole attributes", where,
                                st->consumed, len));
  }
  return Status::ok();
}

Result<const nlattr*> need(const nlattr* a, size_t len, std::string_view what) {
  if (a == nullptr) return protocol(fmt::format("{}: attribute missing", what));
  if (mnl_attr_get_payload_len(a) != len) {
    return protocol(fmt::format("{}: attribute of {} bytes, expected {}", what, mnl_attr_get_payload_len(a), len));
  }
  return a;
}

/// The type of the attribute at `offset` in a request we sent (the kernel's extended ack
/// points at the one it objected to by offset).
std::optional<uint16_t> attr_type_at(std::span<const std::byte> request, std::optional<uint32_t> offset) {
  if (!offset || *offset < MNL_NLMSG_HDRLEN || size_t{*offset} + sizeof(nlattr) > request.size()) return std::nullopt;
  nlattr a;
  std::memcpy(&a, request.data() + *offset, sizeof a);
  return static_cast<uint16_t>(a.nla_type & NLA_TYPE_MASK);
}

/// What each errno means for the caller, as a code.
StatusCode code_for(int err) {
  switch (err) {
    case EPERM:
    case EACCES: return StatusCode::kAccessDenied;
    case EOPNOTSUPP:
    case ENOENT:
    case EPROTONOSUPPORT: return StatusCode::kUnsupported;
    case ENODEV:
    case EINVAL:
    case ERANGE:
    case EBADF: return StatusCode::kInvalidArgument;
    case EBUSY:
    case EEXIST:
    case ENOMEM:
    case ENOSPC:
    case ENOBUFS: return StatusCode::kNoResource;
    case ETIMEDOUT: return StatusCode::kTimeout;
    default: return StatusCode::kInternal;
  }
}

}  // namespace

// ---- Message ----

Message::Message(uint16_t family, uint8_t cmd, uint8_t version, uint16_t flags, uint32_t seq, size_t capacity)
    : buf_(std::max(capacity, MNL_NLMSG_HDRLEN + GENL_HDRLEN)) {
  header_ = mnl_nlmsg_put_header(buf_.data());
  header_->nlmsg_type = family;
  header_->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  header_->nlmsg_seq = seq;
  auto* genl = static_cast<genlmsghdr*>(mnl_nlmsg_put_extra_header(header_, sizeof(genlmsghdr)));
  genl->cmd = cmd;
  genl->version = version;
}

void Message::check_room(size_t payload) const {
  const size_t need = header_->nlmsg_len + MNL_ATTR_HDRLEN + MNL_ALIGN(payload);
  if (need > buf_.size()) message_overflow(need, buf_.size());
}

void Message::put_u8(uint16_t type, uint8_t value) {
  check_room(sizeof value);
  mnl_attr_put_u8(header_, type, value);
}

void Message::put_u32(uint16_t type, uint32_t value) {
  check_room(sizeof value);
  mnl_attr_put_u32(header_, type, value);
}

void Message::put_strz(uint16_t type, std::string_view value) {
  const std::string copy(value);
  check_room(copy.size() + 1);
  mnl_attr_put_strz(header_, type, copy.c_str());
}

nlattr* Message::begin_nest(uint16_t type) {
  check_room(0);
  return mnl_attr_nest_start(header_, type);
}

void Message::end_nest(nlattr* nest) { mnl_attr_nest_end(header_, nest); }

// ---- Parsing ----

Result<const nlmsghdr*> as_message(std::span<const std::byte> bytes) {
  if (bytes.size() < sizeof(nlmsghdr)) {
    return protocol(fmt::format("netlink message of {} bytes, shorter than its header", bytes.size()));
  }
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(nlmsghdr) != 0) {
    return Status(StatusCode::kInternal, "netlink message not aligned in memory");
  }
  const auto* msg = view_as<nlmsghdr>(bytes.data());
  if (msg->nlmsg_len < sizeof(nlmsghdr) || msg->nlmsg_len > bytes.size()) {
    return protocol(
        fmt::format("netlink message length {} outside the {} bytes received", msg->nlmsg_len, bytes.size()));
  }
  return msg;
}

Result<AttrTable> parse_genl_attrs(const nlmsghdr* msg, uint16_t max_type) {
  if (mnl_nlmsg_get_payload_len(msg) < GENL_HDRLEN) {
    return protocol(fmt::format("generic netlink message of {} payload bytes, shorter than its header",
                                mnl_nlmsg_get_payload_len(msg)));
  }
  AttrTable table(max_type);
  WalkState st{.table = &table, .max_type = max_type};
  REMORA_RETURN_IF_ERROR(walk(mnl_nlmsg_get_payload_offset(msg, GENL_HDRLEN),
                              mnl_nlmsg_get_payload_len(msg) - GENL_HDRLEN, &st, "a generic netlink message"));
  return table;
}

Result<AttrTable> parse_nested(const nlattr* nest, uint16_t max_type) {
  AttrTable table(max_type);
  WalkState st{.table = &table, .max_type = max_type};
  REMORA_RETURN_IF_ERROR(walk(mnl_attr_get_payload(nest), mnl_attr_get_payload_len(nest), &st, "a nested attribute"));
  return table;
}

Result<std::vector<const nlattr*>> nested_list(const nlattr* nest) {
  std::vector<const nlattr*> list;
  WalkState st{.list = &list};
  REMORA_RETURN_IF_ERROR(walk(mnl_attr_get_payload(nest), mnl_attr_get_payload_len(nest), &st, "a nested attribute"));
  return list;
}

namespace {
template <typename T>
Result<T> get_uint(const nlattr* a, std::string_view what) {
  REMORA_ASSIGN_OR_RETURN(a, need(a, sizeof(T), what));
  T v;
  std::memcpy(&v, mnl_attr_get_payload(a), sizeof v);
  return v;
}
}  // namespace

Result<uint8_t> get_u8(const nlattr* a, std::string_view what) { return get_uint<uint8_t>(a, what); }
Result<uint16_t> get_u16(const nlattr* a, std::string_view what) { return get_uint<uint16_t>(a, what); }
Result<uint32_t> get_u32(const nlattr* a, std::string_view what) { return get_uint<uint32_t>(a, what); }
Result<uint64_t> get_u64(const nlattr* a, std::string_view what) { return get_uint<uint64_t>(a, what); }

Result<std::string> get_string(const nlattr* a, std::string_view what) {
  if (a == nullptr) return protocol(fmt::format("{}: attribute missing", what));
  if (mnl_attr_validate(a, MNL_TYPE_NUL_STRING) < 0) {
    return protocol(fmt::format("{}: not a NUL-terminated string", what));
  }
  return std::string(mnl_attr_get_str(a));
}

Result<std::optional<uint32_t>> get_optional_u32(const AttrTable& t, uint16_t type, std::string_view what) {
  if (t[type] == nullptr) return std::optional<uint32_t>();
  REMORA_ASSIGN_OR_RETURN(const uint32_t v, get_u32(t[type], what));
  return std::optional<uint32_t>(v);
}

Status get_optional_u32s(const AttrTable& t, std::initializer_list<OptionalU32> fields) {
  for (const OptionalU32& f : fields) {
    REMORA_ASSIGN_OR_RETURN(*f.out, get_optional_u32(t, f.type, f.what));
  }
  return Status::ok();
}

Result<AttrTable> reply_attrs(std::span<const std::byte> reply, uint8_t cmd, uint16_t max_type, std::string_view what) {
  REMORA_ASSIGN_OR_RETURN(const nlmsghdr* msg, as_message(reply));
  if (mnl_nlmsg_get_payload_len(msg) >= sizeof(genlmsghdr)) {
    const auto* genl = static_cast<const genlmsghdr*>(mnl_nlmsg_get_payload(msg));
    if (genl->cmd != cmd) return protocol(fmt::format("{}: reply command {}, expected {}", what, genl->cmd, cmd));
  }
  return parse_genl_attrs(msg, max_type);
}

Result<KernelError> parse_error(const nlmsghdr* msg) {
  const size_t payload = mnl_nlmsg_get_payload_len(msg);
  size_t tlv_offset = 0;
  int error = 0;
  if (msg->nlmsg_type == NLMSG_ERROR) {
    if (payload < sizeof(nlmsgerr)) {
      return protocol(fmt::format("NLMSG_ERROR of {} payload bytes, shorter than struct nlmsgerr", payload));
    }
    const auto* e = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(msg));
    error = e->error;
    // The original request follows, whole unless the kernel capped it to its header.
    tlv_offset = (msg->nlmsg_flags & NLM_F_CAPPED) != 0 ? sizeof(nlmsgerr) : sizeof(int) + MNL_ALIGN(e->msg.nlmsg_len);
  } else if (msg->nlmsg_type == NLMSG_DONE) {
    if (payload >= sizeof(int)) std::memcpy(&error, mnl_nlmsg_get_payload(msg), sizeof error);
    tlv_offset = sizeof(int);
  } else {
    return protocol(fmt::format("netlink message type {} is neither NLMSG_ERROR nor NLMSG_DONE", msg->nlmsg_type));
  }
  if (error > 0) return protocol(fmt::format("netlink error code {} is positive", error));
  KernelError out;
  out.err = -error;
  if ((msg->nlmsg_flags & NLM_F_ACK_TLVS) == 0 || tlv_offset >= payload) return out;
  AttrTable table(NLMSGERR_ATTR_MAX);
  WalkState st{.table = &table, .max_type = NLMSGERR_ATTR_MAX};
  REMORA_RETURN_IF_ERROR(
      walk(mnl_nlmsg_get_payload_offset(msg, tlv_offset), payload - tlv_offset, &st, "the extended ack"));
  if (table[NLMSGERR_ATTR_MSG] != nullptr) {
    REMORA_ASSIGN_OR_RETURN(out.message, get_string(table[NLMSGERR_ATTR_MSG], "extended ack message"));
  }
  REMORA_ASSIGN_OR_RETURN(out.bad_attr_offset, get_optional_u32(table, NLMSGERR_ATTR_OFFS, "extended ack offset"));
  REMORA_ASSIGN_OR_RETURN(out.missing_attr, get_optional_u32(table, NLMSGERR_ATTR_MISS_TYPE, "extended ack type"));
  return out;
}

bool FamilyInfo::has_op(uint32_t cmd) const { return std::find(ops.begin(), ops.end(), cmd) != ops.end(); }

Message build_get_family(uint32_t seq, std::string_view name) {
  Message m(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1, NLM_F_ACK, seq);
  m.put_strz(CTRL_ATTR_FAMILY_NAME, name);
  return m;
}

Result<FamilyInfo> parse_family(std::span<const std::byte> reply) {
  REMORA_ASSIGN_OR_RETURN(const nlmsghdr* msg, as_message(reply));
  if (msg->nlmsg_type != GENL_ID_CTRL) {
    return protocol(
        fmt::format("family reply of type {}, expected the controller ({})", msg->nlmsg_type, GENL_ID_CTRL));
  }
  REMORA_ASSIGN_OR_RETURN(const AttrTable t, parse_genl_attrs(msg, CTRL_ATTR_MAX));
  FamilyInfo info;
  REMORA_ASSIGN_OR_RETURN(info.id, get_u16(t[CTRL_ATTR_FAMILY_ID], "family id"));
  if (t[CTRL_ATTR_VERSION] != nullptr) {
    REMORA_ASSIGN_OR_RETURN(info.version, get_u32(t[CTRL_ATTR_VERSION], "family version"));
  }
  if (t[CTRL_ATTR_OPS] != nullptr) {
    REMORA_ASSIGN_OR_RETURN(const auto ops, nested_list(t[CTRL_ATTR_OPS]));
    for (const nlattr* op : ops) {
      REMORA_ASSIGN_OR_RETURN(const AttrTable ot, parse_nested(op, CTRL_ATTR_OP_MAX));
      REMORA_ASSIGN_OR_RETURN(const uint32_t id, get_u32(ot[CTRL_ATTR_OP_ID], "family operation id"));
      info.ops.push_back(id);
    }
  }
  return info;
}

Status refusal_status(std::string_view what, const KernelError& refusal, std::string_view hint) {
  std::string message = fmt::format("{}: the kernel refused: {}", what, refusal.to_string());
  if (!hint.empty()) message += fmt::format(" — {}", hint);
  return {code_for(refusal.err), std::move(message)};
}

// ---- Socket ----

Result<Socket> Socket::open(int reply_timeout_ms) {
  mnl_socket* s = mnl_socket_open2(NETLINK_GENERIC, SOCK_CLOEXEC);
  if (s == nullptr) {
    return Status(code_for(errno), "socket(AF_NETLINK, NETLINK_GENERIC): " + errno_text(errno));
  }
  Socket sock(s);
  if (mnl_socket_bind(s, 0, MNL_SOCKET_AUTOPID) < 0) {
    return Status(code_for(errno), "bind(AF_NETLINK): " + errno_text(errno));
  }
  int one = 1;
  // Extended acks carry the kernel's reason; capped acks leave our request out of them.
  // Kernels before 4.12 lack both and answer with bare errnos.
  (void)mnl_socket_setsockopt(s, NETLINK_EXT_ACK, &one, sizeof one);
  (void)mnl_socket_setsockopt(s, NETLINK_CAP_ACK, &one, sizeof one);
  const timeval tv{.tv_sec = reply_timeout_ms / 1000, .tv_usec = (reply_timeout_ms % 1000) * 1000};
  if (::setsockopt(mnl_socket_get_fd(s), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
    return Status(code_for(errno), "SO_RCVTIMEO on a netlink socket: " + errno_text(errno));
  }
  sock.rx_.resize(64 * 1024);
  return sock;
}

Socket::Socket(Socket&& o) noexcept : socket_(std::exchange(o.socket_, nullptr)), seq_(o.seq_), rx_(std::move(o.rx_)) {}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    if (socket_ != nullptr) mnl_socket_close(socket_);
    socket_ = std::exchange(o.socket_, nullptr);
    seq_ = o.seq_;
    rx_ = std::move(o.rx_);
  }
  return *this;
}

Socket::~Socket() {
  if (socket_ != nullptr) mnl_socket_close(socket_);
}

uint32_t Socket::port_id() const { return mnl_socket_get_portid(socket_); }

Status Socket::transact(const Message& request, const std::function<Status(std::span<const std::byte>)>& on_reply,
                        std::string_view what, KernelError* refusal, std::string_view hint) {
  const auto bytes = request.bytes();
  if (mnl_socket_sendto(socket_, bytes.data(), bytes.size()) < 0) {
    return Status(code_for(errno), fmt::format("{}: sending the request: {}", what, errno_text(errno)));
  }
  const uint32_t seq = request.seq();
  const uint32_t port = port_id();
  Status reply_error;
  for (;;) {
    const ssize_t n = mnl_socket_recvfrom(socket_, rx_.data(), rx_.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return Status(StatusCode::kTimeout, fmt::format("{}: no answer from the kernel in time", what));
      }
      return Status(code_for(errno), fmt::format("{}: reading the answer: {}", what, errno_text(errno)));
    }
    int left = static_cast<int>(n);
    for (const auto* msg = view_as<nlmsghdr>(rx_.data()); mnl_nlmsg_ok(msg, left); msg = mnl_nlmsg_next(msg, &left)) {
      if (!mnl_nlmsg_portid_ok(msg, port) || !mnl_nlmsg_seq_ok(msg, seq)) continue;  // someone else's
      if (msg->nlmsg_type == NLMSG_NOOP) continue;
      if (msg->nlmsg_type == NLMSG_OVERRUN) return protocol(fmt::format("{}: netlink overrun", what));
      if (msg->nlmsg_type == NLMSG_ERROR || msg->nlmsg_type == NLMSG_DONE) {
        REMORA_ASSIGN_OR_RETURN(KernelError e, parse_error(msg));
        if (e.err != 0) {
          e.bad_attr_type = attr_type_at(bytes, e.bad_attr_offset);
          if (refusal != nullptr) *refusal = e;
          return refusal_status(what, e, hint);
        }
        return reply_error;  // the final word: an ACK, or the dump's end
      }
      if ((msg->nlmsg_flags & NLM_F_DUMP_INTR) != 0 && reply_error.is_ok()) {
        reply_error = Status(StatusCode::kNoResource,
                             fmt::format("{}: the dump changed while it was read (NLM_F_DUMP_INTR); try again", what));
      }
      const auto* start = static_cast<const std::byte*>(static_cast<const void*>(msg));
      Status s = on_reply(std::span<const std::byte>(start, msg->nlmsg_len));
      if (!s && reply_error.is_ok()) reply_error = s.with_context(what);
    }
  }
}

Result<FamilyInfo> Socket::resolve(std::string_view family) {
  const Message request = build_get_family(next_seq(), family);
  std::optional<FamilyInfo> info;
  KernelError refusal;
  Status s = transact(
      request,
      [&](std::span<const std::byte> reply) -> Status {
        REMORA_ASSIGN_OR_RETURN(info, parse_family(reply));
        return Status::ok();
      },
      fmt::format("resolving the generic netlink family '{}'", family), &refusal);
  if (refusal.err == ENOENT) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("this kernel has no generic netlink family '{}' (ENOENT from the controller)", family));
  }
  if (!s) return s;
  if (!info) return protocol(fmt::format("resolving '{}': the controller acknowledged without a reply", family));
  return *info;
}

}  // namespace remora::zerocopy::nl
