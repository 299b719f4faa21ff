// Property tests: long random sequences of get/put/delete/expire against a std::unordered_map
// model, and the batch pipeline against the one-call form.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "proto/pilaf/engine.h"
#include "proto/registry.h"
#include "store/cache_engine.h"
#include "store/engine.h"
#include "store/pipeline.h"
#include "store/store_engine.h"
#include "test_util.h"

namespace fabkv::store {
namespace {

using testing::FakeClock;
using testing::kScale;
using testing::small_options;

struct ModelItem {
  std::string value;
  uint64_t version;
  uint32_t expire_at;
};

struct Workload {
  int keys;
  int max_value;
  int ops;
};

// Random keys of 1..kMaxKeySize bytes (mostly short) over a fixed key space.
std::vector<std::string> make_keys(int n, std::mt19937_64& rng) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) {
    const size_t len = rng() % 8 == 0 ? 1 + rng() % kMaxKeySize : 1 + rng() % 24;
    std::string k(len, '\0');
    for (auto& c : k) c = static_cast<char>(rng());  // any bytes, including 0
    k += std::to_string(i);                          // unique
    if (k.size() > kMaxKeySize) k = k.substr(k.size() - kMaxKeySize);
    keys.push_back(std::move(k));
  }
  return keys;
}

std::string make_value(std::mt19937_64& rng, int max_value) {
  std::string v(rng() % (max_value + 1), '\0');
  const char c = static_cast<char>(rng());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<char>(c + i);
  return v;
}

// Runs `w` against engine `e` and the model. `lossless` demands exact equality; otherwise a
// miss on a key the model has is allowed only once the engine reports eviction pressure.
void run_against_model(Engine& e, FakeClock& clock, const Workload& w, bool lossless,
                       uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto keys = make_keys(w.keys, rng);
  std::unordered_map<std::string, ModelItem> model;
  auto model_live = [&](const std::string& k) -> ModelItem* {
    auto it = model.find(k);
    if (it == model.end()) return nullptr;
    if (it->second.expire_at != 0 && clock.now >= it->second.expire_at) {
      model.erase(it);
      return nullptr;
    }
    return &it->second;
  };
  uint64_t misses_allowed_checks = 0;
  for (int op = 0; op < w.ops; ++op) {
    const std::string& k = keys[rng() % keys.size()];
    const int dice = static_cast<int>(rng() % 100);
    ModelItem* m = model_live(k);
    if (dice < 45) {
      ItemView v;
      const Status s = e.get(k, v);
      if (m == nullptr) {
        ASSERT_EQ(s, Status::kNotFound) << "op " << op << ": returned a deleted/expired key";
      } else if (s == Status::kOk) {
        ASSERT_EQ(v.value, m->value) << "op " << op << ": stale or foreign value";
        ASSERT_EQ(v.version, m->version);
        ASSERT_EQ(v.expire_at, m->expire_at);
      } else {
        ASSERT_EQ(s, Status::kNotFound);
        ASSERT_FALSE(lossless) << "op " << op << ": lossless engine lost a key";
        const StatsSnapshot st = e.stats();
        ASSERT_GT(st.evictions + st.index_drops, 0u) << "op " << op << ": miss without pressure";
        ++misses_allowed_checks;
        model.erase(k);  // the cache forgot it; so does the model
      }
    } else if (dice < 85) {
      PutOptions po;
      if (dice < 50) po.expire_at = clock.now + 1 + static_cast<uint32_t>(rng() % 5);
      const bool cas = dice >= 80;
      if (cas && m != nullptr) po.expected_version = rng() % 2 ? m->version : m->version + 1;
      if (cas && m == nullptr) po.expected_version = 1 + rng() % 1000;
      const std::string value = make_value(rng, w.max_value);
      uint64_t version = 0;
      const Status s = e.put(k, value, po, &version);
      if (cas && m == nullptr) {
        ASSERT_EQ(s, Status::kNotFound) << "op " << op;
      } else if (cas && s == Status::kNotFound && !lossless) {
        model.erase(k);  // the cache had already forgotten the key
      } else if (cas && po.expected_version != m->version) {
        ASSERT_EQ(s, Status::kVersionMismatch) << "op " << op;
      } else if (s == Status::kOk) {
        model[k] = ModelItem{value, version, po.expire_at};
      } else {
        FAIL() << "op " << op << ": put returned " << to_string(s);
      }
    } else if (dice < 97) {
      const Status s = e.del(k);
      if (m == nullptr) {
        ASSERT_EQ(s, Status::kNotFound) << "op " << op;
      } else if (lossless) {
        ASSERT_EQ(s, Status::kOk) << "op " << op;
      } else {
        ASSERT_TRUE(s == Status::kOk || s == Status::kNotFound) << "op " << op;
      }
      model.erase(k);
    } else {
      clock.now += 1;  // time passes; items with expire_at <= now are gone
    }
  }
  if (lossless) {
    // Final sweep: every live model key is in the engine, nothing else is.
    uint64_t live = 0;
    for (const auto& k : keys) {
      ModelItem* m = model_live(k);
      ItemView v;
      const Status s = e.get(k, v);
      if (m == nullptr) {
        ASSERT_EQ(s, Status::kNotFound);
      } else {
        ++live;
        ASSERT_EQ(s, Status::kOk);
        ASSERT_EQ(v.value, m->value);
      }
    }
    // Expired items still in the engine were just removed by the gets above.
    EXPECT_EQ(e.stats().items, live);
  }
  ::testing::Test::RecordProperty("allowed_misses", std::to_string(misses_allowed_checks));
}

