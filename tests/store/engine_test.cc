// Behaviour all engines share: the API contract of engine.h.
#include "store/engine.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "proto/registry.h"
#include "store/limits.h"
#include "test_util.h"

namespace fabkv::store {
namespace {

using testing::FakeClock;
using testing::small_options;

class EngineTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::unique_ptr<Engine> make(size_t memory = size_t{8} << 20, size_t buckets = 1024) {
    auto o = small_options(memory, buckets, &clock_);
    o.max_value_size = max_value_;
    return proto::make_engine(GetParam(), o);
  }
  FakeClock clock_;
  size_t max_value_ = kDefaultMaxValueSize;
};

TEST_P(EngineTest, PutGetDelete) {
  auto e = make();
  EXPECT_EQ(e->name(), GetParam());
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
  EXPECT_THROW(proto::make_engine(GetParam(), o), std::runtime_error);
  o = small_options(4096, 1024);  // index alone is 64 KiB
  EXPECT_THROW(proto::make_engine(GetParam(), o), std::runtime_error);
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
  auto e = proto::make_engine(GetParam(), o);
  uint64_t v[4] = {};
  for (auto& x : v) ASSERT_EQ(e->put("a", "x", {}, &x), Status::kOk);
  EXPECT_EQ(v[0], UINT64_MAX - 1);
  EXPECT_EQ(v[1], UINT64_MAX);
  EXPECT_EQ(v[2], 1u);  // 0 is "no expected version", never handed out
  EXPECT_EQ(v[3], 2u);
  // A CAS on the wrapped version still works.
  EXPECT_EQ(e->put("a", "y", PutOptions{.expected_version = v[3]}), Status::kOk);
}

// The op log's replay path: every restored item keeps the version it was logged with, and the
// counter moves past all of them, so a new PUT never hands out a restored version again (a
// client's old version must not match a different item after a restart).
TEST_P(EngineTest, RestoredVersionsAreKeptAndNeverHandedOutAgain) {
  auto e = make();
  struct Logged {
    const char* key;
    uint64_t version;
    uint32_t expire_at;
  };
  // Sparse and not starting at the counter: a log whose earlier records were dropped (a put
  // that no longer fits) or a server that ran a long time.
  const Logged log[] = {
      {"a", 7, 0}, {"b", 9, 0}, {"a", 40, clock_.now + 100}, {"c", 41, 0}, {"b", 1000, 0}};
  for (const Logged& l : log) {
    uint64_t got = 0;
    PutOptions p;
    p.expire_at = l.expire_at;
    p.restore_version = l.version;
    ASSERT_EQ(e->put(l.key, std::string("v") + std::to_string(l.version), p, &got), Status::kOk);
    EXPECT_EQ(got, l.version) << "put reports the restored version";
  }
  ItemView v;
  ASSERT_EQ(e->get("a", v), Status::kOk);
  EXPECT_EQ(v.version, 40u);
  EXPECT_EQ(v.value, "v40");
  EXPECT_EQ(v.expire_at, clock_.now + 100);
  ASSERT_EQ(e->get("b", v), Status::kOk);
  EXPECT_EQ(v.version, 1000u);
  ASSERT_EQ(e->get("c", v), Status::kOk);
  EXPECT_EQ(v.version, 41u);

  // New PUTs get versions past every restored one.
  uint64_t nv = 0;
  ASSERT_EQ(e->put("d", "new", {}, &nv), Status::kOk);
  EXPECT_EQ(nv, 1001u);
  ASSERT_EQ(e->put("a", "newer", {}, &nv), Status::kOk);
  EXPECT_EQ(nv, 1002u);

  // CAS with a restored version works; with an older one it is a mismatch.
  EXPECT_EQ(e->put("b", "x", PutOptions{.expected_version = 9}), Status::kVersionMismatch);
  ASSERT_EQ(e->put("b", "x", PutOptions{.expected_version = 1000}, &nv), Status::kOk);
  EXPECT_EQ(nv, 1003u);

  // A restore below the counter keeps that version and leaves the counter alone.
  PutOptions low;
  low.restore_version = 5;
  ASSERT_EQ(e->put("e", "old", low, &nv), Status::kOk);
  EXPECT_EQ(nv, 5u);
  ASSERT_EQ(e->get("e", v), Status::kOk);
  EXPECT_EQ(v.version, 5u);
  ASSERT_EQ(e->put("f", "next", {}, &nv), Status::kOk);
  EXPECT_EQ(nv, 1004u);

  // Through the batch form too.
  Request r{Op::kPut, hash_key("g"), "g", "batch", {}};
  r.put.restore_version = 5000;
  Response resp[1];
  e->run_batch(std::span<const Request>(&r, 1), resp);
  EXPECT_EQ(resp[0].status, Status::kOk);
  EXPECT_EQ(resp[0].version, 5000u);
  ASSERT_EQ(e->put("h", "after-batch", {}, &nv), Status::kOk);
  EXPECT_EQ(nv, 5001u);
}

TEST_P(EngineTest, RestoringTheLargestVersionWrapsTheCounterSkippingZero) {
  auto e = make();
  uint64_t nv = 0;
  PutOptions p;
  p.restore_version = UINT64_MAX;
  ASSERT_EQ(e->put("a", "x", p, &nv), Status::kOk);
  EXPECT_EQ(nv, UINT64_MAX);
  // The log continues after the wrap: versions 1, 2 (restored in log order) move it on.
  p.restore_version = 1;
  ASSERT_EQ(e->put("b", "x", p, &nv), Status::kOk);
  p.restore_version = 2;
  ASSERT_EQ(e->put("c", "x", p, &nv), Status::kOk);
  ASSERT_EQ(e->put("d", "x", {}, &nv), Status::kOk);
  EXPECT_EQ(nv, 3u);
  ItemView v;
  ASSERT_EQ(e->get("a", v), Status::kOk);
  EXPECT_EQ(v.version, UINT64_MAX);
}

TEST_P(EngineTest, ARestoreIsStillAPutForCasExpiryAndFailures) {
  auto e = make();
  uint64_t v1 = 0;
  ASSERT_EQ(e->put("a", "1", {}, &v1), Status::kOk);
  // expected_version still applies on the restore path.
  PutOptions p;
  p.restore_version = 77;
  p.expected_version = v1 + 1;
  EXPECT_EQ(e->put("a", "2", p), Status::kVersionMismatch);
  p.expected_version = v1;
  ASSERT_EQ(e->put("a", "2", p), Status::kOk);
  // A restore that fails (too large) leaves the counter where it was.
  PutOptions big;
  big.restore_version = 1u << 20;
  EXPECT_EQ(e->put("b", std::string(kDefaultMaxValueSize + 1, 'x'), big), Status::kTooLarge);
  uint64_t nv = 0;
  ASSERT_EQ(e->put("c", "x", {}, &nv), Status::kOk);
  EXPECT_EQ(nv, 78u);
  // A restored item that has expired meanwhile is gone, like any other.
  PutOptions old;
  old.restore_version = 90;
  old.expire_at = clock_.now;  // the clock has reached it
  ASSERT_EQ(e->put("t", "x", old), Status::kOk);
  ItemView v;
  EXPECT_EQ(e->get("t", v), Status::kNotFound);
  ASSERT_EQ(e->put("d", "x", {}, &nv), Status::kOk);
  EXPECT_EQ(nv, 91u) << "the counter moved past the expired item's version too";
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

// memcached's touch: a new expiry, and the value, flags and version as they were.
TEST_P(EngineTest, TouchChangesOnlyTheExpiry) {
  auto e = make();
  ASSERT_EQ(e->put("t", "value", PutOptions{.expire_at = clock_.now + 10, .flags = 7}),
            Status::kOk);
  ItemView before, after;
  ASSERT_EQ(e->get("t", before), Status::kOk);
  ASSERT_EQ(e->touch(hash_key("t"), "t", clock_.now + 100, &after), Status::kOk);
  EXPECT_EQ(after.value, "value");
  EXPECT_EQ(after.version, before.version);
  const std::string name(e->name());
  if (name == "cache" || name == "store") {  // the others keep no flags
    EXPECT_EQ(after.flags, 7u);
  }
  EXPECT_EQ(after.expire_at, clock_.now + 100);
  clock_.now += 50;  // past the old expiry, before the new one
  ItemView v;
  ASSERT_EQ(e->get("t", v), Status::kOk);
  EXPECT_EQ(v.expire_at, clock_.now + 50);
  EXPECT_EQ(v.version, before.version);
  EXPECT_EQ(e->touch(hash_key("none"), "none", 0, nullptr), Status::kNotFound);
  // A touch into the past ends the item; a touch of an expired item finds nothing.
  ASSERT_EQ(e->touch(hash_key("t"), "t", clock_.now, nullptr), Status::kOk);
  EXPECT_EQ(e->get("t", v), Status::kNotFound);
  EXPECT_EQ(e->touch(hash_key("t"), "t", 0, nullptr), Status::kNotFound);
  // The batch form.
  ASSERT_EQ(e->put("b", "bv", PutOptions{.flags = 3}), Status::kOk);
  Request r;
  r.op = Op::kTouch;
  r.hash = hash_key("b");
  r.key = "b";
  r.put.expire_at = clock_.now + 5;
  Response resp;
  e->run_batch(std::span<const Request>(&r, 1), std::span<Response>(&resp, 1));
  EXPECT_EQ(resp.status, Status::kOk);
  EXPECT_EQ(resp.value, "bv");
  EXPECT_EQ(resp.expire_at, clock_.now + 5);
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
  const EngineMemory r = e->memory();
  ASSERT_NE(r.base, nullptr);
  // pilaf: the extent region only (its table is a second region, pilaf::Engine::current()); farm:
  // the table only (values of small items are inline there; records are a second region);
  // hydradb: the item arena only (its index is not for clients).
  const std::string_view name = GetParam();
  const bool split = name == "pilaf" || name == "farm" || name == "hydradb";
  EXPECT_GE(r.size, split ? size_t{1} << 20 : size_t{4} << 20);
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

// scan (the memcached front end's key listings): every live item once, in pieces of at most
// `buckets` index buckets, nothing expired or deleted; engines whose tables clients READ list
// nothing.
TEST_P(EngineTest, ScanVisitsEveryLiveItemOnceInBoundedPieces) {
  auto e = make(size_t{8} << 20, 1024);
  std::map<std::string, uint64_t> want;
  for (int i = 0; i < 500; ++i) {
    const std::string k = "key" + std::to_string(i);
    PutOptions o;
    o.flags = static_cast<uint32_t>(i);
    o.expire_at = i % 10 == 9 ? clock_.now + 1 : 0;
    uint64_t v = 0;
    ASSERT_EQ(e->put(k, std::string(i % 7, 'v'), o, &v), Status::kOk);
    if (i % 10 != 9 && i % 10 != 8) want[k] = v;
  }
  for (int i = 8; i < 500; i += 10) ASSERT_EQ(e->del("key" + std::to_string(i)), Status::kOk);
  clock_.now += 2;  // the keys ending in 9 expire
  std::map<std::string, uint64_t> seen;
  uint64_t cursor = 0, pieces = 0;
  do {
    size_t in_piece = 0;
    cursor = e->scan(cursor, 16, [&](const ScanItem& it) {
      EXPECT_TRUE(seen.emplace(std::string(it.key), it.version).second) << it.key;
      EXPECT_EQ(it.value_size, std::stoul(std::string(it.key.substr(3))) % 7);
      EXPECT_EQ(it.flags, std::stoul(std::string(it.key.substr(3))));
      ++in_piece;
    });
    EXPECT_LE(in_piece, 16u * 8);  // at most 16 buckets' entries (cache: 8, store: 7 + chain)
    ++pieces;
  } while (cursor != 0 && pieces < 10000);
  if (std::string(GetParam()) != "cache" && std::string(GetParam()) != "store") {
    EXPECT_TRUE(seen.empty());
    return;
  }
  EXPECT_EQ(pieces, 1024u / 16);
  EXPECT_EQ(seen, want);
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineTest,
                         ::testing::Values("cache", "store", "pilaf", "farm", "hydradb"),
                         [](const auto& info) { return std::string(info.param); });

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
