#include "proto/farm/reader.h"

#include <algorithm>

namespace fabkv::farm {

namespace {
constexpr size_t kAlign = 64;
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
}  // namespace

nlohmann::json FarmCounters::to_json() const {
  const double g = gets ? static_cast<double>(gets) : 1.0;
  nlohmann::json j = ReaderCounters::to_json();
  j.update(
      {{"neighbourhood_reads", neighbourhood_reads},
       {"record_reads", record_reads},
       {"torn_buckets", torn_buckets},
       {"torn_records", torn_records},
       {"reads_per_get",
        static_cast<double>(neighbourhood_reads + record_reads + header_reads + clock_reads) / g},
       {"retries_per_get", static_cast<double>(torn_buckets + torn_records + reprobes) / g}});
  return j;
}

// kNeighbourhood: the H buckets; kRecord: the record of `bucket`; kHeader: moves/state/clock to
// confirm a miss; kClock: the same 16 bytes to judge the found item's expire_at.
enum class FarmStep : uint8_t { kNeighbourhood, kRecord, kHeader, kClock };

struct FarmOp : read_table::GetOp<1> {
  KeyHome kh{};
  Bucket bucket{};    // the candidate: its views point into this op's neighbourhood copy
  uint32_t skip = 0;  // indirect candidates whose record held another key
  FarmStep step = FarmStep::kNeighbourhood;
  // kClock: the answer waiting for the server's clock.
  std::string_view value;
  uint64_t version = 0;
  uint32_t expire_at = 0;
};

FarmReader::FarmReader(proto::ClientHost& host, const Options& o, std::vector<FarmMap> maps,
                       Refresh refresh)
    : Reader(host, o, std::move(maps), std::move(refresh)) {
  size_t bucket_bytes = 0;
  for (const FarmMap& m : maps_) bucket_bytes = std::max(bucket_bytes, m.bucket_bytes);
  nb_bytes_ = round_up(neighbourhood_bytes(bucket_bytes), kAlign);
  // [neighbourhood][header word, 64][record]
  allocate(round_up(nb_bytes_ + kAlign + std::max<size_t>(o_.max_record, 16), kAlign));
}

FarmReader::~FarmReader() = default;

// (Re)starts the GET with the current map of the key's worker.
void FarmReader::begin(FarmOp& op) {
  op.kh = key_home(op.key, maps_[op.worker].homes);
  op.skip = 0;
  read_neighbourhood(op);
}

void FarmReader::read_neighbourhood(FarmOp& op) {
  const FarmMap& m = maps_[op.worker];
  op.step = FarmStep::kNeighbourhood;
  counters_.neighbourhood_reads++;
  // HERD sec. 5.1.2: one READ of 6 x bucket bytes from the home bucket on.
  post(op, 0, 0, m.table.at(bucket_offset(op.kh.home, m.bucket_bytes)),
       neighbourhood_bytes(m.bucket_bytes), m.table.key);
}

void FarmReader::read_header(FarmOp& op, FarmStep step) {
  const FarmMap& m = maps_[op.worker];
  op.step = step;
  (step == FarmStep::kHeader ? counters_.header_reads : counters_.clock_reads)++;
  post(op, 0, nb_bytes_, m.table.at(kMovesOffset), 16, m.table.key);
}

size_t FarmReader::search(FarmOp& op) {
  const FarmMap& m = maps_[op.worker];
  switch (search_neighbourhood(copy(op, 0), m.bucket_bytes, op.key, op.kh.tag, &op.bucket,
                               op.skip)) {
    case Search::kInline:
      return answer(op, op.bucket.value, op.bucket.header.version, op.bucket.header.expire_at);
    case Search::kIndirect: {
      const Pointer& p = op.bucket.pointer;
      if (nb_bytes_ + kAlign + p.record_bytes > slot_bytes_ || p.extent_offset > m.extents.length ||
          p.record_bytes > m.extents.length - p.extent_offset) {
        // A sealed bucket that cannot be right for this layout: READ again.
        if (size_t ran = retry(op, &counters_.torn_buckets)) return ran;
        read_neighbourhood(op);
        return 0;
      }
      op.step = FarmStep::kRecord;
      counters_.record_reads++;
      post(op, 0, nb_bytes_ + kAlign, m.extents.at(p.extent_offset), p.record_bytes, m.extents.key);
      return 0;
    }
    case Search::kTorn:
      // The worker was writing a bucket of this neighbourhood: READ it again.
      if (size_t ran = retry(op, &counters_.torn_buckets)) return ran;
      read_neighbourhood(op);
      return 0;
    case Search::kRetired: return restart_after_refresh(op);
    case Search::kMiss: read_header(op, FarmStep::kHeader); return 0;
  }
  return 0;
}

size_t FarmReader::answer(FarmOp& op, std::string_view value, uint64_t version,
                          uint32_t expire_at) {
  if (expire_at == 0) return finish(op, Status::kOk, value, version);
  // Judged by the server's clock: READ it (the value stays where it is meanwhile).
  op.value = value;
  op.version = version;
  op.expire_at = expire_at;
  read_header(op, FarmStep::kClock);
  return 0;
}

size_t FarmReader::advance(FarmOp& op) {
  switch (op.step) {
    case FarmStep::kNeighbourhood: search(op); break;
    case FarmStep::kRecord: {
      std::string_view k, v;
      if (!check_record(op.bucket, copy(op, nb_bytes_ + kAlign), op.bucket.pointer.record_bytes, &k,
                        &v)) {
        // The record was freed and reused under us: READ the neighbourhood again.
        if (retry(op, &counters_.torn_records) == 0) start(op);
        break;
      }
      if (k != op.key) {
        // Same tag and length, another key: the next candidate of the same copy.
        op.skip++;
        search(op);
        break;
      }
      answer(op, v, op.bucket.header.version, op.bucket.header.expire_at);
      break;
    }
    case FarmStep::kHeader: {
      const HeaderWord w = load_header_word(copy(op, nb_bytes_));
      if (w.state == kStateRetired) {
        restart_after_refresh(op);
        break;
      }
      return confirm_miss(op, w.moves);
    }
    case FarmStep::kClock: {
      const HeaderWord w = load_header_word(copy(op, nb_bytes_));
      if (w.state == kStateRetired) {
        restart_after_refresh(op);
        break;
      }
      if (expired(op.expire_at, w.clock != 0 ? w.clock : read_table::local_seconds())) {
        counters_.expired++;
        return finish(op, Status::kNotFound);
      }
      return finish(op, Status::kOk, op.value, op.version);
    }
  }
  return 0;
}

}  // namespace fabkv::farm

namespace fabkv {
template class read_table::Reader<farm::FarmMap, farm::FarmOp, farm::FarmCounters>;
}  // namespace fabkv
