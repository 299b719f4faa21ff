// fabkv-store-bench: GET and PUT throughput of one storage partition on one pinned core, the
// issue-3 workload: 8 M items (HERD's per-partition load), 16-byte keys, 32-byte values,
// uniform and Zipf 0.99 keys; cache and store engines, one-call and pipelined (HERD sec.
// 4.1.1 prefetching), against std::unordered_map<std::string, std::string> and
// absl::flat_hash_map (issue 12) in the same run.
//
// Every variant does the same work per operation: hash the key, look it up, copy the value
// into a response buffer (GET) or overwrite it with a new 32-byte value (PUT). Keys come from
// a precomputed stream read sequentially, like requests arriving in a request region.
//
// Flags (before the Google Benchmark ones): --items=N (default 8388608), --core=N (default 1,
// -1 = do not pin), --batch=N requests per pipelined batch (default 64), --gap=N stage gap
// (default 0 = the engine's tuning::kDefaultStageGap and absl/prefetch's
// kDefaultAbslPrefetchGap; a nonzero gap applies to both), --gaps to also sweep the gap of the
// pipelined cache and of absl/prefetch.
#include <absl/container/flat_hash_map.h>
#include <absl/strings/string_view.h>
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/cpu.h"
#include "common/log.h"
#include "store/engine.h"
#include "store/hash.h"

namespace {

using namespace fabkv::store;

constexpr size_t kKeySize = 16;
constexpr size_t kValueSize = 32;
constexpr size_t kStreamOps = size_t{1} << 22;  // 4 Mi requests per distribution, cycled

struct Config {
  size_t items = size_t{8} << 20;
  int core = 1;
  size_t batch = 64;
  size_t gap = 0;
  bool sweep_gaps = false;
};

// Zipf over [0, n) with YCSB's generator (Gray et al., "Quickly generating billion-record
// synthetic databases", SIGMOD 1994), theta = 0.99 as in HERD's skewed workload.
class Zipf {
 public:
  Zipf(uint64_t n, double theta) : n_(n), theta_(theta) {
    double zetan = 0;
    for (uint64_t i = 1; i <= n; ++i) zetan += 1.0 / std::pow(static_cast<double>(i), theta);
    zetan_ = zetan;
    const double zeta2 = 1.0 + 1.0 / std::pow(2.0, theta);
    alpha_ = 1.0 / (1.0 - theta);
    eta_ = (1 - std::pow(2.0 / static_cast<double>(n), 1 - theta)) / (1 - zeta2 / zetan);
  }
  uint64_t next(std::mt19937_64& rng) {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    const double uz = u * zetan_;
    if (uz < 1.0) return 0;
    if (uz < 1.0 + std::pow(0.5, theta_)) return 1;
    const auto r = static_cast<uint64_t>(static_cast<double>(n_) *
                                         std::pow(eta_ * u - eta_ + 1, alpha_));
    return std::min(r, n_ - 1);
  }

 private:
  uint64_t n_;
  double theta_, zetan_, alpha_, eta_;
};

void make_key(uint64_t i, char* out) {
  // 16 hex digits of a bijective scramble of i: fixed size, no shared prefix structure.
  char buf[kKeySize + 1];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(i * 0x9E3779B97F4A7C15ULL));
  std::memcpy(out, buf, kKeySize);
}

void make_value(uint64_t i, uint64_t salt, char* out) {
  for (size_t j = 0; j < kValueSize; ++j) out[j] = static_cast<char>('a' + (i + j + salt) % 26);
}

// The same map with heterogeneous lookup (C++20): find() takes the string_view, so a lookup
// does not build a std::string (16-byte keys exceed libstdc++'s 15-byte small-string buffer,
// so the plain map pays one malloc/free per lookup).
struct TransparentHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using SvMap = std::unordered_map<std::string, std::string, TransparentHash, std::equal_to<>>;