TEST(StoreProperty, EqualsTheModelExactly) {
  FakeClock clock;
  auto e = make_engine(EngineKind::kStore, small_options(size_t{16} << 20, 512, &clock));
  run_against_model(*e, clock, {2000, 600, 25000 * kScale}, true, 1);
  auto* s = dynamic_cast<StoreEngine*>(e.get());
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->check(), "");
  EXPECT_GT(e->stats().overflow_buckets, 0u) << "the workload should exercise chaining";
}

TEST(StoreProperty, EqualsTheModelWithLargeValues) {
  FakeClock clock;
  auto e = make_engine(EngineKind::kStore, small_options(size_t{64} << 20, 64, &clock));
  run_against_model(*e, clock, {200, 20000, 3000 * kScale}, true, 2);
  ASSERT_EQ(dynamic_cast<StoreEngine*>(e.get())->check(), "");
}

TEST(PilafProperty, EqualsTheModelExactlyWhileGrowing) {
  FakeClock clock;
  auto o = small_options(size_t{64} << 20, 0, &clock);
  o.max_value_size = 4096;
  pilaf::EngineConfig p;
  p.initial_entries = 64;  // grows table and extents many times over the run
  p.initial_extent_bytes = 4096;
  p.retire_grace_ms = 0;
  pilaf::Engine e(o, p);
  run_against_model(e, clock, {2000, 600, 10000 * kScale}, true, 7);
  ASSERT_EQ(e.check(), "");
  EXPECT_GT(e.pilaf_stats().growths, 4u);
  EXPECT_GT(e.pilaf_stats().paths, 0u);
}

TEST(CacheProperty, NoMissesWithoutPressure) {
  FakeClock clock;
  // A log that never wraps and an index far from full: the cache must behave like a store.
  auto e = make_engine(EngineKind::kCache, small_options(size_t{192} << 20, 1 << 14, &clock));
  run_against_model(*e, clock, {1000, 200, 20000 * kScale}, true, 3);
  auto* c = dynamic_cast<CacheEngine*>(e.get());
  ASSERT_NE(c, nullptr);
  ASSERT_LT(c->log_tail(), c->log_capacity());
  EXPECT_EQ(e->stats().evictions, 0u);
  EXPECT_EQ(e->stats().index_drops, 0u);
}

TEST(CacheProperty, UnderPressureReturnsOnlyLatestValues) {
  FakeClock clock;
  // 64 KiB of log for ~3000 keys of up to 300 bytes: the log laps many times and buckets
  // overflow.
  auto o = small_options((size_t{64} << 10) + 64 * 64, 64, &clock);
  o.max_value_size = 4096;
  auto e = make_engine(EngineKind::kCache, o);
  run_against_model(*e, clock, {3000, 300, 40000 * kScale}, false, 4);
  const StatsSnapshot st = e->stats();
  EXPECT_GT(st.evictions, 0u);
  EXPECT_GT(st.index_drops, 0u);
  EXPECT_GT(st.hits, 0u);
}

// ---- pipeline form equals one-call form ----

struct Outcome {
  Status status;
  uint64_t version;
  std::string value;
  bool operator==(const Outcome&) const = default;
};

std::vector<Request> random_requests(const std::vector<std::string>& keys,
                                     std::vector<std::string>& values, int n,
                                     std::mt19937_64& rng) {
  std::vector<Request> reqs;
  for (int i = 0; i < n; ++i) {
    const std::string& k = keys[rng() % keys.size()];
    Request r;
    r.key = k;
    r.hash = hash_key(k);
    const int dice = static_cast<int>(rng() % 100);
    if (dice < 55) {
      r.op = Op::kGet;
    } else if (dice < 93) {
      r.op = Op::kPut;
      r.value = values[rng() % values.size()];
      if (dice >= 90) r.put.expected_version = 1 + rng() % 64;  // sometimes right
    } else {
      r.op = Op::kDel;
    }
    reqs.push_back(r);
  }
  return reqs;
}

