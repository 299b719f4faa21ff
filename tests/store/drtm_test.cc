// The drtm engine and DrTM-KV's item rules (proto/drtm/wire.h): the engine against a model map,
// the worker's moves around a lock a client holds, and the judgement of item copies whose
// bytes come from different moments of a PUT (a READ racing a WRITE, bytes landing in any
// order), which must give the old value whole, the new value whole, or "READ again", never a
// mix.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "proto/drtm/engine.h"
#include "proto/drtm/wire.h"
#include "test_util.h"

namespace fabkv::store {
namespace {

using testing::FakeClock;
using testing::kScale;
using testing::small_options;

std::atomic_ref<uint64_t> lock_word(std::byte* item) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(item));
}

// A client's GET on raw memory: the item the key's bucket chain names, judged by read_item.
drtm::ItemRead client_read(const drtm::Engine& e, std::string_view key, drtm::ItemValue* out,
                           std::vector<char>* copy) {
  const drtm::Regions& r = e.regions();
  uint64_t b = drtm::key_place(key, r.main_buckets).bucket;
  const uint16_t tag = drtm::key_place(key, r.main_buckets).tag;
  for (int hops = 0; hops < 64; ++hops) {
    drtm::Bucket bk;
    if (!drtm::read_bucket(r.table + b * sizeof(drtm::Bucket), b, &bk))
      return drtm::ItemRead::kTorn;
    for (const drtm::BucketSlot& s : bk.slots) {
      if (s.bytes == 0 || drtm::slot_tag(s) != tag) continue;
      copy->assign(reinterpret_cast<const char*>(r.items) + drtm::slot_offset(s),
                   reinterpret_cast<const char*>(r.items) + drtm::slot_offset(s) + s.bytes);
      drtm::ItemRead res = drtm::read_item(copy->data(), copy->size(), key, s.incarnation, out);
      if (res != drtm::ItemRead::kMoved) return res;
    }
    if (bk.next == 0) break;
    b = bk.next;
  }
  return drtm::ItemRead::kMoved;  // not found
}

TEST(DrtmEngine, ModelMapWithClientReadsOfTheRawMemory) {
  FakeClock clock;
  drtm::EngineConfig d;
  d.table_bytes = 64 * sizeof(drtm::Bucket);  // 48 main buckets: chains into overflow buckets
  d.retire_grace_ms = 0;                      // memory reused at once: stale locations are tested
  drtm::Engine e(small_options(size_t{8} << 20, 0, &clock), d);
  EXPECT_EQ(e.name(), "drtm");
  std::map<std::string, std::pair<std::string, uint64_t>> model;
  std::map<std::string, uint64_t> last_version;  // per key, across deletes
  std::mt19937_64 rng(1);
  const int kOps = 400 * kScale;
  for (int i = 0; i < kOps; ++i) {
    std::string key = "key-" + std::to_string(rng() % 300);
    const int op = static_cast<int>(rng() % 10);
    if (op < 4) {
      std::string value(1 + rng() % 90, static_cast<char>('a' + i % 26));
      uint64_t v = 0;
      auto it = model.find(key);
      uint64_t expected = 0;
      if (it != model.end() && rng() % 4 == 0) expected = it->second.second + (rng() % 2);
      Status s = e.put(key, value, PutOptions{expected, 0, 0}, &v);
      if (expected != 0 && expected != it->second.second) {
        ASSERT_EQ(s, Status::kVersionMismatch) << i;
        continue;
      }
      if (s == Status::kNoSpace) continue;  // all overflow buckets used
      ASSERT_EQ(s, Status::kOk) << i;
      ASSERT_GT(v, last_version[key]) << "versions of a key only grow, across deletes";
      last_version[key] = v;
      model[key] = {value, v};
    } else if (op < 8) {
      ItemView iv;
      Status s = e.get(key, iv);
      auto it = model.find(key);
      if (it == model.end()) {
        ASSERT_EQ(s, Status::kNotFound) << i;
      } else {
        ASSERT_EQ(s, Status::kOk) << i;
        ASSERT_EQ(iv.value, it->second.first);
        ASSERT_EQ(iv.version, it->second.second);
        // The client's rules on the raw memory agree.
        drtm::ItemValue cv;
        std::vector<char> copy;
        ASSERT_EQ(client_read(e, key, &cv, &copy), drtm::ItemRead::kValue) << i;
        ASSERT_EQ(cv.value, it->second.first);
        ASSERT_EQ(cv.version, it->second.second);
      }
    } else {
      Status s = e.del(key);
      ASSERT_EQ(s, model.erase(key) ? Status::kOk : Status::kNotFound) << i;
    }
    if (i % 97 == 0) {
      e.housekeeping();
      ASSERT_EQ(e.check(), "") << i;
    }
  }
  EXPECT_GT(e.drtm_stats().overflow_used, 0u) << "the chains were exercised";
  EXPECT_GT(e.drtm_stats().in_place, 0u);
  EXPECT_GT(e.drtm_stats().superseded, 0u) << "values that outgrew their item";
  // Expiry by the engine's clock.
  ASSERT_EQ(e.put("ttl", "soon", PutOptions{0, clock.now + 5, 0}), Status::kOk);
  ItemView iv;
  ASSERT_EQ(e.get("ttl", iv), Status::kOk);
  clock.now += 5;
  EXPECT_EQ(e.get("ttl", iv), Status::kNotFound);
  EXPECT_EQ(e.item_of("ttl"), nullptr) << "an expired item is removed on access";
  EXPECT_EQ(e.check(), "");
}

