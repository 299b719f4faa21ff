// RF-RPC's part of the handshake layout (proto/handshake.h), next to the RPC keys and the
// answer ring's (rpc/handshake.h): the result slots' wire version, how clients fetch results
// (F, R, the mode: options.h) and the batching knobs. The regions are in the Welcome
// ("rfrpc.results.<w>", "rfrpc.modes.<w>", and the batch regions: client_batch.h).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace fabkv::rfrpc {

struct RfrpcLayout {
  uint32_t rfrpc_wire = 0;     // wire.h's kWireVersion
  uint32_t fetch_size = 0;     // F: bytes of the first READ of a result
  uint32_t retries = 0;        // R: READs before the worker is asked to reply instead
  std::string mode;            // "hybrid", "fetch" or "reply"
  uint32_t batch_entries = 0;  // 0: no batching (client_batch.h)
  uint32_t batch_bytes = 2048;
  uint32_t batch_timeout_us = 100;
  uint32_t batch_llimit_us = 0;
  uint32_t batch_alpha_pct = 5;
};
inline void to_json(nlohmann::json& j, const RfrpcLayout& l) {
  j = {{"rfrpc_wire", l.rfrpc_wire},
       {"fetch_size", l.fetch_size},
       {"retries", l.retries},
       {"mode", l.mode},
       {"batch_entries", l.batch_entries},
       {"batch_bytes", l.batch_bytes},
       {"batch_timeout_us", l.batch_timeout_us},
       {"batch_llimit_us", l.batch_llimit_us},
       {"batch_alpha_pct", l.batch_alpha_pct}};
}
// The batch keys are absent from servers before batching: the defaults above (no batching).
inline void from_json(const nlohmann::json& j, RfrpcLayout& l) {
  j.at("rfrpc_wire").get_to(l.rfrpc_wire);
  j.at("fetch_size").get_to(l.fetch_size);
  j.at("retries").get_to(l.retries);
  j.at("mode").get_to(l.mode);
  l.batch_entries = j.value("batch_entries", 0u);
  l.batch_bytes = j.value("batch_bytes", 2048u);
  l.batch_timeout_us = j.value("batch_timeout_us", 100u);
  l.batch_llimit_us = j.value("batch_llimit_us", 0u);
  l.batch_alpha_pct = j.value("batch_alpha_pct", 5u);
}

}  // namespace fabkv::rfrpc
