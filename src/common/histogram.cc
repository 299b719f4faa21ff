#include "common/histogram.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace fabkv {

void LatencyHistogram::merge(const LatencyHistogram& o) {
  for (int i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
  count_ += o.count_;
  sum_ += o.sum_;
  max_ = std::max(max_, o.max_);
  min_ = std::min(min_, o.min_);
}

uint64_t LatencyHistogram::quantile_ns(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(count_ - 1)) + 1;
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += counts_[i];
    if (seen >= rank) return std::min(upper_edge(i), max_);
  }
  return max_;
}

nlohmann::json LatencyHistogram::to_json() const {
  nlohmann::json buckets = nlohmann::json::array();
  for (int i = 0; i < kBuckets; ++i)
    if (counts_[i] != 0) buckets.push_back({i, counts_[i]});
  return {{"count", count_}, {"sum", sum_}, {"min", min_ns()}, {"max", max_}, {"b", buckets}};
}

LatencyHistogram LatencyHistogram::from_json(const nlohmann::json& j) {
  LatencyHistogram h;
  h.count_ = j.at("count").get<uint64_t>();
  h.sum_ = j.at("sum").get<uint64_t>();
  h.max_ = j.at("max").get<uint64_t>();
  h.min_ = h.count_ ? j.at("min").get<uint64_t>() : ~uint64_t{0};
  for (const auto& b : j.at("b")) {
    int idx = b.at(0).get<int>();
    if (idx >= 0 && idx < kBuckets) h.counts_[idx] = b.at(1).get<uint64_t>();
  }
  return h;
}

}  // namespace fabkv
