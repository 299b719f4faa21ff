// The workload generator every fabkv-bench driver shares: YCSB-compatible key choice (uniform,
// or scrambled Zipfian as YCSB's ScrambledZipfianGenerator), fixed key and value sizes, a read
// ratio, and YCSB's core workloads by name. Keys and values are pure functions of (key id,
// version), so a GET can be checked against what the generator would have written, and the same
// seed gives the same sequence of operations for every system.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fabkv::bench {

enum class Distribution { kUniform, kZipfian };
const char* to_string(Distribution d);
// "uniform" | "zipf" ("zipfian" too). Throws std::invalid_argument.
Distribution distribution_from_string(const std::string& s);

struct WorkloadSpec {
  std::string name = "custom";     // YCSB core workload letter ("A","B","C","F") or "custom"
  double read_ratio = 0.95;        // fraction of operations that are GETs (the rest PUTs)
  bool read_modify_write = false;  // YCSB F: the non-read ops are a GET then a PUT of the key
  Distribution distribution = Distribution::kUniform;
  double zipf_theta = 0.99;  // YCSB's default Zipfian constant
  uint64_t keys = 100000;    // key space [0, keys)
  double fill = 1.0;         // fraction of the key space the load phase writes
  uint32_t key_size = 16;    // bytes per key
  uint32_t value_size = 32;  // bytes per value (>= kMinValueSize: values carry their version)
  // When above value_size: value sizes are a distribution, uniform over
  // [value_size, value_size_max], drawn per (key, version) so that a reader can recompute them.
  uint32_t value_size_max = 0;
  uint64_t seed = 0x5eed;  // client c draws from stream seed + c
  // Keys per GET: above 1 every GET is a multi-get of that many keys, each drawn from the
  // distribution (memcached's `get k1 k2 ...`, redis's MGET; drivers that have one).
  uint32_t multiget = 1;
};

// A value starts with its version in 8 hex digits, so a reader can recompute the rest.
inline constexpr uint32_t kMinValueSize = 8;

// Sets read_ratio and read_modify_write for a YCSB core workload: A (50% read, 50% update),
// B (95/5), C (100/0), F (50% read, 50% read-modify-write). Throws std::invalid_argument for any
// other name (D and E need inserts and scans, which a key-value store without them cannot run).
void apply_core_workload(const std::string& name, WorkloadSpec* spec);
// Throws std::invalid_argument with a user-facing message for impossible parameters.
void validate(const WorkloadSpec& spec);

// splitmix64: the seeding and stream generator (fast, passes BigCrush, trivially reproducible).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double next_double() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }

 private:
  uint64_t s_;
};

// YCSB's FNV-1a 64 over the 8 bytes of a long (Utils.fnvhash64), used for scrambling.
uint64_t fnv_hash64(uint64_t v);

// YCSB's ZipfianGenerator over ranks [0, n): Gray et al.'s "Quickly generating billion-record
// synthetic databases" method. Ranks 0 and 1 have exactly the Zipf probabilities
// 1/zeta(n) and 2^-theta/zeta(n); the rest follow Gray's closed-form approximation (within
// ~17% of the ideal at rank 2, ~4% in the tail for theta 0.99), which is what YCSB runs.
class ZipfianGenerator {
 public:
  ZipfianGenerator(uint64_t n, double theta);
  uint64_t next(Rng& rng) const;
  // Exact probability that next() returns `rank` under this algorithm (for tests and docs).
  double probability(uint64_t rank) const;
  // The ideal Zipf probability 1 / (rank+1)^theta / zeta(n).
  double ideal_probability(uint64_t rank) const;
  uint64_t n() const { return n_; }
  double zetan() const { return zetan_; }

  static double zeta(uint64_t n, double theta);  // sum_{i=1..n} 1/i^theta

 private:
  double cdf_tail(double x) const;  // P(uz >= zeta2 and n*(eta*u-eta+1)^alpha < x)
  uint64_t n_;
  double theta_, alpha_, zetan_, zeta2_, eta_;
};

// YCSB's ScrambledZipfianGenerator, over the key space itself: a Zipfian rank, then
// fnv_hash64(rank) % n, so the hot keys are spread over the key space (and over partitions)
// instead of being keys 0, 1, 2 ... (YCSB draws the rank over 10^10 items with a precomputed
// zeta and folds it; we compute zeta over the real key count so the distribution over keys is
// the one printed in the results).
class ScrambledZipfian {
 public:
  ScrambledZipfian(uint64_t n, double theta) : zipf_(n, theta) {}
  uint64_t next(Rng& rng) const { return fnv_hash64(zipf_.next(rng)) % zipf_.n(); }
  const ZipfianGenerator& ranks() const { return zipf_; }

 private:
  ZipfianGenerator zipf_;
};

// The key and value for (key id, version): deterministic, printable, exactly the spec's sizes.
// The forms writing into *out reuse its buffer (no allocation once it is large enough).
std::string make_key(uint64_t id, uint32_t key_size);
void make_key(uint64_t id, uint32_t key_size, std::string* out);
void make_value(uint64_t id, uint32_t version, uint32_t value_size, std::string* out);
// True when `value` is what make_value(id, v, size) gives for the version it carries
// (compared byte by byte as they are generated: no allocation).
bool check_value(uint64_t id, uint32_t value_size, std::string_view value);
// The size of (key id, version)'s value under the workload's value-size distribution.
uint32_t value_size_for(const WorkloadSpec& w, uint64_t id, uint32_t version);
// check_value with the size the workload gives the version the value carries.
bool check_value(uint64_t id, const WorkloadSpec& w, std::string_view value);

enum class OpKind : uint8_t { kGet, kPut, kReadModifyWrite };

struct Op {
  OpKind kind;
  uint64_t key;
};

// One logical client's operation stream: its own RNG stream, a shared key chooser.
class OpStream {
 public:
  OpStream(const WorkloadSpec& spec, std::shared_ptr<const ScrambledZipfian> zipf, uint32_t client);
  Op next();
  // One more key from the distribution (a multi-get's further keys), nothing else drawn.
  uint64_t next_key();
  // A fresh version for this client's next PUT (unique per client; values carry it).
  uint32_t next_version() { return ++puts_ * 1024u + client_ % 1024u; }

 private:
  const WorkloadSpec spec_;
  std::shared_ptr<const ScrambledZipfian> zipf_;
  Rng rng_;
  uint32_t client_;
  uint32_t puts_ = 0;
};

// Builds the shared Zipfian table (zeta over the key space: O(keys), done once per run plan).
std::shared_ptr<const ScrambledZipfian> make_zipf(const WorkloadSpec& spec);

}  // namespace fabkv::bench
