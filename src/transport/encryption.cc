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
  }
  return "off";
}

/// The REMORA_ENCRYPT a peer's offered bits stand for.
std::string_view peer_word(uint64_t bits) noexcept {
  bits &= wire::kCapSealMask;
  if (bits == 0) return "off (or a remora without encryption)";
  if (bits == wire::kCapSealMask) return "on";
  return bits == wire::kCapSealAes256Gcm ? "aes256gcm" : "chacha20poly1305";
}

Status differ(const Config& config, uint64_t theirs, std::string_view peer) {
  return Status(
      StatusCode::kUnsupported,
      fmt::format("encryption settings differ: this side has REMORA_ENCRYPT={}, peer {} has REMORA_ENCRYPT={}; "
                  "set the same REMORA_ENCRYPT on both sides (docs/encryption.md)",
                  mode_word(config.encrypt), peer, peer_word(theirs)));
}

}  // namespace

uint64_t encrypt_capabilities(const Config& config) noexcept {
  switch (config.encrypt) {
    case EncryptMode::kOff: return 0;
    case EncryptMode::kOn:
      return wire::kCapSealChacha20Poly1305 | (net::aes256gcm_available() ? wire::kCapSealAes256Gcm : 0);
    case EncryptMode::kAes256Gcm: return wire::kCapSealAes256Gcm;
    case EncryptMode::kChacha20Poly1305: return wire::kCapSealChacha20Poly1305;
  }
  return 0;
}

uint64_t cipher_capability(net::SealCipher cipher) noexcept {
  return cipher == net::SealCipher::kAes256Gcm ? wire::kCapSealAes256Gcm : wire::kCapSealChacha20Poly1305;
}

Result<std::optional<net::SealCipher>> listener_cipher(const Config& config, uint64_t peer_capabilities,
                                                       std::string_view peer) {
  const uint64_t ours = encrypt_capabilities(config);
  const uint64_t theirs = peer_capabilities & wire::kCapSealMask;
  if (ours == 0 && theirs == 0) return std::optional<net::SealCipher>();
  const uint64_t common = ours & theirs;
  if (common == 0) return differ(config, theirs, peer);
  return std::optional<net::SealCipher>((common & wire::kCapSealAes256Gcm) != 0 ? net::SealCipher::kAes256Gcm
                                                                                : net::SealCipher::kChacha20Poly1305);
}

Result<std::optional<net::SealCipher>> client_cipher(const Config& config, uint64_t ack_capabilities, bool accepted,
                                                     std::string_view peer) {
  const uint64_t ours = encrypt_capabilities(config);
  const uint64_t theirs = ack_capabilities & wire::kCapSealMask;
  if (ours == 0 && theirs == 0) return std::optional<net::SealCipher>();
  if ((ours & theirs) == 0) return differ(config, theirs, peer);
  if (!accepted) return std::optional<net::SealCipher>();  // they agree: refused for another reason
  if (theirs != wire::kCapSealAes256Gcm && theirs != wire::kCapSealChacha20Poly1305) {
    return Status(StatusCode::kProtocol,
                  fmt::format("{} accepted the connection naming more than one cipher (capabilities 0x{:x})", peer,
                              ack_capabilities));
  }
  return std::optional<net::SealCipher>(theirs == wire::kCapSealAes256Gcm ? net::SealCipher::kAes256Gcm
                                                                          : net::SealCipher::kChacha20Poly1305);
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
