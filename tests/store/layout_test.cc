// layout.h's helpers the lookups run on: the inline key compare.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "store/layout.h"

namespace fabkv::store {
namespace {

TEST(BytesEqual, EveryLengthAndEveryDifferingByte) {
  // Lengths 0..64 cover each branch (0, 1-3, 4-7, 8-16, memcmp) and their edges; every byte
  // position, with a flip of the low bit and of the sign bit, at both buffers' misalignments.
  std::mt19937_64 rng(7);
  std::string a(80, '\0'), b(80, '\0');
  for (size_t n = 0; n <= 64; ++n) {
    for (size_t off_a : {0, 1, 5}) {
      for (size_t off_b : {0, 3}) {
        for (char& c : a) c = static_cast<char>(rng());
        std::memcpy(b.data() + off_b, a.data() + off_a, n);
        ASSERT_TRUE(layout::bytes_equal(a.data() + off_a, b.data() + off_b, n)) << n;
        for (size_t i = 0; i < n; ++i) {
          for (unsigned char flip : {0x01, 0x80}) {
            b[off_b + i] = static_cast<char>(b[off_b + i] ^ flip);
            EXPECT_FALSE(layout::bytes_equal(a.data() + off_a, b.data() + off_b, n))
                << "length " << n << " byte " << i;
            b[off_b + i] = static_cast<char>(b[off_b + i] ^ flip);
          }
        }
      }
    }
  }
}

TEST(BytesEqual, NeverReadsPastTheLength) {
  // Equal prefixes, different bytes right after them: the compare must not look there.
  for (size_t n = 0; n <= 32; ++n) {
    std::string a(n, 'k'), b(n, 'k');
    a.push_back('x');
    b.push_back('y');
    EXPECT_TRUE(layout::bytes_equal(a.data(), b.data(), n)) << n;
  }
}

TEST(KeyMatches, ComparesLengthThenBytes) {
  alignas(8) std::byte item[layout::kItemHeaderSize + 64] = {};
  layout::ItemHeader h{};
  const std::string key = "0123456789abcdef";  // the benchmark's 16-byte key
  h.key_size = static_cast<uint8_t>(key.size());
  layout::store_header(item, h);
  std::memcpy(item + layout::kItemHeaderSize, key.data(), key.size());
  EXPECT_TRUE(layout::key_matches(item, h, key));
  EXPECT_FALSE(layout::key_matches(item, h, "0123456789abcdeF"));  // last byte differs
  EXPECT_FALSE(layout::key_matches(item, h, "0123456789abcde"));   // a prefix
  EXPECT_FALSE(layout::key_matches(item, h, "0123456789abcdef0"));
  EXPECT_FALSE(layout::key_matches(item, h, ""));
}

}  // namespace
}  // namespace fabkv::store
