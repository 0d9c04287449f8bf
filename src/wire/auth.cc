// wire/auth.cc — AUTH codec and the HMAC proofs (libsodium). Layout: docs/protocol.md,
// "Authentication".
#include "wire/auth.h"

#include <sodium.h>

#include <atomic>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/little_endian.h"
#include "core/log.h"
#include "wire/handshake.h"

namespace remora::wire {
namespace {

constexpr size_t kMagicOffset = 0;
constexpr size_t kStepOffset = 4;
constexpr size_t kReservedOffset = 5;
constexpr size_t kNonceOffset = 8;
constexpr size_t kProofOffset = 40;
static_assert(kMagicOffset + 4 == kStepOffset && kStepOffset + 1 == kReservedOffset);
static_assert(kReservedOffset + 3 == kNonceOffset && kNonceOffset + kAuthNonceSize == kProofOffset);
static_assert(kProofOffset + kAuthProofSize == kAuthSize);
static_assert(kAuthProofSize == crypto_auth_hmacsha256_BYTES && kAuthKeySize == crypto_auth_hmacsha256_KEYBYTES);

// Both labels have the same length, so the transcript's layout does not depend on the role.
constexpr std::string_view kClientLabel = "remora auth v1 client";
constexpr std::string_view kServerLabel = "remora auth v1 server";
static_assert(kClientLabel.size() == kServerLabel.size());
constexpr std::string_view kKeyLabel = "remora auth v1 key";
constexpr std::string_view kStoreContext = "remora store";
// Both of the same length, as the proof labels.
constexpr std::string_view kSealClientToServer = "remora seal v1 client to server";
constexpr std::string_view kSealServerToClient = "remora seal v1 server to client";
static_assert(kSealClientToServer.size() == kSealServerToClient.size());

Status protocol_error(std::string message) { return {StatusCode::kProtocol, std::move(message)}; }

template <size_t N>
bool all_zero(const std::array<std::byte, N>& a) {
  for (std::byte b : a) {
    if (b != std::byte{0}) return false;
  }
  return true;
}

void ensure_sodium() noexcept {
  // Idempotent and thread-safe; returns -1 only when the library cannot initialise,
  // which leaves randombytes on its default (getrandom) source.
  static const int once = sodium_init();
  (void)once;
}

std::vector<std::byte> transcript(AuthRole role, std::span<const std::byte> context, const AuthNonce& server_nonce,
                                  const AuthNonce& client_nonce) {
  const std::string_view label = role == AuthRole::kClient ? kClientLabel : kServerLabel;
  std::vector<std::byte> t;
  t.reserve(label.size() + 4 + context.size() + 2 * kAuthNonceSize);
  for (char ch : label) t.push_back(static_cast<std::byte>(ch));
  core::append_le<uint32_t>(t, static_cast<uint32_t>(context.size()));
  t.insert(t.end(), context.begin(), context.end());
  t.insert(t.end(), server_nonce.begin(), server_nonce.end());
  t.insert(t.end(), client_nonce.begin(), client_nonce.end());
  return t;
}

const unsigned char* uc(const std::byte* p) { return reinterpret_cast<const unsigned char*>(p); }
unsigned char* uc(std::byte* p) { return reinterpret_cast<unsigned char*>(p); }

}  // namespace

std::array<std::byte, kAuthSize> encode_auth(const AuthMessage& message) noexcept {
  std::array<std::byte, kAuthSize> out{};
  core::store_u32(out.data() + kMagicOffset, kMagic);
  core::store_u8(out.data() + kStepOffset, static_cast<uint8_t>(message.step));
  core::store_u8(out.data() + kReservedOffset, message.seal);
  std::memcpy(out.data() + kNonceOffset, message.nonce.data(), kAuthNonceSize);
  std::memcpy(out.data() + kProofOffset, message.proof.data(), kAuthProofSize);
  return out;
}

Result<AuthMessage> decode_auth(std::span<const std::byte> in) {
  if (in.size() != kAuthSize) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("AUTH: decode needs exactly {} bytes, got {}", kAuthSize, in.size()));
  }
  const uint32_t magic = core::load_u32(in.data() + kMagicOffset);
  if (magic != kMagic) return protocol_error(fmt::format("AUTH: magic 0x{:08x} is not 0x{:08x}", magic, kMagic));
  const uint8_t step = core::load_u8(in.data() + kStepOffset);
  if (step < static_cast<uint8_t>(AuthStep::kRequest) || step > static_cast<uint8_t>(AuthStep::kRefused)) {
    return protocol_error(fmt::format("AUTH: unknown step {}", step));
  }
  // Byte 5: cipher bits (store connections, REMORA_ENCRYPT); 6 and 7 reserved.
  const uint8_t seal = core::load_u8(in.data() + kReservedOffset);
  for (size_t i = 1; i < 3; ++i) {
    if (in[kReservedOffset + i] != std::byte{0}) {
      return protocol_error(fmt::format("AUTH: reserved byte {} is nonzero", kReservedOffset + i));
    }
  }
  const bool may_seal =
      step == static_cast<uint8_t>(AuthStep::kRequest) || step == static_cast<uint8_t>(AuthStep::kChallenge);
  if ((seal & ~kAuthSealMask) != 0 || (seal != 0 && !may_seal)) {
    return protocol_error(fmt::format("AUTH: step {} carries cipher bits 0x{:02x}", step, seal));
  }
  AuthMessage m;
  m.step = static_cast<AuthStep>(step);
  m.seal = seal;
  std::memcpy(m.nonce.data(), in.data() + kNonceOffset, kAuthNonceSize);
  std::memcpy(m.proof.data(), in.data() + kProofOffset, kAuthProofSize);
  const bool has_nonce = m.step == AuthStep::kChallenge || m.step == AuthStep::kResponse;
  const bool has_proof = m.step == AuthStep::kResponse || m.step == AuthStep::kConfirm;
  if (!has_nonce && !all_zero(m.nonce)) return protocol_error(fmt::format("AUTH: step {} carries a nonce", step));
  if (!has_proof && !all_zero(m.proof)) return protocol_error(fmt::format("AUTH: step {} carries a proof", step));
  return m;
}

