// net/seal.h — encryption in flight at the socket (REMORA_ENCRYPT, docs/encryption.md).
//
// A sealing layer is attached to a connected TCP socket once its handshake is done, the
// way the kernel attaches TLS as an upper-layer protocol (TCP_ULP), but in user space with
// libsodium's AEADs. From then on net::send_some and net::recv_some on that descriptor
// (net/io.h: every byte the endpoints, their data streams, the lingering close and the
// rendezvous store move goes through them) carry the stream as records:
//
//   record = length (u32 LE, 1..kSealRecordMax plaintext bytes) | ciphertext | tag
//
// (a 16-byte tag for AES-256-GCM and ChaCha20-Poly1305, 32 for AEGIS-256), sealed under
// the direction's key with a nonce that is the direction's record counter (u64 LE, then
// zero bytes: 12 bytes in all, 32 for AEGIS-256); the 4-byte length is the associated data. A
// record that fails to open (flipped, dropped, reordered, replayed or cut short) fails
// every later read with EBADMSG (errno_status words it, kProtocol) and none of its bytes
// are delivered: records are opened in place in the layer's receive buffer and copied
// out once their tag verified. The key of a direction is replaced by a hash of itself every
// kSealRecordsPerKey records, on both sides at the same record, so no key seals more than
// 2^24 records (AES-GCM's bound for one key is far above that; AEGIS-256's and
// ChaCha20-Poly1305's farther).
//
// Semantics for the callers of send_some: a byte is reported sent as soon as the record
// that holds it is wholly in the kernel (the peer can open and act on it from then on),
// not before; until then send_some answers "would block" (the socket is full), and the
// caller offers the same bytes again, as it does anyway. Bytes once offered may be
// sealed already: a caller must not change them before they are reported sent.
// For recv_some: a read shorter than asked still proves the kernel drained, as for a
// plain socket (the layer reads on until the kernel has no more).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "net/io.h"
#include "remora/config.h"
#include "remora/status.h"

