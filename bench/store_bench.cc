// fabkv-store-bench: GET and PUT throughput of one storage partition on one pinned core, the
// issue-3 workload: 8 M items (HERD's per-partition load), 16-byte keys, 32-byte values,
// uniform and Zipf 0.99 keys; cache and store engines, one-call and pipelined (HERD sec.
// 4.1.1 prefetching), against std::unordered_map<std::string, std::string> in the same run.
//
// Every variant does the same work per operation: hash the key, look it up, copy the value
// into a response buffer (GET) or overwrite it with a new 32-byte value (PUT). Keys come from
// a precomputed stream read sequentially, like requests arriving in a request region.
//
// Flags (before the Google Benchmark ones): --items=N (default 8388608), --core=N (default 1,
// -1 = do not pin), --batch=N requests per pipelined batch (default 64), --gap=N stage gap
// (default 0 = the engine's tuning::kDefaultStageGap), --gaps to also sweep the gap.
#include <benchmark/benchmark.h>

#include <algorithm>
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
    const auto r = static_cast<uint64_t>(static_cast<double>(n_) * std::pow(eta_ * u - eta_ + 1, alpha_));
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

struct World {
  Config cfg;
  std::unique_ptr<Engine> cache, store;
  std::unordered_map<std::string, std::string> map;
  SvMap sv_map;
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
  }
  w.cache_drops = w.cache->stats().index_drops;
  w.uniform_stream = make_stream(n, false);
  w.zipf_stream = make_stream(n, true);
}

enum class Impl { kMap, kSvMap, kCacheOneCall, kCachePipelined, kStoreOneCall, kStorePipelined };
const char* impl_name(Impl i) {
  switch (i) {
    case Impl::kMap: return "unordered_map";
    case Impl::kSvMap: return "map/sv-lookup";
    case Impl::kCacheOneCall: return "cache/one-call";
    case Impl::kCachePipelined: return "cache/pipelined";
    case Impl::kStoreOneCall: return "store/one-call";
    case Impl::kStorePipelined: return "store/pipelined";
  }
  return "?";
}

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
    const char* keys = &stream[pos * kKeySize];
    pos += batch;
    switch (impl) {
      case Impl::kMap:
        for (size_t i = 0; i < batch; ++i) {
          // std::string key: the map hashes and compares std::string, like any caller would.
          const std::string k(keys + i * kKeySize, kKeySize);
          auto it = w.map.find(k);
          if (it == w.map.end()) {
            ++misses;
          } else if (put) {
            it->second.assign(new_value);
          } else {
            std::memcpy(response, it->second.data(), it->second.size());
          }
        }
        break;
      case Impl::kSvMap:
        for (size_t i = 0; i < batch; ++i) {
          auto it = w.sv_map.find(std::string_view(keys + i * kKeySize, kKeySize));
          if (it == w.sv_map.end()) {
            ++misses;
          } else if (put) {
            it->second.assign(new_value);
          } else {
            std::memcpy(response, it->second.data(), it->second.size());
          }
        }
        break;
      case Impl::kCacheOneCall:
      case Impl::kStoreOneCall:
        for (size_t i = 0; i < batch; ++i) {
          const std::string_view k(keys + i * kKeySize, kKeySize);
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
        break;
      case Impl::kCachePipelined:
      case Impl::kStorePipelined:
        for (size_t i = 0; i < batch; ++i) {
          Request& r = reqs[i];
          r.key = std::string_view(keys + i * kKeySize, kKeySize);
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
        break;
    }
    benchmark::DoNotOptimize(response);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * batch));
  state.counters["miss_ratio"] =
      static_cast<double>(misses) / static_cast<double>(state.iterations() * batch);
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
    const char* impls[] = {"unordered_map", "map/sv-lookup", "cache/one-call", "cache/pipelined", "store/one-call",
                           "store/pipelined"};
    std::printf("\nMops per core (%zu items, %zu B keys, %zu B values)\n", g_world->cfg.items,
                kKeySize, kValueSize);
    std::printf("| op  | keys    |");
    for (const char* i : impls) std::printf(" %15s |", i);
    std::printf(" cache/pipelined vs map | vs map/sv-lookup |\n|---|---|");
    for (size_t i = 0; i < std::size(impls) + 2; ++i) std::printf("---|");
    std::printf("\n");
    for (const char* op : {"GET", "PUT"}) {
      for (const char* dist : {"uniform", "zipf0.99"}) {
        std::printf("| %s | %-7s |", op, dist);
        auto get = [&](const char* impl) {
          auto it = mops_.find(std::string(op) + "/" + dist + "/" + impl);
          return it == mops_.end() ? 0.0 : it->second;
        };
        for (const char* i : impls) std::printf(" %15.2f |", get(i));
        const double base = get("unordered_map"), sv = get("map/sv-lookup");
        std::printf(" %21.2fx | %15.2fx |\n", base > 0 ? get("cache/pipelined") / base : 0.0,
                    sv > 0 ? get("cache/pipelined") / sv : 0.0);
      }
    }
    std::printf("\ncache index drops while loading: %llu\n",
                static_cast<unsigned long long>(g_world->cache_drops));
  }

 private:
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
  spdlog::info("populating {} items into cache, store and two unordered_maps", world.cfg.items);
  build_world(world);
  g_world = &world;

  // GETs first: the PUT runs append to the cache log and would eventually evict.
  for (bool put : {false, true}) {
    for (bool zipf : {false, true}) {
      for (Impl impl : {Impl::kMap, Impl::kSvMap, Impl::kCacheOneCall, Impl::kCachePipelined,
                        Impl::kStoreOneCall, Impl::kStorePipelined}) {
        const std::string name = std::string(put ? "PUT/" : "GET/") +
                                 (zipf ? "zipf0.99/" : "uniform/") + impl_name(impl);
        benchmark::RegisterBenchmark(
            name.c_str(), [impl, put, zipf, gap = world.cfg.gap](benchmark::State& s) {
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
    }
  }
  TableReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
