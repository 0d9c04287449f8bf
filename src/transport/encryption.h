// transport/encryption.h — REMORA_ENCRYPT at the handshake (docs/encryption.md): the
// capability bits a side offers, the cipher a listener chooses and a client accepts
// (both sides must agree, else the connection is refused naming REMORA_ENCRYPT on both
// sides), and the sealing layer (net/seal.h) put on a connection once its handshake is
// done, with keys derived from the AUTH exchange (wire::derive_seal_keys).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "net/seal.h"
#include "remora/config.h"
#include "remora/status.h"
#include "wire/auth.h"
#include "wire/handshake.h"

namespace remora::detail {

/// What one connection's AUTH exchange leaves for its keys: the client's HELLO as sent
/// and both fresh nonces.
struct SealMaterial {
  std::array<std::byte, wire::kHelloSize> hello{};
  wire::AuthNonce server_nonce{};
  wire::AuthNonce client_nonce{};
};

/// The HELLO bits a side with this configuration offers (wire::kCapSeal*; 0: off): those
/// of net::offered_ciphers.
uint64_t encrypt_capabilities(const Config& config) noexcept;

/// The one bit of `cipher`.
uint64_t cipher_capability(net::SealCipher cipher) noexcept;

/// A listener's choice for a HELLO that offered `peer_capabilities`: nullopt when
/// neither side encrypts; the first of net::kSealCiphers both offer.
/// kUnsupported, naming REMORA_ENCRYPT on both sides, when only one side encrypts or
/// they share no cipher.
Result<std::optional<net::SealCipher>> listener_cipher(const Config& config, uint64_t peer_capabilities,
                                                       std::string_view peer);

/// A client's reading of a HELLO_ACK's bits. `accepted`: the ACK must name exactly one
/// cipher this side offered (or none, when this side does not encrypt). A refusal carries
/// the listener's own offer: kUnsupported when the settings differ (so the refusal is
/// explained), ok (nullopt) when they agree and the refusal was for another reason.
Result<std::optional<net::SealCipher>> client_cipher(const Config& config, uint64_t ack_capabilities, bool accepted,
                                                     std::string_view peer);

/// Puts the sealing layer on `fd`, its handshake done: keys from `key` and `material`;
/// `server`: this side accepted the connection.
Status seal_connection(int fd, net::SealCipher cipher, const AuthKey& key, const SealMaterial& material, bool server);

}  // namespace remora::detail
