// memcached's text protocol (protocol.txt of memcached 1.6): one parser for every command line
// and data block a client sends, and one for the flags of a meta command, fuzzed
// (fuzz/memcached_fuzz.cc) and tested split at every byte (tests/memcached/text_test.cc). They
// only cut, check and decode; src/memcached/commands.cc runs what they find.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "memcached/exec.h"

namespace fabkv::memcached {

// The longest command line held whole: past it a line is refused ("CLIENT_ERROR line too
// long", then the connection is closed), except a retrieval's (get, gets, gat, gats), whose
// keys are then read in pieces (Parse::kKeys, next_key), as memcached reads them, so that a
// multi-get of any number of keys takes bounded memory. memcached closes a connection whose
// line has no newline after 2048 bytes unless it is a get.
inline constexpr size_t kMaxLineBytes = size_t{64} << 10;
inline constexpr size_t kMaxKeyBytes = 250;  // store/limits.h kMaxKeySize

enum class Verb : uint8_t {
  kGet,
  kGets,
  kGat,
  kGats,
  kSet,
  kAdd,
  kReplace,
  kAppend,
  kPrepend,
  kCas,
  kDelete,
  kIncr,
  kDecr,
  kTouch,
  kFlushAll,
  kStats,
  kVersion,
  kVerbosity,
  kQuit,
  kShutdown,
  kLruCrawler,  // lru_crawler metadump (src/memcached/dump.cc); args as for stats
  kMetaGet,
  kMetaSet,
  kMetaDelete,
  kMetaArith,
  kMetaNoop,
  kMetaDebug,
};

struct TextCommand {
  Verb verb = Verb::kGet;
  std::vector<std::string_view> keys;  // get/gets/gat/gats: every key; others: keys[0]
  uint32_t flags = 0;
  int64_t exptime = 0;  // storage, touch, gat (raw: exec.h to_expire_at)
  uint64_t cas = 0;     // cas
  uint64_t delta = 0;   // incr/decr
  int64_t delay = 0;    // flush_all
  bool noreply = false;
  std::string_view data;  // storage and ms: the data block, without its "\r\n"
  // stats, lru_crawler: the arguments; meta commands: the flag tokens after the key (and ms's
  // datalen).
  std::vector<std::string_view> args;
  std::string_view key() const { return keys.empty() ? std::string_view() : keys[0]; }
};

enum class Parse : uint8_t {
  kNeedMore,  // no complete command yet: read more (nothing consumed)
  kCommand,   // `cmd` filled; `consumed` bytes are its line and data block
  kError,     // answer `reply`, drop `consumed` bytes, go on
  kSwallow,   // answer `reply`, drop `consumed` bytes and then `swallow` more as they come
              // (a data block too large to take: memcached's conn_swallow); cmd.verb/keys set
  kClose,     // answer `reply` and close the connection
  kKeys,      // a retrieval line longer than kMaxLineBytes: `consumed` bytes are its verb (and
              // gat's exptime, in cmd.exptime); its keys follow, read with next_key
};

struct ParseResult {
  Parse status = Parse::kNeedMore;
  size_t consumed = 0;
  std::string_view reply;  // a whole reply line with its "\r\n" (static storage)
  uint64_t swallow = 0;
};

// Parses the first command of `in`. `max_value`: the largest data block taken.
// Never reads outside `in`; `cmd`'s views point into `in`. A retrieval line held whole is
// checked whole (a key over 250 bytes refuses the line, as memcached does) and its keys are in
// cmd.keys; one longer than kMaxLineBytes is Parse::kKeys.
ParseResult parse_text(std::string_view in, size_t max_value, TextCommand* cmd);

// The next key of a retrieval line whose verb has been read (a key ends at a space or at the
// line's end; spaces before it are skipped, a "\r" before the "\n" is not part of it).
enum class KeyScan : uint8_t {
  kNeedMore,  // no whole key yet: read more (`consumed`: the spaces skipped)
  kKey,       // `key`; `consumed` bytes up to its end
  kEnd,       // the line's end: `consumed` bytes through its "\n"
  kTooLong,   // a key over kMaxKeyBytes: `consumed` bytes of it; the rest of the line is void
};
struct NextKey {
  KeyScan status = KeyScan::kNeedMore;
  size_t consumed = 0;
  std::string_view key;  // kKey: a view into `in`
};
NextKey next_key(std::string_view in);

// A meta command's key and flags (protocol.txt "Meta Commands"; cmd.verb mg, ms, md, ma or me,
// as parse_text left it) as the Request it asks of the engine: mg and me a get (T: and a new
// expiry), ms a store (M its mode, F, T, C), md a delete (C), ma an incr or decr (M, N, J, D,
// C). Flags that only shape the answer (O k c f s t v q) stay in cmd.args for the reply
// (memcached/reply.h). `now`: Unix seconds, for relative TTLs. Returns "" when the command is
// good, else the whole line memcached answers (static storage); `req` is then unspecified.
std::string_view parse_meta(const TextCommand& cmd, uint32_t now, Request* req);

// A key memcached's text protocol accepts: 1..250 bytes, no control characters or spaces.
bool valid_key(std::string_view key);

}  // namespace fabkv::memcached
