// plugin/nixl/wire.cc — encoding and decoding of the NIXL backend's connection info,
// public data and notification messages (wire.h).
#include "wire.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace remora::nixl_plugin {

namespace {

constexpr std::string_view kConnInfoVersion = "remora-nixl/1";
constexpr std::array<char, 4> kPublicDataMagic = {'R', 'M', 'N', 'X'};
constexpr uint8_t kPublicDataVersion = 1;
constexpr std::array<char, 4> kNotificationMagic = {'R', 'N', 'T', 'F'};

Status invalid(std::string what) { return Status(StatusCode::kInvalidArgument, std::move(what)); }

bool address_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == ':' ||
         c == '[' || c == ']' || c == '-' || c == '_' || c == '/';
}

bool valid_token(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), address_char); }

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_u64(std::string_view in) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(in[static_cast<size_t>(i)]);
  return v;
}

}  // namespace

std::string encode_conn_info(const ConnInfo& info) {
  std::string out(kConnInfoVersion);
  out += " host=";
  out += info.host;
  if (!info.instance.empty()) {
    out += " id=";
    out += info.instance;
  }
  out += " addr=";
  for (size_t i = 0; i < info.addresses.size(); ++i) {
    if (i > 0) out += ',';
    out += info.addresses[i];
  }
  return out;
}

Result<ConnInfo> decode_conn_info(std::string_view text) {
  const std::vector<std::string_view> fields = split(text, ' ');
  if (fields.empty() || fields[0] != kConnInfoVersion) {
    return invalid("connection info is not from this release of the remora NIXL backend (expected \"" +
                   std::string(kConnInfoVersion) + " ...\")");
  }
  ConnInfo info;
  bool have_host = false, have_addr = false, have_id = false;
  for (size_t i = 1; i < fields.size(); ++i) {
    std::string_view f = fields[i];
    if (f.starts_with("host=") && !have_host) {
      f.remove_prefix(5);
      if (!valid_token(f) || f.size() > kMaxAddressBytes) return invalid("connection info: malformed host");
      info.host = std::string(f);
      have_host = true;
    } else if (f.starts_with("id=") && !have_id) {
      f.remove_prefix(3);
      if (!valid_token(f) || f.empty() || f.size() > 32) return invalid("connection info: malformed id");
      info.instance = std::string(f);
      have_id = true;
    } else if (f.starts_with("addr=") && !have_addr) {
      f.remove_prefix(5);
      for (std::string_view a : split(f, ',')) {
        if (!valid_token(a) || a.size() > kMaxAddressBytes) return invalid("connection info: malformed address");
        if (info.addresses.size() == kMaxAddresses) return invalid("connection info: too many addresses");
        info.addresses.emplace_back(a);
      }
      have_addr = true;
    } else {
      return invalid("connection info: unexpected field \"" + std::string(f.substr(0, 32)) + "\"");
    }
  }
  if (!have_host || !have_addr) return invalid("connection info: missing host= or addr=");
  return info;
}

bool is_loopback_address(std::string_view address) {
  return address.starts_with("127.") || address.starts_with("[::1]:") || address.starts_with("localhost:");
}

std::string encode_public_data(const PublicData& data) {
  std::string out(kPublicDataMagic.data(), kPublicDataMagic.size());
  out.push_back(static_cast<char>(kPublicDataVersion));
  out.push_back(static_cast<char>(data.kind));
  out.push_back('\0');
  out.push_back('\0');
  put_u64(out, data.base);
  const auto key = data.key.serialize();
  out.append(reinterpret_cast<const char*>(key.data()), key.size());
  return out;
}

Result<PublicData> decode_public_data(std::string_view bytes) {
  if (bytes.size() != kPublicDataBytes) {
    return invalid("public data of a remote registration has " + std::to_string(bytes.size()) + " bytes, not " +
                   std::to_string(kPublicDataBytes) + " (not from the remora NIXL backend?)");
  }
  if (std::memcmp(bytes.data(), kPublicDataMagic.data(), kPublicDataMagic.size()) != 0 ||
      static_cast<uint8_t>(bytes[4]) != kPublicDataVersion) {
    return invalid("public data of a remote registration is not from this release of the remora NIXL backend");
  }
  const auto kind = static_cast<uint8_t>(bytes[5]);
  if (kind > static_cast<uint8_t>(MemKind::kVram) || bytes[6] != '\0' || bytes[7] != '\0') {
    return invalid("public data of a remote registration: unknown memory kind or reserved bytes set");
  }
  PublicData data;
  data.kind = static_cast<MemKind>(kind);
  data.base = get_u64(bytes.substr(8, 8));
  std::string_view key = bytes.substr(16);
  Result<RemoteKey> k =
      RemoteKey::deserialize(std::span<const std::byte>(reinterpret_cast<const std::byte*>(key.data()), key.size()));
  if (!k) return k.status().with_context("public data of a remote registration");
  data.key = *k;
  if (data.base + data.key.length < data.base) return invalid("public data of a remote registration: range wraps");
  return data;
}

Result<std::vector<std::byte>> encode_notification(std::string_view agent, std::string_view message) {
  if (agent.size() > 0xffff) return invalid("agent name longer than 65535 bytes");
  const size_t total = kNotificationHeaderBytes + agent.size() + message.size();
  if (total > kMaxNotificationBytes) {
    return invalid("notification message of " + std::to_string(message.size()) + " bytes is too long: at most " +
                   std::to_string(kMaxNotificationBytes - kNotificationHeaderBytes - agent.size()) +
                   " bytes from agent \"" + std::string(agent) + "\"");
  }
  const std::array<char, kNotificationHeaderBytes> header = {kNotificationMagic[0],
                                                             kNotificationMagic[1],
                                                             kNotificationMagic[2],
                                                             kNotificationMagic[3],
                                                             static_cast<char>(agent.size() & 0xff),
                                                             static_cast<char>(agent.size() >> 8)};
  std::vector<std::byte> out;
  out.reserve(total);
  for (std::string_view part : {std::string_view(header.data(), header.size()), agent, message}) {
    const auto* p = reinterpret_cast<const std::byte*>(part.data());
    out.insert(out.end(), p, p + part.size());
  }
  return out;
}

Result<NotificationMessage> decode_notification(std::span<const std::byte> bytes) {
  if (bytes.size() < kNotificationHeaderBytes ||
      std::memcmp(bytes.data(), kNotificationMagic.data(), kNotificationMagic.size()) != 0) {
    return Status(StatusCode::kProtocol, "a message on the notification tag is not a notification");
  }
  const size_t name_len = static_cast<size_t>(bytes[4]) | (static_cast<size_t>(bytes[5]) << 8);
  if (kNotificationHeaderBytes + name_len > bytes.size()) {
    return Status(StatusCode::kProtocol, "a notification's agent name runs past its end");
  }
  const char* p = reinterpret_cast<const char*>(bytes.data());
  NotificationMessage n;
  n.agent.assign(p + kNotificationHeaderBytes, name_len);
  n.message.assign(p + kNotificationHeaderBytes + name_len, bytes.size() - kNotificationHeaderBytes - name_len);
  return n;
}

}  // namespace remora::nixl_plugin
