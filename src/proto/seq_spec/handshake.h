// seq-spec's part of the handshake layout (proto/handshake.h), next to the session's keys: its
// requests are header-only messages (no RPC slots), so only the window, the endpoints per
// worker and the client's first guess.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

namespace fabkv::seq_spec {

struct SeqSpecLayout {
  uint32_t window = 0;  // requests in flight per client (--window)
  uint32_t queues = 1;  // endpoints per worker (fabric addresses: workers x queues)
  uint32_t high = 0;    // the high 32 bits of the next value when the client was admitted
};
inline void to_json(nlohmann::json& j, const SeqSpecLayout& l) {
  j = {{"window", l.window}, {"queues", l.queues}, {"high", l.high}};
}
// "queues" and "high" may be absent (servers before them): one queue, a first guess of 0.
inline void from_json(const nlohmann::json& j, SeqSpecLayout& l) {
  j.at("window").get_to(l.window);
  l.queues = j.value("queues", 1u);
  l.high = j.value("high", 0u);
}

}  // namespace fabkv::seq_spec