namespace remora::net {

/// The AEAD a sealed socket uses. Numbers as the handshake's capability bits order them.
/// AEGIS-256 and AEGIS-128L need libsodium 1.0.19 or later at build time
/// (cipher_available). AEGIS-128L uses the first 16 bytes of a SealKey.
enum class SealCipher : uint8_t { kAes256Gcm = 1, kChacha20Poly1305 = 2, kAegis256 = 3, kAegis128l = 4 };

inline constexpr size_t kSealKeySize = 32;
/// The tag of AES-256-GCM and ChaCha20-Poly1305 records; AEGIS's is kSealTagMax.
inline constexpr size_t kSealTagSize = 16;
inline constexpr size_t kSealTagMax = 32;
inline constexpr size_t kSealHeaderSize = 4;
/// Most plaintext bytes in one record.
inline constexpr size_t kSealRecordMax = size_t{64} << 10;
/// Records sealed under one key before both sides replace it.
inline constexpr uint64_t kSealRecordsPerKey = uint64_t{1} << 24;

using SealKey = std::array<std::byte, kSealKeySize>;

/// One connection's keys: `send` seals what this side writes, `recv` opens what it reads.
struct SealKeys {
  SealCipher cipher = SealCipher::kChacha20Poly1305;
  SealKey send{};
  SealKey recv{};
};

/// Every cipher, most preferred first: REMORA_ENCRYPT=on takes the first both sides offer
/// (AEGIS-256 seals faster than AES-256-GCM with the same instructions). AEGIS-128L (a
/// 128-bit key) comes last: `on` takes it only from a side that names it.
inline constexpr std::array<SealCipher, 4> kSealCiphers{SealCipher::kAegis256, SealCipher::kAes256Gcm,
                                                        SealCipher::kChacha20Poly1305, SealCipher::kAegis128l};

/// A set of ciphers as bits, cipher number n as bit n-1 (1 AES-256-GCM, 2
/// ChaCha20-Poly1305, 4 AEGIS-256, 8 AEGIS-128L): the store's AUTH offer carries these.
constexpr uint8_t cipher_bit(SealCipher cipher) noexcept {
  return static_cast<uint8_t>(1U << (static_cast<unsigned>(cipher) - 1));
}

/// The ciphers a side with `mode` offers (cipher_bit's): the one it names, or for `on`
/// each this build and CPU runs (AEGIS and AES-256-GCM only with AES instructions,
/// ChaCha20-Poly1305 always); 0 for off.
uint8_t offered_ciphers(EncryptMode mode) noexcept;
/// The most preferred cipher in `bits`; nullopt: none.
std::optional<SealCipher> preferred_cipher(uint8_t bits) noexcept;
/// The cipher when `bits` holds exactly one known one; nullopt otherwise.
std::optional<SealCipher> single_cipher(uint8_t bits) noexcept;
/// REMORA_ENCRYPT's word for an offer: "off", a cipher's name, or "on" for several.
std::string_view offer_word(uint8_t bits) noexcept;

/// The tag bytes a record of `cipher` ends with.
constexpr size_t seal_tag_size(SealCipher cipher) noexcept {
  return cipher == SealCipher::kAegis256 || cipher == SealCipher::kAegis128l ? kSealTagMax : kSealTagSize;
}

/// "aes256gcm", "chacha20poly1305", "aegis256" or "aegis128l" (REMORA_ENCRYPT's words).
std::string_view cipher_name(SealCipher cipher) noexcept;

/// Whether libsodium runs AES-256-GCM on this CPU (it needs AES-NI and CLMUL).
bool aes256gcm_available() noexcept;

/// Whether this build has `cipher`: AES-256-GCM where aes256gcm_available(),
/// ChaCha20-Poly1305 always, AEGIS-256 and AEGIS-128L where the build's libsodium has
/// them (1.0.19 on).
bool cipher_available(SealCipher cipher) noexcept;

/// Why this build or CPU cannot run `cipher` ("this CPU lacks ...", "this build's
/// libsodium (1.0.18) lacks it ..."); empty: cipher_available(cipher).
std::string cipher_missing(SealCipher cipher);

/// The libsodium this build runs ("1.0.22"), for remora doctor and statistics.
std::string_view sodium_version() noexcept;

/// Attaches a sealing layer to the connected socket `fd` (see above). kInvalidArgument
/// when one is attached already or `fd` is negative; kNoResource for a descriptor
/// beyond the layer's table (2^20). The layer goes when the descriptor is closed through
/// net::Fd (unseal_socket).
Status seal_socket(int fd, const SealKeys& keys);

/// Detaches the layer of `fd`, if any (net::Fd calls it before close(2)).
void unseal_socket(int fd) noexcept;

/// Whether `fd` has a sealing layer.
bool is_sealed(int fd) noexcept;
/// The cipher sealing `fd`; nullopt: it has no sealing layer.
std::optional<SealCipher> sealed_cipher(int fd) noexcept;

/// What a sealed socket has done, for tests and statistics.
struct SealCounters {
  uint64_t records_sealed = 0;
  uint64_t records_opened = 0;
  uint64_t keys_replaced = 0;  ///< both directions' key replacements (kSealRecordsPerKey)
};
SealCounters seal_counters(int fd) noexcept;

/// The sealed-socket versions of send_some/send_some_gathered/recv_some; net/io.cc
/// calls them for a socket with a layer. false: `fd` has none (nothing was done).
bool sealed_send(int fd, const void* data, size_t len, IoResult* out) noexcept;
bool sealed_send_gathered(int fd, const iovec* pieces, int count, IoResult* out) noexcept;
bool sealed_recv(int fd, void* data, size_t len, IoResult* out) noexcept;

/// Bytes in the kernel that no sender was told of yet, up to `most`, reported now: a
/// send seals what it is offered, so where a later offer is shorter than an earlier one
/// (a send worker offering the front chunk of a queue the progress thread offered
/// whole), the records past it may be wholly sent, and the peer may act on them, before
/// their bytes are offered again. A caller that must count what the peer can have read
/// (a data stream checking the peer's count of chunks) takes them here; the next offer
/// of them would have reported them at once. They are the bytes after the last ones
/// reported, in the order they were offered. 0 for a socket without a layer.
size_t sealed_take_sent(int fd, size_t most) noexcept;

/// One record, for tests of the format: seals `plaintext` (1..kSealRecordMax bytes) as
/// record number `counter` (taken modulo kSealRecordsPerKey: under `key` itself, not a
/// replaced one) under `key`; open_record opens one whole record so made.
std::vector<std::byte> seal_record(SealCipher cipher, const SealKey& key, uint64_t counter,
                                   std::span<const std::byte> plaintext);
Result<std::vector<std::byte>> open_record(SealCipher cipher, const SealKey& key, uint64_t counter,
                                           std::span<const std::byte> record);

}  // namespace remora::net
