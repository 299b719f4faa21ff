// The pilaf engine: behaviour through the Engine API, and the memory it exposes checked by an
// independent implementation of the client's lookup rules (proto/pilaf/layout.h).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "proto/pilaf/engine.h"
#include "proto/pilaf/layout.h"
#include "test_util.h"

namespace fabkv::store {
namespace {

using testing::FakeClock;
using testing::kScale;
using testing::small_options;

// ---- the client's rules, written again from layout.h (not the engine's code) ---------------

struct ClientResult {
  enum Kind { kFound, kNotFound, kRetired, kGaveUp } kind = kGaveUp;
  std::string value;
  uint64_t version = 0;
  uint32_t expire_at = 0;
  int entry_reads = 0;
};

pilaf::Entry read_entry(const pilaf::Generation& g, uint64_t slot) {
  pilaf::Entry e;
  std::memcpy(&e, g.table + pilaf::entry_offset(slot), sizeof e);
  return e;
}

ClientResult client_get(const pilaf::Generation& g, std::string_view key) {
  ClientResult r;
  pilaf::TableHeader h;
  std::memcpy(&h, g.table, sizeof h);
  if (h.magic != pilaf::kTableMagic || h.entries != g.entries) return r;
  uint64_t prev_moves = h.moves;
  const pilaf::KeySlots ks = pilaf::key_slots(key, h.entries);
  for (int round = 0; round < 8; ++round) {
    for (uint32_t i = 0; i < pilaf::kWays; ++i) {
      for (int retry = 0; retry < 4; ++retry) {
        const pilaf::Entry e = read_entry(g, ks.slot[i]);
        ++r.entry_reads;
        const pilaf::EntryState st = pilaf::check_entry(e);
        if (st == pilaf::EntryState::kTorn) continue;
        if (st == pilaf::EntryState::kRetired) {
          r.kind = ClientResult::kRetired;
          return r;
        }
        if (st == pilaf::EntryState::kEmpty || !pilaf::may_hold(e, key, ks.tag)) break;
        if (e.extent_offset + e.kv_size > g.extent_bytes) continue;
        std::vector<char> buf(e.kv_size);
        std::memcpy(buf.data(), g.extents + e.extent_offset, e.kv_size);
        pilaf::Record rec;
        if (!pilaf::check_record(e, buf.data(), buf.size(), &rec)) continue;
        if (rec.key != key) break;
        r.kind = ClientResult::kFound;
        r.value = std::string(rec.value);
        r.version = rec.header.version;
        r.expire_at = rec.header.expire_at;
        return r;
      }
    }
    uint64_t moves;
    uint32_t state;
    std::memcpy(&moves, g.table + pilaf::kMovesOffset, 8);
    std::memcpy(&state, g.table + pilaf::kMovesOffset + 8, 4);
    if (state == pilaf::kStateRetired) {
      r.kind = ClientResult::kRetired;
      return r;
    }
    if (moves % 2 == 0 && moves == prev_moves) {
      r.kind = ClientResult::kNotFound;
      return r;
    }
    prev_moves = moves;
  }
  return r;
}

EngineOptions opts(size_t memory, FakeClock* clock = nullptr) {
  EngineOptions o = small_options(memory, 0, clock);
  o.prefault = false;
  return o;
}

pilaf::EngineConfig tiny(size_t entries = 64, size_t extents = 4096) {
  pilaf::EngineConfig p;
  p.initial_entries = entries;
  p.initial_extent_bytes = extents;
  return p;
}

std::string key_of(uint64_t i) { return "key-" + std::to_string(i); }

// ---- API ------------------------------------------------------------------------------------

TEST(PilafEngine, PutGetDeleteCasExpire) {
  FakeClock clock;
  pilaf::Engine e(opts(size_t{16} << 20, &clock), tiny());
  EXPECT_EQ(e.name(), "pilaf");
  ItemView v;
  EXPECT_EQ(e.get("a", v), Status::kNotFound);
  uint64_t v1 = 0, v2 = 0;
  ASSERT_EQ(e.put("a", "one", {}, &v1), Status::kOk);
  ASSERT_EQ(e.get("a", v), Status::kOk);
  EXPECT_EQ(v.value, "one");
  EXPECT_EQ(v.version, v1);
  EXPECT_EQ(e.put("a", "two", PutOptions{v1 + 100, 0}), Status::kVersionMismatch);
  ASSERT_EQ(e.put("a", "two", PutOptions{v1, 0}, &v2), Status::kOk);
  EXPECT_NE(v1, v2);
  EXPECT_EQ(e.put("zz", "x", PutOptions{v2, 0}), Status::kNotFound);
  ASSERT_EQ(e.get("a", v), Status::kOk);
  EXPECT_EQ(v.value, "two");
  EXPECT_EQ(e.del("a"), Status::kOk);
  EXPECT_EQ(e.get("a", v), Status::kNotFound);
  EXPECT_EQ(e.del("a"), Status::kNotFound);

  ASSERT_EQ(e.put("t", "tmp", PutOptions{0, clock.now + 10}), Status::kOk);
  ASSERT_EQ(e.get("t", v), Status::kOk);
  EXPECT_EQ(v.expire_at, clock.now + 10);
  clock.now += 10;
  EXPECT_EQ(e.get("t", v), Status::kNotFound);
  const StatsSnapshot st = e.stats();
  EXPECT_EQ(st.expired, 1u);
  EXPECT_EQ(st.items, 0u);
  EXPECT_EQ(st.puts, 3u);
  EXPECT_EQ(st.dels, 1u);
  EXPECT_EQ(st.version_mismatches, 1u);
  EXPECT_EQ(e.check(), "");
}

// Clients judge expire_at by the server's clock, which the table header carries (layout v2).
TEST(PilafEngine, TheTableHeaderCarriesTheEnginesClock) {
  FakeClock clock;
  pilaf::EngineConfig p = tiny(64, size_t{1} << 20);
  p.retire_grace_ms = 60'000;
  pilaf::Engine e(opts(size_t{64} << 20, &clock), p);
  auto header = [](const pilaf::Generation& g) {
    pilaf::TableHeader h;
    std::memcpy(&h, g.table, sizeof h);
    return h;
  };
  EXPECT_EQ(header(e.current()).version, 2u);
  EXPECT_EQ(header(e.current()).clock, clock.now) << "published when the table is made";
  const pilaf::HeaderWord w0 = pilaf::load_header_word(e.current().table + pilaf::kMovesOffset);
  EXPECT_EQ(w0.clock, clock.now) << "within the 16 bytes a client READs at kMovesOffset";
  EXPECT_EQ(w0.state, pilaf::kStateLive);

  clock.now += 7;
  EXPECT_EQ(header(e.current()).clock, clock.now - 7) << "only the owner's housekeeping moves it";
  e.reap_retired();
  EXPECT_EQ(header(e.current()).clock, clock.now);
  clock.now += 1;
  e.publish_clock();
  EXPECT_EQ(header(e.current()).clock, clock.now);

  // An item expired by that clock: the record is still in the table (lazy expiry), and the
  // client's rule with the header's clock says "not found", whatever the reader's own clock.
  ASSERT_EQ(e.put("t", "v", PutOptions{.expire_at = clock.now}), Status::kOk);
  ASSERT_EQ(e.put("u", "v", PutOptions{.expire_at = clock.now + 1}), Status::kOk);
  const pilaf::Lookup lt = pilaf::Engine::lookup(e.current(), "t");
  ASSERT_TRUE(lt.found);
  EXPECT_EQ(lt.clock, clock.now);
  EXPECT_TRUE(pilaf::expired(lt.expire_at, lt.clock));
  const pilaf::Lookup lu = pilaf::Engine::lookup(e.current(), "u");
  ASSERT_TRUE(lu.found);
  EXPECT_FALSE(pilaf::expired(lu.expire_at, lu.clock));
  EXPECT_FALSE(pilaf::expired(0, UINT32_MAX)) << "0 = never";

  // A growth: the new table starts with the current clock; the retired one's clock stops.
  const pilaf::Generation old = e.current();
  clock.now += 5;
  for (int i = 0; e.current().generation == old.generation; ++i)
    ASSERT_EQ(e.put(key_of(i), std::string(100, 'x')), Status::kOk);
  EXPECT_EQ(header(e.current()).clock, clock.now);
  clock.now += 3;
  e.reap_retired();
  EXPECT_EQ(header(e.current()).clock, clock.now);
  EXPECT_EQ(header(old).state, pilaf::kStateRetired);
  EXPECT_EQ(header(old).clock, clock.now - 8);
  EXPECT_EQ(e.check(), "");
}

// Restored versions (op log replay) live in the extent records, so clients READ them, and a
// growth copies them along with the records.
TEST(PilafEngine, RestoredVersionsSurviveAGrowthAndAreWhatClientsRead) {
  pilaf::EngineConfig p = tiny(64, size_t{1} << 20);
  pilaf::Engine e(opts(size_t{64} << 20), p);
  for (int i = 0; i < 40; ++i) {
    PutOptions po;
    po.restore_version = 1000 + 10 * static_cast<uint64_t>(i);
    ASSERT_EQ(e.put(key_of(i), "v", po), Status::kOk);
  }
  const uint32_t gen = e.current().generation;
  int next = 40;
  while (e.current().generation == gen) ASSERT_EQ(e.put(key_of(next++), "w"), Status::kOk);
  for (int i = 0; i < 40; ++i) {
    const ClientResult r = client_get(e.current(), key_of(i));
    ASSERT_EQ(r.kind, ClientResult::kFound) << i;
    EXPECT_EQ(r.version, 1000 + 10 * static_cast<uint64_t>(i)) << i;
  }
  // The PUTs after the restores continued past the largest restored version.
  const ClientResult first_new = client_get(e.current(), key_of(40));
  ASSERT_EQ(first_new.kind, ClientResult::kFound);
  EXPECT_EQ(first_new.version, 1000u + 10 * 39 + 1);
  EXPECT_EQ(e.check(), "");
}

TEST(PilafEngine, RejectsBadKeysAndValues) {
  EngineOptions o = opts(size_t{16} << 20);
  o.max_value_size = 1000;
  pilaf::Engine e(o, tiny());
  ItemView v;
  EXPECT_EQ(e.put("", "v"), Status::kInvalidKey);
  EXPECT_EQ(e.get("", v), Status::kInvalidKey);
  EXPECT_EQ(e.del(""), Status::kInvalidKey);
  EXPECT_EQ(e.put(std::string(kMaxKeySize + 1, 'k'), "v"), Status::kTooLarge);
  EXPECT_EQ(e.put("k", std::string(1001, 'v')), Status::kTooLarge);
  EXPECT_EQ(e.stats().too_large, 5u);
  // The largest key and value fit, in the smallest extents.
  ASSERT_EQ(e.put(std::string(kMaxKeySize, 'k'), std::string(1000, 'v')), Status::kOk);
  ASSERT_EQ(e.get(std::string(kMaxKeySize, 'k'), v), Status::kOk);
  EXPECT_EQ(v.value.size(), 1000u);
  EXPECT_EQ(e.check(), "");
}

TEST(PilafEngine, MakeEngineAndName) {
  auto e = proto::make_engine("pilaf", opts(size_t{16} << 20));
  EXPECT_EQ(e->name(), "pilaf");
  ASSERT_EQ(e->put("k", "v"), Status::kOk);
  ItemView v;
  ASSERT_EQ(e->get("k", v), Status::kOk);
  EXPECT_EQ(v.value, "v");
  auto& p = static_cast<pilaf::Engine&>(*e);
  EXPECT_EQ(p.current().entries, 65536u);
  EXPECT_LE(p.memory_bytes(), size_t{16} << 20);
}

TEST(PilafEngine, SmallCapClampsTheFirstGeneration) {
  EngineOptions o = opts(size_t{1} << 20);
  pilaf::Engine e(o);  // defaults: 2 MiB table + 8 MiB extents, clamped into 1 MiB
  EXPECT_LE(e.memory_bytes(), size_t{1} << 20);
  EXPECT_GE(e.current().extent_bytes, pilaf::record_bytes(kMaxKeySize, o.max_value_size));
  o.memory_bytes = 4096;
  EXPECT_THROW(pilaf::Engine bad(o), std::runtime_error);
}

// ---- the exposed memory --------------------------------------------------------------------

TEST(PilafLayout, ClientRulesFindWhatTheEngineStores) {
  pilaf::Engine e(opts(size_t{16} << 20), tiny(1024, size_t{64} << 10));
  for (int i = 0; i < 500; ++i)
    ASSERT_EQ(e.put(key_of(i), "value-" + std::to_string(i)), Status::kOk);
  for (int i = 0; i < 500; i += 3) ASSERT_EQ(e.del(key_of(i)), Status::kOk);
  const pilaf::Generation& g = e.current();
  for (int i = 0; i < 500; ++i) {
    const ClientResult r = client_get(g, key_of(i));
    if (i % 3 == 0) {
      EXPECT_EQ(r.kind, ClientResult::kNotFound) << i;
    } else {
      ASSERT_EQ(r.kind, ClientResult::kFound) << i;
      EXPECT_EQ(r.value, "value-" + std::to_string(i));
      ItemView v;
      ASSERT_EQ(e.get(key_of(i), v), Status::kOk);
      EXPECT_EQ(r.version, v.version);
    }
    const pilaf::Lookup l = pilaf::Engine::lookup(g, key_of(i));
    EXPECT_EQ(l.found, i % 3 != 0);
  }
  EXPECT_EQ(e.check(), "");
}

TEST(PilafLayout, TornEntryAndChangedRecordAreDetected) {
  pilaf::Engine e(opts(size_t{16} << 20), tiny(1024, size_t{64} << 10));
  ASSERT_EQ(e.put("victim", "some value"), Status::kOk);
  const pilaf::Generation& g = e.current();
  const pilaf::KeySlots ks = pilaf::key_slots("victim", g.entries);
  uint64_t slot = UINT64_MAX;
  for (uint64_t s : ks.slot) {
    if (pilaf::check_entry(read_entry(g, s)) == pilaf::EntryState::kUsed) slot = s;
  }
  ASSERT_NE(slot, UINT64_MAX);
  std::byte* raw = g.table + pilaf::entry_offset(slot);
  const pilaf::Entry good = read_entry(g, slot);
  for (size_t byte : {0u, 9u, 13u, 17u, 30u}) {
    raw[byte] ^= std::byte{0x40};
    EXPECT_EQ(pilaf::check_entry(read_entry(g, slot)), pilaf::EntryState::kTorn) << byte;
    raw[byte] ^= std::byte{0x40};
  }
  ASSERT_EQ(pilaf::check_entry(read_entry(g, slot)), pilaf::EntryState::kUsed);
  std::byte* rec = g.extents + good.extent_offset;
  pilaf::Record out;
  ASSERT_TRUE(pilaf::check_record(good, rec, good.kv_size, &out));
  EXPECT_EQ(out.key, "victim");
  EXPECT_EQ(out.value, "some value");
  rec[good.kv_size - 1] ^= std::byte{1};  // last value byte
  EXPECT_FALSE(pilaf::check_record(good, rec, good.kv_size, &out));
  rec[good.kv_size - 1] ^= std::byte{1};
  EXPECT_FALSE(pilaf::check_record(good, rec, good.kv_size - 1, &out));
  EXPECT_TRUE(pilaf::check_record(good, rec, good.kv_size, &out));
}

// ---- growth --------------------------------------------------------------------------------

struct HookLog {
  std::vector<std::pair<char, uint32_t>> events;  // ('L' live | 'R' release, generation)
  pilaf::Hooks hooks() {
    return pilaf::Hooks{[this](const pilaf::Generation& g) {
                          events.emplace_back('L', g.generation);
                        },
                        [this](const pilaf::Generation& g) {
                          events.emplace_back('R', g.generation);
                        }};
  }
};

void expect_fully_retired(const pilaf::Generation& old) {
  pilaf::TableHeader h;
  std::memcpy(&h, old.table, sizeof h);
  EXPECT_EQ(h.state, pilaf::kStateRetired);
  EXPECT_EQ(h.generation, old.generation);
  uint64_t bad = 0;
  for (uint64_t s = 0; s < old.entries; ++s) {
    bad += pilaf::check_entry(read_entry(old, s)) != pilaf::EntryState::kRetired;
  }
  EXPECT_EQ(bad, 0u) << "slots of generation " << old.generation << " not retired";
}

// Inserts keys until a growth happened; checks the old generation and every key.
void grow_once_and_check(pilaf::Engine& e, int& next, const std::string& value) {
  const pilaf::Generation old = e.current();
  const uint64_t growths = e.pilaf_stats().growths;
  while (e.pilaf_stats().growths == growths) ASSERT_EQ(e.put(key_of(next++), value), Status::kOk);
  EXPECT_EQ(e.current().generation, old.generation + 1);
  expect_fully_retired(old);
  EXPECT_EQ(client_get(old, key_of(0)).kind, ClientResult::kRetired);
  for (int i = 0; i < next; ++i) {
    const ClientResult r = client_get(e.current(), key_of(i));
    ASSERT_EQ(r.kind, ClientResult::kFound) << i;
    ASSERT_EQ(r.value, value);
  }
  ASSERT_EQ(e.check(), "");
}

TEST(PilafGrowth, TableGrowthKeepsEveryKey) {
  pilaf::EngineConfig p = tiny(64, size_t{1} << 20);
  p.retire_grace_ms = 60'000;
  pilaf::Engine e(opts(size_t{64} << 20), p);
  HookLog log;
  e.set_hooks(log.hooks());
  int next = 0;
  for (int round = 0; round < 3; ++round) {
    const size_t extents = e.current().extent_bytes;
    const uint64_t entries = e.current().entries;
    grow_once_and_check(e, next, "v");
    EXPECT_EQ(e.current().entries, entries * 2);
    EXPECT_EQ(e.current().extent_bytes, extents);
  }
  EXPECT_EQ(e.pilaf_stats().growths, 3u);
  EXPECT_EQ(e.pilaf_stats().retired_live, 3u);
  e.reap_retired();  // within the grace: nothing goes
  EXPECT_EQ(e.pilaf_stats().retired_live, 3u);
  const std::vector<std::pair<char, uint32_t>> want{{'L', 1}, {'L', 2}, {'L', 3}, {'L', 4}};
  EXPECT_EQ(log.events, want);
}

TEST(PilafGrowth, ExtentGrowthKeepsEveryKey) {
  pilaf::EngineConfig p = tiny(4096, 4096);
  p.retire_grace_ms = 0;
  EngineOptions o = opts(size_t{64} << 20);
  o.max_value_size = 2000;
  pilaf::Engine e(o, p);
  HookLog log;
  e.set_hooks(log.hooks());
  int next = 0;
  const std::string value(500, 'x');
  for (int round = 0; round < 3; ++round) {
    const size_t extents = e.current().extent_bytes;
    grow_once_and_check(e, next, value);
    EXPECT_EQ(e.current().entries, 4096u);
    EXPECT_EQ(e.current().extent_bytes, extents * 2);
  }
  EXPECT_EQ(e.pilaf_stats().retired_live, 3u);
  e.reap_retired();  // grace 0: all go, each released after it went live's successor
  EXPECT_EQ(e.pilaf_stats().retired_live, 0u);
  const std::vector<std::pair<char, uint32_t>> want{{'L', 1}, {'L', 2}, {'L', 3}, {'L', 4},
                                                    {'R', 1}, {'R', 2}, {'R', 3}};
  EXPECT_EQ(log.events, want);
  ItemView v;
  for (int i = 0; i < next; ++i) ASSERT_EQ(e.get(key_of(i), v), Status::kOk);
}

TEST(PilafGrowth, NoSpaceAtTheCapLosesNothing) {
  EngineOptions o = opts(0);
  o.max_value_size = 1000;
  pilaf::EngineConfig p = tiny(64, 4096);
  p.memory_bytes = 64 << 10;
  pilaf::Engine e(o, p);
  const std::string value(200, 'v');
  int stored = 0;
  Status st = Status::kOk;
  while ((st = e.put(key_of(stored), value)) == Status::kOk) ++stored;
  ASSERT_EQ(st, Status::kNoSpace);
  EXPECT_GT(stored, 100);
  EXPECT_LE(e.memory_bytes(), size_t{64} << 10);
  EXPECT_EQ(e.stats().no_space, 1u);
  EXPECT_EQ(e.stats().items, static_cast<uint64_t>(stored));
  const uint32_t gen = e.current().generation;
  // An update that cannot fit keeps the old value.
  EXPECT_EQ(e.put(key_of(0), std::string(1000, 'w')), Status::kNoSpace);
  EXPECT_EQ(e.current().generation, gen);
  ItemView v;
  for (int i = 0; i < stored; ++i) {
    ASSERT_EQ(e.get(key_of(i), v), Status::kOk) << i;
    ASSERT_EQ(v.value, value);
    ASSERT_EQ(client_get(e.current(), key_of(i)).kind, ClientResult::kFound);
  }
  ASSERT_EQ(e.check(), "");
  // Space freed by deletes is used again.
  for (int i = 0; i < 10; ++i) ASSERT_EQ(e.del(key_of(i)), Status::kOk);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(e.put("again" + std::to_string(i), value), Status::kOk);
  ASSERT_EQ(e.check(), "");
}

// ---- cuckoo --------------------------------------------------------------------------------

// A table that cannot grow, filled to `fill`; returns the keys stored.
std::vector<std::string> fill_table(pilaf::Engine& e, double fill, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> keys;
  const uint64_t n = static_cast<uint64_t>(e.current().entries * fill);
  while (keys.size() < n) {
    std::string k = "r" + std::to_string(rng());
    if (e.put(k, "val") != Status::kOk) break;
    keys.push_back(std::move(k));
  }
  return keys;
}

TEST(PilafCuckoo, ProbesPerLookupAt75PercentFill) {
  constexpr uint64_t kEntries = 1 << 16;
  pilaf::EngineConfig p = tiny(kEntries, size_t{4} << 20);
  p.memory_bytes = pilaf::table_bytes(kEntries) + (size_t{4} << 20);
  EngineOptions o = opts(0);
  o.max_value_size = 1024;
  pilaf::Engine e(o, p);
  const auto keys = fill_table(e, 0.75, 42);
  ASSERT_EQ(keys.size(), kEntries * 3 / 4);
  EXPECT_EQ(e.pilaf_stats().growths, 0u);
  uint64_t total = 0;
  int max = 0;
  for (const auto& k : keys) {
    const ClientResult r = client_get(e.current(), k);
    ASSERT_EQ(r.kind, ClientResult::kFound) << k;
    total += r.entry_reads;
    max = std::max(max, r.entry_reads);
  }
  const double mean = static_cast<double>(total) / keys.size();
  std::printf(
      "pilaf: %zu keys in %llu slots (75%%): %.3f entry reads per GET, max %d; "
      "%llu cuckoo paths, %llu keys moved\n",
      keys.size(), static_cast<unsigned long long>(kEntries), mean, max,
      static_cast<unsigned long long>(e.pilaf_stats().paths),
      static_cast<unsigned long long>(e.pilaf_stats().moved_keys));
  EXPECT_GE(mean, 1.3);
  EXPECT_LE(mean, 1.9);
  EXPECT_LE(max, 3);
}

TEST(PilafCuckoo, PathsKeepKeysAndMoveTheSeqlockByTwo) {
  constexpr uint64_t kEntries = 4096;
  pilaf::EngineConfig p = tiny(kEntries, size_t{1} << 20);
  p.memory_bytes = pilaf::table_bytes(kEntries) + (size_t{1} << 20);
  EngineOptions o = opts(0);
  o.max_value_size = 1024;
  pilaf::Engine e(o, p);
  auto moves = [&] {
    uint64_t m;
    std::memcpy(&m, e.current().table + pilaf::kMovesOffset, 8);
    return m;
  };
  const auto keys = fill_table(e, 0.85, 7);
  ASSERT_EQ(keys.size(), static_cast<size_t>(kEntries * 0.85));
  const auto ps = e.pilaf_stats();
  EXPECT_GT(ps.paths, 0u);
  EXPECT_GE(ps.moved_keys, ps.paths);
  EXPECT_EQ(ps.growths, 0u);
  EXPECT_EQ(ps.used_entries, keys.size());
  EXPECT_EQ(moves(), 2 * ps.paths);
  for (const auto& k : keys) ASSERT_EQ(client_get(e.current(), k).kind, ClientResult::kFound) << k;
  // A fresh insert into an empty slot leaves moves alone; deletes leave holes that probes
  // skip over (no early stop at an empty slot).
  for (size_t i = 0; i < keys.size(); i += 2) ASSERT_EQ(e.del(keys[i]), Status::kOk);
  const uint64_t m = moves();
  ASSERT_EQ(e.put("fresh", "v"), Status::kOk);
  EXPECT_EQ(moves(), m);
  for (size_t i = 1; i < keys.size(); i += 2) {
    ASSERT_EQ(client_get(e.current(), keys[i]).kind, ClientResult::kFound) << keys[i];
  }
  ASSERT_EQ(e.check(), "");
}

TEST(PilafCuckoo, EveryKeyStaysInOneOrTwoSlotsDuringAMove) {
  constexpr uint64_t kEntries = 512;
  pilaf::EngineConfig p = tiny(kEntries, size_t{256} << 10);
  p.memory_bytes = pilaf::table_bytes(kEntries) + (size_t{256} << 10);
  EngineOptions o = opts(0);
  o.max_value_size = 1024;
  pilaf::Engine e(o, p);
  std::vector<std::string> stored;
  uint64_t observed = 0;
  e.set_move_observer([&] {
    ++observed;
    const pilaf::Generation& g = e.current();
    uint64_t moves;
    std::memcpy(&moves, g.table + pilaf::kMovesOffset, 8);
    ASSERT_EQ(moves % 2, 1u) << "moves must be odd while a path is applied";
    for (const auto& k : stored) {
      const pilaf::KeySlots ks = pilaf::key_slots(k, g.entries);
      int copies = 0;
      for (uint32_t i = 0; i < pilaf::kWays; ++i) {
        if (i > 0 && (ks.slot[i] == ks.slot[0] || (i == 2 && ks.slot[2] == ks.slot[1]))) continue;
        const pilaf::Entry en = read_entry(g, ks.slot[i]);
        if (pilaf::check_entry(en) != pilaf::EntryState::kUsed || !pilaf::may_hold(en, k, ks.tag)) {
          continue;
        }
        pilaf::Record rec;
        ASSERT_TRUE(pilaf::check_record(en, g.extents + en.extent_offset, en.kv_size, &rec));
        copies += rec.key == k;
      }
      ASSERT_GE(copies, 1) << k << " in none of its slots mid-move";
      ASSERT_LE(copies, 2) << k;
    }
  });
  std::mt19937_64 rng(11);
  while (stored.size() < kEntries * 85 / 100) {
    std::string k = "m" + std::to_string(rng());
    ASSERT_EQ(e.put(k, "v"), Status::kOk);
    stored.push_back(std::move(k));
  }
  EXPECT_EQ(e.pilaf_stats().growths, 0u);
  EXPECT_GT(e.pilaf_stats().paths, 10u);
  EXPECT_EQ(observed, e.pilaf_stats().paths + e.pilaf_stats().moved_keys);
  for (const auto& k : stored) ASSERT_EQ(client_get(e.current(), k).kind, ClientResult::kFound);
  ASSERT_EQ(e.check(), "");
}

// ---- property test against a model ----------------------------------------------------------

struct ModelItem {
  std::string value;
  uint64_t version;
  uint32_t expire_at;
};

void property_run(uint64_t seed, int ops) {
  FakeClock clock;
  EngineOptions o = opts(size_t{32} << 20, &clock);
  o.max_value_size = 600;
  pilaf::EngineConfig p = tiny(64, 4096);
  p.retire_grace_ms = 0;
  pilaf::Engine e(o, p);
  std::map<std::string, ModelItem> model;
  std::mt19937_64 rng(seed);
  auto live = [&](const std::string& k) -> ModelItem* {
    auto it = model.find(k);
    if (it == model.end()) return nullptr;
    if (it->second.expire_at != 0 && clock.now >= it->second.expire_at) {
      model.erase(it);
      return nullptr;
    }
    return &it->second;
  };
  for (int op = 0; op < ops; ++op) {
    const std::string k = key_of(rng() % 400);
    const int kind = static_cast<int>(rng() % 100);
    SCOPED_TRACE("seed " + std::to_string(seed) + " op " + std::to_string(op) + " key " + k);
    if (kind < 35) {
      ItemView v;
      const Status st = e.get(k, v);
      ModelItem* m = live(k);
      ASSERT_EQ(st, m ? Status::kOk : Status::kNotFound);
      if (m) {
        ASSERT_EQ(v.value, m->value);
        ASSERT_EQ(v.version, m->version);
        ASSERT_EQ(v.expire_at, m->expire_at);
      }
    } else if (kind < 80) {
      const std::string value(rng() % 300, static_cast<char>('a' + op % 26));
      PutOptions po;
      if (kind >= 70) po.expire_at = clock.now + 1 + static_cast<uint32_t>(rng() % 5);
      ModelItem* m = live(k);
      if (kind >= 60 && kind < 70) {  // CAS, right or wrong version
        po.expected_version = m && rng() % 2 ? m->version : 1 + rng() % 1000000;
      }
      uint64_t ver = 0;
      const Status st = e.put(k, value, po, &ver);
      Status want = Status::kOk;
      if (po.expected_version != 0) {
        if (!m) want = Status::kNotFound;
        else if (m->version != po.expected_version) want = Status::kVersionMismatch;
      }
      ASSERT_EQ(st, want);
      if (st == Status::kOk) model[k] = ModelItem{value, ver, po.expire_at};
    } else if (kind < 97) {
      const Status st = e.del(k);
      ModelItem* m = live(k);
      ASSERT_EQ(st, m ? Status::kOk : Status::kNotFound);
      model.erase(k);
    } else {
      clock.now += 1;
    }
    if (op % 97 == 0) {
      ASSERT_EQ(e.check(), "");
      e.reap_retired();
    }
  }
  ASSERT_EQ(e.check(), "");
  EXPECT_GT(e.pilaf_stats().growths, 0u);
  // Every model key, read by the client rules from the raw memory of the live generation.
  const pilaf::Generation& g = e.current();
  for (int i = 0; i < 400; ++i) {
    const std::string k = key_of(i);
    const ClientResult r = client_get(g, k);
    auto it = model.find(k);
    if (it == model.end()) {
      ASSERT_EQ(r.kind, ClientResult::kNotFound) << k;
      continue;
    }
    ASSERT_EQ(r.kind, ClientResult::kFound) << k;  // expired ones too: only get() removes
    EXPECT_EQ(r.value, it->second.value);
    EXPECT_EQ(r.version, it->second.version);
    EXPECT_EQ(r.expire_at, it->second.expire_at);
  }
}

TEST(PilafProperty, RandomOpsMatchModel) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    property_run(seed, 200 * kScale);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace fabkv::store
