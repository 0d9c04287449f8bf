// tests/fuzz/seal_fuzz.cc — libFuzzer harness for the receive side of the sealing layer
// (net/seal.cc): what reads a peer's bytes once REMORA_ENCRYPT is on — record lengths,
// record counters and libsodium's open. The input's first byte picks the cipher; the
// rest arrives on a socketpair whose reading end is sealed under a fixed key, then the
// writing end is closed. Whatever the bytes, the layer hands back only plaintext that
// records sealed under that key carried, in order (the seeds are such records, so the
// fuzzer also walks the path that opens them), and otherwise fails the stream: an
// error, and every read after it an error too. It never returns more than was asked.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz_check.h"
#include "net/io.h"
#include "net/seal.h"
#include "seal_fuzz_key.h"

namespace {

using remora::net::IoResult;
using remora::net::SealCipher;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // The first byte picks the cipher: 0 ChaCha20-Poly1305, 1 AES-256-GCM, 2 AEGIS-256,
  // 3 AEGIS-128L (mod 4).
  constexpr SealCipher kByByte[] = {SealCipher::kChacha20Poly1305, SealCipher::kAes256Gcm, SealCipher::kAegis256,
                                    SealCipher::kAegis128l};
  const SealCipher cipher = kByByte[data[0] % 4];
  if (!remora::net::cipher_available(cipher)) return 0;
  const std::span<const std::byte> stream(reinterpret_cast<const std::byte*>(data) + 1, size - 1);
  if (stream.size() > (size_t{1} << 20)) return 0;  // longer inputs reach nothing new

  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds) != 0) return 0;
  remora::net::SealKeys keys{
      .cipher = cipher, .send = remora::fuzz::seal_fuzz_key(), .recv = remora::fuzz::seal_fuzz_key()};
  REMORA_FUZZ_CHECK(remora::net::seal_socket(fds[1], keys).is_ok(), "a fresh socket takes a layer");
  std::vector<std::byte> out(70000);
  size_t written = 0, plaintext = 0;
  bool closed = false, failed = false, ended = false;
  for (int round = 0; round < 100000 && !ended; ++round) {
    // The peer writes what the socket takes (raw bytes, around the layer), then closes.
    if (written < stream.size()) {
      const ssize_t n = ::write(fds[0], stream.data() + written, stream.size() - written);
      if (n > 0) written += static_cast<size_t>(n);
    } else if (!closed) {
      ::close(fds[0]);
      closed = true;
    }
    for (int reads = 0; reads < 1000; ++reads) {
      const size_t ask = 1 + (static_cast<size_t>(round + reads) * 7919) % out.size();  // every length
      const IoResult r = remora::net::recv_some(fds[1], out.data(), ask);
      if (failed) {
        REMORA_FUZZ_CHECK(r.kind == IoResult::Kind::kError, "after a failure every read fails");
        ended = true;
        break;
      }
      if (r.kind == IoResult::Kind::kBytes) {
        REMORA_FUZZ_CHECK(r.bytes > 0 && r.bytes <= ask, "never more than asked");
        plaintext += r.bytes;
        continue;
      }
      if (r.kind == IoResult::Kind::kError) {
        failed = true;
        continue;
      }
      if (r.kind == IoResult::Kind::kEof) ended = true;
      break;  // would block: read again once the peer wrote more
    }
  }
  if (!closed) ::close(fds[0]);
  // Each record costs a header and a tag on top of what it carries.
  REMORA_FUZZ_CHECK(
      plaintext + (plaintext > 0 ? remora::net::kSealHeaderSize + remora::net::seal_tag_size(cipher) : 0) <=
          stream.size(),
      "no plaintext that the bytes could not have carried");
  remora::net::unseal_socket(fds[1]);
  ::close(fds[1]);
  return 0;
}
