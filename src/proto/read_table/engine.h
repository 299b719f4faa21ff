// The item rules of an engine whose table clients READ (pilaf's cuckoo table, farm's hopscotch
// table), written once: the key check, expiry by the clock the table header publishes, the
// version check, the stats, the get/put/del skeleton around the table's own find, place and
// erase, and the generations' life (sizing to the cap, growth, retirement, the moves seqlock,
// the consistency check). Derived (proto/pilaf/engine.h, proto/farm/engine.h) keeps what its
// table owns. Gen is one generation: a GenMemory (below) and what the table needs more; Info
// is what the hooks see. Derived gives (it befriends this class):
//   Found find(const Gen&, std::string_view key) const    the key's place in the live table
//   Item item_at(const Gen&, uint64_t at) const           version and expiry of the item there
//   std::string_view value_at(const Gen&, uint64_t at) const
//   void erase(Gen&, uint64_t at)                         zero the place, publish, free its record
//   std::optional<uint64_t> place(key, value, opts, Found)  writes the item (over Found when
//                                 ok, else as a new key; growing as needed): its version, or
//                                 none when there is no room
//   void publish_sizes()                                  the live generation's size stats
//   size_t table_size(uint64_t n) const                   bytes of a table of n slots/homes
//   std::unique_ptr<Gen> map_gen(n, extent_bytes, generation) const   an empty generation
//   std::unique_ptr<Gen> build(n, extent_bytes)           the live items copied into a new
//                                 generation; null when one does not fit
//   void retire(Gen&) const                               mark a replaced generation stale
//   bool describes(const Gen&, const Header&) const       the header matches the generation
//   std::string check_items(const Gen&, uint64_t& n) const  every place; n = items; "" if fine
// The members that need Gen complete are defined out of the class: each engine's header
// declares its instantiation extern and its engine.cc instantiates it.
//
// Threads: as every engine (store/engine.h): one owner thread, except memory_bytes() and stats().
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "proto/read_table/generations.h"
#include "proto/read_table/table_header.h"
#include "store/engine.h"
#include "store/heap.h"
#include "store/pipeline.h"
#include "store/region.h"

namespace fabkv::read_table {

inline constexpr size_t kPage = 4096;

inline size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// One generation's memory: two anonymous mappings, each page aligned (the server registers
// each with the NIC separately), the table (Header and the slots or buckets) and the extents
// (records, carved by the TLSF heap of store/heap.h, which reuses freed space); `used` counts
// the table's items.
template <class Info, class Header>
struct GenMemory {
  GenMemory(size_t table_bytes, size_t extent_bytes, bool huge, bool prefault)
      : table_mem(table_bytes, huge, prefault),
        extent_mem(extent_bytes, huge, prefault),
        heap(extent_mem.base(), extent_bytes) {
    info.table = table_mem.base();
    info.table_bytes = table_bytes;
    info.extents = extent_mem.base();
    info.extent_bytes = extent_bytes;
    info.huge_pages = table_mem.huge_pages() && extent_mem.huge_pages();
  }
  Header* header() const { return reinterpret_cast<Header*>(info.table); }

  store::PartitionMemory table_mem;
  store::PartitionMemory extent_mem;
  store::Heap heap;
  Info info;
  uint64_t used = 0;
};

template <class Derived, class Gen, class Info>
class Engine : public store::Engine {
 public:
  using store::Engine::del;
  using store::Engine::get;
  using store::Engine::put;
  using store::Engine::run_batch;

  store::Status get(store::KeyHash, std::string_view key, store::ItemView& out) override {
    if (store::Status st = store::check_key(key, stats_); st != store::Status::kOk) return st;
    Gen& g = live();
    const Found f = self().find(g, key);
    if (f.ok) {
      const Item it = self().item_at(g, f.at);
      if (!expired(it.expire_at)) {
        out.value = self().value_at(g, f.at);
        out.version = it.version;
        out.expire_at = it.expire_at;
        store::add_st(stats_.hits);
        return store::Status::kOk;
      }
      self().remove_at(g, f.at);
      store::add_st(stats_.expired);
    }
    store::add_st(stats_.misses);
    return store::Status::kNotFound;
  }

  store::Status put(store::KeyHash, std::string_view key, std::string_view value,
                    const store::PutOptions& opts = {}, uint64_t* new_version = nullptr) override;