// absl baselines (issue 12). The value is a fixed 32-byte array stored inline in the slot: no
// heap block per value, so a GET touches the control bytes and the slot only, as a skilled
// user who knows the value size would write it.
//  - absl/string: std::string key, looked up by absl::string_view (absl's default hash and
//    equality are transparent for strings, so no std::string is built per lookup). The
//    common way to key by bytes, but a 16-byte key is past libstdc++'s 15-byte small-string
//    buffer: each key lives in its own heap block and the key compare is a third miss.
//  - absl/array: the key as 16 inline bytes (Key16), so the whole entry (48 bytes) is in the
//    slot and a GET is two misses (control group + slot), like the engines' bucket + item.
//    The fastest layout for fixed 16-byte keys.
//  - absl/array-thp: the same map whose slot array gets madvise(MADV_HUGEPAGE), as the
//    engines' partition memory does (store/region.cc) when MAP_HUGETLB is unavailable: at
//    8 M items the table is ~800 MB, so 4 KiB pages would make the baseline pay TLB misses
//    that the engines do not.
//  - absl/prefetch: absl/array-thp driven like the pipelined engines: batches of --batch
//    requests, raw_hash_set::prefetch(key) (control group and first slot group) `gap`
//    requests ahead of find(key). It hashes each key twice (prefetch has no hash argument).
struct Key16 {
  // Two words rather than std::array<char, 16>: the array's operator== compiled to an
  // out-of-line memcmp call per probed slot (~19 instructions per GET, callgrind); defaulted
  // == on two words is two inline compares. Hashed as the same 16 contiguous bytes.
  uint64_t w[2];
  friend bool operator==(const Key16&, const Key16&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Key16& k) {
    return H::combine_contiguous(std::move(h), reinterpret_cast<const unsigned char*>(k.w),
                                 sizeof k.w);
  }
};
static_assert(sizeof(Key16) == kKeySize);
using Value32 = std::array<char, kValueSize>;
constexpr size_t kDefaultAbslPrefetchGap = 8;  // see --gaps; flat from ~6 to 16

