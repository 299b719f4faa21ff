#include "bench/workload.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "common/bytes.h"

namespace fabkv::bench {

const char* to_string(Distribution d) { return d == Distribution::kUniform ? "uniform" : "zipf"; }

Distribution distribution_from_string(const std::string& s) {
  if (s == "uniform") return Distribution::kUniform;
  if (s == "zipf" || s == "zipfian") return Distribution::kZipfian;
  throw std::invalid_argument("unknown distribution '" + s + "' (uniform|zipf)");
}

void apply_core_workload(const std::string& name, WorkloadSpec* spec) {
  // YCSB's workloads/workload{a,b,c,f}: readproportion / updateproportion / readmodifywrite.
  if (name == "A" || name == "a") {
    spec->read_ratio = 0.5;
    spec->read_modify_write = false;
  } else if (name == "B" || name == "b") {
    spec->read_ratio = 0.95;
    spec->read_modify_write = false;
  } else if (name == "C" || name == "c") {
    spec->read_ratio = 1.0;
    spec->read_modify_write = false;
  } else if (name == "F" || name == "f") {
    spec->read_ratio = 0.5;
    spec->read_modify_write = true;
  } else {
    throw std::invalid_argument("unknown workload '" + name + "' (A, B, C or F)");
  }
  spec->name = std::string(1, static_cast<char>(std::toupper(static_cast<unsigned char>(name[0]))));
}

namespace {
uint32_t digits(uint64_t v) {
  uint32_t d = 1;
  while (v >= 10) v /= 10, ++d;
  return d;
}
}  // namespace

void validate(const WorkloadSpec& s) {
  if (!(s.read_ratio >= 0.0 && s.read_ratio <= 1.0))
    throw std::invalid_argument(fmt::format("read ratio {} is not in [0, 1]", s.read_ratio));
  if (s.keys == 0) throw std::invalid_argument("--keys must be at least 1");
  if (!(s.fill > 0.0 && s.fill <= 1.0))
    throw std::invalid_argument(fmt::format("--fill {} is not in (0, 1]", s.fill));
  if (s.distribution == Distribution::kZipfian && !(s.zipf_theta > 0.0 && s.zipf_theta < 1.0))
    throw std::invalid_argument(fmt::format("--zipf-theta {} is not in (0, 1)", s.zipf_theta));
  // "k" + the decimal id, zero-padded: the key must hold the largest id.
  if (s.key_size < 1 + digits(s.keys - 1) || s.key_size > 250)
    throw std::invalid_argument(fmt::format("--key-size {} cannot hold {} keys (need {}..250)",
                                            s.key_size, s.keys, 1 + digits(s.keys - 1)));
  if (s.value_size_max != 0 && s.value_size_max < s.value_size)
    throw std::invalid_argument(fmt::format("--value-size-max {} is below --value-size {}",
                                            s.value_size_max, s.value_size));
  if (s.multiget < 1 || s.multiget > 100)
    throw std::invalid_argument(fmt::format("--multiget {} is not in 1..100", s.multiget));
  if (s.multiget > 1 && s.read_modify_write)
    throw std::invalid_argument("--multiget: workload F reads one record before each update");
  if (s.value_size < kMinValueSize)
    throw std::invalid_argument(
        fmt::format("--value-size {} is below {} (values carry their "
                    "version so GETs can be checked)",
                    s.value_size, kMinValueSize));
}

uint64_t fnv_hash64(uint64_t v) {
  // YCSB Utils.fnvhash64: FNV-1a over the value's 8 bytes, low byte first.
  uint64_t h = 0xCBF29CE484222325ULL;
  for (int i = 0; i < 8; ++i) {
    h ^= v & 0xff;
    h *= 1099511628211ULL;
    v >>= 8;
  }
  return h;
}

double ZipfianGenerator::zeta(uint64_t n, double theta) {
  double sum = 0;
  for (uint64_t i = 1; i <= n; ++i) sum += 1.0 / std::pow(static_cast<double>(i), theta);
  return sum;
}

ZipfianGenerator::ZipfianGenerator(uint64_t n, double theta) : n_(n), theta_(theta) {
  if (n == 0) throw std::invalid_argument("zipfian over 0 items");
  alpha_ = 1.0 / (1.0 - theta_);
  zetan_ = zeta(n_, theta_);
  zeta2_ = zeta(2, theta_);
  eta_ = (1.0 - std::pow(2.0 / static_cast<double>(n_), 1.0 - theta_)) / (1.0 - zeta2_ / zetan_);
}

uint64_t ZipfianGenerator::next(Rng& rng) const {
  // YCSB ZipfianGenerator.nextLong(itemcount) with base 0.
  double u = rng.next_double();
  double uz = u * zetan_;
  if (uz < 1.0) return 0;
  if (uz < 1.0 + std::pow(0.5, theta_)) return n_ > 1 ? 1 : 0;
  auto r = static_cast<uint64_t>(static_cast<double>(n_) * std::pow(eta_ * u - eta_ + 1, alpha_));
  return r < n_ ? r : n_ - 1;
}

double ZipfianGenerator::cdf_tail(double x) const {
  // next() returns floor(n * (eta*u - eta + 1)^alpha) for u in [zeta2/zetan, 1): that is < x
  // exactly when u < ((x/n)^(1/alpha) - 1)/eta + 1.
  double lo = zeta2_ / zetan_;
  double u = (std::pow(x / static_cast<double>(n_), 1.0 / alpha_) - 1.0) / eta_ + 1.0;
  if (u < lo) u = lo;
  if (u > 1.0) u = 1.0;
  return u - lo;
}

double ZipfianGenerator::probability(uint64_t rank) const {
  if (rank >= n_) return 0;
  double p = 0;
  if (rank == 0) p += 1.0 / zetan_;
  if (rank == 1) p += (zeta2_ - 1.0) / zetan_;
  double hi = rank + 1 == n_ ? static_cast<double>(n_) * 2 : static_cast<double>(rank + 1);
  p += cdf_tail(hi) - cdf_tail(static_cast<double>(rank));
  return p;
}

double ZipfianGenerator::ideal_probability(uint64_t rank) const {
  return 1.0 / std::pow(static_cast<double>(rank + 1), theta_) / zetan_;
}

void make_key(uint64_t id, uint32_t key_size, std::string* out) {
  out->assign(key_size, '0');
  char* k = out->data();
  k[0] = 'k';
  for (size_t i = key_size; i > 1 && id; --i, id /= 10) k[i - 1] = static_cast<char>('0' + id % 10);
}

std::string make_key(uint64_t id, uint32_t key_size) {
  std::string k;
  make_key(id, key_size, &k);
  return k;
}

namespace {
// The bytes of (id, version)'s value after its 8-digit version, in order: the single
// definition make_value and check_value share. Each splitmix64 draw gives 8 characters, one
// per byte: its low 6 bits offset to '0' ('0'..'o', printable ASCII without space). Whole
// words, so that the check of every GET, which the load thread pays between an answer and its
// next request, is a few instructions per 8 bytes (docs/results/perf-callgrind-2026-11-27.md).
// Byte order is the host's (make_value and check_value run on the same kind of host).
class ValueTail {
 public:
  ValueTail(uint64_t id, uint32_t version)
      : r_(id * 0x9E3779B97F4A7C15ULL ^ (static_cast<uint64_t>(version) << 32 | version)) {}
  void fill(char* p, size_t n) {
    for (size_t at = 0; at < n; at += 8) {
      const uint64_t w = next_word();
      std::memcpy(p + at, &w, std::min<size_t>(8, n - at));
    }
  }
  // True when the n bytes at p are what fill() writes.
  bool matches(const char* p, size_t n) {
    size_t at = 0;
    for (; at + 8 <= n; at += 8)
      if (bytes::load<uint64_t>(p + at) != next_word()) return false;
    if (at == n) return true;
    const uint64_t w = next_word();
    return std::memcmp(&w, p + at, n - at) == 0;
  }

