// The hydradb engine (proto/hydradb/engine.h): item locations, out-of-place updates, the valid
// flag, delayed reuse, and a property test against a model map that also READs every address
// it was ever given, as a client holding it would (proto/hydradb/layout.h's check_item).
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "proto/hydradb/engine.h"
#include "proto/hydradb/layout.h"
#include "test_util.h"

namespace fabkv::store {
namespace {

using hydradb::ItemRead;
using testing::kScale;
using testing::small_options;

struct FakeSteady {
  uint64_t now = 1'000'000'000;
  static uint64_t read(void* self) { return static_cast<FakeSteady*>(self)->now; }
};

constexpr uint64_t kHold = 100'000'000;  // 100 ms

hydradb::EngineConfig hold_options(FakeSteady* clock, uint64_t hold = kHold) {
  hydradb::EngineConfig h;
  h.hold_ns = hold;
  h.steady = &FakeSteady::read;
  h.steady_ctx = clock;
  return h;
}

// What a client READing `n` bytes at `location` would find, for `key` at `version`.
ItemRead read_at(const hydradb::Engine& e, uint64_t location, std::string_view key,
                 size_t value_len, uint64_t version, std::string* value = nullptr) {
  const size_t n = hydradb::item_bytes(key.size(), value_len);
  EXPECT_LE(location + n, e.arena_bytes());
  std::string copy(reinterpret_cast<const char*>(e.arena()) + location, n);
  std::string_view v;
  ItemRead r = hydradb::check_item(copy.data(), n, key, version, &v);
  if (value != nullptr && r == ItemRead::kCurrent) *value = std::string(v);
  return r;
}

TEST(HydraEngine, GetSaysWhereTheItemIs) {
  FakeSteady clock;
  hydradb::Engine e(small_options(size_t{4} << 20, 64), hold_options(&clock));
  EXPECT_EQ(e.name(), "hydradb");
  uint64_t v1 = 0;
  ASSERT_EQ(e.put("k", "hello", {}, &v1), Status::kOk);
  ItemView iv;
  uint64_t loc = kNoLocation;
  ASSERT_EQ(e.get(hash_key("k"), "k", iv, &loc), Status::kOk);
  EXPECT_EQ(iv.value, "hello");
  EXPECT_EQ(iv.version, v1);
  ASSERT_NE(loc, kNoLocation);
  EXPECT_EQ(loc % 8, 0u);
  std::string value;
  EXPECT_EQ(read_at(e, loc, "k", 5, v1, &value), ItemRead::kCurrent);
  EXPECT_EQ(value, "hello");
  // Wrong version or wrong key: foreign, never taken.
  EXPECT_EQ(read_at(e, loc, "k", 5, v1 + 1), ItemRead::kForeign);
  EXPECT_EQ(read_at(e, loc, "j", 5, v1), ItemRead::kForeign);
  // A miss has no location.
  EXPECT_EQ(e.get(hash_key("x"), "x", iv, &loc), Status::kNotFound);
  EXPECT_EQ(loc, kNoLocation);
  EXPECT_EQ(e.check(), "");
}

TEST(HydraEngine, PutIsOutOfPlaceAndClearsTheOldFlag) {
  FakeSteady clock;
  hydradb::Engine e(small_options(size_t{4} << 20, 64), hold_options(&clock));
  uint64_t v1 = 0, v2 = 0;
  ASSERT_EQ(e.put("key", "old-value", {}, &v1), Status::kOk);
  ItemView iv;
  uint64_t l1 = 0, l2 = 0;
  ASSERT_EQ(e.get(hash_key("key"), "key", iv, &l1), Status::kOk);
  ASSERT_EQ(e.put("key", "new-value", {}, &v2), Status::kOk);
  ASSERT_EQ(e.get(hash_key("key"), "key", iv, &l2), Status::kOk);
  EXPECT_NE(l1, l2);
  EXPECT_EQ(read_at(e, l1, "key", 9, v1), ItemRead::kReplaced);
  EXPECT_EQ(read_at(e, l2, "key", 9, v2), ItemRead::kCurrent);
  ASSERT_EQ(e.del("key"), Status::kOk);
  EXPECT_EQ(read_at(e, l2, "key", 9, v2), ItemRead::kReplaced);
  auto hs = e.hydra_stats();
  EXPECT_EQ(hs.retired, 2u);
  EXPECT_EQ(hs.held_items, 2u);
  EXPECT_EQ(hs.reclaimed, 0u);
  EXPECT_EQ(e.check(), "");
  clock.now += kHold;
  EXPECT_EQ(e.reclaim(), 2u);
  EXPECT_EQ(e.hydra_stats().held_items, 0u);
  EXPECT_EQ(e.hydra_stats().held_bytes, 0u);
  EXPECT_EQ(e.check(), "");
}

// Memory held for leases is not handed out: a key rewritten until the arena is full gets
// kNoSpace (nothing changed), and the same PUT succeeds once the holds are over.
TEST(HydraEngine, HeldMemoryIsNotReusedBeforeTheHoldEnds) {
  FakeSteady clock;
  EngineOptions o = small_options(size_t{1} << 20, 16);
  o.max_value_size = 4096;
  hydradb::Engine e(o, hold_options(&clock));
  const std::string big(4000, 'v');
  std::vector<uint64_t> locations;
  Status st = Status::kOk;
  uint64_t version = 0;
  int puts = 0;
  for (; puts < 1000; ++puts) {
    st = e.put("k", big, {}, &version);
    if (st != Status::kOk) break;
    ItemView iv;
    uint64_t loc = 0;
    ASSERT_EQ(e.get(hash_key("k"), "k", iv, &loc), Status::kOk);
    for (uint64_t l : locations) EXPECT_NE(l, loc) << "reused while held";
    locations.push_back(loc);
    clock.now += 1000;  // 1 us per PUT: far inside the hold
  }
  ASSERT_EQ(st, Status::kNoSpace);
  EXPECT_GT(puts, 100);
  ItemView iv;
  ASSERT_EQ(e.get("k", iv), Status::kOk);
  EXPECT_EQ(iv.version, version);  // the refused PUT changed nothing
  EXPECT_EQ(e.stats().no_space, 1u);
  clock.now += kHold;
  ASSERT_EQ(e.put("k", big), Status::kOk);
  EXPECT_GT(e.hydra_stats().reclaimed, 0u);
  EXPECT_EQ(e.check(), "");
}

TEST(HydraEngine, BatchGivesTheLocationOfEveryHit) {
  FakeSteady clock;
  hydradb::Engine e(small_options(size_t{4} << 20, 64), hold_options(&clock));
  std::vector<std::string> keys;
  for (int i = 0; i < 50; ++i) {
    keys.push_back("key-" + std::to_string(i));
    if (i % 3 != 0) {
      ASSERT_EQ(e.put(keys.back(), "v" + std::to_string(i)), Status::kOk);
    }
  }
  std::vector<Request> reqs;
  for (const std::string& k : keys) {
    Request r;
    r.op = Op::kGet;
    r.key = k;
    r.hash = hash_key(k);
    reqs.push_back(r);
  }
  size_t seen = 0;
  e.run_batch(reqs, [&](size_t i, const Response& r) {
    ++seen;
    ItemView iv;
    uint64_t loc = 0;
    const Status st = e.get(reqs[i].hash, reqs[i].key, iv, &loc);
    EXPECT_EQ(r.status, st);
    EXPECT_EQ(r.location, loc);
    if (st == Status::kOk) {
      EXPECT_EQ(read_at(e, loc, reqs[i].key, iv.value.size(), iv.version), ItemRead::kCurrent);
    }
  });
  EXPECT_EQ(seen, keys.size());
}

TEST(HydraEngine, MadeByKind) {
  auto e = proto::make_engine("hydradb", small_options(size_t{4} << 20, 0));
  EXPECT_EQ(e->name(), "hydradb");
  EXPECT_EQ(e->put("a", "b"), Status::kOk);
}

// Property: random PUT/DEL/GET over few keys, with a clock moving by random steps, against a
// model map. Every address the engine ever gave out is READ after every step, as a client
// holding it would: while its hold can still be running it shows the item it was (current or
// replaced, never foreign bytes), and current exactly when the model says the key still has
// that version. Both kinds of READ must have happened, each seed: a READ of a replaced item is
// the race the readers are here for.
TEST(HydraEngine, PropertyAgainstModelWithReaders) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    std::mt19937_64 rng(seed);
    FakeSteady clock;
    EngineOptions o = small_options(size_t{2} << 20, 8);  // few buckets: extension chains
    o.max_value_size = 2048;
    hydradb::Engine e(o, hold_options(&clock));
    struct Model {
      std::string value;
      uint64_t version;
    };
    std::map<std::string, Model> model;
    struct Address {
      std::string key;
      uint64_t location, version;
      size_t value_len;
      uint64_t retired_at = 0;  // 0 = not yet (as far as the test knows)
    };
    std::vector<Address> addresses;
    uint64_t current_reads = 0, replaced_reads = 0;
    auto retire = [&](const std::string& key) {
      for (Address& a : addresses)
        if (a.key == key && a.retired_at == 0) a.retired_at = clock.now;
    };
    const int steps = 300 * kScale;
    for (int step = 0; step < steps; ++step) {
      const std::string key = "k" + std::to_string(rng() % 40);
      const int what = static_cast<int>(rng() % 10);
      if (what < 4) {
        const std::string value(rng() % (what == 0 ? 2000 : 40), char('a' + rng() % 26));
        uint64_t v = 0;
        const Status st = e.put(key, value, {}, &v);
        if (st == Status::kOk) {
          retire(key);
          model[key] = Model{value, v};
        } else {
          ASSERT_EQ(st, Status::kNoSpace);
        }
      } else if (what < 6) {
        const Status st = e.del(key);
        ASSERT_EQ(st, model.count(key) ? Status::kOk : Status::kNotFound);
        if (st == Status::kOk) retire(key);
        model.erase(key);
      } else {
        ItemView iv;
        uint64_t loc = 0;
        const Status st = e.get(hash_key(key), key, iv, &loc);
        auto it = model.find(key);
        if (it == model.end()) {
          ASSERT_EQ(st, Status::kNotFound);
        } else {
          ASSERT_EQ(st, Status::kOk);
          ASSERT_EQ(iv.value, it->second.value);
          ASSERT_EQ(iv.version, it->second.version);
          bool known = false;
          for (const Address& a : addresses)
            known = known || (a.location == loc && a.retired_at == 0 && a.key == key);
          if (!known) addresses.push_back(Address{key, loc, iv.version, iv.value.size()});
        }
      }
      clock.now += rng() % 3 == 0 ? rng() % (kHold / 4) : rng() % 1000;
      if (rng() % 50 == 0) e.reclaim();
      // Every address, READ as a client would.
      for (const Address& a : addresses) {
        const bool may_be_reused = a.retired_at != 0 && clock.now >= a.retired_at + kHold;
        if (may_be_reused) continue;  // a client's lease is over by then (docs/hydradb.md)
        std::string value;
        const ItemRead r = read_at(e, a.location, a.key, a.value_len, a.version, &value);
        auto it = model.find(a.key);
        const bool current = it != model.end() && it->second.version == a.version;
        ASSERT_EQ(r, current ? ItemRead::kCurrent : ItemRead::kReplaced)
            << "seed " << seed << " step " << step << " key " << a.key;
        (current ? current_reads : replaced_reads)++;
        if (current) {
          ASSERT_EQ(value, it->second.value);
        }
      }
      std::erase_if(addresses, [&](const Address& a) {
        return a.retired_at != 0 && clock.now >= a.retired_at + kHold;
      });
      if (step % 97 == 0) {
        ASSERT_EQ(e.check(), "") << "step " << step;
      }
    }
    ASSERT_EQ(e.check(), "");
    EXPECT_GT(e.hydra_stats().reclaimed, 0u) << "the test never let a hold end";
    EXPECT_GT(current_reads, 0u) << "seed " << seed;
    EXPECT_GT(replaced_reads, 0u) << "seed " << seed
                                  << ": no address was READ after its "
                                     "item was replaced";
    std::printf("seed %llu: %llu READs of current items, %llu of replaced ones\n",
                static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(current_reads),
                static_cast<unsigned long long>(replaced_reads));
  }
}

}  // namespace
}  // namespace fabkv::store
