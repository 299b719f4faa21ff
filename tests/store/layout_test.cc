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

TEST(MoveBytes, EqualsMemmoveForEveryLengthAndOverlap) {
  // Lengths 0..64 (inline up to 32, memmove above), disjoint and overlapping in both
  // directions (a cache PUT may copy a value from a view into the log it overwrites).
  std::mt19937_64 rng(5);
  std::string buf(160, '\0');
  for (size_t n = 0; n <= 64; ++n) {
    for (size_t src : {0, 1, 40}) {
      for (size_t dst : {0, 3, 17, 40, 41, 90}) {
        for (char& c : buf) c = static_cast<char>(rng());
        std::string want = buf;
        std::memmove(want.data() + dst, want.data() + src, n);
        layout::move_bytes(buf.data() + dst, buf.data() + src, n);
        ASSERT_EQ(buf, want) << "length " << n << " from " << src << " to " << dst;
      }
    }
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

TEST(MatchTags8, AgreesWithAScalarScan) {
  // Random buckets drawing tags from a small set (so several entries match), locations whose
  // every 16-bit piece may equal the tag (only the top 16 bits may count), empty entries, and
  // tags with the sign bit set (the SSE2 path packs with signed saturation).
  std::mt19937_64 rng(3);
  const uint16_t tags[] = {1, 2, 0x7fff, 0x8000, 0xffff, 0x1234};
  for (int round = 0; round < 20000; ++round) {
    alignas(64) uint64_t e[8];
    const uint16_t tag = tags[rng() % std::size(tags)];
    for (uint64_t& x : e) {
      const uint64_t r = rng();
      const uint16_t t = r % 3 == 0 ? 0 : tags[rng() % std::size(tags)];
      uint64_t loc = rng() & layout::kLocationMask;
      if (r % 5 == 0) loc = (uint64_t{tag} << 32) | (uint64_t{tag} << 16) | tag;
      x = t == 0 ? 0 : layout::make_entry(t, loc);
    }
    uint32_t want = 0, empty = 0;
    for (int i = 0; i < 8; ++i) {
      if (e[i] != 0 && layout::entry_tag(e[i]) == tag) want |= 1u << (2 * i + 1);
      if (e[i] == 0) empty |= 1u << (2 * i + 1);
    }
    ASSERT_EQ(layout::match_tags8(e, tag), want) << round;
    ASSERT_EQ(layout::match_tags8(e, 0), empty) << round;
    if (want != 0) {
      EXPECT_EQ(layout::entry_tag(e[layout::match_index(want)]), tag);
    }
  }
}

TEST(MatchTags8, StoreBucketIgnoresTheNextLink) {
  layout::StoreBucket b{};
  b.next = 4096;  // high 16 bits 0: would read as an empty entry
  EXPECT_EQ(layout::match_tags8(b.entries, 0) & layout::kMatchStoreEntries, 0x2aaau);
  b.entries[3] = layout::make_entry(9, 1);
  EXPECT_EQ(layout::match_tags8(b.entries, 9) & layout::kMatchStoreEntries, 1u << 7);
  EXPECT_EQ(layout::match_index(1u << 7), 3);
}

}  // namespace
}  // namespace fabkv::store
