// `store` engine: lossless (MICA store mode's role). A chained index of 64-byte buckets, each
// with 7 tagged heap offsets and a link to an overflow bucket, over a segregated-fit heap
// (heap.h) that reuses freed space. Overflow buckets come from the same heap, so the only
// limit is memory: a PUT that cannot get space for its item or its index entry returns
// kNoSpace and changes nothing. Items are never dropped or evicted; they leave on DELETE or
// when found expired. Layouts: layout.h and docs/storage.md.
#pragma once

#include <cstdint>
#include <string>

#include "store/chain.h"
#include "store/engine.h"
#include "store/heap.h"
#include "store/layout.h"
#include "store/region.h"

namespace fabkv::store {

class StoreEngine final : public Engine {
 public:
  // Throws std::runtime_error for options that leave no heap or when the mapping fails.
  explicit StoreEngine(const EngineOptions& opts);

  std::string_view name() const override { return to_string(EngineKind::kStore); }

  void restore_version(uint64_t version) override {
    PutOptions restored;
    restored.restore_version = version;
    stamp_version(version_, restored);
  }
  using Engine::del;
  using Engine::get;
  using Engine::put;
  Status get(KeyHash h, std::string_view key, ItemView& out) override;
  Status put(KeyHash h, std::string_view key, std::string_view value, const PutOptions& opts = {},
             uint64_t* new_version = nullptr) override;
  Status del(KeyHash h, std::string_view key) override;
  Status touch(KeyHash h, std::string_view key, uint32_t expire_at, ItemView* out) override;
  void prefetch_index(KeyHash h) const override;
  void prefetch_item(KeyHash h) const override;
  using Engine::run_batch;
  void run_batch(std::span<const Request> reqs, CompletionFn done, size_t gap = 0) override;
  bool clear() override;
  uint64_t scan(uint64_t cursor, uint64_t buckets, ScanFn fn) const override;
  EngineMemory memory() const override { return mem_.region(); }
  size_t max_value_size() const override { return max_value_; }

  uint64_t bucket_count() const { return bucket_mask_ + 1; }
  const Heap& heap() const { return heap_; }
  // Heap and index consistency, for tests: "" when fine.
  std::string check() const;

 private:
  using Slot = layout::ChainSlot;
  layout::StoreBucket& main_bucket(KeyHash h) const { return buckets_[bucket_of(h, bucket_mask_)]; }
  layout::StoreBucket* overflow(uint64_t payload) const {
    return reinterpret_cast<layout::StoreBucket*>(heap_.at(payload));
  }
  std::byte* item(uint64_t entry) const { return heap_.at(layout::entry_location(entry) << 3); }
  bool expired(const layout::ItemHeader& h) const {
    return h.expire_at != 0 && clock_(clock_ctx_) >= h.expire_at;
  }
  // Finds the key's entry; on a miss, *free_slot (if given) is the first empty slot met.
  bool find(KeyHash h, std::string_view key, Slot* found, Slot* free_slot) const;
  void remove(const Slot& s);

  PartitionMemory mem_;
  layout::StoreBucket* buckets_ = nullptr;
  uint64_t bucket_mask_ = 0;
  Heap heap_;
  uint64_t version_ = 1;
  size_t max_value_ = 0;
  ClockFn clock_;
  void* clock_ctx_;
};

}  // namespace fabkv::store
