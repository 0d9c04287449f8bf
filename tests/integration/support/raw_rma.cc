#include "support/raw_rma.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace remora::itest::raw {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint8_t> as_u8(std::span<const std::byte> bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  return {p, p + bytes.size()};
}

/// Bounds a blocking send so a target that stops reading fails the test instead of
/// hanging it.
void set_send_timeout(int fd, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

}  // namespace

void set_key_field(KeyBytes& key, size_t at, size_t size, uint64_t value) {
  for (size_t i = 0; i < size; ++i) key[at + i] = static_cast<std::byte>((value >> (8 * i)) & 0xFF);
}

uint64_t key_field_value(const KeyBytes& key, size_t at, size_t size) {
  uint64_t v = 0;
  for (size_t i = 0; i < size; ++i) v |= static_cast<uint64_t>(key[at + i]) << (8 * i);
  return v;
}

std::optional<KeyBytes> key_from_hex(std::string_view hex) {
  if (hex.size() != 2 * wire::kKeySize) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  KeyBytes key{};
  for (size_t i = 0; i < key.size(); ++i) {
    const int hi = nibble(hex[2 * i]);
    const int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    key[i] = static_cast<std::byte>(hi * 16 + lo);
  }
  return key;
}

std::string key_to_hex(const KeyBytes& key) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (std::byte b : key) {
    out.push_back(kDigits[static_cast<uint8_t>(b) >> 4]);
    out.push_back(kDigits[static_cast<uint8_t>(b) & 0xF]);
  }
  return out;
}

std::string_view to_string(wire::RmaStatus status) {
  switch (status) {
    case wire::RmaStatus::kOk: return "ok";
    case wire::RmaStatus::kInvalidKey: return "invalid_key";
    case wire::RmaStatus::kOutOfRange: return "out_of_range";
    case wire::RmaStatus::kAccessDenied: return "access_denied";
    case wire::RmaStatus::kMisaligned: return "misaligned";
    case wire::RmaStatus::kNoResource: return "no_resource";
    case wire::RmaStatus::kRevoked: return "revoked";
    case wire::RmaStatus::kDeviceFailed: return "device_failed";
    case wire::RmaStatus::kChecksum: return "checksum";
  }
  return "unknown";
}

std::vector<uint8_t> encode_frame(const wire::Frame& frame) {
  std::vector<std::byte> out(wire::encoded_size(frame));
  const size_t n = wire::encode(frame, out);
  out.resize(n);
  return as_u8(out);
}

std::vector<uint8_t> put_frame(uint64_t op_id, const KeyBytes& key, uint64_t offset, uint64_t length,
                               std::optional<uint64_t> notify, bool inline_data, std::span<const std::byte> payload) {
  return encode_frame(wire::PutFrame{.op_id = op_id,
                                     .key = key,
                                     .offset = offset,
                                     .length = length,
                                     .has_notify = notify.has_value(),
                                     .notify = notify.value_or(0),
                                     .inline_data = inline_data,
                                     .payload = payload});
}

std::vector<uint8_t> get_frame(uint64_t op_id, const KeyBytes& key, uint64_t offset, uint64_t length) {
  return encode_frame(wire::GetFrame{.op_id = op_id, .key = key, .offset = offset, .length = length});
}

std::vector<uint8_t> atomic_frame(uint64_t op_id, const KeyBytes& key, uint64_t offset, wire::AtomicOp op,
                                  uint64_t operand, uint64_t compare) {
  return encode_frame(
      wire::AtomicFrame{.op_id = op_id, .key = key, .offset = offset, .op = op, .operand = operand, .compare = compare});
}

std::vector<uint8_t> chunk_frame(uint64_t recv_id, uint64_t offset, uint32_t length, uint16_t stream,
                                 wire::ChunkKind kind) {
  return encode_frame(
      wire::ChunkFrame{.recv_id = recv_id, .offset = offset, .length = length, .stream = stream, .kind = kind});
}

std::vector<uint8_t> resp_frame(uint64_t op_id, wire::RmaStatus status, uint64_t value) {
  return encode_frame(
      wire::RespFrame{.op_id = op_id, .status = status, .value = value, .inline_data = false, .payload = {}});
}

Flow send_bounded(int fd, std::span<const uint8_t> data, std::chrono::milliseconds stall, size_t* sent) {
  size_t off = 0;
  Flow flow = Flow::kSent;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      const int r = poll(&p, 1, static_cast<int>(stall.count()));
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) {
        flow = Flow::kStalled;
        break;
      }
      if ((p.revents & (POLLERR | POLLHUP)) != 0 && (p.revents & POLLOUT) == 0) {
        flow = Flow::kClosed;
        break;
      }
      continue;
    }
    flow = Flow::kClosed;
    break;
  }
  if (sent != nullptr) *sent = off;
  return flow;
}

