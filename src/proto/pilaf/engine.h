// `pilaf` engine: Pilaf's self-verifying 3-way cuckoo table (Pilaf sec. 3.2-3.4, 4), laid out
// byte for byte as proto/pilaf/layout.h says, so that clients can GET by RDMA READ while the
// owner thread writes. Lossless like `store`: a PUT that cannot fit grows the table and/or the
// extents into a new generation (up to EngineConfig::memory_bytes), else returns kNoSpace and
// changes nothing. Design and write order: docs/pilaf.md, "Storage".
//
// Memory: per generation two anonymous mappings, each page aligned (the server registers each
// with the NIC separately): the table (TableHeader + `entries` 32-byte Entry slots) and the
// extents (ExtentHeader + key + value records, carved by the TLSF heap of heap.h, which reuses
// freed space). A growth builds a complete new generation, announces it (hooks.on_live), then
// marks every slot of the old table retired. The old generation stays mapped for
// retire_grace_ms so that clients mid-READ finish on valid memory; reap_retired() releases it
// (hooks.on_release, then munmap).
//
// Write order (what keeps concurrent READers safe, all separated by release fences):
//   PUT new/update: write the record into free extent space, then the sealed entry (built
//     locally, memcpy'd into its slot); an update then frees the old record.
//   DEL: zero the entry, then free the record.
//   Cuckoo displacement: the whole path is computed first; header.moves goes odd; entries
//     move from the last displaced key backwards (copy to the new slot, then the previous key
//     overwrites the vacated one); the new key lands; moves goes even. A key is in 1 or 2 of
//     its slots at every instant (Pilaf sec. 3.4).
//   Every mutation ends with a release fence (Pilaf sec. 3.3: linearizable).
//
// Clock: TableHeader.clock carries the expiry clock to clients (publish_clock()), so that a
// GET by READ judges expire_at by the server's clock, as a GET served here does.
//
// Threads: like every engine, one owner thread calls get/put/del/run_batch, set_hooks,
// current(), reap_retired(), publish_clock() and the hooks run on it; stats(), pilaf_stats(),
// memory_bytes() may be called from any thread.
//
// Prefetch: the slots of a key come from pilaf::key_slots(key), which the store::KeyHash of the
// pipeline stages cannot give, so prefetch_index/prefetch_item are no-ops.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proto/pilaf/layout.h"
#include "proto/read_table/engine.h"
#include "proto/registry.h"
#include "store/engine.h"
#include "store/heap.h"
#include "store/region.h"

namespace fabkv::pilaf {

struct EngineConfig {
  // Table slots of the first generation (rounded up to at least 16).
  size_t initial_entries = 65536;
  // Extent bytes of the first generation (rounded up to a page and to one maximum-size
  // record).
  size_t initial_extent_bytes = size_t{8} << 20;
  // Cap on table bytes + extent bytes of the live generation; 0 =
  // store::EngineOptions::memory_bytes. The first generation is clamped to fit it; a growth that
  // cannot fit it is kNoSpace.
  size_t memory_bytes = 0;
  // How long a replaced generation stays mapped after the growth (clients mid-READ).
  uint32_t retire_grace_ms = 5000;
  // Longest cuckoo path (displaced keys) tried before the table grows.
  uint32_t max_path = 5;
  // Cuckoo BFS node budget per insert.
  uint32_t max_path_nodes = 500;
};

// One generation's memory, as the server registers it and the control channel describes it.
struct Generation {
  uint32_t generation = 0;
  std::byte* table = nullptr;  // TableHeader + entries * Entry, page aligned
  size_t table_bytes = 0;      // pilaf::table_bytes(entries)
  uint64_t entries = 0;
  std::byte* extents = nullptr;  // records at the offsets entries name, page aligned
  size_t extent_bytes = 0;
  bool huge_pages = false;  // both mappings use MAP_HUGETLB
};

// What the server is told of generations (read_table/generations.h).
using Hooks = read_table::Hooks<Generation>;

// The client's lookup rules (layout.h, bottom) run on local memory: for tests and tools.
struct Lookup {
  bool found = false;    // key present (expired items count as found; check expire_at)
  bool retired = false;  // met a retired marker: the generation is stale
  uint32_t probes = 0;   // entry reads, retries included
  uint64_t version = 0;
  uint32_t expire_at = 0;
  uint32_t clock = 0;      // TableHeader.clock as last read: judge expire_at by this
  std::string_view value;  // into the generation's extents
};

// One generation's memory (engine.cc).
struct Gen;

// The item rules (get/put/del, expiry, versions, stats), hooks, clock and move observer are
// read_table/engine.h's; this class keeps the cuckoo table.
class Engine final : public read_table::Engine<Engine, Gen, Generation> {
 public:
  // Throws std::runtime_error when the cap cannot hold the smallest table plus one maximum-size
  // record, for max_value_size above the limit, or when a mapping fails.
  explicit Engine(const store::EngineOptions& opts, const EngineConfig& popts = {});
  ~Engine() override;  // unmaps everything; calls no hook

