#include "proto/pilaf/engine.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "store/pipeline.h"

namespace fabkv::store {

using pilaf::Entry;
using pilaf::ExtentHeader;
using pilaf::TableHeader;

namespace {

constexpr size_t kPage = 4096;
constexpr uint64_t kMinEntries = 16;

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Orders every store before it ahead of every store after it, for the NIC as for the
// compiler (x86-TSO keeps store order; the fence keeps the compiler from reordering the
// memcpys around it). Pilaf sec. 3.3: a barrier before acknowledging a put.
inline void publish() { std::atomic_thread_fence(std::memory_order_release); }

inline bool used(const Entry& e) { return (e.flags & pilaf::kInUse) != 0; }
inline bool empty(const Entry& e) { return e.flags == 0; }

}  // namespace

// One generation: two mappings and the heap over the second.
struct PilafEngine::Gen {
  Gen(uint64_t entries, size_t extent_bytes, bool huge, bool prefault)
      : table_mem(pilaf::table_bytes(entries), huge, prefault),
        extent_mem(extent_bytes, huge, prefault),
        heap(extent_mem.base(), extent_bytes) {
    info.table = table_mem.base();
    info.table_bytes = pilaf::table_bytes(entries);
    info.entries = entries;
    info.extents = extent_mem.base();
    info.extent_bytes = extent_bytes;
    info.huge_pages = table_mem.huge_pages() && extent_mem.huge_pages();
  }
  TableHeader* header() const { return reinterpret_cast<TableHeader*>(info.table); }
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

