// wire/auth.h — peer authentication by a shared job secret (REMORA_AUTH_KEY): the AUTH
// message that carries nonces and proofs, and the proofs themselves (HMAC-SHA-256 over a
// transcript of both nonces, the side's role and what the connection is for). Layout and
// flow in docs/protocol.md, "Authentication"; pure functions, no I/O.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "remora/status.h"

namespace remora::wire {

inline constexpr size_t kAuthSize = 72;
inline constexpr size_t kAuthNonceSize = 32;
inline constexpr size_t kAuthProofSize = 32;  // crypto_auth_hmacsha256_BYTES
inline constexpr size_t kAuthKeySize = 32;    // crypto_auth_hmacsha256_KEYBYTES

/// The AUTH message's step (byte 4). Which fields are meaningful depends on it; the
/// others must be zero.
enum class AuthStep : uint8_t {
  kRequest = 1,    ///< client → store: "I authenticate"; nonce and proof zero
  kChallenge = 2,  ///< server → client: the server's nonce; proof zero
  kResponse = 3,   ///< client → server: the client's nonce and the client's proof
  kConfirm = 4,    ///< server → client: the server's proof; nonce zero
  kRefused = 5,    ///< server → client: the client's proof was wrong; nonce and proof zero
};

using AuthNonce = std::array<std::byte, kAuthNonceSize>;
using AuthProof = std::array<std::byte, kAuthProofSize>;
using AuthKeyBytes = std::array<std::byte, kAuthKeySize>;

/// Byte 5 of a store connection's AUTH request and challenge (REMORA_ENCRYPT): bits
/// of the ciphers a client offers, and the one a store chose (its whole offer when they
/// do not agree): net::cipher_bit of each (1 AES-256-GCM, 2 ChaCha20-Poly1305, 4
/// AEGIS-256, 8 AEGIS-128L). Endpoints agree their cipher in HELLO instead and send 0.
inline constexpr uint8_t kAuthSealAes256Gcm = 1;
inline constexpr uint8_t kAuthSealChacha20Poly1305 = 2;
inline constexpr uint8_t kAuthSealAegis256 = 4;
inline constexpr uint8_t kAuthSealAegis128l = 8;
inline constexpr uint8_t kAuthSealMask =
    kAuthSealAes256Gcm | kAuthSealChacha20Poly1305 | kAuthSealAegis256 | kAuthSealAegis128l;

struct AuthMessage {
  AuthStep step = AuthStep::kRequest;
  AuthNonce nonce{};
  AuthProof proof{};
  uint8_t seal = 0;  ///< request, challenge: cipher bits (kAuthSeal*); otherwise 0
};

/// Which side a proof speaks for: each side's proof is bound to its own role, so a
/// proof reflected back to the side that made it does not verify.
enum class AuthRole : uint8_t { kClient = 1, kServer = 2 };

std::array<std::byte, kAuthSize> encode_auth(const AuthMessage& message) noexcept;

/// Decodes exactly kAuthSize bytes. kInvalidArgument on another size; kProtocol on a bad
/// magic, an unknown step, a nonzero reserved byte, cipher bits outside kAuthSealMask or
/// in a step other than request and challenge, or a nonzero nonce or proof where the
/// step carries none.
Result<AuthMessage> decode_auth(std::span<const std::byte> in);

/// The HMAC key both sides prove knowledge of, derived from the shared secret by BLAKE2b
/// (crypto_generichash) under a fixed label; the secret itself never leaves the process.
AuthKeyBytes derive_auth_key(std::span<const std::byte> secret) noexcept;

/// 32 fresh random bytes (libsodium randombytes_buf).
AuthNonce fresh_auth_nonce() noexcept;

/// HMAC-SHA-256 under `key` over: a label naming `role`, `context` (endpoint: the
/// client's 48 HELLO bytes; store: the label "remora store") with its length, the server's
/// nonce, the client's nonce.
AuthProof auth_proof(const AuthKeyBytes& key, AuthRole role, std::span<const std::byte> context,
                     const AuthNonce& server_nonce, const AuthNonce& client_nonce) noexcept;

/// Whether `proof` is auth_proof(key, role, ...), compared in constant time
/// (crypto_auth_hmacsha256_verify).
bool verify_auth_proof(const AuthKeyBytes& key, AuthRole role, std::span<const std::byte> context,
                       const AuthNonce& server_nonce, const AuthNonce& client_nonce, const AuthProof& proof) noexcept;

/// The two keys of a sealed connection (REMORA_ENCRYPT), one per direction.
struct SealKeyPair {
  AuthKeyBytes client_to_server{};
  AuthKeyBytes server_to_client{};
};

/// Derives a sealed connection's keys: BLAKE2b (crypto_generichash) keyed with `key`
/// over a label naming the direction, `cipher` (a number both sides agreed on), the
/// connection's `context` (as for auth_proof: the client's HELLO bytes, or the store's
/// label) and both fresh nonces. Each connection's nonces are new, so no two connections
/// (nor the two directions of one) share a key, and a recorded session's records open
/// under no later connection's keys.
SealKeyPair derive_seal_keys(const AuthKeyBytes& key, uint8_t cipher, std::span<const std::byte> context,
                             const AuthNonce& server_nonce, const AuthNonce& client_nonce) noexcept;

/// The store's transcript context ("remora store").
std::span<const std::byte> store_auth_context() noexcept;

/// Logs, once per process, that `what` listens on the non-loopback `address` with no
/// key: anyone who reaches it may connect. Callers decide that it is not loopback.
void warn_unauthenticated_listener(std::string_view what, std::string_view address);

}  // namespace remora::wire