TEST(DrtmEngine, TheWorkerWorksAroundALockAClientHolds) {
  drtm::Engine e(small_options(size_t{4} << 20, 0));
  uint64_t v0 = 0;
  ASSERT_EQ(e.put("k", "old-value", {}, &v0), Status::kOk);
  std::byte* item = e.item_of("k");
  ASSERT_NE(item, nullptr);
  // A client takes the lock (its CAS) and starts to WRITE the other record.
  const uint32_t inc = drtm::incarnation_of(lock_word(item).load());
  uint64_t w = drtm::unlocked(v0, inc);
  ASSERT_TRUE(lock_word(item).compare_exchange_strong(w, drtm::locked(v0, inc)));
  ItemView iv;
  ASSERT_EQ(e.get("k", iv), Status::kOk) << "the current record stays whole";
  EXPECT_EQ(iv.value, "old-value");
  EXPECT_EQ(iv.version, v0);
  // A CAS PUT by message: the holder's PUT counts as done first (version v0 + 1).
  EXPECT_EQ(e.put("k", "x", PutOptions{v0, 0, 0}), Status::kVersionMismatch);
  // The worker replaces the item instead of waiting for the holder (who may be dead).
  uint64_t v1 = 0;
  ASSERT_EQ(e.put("k", "new-value", {}, &v1), Status::kOk);
  EXPECT_GT(v1, v0 + 1) << "above the version the holder would release to";
  EXPECT_EQ(lock_word(item).load(), drtm::kRetired) << "the holder's release CAS will fail";
  EXPECT_NE(e.item_of("k"), item);
  ASSERT_EQ(e.get("k", iv), Status::kOk);
  EXPECT_EQ(iv.value, "new-value");
  EXPECT_EQ(e.drtm_stats().locked_seen, 1u);
  // DELETE of a locked item retires it too.
  std::byte* item2 = e.item_of("k");
  const uint32_t inc2 = drtm::incarnation_of(lock_word(item2).load());
  EXPECT_NE(inc2, inc);
  w = drtm::unlocked(v1, inc2);
  ASSERT_TRUE(lock_word(item2).compare_exchange_strong(w, drtm::locked(v1, inc2)));
  ASSERT_EQ(e.del("k"), Status::kOk);
  EXPECT_EQ(lock_word(item2).load(), drtm::kRetired);
  EXPECT_EQ(e.get("k", iv), Status::kNotFound);
  uint64_t v2 = 0;
  ASSERT_EQ(e.put("k", "again", {}, &v2), Status::kOk);
  EXPECT_GT(v2, v1 + 1);
  EXPECT_EQ(e.check(), "");
}

TEST(DrtmEngine, RefusesWhatDoesNotFitAndChangesNothing) {
  drtm::EngineConfig d;
  d.table_bytes = 20 * sizeof(drtm::Bucket);  // 15 main + 5 overflow buckets
  drtm::Engine e(small_options(size_t{1} << 20, 0), d);
  int stored = 0;
  for (int i = 0; i < 1000; ++i) {
    Status s = e.put("k" + std::to_string(i), std::string(64, 'v'));
    if (s == Status::kNoSpace) break;
    ASSERT_EQ(s, Status::kOk);
    ++stored;
  }
  EXPECT_LE(stored, 20 * 7);
  EXPECT_EQ(e.stats().no_space, 1u);
  EXPECT_EQ(e.check(), "");
  ItemView iv;
  for (int i = 0; i < stored; ++i) ASSERT_EQ(e.get("k" + std::to_string(i), iv), Status::kOk);
  EXPECT_EQ(e.put("k", std::string(e.max_value_size() + 1, 'v')), Status::kTooLarge);
  EXPECT_EQ(e.put("", "v"), Status::kInvalidKey);
}

