#include "proto/farm/engine.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "proto/options.h"
#include "store/pipeline.h"

namespace fabkv::farm {

using read_table::publish;
using read_table::round_up;
using store::add_st;
using store::kMaxKeySize;
using store::sub_st;

namespace {

constexpr uint64_t kMinHomes = 16;
constexpr uint64_t kNoHome = ~uint64_t{0};

}  // namespace

// One generation (read_table/engine.h), and the server's private home of every bucket's item
// (kNoHome = free), which the displacement search needs and clients don't.
struct Gen : read_table::GenMemory<Generation, TableHeader> {
  Gen(uint64_t homes, size_t bucket_bytes, size_t extent_bytes, bool huge, bool prefault)
      : GenMemory(farm::table_bytes(homes, bucket_bytes), extent_bytes, huge, prefault),
        home_of(farm::table_buckets(homes), kNoHome) {
    info.homes = homes;
    info.bucket_bytes = bucket_bytes;
  }
  std::byte* bucket(uint64_t b) const {
    return info.table + farm::bucket_offset(b, info.bucket_bytes);
  }
  BucketHeader header_of(uint64_t b) const {
    BucketHeader h;
    std::memcpy(&h, bucket(b), sizeof h);
    return h;
  }
  farm::Pointer pointer_of(uint64_t b) const {
    farm::Pointer p;
    std::memcpy(&p, bucket(b) + sizeof(BucketHeader), sizeof p);
    return p;
  }
  // The key of the item in bucket b (inline, or in its record).
  std::string_view key_of(uint64_t b) const {
    const BucketHeader h = header_of(b);
    const char* p = reinterpret_cast<const char*>(bucket(b)) + sizeof(BucketHeader);
    if (h.flags == farm::kIndirect)
      p = reinterpret_cast<const char*>(info.extents + pointer_of(b).extent_offset) +
          sizeof(RecordHeader);
    return std::string_view(p, h.key_len);
  }
  std::string_view value_of(uint64_t b) const {
    const BucketHeader h = header_of(b);
    return std::string_view(key_of(b).data() + h.key_len, h.value_len);
  }

