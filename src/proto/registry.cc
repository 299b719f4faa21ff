#include "proto/registry.h"

#include <algorithm>

#include "store/engine.h"

namespace fabkv::proto {

std::string names(std::string_view sep) {
  std::string s;
  for (const Info& p : kProtocols) {
    if (!s.empty()) s += sep;
    s += p.name;
  }
  return s;
}

std::vector<std::string> engine_names() {
  std::vector<std::string> out = {store::to_string(store::EngineKind::kCache),
                                  store::to_string(store::EngineKind::kStore)};
  for (const Info& p : kProtocols) {
    if (p.engine == EngineNeed::kAny || p.engine == EngineNeed::kNone) continue;
    if (std::find(out.begin(), out.end(), p.engine) == out.end()) out.emplace_back(p.engine);
  }
  out.emplace_back(EngineNeed::kNone);
  return out;
}

}  // namespace fabkv::proto