  std::string_view name() const override { return "pilaf"; }
  // The live generation's extent region (the table is in current()); changes on growth.
  store::EngineMemory memory() const override;

  struct PilafStats {
    uint64_t growths = 0;       // generations built after the first
    uint64_t paths = 0;         // cuckoo paths applied on the live table (header.moves += 2 each)
    uint64_t moved_keys = 0;    // entries moved by those paths
    uint64_t used_entries = 0;  // used slots in the live table
    uint64_t retired_live = 0;  // retired generations still mapped
  };
  PilafStats pilaf_stats() const;  // any thread
  size_t memory_cap() const { return cap_; }

  // The client's lookup rules over `g`'s raw memory (no fabric): entry reads, CRC checks,
  // tag filter, record check, full key compare. Any thread for a generation it may read.
  static Lookup lookup(const Generation& g, std::string_view key);

 private:
  using Base = read_table::Engine<Engine, Gen, Generation>;
  friend Base;

  // The item rules' table operations (read_table/engine.h).
  Found find(const Gen& g, std::string_view key) const;
  Item item_at(const Gen& g, uint64_t slot) const;
  std::string_view value_at(const Gen& g, uint64_t slot) const;
  void erase(Gen& g, uint64_t slot);
  std::optional<uint64_t> place(std::string_view key, std::string_view value,
                                const store::PutOptions& opts, Found f);
  void publish_sizes();
  size_t table_size(uint64_t entries) const { return pilaf::table_bytes(entries); }
  std::unique_ptr<Gen> build(uint64_t entries, size_t extent_bytes);
  void retire(Gen& prev) const;
  std::unique_ptr<Gen> map_gen(uint64_t entries, size_t extent_bytes, uint32_t generation) const;
  bool describes(const Gen& g, const TableHeader& h) const;
  // Slots, records, tags and stats.bytes.
  std::string check_items(const Gen& g, uint64_t& n) const;

  // Cuckoo path for a new key with slots `ks`: path[0] is one of the key's slots, each
  // path[i+1] an alternative slot of the key at path[i], the last one empty. Empty vector =
  // no path within max_path / max_path_nodes.
  std::vector<uint64_t> find_path(const Gen& g, const pilaf::KeySlots& ks) const;
  // Moves the keys along `path` (see top) and writes `e` into path[0]. `live` bumps moves.
  void apply_path(Gen& g, const std::vector<uint64_t>& path, const pilaf::Entry& e, bool live);
  // Inserts a new entry for `key` (not present) into g; false when no path exists.
  bool insert_entry(Gen& g, std::string_view key, const pilaf::Entry& e, bool live);
  // Builds, announces and switches to a larger generation (more slots and/or more extent
  // bytes, with room for a `record`-byte record when more_extents). kNoSpace, and no change,
  // when the cap forbids it.
  store::Status grow(bool more_entries, bool more_extents, size_t record);

  uint32_t max_path_ = 5;
  uint32_t max_path_nodes_ = 500;
  std::atomic<uint64_t> used_entries_{0};
};

}  // namespace fabkv::pilaf

// Instantiated in engine.cc, where Gen is complete.
extern template class fabkv::read_table::Engine<fabkv::pilaf::Engine, fabkv::pilaf::Gen,
                                                fabkv::pilaf::Generation>;

namespace fabkv::pilaf {

// The engine the registry builds for --engine pilaf (proto/engines.cc), sized by the [pilaf]
// knobs (proto/pilaf/options.h).
std::unique_ptr<store::Engine> make_engine(const proto::EngineSpec& spec);
// Do clients change items without the worker (proto/registry.h, clients_write_engine)?
bool clients_write_items();

}  // namespace fabkv::pilaf