std::string RmaClient::connect(uint16_t port, const Options& options) {
  options_ = options;
  std::string err;
  control_ = Socket::connect_to("127.0.0.1", port, &err);
  if (!control_.valid()) return "control connection: " + err;
  set_send_timeout(control_.fd(), options.io_timeout);
  Hello h;
  h.stream_count = options.streams;
  h.eager_limit = options.eager_limit;
  h.eager_credit = options.eager_credit;
  h.rma_window = options.rma_window;
  h.capabilities = options.capabilities;
  if (!control_.send_all(encode(h), &err)) return "control HELLO: " + err;
  auto ack_bytes = control_.recv_exact(kHelloSize, options.io_timeout, &err);
  if (!ack_bytes) return "control HELLO_ACK: " + err;
  const HelloAck ack = decode_ack(*ack_bytes);
  if (ack.status != 0) return "control HELLO_ACK status " + std::to_string(ack.status);
  target_window_ = ack.rma_window;
  inline_bound_ = std::min({options.eager_limit, ack.eager_limit, static_cast<uint32_t>(wire::kMaxInlineRma)});
  data_.clear();
  for (uint16_t i = 0; i < options.streams; ++i) {
    Socket s = Socket::connect_to("127.0.0.1", port, &err);
    if (!s.valid()) return "data connection " + std::to_string(i) + ": " + err;
    set_send_timeout(s.fd(), options.io_timeout);
    Hello dh = h;
    dh.role = 2;
    dh.endpoint_id = ack.endpoint_id;
    dh.attach_token = ack.attach_token;
    dh.stream_index = i;
    if (!s.send_all(encode(dh), &err)) return "data HELLO: " + err;
    auto dack = s.recv_exact(kHelloSize, options.io_timeout, &err);
    if (!dack) return "data HELLO_ACK " + std::to_string(i) + ": " + err;
    if (decode_ack(*dack).status != 0) return "data HELLO_ACK status " + std::to_string(decode_ack(*dack).status);
    data_.push_back(std::move(s));
  }
  last_op_id_ = 0;
  next_stream_ = 0;
  gets_.clear();
  return "";
}

std::string RmaClient::send_control(const std::vector<uint8_t>& bytes) {
  std::string err;
  return control_.send_all(bytes, &err) ? "" : "control: " + err;
}

std::string RmaClient::send_data(uint16_t stream, std::span<const std::byte> bytes) {
  std::string err;
  return data_.at(stream).send_all(as_u8(bytes), &err) ? "" : "data stream " + std::to_string(stream) + ": " + err;
}

std::string RmaClient::send_put(uint64_t op_id, const KeyBytes& key, uint64_t offset, std::span<const std::byte> data,
                                std::optional<uint64_t> notify) {
  if (data.size() <= inline_bound_) return send_control(put_frame(op_id, key, offset, data.size(), notify, true, data));
  if (std::string e = send_put_announce(op_id, key, offset, data.size(), notify); !e.empty()) return e;
  return send_put_data(op_id, data);
}

std::string RmaClient::send_put_announce(uint64_t op_id, const KeyBytes& key, uint64_t offset, uint64_t length,
                                         std::optional<uint64_t> notify) {
  return send_control(put_frame(op_id, key, offset, length, notify, false));
}

std::string RmaClient::send_put_data(uint64_t op_id, std::span<const std::byte> data) {
  for (size_t off = 0; off < data.size(); off += kRawChunkBytes) {
    const size_t len = std::min(kRawChunkBytes, data.size() - off);
    const uint16_t stream = next_stream_;
    next_stream_ = static_cast<uint16_t>((next_stream_ + 1) % data_.size());
    if (std::string e = send_control(chunk_frame(op_id, off, static_cast<uint32_t>(len), stream, wire::ChunkKind::kPut));
        !e.empty()) {
      return e;
    }
    if (std::string e = send_data(stream, data.subspan(off, len)); !e.empty()) return e;
  }
  return "";
}

void RmaClient::expect_get(uint64_t op_id, uint64_t length, bool keep_data) {
  // The buffer is only allocated for lengths a test can afford; a GET the target must
  // refuse (absurd length) gets no buffer and any data for it is an error.
  PendingGet g{.length = length, .keep = keep_data, .data = {}, .received = 0};
  if (keep_data && length <= (uint64_t{64} << 20)) g.data.resize(length);
  gets_[op_id] = std::move(g);
}

std::string RmaClient::send_get(uint64_t op_id, const KeyBytes& key, uint64_t offset, uint64_t length) {
  expect_get(op_id, length, true);
  return send_control(get_frame(op_id, key, offset, length));
}

std::string RmaClient::send_atomic(uint64_t op_id, const KeyBytes& key, uint64_t offset, wire::AtomicOp op,
                                   uint64_t operand, uint64_t compare) {
  return send_control(atomic_frame(op_id, key, offset, op, operand, compare));
}

