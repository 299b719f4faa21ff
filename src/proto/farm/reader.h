// FarmReader: the client half of FaRM-KV's GET (HERD sec. 5.1.2; survey sec. 3.4): one READ of
// the key's H = 6 buckets, then, for an item kept out of line (farm-var, or an item larger than
// the inline room), one READ of its record, without the server's CPU. The rules are in
// proto/farm/layout.h (bottom); this class runs them as a state machine per GET so that up to
// `ops` GETs are in flight at once, each with one READ outstanding.
//
// Every READ lands in the op's own slice of a local buffer and is judged only after its
// completion, on that copy (search_neighbourhood, check_record): nothing is read twice.
//
// Expiry: an item with expire_at is judged by the worker's clock (TableHeader.clock, one more
// 16-byte READ per GET of such an item; items without expiry never pay it).
//
// The pool of GETs, the stale-generation retry and the miss confirmation are every READ
// table's (proto/read_table/reader.h). Owned by the farm client (proto/farm/client.cc).
#pragma once

#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "proto/farm/layout.h"
#include "proto/read_table/reader.h"

namespace fabkv::farm {

// Where one worker's farm engine is, as the server's layout says.
struct FarmMap : read_table::TableMap {
  uint64_t homes = 0;
  size_t bucket_bytes = 0;
};

struct FarmCounters : read_table::ReaderCounters {
  uint64_t neighbourhood_reads = 0;  // READs of H buckets (one range each: no wrap-around)
  uint64_t record_reads = 0;         // READs of an out-of-line record
  uint64_t torn_buckets = 0;         // a neighbourhood with a torn bucket and no match: READ again
  uint64_t torn_records = 0;         // a record that failed its check: neighbourhood again
  nlohmann::json to_json() const;
};

struct FarmOp;  // one GET (reader.cc)
enum class FarmStep : uint8_t;

class FarmReader final : public read_table::Reader<FarmMap, FarmOp, FarmCounters> {
 public:
  using Options = read_table::ReaderOptions;

  FarmReader(proto::ClientHost& host, const Options& o, std::vector<FarmMap> maps, Refresh refresh);
  ~FarmReader() override;

 private:
  void begin(FarmOp& op) override;
  size_t advance(FarmOp& op) override;
  void read_neighbourhood(FarmOp& op);
  void read_header(FarmOp& op, FarmStep step);
  // Looks at the neighbourhood copy and goes on (READ a record, the header, or finish).
  size_t search(FarmOp& op);
  size_t answer(FarmOp& op, std::string_view value, uint64_t version, uint32_t expire_at);

  size_t nb_bytes_ = 0;
};

}  // namespace fabkv::farm

namespace fabkv {
extern template class read_table::Reader<farm::FarmMap, farm::FarmOp, farm::FarmCounters>;
}  // namespace fabkv
