// The segregated-fit heap on its own: random alloc/free with overlap and consistency checks.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "store/heap.h"
#include "test_util.h"

namespace fabkv::store {
namespace {

TEST(Heap, RandomAllocFreeKeepsBlocksDisjointAndConsistent) {
  std::vector<std::byte> mem(size_t{1} << 20);
  Heap h(mem.data(), mem.size());
  std::mt19937_64 rng(42);
  std::map<uint64_t, std::pair<uint64_t, uint8_t>> live;  // payload -> (bytes, fill byte)
  const int rounds = 20000 * testing::kScale;
  for (int i = 0; i < rounds; ++i) {
    if (live.empty() || rng() % 100 < 55) {
      // Mostly small sizes, sometimes large ones, like item sizes.
      const uint64_t bytes = rng() % 10 == 0 ? rng() % 20000 : rng() % 300;
      const uint64_t p = h.alloc(bytes);
      if (p == Heap::kNil) continue;
      ASSERT_EQ(p % 8, 0u);
      ASSERT_GE(h.block_size(p) - 8, bytes);
      const auto fill = static_cast<uint8_t>(rng());
      std::memset(h.at(p), fill, bytes);
      live[p] = {bytes, fill};
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      const auto [p, bf] = *it;
      for (uint64_t j = 0; j < bf.first; ++j) {
        const auto byte = static_cast<uint8_t>(h.at(p)[j]);
        ASSERT_EQ(byte, bf.second) << "block overwritten";
      }
      h.free(p);
      live.erase(it);
    }
    if (i % 1000 == 0) {
      ASSERT_EQ(h.check(), "") << "after op " << i;
    }
  }
  for (const auto& [p, bf] : live) h.free(p);
  ASSERT_EQ(h.check(), "");
  EXPECT_EQ(h.used_bytes(), 0u);
  // Everything coalesced back into one block.
  EXPECT_NE(h.alloc(h.capacity() - 64), Heap::kNil);
}

TEST(Heap, ExhaustionReturnsNil) {
  std::vector<std::byte> mem(4096);
  Heap h(mem.data(), mem.size());
  int n = 0;
  while (h.alloc(100) != Heap::kNil) ++n;
  EXPECT_EQ(n, (4096 - 16) / 112);  // 112-byte blocks; the end marker takes 16 bytes
  EXPECT_EQ(h.alloc(1u << 30), Heap::kNil);
  EXPECT_EQ(h.check(), "");
}

}  // namespace
}  // namespace fabkv::store
