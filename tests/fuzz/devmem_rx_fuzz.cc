// tests/fuzz/devmem_rx_fuzz.cc — libFuzzer harness for parse_devmem_rx, which reads the
// control data the kernel leaves after recvmsg(MSG_SOCK_DEVMEM): fragments of a
// dmabuf that a peer's bytes were laid into. The first 8 input bytes choose what
// recvmsg returned (byte count), its MSG_CTRUNC flag, the policy (linear data allowed,
// which bindings are ours); the rest is the control buffer. On success the fragments
// account for exactly the bytes received, belong to our bindings, and linear ones tile
// the iov from 0; a failure is kTruncated exactly when MSG_CTRUNC was set, otherwise
// kProtocol, and says why.
#include <sys/socket.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_check.h"
#include "zerocopy/devmem_rx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remora::zerocopy;
  if (size < 8) return 0;
  uint32_t received32 = 0;
  std::memcpy(&received32, data, 4);
  const size_t received = received32 % (1u << 20);  // what one recvmsg could return
  const bool ctrunc = (data[4] & 1) != 0;
  const bool allow_linear = (data[4] & 2) != 0;
  const uint32_t bindings[2] = {data[5], data[6]};  // small ids, so that the fuzzer hits them
  const size_t nbindings = data[7] % 3;

  // Control data in a buffer aligned as the kernel's is (cmsghdr alignment).
  std::vector<cmsghdr> storage((size - 8) / sizeof(cmsghdr) + 1);
  std::memcpy(storage.data(), data + 8, size - 8);
  msghdr msg{};
  msg.msg_control = size > 8 ? storage.data() : nullptr;
  msg.msg_controllen = size - 8;
  msg.msg_flags = ctrunc ? MSG_CTRUNC : 0;

  const DevmemRxPolicy policy{.bindings = std::span(bindings, nbindings), .allow_linear = allow_linear};
  std::vector<DevmemFragment> fragments;
  const remora::Status s = parse_devmem_rx(msg, received, policy, &fragments);

  for (const auto& f : fragments) {
    if (f.kind == FragmentKind::kLinear) {
      REMORA_FUZZ_CHECK(f.token == 0 && f.binding_id == 0, "a linear fragment holds no token");
    } else {
      REMORA_FUZZ_CHECK(f.kind == FragmentKind::kDmabuf, "fragment kind");
    }
  }
  if (!s.is_ok()) {
    REMORA_FUZZ_CHECK(!s.message().empty(), "a refusal says why");
    if (ctrunc) {
      REMORA_FUZZ_CHECK(s.code() == remora::StatusCode::kTruncated, "MSG_CTRUNC is kTruncated");
    } else {
      REMORA_FUZZ_CHECK(s.code() == remora::StatusCode::kProtocol, "a bad control buffer is kProtocol");
    }
    return 0;
  }
  REMORA_FUZZ_CHECK(!ctrunc, "MSG_CTRUNC never parses cleanly");
  uint64_t total = 0, linear_at = 0;
  for (const auto& f : fragments) {
    total += f.size;
    if (f.kind == FragmentKind::kLinear) {
      REMORA_FUZZ_CHECK(allow_linear, "linear data only where the policy takes it");
      REMORA_FUZZ_CHECK(f.offset == linear_at, "linear fragments tile the iov in order");
      linear_at += f.size;
      REMORA_FUZZ_CHECK(linear_at <= received, "a linear fragment lies within the bytes received");
    } else {
      REMORA_FUZZ_CHECK(std::find(bindings, bindings + nbindings, f.binding_id) != bindings + nbindings,
                        "a dmabuf fragment of one of our bindings");
    }
  }
  REMORA_FUZZ_CHECK(total == received, "the fragments account for exactly the bytes received");
  return 0;
}
