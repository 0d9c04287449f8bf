// tests/fuzz/remote_key_fuzz.cc — libFuzzer harness for RemoteKey::deserialize, the
// decoder of the 40 bytes a peer hands over to name memory it granted. A key that
// decodes re-serialises to exactly the input (every field is checked, nothing is
// ignored), its window does not wrap, and anything else is invalid_argument with a message.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_check.h"
#include "remora/memory.h"

namespace {

void check(std::span<const std::byte> in) {
  auto key = remora::RemoteKey::deserialize(in);
  if (!key.is_ok()) {
    REMORA_FUZZ_CHECK(key.status().code() == remora::StatusCode::kInvalidArgument, "a refused key is invalid_argument");
    REMORA_FUZZ_CHECK(!key.status().message().empty(), "a refused key says why");
    return;
  }
  REMORA_FUZZ_CHECK(in.size() == remora::RemoteKey::kSerializedSize, "only 40 bytes decode");
  REMORA_FUZZ_CHECK(key->offset <= UINT64_MAX - key->length, "the window does not wrap");
  const auto again = key->serialize();
  REMORA_FUZZ_CHECK(std::equal(again.begin(), again.end(), in.begin()), "decode then encode gives the input back");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  check(in);
  if (in.size() > remora::RemoteKey::kSerializedSize) check(in.first(remora::RemoteKey::kSerializedSize));
  return 0;
}