// mmap + madvise(MADV_HUGEPAGE) for the absl table's one big allocation (the map is reserved
// before loading, so it allocates once).
template <class T>
struct ThpAllocator {
  using value_type = T;
  ThpAllocator() = default;
  template <class U>
  ThpAllocator(const ThpAllocator<U>&) {}  // NOLINT(google-explicit-constructor)
  static size_t mapped_size(size_t n) {
    constexpr size_t kHugePage = size_t{2} << 20;
    return (n * sizeof(T) + kHugePage - 1) & ~(kHugePage - 1);
  }
  T* allocate(size_t n) {
    void* p = ::mmap(nullptr, mapped_size(n), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    (void)::madvise(p, mapped_size(n), MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) { ::munmap(p, mapped_size(n)); }
  template <class U>
  bool operator==(const ThpAllocator<U>&) const {
    return true;
  }
};

using AbslStringMap = absl::flat_hash_map<std::string, Value32>;
using AbslArrayMap = absl::flat_hash_map<Key16, Value32>;
using AbslThpMap = absl::flat_hash_map<Key16, Value32, absl::Hash<Key16>, std::equal_to<Key16>,
                                       ThpAllocator<std::pair<const Key16, Value32>>>;

Key16 to_key16(const char* p) {
  Key16 k;
  std::memcpy(k.w, p, kKeySize);
  return k;
}

struct World {
  Config cfg;
  std::unique_ptr<Engine> cache, store;
  std::unordered_map<std::string, std::string> map;
  SvMap sv_map;
  AbslStringMap absl_string;
  AbslArrayMap absl_array;
  AbslThpMap absl_thp;
  std::vector<char> uniform_stream, zipf_stream;  // kStreamOps keys of kKeySize bytes
  uint64_t cache_drops = 0;
};

World* g_world = nullptr;

std::vector<char> make_stream(size_t items, bool zipf) {
  std::vector<char> s(kStreamOps * kKeySize);
  std::mt19937_64 rng(zipf ? 2 : 1);
  if (!zipf) {
    for (size_t i = 0; i < kStreamOps; ++i) make_key(rng() % items, &s[i * kKeySize]);
    return s;
  }
  // Scramble ranks so that the hot keys are spread over the index.
  std::vector<uint32_t> perm(items);
  std::iota(perm.begin(), perm.end(), 0u);
  std::shuffle(perm.begin(), perm.end(), rng);
  Zipf z(items, 0.99);
  for (size_t i = 0; i < kStreamOps; ++i) make_key(perm[z.next(rng)], &s[i * kKeySize]);
  return s;
}

void build_world(World& w) {
  const size_t n = w.cfg.items;
  // Index sized for ~2 items per bucket, log/heap with room to spare: no evictions and almost
  // no chaining at 8 M items, so GETs measure the lookup, not misses.
  auto pow2 = [](size_t x) { return std::bit_ceil(std::max<size_t>(x, 1)); };
  EngineOptions o;
  o.index_buckets = pow2(n / 2);
  o.memory_bytes = o.index_buckets * 64 + n * 80 * 3 / 2 + (size_t{64} << 20);
  o.max_value_size = 1024;
  w.cache = make_engine(EngineKind::kCache, o);
  w.store = make_engine(EngineKind::kStore, o);
  w.map.reserve(n);
  w.sv_map.reserve(n);
  w.absl_string.reserve(n);
  w.absl_array.reserve(n);
  w.absl_thp.reserve(n);
  char key[kKeySize], value[kValueSize];
  for (size_t i = 0; i < n; ++i) {
    make_key(i, key);
    make_value(i, 0, value);
    const std::string_view k(key, kKeySize), v(value, kValueSize);
    const KeyHash h = hash_key(k);
    if (w.cache->put(h, k, v) != Status::kOk || w.store->put(h, k, v) != Status::kOk) {
      std::fprintf(stderr, "populate failed at item %zu\n", i);
      std::exit(1);
    }
    w.map.emplace(std::string(k), std::string(v));
    w.sv_map.emplace(std::string(k), std::string(v));
    Value32 v32;
    std::memcpy(v32.data(), value, kValueSize);
    w.absl_string.emplace(std::string(k), v32);
    w.absl_array.emplace(to_key16(key), v32);
    w.absl_thp.emplace(to_key16(key), v32);
  }
  w.cache_drops = w.cache->stats().index_drops;
  w.uniform_stream = make_stream(n, false);
  w.zipf_stream = make_stream(n, true);
}

enum class Impl {
  kMap,
  kSvMap,
  kAbslString,
  kAbslArray,
  kAbslThp,
  kAbslPrefetch,
  kCacheOneCall,
  kCachePipelined,
  kStoreOneCall,
  kStorePipelined
};
constexpr Impl kImpls[] = {Impl::kMap,           Impl::kSvMap,          Impl::kAbslString,
                           Impl::kAbslArray,     Impl::kAbslThp,        Impl::kAbslPrefetch,
                           Impl::kCacheOneCall,  Impl::kCachePipelined, Impl::kStoreOneCall,
                           Impl::kStorePipelined};
const char* impl_name(Impl i) {
  switch (i) {
    case Impl::kMap: return "unordered_map";
    case Impl::kSvMap: return "map/sv-lookup";
    case Impl::kAbslString: return "absl/string";
    case Impl::kAbslArray: return "absl/array";
    case Impl::kAbslThp: return "absl/array-thp";
    case Impl::kAbslPrefetch: return "absl/prefetch";
    case Impl::kCacheOneCall: return "cache/one-call";
    case Impl::kCachePipelined: return "cache/pipelined";
    case Impl::kStoreOneCall: return "store/one-call";
    case Impl::kStorePipelined: return "store/pipelined";
  }
  return "?";
}

// One absl lookup and the same per-op work as the other variants.
template <class Map, class Key>
void absl_op(Map& map, const Key& k, bool put, std::string_view new_value, char* response,
             uint64_t& misses) {
  auto it = map.find(k);
  if (it == map.end()) {
    ++misses;
  } else if (put) {
    std::memcpy(it->second.data(), new_value.data(), kValueSize);
  } else {
    std::memcpy(response, it->second.data(), kValueSize);
  }
}

// One batch of operations on one variant: the keys of the batch, what a PUT writes, where a GET
// copies its value, and the counts of misses and failed PUTs.
struct Batch {
  World& w;
  const char* keys;  // size * kKeySize bytes
  size_t size;
  bool put;
  std::string_view new_value;
  char* response;
  uint64_t& misses;
  uint64_t& errors;

  const char* key(size_t i) const { return keys + i * kKeySize; }

  // std::unordered_map: `Key` is what the map hashes and compares (std::string or a view).
  template <class Key, class Map>
  void on_std_map(Map& map) {
    for (size_t i = 0; i < size; ++i) {
      auto it = map.find(Key(key(i), kKeySize));
      if (it == map.end()) {
        ++misses;
      } else if (put) {
        it->second.assign(new_value);
      } else {
        std::memcpy(response, it->second.data(), it->second.size());
      }
    }
  }

  void on_absl(Impl impl, size_t gap) {
    switch (impl) {
      case Impl::kAbslString:
        for (size_t i = 0; i < size; ++i)
          absl_op(w.absl_string, absl::string_view(key(i), kKeySize), put, new_value, response,
                  misses);
        break;
      case Impl::kAbslArray:
        for (size_t i = 0; i < size; ++i)
          absl_op(w.absl_array, to_key16(key(i)), put, new_value, response, misses);
        break;
      case Impl::kAbslThp:
        for (size_t i = 0; i < size; ++i)
          absl_op(w.absl_thp, to_key16(key(i)), put, new_value, response, misses);
        break;
      default: {  // kAbslPrefetch
        const size_t agap = gap != 0 ? gap : kDefaultAbslPrefetchGap;
        for (size_t i = 0; i < size + agap; ++i) {
          if (i < size) w.absl_thp.prefetch(to_key16(key(i)));
          if (i >= agap)
            absl_op(w.absl_thp, to_key16(key(i - agap)), put, new_value, response, misses);
        }
      }
    }
  }

  // An Engine one call per operation.
  void on_engine(Engine* e) {
    for (size_t i = 0; i < size; ++i) {
      const std::string_view k(key(i), kKeySize);
      const KeyHash h = hash_key(k);
      if (put) {
        errors += e->put(h, k, new_value) != Status::kOk;
      } else {
        ItemView v;
        if (e->get(h, k, v) == Status::kOk) {
          std::memcpy(response, v.value.data(), v.value.size());
        } else {
          ++misses;
        }
      }
    }
  }

  // An Engine's run_batch over the whole batch, prefetching `gap` requests ahead.
  void on_engine_pipelined(Engine* e, std::vector<Request>& reqs, size_t gap) {
    for (size_t i = 0; i < size; ++i) {
      Request& r = reqs[i];
      r.key = std::string_view(key(i), kKeySize);
      r.hash = hash_key(r.key);
      r.op = put ? Op::kPut : Op::kGet;
      r.value = new_value;
    }
    e->run_batch(
        reqs,
        [&](size_t, const Response& r) {
          if (r.status != Status::kOk) {
            ++(put ? errors : misses);
          } else if (!put) {
            std::memcpy(response, r.value.data(), r.value.size());
          }
        },
        gap);
  }
};

void run(benchmark::State& state, Impl impl, bool put, bool zipf, size_t gap) {
  World& w = *g_world;
  const std::vector<char>& stream = zipf ? w.zipf_stream : w.uniform_stream;
  const size_t batch = w.cfg.batch;
  Engine* e = (impl == Impl::kCacheOneCall || impl == Impl::kCachePipelined) ? w.cache.get()
                                                                             : w.store.get();
  std::vector<Request> reqs(batch);
  char response[kValueSize * 2] = {};
  char value[kValueSize];
  make_value(7, 1, value);
  const std::string_view new_value(value, kValueSize);
  uint64_t misses = 0, errors = 0, pos = 0;
  for (auto _ : state) {
    if (pos + batch > kStreamOps) pos = 0;
    Batch b{w, &stream[pos * kKeySize], batch, put, new_value, response, misses, errors};
    pos += batch;
    switch (impl) {
      // std::string key: the map hashes and compares std::string, like any caller would.
      case Impl::kMap: b.on_std_map<std::string>(w.map); break;
      case Impl::kSvMap: b.on_std_map<std::string_view>(w.sv_map); break;
      case Impl::kAbslString:
      case Impl::kAbslArray:
      case Impl::kAbslThp:
      case Impl::kAbslPrefetch: b.on_absl(impl, gap); break;
      case Impl::kCacheOneCall:
      case Impl::kStoreOneCall: b.on_engine(e); break;
      case Impl::kCachePipelined:
      case Impl::kStorePipelined: b.on_engine_pipelined(e, reqs, gap); break;
    }
    benchmark::DoNotOptimize(response);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * batch));
  state.counters["miss_ratio"] = static_cast<double>(misses) /
                                 static_cast<double>(state.iterations() * batch);
  if (errors != 0) state.SkipWithError("put failed");
}

// Collects items/s per benchmark and prints the side-by-side table at the end.
class TableReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      auto it = r.counters.find("items_per_second");
      if (it != r.counters.end()) mops_[r.benchmark_name()] = it->second.value / 1e6;
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\nMops per core (%zu items, %zu B keys, %zu B values)\n| op  | keys     |",
                g_world->cfg.items, kKeySize, kValueSize);
    for (Impl i : kImpls) std::printf(" %s |", impl_name(i));
    std::printf("\n|---|---|");
    for (size_t i = 0; i < std::size(kImpls); ++i) std::printf("---:|");
    std::printf("\n");
    for (const char* op : {"GET", "PUT"}) {
      for (const char* dist : {"uniform", "zipf0.99"}) {
        std::printf("| %s | %-8s |", op, dist);
        for (Impl i : kImpls) print_cell(get(op, dist, impl_name(i)), "");
        std::printf("\n");
      }
    }
    // Issue 12's figure: engine / baseline on the same core. "absl best one-call" is the
    // fastest of the three plain absl loops in this run; absl/prefetch is absl given the
    // engines' own prefetching trick.
    const Impl engines[] = {Impl::kCacheOneCall, Impl::kCachePipelined, Impl::kStoreOneCall,
                            Impl::kStorePipelined};
    std::printf("\nRatios engine / baseline (Mops per core)\n| op  | keys     | baseline |");
    for (Impl e : engines) std::printf(" %s |", impl_name(e));
    std::printf("\n|---|---|---|");
    for (size_t i = 0; i < std::size(engines); ++i) std::printf("---:|");
    std::printf("\n");
    for (const char* op : {"GET", "PUT"}) {
      for (const char* dist : {"uniform", "zipf0.99"}) {
        const double best_absl = std::max({get(op, dist, "absl/string"),
                                           get(op, dist, "absl/array"),
                                           get(op, dist, "absl/array-thp")});
        const std::pair<const char*, double> bases[] = {
            {"unordered_map", get(op, dist, "unordered_map")},
            {"map/sv-lookup", get(op, dist, "map/sv-lookup")},
            {"absl best one-call", best_absl},
            {"absl/prefetch", get(op, dist, "absl/prefetch")}};
        for (const auto& [name, base] : bases) {
          std::printf("| %s | %-8s | %s |", op, dist, name);
          for (Impl e : engines) {
            print_cell(base > 0 ? get(op, dist, impl_name(e)) / base : 0.0, "x");
          }
          std::printf("\n");
        }
      }
    }
    std::printf("\ncache index drops while loading: %llu\n",
                static_cast<unsigned long long>(g_world->cache_drops));
  }

 private:
  // "-" for a benchmark that did not run (--benchmark_filter).
  static void print_cell(double v, const char* unit) {
    if (v > 0) {
      std::printf(" %.2f%s |", v, unit);
    } else {
      std::printf(" - |");
    }
  }
  double get(const char* op, const char* dist, const char* impl) const {
    auto it = mops_.find(std::string(op) + "/" + dist + "/" + impl);
    return it == mops_.end() ? 0.0 : it->second;
  }

  std::map<std::string, double> mops_;
};