  PartitionMemory table_mem;
  PartitionMemory extent_mem;
  Heap heap;
  PilafGeneration info;
  uint64_t used = 0;  // used slots
};

PilafEngine::PilafEngine(const EngineOptions& opts, const PilafOptions& popts)
    : grace_ms_(popts.retire_grace_ms),
      max_path_(popts.max_path == 0 ? 1 : popts.max_path),
      max_path_nodes_(popts.max_path_nodes == 0 ? 1 : popts.max_path_nodes),
      huge_pages_(opts.huge_pages),
      prefault_(opts.prefault),
      version_(opts.first_version == 0 ? 1 : opts.first_version),
      max_value_(opts.max_value_size),
      clock_(opts.clock != nullptr ? opts.clock : &realtime_seconds),
      clock_ctx_(opts.clock_ctx) {
  if (opts.max_value_size > kMaxValueSizeLimit) {
    throw std::runtime_error("store: max_value_size " + std::to_string(opts.max_value_size) +
                             " exceeds the limit " + std::to_string(kMaxValueSizeLimit));
  }
  cap_ = popts.memory_bytes != 0 ? popts.memory_bytes : opts.memory_bytes;
  // One record of the largest size must fit a fresh heap: its block (8-byte header, 16-byte
  // granules) plus the heap's 16-byte end marker.
  min_extent_bytes_ = round_up(
      round_up(pilaf::record_bytes(kMaxKeySize, max_value_) + 8, Heap::kBlockAlign) + 16, kPage);
  uint64_t entries = std::max<uint64_t>(popts.initial_entries, kMinEntries);
  size_t extents = std::max(round_up(popts.initial_extent_bytes, kPage), min_extent_bytes_);
  if (pilaf::table_bytes(entries) + extents > cap_) {
    // Shrink the extents first (down to one record), then the table.
    const size_t table = pilaf::table_bytes(entries);
    extents = cap_ > table ? std::max(min_extent_bytes_, (cap_ - table) / kPage * kPage)
                           : min_extent_bytes_;
    if (extents + pilaf::table_bytes(kMinEntries) > cap_) {
      throw std::runtime_error("store: pilaf memory cap of " + std::to_string(cap_) +
                               " bytes cannot hold a table and one record of " +
                               std::to_string(max_value_) + " bytes");
    }
    entries = std::min<uint64_t>(entries, (cap_ - extents - sizeof(TableHeader)) / sizeof(Entry));
  }
  live_ = map_gen(entries, extents, 1);
  publish_sizes();
  publish();
}

PilafEngine::~PilafEngine() = default;

std::unique_ptr<PilafEngine::Gen> PilafEngine::map_gen(uint64_t entries, size_t extent_bytes,
                                                       uint32_t generation) const {
  auto g = std::make_unique<Gen>(entries, extent_bytes, huge_pages_, prefault_);
  // Anonymous mappings are zero: every slot is empty already.
  TableHeader h{};
  h.magic = pilaf::kTableMagic;
  h.version = pilaf::kLayoutVersion;
  h.generation = generation;
  h.moves = 0;
  h.state = pilaf::kStateLive;
  h.clock = clock_(clock_ctx_);
  h.entries = entries;
  h.extent_bytes = extent_bytes;
  std::memcpy(g->header(), &h, sizeof h);
  g->info.generation = generation;
  return g;
}

void PilafEngine::publish_sizes() {
  live_bytes_.store(live_->info.table_bytes + live_->info.extent_bytes, std::memory_order_relaxed);
  used_entries_.store(live_->used, std::memory_order_relaxed);
  stats_.bytes.store(live_->heap.used_bytes(), std::memory_order_relaxed);
}

const PilafGeneration& PilafEngine::current() const { return live_->info; }

EngineMemory PilafEngine::memory() const {
  return EngineMemory{live_->info.extents, live_->info.extent_bytes, live_->info.huge_pages};
}

PilafEngine::PilafStats PilafEngine::pilaf_stats() const {
  auto r = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return PilafStats{r(growths_), r(paths_), r(moved_keys_), r(used_entries_), r(retired_live_)};
}

void PilafEngine::set_hooks(PilafHooks h) {
  hooks_ = std::move(h);
  if (hooks_.on_live) hooks_.on_live(live_->info);
}

// ---- table operations ----------------------------------------------------------------------

PilafEngine::Found PilafEngine::find(const Gen& g, std::string_view key) const {
  const pilaf::KeySlots ks = pilaf::key_slots(key, g.info.entries);
  for (uint64_t s : ks.slot) {
    const Entry& e = g.entry(s);
    if (!used(e) || !pilaf::may_hold(e, key, ks.tag)) continue;
    if (std::memcmp(g.key_of(e).data(), key.data(), key.size()) == 0) return Found{s, true};
  }
  return Found{};
}

std::vector<uint64_t> PilafEngine::find_path(const Gen& g, const pilaf::KeySlots& ks) const {
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

void PilafEngine::apply_path(Gen& g, const std::vector<uint64_t>& path, const Entry& e,
                             bool live) {
  std::atomic_ref<uint64_t> moves(g.header()->moves);
  const uint64_t m = moves.load(std::memory_order_relaxed);
  moves.store(m + 1, std::memory_order_release);  // odd: a path is being moved
  publish();
  // From the last displaced key backwards: the copy lands in an empty slot (or the slot its
  // successor just vacated by copying itself onward), so each key is in one or two of its
  // slots at every instant, never in none.
  const bool observe = live && move_observer_;
  for (size_t i = path.size() - 1; i-- > 0;) {
    std::memcpy(&g.entry(path[i + 1]), &g.entry(path[i]), sizeof(Entry));
    publish();
    if (observe) move_observer_();
  }
  std::memcpy(&g.entry(path[0]), &e, sizeof(Entry));
  publish();
  if (observe) move_observer_();
  moves.store(m + 2, std::memory_order_release);  // even: settled
  if (live) {
    add_st(paths_);
    add_st(moved_keys_, path.size() - 1);
  }
}

bool PilafEngine::insert_entry(Gen& g, std::string_view key, const Entry& e, bool live) {
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

void PilafEngine::remove_at(Gen& g, uint64_t slot) {
  Entry& e = g.entry(slot);
  const uint64_t off = e.extent_offset;
  std::memset(&e, 0, sizeof(Entry));  // readers see the slot empty (or torn: retry)...
  publish();
  g.heap.free(off);  // ...before the record's bytes change
  --g.used;
  sub_st(stats_.items);
  publish_sizes();
  publish();
}

// ---- growth --------------------------------------------------------------------------------

std::unique_ptr<PilafEngine::Gen> PilafEngine::build(uint64_t entries, size_t extent_bytes) {
  const Gen& old = *live_;
  auto g = map_gen(entries, extent_bytes, old.info.generation + 1);
  for (uint64_t s = 0; s < old.info.entries; ++s) {
    const Entry& oe = old.entry(s);
    if (!used(oe)) continue;
    const uint64_t off = g->heap.alloc(oe.kv_size);
    if (off == Heap::kNil) return nullptr;
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

Status PilafEngine::grow(bool more_entries, bool more_extents, size_t record) {
  const Gen& old = *live_;
  uint64_t entries = old.info.entries * (more_entries ? 2 : 1);
  size_t extents = old.info.extent_bytes * (more_extents ? 2 : 1);
  // Clamp to the cap: a growth may be smaller than 2x, but must still grow what ran out.
  if (pilaf::table_bytes(entries) + extents > cap_) {
    if (more_extents) {
      const size_t table = pilaf::table_bytes(entries);
      extents = cap_ > table ? (cap_ - table) / kPage * kPage : 0;
      if (extents <= old.info.extent_bytes) return Status::kNoSpace;
      // The copies pack into the front of the new heap (no more than the old heap's used
      // bytes); the new record's block must fit behind them and the end marker.
      const size_t block = round_up(record + 8, Heap::kBlockAlign);
      if (old.heap.used_bytes() + block + 2 * Heap::kBlockAlign > extents) return Status::kNoSpace;
    } else {
      entries = cap_ > extents + sizeof(TableHeader)
                    ? (cap_ - extents - sizeof(TableHeader)) / sizeof(Entry)
                    : 0;
      if (entries <= old.info.entries) return Status::kNoSpace;
    }
  }
  std::unique_ptr<Gen> g;
  for (;;) {
    g = build(entries, extents);
    if (g != nullptr) break;
    // No cuckoo path while re-inserting (rare at <= 50% fill): more slots.
    const uint64_t more = entries * 2;
    if (pilaf::table_bytes(more) + extents > cap_) return Status::kNoSpace;
    entries = more;
  }

  // Switch: the new generation is complete; announce it, then tell readers of the old one.
  std::unique_ptr<Gen> prev = std::move(live_);
  live_ = std::move(g);
  publish_sizes();
  publish();
  add_st(growths_);
  if (hooks_.on_live) hooks_.on_live(live_->info);

  std::atomic_ref<uint32_t>(prev->header()->state)
      .store(pilaf::kStateRetired, std::memory_order_release);
  publish();
  Entry marker{};
  marker.flags = pilaf::kRetired;
  pilaf::seal(marker);
  for (uint64_t s = 0; s < prev->info.entries; ++s) {
    std::memcpy(&prev->entry(s), &marker, sizeof(Entry));
  }
  publish();
  retired_.push_back(Retired{std::move(prev), std::chrono::steady_clock::now()});
  add_st(retired_live_);
  return Status::kOk;
}

void PilafEngine::publish_clock() {
  // Clients READ it at any moment: one aligned 4-byte store, never torn.
  std::atomic_ref<uint32_t>(live_->header()->clock)
      .store(clock_(clock_ctx_), std::memory_order_relaxed);
}

void PilafEngine::reap_retired() {
  publish_clock();
  const auto now = std::chrono::steady_clock::now();
  const auto grace = std::chrono::milliseconds(grace_ms_);
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (now - it->since < grace) {
      ++it;
      continue;
    }
    if (hooks_.on_release) hooks_.on_release(it->gen->info);
    it = retired_.erase(it);  // munmap
    sub_st(retired_live_);
  }
}

// ---- data path -----------------------------------------------------------------------------

Status PilafEngine::get(KeyHash, std::string_view key, ItemView& out) {
  if (Status st = check_key(key, stats_); st != Status::kOk) return st;
  Gen& g = *live_;
  const Found f = find(g, key);
  if (f.ok) {
    const Entry& e = g.entry(f.slot);
    const ExtentHeader h = g.header_of(e);
    if (!expired(h.expire_at)) {
      const char* p = reinterpret_cast<const char*>(g.record(e)) + sizeof(ExtentHeader);
      out.value = std::string_view(p + e.key_len, e.kv_size - sizeof(ExtentHeader) - e.key_len);
      out.version = h.version;
      out.expire_at = h.expire_at;
      add_st(stats_.hits);
      return Status::kOk;
    }
    remove_at(g, f.slot);
    add_st(stats_.expired);
  }
  add_st(stats_.misses);
  return Status::kNotFound;
}

Status PilafEngine::put(KeyHash, std::string_view key, std::string_view value,
                        const PutOptions& opts, uint64_t* new_version) {
  if (Status st = check_key(key, stats_, value.size(), max_value_); st != Status::kOk) return st;
  Found f = find(*live_, key);
  ExtentHeader old{};
  if (f.ok) {
    old = live_->header_of(live_->entry(f.slot));
    if (expired(old.expire_at)) {
      remove_at(*live_, f.slot);
      add_st(stats_.expired);
      f = Found{};
    }
  }
  if (opts.expected_version != 0) {
    if (!f.ok) return Status::kNotFound;
    if (old.version != opts.expected_version) {
      add_st(stats_.version_mismatches);
      return Status::kVersionMismatch;
    }
  }

  const size_t rec = pilaf::record_bytes(key.size(), value.size());
  // `value` may be a view of this engine's memory (an earlier get()). It stays valid here: a
  // growth keeps the old generation mapped until reap_retired(), and an update frees the old
  // record only after the new one is written.
  for (;;) {
    Gen& g = *live_;
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
    const bool need_extents = off == Heap::kNil;
    if (need_entries || need_extents) {
      if (!need_extents) g.heap.free(off);
      if (grow(need_entries, need_extents, rec) != Status::kOk) {
        add_st(stats_.no_space);
        return Status::kNoSpace;
      }
      f = find(*live_, key);
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
      Entry& slot = g.entry(f.slot);
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
      ++g.used;
      add_st(stats_.items);
    }
    add_st(stats_.puts);
    publish_sizes();
    publish();
    if (new_version != nullptr) *new_version = h.version;
    return Status::kOk;
  }
}

Status PilafEngine::del(KeyHash, std::string_view key) {
  if (Status st = check_key(key, stats_); st != Status::kOk) return st;
  Gen& g = *live_;
  const Found f = find(g, key);
  if (!f.ok) return Status::kNotFound;
  const bool was_expired = expired(g.header_of(g.entry(f.slot)).expire_at);
  remove_at(g, f.slot);
  if (was_expired) {
    add_st(stats_.expired);
    return Status::kNotFound;
  }
  add_st(stats_.dels);
  return Status::kOk;
}

void PilafEngine::run_batch(std::span<const Request> reqs, CompletionFn done, size_t gap) {
  run_pipeline(*this, reqs, done, gap);
}

// ---- client rules, checks ------------------------------------------------------------------

PilafLookup PilafEngine::lookup(const PilafGeneration& g, std::string_view key) {
  PilafLookup r;
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

std::string PilafEngine::check() const {
  const Gen& g = *live_;
  std::string err = g.heap.check();
  if (!err.empty()) return "heap: " + err;
  TableHeader h;
  std::memcpy(&h, g.header(), sizeof h);
  if (h.magic != pilaf::kTableMagic || h.version != pilaf::kLayoutVersion ||
      h.generation != g.info.generation || h.entries != g.info.entries ||
      h.extent_bytes != g.info.extent_bytes) {
    return "table header does not describe the generation";
  }
  if (h.state != pilaf::kStateLive) return "live table not marked live";
  if (h.moves % 2 != 0) return "moves odd while idle";
  uint64_t n = 0;
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
  if (n != g.used) return "used count " + std::to_string(g.used) + " != " + std::to_string(n);
  const StatsSnapshot st = stats();
  if (st.items != n) return "stats.items " + std::to_string(st.items) + " != " + std::to_string(n);
  if (st.bytes != g.heap.used_bytes()) return "stats.bytes wrong";
  return "";
}

}  // namespace fabkv::store
