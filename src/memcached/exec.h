// The memcached commands on one partition's engine. A connection's worker turns a command into
// a Request per key; the partition's owner runs it here (EREW: no other thread touches the
// engine) and hands back a Result that the connection's worker formats as text, meta or binary
// (src/memcached/reply.h). Read-modify-write commands (add, replace, append, prepend, cas,
// incr, decr, touch) are a get and a put on the owner thread, so nothing runs between them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "store/engine.h"

namespace fabkv::memcached {

enum class Kind : uint8_t {
  kGet,  // get, gets, mg, binary GET*
  kGat,  // gat, gats: get and set a new expiry
  kSet,
  kAdd,      // store only if absent
  kReplace,  // store only if present
  kAppend,
  kPrepend,
  kCas,     // store only if the item's version is `cas`
  kDelete,  // `cas` != 0: only if the item's version is `cas` (meta, binary)
  kIncr,
  kDecr,
  kTouch,
  kFlush,  // every item of the partition
};

struct Request {
  Kind kind = Kind::kGet;
  std::string_view key;
  std::string_view value;  // storage commands
  uint32_t flags = 0;
  uint32_t expire_at = 0;  // absolute Unix seconds, 0 = never (to_expire_at)
  uint64_t cas = 0;        // kCas (required), kSet/kDelete/kIncr/kDecr (0 = unconditional)
  uint64_t delta = 0;      // kIncr, kDecr
  // kIncr/kDecr on a missing key: store `initial` instead of answering kNotFound (binary
  // protocol, meta ma N).
  bool create = false;
  uint64_t initial = 0;
  // kGet: also set expire_at (meta mg T, binary GAT); kGet/kGat: bump nothing else.
  bool touch = false;
};

enum class Outcome : uint8_t {
  kStored,        // STORED / HD
  kNotStored,     // NOT_STORED / NS
  kExists,        // EXISTS / EX: cas mismatch
  kNotFound,      // NOT_FOUND / NF; a GET miss
  kDeleted,       // DELETED / HD
  kTouched,       // TOUCHED / HD
  kHit,           // a GET found it: value, flags, cas
  kNumber,        // incr/decr: `number` (and the new value's version in cas)
  kNonNumeric,    // incr/decr of a value that is not a decimal number
  kTooLarge,      // value above the engine's max value
  kNoMemory,      // the store engine is full
  kOk,            // flush
  kNotSupported,  // flush on an engine that cannot clear
  kLogFailed,     // a write refused: the op log cannot be written (Worker::execute_st)
};

struct Result {
  Outcome outcome = Outcome::kNotFound;
  std::string_view value;  // kHit: valid until the next put on the engine (engine.h) or copied
  uint32_t flags = 0;
  uint32_t expire_at = 0;
  uint64_t cas = 0;     // kHit: the item's version; stores: the new version
  uint64_t number = 0;  // kNumber
};

// How PUTs and DELETEs reach the engine: Worker::execute_st, so that the op log sees each one.
using Mutate = store::FunctionRef<void(std::span<const store::Request>, store::CompletionFn)>;

// Runs `r` on `e` (the partition owner's thread only). `scratch` holds values built here
// (append, incr); a kHit value may point into it or into the engine.
Result execute_st(const Request& r, store::Engine& e, Mutate mutate, std::string& scratch);

// memcached's exptime: 0 never; negative: already expired; up to 30 days: seconds from `now`;
// more: an absolute Unix time (protocol.txt, "Expiration times").
uint32_t to_expire_at(int64_t exptime, uint32_t now);
inline constexpr int64_t kMaxRelativeExptime = 60 * 60 * 24 * 30;
// Unix seconds now, on the clock the engines keep expiry by.
inline uint32_t now_s() { return store::realtime_seconds(nullptr); }

}  // namespace fabkv::memcached
