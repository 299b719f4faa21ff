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
#include <string>
#include <vector>

#include "proto/pilaf/layout.h"
#include "proto/read_table/generations.h"
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

class Engine final : public store::Engine {
 public:
  // Throws std::runtime_error when the cap cannot hold the smallest table plus one maximum-size
  // record, for max_value_size above the limit, or when a mapping fails.
  explicit Engine(const store::EngineOptions& opts, const EngineConfig& popts = {});
  ~Engine() override;  // unmaps everything; calls no hook

  std::string_view name() const override { return "pilaf"; }
  using store::Engine::del;
  using store::Engine::get;
  using store::Engine::put;
  store::Status get(store::KeyHash h, std::string_view key, store::ItemView& out) override;
  store::Status put(store::KeyHash h, std::string_view key, std::string_view value,
                    const store::PutOptions& opts = {}, uint64_t* new_version = nullptr) override;
  store::Status del(store::KeyHash h, std::string_view key) override;
  void prefetch_index(store::KeyHash) const override {}
  void prefetch_item(store::KeyHash) const override {}
  using store::Engine::run_batch;
  void run_batch(std::span<const store::Request> reqs, store::CompletionFn done,
                 size_t gap = 0) override;
  // The live generation's extent region (the table is in current()); changes on growth.
  store::EngineMemory memory() const override;
  size_t max_value_size() const override { return max_value_; }

  // ---- Pilaf specifics (owner thread unless said otherwise) ----
  // Installs the hooks and calls h.on_live(current()) at once.
  void set_hooks(Hooks h);
  // The live generation; the reference is valid until the next put() (a growth).
  const Generation& current() const;
  // Housekeeping the owner calls every so often (a worker: every 1024 poll rounds): releases
  // retired generations whose grace is over (hooks.on_release(gen), then munmap), and
  // publishes the clock (publish_clock()).
  void reap_retired();
  void housekeeping() override { reap_retired(); }
  // Writes the expiry clock (store::EngineOptions::clock) into the live TableHeader.clock, where
  // clients READ it to judge expire_at by the server's clock. Also done at every new
  // generation and by reap_retired().
  void publish_clock();

  struct PilafStats {
    uint64_t growths = 0;       // generations built after the first
    uint64_t paths = 0;         // cuckoo paths applied on the live table (header.moves += 2 each)
    uint64_t moved_keys = 0;    // entries moved by those paths
    uint64_t used_entries = 0;  // used slots in the live table
    uint64_t retired_live = 0;  // retired generations still mapped
  };
  PilafStats pilaf_stats() const;  // any thread
  // Table + extent bytes of the live generation; any thread.
  size_t memory_bytes() const { return live_bytes_.load(std::memory_order_relaxed); }
  size_t memory_cap() const { return cap_; }

  // The client's lookup rules over `g`'s raw memory (no fabric): entry reads, CRC checks,
  // tag filter, record check, full key compare. Any thread for a generation it may read.
  static Lookup lookup(const Generation& g, std::string_view key);

  // Table, heap and stats consistency, for tests: "" when fine. O(table + heap).
  std::string check() const;
  // Tests: called on the owner thread after every entry write of a cuckoo path on the live
  // table (moves is odd then), to check what a reader could see at that instant.
  void set_move_observer(std::function<void()> f) { move_observer_ = std::move(f); }

 private:
  struct Gen;
  struct Found {
    uint64_t slot = 0;
    bool ok = false;
  };

  Found find(const Gen& g, std::string_view key) const;
  // Cuckoo path for a new key with slots `ks`: path[0] is one of the key's slots, each
  // path[i+1] an alternative slot of the key at path[i], the last one empty. Empty vector =
  // no path within max_path / max_path_nodes.
  std::vector<uint64_t> find_path(const Gen& g, const pilaf::KeySlots& ks) const;
  // Moves the keys along `path` (see top) and writes `e` into path[0]. `live` bumps moves.
  void apply_path(Gen& g, const std::vector<uint64_t>& path, const pilaf::Entry& e, bool live);
  // Inserts a new entry for `key` (not present) into g; false when no path exists.
  bool insert_entry(Gen& g, std::string_view key, const pilaf::Entry& e, bool live);
  void remove_at(Gen& g, uint64_t slot);
  // Builds, announces and switches to a larger generation (more slots and/or more extent
  // bytes, with room for a `record`-byte record when more_extents). kNoSpace, and no change,
  // when the cap forbids it.
  store::Status grow(bool more_entries, bool more_extents, size_t record);
  std::unique_ptr<Gen> build(uint64_t entries, size_t extent_bytes);
  std::unique_ptr<Gen> map_gen(uint64_t entries, size_t extent_bytes, uint32_t generation) const;
  bool expired(uint32_t expire_at) const {
    return expire_at != 0 && clock_(clock_ctx_) >= expire_at;
  }
  void publish_sizes();

  Gen& live() const { return gens_.live(); }

  read_table::Generations<Gen, Generation> gens_;
  std::function<void()> move_observer_;
  size_t cap_ = 0;
  size_t min_extent_bytes_ = 0;
  uint32_t max_path_ = 5;
  uint32_t max_path_nodes_ = 500;
  bool huge_pages_ = false;
  bool prefault_ = true;
  uint64_t version_ = 1;
  size_t max_value_ = 0;
  store::ClockFn clock_;
  void* clock_ctx_;
  std::atomic<uint64_t> growths_{0}, paths_{0}, moved_keys_{0}, used_entries_{0};
  std::atomic<size_t> live_bytes_{0};
};

// The engine the registry builds for --engine pilaf (proto/engines.cc), sized by the [pilaf]
// knobs (proto/pilaf/options.h).
std::unique_ptr<store::Engine> make_engine(const proto::EngineSpec& spec);
// Do clients change items without the worker (proto/registry.h, clients_write_engine)?
bool clients_write_items();

}  // namespace fabkv::pilaf
