#include "proto/hydradb/engine.h"

#include <time.h>

#include <stdexcept>
#include <string>

#include "proto/options.h"
#include "store/pipeline.h"

namespace fabkv::hydradb {

using store::add_st;
using store::hash_key;
using store::kMaxKeySize;
using store::kNoLocation;
using store::realtime_seconds;
using store::sub_st;

namespace layout = store::layout;
using layout::StoreBucket;

namespace {

// Orders the item's bytes before the stores after it (the index entry, the old item's flag):
// x86-TSO keeps store order; the fence keeps the compiler from moving the copies across.
inline void publish() { std::atomic_thread_fence(std::memory_order_release); }

}  // namespace

uint64_t steady_nanoseconds(void*) {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

Engine::Engine(const store::EngineOptions& opts, const EngineConfig& hopts)
    : index_mem_(checked_index_buckets(opts, sizeof(StoreBucket)) * sizeof(StoreBucket),
                 opts.huge_pages, opts.prefault),
      arena_(opts.memory_bytes > index_mem_.size() ? opts.memory_bytes - index_mem_.size() : 0,
             opts.huge_pages, opts.prefault),
      hold_ns_(hopts.hold_ns),
      steady_(hopts.steady != nullptr ? hopts.steady : &steady_nanoseconds),
      steady_ctx_(hopts.steady_ctx),
      version_(opts.first_version == 0 ? 1 : opts.first_version),
      max_value_(opts.max_value_size),
      clock_(opts.clock != nullptr ? opts.clock : &realtime_seconds),
      clock_ctx_(opts.clock_ctx) {
  const size_t nb = checked_index_buckets(opts, sizeof(StoreBucket));
  if (arena_.size() < 2 * (sizeof(ItemHeader) + kMaxKeySize + max_value_ + 64)) {
    throw std::runtime_error("store: hydradb memory of " + std::to_string(opts.memory_bytes) +
                             " bytes leaves no room for two items of " +
                             std::to_string(max_value_) + " bytes beside its index");
  }
  if (arena_.size() >= (uint64_t{1} << (layout::kLocationBits + 3)))
    throw std::runtime_error("store: hydradb arena larger than 2^51 bytes; use more partitions");
  buckets_ = reinterpret_cast<StoreBucket*>(index_mem_.base());
  bucket_mask_ = nb - 1;
  heap_ = store::Heap(arena_.base(), arena_.size());
}

void Engine::prefetch_index(store::KeyHash h) const { __builtin_prefetch(&main_bucket(h), 0, 3); }

void Engine::prefetch_item(store::KeyHash h) const {
  const StoreBucket& b = main_bucket(h);
  for (uint32_t m = layout::match_tags8(b.entries, tag_of(h)) & layout::kMatchStoreEntries; m != 0;
       m &= m - 1) {
    const std::byte* it = item(b.entries[layout::match_index(m)]);
    __builtin_prefetch(it, 0, 3);
    __builtin_prefetch(it + 63, 0, 3);
  }
}

bool Engine::find(store::KeyHash h, std::string_view key, Slot* found, Slot* free_slot) const {
  return layout::find_in_chain(
      &main_bucket(h), tag_of(h), [this](uint64_t link) { return extension(link); },
      [&](uint64_t e) {
        return header(e).key_len == key.size() &&
               layout::bytes_equal(item(e) + sizeof(ItemHeader), key.data(), key.size());
      },
      found, free_slot);
}

void Engine::hold(uint64_t payload) {
  add_st(retired_);
  if (hold_ns_ == 0) {
    heap_.free(payload);
    add_st(reclaimed_);
    return;
  }
  held_.push_back(Held{payload, steady_(steady_ctx_) + hold_ns_});
  add_st(held_items_);
  add_st(held_bytes_, heap_.block_size(payload));
}

size_t Engine::reclaim() {
  if (held_.empty()) return 0;
  const uint64_t now = steady_(steady_ctx_);
  size_t n = 0;
  while (!held_.empty() && held_.front().until_ns <= now) {
    const uint64_t p = held_.front().payload;
    sub_st(held_bytes_, heap_.block_size(p));
    heap_.free(p);
    held_.pop_front();
    ++n;
  }
  if (n > 0) {
    add_st(reclaimed_, n);
    sub_st(held_items_, n);
    stats_.bytes.store(heap_.used_bytes(), std::memory_order_relaxed);
  }
  return n;
}

void Engine::retire(const Slot& s) {
  uint64_t& e = s.bucket->entries[s.index];
  const uint64_t payload = layout::entry_location(e) << 3;
  e = 0;
  // Survey sec. 3.1: the flag tells readers holding the address that the item is gone. Its
  // memory is not reused before the hold is over (the top of engine.h).
  hydradb::invalidate(heap_.at(payload));
  hold(payload);
  sub_st(stats_.items);
  if (const uint64_t ext = layout::unlink_if_empty(s); ext != 0) {
    free_ext_.push_back(ext);
    sub_st(stats_.overflow_buckets);
  }
}

uint64_t Engine::alloc(size_t bytes) {
  uint64_t p = heap_.alloc(bytes);
  if (p == store::Heap::kNil && reclaim() > 0) p = heap_.alloc(bytes);
  return p;
}

store::Status Engine::get(store::KeyHash h, std::string_view key, store::ItemView& out,
                          uint64_t* location) {
  if (location != nullptr) *location = kNoLocation;
  if (store::Status st = check_key(key, stats_); st != store::Status::kOk) return st;
  Slot s;
  if (find(h, key, &s, nullptr)) {
    const uint64_t e = s.bucket->entries[s.index];
    const ItemHeader ih = header(e);
    if (!expired(ih)) {
      const char* p = reinterpret_cast<const char*>(item(e));
      out.value = std::string_view(p + sizeof(ItemHeader) + ih.key_len, ih.value_len);
      out.version = ih.version;
      out.expire_at = ih.expire_at;
      if (location != nullptr) *location = layout::entry_location(e) << 3;
      add_st(stats_.hits);
      return store::Status::kOk;
    }
    retire(s);
    add_st(stats_.expired);
  }
  add_st(stats_.misses);
  return store::Status::kNotFound;
}

store::Status Engine::put(store::KeyHash h, std::string_view key, std::string_view value,
                          const store::PutOptions& opts, uint64_t* new_version) {
  if (store::Status st = check_key(key, stats_, value.size(), max_value_); st != store::Status::kOk)
    return st;
  reclaim();
  Slot found, free_slot;
  bool exists = find(h, key, &found, &free_slot);
  ItemHeader old{};
  if (exists) {
    old = header(found.bucket->entries[found.index]);
    if (expired(old)) {
      retire(found);
      add_st(stats_.expired);
      exists = find(h, key, &found, &free_slot);
    }
  }
  if (opts.expected_version != 0) {
    if (!exists) return store::Status::kNotFound;
    if (old.version != opts.expected_version) {
      add_st(stats_.version_mismatches);
      return store::Status::kVersionMismatch;
    }
  }
  // All memory first, so that a failure changes nothing.
  const uint64_t payload = alloc(hydradb::item_bytes(key.size(), value.size()));
  if (payload == store::Heap::kNil) {
    add_st(stats_.no_space);
    return store::Status::kNoSpace;
  }
  if (!exists && free_slot.index < 0) {
    uint64_t ext;
    if (!free_ext_.empty()) {
      ext = free_ext_.back();
      free_ext_.pop_back();
    } else {
      pool_.push_back(std::make_unique<StoreBucket>());
      ext = pool_.size();
    }
    *extension(ext) = StoreBucket{};
    free_slot.bucket->next = ext;
    free_slot = Slot{extension(ext), free_slot.bucket, 0};
    add_st(stats_.overflow_buckets);
  }
  const uint64_t version = stamp_version(version_, opts);
  // Out of place (survey sec. 3.1): the new version is complete in fresh memory before
  // anything points at it; readers of the old one are told by its flag.
  hydradb::write_item(heap_.at(payload), key, value, version, opts.expire_at);
  publish();
  const uint64_t entry = layout::make_entry(tag_of(h), payload >> 3);
  if (exists) {
    uint64_t& e = found.bucket->entries[found.index];
    const uint64_t old_payload = layout::entry_location(e) << 3;
    e = entry;
    hydradb::invalidate(heap_.at(old_payload));
    hold(old_payload);
  } else {
    free_slot.bucket->entries[free_slot.index] = entry;
    add_st(stats_.items);
  }
  add_st(stats_.puts);
  stats_.bytes.store(heap_.used_bytes(), std::memory_order_relaxed);
  if (new_version != nullptr) *new_version = version;
  return store::Status::kOk;
}

store::Status Engine::del(store::KeyHash h, std::string_view key) {
  if (store::Status st = check_key(key, stats_); st != store::Status::kOk) return st;
  reclaim();
  Slot s;
  if (!find(h, key, &s, nullptr)) return store::Status::kNotFound;
  const bool was_expired = expired(header(s.bucket->entries[s.index]));
  retire(s);
  stats_.bytes.store(heap_.used_bytes(), std::memory_order_relaxed);
  if (was_expired) {
    add_st(stats_.expired);
    return store::Status::kNotFound;
  }
  add_st(stats_.dels);
  return store::Status::kOk;
}

// HERD sec. 4.1.1's pipeline (store/pipeline.h), with the item's location for GET hits.
void Engine::run_batch(std::span<const store::Request> reqs, store::CompletionFn done, size_t gap) {
  if (gap == 0) gap = store::tuning::kDefaultStageGap;
  const size_t n = reqs.size();
  for (size_t i = 0; i < n + 2 * gap; ++i) {
    if (i < n) prefetch_index(reqs[i].hash);
    if (i >= gap && i - gap < n) prefetch_item(reqs[i - gap].hash);
    if (i >= 2 * gap && i - 2 * gap < n) {
      const size_t j = i - 2 * gap;
      const store::Request& r = reqs[j];
      if (r.op == store::Op::kGet) {
        store::Response resp;
        store::ItemView v;
        resp.status = get(r.hash, r.key, v, &resp.location);
        resp.version = v.version;
        resp.expire_at = v.expire_at;
        resp.value = v.value;
        done(j, resp);
      } else {
        done(j, execute_one(*this, r));
      }
    }
  }
}

Engine::HydraStats Engine::hydra_stats() const {
  auto r = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return HydraStats{r(retired_), r(reclaimed_), r(held_items_), r(held_bytes_)};
}

std::string Engine::check() const {
  std::string err = heap_.check();
  if (!err.empty()) return "heap: " + err;
  uint64_t items = 0, ext = 0;
  for (uint64_t i = 0; i <= bucket_mask_; ++i) {
    for (const StoreBucket* b = &buckets_[i];; b = extension(b->next)) {
      for (int k = 0; k < 7; ++k) {
        const uint64_t e = b->entries[k];
        if (e == 0) continue;
        ++items;
        const ItemHeader ih = header(e);
        if (ih.valid != hydradb::kValid) return "indexed item without its valid flag";
        const char* p = reinterpret_cast<const char*>(item(e));
        const size_t n = hydradb::item_bytes(ih.key_len, ih.value_len);
        if (ih.key_len == 0 || ih.key_len > kMaxKeySize) return "item with a bad key size";
        if (hydradb::item_check(p, n, ih.version) != ih.check) return "item checksum wrong";
        const store::KeyHash kh = hash_key(std::string_view(p + sizeof(ItemHeader), ih.key_len));
        if (bucket_of(kh, bucket_mask_) != i || tag_of(kh) != layout::entry_tag(e))
          return "entry in the wrong bucket or with the wrong tag";
      }
      if (b->next == 0) break;
      ++ext;
    }
  }
  const store::StatsSnapshot st = stats();
  if (st.items != items) return "stats.items wrong";
  if (st.overflow_buckets != ext) return "stats.overflow_buckets wrong";
  uint64_t bytes = 0, prev = 0;
  for (const Held& h : held_) {
    if (h.until_ns < prev) return "holds out of order";
    prev = h.until_ns;
    bytes += heap_.block_size(h.payload);
    ItemHeader ih;
    std::memcpy(&ih, heap_.at(h.payload), sizeof ih);
    if (ih.valid != 0) return "held item still flagged valid";
  }
  if (bytes != held_bytes_.load() || held_.size() != held_items_.load()) return "hold stats wrong";
  return "";
}

std::unique_ptr<store::Engine> make_engine(const proto::EngineSpec& spec) {
  const Options& o = spec.options.hydradb;
  EngineConfig c;
  c.hold_ns = (uint64_t{o.lease_ms} + o.margin_ms) * 1'000'000u;
  return std::make_unique<Engine>(spec.store, c);
}

// proto/registry.h, clients_write_engine: clients only READ items; every write is a request the
// worker executes.
bool clients_write_items() { return false; }

}  // namespace fabkv::hydradb
