// tests/fuzz/wire_fuzz.cc — libFuzzer harness for the wire decoders.
// Feeds the input to decode_frame (as one frame and as a stream of frames, under several
// eager limits), decode_hello, decode_hello_ack and decode_auth, and aborts when any invariant of
// tests/wire/wire_invariants.h breaks. Build with -DREMORA_FUZZ=ON and clang; see
// tests/fuzz/CMakeLists.txt for how to run it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include "wire/auth.h"
#include "wire/frame.h"
#include "wire/handshake.h"
#include "wire/wire_invariants.h"

namespace {

void require(const std::string& violation, const char* where) {
  if (violation.empty()) return;
  std::fprintf(stderr, "wire_fuzz: %s: %s\n", where, violation.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remora::wire;
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);

  for (uint32_t limit : {0u, 64u, 4096u, 0xFFFFFFFFu}) {
    const DecodeLimits limits{.max_eager_payload = limit};
    require(testing::check_frame_invariants(in, limits), "decode_frame");
    // The same bytes as a stream: decode frame after frame until the first non-ok.
    std::span<const std::byte> rest = in;
    while (!rest.empty()) {
      auto r = decode_frame(rest, limits);
      if (!r.is_ok()) break;
      rest = rest.subspan(r->consumed);
      require(testing::check_frame_invariants(rest, limits), "decode_frame (stream)");
    }
  }

  require(testing::check_hello_invariants(in), "decode_hello");
  require(testing::check_hello_ack_invariants(in), "decode_hello_ack");
  if (in.size() > kHelloSize) {
    require(testing::check_hello_invariants(in.first(kHelloSize)), "decode_hello (first 48 bytes)");
    require(testing::check_hello_ack_invariants(in.first(kHelloAckSize)), "decode_hello_ack (first 48 bytes)");
  }
  require(testing::check_auth_invariants(in), "decode_auth");
  if (in.size() > kAuthSize) require(testing::check_auth_invariants(in.first(kAuthSize)), "decode_auth (first 72 bytes)");
  return 0;
}