  store::Status del(store::KeyHash, std::string_view key) override {
    if (store::Status st = store::check_key(key, stats_); st != store::Status::kOk) return st;
    Gen& g = live();
    const Found f = self().find(g, key);
    if (!f.ok) return store::Status::kNotFound;
    const bool was_expired = expired(self().item_at(g, f.at).expire_at);
    self().remove_at(g, f.at);
    if (was_expired) {
      store::add_st(stats_.expired);
      return store::Status::kNotFound;
    }
    store::add_st(stats_.dels);
    return store::Status::kOk;
  }

  // A key's place comes from the table's own hash of it, which the store::KeyHash of the
  // pipeline stages cannot give: no prefetch.
  void prefetch_index(store::KeyHash) const override {}
  void prefetch_item(store::KeyHash) const override {}
  void run_batch(std::span<const store::Request> reqs, store::CompletionFn done,
                 size_t gap = 0) override {
    store::run_pipeline(self(), reqs, done, gap);  // Derived is final: no virtual calls
  }
  size_t max_value_size() const override { return max_value_; }
  void housekeeping() override { reap_retired(); }
  void restore_version(uint64_t version) override {
    store::PutOptions restored;
    restored.restore_version = version;
    store::stamp_version(version_, restored);
  }

  // These four need Gen complete: defined below, instantiated by the engine's .cc only (its
  // header declares the instantiation extern).
  // Installs the hooks and calls h.on_live(current()) at once.
  void set_hooks(Hooks<Info> h);
  // The live generation; the reference is valid until the next put() (a growth).
  const Info& current() const;
  // Releases retired generations whose grace is over and publishes the clock (generations.h).
  void reap_retired();
  // Writes the expiry clock into the live table header, where clients READ it.
  void publish_clock();
  // Table + extent bytes of the live generation; any thread.
  size_t memory_bytes() const { return live_bytes_.load(std::memory_order_relaxed); }
  // Table, heap and stats consistency, for tests: "" when fine. O(table + heap).
  std::string check() const;
  // Tests: called on the owner thread after every write of a move on the live table (its
  // header's moves odd then), to check what a reader could see at that instant.
  void set_move_observer(std::function<void()> f) { move_observer_ = std::move(f); }

 protected:
  struct Found {
    uint64_t at = 0;  // slot or bucket
    bool ok = false;
  };
  struct Item {
    uint64_t version = 0;
    uint32_t expire_at = 0;
  };

  // Throws std::runtime_error for max_value_size above the limit. `memory_bytes` caps table +
  // extent bytes (0: opts.memory_bytes); `max_record` is the largest record's bytes.
  Engine(const store::EngineOptions& opts, uint32_t retire_grace_ms, size_t memory_bytes,
         size_t max_record)
      : gens_(retire_grace_ms, opts.clock != nullptr ? opts.clock : &store::realtime_seconds,
              opts.clock_ctx),
        cap_(memory_bytes != 0 ? memory_bytes : opts.memory_bytes),
        min_extent_bytes_(min_extent_bytes(max_record)),
        huge_pages_(opts.huge_pages),
        prefault_(opts.prefault),
        version_(opts.first_version == 0 ? 1 : opts.first_version),
        max_value_(opts.max_value_size),
        clock_(opts.clock != nullptr ? opts.clock : &store::realtime_seconds),
        clock_ctx_(opts.clock_ctx) {
    if (opts.max_value_size > store::kMaxValueSizeLimit)
      throw std::runtime_error("store: max_value_size " + std::to_string(opts.max_value_size) +
                               " exceeds the limit " + std::to_string(store::kMaxValueSizeLimit));
  }