// ---- item copies whose bytes come from different moments ----------------------------------

// A standalone item (as the engine lays it out) that the test drives as clients would.
struct TestItem {
  std::string key = "the-key";
  uint32_t capacity = 64;
  std::vector<uint64_t> mem;  // 8-byte aligned
  uint64_t head = 0;
  TestItem(uint64_t version, const std::string& value) {
    mem.assign(drtm::item_bytes(static_cast<uint16_t>(key.size()), capacity) / 8, 0);
    drtm::ItemHead h{};
    h.lock = drtm::unlocked(version, 7);
    h.incarnation = 7;
    h.capacity = capacity;
    h.key_len = static_cast<uint16_t>(key.size());
    h.head_check = drtm::head_check(h, key);
    head = h.head_check;
    std::memcpy(bytes(), &h, sizeof(h));
    std::memcpy(bytes() + sizeof(h), key.data(), key.size());
    write_record(version, value);
  }
  char* bytes() { return reinterpret_cast<char*>(mem.data()); }
  size_t size() const { return mem.size() * 8; }
  size_t record_at(uint64_t version) const {
    return drtm::record_offset(static_cast<uint16_t>(key.size()), capacity,
                               static_cast<uint32_t>(version & 1));
  }
  void write_record(uint64_t version, const std::string& value) {
    drtm::build_record(bytes() + record_at(version), version, 0, value, head);
  }
  void set_lock(uint64_t w) { std::memcpy(bytes(), &w, 8); }
};

// The states a PUT by a client passes through, byte by byte: CAS (lock), the WRITE's bytes in
// a random order, CAS (release). Returns every intermediate image of the item.
std::vector<std::vector<char>> put_states(TestItem& it, uint64_t v, const std::string& value,
                                          std::mt19937_64& rng) {
  std::vector<std::vector<char>> states;
  auto snap = [&] { states.emplace_back(it.bytes(), it.bytes() + it.size()); };
  it.set_lock(drtm::locked(v, 7));
  snap();
  std::vector<char> rec(drtm::record_bytes(it.capacity));
  const size_t len = drtm::build_record(rec.data(), v + 1, 0, value, it.head);
  std::vector<size_t> order(len);
  for (size_t i = 0; i < len; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t i : order) {
    it.bytes()[it.record_at(v + 1) + i] = rec[i];
    snap();
  }
  it.set_lock(drtm::unlocked(v + 1, 7));
  snap();
  return states;
}

TEST(DrtmItems, ACopyMixedFromAnyMomentsIsTheOldOrTheNewValueWholeOrTorn) {
  std::mt19937_64 rng(11);
  const std::vector<std::string> values = {"value-A-aaaaaaaaaaaaaaa", "value-B-bb",
                                           "value-C-cccccccccccccccccccccccccccccccc",
                                           "value-D-ddddddddddd"};
  uint64_t whole = 0, torn = 0;
  for (int round = 0; round < 20 * kScale; ++round) {
    // Three PUTs in a row (A -> B -> C -> D), so that a record is overwritten while a reader
    // may still take the lock word that called it current.
    TestItem it(10, values[0]);
    std::vector<std::vector<char>> states;
    states.emplace_back(it.bytes(), it.bytes() + it.size());
    for (int p = 1; p < 4; ++p) {
      auto s = put_states(it, 10 + p - 1, values[p], rng);
      states.insert(states.end(), s.begin(), s.end());
    }
    for (int copy = 0; copy < 200; ++copy) {
      // A READ's copy: each byte taken at its own moment, in no order (docs/fabric.md).
      // Windows of moments of varied width, from a few bytes apart to the whole history.
      const size_t lo = rng() % states.size();
      const size_t width = 1 + rng() % (states.size() - lo);
      std::vector<uint64_t> buf(it.mem.size());
      char* c = reinterpret_cast<char*>(buf.data());
      for (size_t i = 0; i < it.size(); ++i) c[i] = states[lo + rng() % width][i];
      drtm::ItemValue v;
      const drtm::ItemRead r = drtm::read_item(c, it.size(), it.key, 7, &v);
      ASSERT_NE(r, drtm::ItemRead::kRetired);
      ASSERT_NE(r, drtm::ItemRead::kMoved) << "head bytes never change";
      if (r == drtm::ItemRead::kTorn) {
        ++torn;
        continue;
      }
      ++whole;
      ASSERT_GE(v.version, 10u);
      ASSERT_LE(v.version, 13u);
      ASSERT_EQ(std::string(v.value), values[v.version - 10]) << "round " << round;
    }
  }
  EXPECT_GT(whole, 0u);
  EXPECT_GT(torn, 0u) << "the test made torn copies";
}

