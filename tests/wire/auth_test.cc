// wire/auth: the AUTH codec against docs/protocol.md's byte layout, its refusals, and the
// proofs: a right key verifies, a wrong key, a reflected proof (the other role), another
// nonce or another context does not.
#include "wire/auth.h"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

#include "wire/handshake.h"

namespace remora::wire {
namespace {

std::span<const std::byte> bytes_of(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

AuthNonce filled(uint8_t v) {
  AuthNonce n{};
  for (auto& b : n) b = std::byte{v};
  return n;
}

TEST(AuthCodec, LayoutMatchesProtocolDoc) {
  AuthMessage m{.step = AuthStep::kResponse, .nonce = filled(0xAA), .proof = filled(0xBB)};
  const auto w = encode_auth(m);
  ASSERT_EQ(w.size(), 72u);
  EXPECT_EQ(w[0], std::byte{0x52});  // "RMRA"
  EXPECT_EQ(w[1], std::byte{0x4D});
  EXPECT_EQ(w[2], std::byte{0x52});
  EXPECT_EQ(w[3], std::byte{0x41});
  EXPECT_EQ(w[4], std::byte{3});
  EXPECT_EQ(w[5], std::byte{0});
  EXPECT_EQ(w[7], std::byte{0});
  EXPECT_EQ(w[8], std::byte{0xAA});
  EXPECT_EQ(w[39], std::byte{0xAA});
  EXPECT_EQ(w[40], std::byte{0xBB});
  EXPECT_EQ(w[71], std::byte{0xBB});
  auto back = decode_auth(w);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->step, AuthStep::kResponse);
  EXPECT_EQ(back->nonce, m.nonce);
  EXPECT_EQ(back->proof, m.proof);
}

TEST(AuthCodec, Refusals) {
  auto expect_protocol = [](std::array<std::byte, kAuthSize> w, const char* why) {
    auto r = decode_auth(w);
    ASSERT_FALSE(r.is_ok()) << why;
    EXPECT_EQ(r.status().code(), StatusCode::kProtocol) << why;
  };
  const auto good = encode_auth({.step = AuthStep::kChallenge, .nonce = filled(1)});
  auto w = good;
  w[0] = std::byte{0};
  expect_protocol(w, "bad magic");
  for (uint8_t step : {uint8_t{0}, uint8_t{6}, uint8_t{255}}) {
    w = good;
    w[4] = std::byte{step};
    expect_protocol(w, "unknown step");
  }
  for (size_t i : {6u, 7u}) {
    w = good;
    w[i] = std::byte{1};
    expect_protocol(w, "reserved byte");
  }
  // Byte 5: cipher bits (store connections), in a request or a challenge only, and only
  // the four ciphers' bits.
  for (uint8_t bits : {uint8_t{0x10}, uint8_t{0x80}, uint8_t{0x1F}}) {
    w = good;
    w[5] = std::byte{bits};
    expect_protocol(w, "unknown cipher bit");
  }
  w = good;
  w[5] = std::byte{kAuthSealMask};
  EXPECT_TRUE(decode_auth(w).is_ok()) << "every known cipher bit";
  for (AuthStep step : {AuthStep::kResponse, AuthStep::kConfirm, AuthStep::kRefused}) {
    auto bytes = encode_auth({.step = step});
    bytes[5] = std::byte{kAuthSealChacha20Poly1305};
    if (step == AuthStep::kResponse) bytes[8] = std::byte{1};
    expect_protocol(bytes, "cipher bits in a step that carries none");
  }
  for (uint8_t bits : {uint8_t{1}, uint8_t{2}, uint8_t{3}}) {
    auto m = decode_auth(encode_auth({.step = AuthStep::kRequest, .seal = bits}));
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    EXPECT_EQ(m->seal, bits);
  }
  w = good;
  w[40] = std::byte{1};
  expect_protocol(w, "a challenge carrying a proof");
  expect_protocol(encode_auth({.step = AuthStep::kConfirm, .nonce = filled(1)}), "a confirm carrying a nonce");
  expect_protocol(encode_auth({.step = AuthStep::kRefused, .proof = filled(1)}), "a refusal carrying a proof");
  expect_protocol(encode_auth({.step = AuthStep::kRequest, .nonce = filled(1)}), "a request carrying a nonce");
  std::vector<std::byte> short_input(71);
  auto r = decode_auth(short_input);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(AuthProof, RightKeyVerifiesEverythingElseFails) {
  const AuthKeyBytes key = derive_auth_key(bytes_of("job secret"));
  const AuthKeyBytes other = derive_auth_key(bytes_of("job secreT"));
  EXPECT_NE(key, other);
  EXPECT_EQ(key, derive_auth_key(bytes_of("job secret"))) << "derivation must be deterministic";
  const AuthNonce ns = fresh_auth_nonce(), nc = fresh_auth_nonce();
  EXPECT_NE(ns, nc) << "two fresh nonces collided";
  const auto ctx = store_auth_context();
  const AuthProof client = auth_proof(key, AuthRole::kClient, ctx, ns, nc);
  const AuthProof server = auth_proof(key, AuthRole::kServer, ctx, ns, nc);
  EXPECT_NE(client, server);
  EXPECT_TRUE(verify_auth_proof(key, AuthRole::kClient, ctx, ns, nc, client));
  EXPECT_TRUE(verify_auth_proof(key, AuthRole::kServer, ctx, ns, nc, server));
  EXPECT_FALSE(verify_auth_proof(other, AuthRole::kClient, ctx, ns, nc, client)) << "wrong key";
  EXPECT_FALSE(verify_auth_proof(key, AuthRole::kServer, ctx, ns, nc, client)) << "reflected proof";
  EXPECT_FALSE(verify_auth_proof(key, AuthRole::kClient, ctx, fresh_auth_nonce(), nc, client)) << "replayed";
  EXPECT_FALSE(verify_auth_proof(key, AuthRole::kClient, ctx, nc, ns, client)) << "nonces swapped";
  const auto hello = encode_hello({.version = 1, .stream_count = 1, .rma_window = 1});
  EXPECT_FALSE(verify_auth_proof(key, AuthRole::kClient, hello, ns, nc, client)) << "another context";
  AuthProof flipped = client;
  flipped[31] ^= std::byte{1};
  EXPECT_FALSE(verify_auth_proof(key, AuthRole::kClient, ctx, ns, nc, flipped));
}

}  // namespace
}  // namespace remora::wire