  Gen& live() const { return gens_.live(); }
  bool expired(uint32_t expire_at) const {
    return expire_at != 0 && clock_(clock_ctx_) >= expire_at;
  }
  // Extent bytes a fresh heap needs for one record of `record` bytes: its block (8-byte header,
  // 16-byte granules) plus the heap's 16-byte end marker, in whole pages.
  static size_t min_extent_bytes(size_t record) {
    return round_up(round_up(record + 8, store::Heap::kBlockAlign) + 16, kPage);
  }
  // The first generation's extent bytes: `initial` rounded up to a page and to one record,
  // shrunk to fit the cap beside a table of `table` bytes (down to one record). Throws when one
  // record and a table of `min_table` bytes exceed the cap.
  size_t first_extents(size_t initial, size_t table, size_t min_table, std::string_view name) const;
  // A growth of the extents clamped to the cap beside a table of `table` bytes: the new extent
  // bytes, or 0 (kNoSpace) when they would not grow or could not hold the live heap's items,
  // which pack into the front of the new heap, plus a `record`-byte record and the end marker.
  size_t clamped_extents(size_t table, size_t record) const;
  // Builds a generation of `n` slots/homes and `extents` bytes (doubling n while an item does
  // not fit, within the cap), makes it live, announces it and retires the old one. kNoSpace,
  // and no change, when the cap forbids it.
  store::Status grow_to(uint64_t n, size_t extents);
  // The first generation, live.
  void start(uint64_t n, size_t extents);
  // A live header for `generation` with the fields both layouts open with; the caller adds the
  // rest and hands it to with_header().
  template <class Header>
  Header live_header(uint64_t magic, uint32_t version, uint32_t generation) const {
    Header h{};
    h.magic = magic;
    h.version = version;
    h.generation = generation;
    h.moves = 0;
    h.state = kStateLive;
    h.clock = clock_(clock_ctx_);
    return h;
  }
  // Writes `h` into a fresh generation (anonymous mappings are zero: every place is empty).
  template <class Header>
  std::unique_ptr<Gen> with_header(std::unique_ptr<Gen> g, const Header& h) const {
    std::memcpy(g->header(), &h, sizeof h);
    g->info.generation = h.generation;
    return g;
  }
  // Removes the item at `at` (erase), then the counts.
  void remove_at(Gen& g, uint64_t at);
  // Moves keys on g's table under its header's `moves` seqlock (odd while keys move):
  // step(i), i in [0, steps), writes one place; each write is published and, on the live
  // table, observed. The last step writes the new key.
  template <class Step>
  void move_keys(Gen& g, bool live, size_t steps, Step&& step);

