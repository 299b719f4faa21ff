// Key listings (docs/memcached.md, "Listing keys"): memcached's `lru_crawler metadump` and the
// `stats cachedump <class> <limit>` that libmemcached's memcdump sends. fabkv has no slab
// classes: every item is in class 1.
//
// Bounded work. A listing is a chain of pieces (shard.h, Dump), each an Op that goes to one
// partition's owner like a forwarded command and scans at most kDumpBuckets index buckets there
// (store::Engine::scan), changing nothing, and stops early once it has kDumpPieceBytes of lines.
// When a piece comes back, the next one (the same partition further on, or the next partition)
// is queued behind it in the connection's answers, and sent to its owner only while the
// connection has room for answers (shard.h has_room): a listing nobody reads stops, holding at
// most one piece. A connection runs one listing at a time (its later commands wait), and the
// server one lru_crawler metadump (another gets memcached's BUSY). So a worker never spends
// more than one piece on a listing per round, whatever the store's size, and the connection's
// answers stay in order.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>

#include <fmt/format.h>

#include "memcached/shard.h"
#include "store/layout.h"

namespace fabkv::memcached {

namespace {

// Index buckets per piece: 4096 cache buckets hold at most 32768 entries (store: 28672 and
// their overflow chains), well under a millisecond of scanning.
constexpr uint64_t kDumpBuckets = 4096;
// A piece's lines stop growing past this (a bucket's lines more at most: the cache's 8 items,
// or a store bucket and its overflow chain).
constexpr size_t kDumpPieceBytes = size_t{64} << 10;
constexpr uint64_t kDumpStepBuckets = 64;

// memcached's uriencode: letters, digits and "-._~" as they are, every other byte %XX.
void append_uriencoded(std::string* out, std::string_view key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (unsigned char ch : key) {
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
        ch == '-' || ch == '.' || ch == '_' || ch == '~') {
      out->push_back(static_cast<char>(ch));
    } else {
      out->push_back('%');
      out->push_back(kHex[ch >> 4]);
      out->push_back(kHex[ch & 15]);
    }
  }
}

// One item as metadump shows it. fabkv keeps no access time and no fetched bit: la=0 and
// fetch=no (docs/memcached.md); size is the item's bytes in the engine (header, key, value).
void append_meta_line(std::string* out, const store::ScanItem& it) {
  out->append("key=");
  append_uriencoded(out, it.key);
  if (it.expire_at == 0) out->append(" exp=-1");
  else fmt::format_to(std::back_inserter(*out), " exp={}", it.expire_at);
  fmt::format_to(std::back_inserter(*out), " la=0 cas={} fetch=no cls=1 size={}\r\n", it.version,
                 store::layout::kItemHeaderSize + it.key.size() + it.value_size);
}

// One item as cachedump shows it: the value's bytes and the absolute expiry (0: never).
void append_cachedump_line(std::string* out, const store::ScanItem& it) {
  fmt::format_to(std::back_inserter(*out), "ITEM {} [{} b; {} s]\r\n", it.key, it.value_size,
                 it.expire_at);
}

bool parse_u64(std::string_view s, uint64_t* v) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size();
}

// Does metadump's class list ("all", "hash", or ids "1,2,3") name class 1? nullopt: a bad list.
std::optional<bool> names_class_one(std::string_view list) {
  if (list == "all" || list == "hash") return true;
  bool one = false;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    uint64_t id = 0;
    if (!parse_u64(list.substr(0, comma), &id) || id == 0 || id > 63) return std::nullopt;
    one = one || id == 1;
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  return one;
}

}  // namespace

