// How one key's command is answered: a Call is what a connection asked of a key's owner and how
// it wants the answer (text, meta or binary, docs/memcached.md); format() writes the owner's
// Result in that style. Apart from the connections so that the answers can be checked (and
// fuzzed) without a server, and so that an owner's Result can travel back to the connection's
// worker (src/memcached/forward.cc) and be formatted there, in the connection's order.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "memcached/exec.h"
#include "memcached/text.h"

namespace fabkv::memcached {

// What `version` (text and binary) and `stats` report.
inline constexpr std::string_view kVersionString = "1.6.21-fabkv";

enum class Style : uint8_t { kText, kMeta, kBinary };

// Everything needed to run one key's command and to answer it.
struct Call {
  Request req;
  Style style = Style::kText;
  Verb verb = Verb::kGet;                  // text and meta
  bool noreply = false;                    // text noreply, meta q, binary quiet
  std::span<const std::string_view> meta;  // meta flags, answered in their order
  uint8_t opcode = 0;                      // binary
  uint32_t opaque = 0;
};

// A storage command's text answer for `o` (STORED, NOT_STORED, ..., SERVER_ERROR ...).
std::string_view store_reply(Outcome o);

// Appends the answer to `c` with result `r` (nothing for a quiet success, and for flush_all,
// which is answered once every partition has run it).
void format(const Call& c, const Result& r, std::string* out);

}  // namespace fabkv::memcached
