// The store engine's own behaviour: lossless chaining, kNoSpace, space reuse.
#include <gtest/gtest.h>

#include <string>

#include "store/store_engine.h"
#include "test_util.h"

namespace fabkv::store {
namespace {

using testing::keys_in_bucket;
using testing::small_options;

TEST(StoreEngine, PartitionFullOfOneBucketsKeys) {
  constexpr uint64_t kBuckets = 16;
  StoreEngine s(small_options(size_t{1} << 20, kBuckets));
  const auto keys = keys_in_bucket(200, kBuckets, 5);
  for (const auto& k : keys) ASSERT_EQ(s.put(k, "v" + k), Status::kOk);
  EXPECT_EQ(s.stats().items, 200u);
  EXPECT_EQ(s.stats().overflow_buckets, (200 - 7 + 6) / 7);
  ASSERT_EQ(s.check(), "");
  ItemView v;
  for (const auto& k : keys) {
    ASSERT_EQ(s.get(k, v), Status::kOk) << k;
    EXPECT_EQ(v.value, "v" + k);
  }
  // Deleting from the middle of the chain keeps the rest reachable and unlinks empty buckets.
  for (size_t i = 0; i < keys.size(); i += 2) ASSERT_EQ(s.del(keys[i]), Status::kOk);
  ASSERT_EQ(s.check(), "");
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(s.get(keys[i], v), i % 2 ? Status::kOk : Status::kNotFound) << i;
  }
  for (size_t i = 1; i < keys.size(); i += 2) ASSERT_EQ(s.del(keys[i]), Status::kOk);
  EXPECT_EQ(s.stats().items, 0u);
  EXPECT_EQ(s.stats().overflow_buckets, 0u);
  EXPECT_EQ(s.heap().used_bytes(), 0u);
  ASSERT_EQ(s.check(), "");
}

TEST(StoreEngine, NoSpaceFailsWithoutChangingAnything) {
  StoreEngine s(small_options(size_t{256} << 10, 64));
  const std::string value(1000, 'v');
  int stored = 0;
  Status st = Status::kOk;
  while ((st = s.put("key" + std::to_string(stored), value)) == Status::kOk) ++stored;
  ASSERT_EQ(st, Status::kNoSpace);
  ASSERT_GT(stored, 150);
  EXPECT_EQ(s.stats().items, static_cast<uint64_t>(stored));
  EXPECT_EQ(s.stats().no_space, 1u);
  // An update that needs more space than is left fails and keeps the old value.
  EXPECT_EQ(s.put("key0", std::string(5000, 'w')), Status::kNoSpace);
  ItemView v;
  for (int i = 0; i < stored; ++i) {
    ASSERT_EQ(s.get("key" + std::to_string(i), v), Status::kOk) << i;
    ASSERT_EQ(v.value, value);
  }
  ASSERT_EQ(s.check(), "");
  // DELETE frees space that a PUT of a different size can use after coalescing.
  for (int i = 0; i < 10; ++i) ASSERT_EQ(s.del("key" + std::to_string(i)), Status::kOk);
  EXPECT_EQ(s.put("big", std::string(4000, 'b')), Status::kOk);
  ASSERT_EQ(s.check(), "");
}

TEST(StoreEngine, AllSpaceComesBackAfterDeletes) {
  auto o = small_options(size_t{2} << 20, 256);
  o.max_value_size = size_t{1} << 20;
  StoreEngine s(o);
  // Fill the heap with mixed sizes until it refuses, then delete everything.
  int n = 0;
  while (s.put("key" + std::to_string(n), std::string(n * 37 % 700, 'x')) == Status::kOk) ++n;
  ASSERT_GT(n, 1000);
  for (int i = 0; i < n; ++i) ASSERT_EQ(s.del("key" + std::to_string(i)), Status::kOk);
  EXPECT_EQ(s.heap().used_bytes(), 0u);
  EXPECT_EQ(s.stats().bytes, 0u);
  ASSERT_EQ(s.check(), "");
  // A 1 MiB value needs a contiguous half of the heap: the freed blocks must have coalesced.
  EXPECT_EQ(s.put("whole", std::string(size_t{1} << 20, 'w')), Status::kOk);
  ASSERT_EQ(s.check(), "");
}

}  // namespace
}  // namespace fabkv::store
