// store::hash_key is part of the wire contract: clients pick a key's partition with
// partition_of(hash_key(key)) (proto/rpc/client.cc), so its values must never change. These
// tests pin known values and compare against the libxxhash shared library for every key
// length the engines accept.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

#include "store/hash.h"
#include "store/limits.h"

namespace fabkv::store {
namespace testing {
uint64_t library_xxh3_64(const void* p, size_t n);  // hash_reference.cc
}  // namespace testing
namespace {

TEST(Hashing, KnownValuesArePinned) {
  // XXH3_64bits, seed 0, from libxxhash 0.8.1 (the empty string's is xxHash's published one).
  EXPECT_EQ(hash_key("").h, 0x2d06800538d394c2ULL);
  EXPECT_EQ(hash_key("a").h, 0xe6c632b61e964e1fULL);
  EXPECT_EQ(hash_key("abc").h, 0x78af5f94892f3950ULL);
  EXPECT_EQ(hash_key("key:0").h, 0xb464ee7b63344e80ULL);
  EXPECT_EQ(hash_key("0123456789abcdef").h, 0x64439946d8fa212dULL);
  EXPECT_EQ(hash_key("0123456789abcdef0").h, 0xc92e2385daf36034ULL);
  EXPECT_EQ(hash_key("user:1234567890:profile:settings").h, 0x8c6c390735a2459cULL);
  std::string s;
  for (int i = 0; i < 250; ++i) s.push_back(static_cast<char>('a' + i % 26));
  const std::string_view v(s);
  EXPECT_EQ(hash_key(v.substr(0, 64)).h, 0x101fc40ce7f1f785ULL);
  EXPECT_EQ(hash_key(v.substr(0, 128)).h, 0x3e99edc6c76f21c6ULL);
  EXPECT_EQ(hash_key(v.substr(0, 129)).h, 0x852cb20608c9d2c7ULL);
  EXPECT_EQ(hash_key(v.substr(0, 240)).h, 0xea0e0f78188232edULL);
  EXPECT_EQ(hash_key(v.substr(0, 241)).h, 0xbb0a906af5b5c211ULL);
  EXPECT_EQ(hash_key(v.substr(0, 250)).h, 0x37e348309e51ac21ULL);
}

TEST(Hashing, MatchesTheSharedLibraryAtEveryKeyLength) {
  // Each of XXH3's length classes (0, 1-3, 4-8, 9-16, 17-128, 129-240, 241+) and every
  // length in them, from random bytes at an odd offset (unaligned loads).
  std::mt19937_64 rng(12);
  std::string buf(kMaxKeySize + 8, '\0');
  for (int round = 0; round < 20; ++round) {
    for (char& c : buf) c = static_cast<char>(rng());
    for (size_t n = 0; n <= kMaxKeySize; ++n) {
      const std::string_view k(buf.data() + 3, n);
      ASSERT_EQ(hash_key(k).h, testing::library_xxh3_64(k.data(), k.size())) << "length " << n;
    }
  }
}

}  // namespace
}  // namespace fabkv::store
