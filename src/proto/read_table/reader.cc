#include "proto/read_table/reader.h"

#include <ctime>

namespace fabkv::read_table {

nlohmann::json ReaderCounters::to_json() const {
  return {{"gets", gets},
          {"hits", hits},
          {"header_reads", header_reads},
          {"clock_reads", clock_reads},
          {"expired", expired},
          {"reprobes", reprobes},
          {"layout_refreshes", layout_refreshes},
          {"read_errors", read_errors},
          {"gave_up", gave_up}};
}

uint32_t local_seconds(int64_t skew_s) {
  const int64_t t = static_cast<int64_t>(std::time(nullptr)) + skew_s;
  return static_cast<uint32_t>(std::clamp<int64_t>(t, 0, UINT32_MAX));
}

}  // namespace fabkv::read_table
