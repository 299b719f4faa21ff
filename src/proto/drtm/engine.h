// `drtm` engine: DrTM-KV's table and items (survey sec. 3.5, Guidelines sec. 4.3.2), laid out
// byte for byte as proto/drtm/wire.h says, so that clients GET by one READ of a cached item and
// PUT an existing key by CAS + WRITE + CAS without the worker. Lossless like `store`: no
// eviction; a PUT that finds no memory or no bucket slot returns kNoSpace and changes nothing.
// Design: docs/drtm.md.
//
// The engine is mutated behind its owner: clients change lock words and records at any time
// (on shm and tcp only while the owner thread polls its endpoints, on verbs whenever the NIC
// serves them). So the engine keeps nothing of an item in its own memory: every call reads
// the lock word where clients change it, and every change the engine makes to an item goes
// through the same lock (a compare-and-swap on the word, docs/drtm.md "Who applies the
// atomics"):
//   PUT of an unlocked item whose value fits: lock it, write the other record, release to the
//     next version (as a client would);
//   PUT of a locked item (a client is mid-PUT, or died holding the lock), of a value that does
//     not fit, and DELETE: a new item takes the key's slot (PUT) or the slot is cleared (DELETE),
//     then the old item's lock word becomes kRetired; its memory is freed retire_grace_ms later
//     (a lock holder's WRITE may still land in it);
//   GET of an expired item removes it like DELETE when it is not locked.
//
// Versions: per key, every PUT's version is above every version the key had (clients add 1
// under the lock; a new item starts above everything retired), but unlike `store` two keys
// may carry the same version.
//
// Threads: one owner thread calls everything except stats() and drtm_stats().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "proto/drtm/wire.h"
#include "proto/read_table/generations.h"
#include "proto/registry.h"
#include "store/engine.h"
#include "store/heap.h"
#include "store/region.h"

namespace fabkv::drtm {

struct EngineConfig {
  // Table bytes (main and overflow buckets, 128 B each); 0 = 1/8 of memory_bytes. A quarter
  // of the buckets are overflow buckets.
  size_t table_bytes = 0;
  // How long a retired item's memory stays untouched (a lock holder's WRITE may still land).
  uint32_t retire_grace_ms = 5000;
};

// Where clients find a worker's engine.
struct Regions {
  std::byte* table = nullptr;
  size_t table_bytes = 0;
  uint64_t main_buckets = 0, overflow_buckets = 0;
  std::byte* items = nullptr;
  size_t items_bytes = 0;
};

class Engine final : public store::Engine {
 public:
  // Throws std::runtime_error for options that leave no room or a failed mapping.
  explicit Engine(const store::EngineOptions& opts, const EngineConfig& dopts = {});
  ~Engine() override;

  std::string_view name() const override { return "drtm"; }

  void restore_version(uint64_t version) override {
    store::PutOptions restored;
    restored.restore_version = version;
    store::stamp_version(version_, restored);
  }
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
  // The items region (the table is in regions()).
  store::EngineMemory memory() const override;
  size_t max_value_size() const override { return max_value_; }
  // Frees retired items past their grace.
  void housekeeping() override;

  const Regions& regions() const { return regions_; }

  struct DrtmStats {
    uint64_t in_place = 0;       // PUTs the worker wrote under the item's lock
    uint64_t superseded = 0;     // PUTs that replaced the key's item (locked, or too small)
    uint64_t locked_seen = 0;    // worker PUT/DELETEs that found a client holding the lock
    uint64_t retired_live = 0;   // retired items not yet freed
    uint64_t overflow_used = 0;  // overflow buckets linked into chains
    uint64_t torn_gets = 0;      // worker GETs that never found a whole record (verbs only)
    // The worker's own CAS on a lock word that found it changed since its load: a client's
    // atomic applied in between. 0 on shm and tcp, where the worker applies the clients'
    // atomics itself, between its own accesses (docs/drtm.md "Who applies the atomics").
    uint64_t own_cas_failures = 0;
  };
  DrtmStats drtm_stats() const;  // any thread

  // Tests: every bucket sealed, every slot pointing at a live item of its tag; "" when fine.
  std::string check() const;
  // Tests: the item a key's slot points at (nullptr when absent).
  std::byte* item_of(std::string_view key) const;

 private:
  struct Where {
    bool ok = false;
    uint64_t bucket = 0;
    uint32_t slot = 0;
    drtm::BucketSlot s{};
  };
  Where find(std::string_view key) const;
  // A free slot on the key's chain, from its main bucket through its overflow buckets:
  // ok with bucket/slot set, else not ok with `*last` the chain's last bucket (to link a new
  // overflow bucket to).
  Where free_slot(const drtm::KeyPlace& kp, uint64_t* last) const;
  drtm::Bucket* bucket(uint64_t i) const {
    return reinterpret_cast<drtm::Bucket*>(regions_.table) + i;
  }
  char* item_at(uint64_t offset) const { return reinterpret_cast<char*>(regions_.items) + offset; }
  // Rewrites bucket i with slot `slot` set to `s` (sealed, one memcpy).
  void set_slot(uint64_t i, uint32_t slot, const drtm::BucketSlot& s);
  void seal(uint64_t i, drtm::Bucket b);
  // Allocates and writes a new item at `version`; 0 = no memory.
  uint64_t make_item(std::string_view key, std::string_view value, uint64_t version,
                     uint32_t expire_at, drtm::BucketSlot* slot, uint16_t tag);
  // Takes the item out of service: kRetired in its lock word (CAS, against the clients'), and
  // its memory freed after the grace. Returns the last version it had or was given.
  uint64_t retire(uint64_t offset);
  bool expired(uint32_t expire_at) const {
    return expire_at != 0 && clock_(clock_ctx_) >= expire_at;
  }

  std::unique_ptr<store::PartitionMemory> table_mem_, items_mem_;
  Regions regions_;
  store::Heap heap_;
  // Offsets of retired items, freed after the grace (a late lock holder's WRITE may land).
  read_table::GraceQueue<uint64_t> retired_;
  uint64_t next_overflow_ = 0;  // next overflow bucket never used
  uint64_t version_ = 1;        // above every version handed out by the worker or retired
  uint32_t incarnation_ = 0;
  size_t max_value_ = 0;
  store::ClockFn clock_;
  void* clock_ctx_;
  std::atomic<uint64_t> in_place_{0}, superseded_{0}, locked_seen_{0}, overflow_used_{0},
      torn_gets_{0}, own_cas_failures_{0};
};

// The engine the registry builds for --engine drtm (proto/engines.cc).
std::unique_ptr<store::Engine> make_engine(const proto::EngineSpec& spec);
// Do clients change items without the worker (proto/registry.h, clients_write_engine)?
bool clients_write_items();

}  // namespace fabkv::drtm
