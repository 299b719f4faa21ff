// What pilaf's and farm's table headers (proto/pilaf/layout.h, proto/farm/layout.h) share:
// the words at kMovesOffset that clients READ to confirm a miss (`moves`, a seqlock over key
// moves), to learn that the table was replaced (`state`) and to judge expiry by the server's
// clock (`clock`), and the expiry rule itself.
#pragma once

#include <cstdint>
#include <cstring>

namespace fabkv::read_table {

inline constexpr uint32_t kStateLive = 0;
inline constexpr uint32_t kStateRetired = 1;  // a newer generation replaced this table

// What a client READs at the header's moves (16 bytes: moves, state, clock), decoded.
struct HeaderWord {
  uint64_t moves;
  uint32_t state;
  uint32_t clock;
};
inline HeaderWord load_header_word(const void* sixteen_bytes) {
  HeaderWord w;
  const char* p = static_cast<const char*>(sixteen_bytes);
  std::memcpy(&w.moves, p, 8);
  std::memcpy(&w.state, p + 8, 4);
  std::memcpy(&w.clock, p + 12, 4);
  return w;
}

// Expiry, the same rule on both sides: an item with expire_at != 0 is gone once the owner's
// clock reaches expire_at. `now` must be the server's clock (the header's clock), not the
// reader's own (docs/pilaf.md, "Expiry and the server's clock").
inline bool expired(uint32_t expire_at, uint32_t now) { return expire_at != 0 && now >= expire_at; }

}  // namespace fabkv::read_table
