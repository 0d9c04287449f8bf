// tests/fuzz/nccl_handle_fuzz.cc — libFuzzer harness for the NCCL plugin's connection
// handle and hello (plugin/nccl/handle.h): the NCCL_NET_HANDLE_MAXSIZE bytes connect()
// is given, and the hello the acceptor receives. A handle that decodes has a port and a
// NUL-terminated, non-empty host (connect() prints and dials it) and survives encode ->
// decode unchanged; a hello is accepted only at its exact size, magic and secret.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "fuzz_check.h"
#include "handle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remora::nccl_plugin;
  std::array<std::byte, NCCL_NET_HANDLE_MAXSIZE> bytes{};
  std::memcpy(bytes.data(), data, std::min(size, bytes.size()));

  Handle h;
  if (decode_handle(bytes, &h)) {
    REMORA_FUZZ_CHECK(h.magic == kHandleMagic && h.version == kHandleVersion, "magic and version");
    REMORA_FUZZ_CHECK(h.port != 0, "a port");
    const void* nul = std::memchr(h.host, '\0', sizeof h.host);
    REMORA_FUZZ_CHECK(nul != nullptr && h.host[0] != '\0', "a NUL-terminated, non-empty host");
    std::array<std::byte, NCCL_NET_HANDLE_MAXSIZE> again{};
    encode_handle(h, again);
    Handle back;
    REMORA_FUZZ_CHECK(decode_handle(again, &back), "an encoded handle decodes");
    REMORA_FUZZ_CHECK(back.port == h.port && back.stage == h.stage && back.secret == h.secret &&
                          std::strcmp(back.host, h.host) == 0,
                      "handle round trip");
  }

  Secret secret{};
  std::memcpy(secret.data(), bytes.data() + 4, secret.size());  // the secret the input itself carries
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  const char* why = check_hello(in, secret);
  REMORA_FUZZ_CHECK(why != nullptr, "check_hello always answers");
  if (why[0] == '\0') {
    uint32_t magic = 0;
    std::memcpy(&magic, data, sizeof magic);
    REMORA_FUZZ_CHECK(size == sizeof(Hello) && magic == kHandleMagic, "only a whole hello with the magic");
  }
  const Secret other{1};
  if (secret != other && std::strlen(check_hello(in, other)) == 0) {
    REMORA_FUZZ_CHECK(false, "a hello with another listen's secret accepted");
  }
  return 0;
}