std::optional<Reply> RmaClient::read_reply(std::string* error) {
  const auto deadline = Clock::now() + options_.io_timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  const wire::DecodeLimits limits{.max_eager_payload = options_.eager_limit};
  for (;;) {
    std::string err;
    auto header = control_.recv_exact(wire::kFrameHeaderSize, left(), &err);
    if (!header) {
      *error = "reading a frame header: " + err;
      return std::nullopt;
    }
    const uint64_t body_length = get_le(header->data() + 4, 4);
    if (body_length > wire::kMaxFixedFrameSize + options_.eager_limit) {
      *error = "target sent a frame (type " + std::to_string((*header)[0]) + ") with body_length " +
               std::to_string(body_length);
      return std::nullopt;
    }
    std::vector<uint8_t> frame = std::move(*header);
    if (body_length > 0) {
      auto body = control_.recv_exact(body_length, left(), &err);
      if (!body) {
        *error = "reading a frame body: " + err;
        return std::nullopt;
      }
      frame.insert(frame.end(), body->begin(), body->end());
    }
    auto decoded = wire::decode_frame(std::as_bytes(std::span(frame)), limits);
    if (!decoded) {
      *error = "target sent a malformed frame: " + decoded.status().message();
      return std::nullopt;
    }
    if (const auto* chunk = std::get_if<wire::ChunkFrame>(&decoded->frame)) {
      auto it = gets_.find(chunk->recv_id);
      if (chunk->kind != wire::ChunkKind::kGet || it == gets_.end()) {
        *error = "target sent CHUNK kind " + std::to_string(static_cast<int>(chunk->kind)) + " for id " +
                 std::to_string(chunk->recv_id) + ", which is no GET of ours";
        return std::nullopt;
      }
      PendingGet& g = it->second;
      if (chunk->stream >= data_.size() || chunk->offset > g.length || chunk->length > g.length - chunk->offset ||
          (g.keep && g.data.size() != g.length)) {
        *error = "target sent CHUNK [" + std::to_string(chunk->offset) + ", +" + std::to_string(chunk->length) +
                 ") on stream " + std::to_string(chunk->stream) + " for a GET of " + std::to_string(g.length) +
                 " bytes";
        return std::nullopt;
      }
      auto bytes = data_[chunk->stream].recv_exact(chunk->length, left(), &err);
      if (!bytes) {
        *error = "reading GET chunk bytes: " + err;
        return std::nullopt;
      }
      if (g.keep) std::memcpy(g.data.data() + chunk->offset, bytes->data(), bytes->size());
      g.received += chunk->length;
      continue;
    }
    const auto* resp = std::get_if<wire::RespFrame>(&decoded->frame);
    if (resp == nullptr) {
      *error = "target sent an unexpected frame of type " + std::to_string(frame[0]);
      return std::nullopt;
    }
    Reply r{.op_id = resp->op_id,
            .status = resp->status,
            .value = resp->value,
            .inline_data = resp->inline_data,
            .data = {},
            .chunk_bytes = 0};
    if (auto it = gets_.find(resp->op_id); it != gets_.end()) {
      r.chunk_bytes = it->second.received;
      if (resp->inline_data) {
        if (it->second.keep) r.data.assign(resp->payload.begin(), resp->payload.end());
      } else {
        r.data = std::move(it->second.data);
      }
      gets_.erase(it);
    } else if (resp->inline_data) {
      *error = "target sent an INLINE RESP for op " + std::to_string(resp->op_id) + ", which is no GET";
      return std::nullopt;
    }
    return r;
  }
}

std::optional<Reply> RmaClient::finish(uint64_t op_id, std::optional<Reply> reply, std::string* error) {
  if (reply && reply->op_id != op_id) {
    *error = "expected the RESP for op " + std::to_string(op_id) + ", got one for op " + std::to_string(reply->op_id);
    return std::nullopt;
  }
  return reply;
}

std::optional<Reply> RmaClient::put(const KeyBytes& key, uint64_t offset, std::span<const std::byte> data,
                                    std::optional<uint64_t> notify, std::string* error) {
  const uint64_t id = next_op_id();
  if (std::string e = send_put(id, key, offset, data, notify); !e.empty()) {
    *error = e;
    return std::nullopt;
  }
  return finish(id, read_reply(error), error);
}

std::optional<Reply> RmaClient::get(const KeyBytes& key, uint64_t offset, uint64_t length, std::string* error) {
  const uint64_t id = next_op_id();
  if (std::string e = send_get(id, key, offset, length); !e.empty()) {
    *error = e;
    return std::nullopt;
  }
  return finish(id, read_reply(error), error);
}

std::optional<Reply> RmaClient::atomic(const KeyBytes& key, uint64_t offset, wire::AtomicOp op, uint64_t operand,
                                       uint64_t compare, std::string* error) {
  const uint64_t id = next_op_id();
  if (std::string e = send_atomic(id, key, offset, op, operand, compare); !e.empty()) {
    *error = e;
    return std::nullopt;
  }
  return finish(id, read_reply(error), error);
}

bool RmaClient::wait_all_closed(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  bool all = control_.wait_closed(left());
  for (Socket& d : data_) all = d.wait_closed(left()) && all;
  return all;
}

void RmaClient::close() {
  control_ = Socket();
  data_.clear();
}

}  // namespace remora::itest::raw