  Generations<Gen, Info> gens_;
  std::function<void()> move_observer_;
  size_t cap_ = 0;
  size_t min_extent_bytes_ = 0;
  bool huge_pages_ = false;
  bool prefault_ = true;
  uint64_t version_ = 1;
  size_t max_value_ = 0;
  store::ClockFn clock_;
  void* clock_ctx_;
  std::atomic<size_t> live_bytes_{0};
  // growths: generations built after the first; paths: moves applied on the live table
  // (header.moves += 2 each), moving moved_keys keys.
  std::atomic<uint64_t> growths_{0}, paths_{0}, moved_keys_{0};

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
  const Derived& self() const { return static_cast<const Derived&>(*this); }
};

template <class Derived, class Gen, class Info>
void Engine<Derived, Gen, Info>::set_hooks(Hooks<Info> h) {
  gens_.set_hooks(std::move(h));
}
template <class Derived, class Gen, class Info>
const Info& Engine<Derived, Gen, Info>::current() const {
  return live().info;
}
template <class Derived, class Gen, class Info>
void Engine<Derived, Gen, Info>::reap_retired() {
  gens_.reap();
}
template <class Derived, class Gen, class Info>
void Engine<Derived, Gen, Info>::publish_clock() {
  gens_.publish_clock();
}

template <class Derived, class Gen, class Info>
store::Status Engine<Derived, Gen, Info>::put(store::KeyHash, std::string_view key,
                                              std::string_view value, const store::PutOptions& opts,
                                              uint64_t* new_version) {
  if (store::Status st = store::check_key(key, stats_, value.size(), max_value_);
      st != store::Status::kOk)
    return st;
  Found f = self().find(live(), key);
  Item old{};
  if (f.ok) {
    old = self().item_at(live(), f.at);
    if (expired(old.expire_at)) {
      self().remove_at(live(), f.at);
      store::add_st(stats_.expired);
      f = Found{};
    }
  }
  if (opts.expected_version != 0) {
    if (!f.ok) return store::Status::kNotFound;
    if (old.version != opts.expected_version) {
      store::add_st(stats_.version_mismatches);
      return store::Status::kVersionMismatch;
    }
  }
  // `value` may be a view of this engine's memory (an earlier get()): place() copies it
  // before it changes the table, and a growth keeps the old generation mapped.
  const std::optional<uint64_t> version = self().place(key, value, opts, f);
  if (!version) {
    store::add_st(stats_.no_space);
    return store::Status::kNoSpace;
  }
  if (!f.ok) {
    ++live().used;
    store::add_st(stats_.items);
  }
  store::add_st(stats_.puts);
  self().publish_sizes();
  publish();
  if (new_version != nullptr) *new_version = *version;
  return store::Status::kOk;
}

template <class Derived, class Gen, class Info>
std::string Engine<Derived, Gen, Info>::check() const {
  const Gen& g = live();
  std::string err = g.heap.check();
  if (!err.empty()) return "heap: " + err;
  const auto h = *g.header();
  if (!self().describes(g, h)) return "table header does not describe the generation";
  if (h.state != kStateLive) return "live table not marked live";
  if (h.moves % 2 != 0) return "moves odd while idle";
  uint64_t n = 0;
  err = self().check_items(g, n);
  if (!err.empty()) return err;
  if (n != g.used) return "used count " + std::to_string(g.used) + " != " + std::to_string(n);
  const store::StatsSnapshot st = stats();
  if (st.items != n) return "stats.items " + std::to_string(st.items) + " != " + std::to_string(n);
  return "";
}

template <class Derived, class Gen, class Info>
void Engine<Derived, Gen, Info>::start(uint64_t n, size_t extents) {
  gens_.start(self().map_gen(n, extents, 1));
  self().publish_sizes();
  publish();
}

template <class Derived, class Gen, class Info>
size_t Engine<Derived, Gen, Info>::first_extents(size_t initial, size_t table, size_t min_table,
                                                 std::string_view name) const {
  size_t extents = std::max(round_up(initial, kPage), min_extent_bytes_);
  if (table + extents <= cap_) return extents;
  // Shrink the extents first (down to one record), then (the caller) the table.
  extents = cap_ > table ? std::max(min_extent_bytes_, (cap_ - table) / kPage * kPage)
                         : min_extent_bytes_;
  if (extents + min_table > cap_)
    throw std::runtime_error(
        "store: " + std::string(name) + " memory cap of " + std::to_string(cap_) +
        " bytes cannot hold a table and one record of " + std::to_string(max_value_) + " bytes");
  return extents;
}

template <class Derived, class Gen, class Info>
size_t Engine<Derived, Gen, Info>::clamped_extents(size_t table, size_t record) const {
  const Gen& old = live();
  const size_t extents = cap_ > table ? (cap_ - table) / kPage * kPage : 0;
  if (extents <= old.info.extent_bytes) return 0;
  const size_t block = round_up(record + 8, store::Heap::kBlockAlign);
  if (old.heap.used_bytes() + block + 2 * store::Heap::kBlockAlign > extents) return 0;
  return extents;
}

template <class Derived, class Gen, class Info>
store::Status Engine<Derived, Gen, Info>::grow_to(uint64_t n, size_t extents) {
  std::unique_ptr<Gen> g;
  for (;;) {
    g = self().build(n, extents);
    if (g != nullptr) break;
    // No room for a re-inserted key (no cuckoo path, no free bucket in its neighbourhood):
    // more slots.
    const uint64_t more = n * 2;
    if (self().table_size(more) + extents > cap_) return store::Status::kNoSpace;
    n = more;
  }
  // Switch: the new generation is complete; announce it, then tell readers of the old one.
  gens_.replace(std::move(g), [this](Gen& prev) { self().retire(prev); });
  self().publish_sizes();
  store::add_st(growths_);
  return store::Status::kOk;
}

template <class Derived, class Gen, class Info>
void Engine<Derived, Gen, Info>::remove_at(Gen& g, uint64_t at) {
  self().erase(g, at);
  --g.used;
  store::sub_st(stats_.items);
  self().publish_sizes();
  publish();
}

template <class Derived, class Gen, class Info>
template <class Step>
void Engine<Derived, Gen, Info>::move_keys(Gen& g, bool live, size_t steps, Step&& step) {
  std::atomic_ref<uint64_t> moves(g.header()->moves);
  const uint64_t m = moves.load(std::memory_order_relaxed);
  moves.store(m + 1, std::memory_order_release);  // odd: keys are moving
  publish();
  const bool observe = live && move_observer_;
  for (size_t i = 0; i < steps; ++i) {
    step(i);
    publish();
    if (observe) move_observer_();
  }
  moves.store(m + 2, std::memory_order_release);  // even: settled
  if (live) {
    store::add_st(paths_);
    store::add_st(moved_keys_, steps - 1);
  }
}

}  // namespace fabkv::read_table