  std::vector<uint64_t> home_of;
  uint64_t indirect = 0;
};

Engine::Engine(const store::EngineOptions& opts, const EngineConfig& fopts)
    : Base(opts, fopts.retire_grace_ms, fopts.memory_bytes,
           farm::record_bytes(kMaxKeySize, opts.max_value_size)),
      pointers_only_(fopts.pointers_only),
      inline_(pointers_only_ ? farm::kPointerBytes
                             : std::max(round_up(fopts.inline_bytes, 8), farm::kPointerBytes)),
      bucket_bytes_(farm::bucket_bytes(inline_)),
      probe_range_(std::max<uint32_t>(fopts.probe_range, kNeighbourhood)) {
  if (inline_ > 4096) throw std::runtime_error("store: farm inline bytes above 4096");
  scratch_.resize(bucket_bytes_);
  uint64_t homes = std::max<uint64_t>(fopts.initial_homes, kMinHomes);
  const size_t extents = first_extents(fopts.initial_extent_bytes, table_size(homes),
                                       table_size(kMinHomes), "farm");
  while (homes > kMinHomes && table_size(homes) + extents > cap_) homes /= 2;
  start(homes, extents);
}

Engine::~Engine() = default;

std::unique_ptr<Gen> Engine::map_gen(uint64_t homes, size_t extent_bytes,
                                     uint32_t generation) const {
  auto g = std::make_unique<Gen>(homes, bucket_bytes_, extent_bytes, huge_pages_, prefault_);
  TableHeader h = live_header<TableHeader>(farm::kTableMagic, farm::kLayoutVersion, generation);
  h.homes = homes;
  h.bucket_bytes = static_cast<uint32_t>(bucket_bytes_);
  h.inline_bytes = static_cast<uint32_t>(inline_);
  h.extent_bytes = extent_bytes;
  return with_header(std::move(g), h);
}

void Engine::publish_sizes() {
  live_bytes_.store(live().info.table_bytes + live().info.extent_bytes, std::memory_order_relaxed);
  used_buckets_.store(live().used, std::memory_order_relaxed);
  indirect_items_.store(live().indirect, std::memory_order_relaxed);
  stats_.bytes.store(live().used * bucket_bytes_ + live().heap.used_bytes(),
                     std::memory_order_relaxed);
}

store::EngineMemory Engine::memory() const {
  return store::EngineMemory{live().info.table, live().info.table_bytes, live().info.huge_pages};
}

Engine::FarmStats Engine::farm_stats() const {
  auto r = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return FarmStats{r(growths_),      r(paths_),          r(moved_keys_),
                   r(used_buckets_), r(indirect_items_), gens_.retired_live()};
}

// ---- table operations ----------------------------------------------------------------------

Engine::Found Engine::find(const Gen& g, std::string_view key) const {
  const farm::KeyHome kh = farm::key_home(key, g.info.homes);
  for (uint64_t b = kh.home; b < kh.home + kNeighbourhood; ++b) {
    if (g.home_of[b] != kh.home) continue;  // free, or another home's key
    const BucketHeader h = g.header_of(b);
    if (h.key_len != key.size() || h.tag != kh.tag) continue;
    if (std::memcmp(g.key_of(b).data(), key.data(), key.size()) == 0) return Found{b, true};
  }
  return Found{};
}

std::vector<uint64_t> Engine::find_chain(const Gen& g, uint64_t home) const {
  const uint64_t end = std::min<uint64_t>(farm::table_buckets(g.info.homes), home + probe_range_);
  uint64_t f = end;
  for (uint64_t b = home; b < end; ++b)
    if (g.home_of[b] == kNoHome) {
      f = b;
      break;
    }
  if (f == end) return {};
  std::vector<uint64_t> chain{f};
  // Herlihy, Shavit, Tzafrir's hopscotch insertion: while the free bucket is out of the new
  // key's neighbourhood, move into it the key farthest from it whose own neighbourhood still
  // covers it, which brings the free bucket closer. Computed on the home array alone: a step
  // only changes buckets at or after the free one, so the candidates of later steps (all
  // before it) are as they are now.
  while (f >= home + kNeighbourhood) {
    bool moved = false;
    for (uint64_t j = f - (kNeighbourhood - 1); j < f; ++j) {
      if (g.home_of[j] != kNoHome && f < g.home_of[j] + kNeighbourhood) {
        chain.push_back(j);
        f = j;
        moved = true;
        break;
      }
    }
    if (!moved) return {};
  }
  return chain;
}

void Engine::apply_chain(Gen& g, const std::vector<uint64_t>& chain, const std::byte* bucket,
                         uint64_t home, bool live) {
  if (chain.size() == 1) {
    std::memcpy(g.bucket(chain[0]), bucket, bucket_bytes_);
    g.home_of[chain[0]] = home;
    publish();
    return;
  }
  // Each key is copied into the free bucket first (it is in two buckets of its neighbourhood
  // then), and only the next step overwrites its old bucket: it is never in none.
  move_keys(g, live, chain.size(), [&](size_t i) {
    if (i + 1 < chain.size()) {
      std::memcpy(g.bucket(chain[i]), g.bucket(chain[i + 1]), bucket_bytes_);
      g.home_of[chain[i]] = g.home_of[chain[i + 1]];
    } else {
      std::memcpy(g.bucket(chain.back()), bucket, bucket_bytes_);
      g.home_of[chain.back()] = home;
    }
  });
}

bool Engine::insert(Gen& g, const std::byte* bucket, uint64_t home, bool live) {
  const std::vector<uint64_t> chain = find_chain(g, home);
  if (chain.empty()) return false;
  apply_chain(g, chain, bucket, home, live);
  ++g.used;
  return true;
}

void Engine::erase(Gen& g, uint64_t b) {
  const BucketHeader h = g.header_of(b);
  const uint64_t off = h.flags == farm::kIndirect ? g.pointer_of(b).extent_offset
                                                  : store::Heap::kNil;
  std::memset(g.bucket(b), 0, bucket_bytes_);  // readers see it empty (or torn: retry)...
  g.home_of[b] = kNoHome;
  publish();
  if (off != store::Heap::kNil) {
    g.heap.free(off);  // ...before the record's bytes change
    --g.indirect;
  }
}

// ---- growth --------------------------------------------------------------------------------

std::unique_ptr<Gen> Engine::build(uint64_t homes, size_t extent_bytes) {
  const Gen& old = live();
  auto g = map_gen(homes, extent_bytes, old.info.generation + 1);
  std::vector<std::byte> b(bucket_bytes_);
  for (uint64_t s = 0; s < farm::table_buckets(old.info.homes); ++s) {
    if (old.home_of[s] == kNoHome) continue;
    std::memcpy(b.data(), old.bucket(s), bucket_bytes_);
    const BucketHeader h = old.header_of(s);
    if (h.flags == farm::kIndirect) {
      const farm::Pointer p = old.pointer_of(s);
      const uint64_t off = g->heap.alloc(p.record_bytes);
      if (off == store::Heap::kNil) return nullptr;
      std::memcpy(g->info.extents + off, old.info.extents + p.extent_offset, p.record_bytes);
      farm::Pointer np = p;
      np.extent_offset = off;  // same record bytes: its check stays
      std::memcpy(b.data() + sizeof(BucketHeader), &np, sizeof np);
      farm::seal(b.data(), bucket_bytes_);
      ++g->indirect;
    }
    // Not visible yet: no reader to protect, the same code path is fine.
    if (!insert(*g, b.data(), farm::key_home(old.key_of(s), homes).home, false)) return nullptr;
  }
  return g;
}

store::Status Engine::grow(bool more_homes, bool more_extents, size_t record) {
  const Gen& old = live();
  uint64_t homes = old.info.homes * (more_homes ? 2 : 1);
  size_t extents = old.info.extent_bytes * (more_extents ? 2 : 1);
  // Clamp to the cap: a growth may be smaller than 2x, but must still grow what ran out.
  if (farm::table_bytes(homes, bucket_bytes_) + extents > cap_) {
    if (more_extents) {
      extents = clamped_extents(table_size(homes), record);
      if (extents == 0) return store::Status::kNoSpace;
    } else {
      while (homes > old.info.homes && farm::table_bytes(homes, bucket_bytes_) + extents > cap_)
        homes -= std::max<uint64_t>(1, (homes - old.info.homes) / 2);
      if (homes <= old.info.homes) return store::Status::kNoSpace;
    }
  }
  return grow_to(homes, extents);
}

void Engine::retire(Gen& prev) const {
  std::atomic_ref<uint32_t>(prev.header()->state)
      .store(farm::kStateRetired, std::memory_order_release);
  publish();
  std::vector<std::byte> marker(bucket_bytes_);
  BucketHeader mh{};
  mh.flags = farm::kRetired;
  std::memcpy(marker.data(), &mh, sizeof mh);
  farm::seal(marker.data(), bucket_bytes_);
  for (uint64_t s = 0; s < farm::table_buckets(prev.info.homes); ++s)
    std::memcpy(prev.bucket(s), marker.data(), bucket_bytes_);
}

// ---- data path -----------------------------------------------------------------------------

Engine::Item Engine::item_at(const Gen& g, uint64_t b) const {
  const BucketHeader h = g.header_of(b);
  return Item{h.version, h.expire_at};
}

std::string_view Engine::value_at(const Gen& g, uint64_t b) const { return g.value_of(b); }

std::optional<uint64_t> Engine::place(std::string_view key, std::string_view value,
                                      const store::PutOptions& opts, Found f) {
  const bool indirect = pointers_only_ || key.size() + value.size() > inline_;
  const size_t rec = indirect ? farm::record_bytes(key.size(), value.size()) : 0;
  // `value` is copied into the record or the scratch bucket before any bucket of the table is
  // written.
  for (;;) {
    Gen& g = live();
    const farm::KeyHome kh = farm::key_home(key, g.info.homes);
    std::vector<uint64_t> chain;
    bool need_homes = false;
    if (!f.ok) {
      chain = find_chain(g, kh.home);
      need_homes = chain.empty();
    }
    uint64_t off = store::Heap::kNil;
    if (indirect) off = g.heap.alloc(rec);
    const bool need_extents = indirect && off == store::Heap::kNil;
    if (need_homes || need_extents) {
      if (off != store::Heap::kNil) g.heap.free(off);
      if (grow(need_homes, need_extents, rec) != store::Status::kOk) return std::nullopt;
      f = find(live(), key);
      continue;
    }

    const uint64_t version = stamp_version(version_, opts);
    BucketHeader h{};
    h.version = version;
    h.expire_at = opts.expire_at;
    h.value_len = static_cast<uint32_t>(value.size());
    h.key_len = static_cast<uint8_t>(key.size());
    h.tag = kh.tag;
    std::byte* b = scratch_.data();
    std::memset(b, 0, bucket_bytes_);
    if (indirect) {
      // 1. The record, in space no bucket points at.
      std::byte* p = g.info.extents + off;
      RecordHeader rh{0, version, static_cast<uint32_t>(key.size()),
                      static_cast<uint32_t>(value.size())};
      std::memcpy(p + sizeof rh, key.data(), key.size());
      std::memcpy(p + sizeof rh + key.size(), value.data(), value.size());
      std::memcpy(p, &rh, sizeof rh);
      rh.check = farm::record_check(p, rec, version);
      std::memcpy(p, &rh.check, 8);
      h.flags = farm::kIndirect;
      const farm::Pointer ptr{off, static_cast<uint32_t>(rec), 0};
      std::memcpy(b + sizeof h, &ptr, sizeof ptr);
    } else {
      h.flags = farm::kInline;
      std::memcpy(b + sizeof h, key.data(), key.size());
      std::memcpy(b + sizeof h + key.size(), value.data(), value.size());
    }
    std::memcpy(b, &h, sizeof h);
    farm::seal(b, bucket_bytes_);
    publish();

    // 2. The bucket; 3. (update of an indirect item) the old record goes back to the heap.
    if (f.ok) {
      const uint64_t old_off = g.header_of(f.at).flags == farm::kIndirect
                                   ? g.pointer_of(f.at).extent_offset
                                   : store::Heap::kNil;
      std::memcpy(g.bucket(f.at), b, bucket_bytes_);
      publish();
      if (old_off != store::Heap::kNil) {
        g.heap.free(old_off);
        --g.indirect;
      }
    } else {
      apply_chain(g, chain, b, kh.home, true);
    }
    if (indirect) ++g.indirect;
    return version;
  }
}

// ---- client rules, checks ------------------------------------------------------------------

Lookup Engine::lookup(const Generation& g, std::string_view key) {
  Lookup r;
  const farm::KeyHome kh = farm::key_home(key, g.homes);
  const size_t bb = g.bucket_bytes;
  std::vector<char> copy(farm::neighbourhood_bytes(bb));
  std::vector<char> rec;
  uint64_t seen = farm::load_header_word(g.table + farm::kMovesOffset).moves;
  constexpr int kRounds = 64;
  for (int round = 0; round < kRounds; ++round) {
    std::memcpy(copy.data(), g.table + farm::bucket_offset(kh.home, bb), copy.size());
    ++r.reads;
    uint32_t skip = 0;
    for (;;) {
      farm::Bucket b;
      const farm::Search s = farm::search_neighbourhood(copy.data(), bb, key, kh.tag, &b, skip);
      if (s == farm::Search::kRetired) {
        r.retired = true;
        return r;
      }
      if (s == farm::Search::kInline) {
        r.found = true;
        r.version = b.header.version;
        r.expire_at = b.header.expire_at;
        r.value.assign(b.value);
        return r;
      }
      if (s == farm::Search::kIndirect) {
        const farm::Pointer& p = b.pointer;
        if (p.extent_offset > g.extent_bytes || p.record_bytes > g.extent_bytes - p.extent_offset)
          break;  // a pointer that cannot be right: read again
        rec.assign(reinterpret_cast<const char*>(g.extents) + p.extent_offset,
                   reinterpret_cast<const char*>(g.extents) + p.extent_offset + p.record_bytes);
        std::string_view k, v;
        if (!farm::check_record(b, rec.data(), rec.size(), &k, &v)) break;  // read again
        if (k != key) {
          ++skip;
          continue;
        }
        r.found = true;
        r.version = b.header.version;
        r.expire_at = b.header.expire_at;
        r.value.assign(v);
        return r;
      }
      if (s == farm::Search::kTorn) break;
      // kMiss: confirm that no displacement ran while we copied.
      const farm::HeaderWord w = farm::load_header_word(g.table + farm::kMovesOffset);
      if (w.state == farm::kStateRetired) {
        r.retired = true;
        return r;
      }
      if (w.moves % 2 == 0 && w.moves == seen) return r;
      seen = w.moves;
      break;
    }
  }
  return r;
}

bool Engine::describes(const Gen& g, const TableHeader& h) const {
  return h.magic == farm::kTableMagic && h.version == farm::kLayoutVersion &&
         h.generation == g.info.generation && h.homes == g.info.homes &&
         h.bucket_bytes == bucket_bytes_ && h.inline_bytes == inline_ &&
         h.extent_bytes == g.info.extent_bytes;
}

std::string Engine::check_items(const Gen& g, uint64_t& n) const {
  uint64_t indirect = 0;
  std::unordered_set<std::string_view> keys;
  for (uint64_t s = 0; s < farm::table_buckets(g.info.homes); ++s) {
    const std::string at = "bucket " + std::to_string(s);
    farm::Bucket b;
    const farm::BucketState st = farm::check_bucket(reinterpret_cast<const char*>(g.bucket(s)),
                                                    bucket_bytes_, &b);
    if (st == farm::BucketState::kEmpty) {
      if (g.home_of[s] != kNoHome) return at + " empty but has a home";
      continue;
    }
    if (st != farm::BucketState::kInline && st != farm::BucketState::kIndirect)
      return at + " torn or retired";
    if (st == farm::BucketState::kInline && pointers_only_) return at + " inline in farm-var";
    ++n;
    std::string_view key = b.key;
    if (st == farm::BucketState::kIndirect) {
      ++indirect;
      std::string_view v;
      const farm::Pointer& p = b.pointer;
      if (p.extent_offset + p.record_bytes > g.info.extent_bytes ||
          !farm::check_record(b, reinterpret_cast<const char*>(g.info.extents) + p.extent_offset,
                              p.record_bytes, &key, &v))
        return at + " record check fails";
      if (g.heap.block_size(p.extent_offset) < p.record_bytes + 8)
        return at + " record larger than its block";
      if (!pointers_only_ && key.size() + v.size() <= inline_)
        return at + " indirect but fits inline";
    }
    const farm::KeyHome kh = farm::key_home(key, g.info.homes);
    if (kh.tag != b.header.tag) return at + " wrong tag";
    if (g.home_of[s] != kh.home) return at + " home array disagrees";
    if (s < kh.home || s >= kh.home + kNeighbourhood) return at + " outside its neighbourhood";
    if (!keys.insert(key).second) return at + " key in two buckets";
  }
  if (indirect != g.indirect) return "indirect count wrong";
  return "";
}

std::unique_ptr<store::Engine> make_engine(const proto::EngineSpec& spec) {
  const Options& o = spec.options.farm;
  EngineConfig c;
  // HERD sec. 5.1.2: FaRM-em inlines the values, FaRM-em-VAR keeps pointers in the buckets.
  c.inline_bytes = o.inline_bytes;
  c.pointers_only = spec.protocol == proto::Id::farm_var;
  c.initial_homes = o.homes;
  c.initial_extent_bytes = o.extents;
  c.retire_grace_ms = o.grace_ms;
  return std::make_unique<Engine>(spec.store, c);
}

// proto/registry.h, clients_write_engine: clients only READ the table; every write is a request the
// worker executes.
bool clients_write_items() { return false; }

}  // namespace fabkv::farm

// The item rules, instantiated here, where Gen is complete (engine.h declares it extern).
template class fabkv::read_table::Engine<fabkv::farm::Engine, fabkv::farm::Gen,
                                         fabkv::farm::Generation>;