// lru_crawler metadump <classes>: one line per item of class 1, then END. The crawler's other
// subcommands tune memcached's background crawler, which fabkv does not have.
bool Connections::lru_crawler(Conn& c, std::span<const std::string_view> args) {
  if (args.size() != 2 || args[0] != "metadump") {
    if (!args.empty() && args[0] != "metadump")
      return refuse(c, "CLIENT_ERROR lru_crawler: only metadump is supported\r\n");
    return refuse(c, "ERROR\r\n");
  }
  const std::optional<bool> one = names_class_one(args[1]);
  if (!one) return refuse(c, "BADCLASS invalid class id\r\n");
  if (!*one) {
    emit(c, "END\r\n");
    return true;
  }
  if (!svc_.start_metadump()) {
    emit(c, "BUSY currently processing crawler request\r\n");  // memcached's answer
    return true;
  }
  c.metadump = true;
  start_dump(c, true, UINT64_MAX);
  return true;
}

// stats cachedump <class> <limit>: up to `limit` items of the class (0: all), then END.
// memcdump asks for classes 0 to 199 in turn; every class but 1 is empty, and ids from 64 on
// are refused as memcached refuses them.
bool Connections::cachedump(Conn& c, std::span<const std::string_view> args) {
  uint64_t id = 0, limit = 0;
  // memcached 1.6's answers (proto_text.c, "cachedump"); it has 64 class ids.
  if (args.size() < 3) return refuse(c, "CLIENT_ERROR bad command line\r\n");
  if (!parse_u64(args[1], &id) || !parse_u64(args[2], &limit))
    return refuse(c, "CLIENT_ERROR bad command line format\r\n");
  if (id >= 64) return refuse(c, "CLIENT_ERROR Illegal slab id\r\n");
  if (id != 1) {
    emit(c, "END\r\n");
    return true;
  }
  start_dump(c, false, limit == 0 ? UINT64_MAX : limit);
  return true;
}

void Connections::start_dump(Conn& c, bool meta, uint64_t limit) {
  Dump d;
  d.active = true;
  d.meta = meta;
  d.left = limit;
  c.listing = true;
  queue_dump(c, d, c.pending.end());
}

// Queues the piece `d` before `at` in the connection's answers, and sends it to its owner if
// the connection has room for its lines; else it waits there (Conn::parked, listener.cc
// flush_out sends it).
void Connections::queue_dump(Conn& c, const Dump& d, std::deque<Op*>::iterator at) {
  Op* op = new Op;
  op->dump = d;
  op->origin = s_.index;
  op->owner = d.partition;
  op->fd = c.fd;
  op->conn_id = c.id;
  op->in_pending = true;
  c.pending.insert(at, op);
  if (has_room(c)) s_.outbox[d.partition].push_back(op);
  else c.parked = op;
}

// The owner's part: scan one piece of its partition into the Op's answer.
void Connections::run_dump_st(Op& op) {
  Dump& d = op.dump;
  std::string& out = op.res_value;
  auto line = [&](const store::ScanItem& it) {
    if (d.left == 0) return;
    --d.left;
    if (d.meta) append_meta_line(&out, it);
    else append_cachedump_line(&out, it);
  };
  uint64_t next = d.cursor;
  for (uint64_t scanned = 0; scanned < kDumpBuckets && out.size() < kDumpPieceBytes;
       scanned += kDumpStepBuckets) {
    next = w_.engine().scan(next, kDumpStepBuckets, line);
    if (next == 0) break;
  }
  d.cursor = next;
  if (next == 0) ++d.partition;
  d.finished = d.left == 0 || (next == 0 && d.partition == workers_.size());
  if (d.finished) out.append("END\r\n");
  op.ready = true;
  op.done = true;
}

// A piece came home: queue the next one right behind it, unless it was the last.
void Connections::continue_dump(Conn& c, Op* op) {
  if (op->dump.finished) {
    c.listing = false;  // the commands after it go on (update_events resumes them)
    if (c.metadump) svc_.end_metadump();
    c.metadump = false;
    return;
  }
  auto at = std::find(c.pending.begin(), c.pending.end(), op);
  if (at == c.pending.end()) return;
  Dump next = op->dump;
  queue_dump(c, next, at + 1);
}

}  // namespace fabkv::memcached
