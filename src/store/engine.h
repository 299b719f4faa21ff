// The storage engine API: one Engine per partition, owned by one worker thread (EREW, HERD
// sec. 4.1 after MICA). Only the owner thread may call get/put/del, the prefetch stages and
// run_batch (get mutates too: it removes expired items and stale cache entries). stats() and
// memory() may be called from any thread.
//
// Data-path calls never throw; they return a Status. make_engine() throws std::runtime_error
// (bad options, mmap failure) or std::bad_alloc.
//
// Value lifetime: get() returns a view into the engine's memory (zero copy, so a server can
// hand it to the NIC). The view stays valid until the next put() or del() on the same engine,
// and no longer. In a batch, this includes later PUT/DELETE requests of the same batch: copy
// the value inside the completion callback if the batch mutates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "store/hash.h"
#include "store/limits.h"
#include "store/stats.h"

namespace fabkv::store {

enum class Status : uint8_t {
  kOk,
  kNotFound,         // no such key, or it expired, or (cache) it was evicted
  kTooLarge,         // key longer than kMaxKeySize or value longer than max_value_size
  kInvalidKey,       // empty key
  kNoSpace,          // store: no memory left for the item or its index entry
  kVersionMismatch,  // put with an expected version that is not the item's current version
  kLogFailed,        // refused before the engine saw it: the op log cannot be written (a full disk)
};

const char* to_string(Status s);

// The engines of this folder. Engines whose memory clients reach live with their protocol
// (src/proto/<engine>/engine.h) and are built through the registry (proto/registry.h,
// make_engine), which also knows every name --engine takes.
enum class EngineKind : uint8_t { kCache, kStore };
const char* to_string(EngineKind k);
// "cache" or "store"; nullopt for anything else.
std::optional<EngineKind> engine_kind_from_string(std::string_view name);

// Wall-clock seconds used for expiry; only read when an item carries an expiry time.
using ClockFn = uint32_t (*)(void* ctx);
uint32_t realtime_seconds(void* unused);

struct EngineOptions {
  // Bytes of memory for the partition (index + log or heap), mapped once at creation.
  // Trade-off: more memory holds more items (cache: fewer evictions).
  size_t memory_bytes = size_t{64} << 20;
  // Index buckets (64 bytes each), rounded down to a power of two. 0 = derive: 1/8 of
  // memory_bytes, as HERD sec. 4.1 sizes its index (64 Mi keys) against a 4 GB log.
  size_t index_buckets = 0;
  // Largest value accepted, up to kMaxValueSizeLimit. The cache needs its log to hold at
  // least two items of the largest size.
  size_t max_value_size = kDefaultMaxValueSize;
  // Try MAP_HUGETLB first (2 MiB pages, fewer TLB misses, fewer NIC translation entries).
  bool huge_pages = true;
  // Touch every page at creation so that the data path never page-faults.
  bool prefault = true;
  // First CAS version handed out (tests use values near UINT64_MAX for wrap-around).
  uint64_t first_version = 1;
  // Expiry clock; default CLOCK_REALTIME_COARSE seconds.
  ClockFn clock = &realtime_seconds;
  void* clock_ctx = nullptr;
};

// The raw memory of a partition (engines report it; an engine whose table clients READ
// registers its own generations).
struct EngineMemory {
  std::byte* base = nullptr;
  size_t size = 0;
  bool huge_pages = false;  // true when MAP_HUGETLB succeeded
};

struct PutOptions {
  uint64_t expected_version = 0;  // 0 = unconditional set; otherwise memcached `cas`
  uint32_t expire_at = 0;         // absolute Unix seconds, 0 = never
  // Restore path (op log replay): != 0 stamps the item with exactly this version instead of
  // the counter's next one, and moves the counter past it (see stamp_version), so that later
  // PUTs never hand out a restored version again. Restore in the order the versions were
  // handed out (the op log's order); that also carries a counter that wrapped. 0 = normal PUT.
  uint64_t restore_version = 0;
  // Opaque client flags kept with the item and returned by get (memcached's <flags>). The
  // cache and store engines keep them in the item header (layout.h); the engines whose items
  // clients READ have no room for them and return 0.
  uint32_t flags = 0;
};

// The version a successful PUT stamps, and the engine's counter after it: the counter's value
// (the counter then advances, skipping 0 when it wraps: 0 means "no expected version"), or
// opts.restore_version, in which case a counter at or below it moves to restore_version + 1
// (again skipping 0) and a counter already past it stays. Every engine uses this.
inline uint64_t stamp_version(uint64_t& counter, const PutOptions& opts) {
  const uint64_t v = opts.restore_version != 0 ? opts.restore_version : counter;
  if (opts.restore_version == 0 || v >= counter) counter = v == UINT64_MAX ? 1 : v + 1;
  return v;
}

struct ItemView {
  std::string_view value;  // valid until the next put/del on this engine (see top)
  uint64_t version = 0;
  uint32_t expire_at = 0;
  uint32_t flags = 0;  // PutOptions::flags of the PUT that wrote it (0 where not kept)
};

// ---- Batch form --------------------------------------------------------------------------

// kTouch: a new expiry (put.expire_at) for a live item, nothing else changed (Engine::touch).
enum class Op : uint8_t { kGet, kPut, kDel, kTouch };

struct Request {
  Op op = Op::kGet;
  KeyHash hash;  // hash_key(key); the caller usually has it already to pick the partition
  std::string_view key;
  std::string_view value;  // kPut only
  PutOptions put;          // kPut; kTouch: put.expire_at only
};

// Response::location when the engine does not say where an item is.
inline constexpr uint64_t kNoLocation = ~uint64_t{0};

struct Response {
  Status status = Status::kNotFound;
  uint64_t version = 0;    // kGet, kTouch: the item's version; kPut: the new version
  uint32_t expire_at = 0;  // kGet, kTouch
  uint32_t flags = 0;      // kGet, kTouch: the item's client flags (PutOptions::flags)
  std::string_view value;  // kGet, kTouch: valid until the next mutation (see top)
  // kGet hit, engines whose items clients READ (and that say where): the item's offset in memory();
  // kNoLocation otherwise.
  uint64_t location = kNoLocation;
};

// A non-owning reference to a callable, cheap to pass by value (like llvm::function_ref).
template <class Fn>
class FunctionRef;
template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
           std::is_invocable_r_v<R, F&, Args...>) FunctionRef(F&& f)  // NOLINT: implicit by design
      : obj_(const_cast<void*>(static_cast<const void*>(&f))), call_([](void* o, Args... a) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(a)...);
        }) {}
  R operator()(Args... a) const { return call_(obj_, std::forward<Args>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

// Called once per request, in request order, right after it executed. `index` is the
// request's position in the batch.
using CompletionFn = FunctionRef<void(size_t index, const Response& r)>;

// One live item as a key listing sees it (memcached's `lru_crawler metadump`, `stats
// cachedump`: src/memcached/dump.cc).
struct ScanItem {
  std::string_view key;
  uint32_t value_size = 0;
  uint32_t expire_at = 0;  // absolute Unix seconds, 0 = never
  uint32_t flags = 0;
  uint64_t version = 0;
};
using ScanFn = FunctionRef<void(const ScanItem& item)>;

class Engine {
 public:
  virtual ~Engine() = default;
  Engine() = default;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // What --engine calls it: "cache", "store", or the protocol folder that defines it.
  virtual std::string_view name() const = 0;

  // ---- one-call form (owner thread only) ----
  virtual Status get(KeyHash h, std::string_view key, ItemView& out) = 0;
  virtual Status put(KeyHash h, std::string_view key, std::string_view value,
                     const PutOptions& opts = {}, uint64_t* new_version = nullptr) = 0;
  virtual Status del(KeyHash h, std::string_view key) = 0;
  // memcached's touch, gat and mg T: sets a live item's expiry to `expire_at` and changes
  // nothing else (value, flags and version stay); kNotFound when there is none. The cache and
  // store engines write the expiry into the item where it is, so a touch appends nothing to the
  // cache's log and evicts nothing. This default, for the engines whose items clients READ, puts
  // the item again with its version kept (restore_version). `out` (may be null): the item after
  // the touch, a view valid until the next put, del or touch.
  virtual Status touch(KeyHash h, std::string_view key, uint32_t expire_at, ItemView* out);

  Status get(std::string_view key, ItemView& out) { return get(hash_key(key), key, out); }
  Status put(std::string_view key, std::string_view value, const PutOptions& opts = {},
             uint64_t* new_version = nullptr) {
    return put(hash_key(key), key, value, opts, new_version);
  }
  Status del(std::string_view key) { return del(hash_key(key), key); }

  // ---- pipeline stages (HERD sec. 4.1.1), owner thread only ----
  // Stage 1: prefetch the key's index bucket. Stage 2 (some requests later): read the bucket,
  // which is now cached, and prefetch the items its matching tags point at. Stage 3: execute
  // with get/put/del, which then find both in cache. Prefetches never change results.
  virtual void prefetch_index(KeyHash h) const = 0;
  virtual void prefetch_item(KeyHash h) const = 0;

  // Runs the requests through the 3-step pipeline above with `gap` requests between stages
  // (0 = tuning::kDefaultStageGap). Results equal calling the one-call form in order.
  virtual void run_batch(std::span<const Request> reqs, CompletionFn done, size_t gap = 0) = 0;
  // Same, writing into responses[i] (responses.size() >= reqs.size()). GET value views in
  // `responses` are valid only if no later request of the batch mutates (see top).
  void run_batch(std::span<const Request> reqs, std::span<Response> responses, size_t gap = 0) {
    run_batch(
        reqs, [&](size_t i, const Response& r) { responses[i] = r; }, gap);
  }

  // Housekeeping the owner thread runs every so often (a worker: every 1024 poll rounds), for
  // engines that need it (release retired table generations, publish a clock).
  virtual void housekeeping() {}

  // Restore path (op log replay of a VERSION record, or of a PUT it leaves out): moves the
  // version counter past `version` as a PUT restored with it would (stamp_version), without
  // storing anything, so that a version handed out before a restart is never handed out again.
  virtual void restore_version(uint64_t version) = 0;

  // Removes every item (memcached's flush_all), owner thread only. False, changing nothing,
  // where the engine cannot (an engine whose table clients READ).
  virtual bool clear() { return false; }

  // Calls `fn` for each live, unexpired item of the index buckets [cursor, cursor + buckets)
  // (a store bucket with its overflow chain), owner thread only, changing nothing; returns the
  // next cursor, 0 after the last bucket. So a listing of a huge partition is done in pieces of
  // bounded work. Engines whose tables clients READ list nothing (0 at once).
  virtual uint64_t scan(uint64_t /*cursor*/, uint64_t /*buckets*/, ScanFn /*fn*/) const {
    return 0;
  }

  // ---- any thread ----
  StatsSnapshot stats() const { return stats_.snapshot(); }
  virtual EngineMemory memory() const = 0;
  virtual size_t max_value_size() const = 0;

 protected:
  PartitionStats stats_;

 private:
  std::string touched_value_;  // the default touch's copy of the value
};

// The cache or the store; proto/registry.h's make_engine builds every engine by name.
std::unique_ptr<Engine> make_engine(EngineKind kind, const EngineOptions& opts);

// The checks every engine call starts with: kInvalidKey for an empty key, kTooLarge for a key
// above kMaxKeySize or (put) a value above the engine's max_value_size, both counted in
// too_large; kOk otherwise.
inline Status check_key(std::string_view key, PartitionStats& stats, size_t value_size = 0,
                        size_t max_value = SIZE_MAX) {
  if (key.empty()) {
    add_st(stats.too_large);
    return Status::kInvalidKey;
  }
  if (key.size() > kMaxKeySize || value_size > max_value) {
    add_st(stats.too_large);
    return Status::kTooLarge;
  }
  return Status::kOk;
}

// Set-up checks and sizing both engines share: throws std::runtime_error when max_value_size
// is above kMaxValueSizeLimit; returns the index bucket count (opts.index_buckets, or 1/8 of
// memory_bytes in buckets of `bucket_bytes`), a power of two of at most 2^32 (hash.h's 32
// bucket bits).
size_t checked_index_buckets(const EngineOptions& opts, size_t bucket_bytes);

}  // namespace fabkv::store
