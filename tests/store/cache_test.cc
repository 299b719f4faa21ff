// The cache engine's own behaviour: FIFO log wrap, lossy buckets, liveness checks.
#include <gtest/gtest.h>

#include <string>

#include "store/cache_engine.h"
#include "store/layout.h"
#include "test_util.h"

namespace fabkv::store {
namespace {

using testing::keys_in_bucket;
using testing::small_options;

// 5-byte keys and 35-byte values make 24 + 5 + 35 = 64-byte items.
constexpr size_t kItem = 64;
std::string key_n(int i) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "k%04d", i);
  return buf;
}
std::string value_n(int i) { return std::string(35, static_cast<char>('a' + i % 26)); }

CacheEngine make_cache(size_t log_bytes, size_t buckets) {
  auto o = small_options(buckets * 64 + log_bytes, buckets);
  o.max_value_size = 1000;
  return CacheEngine(o);
}

TEST(CacheEngine, ItemSizeAssumption) {
  ASSERT_EQ(layout::item_size(key_n(0).size(), value_n(0).size()), kItem);
}

TEST(CacheEngine, LogWrapsExactlyAtTheBoundary) {
  CacheEngine c = make_cache(100 * kItem, 256);
  ASSERT_EQ(c.log_capacity(), 100 * kItem);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(c.put(key_n(i), value_n(i)), Status::kOk);
  ASSERT_EQ(c.log_tail(), c.log_capacity());  // the log is exactly full, nothing overwritten
  ASSERT_EQ(c.stats().index_drops, 0u);
  ItemView v;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(c.get(key_n(i), v), Status::kOk) << i;
    EXPECT_EQ(v.value, value_n(i));
  }
  // The next item lands at offset 0 and overwrites exactly item 0.
  ASSERT_EQ(c.put(key_n(100), value_n(100)), Status::kOk);
  EXPECT_EQ(c.get(key_n(0), v), Status::kNotFound);
  EXPECT_EQ(c.stats().evictions, 1u);
  for (int i = 1; i <= 100; ++i) {
    ASSERT_EQ(c.get(key_n(i), v), Status::kOk) << i;
    EXPECT_EQ(v.value, value_n(i));
  }
}

// A touch writes the expiry into the item where it is: the log does not move, so touching one
// item many times evicts nothing (a touch that put the item again appended a copy each time).
TEST(CacheEngine, TouchAppendsNothingAndEvictsNothing) {
  CacheEngine c = make_cache(100 * kItem, 256);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(c.put(key_n(i), value_n(i)), Status::kOk);
  const uint64_t tail = c.log_tail();
  for (int n = 0; n < 1000; ++n)
    ASSERT_EQ(c.touch(hash_key(key_n(0)), key_n(0), 2000000000u + n, nullptr), Status::kOk);
  EXPECT_EQ(c.log_tail(), tail);
  ItemView v;
  for (int i = 0; i < 100; ++i) ASSERT_EQ(c.get(key_n(i), v), Status::kOk) << i;
  EXPECT_EQ(c.stats().evictions, 0u);
}

TEST(CacheEngine, ItemThatDoesNotFitTheLapSkipsToTheStart) {
  CacheEngine c = make_cache(100 * kItem + 32, 256);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(c.put(key_n(i), value_n(i)), Status::kOk);
  ASSERT_EQ(c.log_tail(), 100 * kItem);  // 32 bytes left: item 100 does not fit
  ASSERT_EQ(c.put(key_n(100), value_n(100)), Status::kOk);
  EXPECT_EQ(c.log_tail(), c.log_capacity() + kItem);
  ItemView v;
  EXPECT_EQ(c.get(key_n(0), v), Status::kNotFound);
  for (int i = 1; i <= 100; ++i) {
    ASSERT_EQ(c.get(key_n(i), v), Status::kOk) << i;
    EXPECT_EQ(v.value, value_n(i));
  }
}

TEST(CacheEngine, WrappedItemsAreNeverReturned) {
  CacheEngine c = make_cache(40 * kItem, 64);
  ASSERT_EQ(c.put("k9999", value_n(7)), Status::kOk);
  // Lap the log several times with other keys, some of which share the bucket.
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(c.put(key_n(i), value_n(i)), Status::kOk);
  ItemView v;
  EXPECT_EQ(c.get("k9999", v), Status::kNotFound);
  for (int i = 0; i < 1000; ++i) {
    const Status s = c.get(key_n(i), v);
    if (s == Status::kOk) {
      EXPECT_EQ(v.value, value_n(i)) << i;
    }
    if (i >= 1000 - 39) {
      EXPECT_EQ(s, Status::kOk) << "the last 39 items fit the log";
    }
  }
  EXPECT_GT(c.stats().evictions, 0u);
}

TEST(CacheEngine, FullBucketDropsItsOldestEntry) {
  constexpr uint64_t kBuckets = 16;
  CacheEngine c = make_cache(size_t{1} << 20, kBuckets);
  const auto keys = keys_in_bucket(20, kBuckets, 3);
  for (const auto& k : keys) ASSERT_EQ(c.put(k, "v" + k), Status::kOk);
  const StatsSnapshot s = c.stats();
  EXPECT_EQ(s.index_drops, 12u);
  EXPECT_EQ(s.items, 8u);
  ItemView v;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i < 12) {
      EXPECT_EQ(c.get(keys[i], v), Status::kNotFound) << i;
    } else {
      ASSERT_EQ(c.get(keys[i], v), Status::kOk) << i;
      EXPECT_EQ(v.value, "v" + keys[i]);
    }
  }
  // Updating a key that is present does not drop anything.
  ASSERT_EQ(c.put(keys[12], "new"), Status::kOk);
  EXPECT_EQ(c.stats().index_drops, 12u);
  // keys[12] is now the newest; the next new key drops keys[13], the oldest.
  ASSERT_EQ(c.put(keys[0], "back"), Status::kOk);
  EXPECT_EQ(c.get(keys[13], v), Status::kNotFound);
  ASSERT_EQ(c.get(keys[12], v), Status::kOk);
  EXPECT_EQ(v.value, "new");
  ASSERT_EQ(c.get(keys[0], v), Status::kOk);
  EXPECT_EQ(v.value, "back");
}

TEST(CacheEngine, PartitionFullOfOneBucketsKeys) {
  // Every key lands in one bucket and the log laps many times: only the newest entries
  // survive, each with its own latest value.
  constexpr uint64_t kBuckets = 16;
  CacheEngine c = make_cache(64 * kItem, kBuckets);
  const auto keys = keys_in_bucket(40, kBuckets, 0, "b");
  for (int round = 0; round < 5; ++round) {
    for (const auto& k : keys) ASSERT_EQ(c.put(k, k + std::to_string(round)), Status::kOk);
  }
  ItemView v;
  int hits = 0;
  for (const auto& k : keys) {
    if (c.get(k, v) == Status::kOk) {
      ++hits;
      EXPECT_EQ(v.value, k + "4");
    }
  }
  EXPECT_EQ(hits, 8);
}

}  // namespace
}  // namespace fabkv::store
