// Lands the bytes of a message into a slot in a random order, a few at a time: the landing
// hook of rpc::read_request and server_reply::read_answer (src/proto/rpc/wire.h), so that a
// test can land bytes between the reader's loads, as a WRITE landing by cross-memory attach
// or by a NIC may.
#pragma once

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <random>
#include <vector>

namespace fabkv::testing {

class Landing {
 public:
  Landing(std::mt19937_64& rng, const std::vector<char>& bytes, char* slot)
      : rng_(rng), bytes_(bytes), slot_(slot), order_(bytes.size()) {
    std::iota(order_.begin(), order_.end(), size_t{0});
    std::shuffle(order_.begin(), order_.end(), rng_);
  }
  // Between two of the reader's loads: 0 to 3 bytes land.
  void operator()() {
    for (size_t k = rng_() % 4; k > 0; --k) land_one();
  }
  void land_one() {
    if (next_ < order_.size()) slot_[order_[next_]] = bytes_[order_[next_]], ++next_;
  }
  bool done() const { return next_ == order_.size(); }

 private:
  std::mt19937_64& rng_;
  const std::vector<char>& bytes_;
  char* slot_;
  std::vector<size_t> order_;
  size_t next_ = 0;
};

}  // namespace fabkv::testing