void pipeline_equals_one_call(const char* engine, const EngineOptions& o, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto keys = make_keys(500, rng);
  std::vector<std::string> values;
  for (int i = 0; i < 64; ++i) values.push_back(make_value(rng, 400));
  auto one = proto::make_engine(engine, o);
  auto piped = proto::make_engine(engine, o);
  const int batches = 200 * kScale;
  for (int b = 0; b < batches; ++b) {
    const auto reqs = random_requests(keys, values, 1 + static_cast<int>(rng() % 64), rng);
    std::vector<Outcome> expect, got;
    for (const Request& r : reqs) {
      const Response resp = execute_one(*one, r);
      expect.push_back({resp.status, resp.version, std::string(resp.value)});
    }
    // Copy the value inside the callback: a later PUT of the batch may reuse its memory.
    const size_t gap = rng() % 6;  // 0 = default
    piped->run_batch(
        reqs,
        [&](size_t i, const Response& r) {
          ASSERT_EQ(i, got.size()) << "completions out of order";
          got.push_back({r.status, r.version, std::string(r.value)});
        },
        gap);
    ASSERT_EQ(got.size(), expect.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], expect[i]) << "batch " << b << " request " << i << " gap " << gap;
    }
  }
  const StatsSnapshot a = one->stats(), p = piped->stats();
  EXPECT_EQ(a.items, p.items);
  EXPECT_EQ(a.hits, p.hits);
  EXPECT_EQ(a.evictions, p.evictions);
  EXPECT_EQ(a.index_drops, p.index_drops);
}

TEST(PipelineProperty, EveryBatchLengthCompletesEachRequestOnceInOrder) {
  // run_pipeline has filling, steady and draining loops; around their edges (n = 0, n < 2 gap,
  // n = 2 gap, n > 2 gap) each request must still complete exactly once, in order.
  for (EngineKind kind : {EngineKind::kCache, EngineKind::kStore}) {
    auto e = make_engine(kind, small_options(size_t{8} << 20, 64));
    std::vector<std::string> keys;
    for (int i = 0; i < 24; ++i) keys.push_back("key" + std::to_string(i));
    for (size_t i = 0; i < keys.size(); i += 2) ASSERT_EQ(e->put(keys[i], keys[i]), Status::kOk);
    for (size_t gap = 1; gap <= 5; ++gap) {
      for (size_t n = 0; n <= keys.size(); ++n) {
        std::vector<Request> reqs;
        for (size_t i = 0; i < n; ++i)
          reqs.push_back({Op::kGet, hash_key(keys[i]), keys[i], {}, {}});
        size_t next = 0;
        e->run_batch(
            reqs,
            [&](size_t i, const Response& r) {
              ASSERT_EQ(i, next++);
              EXPECT_EQ(r.status, i % 2 == 0 ? Status::kOk : Status::kNotFound) << i;
              if (i % 2 == 0) {
                EXPECT_EQ(r.value, keys[i]);
              }
            },
            gap);
        EXPECT_EQ(next, n) << "gap " << gap;
      }
    }
  }
}

TEST(PipelineProperty, StoreBatchEqualsOneCall) {
  pipeline_equals_one_call("store", small_options(size_t{8} << 20, 64), 5);
}

TEST(PipelineProperty, PilafBatchEqualsOneCall) {
  pipeline_equals_one_call("pilaf", small_options(size_t{8} << 20, 0), 8);
}

TEST(PipelineProperty, FarmBatchEqualsOneCall) {
  pipeline_equals_one_call("farm", small_options(size_t{8} << 20, 0), 9);
}

// Replaced items are held for the default lease plus its margin of real time (hydradb/options.h):
// the arena must hold everything the run writes, or the two engines would run out of memory at
// different moments.
TEST(PipelineProperty, HydraBatchEqualsOneCall) {
  pipeline_equals_one_call("hydradb", small_options(size_t{64} << 20, 64), 10);
}

TEST(PipelineProperty, CacheBatchEqualsOneCallUnderPressure) {
  auto o = small_options((size_t{32} << 10) + 32 * 64, 32);
  o.max_value_size = 4096;
  pipeline_equals_one_call("cache", o, 6);
}

}  // namespace
}  // namespace fabkv::store
