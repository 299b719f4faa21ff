#include "control/auth.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace fabkv::control {

static_assert(kProofLabel.size() == 27);

std::vector<uint8_t> make_nonce() {
  std::vector<uint8_t> nonce(kNonceSize);
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1)
    throw std::runtime_error("control: the random generator gave no nonce (RAND_bytes)");
  return nonce;
}

// OpenSSL 3's EVP_MAC interface (the HMAC_CTX functions are deprecated there), fed the three
// parts in turn.
std::vector<uint8_t> compute_proof(std::string_view secret, std::span<const uint8_t> nonce,
                                   std::span<const uint8_t> hello_frame) {
  EVP_MAC* hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = hmac != nullptr ? EVP_MAC_CTX_new(hmac) : nullptr;
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  std::vector<uint8_t> mac(kProofSize);
  size_t len = 0;
  const bool ok = ctx != nullptr &&
                  EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(secret.data()),
                               secret.size(), params) == 1 &&
                  EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(kProofLabel.data()),
                                 kProofLabel.size()) == 1 &&
                  EVP_MAC_update(ctx, nonce.data(), nonce.size()) == 1 &&
                  EVP_MAC_update(ctx, hello_frame.data(), hello_frame.size()) == 1 &&
                  EVP_MAC_final(ctx, mac.data(), &len, mac.size()) == 1 && len == kProofSize;
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(hmac);
  if (!ok) throw std::runtime_error("control: HMAC-SHA256 failed");
  return mac;
}

bool proof_matches(std::span<const uint8_t> expected, std::span<const uint8_t> got) {
  if (expected.size() != got.size() || expected.empty()) return false;
  return CRYPTO_memcmp(expected.data(), got.data(), expected.size()) == 0;
}

}  // namespace fabkv::control