AuthKeyBytes derive_auth_key(std::span<const std::byte> secret) noexcept {
  ensure_sodium();
  AuthKeyBytes key{};
  crypto_generichash_state state;
  crypto_generichash_init(&state, nullptr, 0, key.size());
  crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(kKeyLabel.data()), kKeyLabel.size());
  crypto_generichash_update(&state, uc(secret.data()), secret.size());
  crypto_generichash_final(&state, uc(key.data()), key.size());
  sodium_memzero(&state, sizeof state);
  return key;
}

AuthNonce fresh_auth_nonce() noexcept {
  ensure_sodium();
  AuthNonce n{};
  randombytes_buf(n.data(), n.size());
  return n;
}

AuthProof auth_proof(const AuthKeyBytes& key, AuthRole role, std::span<const std::byte> context,
                     const AuthNonce& server_nonce, const AuthNonce& client_nonce) noexcept {
  const std::vector<std::byte> t = transcript(role, context, server_nonce, client_nonce);
  AuthProof proof{};
  crypto_auth_hmacsha256(uc(proof.data()), uc(t.data()), t.size(), uc(key.data()));
  return proof;
}

bool verify_auth_proof(const AuthKeyBytes& key, AuthRole role, std::span<const std::byte> context,
                       const AuthNonce& server_nonce, const AuthNonce& client_nonce, const AuthProof& proof) noexcept {
  const std::vector<std::byte> t = transcript(role, context, server_nonce, client_nonce);
  return crypto_auth_hmacsha256_verify(uc(proof.data()), uc(t.data()), t.size(), uc(key.data())) == 0;
}

SealKeyPair derive_seal_keys(const AuthKeyBytes& key, uint8_t cipher, std::span<const std::byte> context,
                             const AuthNonce& server_nonce, const AuthNonce& client_nonce) noexcept {
  ensure_sodium();
  auto one = [&](std::string_view label) {
    AuthKeyBytes out{};
    std::array<std::byte, 5> lengths{};
    core::store_u8(lengths.data(), cipher);
    core::store_u32(lengths.data() + 1, static_cast<uint32_t>(context.size()));
    crypto_generichash_state state;
    crypto_generichash_init(&state, uc(key.data()), key.size(), out.size());
    crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(label.data()), label.size());
    crypto_generichash_update(&state, uc(lengths.data()), lengths.size());
    crypto_generichash_update(&state, uc(context.data()), context.size());
    crypto_generichash_update(&state, uc(server_nonce.data()), server_nonce.size());
    crypto_generichash_update(&state, uc(client_nonce.data()), client_nonce.size());
    crypto_generichash_final(&state, uc(out.data()), out.size());
    sodium_memzero(&state, sizeof state);
    return out;
  };
  return {.client_to_server = one(kSealClientToServer), .server_to_client = one(kSealServerToClient)};
}

std::span<const std::byte> store_auth_context() noexcept {
  return std::as_bytes(std::span(kStoreContext.data(), kStoreContext.size()));
}

void warn_unauthenticated_listener(std::string_view what, std::string_view address) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  REMORA_LOG(kWarn,
             "{} listens on {}, which is not a loopback address, and no REMORA_AUTH_KEY is set: any host that "
             "reaches it can connect (set REMORA_AUTH_KEY or REMORA_AUTH_KEY_FILE to a job secret; this "
             "warning is printed once per process)",
             what, address);
}

}  // namespace remora::wire