 private:
  uint64_t next_word() { return (r_.next() & 0x3F3F3F3F3F3F3F3FULL) + 0x3030303030303030ULL; }
  Rng r_;
};

// Hex digit values of make_value's spelling (lowercase), -1 for anything else: a table, as the
// digits are random and branches on them would mispredict on every GET.
constexpr std::array<int8_t, 256> kHexValue = [] {
  std::array<int8_t, 256> t{};
  for (auto& x : t) x = -1;
  for (int i = 0; i < 10; ++i) t['0' + i] = static_cast<int8_t>(i);
  for (int i = 0; i < 6; ++i) t['a' + i] = static_cast<int8_t>(10 + i);
  return t;
}();

// The version a value carries in its first 8 hex digits; false when they are not hex.
bool parse_version(std::string_view value, uint32_t* version) {
  if (value.size() < kMinValueSize) return false;
  uint32_t v = 0;
  int bad = 0;
  for (int i = 0; i < 8; ++i) {
    const int d = kHexValue[static_cast<unsigned char>(value[i])];
    bad |= d;  // negative when any digit is not hex
    v = v << 4 | static_cast<uint32_t>(d & 0xf);
  }
  *version = v;
  return bad >= 0;
}

// After parse_version accepted exactly 8 lowercase hex digits (make_value's own spelling of
// `version`): the rest, generated a word at a time and compared.
bool tail_matches(uint64_t id, uint32_t version, std::string_view value) {
  return ValueTail(id, version).matches(value.data() + 8, value.size() - 8);
}
}  // namespace

void make_value(uint64_t id, uint32_t version, uint32_t value_size, std::string* out) {
  out->resize(value_size);
  char* p = out->data();
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 8; ++i) p[i] = kHex[(version >> (28 - 4 * i)) & 0xf];
  ValueTail(id, version).fill(p + 8, value_size - 8);
}

