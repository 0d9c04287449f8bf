// transport/encryption.cc — see encryption.h.
#include "transport/encryption.h"

#include <sodium.h>

#include <fmt/format.h>

namespace remora::detail {
namespace {

std::string_view mode_word(EncryptMode mode) noexcept {
  switch (mode) {
    case EncryptMode::kOff: return "off";
    case EncryptMode::kOn: return "on";
    case EncryptMode::kAes256Gcm: return "aes256gcm";
    case EncryptMode::kChacha20Poly1305: return "chacha20poly1305";
    case EncryptMode::kAegis256: return "aegis256";
    case EncryptMode::kAegis128l: return "aegis128l";
  }
  return "off";
}

/// HELLO capability bits ↔ net::cipher_bit sets.
uint8_t ciphers_of(uint64_t capabilities) noexcept {
  uint8_t bits = 0;
  for (net::SealCipher c : net::kSealCiphers) {
    if ((capabilities & cipher_capability(c)) != 0) bits |= net::cipher_bit(c);
  }
  return bits;
}

Status differ(const Config& config, uint64_t theirs, std::string_view peer) {
  const uint8_t bits = ciphers_of(theirs);
  return Status(
      StatusCode::kUnsupported,
      fmt::format("encryption settings differ: this side has REMORA_ENCRYPT={}, peer {} has REMORA_ENCRYPT={}; "
                  "set the same REMORA_ENCRYPT on both sides (docs/encryption.md)",
                  mode_word(config.encrypt), peer,
                  bits == 0 ? "off (or a remora without encryption)" : net::offer_word(bits)));
}

}  // namespace

uint64_t encrypt_capabilities(const Config& config) noexcept {
  const uint8_t bits = net::offered_ciphers(config.encrypt);
  uint64_t caps = 0;
  for (net::SealCipher c : net::kSealCiphers) {
    if ((bits & net::cipher_bit(c)) != 0) caps |= cipher_capability(c);
  }
  return caps;
}

uint64_t cipher_capability(net::SealCipher cipher) noexcept {
  switch (cipher) {
    case net::SealCipher::kAes256Gcm: return wire::kCapSealAes256Gcm;
    case net::SealCipher::kChacha20Poly1305: return wire::kCapSealChacha20Poly1305;
    case net::SealCipher::kAegis256: return wire::kCapSealAegis256;
    case net::SealCipher::kAegis128l: return wire::kCapSealAegis128l;
  }
  return 0;
}

Result<std::optional<net::SealCipher>> listener_cipher(const Config& config, uint64_t peer_capabilities,
                                                       std::string_view peer) {
  const uint64_t ours = encrypt_capabilities(config);
  const uint64_t theirs = peer_capabilities & wire::kCapSealMask;
  if (ours == 0 && theirs == 0) return std::optional<net::SealCipher>();
  const std::optional<net::SealCipher> chosen = net::preferred_cipher(ciphers_of(ours & theirs));
  if (!chosen) return differ(config, theirs, peer);
  return chosen;
}

Result<std::optional<net::SealCipher>> client_cipher(const Config& config, uint64_t ack_capabilities, bool accepted,
                                                     std::string_view peer) {
  const uint64_t ours = encrypt_capabilities(config);
  const uint64_t theirs = ack_capabilities & wire::kCapSealMask;
  if (ours == 0 && theirs == 0) return std::optional<net::SealCipher>();
  if ((ours & theirs) == 0) return differ(config, theirs, peer);
  if (!accepted) return std::optional<net::SealCipher>();  // they agree: refused for another reason
  const std::optional<net::SealCipher> one = net::single_cipher(ciphers_of(theirs));
  if (!one) {
    return Status(StatusCode::kProtocol,
                  fmt::format("{} accepted the connection naming more than one cipher (capabilities 0x{:x})", peer,
                              ack_capabilities));
  }
  return one;
}

Status seal_connection(int fd, net::SealCipher cipher, const AuthKey& key, const SealMaterial& material, bool server) {
  wire::SealKeyPair pair = wire::derive_seal_keys(key.bytes, static_cast<uint8_t>(cipher), material.hello,
                                                  material.server_nonce, material.client_nonce);
  net::SealKeys keys{.cipher = cipher,
                     .send = server ? pair.server_to_client : pair.client_to_server,
                     .recv = server ? pair.client_to_server : pair.server_to_client};
  Status s = net::seal_socket(fd, keys);
  sodium_memzero(&pair, sizeof pair);
  sodium_memzero(&keys, sizeof keys);
  return s;
}

}  // namespace remora::detail
