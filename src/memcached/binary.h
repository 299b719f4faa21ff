// memcached's binary protocol (protocol_binary.h of memcached 1.6): the 24-byte header and the
// commands `memccapable` exercises. One parser, fuzzed with the text one
// (fuzz/memcached_fuzz.cc); src/memcached/commands.cc runs what it finds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "memcached/exec.h"

namespace fabkv::memcached::binary {

inline constexpr uint8_t kRequestMagic = 0x80, kResponseMagic = 0x81;
inline constexpr size_t kHeaderBytes = 24;

enum Opcode : uint8_t {
  kGet = 0x00,
  kSet = 0x01,
  kAdd = 0x02,
  kReplace = 0x03,
  kDelete = 0x04,
  kIncrement = 0x05,
  kDecrement = 0x06,
  kQuit = 0x07,
  kFlush = 0x08,
  kGetQ = 0x09,
  kNoop = 0x0a,
  kVersion = 0x0b,
  kGetK = 0x0c,
  kGetKQ = 0x0d,
  kAppend = 0x0e,
  kPrepend = 0x0f,
  kStat = 0x10,
  kSetQ = 0x11,
  kAddQ = 0x12,
  kReplaceQ = 0x13,
  kDeleteQ = 0x14,
  kIncrementQ = 0x15,
  kDecrementQ = 0x16,
  kQuitQ = 0x17,
  kFlushQ = 0x18,
  kAppendQ = 0x19,
  kPrependQ = 0x1a,
  kVerbosity = 0x1b,
  kTouch = 0x1c,
  kGat = 0x1d,
  kGatQ = 0x1e,
  kGatK = 0x23,
  kGatKQ = 0x24,
};

enum Status : uint16_t {
  kSuccess = 0x00,
  kKeyNotFound = 0x01,
  kKeyExists = 0x02,
  kTooBig = 0x03,
  kInvalid = 0x04,
  kNotStored = 0x05,
  kNonNumeric = 0x06,
  kUnknownCommand = 0x81,
  kOutOfMemory = 0x82,
  kInternalError = 0x84,
};

struct Header {
  uint8_t magic = 0, opcode = 0;
  uint16_t keylen = 0;
  uint8_t extlen = 0, datatype = 0;
  uint16_t vbucket = 0;  // the status, in a response
  uint32_t bodylen = 0, opaque = 0;
  uint64_t cas = 0;
};

struct Packet {
  Header h;
  std::string_view extras, key, value;
};

enum class Parse : uint8_t {
  kNeedMore,  // fewer bytes than the header and its body
  kPacket,    // `packet` filled; `consumed` bytes
  kError,     // answer `status` (to h.opcode/h.opaque), drop `consumed` and then `swallow`
              // more bytes as they come (a body too large to buffer)
  kClose,     // not a request (bad magic): close the connection
};

struct ParseResult {
  Parse status = Parse::kNeedMore;
  size_t consumed = 0;
  uint64_t swallow = 0;
  Status error = kSuccess;
};

// Parses the first packet of `in` (in[0] is kRequestMagic). A body above `max_body` bytes is
// refused (kError kTooBig for storage commands, kInvalid otherwise) without waiting for it.
ParseResult parse(std::string_view in, size_t max_body, Packet* out);

// The request a keyed packet asks of its key's owner: GET*, GAT*, TOUCH, SET/ADD/REPLACE,
// APPEND/PREPEND, DELETE, INCREMENT/DECREMENT and their quiet forms; FLUSH (kFlush of every
// partition, no key) as well. False when its extras, key
// or value do not fit its opcode (memcached answers kInvalid), or it is not one of those.
// `now`: Unix seconds, for relative expiry times; views into `pk`.
bool to_request(const Packet& pk, uint32_t now, Request* req);

// Is this opcode known, and how: its quiet form answers only failures (GETQ: only hits).
bool known(uint8_t opcode);
bool quiet(uint8_t opcode);

// Appends a response header and body.
void append_response(std::string* out, uint8_t opcode, uint16_t status, uint32_t opaque,
                     uint64_t cas, std::string_view extras, std::string_view key,
                     std::string_view value);
// The body memcached sends with an error status ("Not found", ...).
std::string_view error_text(uint16_t status);

}  // namespace fabkv::memcached::binary
