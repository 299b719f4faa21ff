// LatencyHistogram: fixed-size log-linear buckets (64 sub-buckets per power of two, so any
// recorded value is reported within 1.6%), cheap to record on the data path and mergeable
// across clients and processes (JSON round trip).
#pragma once

#include <array>
#include <bit>
#include <cstdint>

#include <nlohmann/json_fwd.hpp>

namespace fabkv {

class LatencyHistogram {
 public:
  static constexpr int kSubBits = 6;  // 64 sub-buckets per octave
  static constexpr int kSub = 1 << kSubBits;
  static constexpr int kBuckets = (64 - kSubBits + 1) * kSub;

  void record(uint64_t ns) {
    counts_[index_of(ns)]++;
    count_++;
    sum_ += ns;
    if (ns > max_) max_ = ns;
    if (ns < min_) min_ = ns;
  }
  void merge(const LatencyHistogram& o);
  void clear() { *this = LatencyHistogram(); }

  uint64_t count() const { return count_; }
  double mean_ns() const { return count_ ? static_cast<double>(sum_) / count_ : 0.0; }
  uint64_t max_ns() const { return count_ ? max_ : 0; }
  uint64_t min_ns() const { return count_ ? min_ : 0; }
  // The value at quantile q in [0, 1] (upper edge of its bucket, capped at the max seen).
  uint64_t quantile_ns(double q) const;

  nlohmann::json to_json() const;  // sparse: {"count","sum","min","max","b":[[idx,n],...]}
  static LatencyHistogram from_json(const nlohmann::json& j);

  static int index_of(uint64_t v) {
    if (v < kSub) return static_cast<int>(v);
    int shift = 63 - std::countl_zero(v) - kSubBits;  // v >> shift lies in [64, 128)
    return (shift + 1) * kSub + static_cast<int>((v >> shift) - kSub);
  }
  static uint64_t upper_edge(int idx) {
    int octave = idx / kSub;
    uint64_t sub = static_cast<uint64_t>(idx % kSub);
    if (octave == 0) return sub;
    return ((kSub + sub + 1) << (octave - 1)) - 1;
  }

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0, sum_ = 0, max_ = 0, min_ = ~uint64_t{0};
};

}  // namespace fabkv
