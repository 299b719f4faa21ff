// seq-atomic's part of the handshake layout (proto/handshake.h): clients FETCH_ADD worker 0's
// counter ("seq-atomic.counter" in the Welcome's regions) with up to `window` in flight.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

namespace fabkv::seq_atomic {

struct SeqAtomicLayout {
  uint32_t window = 0;  // --window
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(SeqAtomicLayout, window)

}  // namespace fabkv::seq_atomic
