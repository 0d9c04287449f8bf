// tests/fuzz/nixl_wire_fuzz.cc — libFuzzer harness for the NIXL backend's wire formats
// (plugin/nixl/wire.h): the connection info and the public data another agent's metadata
// carries into loadRemoteConnInfo/loadRemoteMD, and the notification messages peers send.
// The first byte picks the decoder, the rest is its input. Whatever decodes is within
// its bounds and survives encode -> decode unchanged; nothing else is accepted.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remora::nixl_plugin;
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0: {
      remora::Result<ConnInfo> info = decode_conn_info(text);
      if (!info) break;
      REMORA_FUZZ_CHECK(!info->host.empty() && info->host.size() <= kMaxAddressBytes, "a bounded host");
      REMORA_FUZZ_CHECK(!info->addresses.empty() && info->addresses.size() <= kMaxAddresses, "bounded addresses");
      for (const std::string& a : info->addresses) {
        REMORA_FUZZ_CHECK(!a.empty() && a.size() <= kMaxAddressBytes, "a bounded address");
      }
      remora::Result<ConnInfo> again = decode_conn_info(encode_conn_info(*info));
      REMORA_FUZZ_CHECK(again && again->host == info->host && again->addresses == info->addresses,
                        "connection info round trip");
      break;
    }
    case 1: {
      remora::Result<PublicData> pd = decode_public_data(text);
      if (!pd) break;
      REMORA_FUZZ_CHECK(text.size() == kPublicDataBytes, "only exactly sized public data");
      REMORA_FUZZ_CHECK(pd->base + pd->key.length >= pd->base, "a window that does not wrap");
      REMORA_FUZZ_CHECK(encode_public_data(*pd) == text, "public data round trip");
      break;
    }
    default: {
      remora::Result<NotificationMessage> n = decode_notification(bytes);
      if (!n) break;
      REMORA_FUZZ_CHECK(kNotificationHeaderBytes + n->agent.size() + n->message.size() == bytes.size(),
                        "every byte is the name's or the message's");
      if (bytes.size() <= kMaxNotificationBytes) {
        remora::Result<std::vector<std::byte>> again = encode_notification(n->agent, n->message);
        REMORA_FUZZ_CHECK(again && std::equal(again->begin(), again->end(), bytes.begin(), bytes.end()),
                          "notification round trip");
      }
      break;
    }
  }
  return 0;
}
