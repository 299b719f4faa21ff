#include "proto/pilaf/engine.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "proto/options.h"
#include "store/pipeline.h"

namespace fabkv::pilaf {

using read_table::publish;  // Pilaf sec. 3.3: a barrier before acknowledging a put
using store::add_st;
using store::kMaxKeySize;
using store::sub_st;

namespace {

constexpr uint64_t kMinEntries = 16;

inline bool used(const Entry& e) { return (e.flags & pilaf::kInUse) != 0; }
inline bool empty(const Entry& e) { return e.flags == 0; }

}  // namespace

// One generation (read_table/engine.h).
struct Gen : read_table::GenMemory<Generation, TableHeader> {
  Gen(uint64_t entries, size_t extent_bytes, bool huge, bool prefault)
      : GenMemory(pilaf::table_bytes(entries), extent_bytes, huge, prefault) {
    info.entries = entries;
  }
  Entry& entry(uint64_t slot) const {
    return *reinterpret_cast<Entry*>(info.table + pilaf::entry_offset(slot));
  }
  std::byte* record(const Entry& e) const { return info.extents + e.extent_offset; }
  std::string_view key_of(const Entry& e) const {
    return std::string_view(reinterpret_cast<const char*>(record(e)) + sizeof(ExtentHeader),
                            e.key_len);
  }
  ExtentHeader header_of(const Entry& e) const {
    ExtentHeader h;
    std::memcpy(&h, record(e), sizeof h);
    return h;
  }
};

Engine::Engine(const store::EngineOptions& opts, const EngineConfig& popts)
    : Base(opts, popts.retire_grace_ms, popts.memory_bytes,
           pilaf::record_bytes(kMaxKeySize, opts.max_value_size)),
      max_path_(popts.max_path == 0 ? 1 : popts.max_path),
      max_path_nodes_(popts.max_path_nodes == 0 ? 1 : popts.max_path_nodes) {
  uint64_t entries = std::max<uint64_t>(popts.initial_entries, kMinEntries);
  const size_t extents = first_extents(popts.initial_extent_bytes, pilaf::table_bytes(entries),
                                       pilaf::table_bytes(kMinEntries), "pilaf");
  if (pilaf::table_bytes(entries) + extents > cap_)
    entries = std::min<uint64_t>(entries, (cap_ - extents - sizeof(TableHeader)) / sizeof(Entry));
  start(entries, extents);
}

Engine::~Engine() = default;

std::unique_ptr<Gen> Engine::map_gen(uint64_t entries, size_t extent_bytes,
                                     uint32_t generation) const {
  auto g = std::make_unique<Gen>(entries, extent_bytes, huge_pages_, prefault_);
  TableHeader h = live_header<TableHeader>(pilaf::kTableMagic, pilaf::kLayoutVersion, generation);
  h.entries = entries;
  h.extent_bytes = extent_bytes;
  return with_header(std::move(g), h);
}

void Engine::publish_sizes() {
  live_bytes_.store(live().info.table_bytes + live().info.extent_bytes, std::memory_order_relaxed);
  used_entries_.store(live().used, std::memory_order_relaxed);
  stats_.bytes.store(live().heap.used_bytes(), std::memory_order_relaxed);
}

store::EngineMemory Engine::memory() const {
  return store::EngineMemory{live().info.extents, live().info.extent_bytes, live().info.huge_pages};
}

Engine::PilafStats Engine::pilaf_stats() const {
  auto r = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return PilafStats{r(growths_), r(paths_), r(moved_keys_), r(used_entries_), gens_.retired_live()};
}

// ---- table operations ----------------------------------------------------------------------

Engine::Found Engine::find(const Gen& g, std::string_view key) const {
  const pilaf::KeySlots ks = pilaf::key_slots(key, g.info.entries);
  for (uint64_t s : ks.slot) {
    const Entry& e = g.entry(s);
    if (!used(e) || !pilaf::may_hold(e, key, ks.tag)) continue;
    if (std::memcmp(g.key_of(e).data(), key.data(), key.size()) == 0) return Found{s, true};
  }
  return Found{};
}

std::vector<uint64_t> Engine::find_path(const Gen& g, const pilaf::KeySlots& ks) const {
  // Breadth first over slots: each node is an occupied slot whose key would be displaced.
  struct Node {
    uint64_t slot;
    uint32_t parent;  // index in `nodes`, UINT32_MAX for a root
    uint32_t depth;   // keys displaced when the path ends at this node's key
  };
  std::vector<Node> nodes;
  nodes.reserve(64);
  auto seen = [&](uint64_t s) {
    return std::any_of(nodes.begin(), nodes.end(), [s](const Node& n) { return n.slot == s; });
  };
  for (uint64_t s : ks.slot) {
    if (!seen(s)) nodes.push_back(Node{s, UINT32_MAX, 1});
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node n = nodes[i];
    const pilaf::KeySlots alt = pilaf::key_slots(g.key_of(g.entry(n.slot)), g.info.entries);
    for (uint64_t a : alt.slot) {
      if (a == n.slot || seen(a)) continue;
      if (empty(g.entry(a))) {
        std::vector<uint64_t> path(n.depth + 1);
        path[n.depth] = a;
        uint32_t k = static_cast<uint32_t>(i);
        for (uint32_t d = n.depth; d-- > 0; k = nodes[k].parent) path[d] = nodes[k].slot;
        return path;
      }
      if (n.depth < max_path_ && nodes.size() < max_path_nodes_) {
        nodes.push_back(Node{a, static_cast<uint32_t>(i), n.depth + 1});
      }
    }
  }
  return {};
}

void Engine::apply_path(Gen& g, const std::vector<uint64_t>& path, const Entry& e, bool live) {
  // From the last displaced key backwards: the copy lands in an empty slot (or the slot its
  // successor just vacated by copying itself onward), so each key is in one or two of its
  // slots at every instant, never in none.
  const size_t n = path.size();
  move_keys(g, live, n, [&](size_t i) {
    if (i + 1 < n) std::memcpy(&g.entry(path[n - 1 - i]), &g.entry(path[n - 2 - i]), sizeof(Entry));
    else std::memcpy(&g.entry(path[0]), &e, sizeof(Entry));
  });
}

bool Engine::insert_entry(Gen& g, std::string_view key, const Entry& e, bool live) {
  const pilaf::KeySlots ks = pilaf::key_slots(key, g.info.entries);
  for (uint64_t s : ks.slot) {
    if (empty(g.entry(s))) {
      std::memcpy(&g.entry(s), &e, sizeof(Entry));
      publish();
      ++g.used;
      return true;
    }
  }
  const std::vector<uint64_t> path = find_path(g, ks);
  if (path.empty()) return false;
  apply_path(g, path, e, live);
  ++g.used;
  return true;
}

void Engine::erase(Gen& g, uint64_t slot) {
  Entry& e = g.entry(slot);
  const uint64_t off = e.extent_offset;
  std::memset(&e, 0, sizeof(Entry));  // readers see the slot empty (or torn: retry)...
  publish();
  g.heap.free(off);  // ...before the record's bytes change
}

// ---- growth --------------------------------------------------------------------------------

std::unique_ptr<Gen> Engine::build(uint64_t entries, size_t extent_bytes) {
  const Gen& old = live();
  auto g = map_gen(entries, extent_bytes, old.info.generation + 1);
  for (uint64_t s = 0; s < old.info.entries; ++s) {
    const Entry& oe = old.entry(s);
    if (!used(oe)) continue;
    const uint64_t off = g->heap.alloc(oe.kv_size);
    if (off == store::Heap::kNil) return nullptr;
    std::memcpy(g->info.extents + off, old.record(oe), oe.kv_size);
    Entry ne = oe;
    ne.extent_offset = off;  // same bytes: kv_crc stays
    pilaf::seal(ne);
    // The table is not visible yet: no seqlock needed, but the same code path is fine.
    if (!insert_entry(*g, old.key_of(oe), ne, false)) {
      return nullptr;
    }
  }
  return g;
}

store::Status Engine::grow(bool more_entries, bool more_extents, size_t record) {
  const Gen& old = live();
  uint64_t entries = old.info.entries * (more_entries ? 2 : 1);
  size_t extents = old.info.extent_bytes * (more_extents ? 2 : 1);
  // Clamp to the cap: a growth may be smaller than 2x, but must still grow what ran out.
  if (pilaf::table_bytes(entries) + extents > cap_) {
    if (more_extents) {
      extents = clamped_extents(pilaf::table_bytes(entries), record);
      if (extents == 0) return store::Status::kNoSpace;
    } else {
      entries = cap_ > extents + sizeof(TableHeader)
                    ? (cap_ - extents - sizeof(TableHeader)) / sizeof(Entry)
                    : 0;
      if (entries <= old.info.entries) return store::Status::kNoSpace;
    }
  }
  return grow_to(entries, extents);
}

void Engine::retire(Gen& prev) const {
  std::atomic_ref<uint32_t>(prev.header()->state)
      .store(pilaf::kStateRetired, std::memory_order_release);
  publish();
  Entry marker{};
  marker.flags = pilaf::kRetired;
  pilaf::seal(marker);
  for (uint64_t s = 0; s < prev.info.entries; ++s) {
    std::memcpy(&prev.entry(s), &marker, sizeof(Entry));
  }
}

// ---- data path -----------------------------------------------------------------------------

Engine::Item Engine::item_at(const Gen& g, uint64_t slot) const {
  const ExtentHeader h = g.header_of(g.entry(slot));
  return Item{h.version, h.expire_at};
}

std::string_view Engine::value_at(const Gen& g, uint64_t slot) const {
  const Entry& e = g.entry(slot);
  const char* p = reinterpret_cast<const char*>(g.record(e)) + sizeof(ExtentHeader);
  return std::string_view(p + e.key_len, e.kv_size - sizeof(ExtentHeader) - e.key_len);
}

std::optional<uint64_t> Engine::place(std::string_view key, std::string_view value,
                                      const store::PutOptions& opts, Found f) {
  const size_t rec = pilaf::record_bytes(key.size(), value.size());
  // An update frees the old record only after the new one is written.
  for (;;) {
    Gen& g = live();
    std::vector<uint64_t> path;
    uint64_t direct = UINT64_MAX;
    bool need_entries = false;
    if (!f.ok) {
      const pilaf::KeySlots ks = pilaf::key_slots(key, g.info.entries);
      for (uint64_t s : ks.slot) {
        if (empty(g.entry(s))) {
          direct = s;
          break;
        }
      }
      if (direct == UINT64_MAX) {
        path = find_path(g, ks);
        need_entries = path.empty();
      }
    }
    const uint64_t off = g.heap.alloc(rec);
    const bool need_extents = off == store::Heap::kNil;
    if (need_entries || need_extents) {
      if (!need_extents) g.heap.free(off);
      if (grow(need_entries, need_extents, rec) != store::Status::kOk) return std::nullopt;
      f = find(live(), key);
      continue;
    }

    // 1. The record, in space no entry points at.
    ExtentHeader h{};
    h.version = stamp_version(version_, opts);
    h.expire_at = opts.expire_at;
    h.key_len = static_cast<uint16_t>(key.size());
    std::byte* p = g.info.extents + off;
    std::memcpy(p, &h, sizeof h);
    std::memcpy(p + sizeof h, key.data(), key.size());
    std::memcpy(p + sizeof h + key.size(), value.data(), value.size());
    Entry e{};
    e.extent_offset = off;
    e.kv_size = static_cast<uint32_t>(rec);
    e.key_len = static_cast<uint8_t>(key.size());
    e.tag = pilaf::key_slots(key, g.info.entries).tag;
    e.flags = pilaf::kInUse;
    e.kv_crc = pilaf::crc64(p, rec);
    pilaf::seal(e);
    publish();

    // 2. The entry; 3. (update) the old record goes back to the heap.
    if (f.ok) {
      Entry& slot = g.entry(f.at);
      const uint64_t old_off = slot.extent_offset;
      std::memcpy(&slot, &e, sizeof(Entry));
      publish();
      g.heap.free(old_off);
    } else {
      if (direct != UINT64_MAX) {
        std::memcpy(&g.entry(direct), &e, sizeof(Entry));
      } else {
        apply_path(g, path, e, true);
      }
    }
    return h.version;
  }
}

// ---- client rules, checks ------------------------------------------------------------------

Lookup Engine::lookup(const Generation& g, std::string_view key) {
  Lookup r;
  const pilaf::KeySlots ks = pilaf::key_slots(key, g.entries);
  auto read_moves = [&](uint64_t& moves, uint32_t& state) {
    const pilaf::HeaderWord w = pilaf::load_header_word(g.table + pilaf::kMovesOffset);
    moves = w.moves;
    state = w.state;
    r.clock = w.clock;
  };
  uint64_t seen_moves;
  uint32_t state;
  read_moves(seen_moves, state);  // the "previous check" before the first probes
  constexpr int kRounds = 64, kRetries = 16;
  for (int round = 0; round < kRounds; ++round) {
    for (uint64_t slot : ks.slot) {
      for (int t = 0; t < kRetries; ++t) {
        Entry e;
        std::memcpy(&e, g.table + pilaf::entry_offset(slot), sizeof e);
        ++r.probes;
        const pilaf::EntryState st = pilaf::check_entry(e);
        if (st == pilaf::EntryState::kTorn) continue;
        if (st == pilaf::EntryState::kRetired) {
          r.retired = true;
          return r;
        }
        if (st == pilaf::EntryState::kEmpty || !pilaf::may_hold(e, key, ks.tag)) break;
        pilaf::Record rec;
        if (e.extent_offset > g.extent_bytes || e.kv_size > g.extent_bytes - e.extent_offset ||
            !pilaf::check_record(e, g.extents + e.extent_offset, e.kv_size, &rec)) {
          continue;  // freed and reused meanwhile: read the entry again
        }
        if (rec.key != key) break;
        r.found = true;
        r.version = rec.header.version;
        r.expire_at = rec.header.expire_at;
        r.value = rec.value;
        return r;
      }
    }
    uint64_t moves;
    read_moves(moves, state);
    if (state == pilaf::kStateRetired) {
      r.retired = true;
      return r;
    }
    if (moves % 2 == 0 && moves == seen_moves) return r;  // not found
    seen_moves = moves;
  }
  return r;
}

bool Engine::describes(const Gen& g, const TableHeader& h) const {
  return h.magic == pilaf::kTableMagic && h.version == pilaf::kLayoutVersion &&
         h.generation == g.info.generation && h.entries == g.info.entries &&
         h.extent_bytes == g.info.extent_bytes;
}

std::string Engine::check_items(const Gen& g, uint64_t& n) const {
  std::unordered_set<std::string_view> keys;
  for (uint64_t s = 0; s < g.info.entries; ++s) {
    const Entry& e = g.entry(s);
    const pilaf::EntryState st = pilaf::check_entry(e);
    if (st == pilaf::EntryState::kEmpty) {
      if (!empty(e)) return "slot " + std::to_string(s) + " neither zero nor used";
      continue;
    }
    if (st != pilaf::EntryState::kUsed) return "slot " + std::to_string(s) + " torn or retired";
    ++n;
    pilaf::Record rec;
    if (e.extent_offset + e.kv_size > g.info.extent_bytes ||
        !pilaf::check_record(e, g.record(e), e.kv_size, &rec)) {
      return "slot " + std::to_string(s) + " record check fails";
    }
    if (g.heap.block_size(e.extent_offset) < e.kv_size + 8) return "record larger than its block";
    const pilaf::KeySlots ks = pilaf::key_slots(rec.key, g.info.entries);
    if (ks.tag != e.tag) return "slot " + std::to_string(s) + " wrong tag";
    if (ks.slot[0] != s && ks.slot[1] != s && ks.slot[2] != s) {
      return "slot " + std::to_string(s) + " not one of its key's slots";
    }
    if (!keys.insert(rec.key).second) return "key in two slots";
  }
  if (stats().bytes != g.heap.used_bytes()) return "stats.bytes wrong";
  return "";
}

std::unique_ptr<store::Engine> make_engine(const proto::EngineSpec& spec) {
  const Options& o = spec.options.pilaf;
  EngineConfig c;
  c.initial_entries = o.entries;
  c.initial_extent_bytes = o.extents;
  c.retire_grace_ms = o.grace_ms;
  return std::make_unique<Engine>(spec.store, c);
}

// proto/registry.h, clients_write_engine: clients only READ the table; every write is a message the
// worker executes.
bool clients_write_items() { return false; }

}  // namespace fabkv::pilaf

// The item rules, instantiated here, where Gen is complete (engine.h declares it extern).
template class fabkv::read_table::Engine<fabkv::pilaf::Engine, fabkv::pilaf::Gen,
                                         fabkv::pilaf::Generation>;
