// The workload generator against theory: Zipfian frequencies (chi-square against the exact
// distribution of YCSB's algorithm, rank-frequency against ideal Zipf), uniform is uniform,
// scrambling preserves the distribution over keys, same seed gives the same sequence.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <map>

#include "bench/workload.h"

using namespace fabkv::bench;

namespace {

// Pearson's chi-square of observed counts against probabilities (bins with p > 0).
double chi_square(const std::vector<uint64_t>& observed, const std::vector<double>& p, uint64_t n) {
  double chi = 0;
  for (size_t i = 0; i < observed.size(); ++i) {
    if (p[i] <= 0) continue;
    double e = p[i] * static_cast<double>(n);
    double d = static_cast<double>(observed[i]) - e;
    chi += d * d / e;
  }
  return chi;
}

// Upper critical value of chi-square with `df` degrees of freedom at p ~= 0.0005 (Wilson-
// Hilferty approximation, z = 3.3).
double chi_critical(double df) {
  double z = 3.3, a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

}  // namespace

TEST(Zipfian, ProbabilitiesSumToOne) {
  ZipfianGenerator z(1000, 0.99);
  double s = 0, ideal = 0;
  for (uint64_t r = 0; r < 1000; ++r) s += z.probability(r), ideal += z.ideal_probability(r);
  EXPECT_NEAR(s, 1.0, 1e-9);
  EXPECT_NEAR(ideal, 1.0, 1e-9);
}

TEST(Zipfian, RankFrequenciesMatchYcsbAlgorithmChiSquare) {
  const uint64_t n = 1000, samples = 2'000'000;
  ZipfianGenerator z(n, 0.99);
  Rng rng(42);
  std::vector<uint64_t> counts(n, 0);
  for (uint64_t i = 0; i < samples; ++i) counts[z.next(rng)]++;
  std::vector<double> p(n);
  for (uint64_t r = 0; r < n; ++r) p[r] = z.probability(r);
  double chi = chi_square(counts, p, samples);
  EXPECT_LT(chi, chi_critical(n - 1)) << "rank frequencies do not follow the generator's law";
  // The same samples against a law they do not follow must be rejected: the test has power.
  std::vector<double> uniform(n, 1.0 / n);
  EXPECT_GT(chi_square(counts, uniform, samples), 100 * chi_critical(n - 1));
}

TEST(Zipfian, RankFrequencyFollowsIdealZipf) {
  const uint64_t n = 1000, samples = 2'000'000;
  const double theta = 0.99;
  ZipfianGenerator z(n, theta);
  Rng rng(7);
  std::vector<uint64_t> counts(n, 0);
  for (uint64_t i = 0; i < samples; ++i) counts[z.next(rng)]++;
  // Ranks 0 and 1 are exact in YCSB's method.
  for (uint64_t r : {0, 1}) {
    double f = static_cast<double>(counts[r]) / samples;
    EXPECT_NEAR(f / z.ideal_probability(r), 1.0, 0.02) << "rank " << r;
  }
  // Beyond: Gray's approximation, within 20% of the ideal at every rank checked.
  for (uint64_t r : {2, 3, 5, 10, 50, 100, 500}) {
    double f = static_cast<double>(counts[r]) / samples;
    EXPECT_NEAR(f / z.ideal_probability(r), 1.0, 0.2) << "rank " << r;
  }
  // The log-log slope over ranks 10..999 is -theta.
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int m = 0;
  for (uint64_t r = 10; r < n; ++r) {
    if (!counts[r]) continue;
    double x = std::log(static_cast<double>(r + 1)), y = std::log(static_cast<double>(counts[r]));
    sx += x, sy += y, sxx += x * x, sxy += x * y, ++m;
  }
  double slope = (m * sxy - sx * sy) / (m * sxx - sx * sx);
  EXPECT_NEAR(slope, -theta, 0.08);
}

TEST(Zipfian, ScrambledKeysCarryTheRankDistribution) {
  const uint64_t n = 1000, samples = 1'000'000;
  ScrambledZipfian z(n, 0.99);
  std::vector<double> p(n, 0.0);
  for (uint64_t r = 0; r < n; ++r) p[fnv_hash64(r) % n] += z.ranks().probability(r);
  Rng rng(99);
  std::vector<uint64_t> counts(n, 0);
  for (uint64_t i = 0; i < samples; ++i) counts[z.next(rng)]++;
  size_t bins = 0;
  for (uint64_t k = 0; k < n; ++k) {
    if (p[k] > 0) ++bins;
    else EXPECT_EQ(counts[k], 0u) << "key " << k << " is no rank's image";
  }
  EXPECT_LT(chi_square(counts, p, samples), chi_critical(static_cast<double>(bins - 1)));
  // Hot keys are spread: the hottest key is not key 0 and the top 10 are not adjacent.
  uint64_t hottest = std::max_element(counts.begin(), counts.end()) - counts.begin();
  EXPECT_EQ(hottest, fnv_hash64(0) % n);
}

TEST(Uniform, IsUniformChiSquare) {
  WorkloadSpec w;
  w.keys = 1000;
  w.read_ratio = 1.0;
  OpStream s(w, nullptr, 0);
  const uint64_t samples = 1'000'000;
  std::vector<uint64_t> counts(w.keys, 0);
  for (uint64_t i = 0; i < samples; ++i) counts[s.next().key]++;
  std::vector<double> p(w.keys, 1.0 / w.keys);
  EXPECT_LT(chi_square(counts, p, samples), chi_critical(w.keys - 1));
}

TEST(OpStream, SameSeedSameSequenceOtherClientOtherSequence) {
  WorkloadSpec w;
  w.keys = 100000;
  w.distribution = Distribution::kZipfian;
  auto z = make_zipf(w);
  OpStream a(w, z, 3), b(w, z, 3), c(w, z, 4);
  int differ = 0;
  for (int i = 0; i < 10000; ++i) {
    Op x = a.next(), y = b.next(), o = c.next();
    ASSERT_EQ(x.key, y.key);
    ASSERT_EQ(x.kind, y.kind);
    differ += x.key != o.key;
  }
  EXPECT_GT(differ, 9000);
  w.seed += 1;
  OpStream d(w, z, 3), e(w, z, 3);
  int same = 0;
  for (int i = 0; i < 1000; ++i) same += d.next().key == a.next().key;
  (void)e;
  EXPECT_LT(same, 200);
}

TEST(OpStream, ReadRatioAndCoreWorkloads) {
  for (const char* name : {"A", "B", "C", "F"}) {
    WorkloadSpec w;
    apply_core_workload(name, &w);
    OpStream s(w, nullptr, 0);
    std::map<OpKind, int> kinds;
    const int n = 200000;
    for (int i = 0; i < n; ++i) kinds[s.next().kind]++;
    EXPECT_NEAR(static_cast<double>(kinds[OpKind::kGet]) / n, w.read_ratio, 0.005) << name;
    if (std::string(name) == "F") EXPECT_GT(kinds[OpKind::kReadModifyWrite], n / 3);
    else EXPECT_EQ(kinds[OpKind::kReadModifyWrite], 0);
  }
  WorkloadSpec w;
  EXPECT_THROW(apply_core_workload("D", &w), std::invalid_argument);
  EXPECT_THROW(apply_core_workload("Q", &w), std::invalid_argument);
}

TEST(Workload, ValidateRejectsImpossibleParameters) {
  WorkloadSpec w;
  EXPECT_NO_THROW(validate(w));
  auto bad = [](auto f) {
    WorkloadSpec x;
    f(x);
    EXPECT_THROW(validate(x), std::invalid_argument);
  };
  bad([](WorkloadSpec& x) { x.read_ratio = 1.2; });
  bad([](WorkloadSpec& x) { x.read_ratio = -0.1; });
  bad([](WorkloadSpec& x) { x.keys = 0; });
  bad([](WorkloadSpec& x) { x.fill = 0; });
  bad([](WorkloadSpec& x) { x.value_size = 4; });
  bad([](WorkloadSpec& x) { x.key_size = 4; });  // cannot hold 100000 keys
  bad([](WorkloadSpec& x) { x.distribution = Distribution::kZipfian, x.zipf_theta = 1.0; });
}

TEST(Workload, KeysAndValuesAreDeterministicAndChecked) {
  EXPECT_EQ(make_key(42, 16), "k000000000000042");
  EXPECT_EQ(make_key(0, 4), "k000");
  std::string v, v2;
  make_value(42, 7, 32, &v);
  make_value(42, 7, 32, &v2);
  EXPECT_EQ(v, v2);
  EXPECT_EQ(v.size(), 32u);
  EXPECT_EQ(v.substr(0, 8), "00000007");
  EXPECT_TRUE(check_value(42, 32, v));
  EXPECT_FALSE(check_value(43, 32, v)) << "another key's value must not pass";
  EXPECT_FALSE(check_value(42, 32, v.substr(0, 31))) << "a truncated value";
  // Every byte is checked, in whole words and in a last partial one (35: 8 + 3 x 8 + 3).
  for (uint32_t size : {32u, 35u}) {
    make_value(42, 7, size, &v);
    ASSERT_TRUE(check_value(42, size, v)) << size;
    for (size_t i = 0; i < v.size(); ++i) {
      EXPECT_TRUE(std::isgraph(static_cast<unsigned char>(v[i]))) << "printable, no space: " << i;
      std::string bad = v;
      bad[i] = bad[i] == 'a' ? 'b' : 'a';
      EXPECT_FALSE(check_value(42, size, bad)) << "size " << size << ", byte " << i;
    }
  }
}

namespace fabkv::bench {
namespace {

TEST(ValueSizes, ADistributionIsUniformInItsRangeAndRecomputableByReaders) {
  WorkloadSpec w;
  w.value_size = 16;
  w.value_size_max = 47;  // 32 possible sizes
  std::vector<int> seen(48, 0);
  for (uint64_t id = 0; id < 32000; ++id) {
    uint32_t version = static_cast<uint32_t>(id % 5);
    uint32_t n = value_size_for(w, id, version);
    ASSERT_GE(n, 16u);
    ASSERT_LE(n, 47u);
    seen[n]++;
    std::string v;
    make_value(id, version, n, &v);
    ASSERT_TRUE(check_value(id, w, v)) << "a reader recomputes the size from the version";
    ASSERT_FALSE(check_value(id + 1, w, v));
  }
  for (uint32_t n = 16; n <= 47; ++n) EXPECT_NEAR(seen[n], 1000, 200) << "size " << n;
  // Fixed sizes are unchanged by the distribution machinery.
  WorkloadSpec fixed;
  fixed.value_size = 32;
  EXPECT_EQ(value_size_for(fixed, 7, 3), 32u);
  w.value_size_max = 8;
  EXPECT_THROW(validate(w), std::invalid_argument);
}

}  // namespace
}  // namespace fabkv::bench
