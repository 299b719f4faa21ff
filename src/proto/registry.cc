#include "proto/registry.h"

namespace fabkv::proto {

std::string names(std::string_view sep) {
  std::string s;
  for (const Info& p : kProtocols) {
    if (!s.empty()) s += sep;
    s += p.name;
  }
  return s;
}

}  // namespace fabkv::proto
