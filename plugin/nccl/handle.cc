// plugin/nccl/handle.cc — the listen handle and the connector's hello, byte by byte.
#include "handle.h"

#include <cstring>

namespace remora::nccl_plugin {

void encode_handle(const Handle& h, std::span<std::byte, NCCL_NET_HANDLE_MAXSIZE> out) noexcept {
  std::memset(out.data(), 0, out.size());
  std::memcpy(out.data(), &h, sizeof h);
}

bool decode_handle(HandleBytes in, Handle* out) noexcept {
  Handle h;
  std::memcpy(&h, in.data(), sizeof h);
  if (h.magic != kHandleMagic || h.version != kHandleVersion || h.port == 0 ||
      std::memchr(h.host, '\0', sizeof h.host) == nullptr || h.host[0] == '\0') {
    return false;
  }
  *out = h;
  return true;
}

const char* check_hello(std::span<const std::byte> received, const Secret& secret) noexcept {
  Hello hello;
  if (received.size() != sizeof hello) return "not a remora NCCL connection";
  std::memcpy(&hello, received.data(), sizeof hello);
  if (hello.magic != kHandleMagic) return "not a remora NCCL connection";
  if (hello.secret != secret) return "its handle is not this listener's (stale, or from another listen)";
  return "";
}

}  // namespace remora::nccl_plugin