bool check_value(uint64_t id, uint32_t value_size, std::string_view value) {
  uint32_t version = 0;
  if (!parse_version(value, &version)) return false;
  return value.size() == value_size && tail_matches(id, version, value);
}

uint32_t value_size_for(const WorkloadSpec& w, uint64_t id, uint32_t version) {
  if (w.value_size_max <= w.value_size) return w.value_size;
  uint64_t h = fnv_hash64(id * 0x100000001B3ULL ^ version);
  return w.value_size + static_cast<uint32_t>(h % (w.value_size_max - w.value_size + 1));
}

bool check_value(uint64_t id, const WorkloadSpec& w, std::string_view value) {
  uint32_t version = 0;
  if (!parse_version(value, &version)) return false;
  return value.size() == value_size_for(w, id, version) && tail_matches(id, version, value);
}

std::shared_ptr<const ScrambledZipfian> make_zipf(const WorkloadSpec& spec) {
  if (spec.distribution != Distribution::kZipfian) return nullptr;
  return std::make_shared<const ScrambledZipfian>(spec.keys, spec.zipf_theta);
}

OpStream::OpStream(const WorkloadSpec& spec, std::shared_ptr<const ScrambledZipfian> zipf,
                   uint32_t client)
    : spec_(spec), zipf_(std::move(zipf)), rng_(spec.seed + client), client_(client) {
  if (spec_.distribution == Distribution::kZipfian && !zipf_)
    throw std::invalid_argument("zipfian workload without its generator");
}

uint64_t OpStream::next_key() {
  return spec_.distribution == Distribution::kUniform ? rng_.below(spec_.keys) : zipf_->next(rng_);
}

Op OpStream::next() {
  const uint64_t key = next_key();
  bool read = rng_.next_double() < spec_.read_ratio;
  OpKind kind = read ? OpKind::kGet
                     : (spec_.read_modify_write ? OpKind::kReadModifyWrite : OpKind::kPut);
  return {kind, key};
}

}  // namespace fabkv::bench
