// `cache` engine: MICA cache mode (HERD sec. 2.1 and 4.1). A lossy set-associative index of
// 64-byte buckets, each holding 8 tagged offsets, over a circular log. A PUT appends the item
// to the log and points the key's index entry at it; the log overwrites its oldest bytes when
// it wraps (FIFO eviction) and a full bucket drops its oldest entry. A GET confirms a tag hit
// against the item's liveness in the log and the full key, so it never returns a stale or a
// foreign value. Layouts: layout.h and docs/storage.md.
#pragma once

#include <cstdint>

#include "store/engine.h"
#include "store/layout.h"
#include "store/region.h"

namespace fabkv::store {

class CacheEngine final : public Engine {
 public:
  // Throws std::runtime_error when the options cannot make a working cache (log smaller than
  // two maximum-size items, log larger than 2^48 bytes) or the mapping fails.
  explicit CacheEngine(const EngineOptions& opts);

  std::string_view name() const override { return to_string(EngineKind::kCache); }

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

  // Introspection for tests and the benchmark.
  uint64_t bucket_count() const { return bucket_mask_ + 1; }
  uint64_t log_capacity() const { return log_size_; }
  // Absolute log offset where the next item goes (bytes appended so far, plus skipped tails).
  uint64_t log_tail() const { return tail_; }

 private:
  layout::CacheBucket& bucket(KeyHash h) const { return buckets_[bucket_of(h, bucket_mask_)]; }
  // An entry is live when its item has not been overwritten: the log has advanced by at most
  // log_size_ bytes since the item's start. Writes *abs = the item's absolute log offset.
  bool live(uint64_t entry, uint64_t* abs) const;
  // Log position of a live item's absolute offset without a division (a 64-bit div costs
  // more than the rest of a cached lookup): live items lie in [tail_ - log_size_, tail_),
  // which spans at most this lap and the previous one.
  std::byte* item_at(uint64_t abs) const {
    return log_ + (abs >= lap_start_ ? abs - lap_start_ : abs - (lap_start_ - log_size_));
  }
  bool expired(const layout::ItemHeader& h) const {
    return h.expire_at != 0 && clock_(clock_ctx_) >= h.expire_at;
  }
  // The index entry of `key` (nullptr: none) with its item and header; entries whose items
  // the log overwrote are dropped on the way (counted as evictions). Expiry is the caller's.
  uint64_t* find(KeyHash h, std::string_view key, const std::byte** item, layout::ItemHeader* hdr);
  Status find_live(KeyHash h, std::string_view key, const std::byte** item,
                   layout::ItemHeader* hdr);
  uint64_t append(std::string_view key, std::string_view value, const layout::ItemHeader& h);
  void sweep_st(uint64_t appended);

  PartitionMemory mem_;
  layout::CacheBucket* buckets_ = nullptr;
  uint64_t bucket_mask_ = 0;
  std::byte* log_ = nullptr;
  uint64_t log_size_ = 0;
  uint64_t tail_ = 0;
  uint64_t lap_start_ = 0;  // tail_ rounded down to a multiple of log_size_
  uint64_t version_ = 1;
  size_t max_value_ = 0;
  // Index sweep, see sweep_st().
  uint64_t sweep_bucket_ = 0;
  uint64_t sweep_credit_ = 0;
  uint64_t sweep_interval_ = 0;
  ClockFn clock_;
  void* clock_ctx_;
};

}  // namespace fabkv::store