TEST(DrtmItems, BytesLandingBetweenTheReadersLoadsNeverPassAsAValue) {
  // The worker reads live memory (read_item on the item itself); on verbs the NIC changes it
  // meanwhile. Land one PUT's bytes one at a time, in random order, between the reader's loads.
  std::mt19937_64 rng(12);
  uint64_t values_seen = 0, torn = 0;
  for (int round = 0; round < 50 * kScale; ++round) {
    TestItem it(20, "old-old-old-old");
    const std::string next = round % 2 ? "new" : "new-new-new-new-new-new-new-new";
    std::vector<std::vector<char>> states = put_states(it, 20, next, rng);
    auto s2 = put_states(it, 21, "third-third", rng);
    states.insert(states.end(), s2.begin(), s2.end());
    TestItem live(20, "old-old-old-old");
    size_t step = rng() % states.size();
    auto landing = [&] {
      // Advance by a few states (a WRITE lands bytes at its own pace).
      step = std::min(states.size() - 1, step + rng() % 4);
      std::memcpy(live.bytes(), states[step].data(), live.size());
    };
    std::memcpy(live.bytes(), states[step].data(), live.size());
    drtm::ItemValue v;
    const drtm::ItemRead r = drtm::read_item(live.bytes(), live.size(), live.key, 7, &v, landing);
    if (r == drtm::ItemRead::kTorn) {
      ++torn;
      continue;
    }
    ASSERT_EQ(r, drtm::ItemRead::kValue);
    ++values_seen;
    const std::string got(v.value);
    if (v.version == 20) ASSERT_EQ(got, "old-old-old-old");
    else if (v.version == 21) ASSERT_EQ(got, next);
    else ASSERT_EQ(got, "third-third");
  }
  EXPECT_GT(values_seen, 0u);
  EXPECT_GT(torn, 0u);
}

TEST(DrtmItems, AReusedLocationIsNotTheKeysItem) {
  TestItem it(5, "mine");
  drtm::ItemValue v;
  ASSERT_EQ(drtm::read_item(it.bytes(), it.size(), it.key, 7, &v), drtm::ItemRead::kValue);
  EXPECT_EQ(drtm::read_item(it.bytes(), it.size(), it.key, 8, &v), drtm::ItemRead::kMoved)
      << "another incarnation";
  EXPECT_EQ(drtm::read_item(it.bytes(), it.size(), "the-kez", 7, &v), drtm::ItemRead::kMoved);
  EXPECT_EQ(drtm::read_item(it.bytes(), 40, it.key, 7, &v), drtm::ItemRead::kMoved)
      << "shorter than the item";
  EXPECT_EQ(drtm::read_item(it.bytes(), 16, it.key, 7, &v), drtm::ItemRead::kTorn)
      << "shorter than a head";
  it.set_lock(drtm::kRetired);
  EXPECT_EQ(drtm::read_item(it.bytes(), it.size(), it.key, 7, &v), drtm::ItemRead::kRetired);
  // A torn head (one byte of the capacity) is not trusted for anything.
  TestItem t(5, "mine");
  t.bytes()[offsetof(drtm::ItemHead, capacity)] ^= 8;
  EXPECT_EQ(drtm::read_item(t.bytes(), t.size(), t.key, 7, &v), drtm::ItemRead::kMoved);
}

TEST(DrtmItems, ATornBucketFailsItsCheck) {
  drtm::Bucket b{};
  b.slots[2] = {drtm::slot_word(4096, 0xbeef), 200, 3};
  b.check = drtm::bucket_check(b, 9);
  drtm::Bucket out;
  ASSERT_TRUE(drtm::read_bucket(&b, 9, &out));
  EXPECT_FALSE(drtm::read_bucket(&b, 10, &out)) << "the check binds the bucket's index";
  for (size_t i = 0; i < offsetof(drtm::Bucket, check); ++i) {
    drtm::Bucket t = b;
    reinterpret_cast<char*>(&t)[i] ^= 1;
    EXPECT_FALSE(drtm::read_bucket(&t, 9, &out)) << "byte " << i;
  }
}

}  // namespace
}  // namespace fabkv::store
