// Behaviour all engines share: the API contract of engine.h.
#include <gtest/gtest.h>

#include <string>

#include "store/engine.h"
#include "store/limits.h"
#include "test_util.h"

namespace fabkv::store {
namespace {

using testing::FakeClock;
using testing::small_options;

class EngineTest : public ::testing::TestWithParam<EngineKind> {
 protected:
  std::unique_ptr<Engine> make(size_t memory = size_t{8} << 20, size_t buckets = 1024) {
    auto o = small_options(memory, buckets, &clock_);
    o.max_value_size = max_value_;
    return make_engine(GetParam(), o);
  }
  FakeClock clock_;
  size_t max_value_ = kDefaultMaxValueSize;
};

TEST_P(EngineTest, PutGetDelete) {
  auto e = make();
  EXPECT_EQ(e->kind(), GetParam());
  ItemView v;
  EXPECT_EQ(e->get("a", v), Status::kNotFound);
  EXPECT_EQ(e->put("a", "one"), Status::kOk);
  ASSERT_EQ(e->get("a", v), Status::kOk);
  EXPECT_EQ(v.value, "one");
  EXPECT_EQ(e->put("a", "two"), Status::kOk);
  ASSERT_EQ(e->get("a", v), Status::kOk);
  EXPECT_EQ(v.value, "two");
  EXPECT_EQ(e->del("a"), Status::kOk);
  EXPECT_EQ(e->get("a", v), Status::kNotFound);
  EXPECT_EQ(e->del("a"), Status::kNotFound);
  const StatsSnapshot s = e->stats();
  EXPECT_EQ(s.items, 0u);
  EXPECT_EQ(s.puts, 2u);
  EXPECT_EQ(s.dels, 1u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 2u);
}

TEST_P(EngineTest, EmptyValueIsAValue) {
  auto e = make();
  ASSERT_EQ(e->put("k", ""), Status::kOk);
  ItemView v;
  v.value = "junk";
  ASSERT_EQ(e->get("k", v), Status::kOk);
  EXPECT_TRUE(v.value.empty());
}

TEST_P(EngineTest, KeysAreComparedInFullAtEveryLength) {
  auto e = make();
  // Keys 1..250 bytes that share prefixes: a prefix must never match a longer key.
  for (size_t n = 1; n <= kMaxKeySize; ++n) {
    ASSERT_EQ(e->put(std::string(n, 'x'), std::to_string(n)), Status::kOk) << n;
  }
  ItemView v;
  for (size_t n = 1; n <= kMaxKeySize; ++n) {
    ASSERT_EQ(e->get(std::string(n, 'x'), v), Status::kOk) << n;
    EXPECT_EQ(v.value, std::to_string(n));
  }
  EXPECT_EQ(e->stats().items, kMaxKeySize);
  // Same length, last byte differs.
  std::string k(kMaxKeySize, 'x');
  k.back() = 'y';
  EXPECT_EQ(e->get(k, v), Status::kNotFound);
}

TEST_P(EngineTest, SizeLimits) {
  auto e = make();
  const std::string max_key(kMaxKeySize, 'k');
  const std::string max_value(kDefaultMaxValueSize, 'v');
  ASSERT_EQ(e->put(max_key, max_value), Status::kOk);
  ItemView v;
  ASSERT_EQ(e->get(max_key, v), Status::kOk);
  EXPECT_EQ(v.value, max_value);
  EXPECT_EQ(e->put(std::string(kMaxKeySize + 1, 'k'), "v"), Status::kTooLarge);
  EXPECT_EQ(e->get(std::string(kMaxKeySize + 1, 'k'), v), Status::kTooLarge);
  EXPECT_EQ(e->del(std::string(kMaxKeySize + 1, 'k')), Status::kTooLarge);
  EXPECT_EQ(e->put("k", std::string(kDefaultMaxValueSize + 1, 'v')), Status::kTooLarge);
  EXPECT_EQ(e->put("", "v"), Status::kInvalidKey);
  EXPECT_EQ(e->get("", v), Status::kInvalidKey);
  EXPECT_EQ(e->stats().too_large, 6u);
  EXPECT_EQ(e->stats().items, 1u);
}

TEST_P(EngineTest, ValueLimitIsConfigurableTo1MiB) {
  max_value_ = size_t{1} << 20;
  auto e = make(size_t{8} << 20);
  const std::string big(max_value_, 'b');
  ASSERT_EQ(e->put("big", big), Status::kOk);
  ItemView v;
  ASSERT_EQ(e->get("big", v), Status::kOk);
  EXPECT_EQ(v.value, big);
  EXPECT_EQ(e->put("big", big + "x"), Status::kTooLarge);
}

TEST_P(EngineTest, BadOptionsThrowAtSetUp) {
  auto o = small_options(size_t{1} << 20, 0);
  o.max_value_size = kMaxValueSizeLimit + 1;
  EXPECT_THROW(make_engine(GetParam(), o), std::runtime_error);
  o = small_options(4096, 1024);  // index alone is 64 KiB
  EXPECT_THROW(make_engine(GetParam(), o), std::runtime_error);
}

TEST_P(EngineTest, VersionsAreBumpedOnEveryUpdate) {
  auto e = make();
  uint64_t v1 = 0, v2 = 0, v3 = 0;
  ASSERT_EQ(e->put("a", "1", {}, &v1), Status::kOk);
  ASSERT_EQ(e->put("a", "2", {}, &v2), Status::kOk);
  ASSERT_EQ(e->put("b", "x", {}, &v3), Status::kOk);
  EXPECT_NE(v1, 0u);
  EXPECT_GT(v2, v1);
  EXPECT_NE(v3, v2);
  ItemView v;
  ASSERT_EQ(e->get("a", v), Status::kOk);
  EXPECT_EQ(v.version, v2);
}

TEST_P(EngineTest, CompareAndSet) {
  auto e = make();
  uint64_t v1 = 0, v2 = 0;
  EXPECT_EQ(e->put("a", "1", PutOptions{.expected_version = 5}), Status::kNotFound);
  ASSERT_EQ(e->put("a", "1", {}, &v1), Status::kOk);
  EXPECT_EQ(e->put("a", "2", PutOptions{.expected_version = v1 + 100}), Status::kVersionMismatch);
  ItemView v;
  ASSERT_EQ(e->get("a", v), Status::kOk);
  EXPECT_EQ(v.value, "1");
  ASSERT_EQ(e->put("a", "2", PutOptions{.expected_version = v1}, &v2), Status::kOk);
  EXPECT_NE(v2, v1);
  // The old version is stale now.
  EXPECT_EQ(e->put("a", "3", PutOptions{.expected_version = v1}), Status::kVersionMismatch);
  ASSERT_EQ(e->get("a", v), Status::kOk);
  EXPECT_EQ(v.value, "2");
  EXPECT_EQ(e->stats().version_mismatches, 2u);
}

TEST_P(EngineTest, VersionCounterWrapsAroundSkippingZero) {
  auto o = small_options(size_t{8} << 20, 1024);
  o.first_version = UINT64_MAX - 1;
  auto e = make_engine(GetParam(), o);
  uint64_t v[4] = {};
  for (auto& x : v) ASSERT_EQ(e->put("a", "x", {}, &x), Status::kOk);
  EXPECT_EQ(v[0], UINT64_MAX - 1);
  EXPECT_EQ(v[1], UINT64_MAX);
  EXPECT_EQ(v[2], 1u);  // 0 is "no expected version", never handed out
  EXPECT_EQ(v[3], 2u);
  // A CAS on the wrapped version still works.
  EXPECT_EQ(e->put("a", "y", PutOptions{.expected_version = v[3]}), Status::kOk);
}

TEST_P(EngineTest, ExpiryIsCheckedLazily) {
  auto e = make();
  ASSERT_EQ(e->put("t", "v", PutOptions{.expire_at = clock_.now + 10}), Status::kOk);
  ASSERT_EQ(e->put("forever", "v"), Status::kOk);
  ItemView v;
  ASSERT_EQ(e->get("t", v), Status::kOk);
  EXPECT_EQ(v.expire_at, clock_.now + 10);
  clock_.now += 9;
  EXPECT_EQ(e->get("t", v), Status::kOk);
  clock_.now += 1;  // expire_at reached: gone
  EXPECT_EQ(e->get("t", v), Status::kNotFound);
  EXPECT_EQ(e->stats().expired, 1u);
  EXPECT_EQ(e->stats().items, 1u);
  EXPECT_EQ(e->get("forever", v), Status::kOk);
  // CAS on an expired item: not found; DELETE of an expired item: not found.
  ASSERT_EQ(e->put("u", "v", PutOptions{.expire_at = clock_.now + 1}), Status::kOk);
  ASSERT_EQ(e->put("w", "v", PutOptions{.expire_at = clock_.now + 1}), Status::kOk);
  ASSERT_EQ(e->get("u", v), Status::kOk);
  const uint64_t uv = v.version;
  clock_.now += 1;
  EXPECT_EQ(e->put("u", "v2", PutOptions{.expected_version = uv}), Status::kNotFound);
  EXPECT_EQ(e->del("w"), Status::kNotFound);
  EXPECT_EQ(e->stats().expired, 3u);
  // A plain put over an expired item makes a fresh one.
  ASSERT_EQ(e->put("u", "v3"), Status::kOk);
  ASSERT_EQ(e->get("u", v), Status::kOk);
  EXPECT_EQ(v.value, "v3");
  EXPECT_EQ(v.expire_at, 0u);
}

TEST_P(EngineTest, ValueMayAliasEngineMemory) {
  auto e = make();
  ASSERT_EQ(e->put("src", std::string(100, 's')), Status::kOk);
  ItemView v;
  ASSERT_EQ(e->get("src", v), Status::kOk);
  ASSERT_EQ(e->put("src", v.value.substr(0, 50)), Status::kOk);  // overwrite itself
  ASSERT_EQ(e->get("src", v), Status::kOk);
  EXPECT_EQ(v.value, std::string(50, 's'));
  ASSERT_EQ(e->put("dst", v.value), Status::kOk);
  ASSERT_EQ(e->get("dst", v), Status::kOk);
  EXPECT_EQ(v.value, std::string(50, 's'));
}

TEST_P(EngineTest, MemoryRegionIsExposed) {
  auto e = make(size_t{4} << 20);
  const MemoryRegion r = e->memory();
  ASSERT_NE(r.base, nullptr);
  // pilaf: the extent region only (its table is a second region, PilafEngine::current()).
  EXPECT_GE(r.size, GetParam() == EngineKind::kPilaf ? size_t{1} << 20 : size_t{4} << 20);
  ASSERT_EQ(e->put("k", "hello"), Status::kOk);
  ItemView v;
  ASSERT_EQ(e->get("k", v), Status::kOk);
  // The value view points into the registered region (zero copy).
  const auto* p = reinterpret_cast<const std::byte*>(v.value.data());
  EXPECT_GE(p, r.base);
  EXPECT_LT(p, r.base + r.size);
}

TEST_P(EngineTest, BatchFormWritesResponses) {
  auto e = make();
  std::vector<Request> reqs;
  const char* keys[] = {"a", "b", "a", "c"};
  reqs.push_back({Op::kPut, hash_key("a"), "a", "1", {}});
  reqs.push_back({Op::kPut, hash_key("b"), "b", "2", {}});
  reqs.push_back({Op::kDel, hash_key("b"), "b", {}, {}});
  for (const char* k : keys) reqs.push_back({Op::kGet, hash_key(k), k, {}, {}});
  std::vector<Response> resp(reqs.size());
  e->run_batch(reqs, resp);
  EXPECT_EQ(resp[0].status, Status::kOk);
  EXPECT_EQ(resp[2].status, Status::kOk);
  EXPECT_EQ(resp[3].status, Status::kOk);
  EXPECT_EQ(resp[3].value, "1");
  EXPECT_EQ(resp[3].version, resp[0].version);
  EXPECT_EQ(resp[4].status, Status::kNotFound);
  EXPECT_EQ(resp[5].value, "1");
  EXPECT_EQ(resp[6].status, Status::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineTest,
                         ::testing::Values(EngineKind::kCache, EngineKind::kStore, EngineKind::kPilaf),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(EngineNames, RoundTrip) {
  EXPECT_EQ(engine_kind_from_string("cache"), EngineKind::kCache);
  EXPECT_EQ(engine_kind_from_string("store"), EngineKind::kStore);
  EXPECT_EQ(engine_kind_from_string("Cache"), std::nullopt);
  EXPECT_EQ(engine_kind_from_string(""), std::nullopt);
  EXPECT_STREQ(to_string(EngineKind::kCache), "cache");
  EXPECT_STREQ(to_string(Status::kVersionMismatch), "version_mismatch");
  EXPECT_STREQ(to_string(Status::kNoSpace), "no_space");
}

TEST(Hashing, PartitionBucketAndTagAreIndependentBits) {
  // Fix the partition bits and vary the rest: bucket and tag must not move.
  const KeyHash a{0x1234'5678'9abc'def0ULL};
  const KeyHash b{0x1234'0000'9abc'def0ULL};
  EXPECT_EQ(bucket_of(a, 0xffff), bucket_of(b, 0xffff));
  EXPECT_EQ(tag_of(a), tag_of(b));
  EXPECT_NE(partition_of(a, 1000), partition_of(b, 1000));
  EXPECT_EQ(tag_of(KeyHash{0x0000'ffff'ffff'ffffULL}), 1);  // tag 0 is reserved
  for (uint32_t n : {1u, 3u, 16u, 1000u}) {
    for (uint64_t i = 0; i < 1000; ++i) EXPECT_LT(partition_of(hash_key(std::to_string(i)), n), n);
  }
  EXPECT_EQ(hash_key("abc"), hash_key(std::string("abc")));
  EXPECT_NE(hash_key("abc").h, hash_key("abd").h);
}

}  // namespace
}  // namespace fabkv::store
