// The control channel's challenge-response (docs/control-channel.md, "The handshake"): the
// server sends a fresh random nonce, the client answers with an HMAC-SHA256 keyed by the
// shared secret over the nonce and the exact bytes of its Hello, and the server compares that
// with its own in constant time. The secret itself never crosses the wire, and an answer is
// good for one nonce only, so a captured handshake cannot be replayed.
//
// All cryptography is OpenSSL's libcrypto (RAND_bytes, EVP_MAC "HMAC" with SHA-256,
// CRYPTO_memcmp).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "control/wire.h"

namespace fabkv::control {

// What the MAC covers, in this order: kProofLabel (its 27 bytes, no terminator), the nonce of
// the Challenge (kNonceSize bytes), the Hello frame as the client sent it, header included.
// The label ties a proof to this use and this version of the handshake; the Hello, to what
// the client asked for (service, provider, fabric address, payload) and the version it speaks.
inline constexpr std::string_view kProofLabel = "fabkv control proof v2 hmac";

// kNonceSize bytes from OpenSSL's CSPRNG (RAND_bytes). Throws std::runtime_error if it has
// none to give (never expected on Linux with getrandom).
std::vector<uint8_t> make_nonce();

// HMAC-SHA256(secret, kProofLabel || nonce || hello_frame): kProofSize bytes.
std::vector<uint8_t> compute_proof(std::string_view secret, std::span<const uint8_t> nonce,
                                   std::span<const uint8_t> hello_frame);

// True when `got` is exactly `expected`. The comparison takes the same time wherever the two
// differ (CRYPTO_memcmp); only a length mismatch returns early, and lengths are public.
bool proof_matches(std::span<const uint8_t> expected, std::span<const uint8_t> got);

}  // namespace fabkv::control
