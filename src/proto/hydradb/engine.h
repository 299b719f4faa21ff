// `hydradb` engine: the store behind fabkv's HydraDB protocol (survey sec. 3.1). Lossless like
// `store`; what differs is that clients READ its items, so
//
//   * items live in an arena of their own (one mapping, registered read-only for clients by
//     proto/hydradb/server.cc), each laid out and checked as proto/hydradb/layout.h says; the
//     index lives elsewhere and is never visible to clients (survey sec. 3.1: "This hash table
//     is not visible to the clients");
//   * a GET returns where its item is (store::Response::location, get()'s *location: the item's
//   byte
//     offset in the arena), so the server can hand it to the client with a lease;
//   * updates are out of place (survey sec. 3.1): a PUT writes the new version into fresh
//     memory, points the index at it, then clears the old item's valid flag; a DELETE (or an
//     item found expired) clears the flag. An item's bytes never change after it is written,
//     except that flag.
//
// Delayed reuse: the memory of an item whose flag was cleared is held, untouched, for
// EngineConfig::hold_ns on the engine's steady clock before the heap may hand it out again
// (the server sets hold = the lease it grants + a margin, docs/hydradb.md "Leases"). Holds
// are released in retirement order by reclaim(), which every PUT and DELETE and housekeeping()
// call; a PUT that finds no free memory reclaims once more before it answers kNoSpace (held
// memory counts against --memory: a key rewritten faster than holds end needs room for
// every version of the last hold).
//
// Index: HydraDB's compact table (survey sec. 3.1: buckets of one 64-byte line with 7 slots
// and a link to an extension, each slot a signature and a pointer), store/layout.h's
// StoreBucket with store::tag_of as the signature; extension buckets come from a pool beside
// the index, not from the arena.
//
// Threads: like every engine, one owner thread calls everything but stats(), hydra_stats(),
// memory() and max_value_size().
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "proto/hydradb/layout.h"
#include "proto/registry.h"
#include "store/chain.h"
#include "store/engine.h"
#include "store/heap.h"
#include "store/layout.h"
#include "store/region.h"

namespace fabkv::hydradb {

// CLOCK_MONOTONIC in nanoseconds: the default clock of holds.
uint64_t steady_nanoseconds(void* unused);

struct EngineConfig {
  // How long a replaced or deleted item's memory stays untouched (the longest lease the
  // server grants plus its margin). 0 = reuse at once (tests of the heap only).
  uint64_t hold_ns = 150'000'000;
  // The clock holds are measured on; tests move it by hand.
  uint64_t (*steady)(void* ctx) = &steady_nanoseconds;
  void* steady_ctx = nullptr;
};

class Engine final : public store::Engine {
 public:
  // Throws std::runtime_error for options that leave no arena or when a mapping fails.
  explicit Engine(const store::EngineOptions& opts, const EngineConfig& hopts = {});

  std::string_view name() const override { return "hydradb"; }

  void restore_version(uint64_t version) override {
    store::PutOptions restored;
    restored.restore_version = version;
    store::stamp_version(version_, restored);
  }
  using store::Engine::del;
  using store::Engine::get;
  using store::Engine::put;
  store::Status get(store::KeyHash h, std::string_view key, store::ItemView& out) override {
    return get(h, key, out, nullptr);
  }
  // Also says where the item is: its byte offset in the arena (kNoLocation unless kOk).
  store::Status get(store::KeyHash h, std::string_view key, store::ItemView& out,
                    uint64_t* location);
  store::Status put(store::KeyHash h, std::string_view key, std::string_view value,
                    const store::PutOptions& opts = {}, uint64_t* new_version = nullptr) override;
  store::Status del(store::KeyHash h, std::string_view key) override;
  void prefetch_index(store::KeyHash h) const override;
  void prefetch_item(store::KeyHash h) const override;
  using store::Engine::run_batch;
  // Fills store::Response::location for GET hits.
  void run_batch(std::span<const store::Request> reqs, store::CompletionFn done,
                 size_t gap = 0) override;
  // The arena: what clients READ.
  store::EngineMemory memory() const override { return arena_.region(); }
  size_t max_value_size() const override { return max_value_; }
  void housekeeping() override { reclaim(); }

  // Releases the holds that are over (oldest first); returns how many.
  size_t reclaim();
  const std::byte* arena() const { return arena_.base(); }
  size_t arena_bytes() const { return arena_.size(); }
  uint64_t hold_ns() const { return hold_ns_; }

  struct HydraStats {
    uint64_t retired = 0;     // items whose flag was cleared (replaced, deleted, expired)
    uint64_t reclaimed = 0;   // of those, memory given back to the heap after the hold
    uint64_t held_items = 0;  // still held
    uint64_t held_bytes = 0;
  };
  HydraStats hydra_stats() const;  // any thread

  // Index, heap, flags and holds consistent, for tests: "" when fine. O(index + holds).
  std::string check() const;

 private:
  using Slot = store::layout::ChainSlot;
  struct Held {
    uint64_t payload;
    uint64_t until_ns;  // on the steady clock
  };

  store::layout::StoreBucket& main_bucket(store::KeyHash h) const {
    return buckets_[bucket_of(h, bucket_mask_)];
  }
  store::layout::StoreBucket* extension(uint64_t next) const { return pool_[next - 1].get(); }
  std::byte* item(uint64_t entry) const {
    return heap_.at(store::layout::entry_location(entry) << 3);
  }
  hydradb::ItemHeader header(uint64_t entry) const {
    hydradb::ItemHeader h;
    std::memcpy(&h, item(entry), sizeof h);
    return h;
  }
  bool expired(const hydradb::ItemHeader& h) const {
    return h.expire_at != 0 && clock_(clock_ctx_) >= h.expire_at;
  }
  bool find(store::KeyHash h, std::string_view key, Slot* found, Slot* free_slot) const;
  // Clears the item's flag, starts its hold, and takes it out of the index.
  void retire(const Slot& s);
  void hold(uint64_t payload);
  uint64_t alloc(size_t bytes);

  store::PartitionMemory index_mem_;
  store::PartitionMemory arena_;
  store::layout::StoreBucket* buckets_ = nullptr;
  uint64_t bucket_mask_ = 0;
  std::deque<std::unique_ptr<store::layout::StoreBucket>> pool_;  // extension buckets; next = i + 1
  std::vector<uint64_t> free_ext_;                                // unused extension numbers
  store::Heap heap_;
  std::deque<Held> held_;  // in retirement order, so until_ns is ascending
  uint64_t hold_ns_;
  uint64_t (*steady_)(void*);
  void* steady_ctx_;
  uint64_t version_ = 1;
  size_t max_value_ = 0;
  store::ClockFn clock_;
  void* clock_ctx_;
  std::atomic<uint64_t> retired_{0}, reclaimed_{0}, held_items_{0}, held_bytes_{0};
};

// The engine the registry builds for --engine hydradb (proto/engines.cc): a replaced item's
// memory is held for the lease the server grants plus its margin ([hydradb] knobs).
std::unique_ptr<store::Engine> make_engine(const proto::EngineSpec& spec);
// Do clients change items without the worker (proto/registry.h, clients_write_engine)?
bool clients_write_items();

}  // namespace fabkv::hydradb