bool take_flag(const char* arg, const char* name, std::string* value) {
  const size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0) return false;
  if (arg[n] == '=') {
    *value = arg + n + 1;
    return true;
  }
  if (arg[n] == '\0') {
    *value = "";
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  fabkv::init_logging("fabkv-store-bench");
  World world;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    std::string v;
    if (take_flag(argv[i], "--items", &v)) {
      world.cfg.items = std::stoull(v);
    } else if (take_flag(argv[i], "--core", &v)) {
      world.cfg.core = std::stoi(v);
    } else if (take_flag(argv[i], "--batch", &v)) {
      world.cfg.batch = std::max<size_t>(1, std::stoull(v));
    } else if (take_flag(argv[i], "--gap", &v)) {
      world.cfg.gap = std::stoull(v);
    } else if (take_flag(argv[i], "--gaps", &v)) {
      world.cfg.sweep_gaps = true;
    } else {
      rest.push_back(argv[i]);
    }
  }
  int bargc = static_cast<int>(rest.size());
  benchmark::Initialize(&bargc, rest.data());
  if (world.cfg.core >= 0 && !fabkv::pin_this_thread(world.cfg.core)) {
    spdlog::warn("could not pin to core {}", world.cfg.core);
  }
  spdlog::info("populating {} items into cache, store, two unordered_maps and three absl maps",
               world.cfg.items);
  build_world(world);
  g_world = &world;

  // GETs first: the PUT runs append to the cache log and would eventually evict.
  for (bool put : {false, true}) {
    for (bool zipf : {false, true}) {
      for (Impl impl : kImpls) {
        const std::string name = std::string(put ? "PUT/" : "GET/") +
                                 (zipf ? "zipf0.99/" : "uniform/") + impl_name(impl);
        benchmark::RegisterBenchmark(name.c_str(),
                                     [impl, put, zipf, gap = world.cfg.gap](benchmark::State& s) {
                                       run(s, impl, put, zipf, gap);
                                     });
      }
    }
    if (!put && world.cfg.sweep_gaps) {
      for (size_t gap : {1, 2, 3, 4, 6, 8, 12, 16}) {
        const std::string name = "GET/uniform/cache/pipelined/gap:" + std::to_string(gap);
        benchmark::RegisterBenchmark(name.c_str(), [gap](benchmark::State& s) {
          run(s, Impl::kCachePipelined, false, false, gap);
        });
      }
      for (size_t gap : {2, 4, 6, 8, 12, 16}) {
        const std::string name = "GET/uniform/absl/prefetch/gap:" + std::to_string(gap);
        benchmark::RegisterBenchmark(name.c_str(), [gap](benchmark::State& s) {
          run(s, Impl::kAbslPrefetch, false, false, gap);
        });
      }
    }
  }
  TableReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
