// The client's half of the RPC wire format (proto/rpc/wire.h): building a request in a
// buffer, choosing inline or indirect, mapping response statuses (sequence numbers: wire.h).
// Pure functions over bytes, so tests/client/encoding_test.cc checks them without a peer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "proto/rpc/wire.h"
#include "proto/status.h"

namespace fabkv::rpc {

// Everything a request header carries besides its body.
struct RequestFields {
  uint32_t seq = 1;
  uint16_t client = 0;
  uint16_t epoch = 0;
  rpc::OpCode op = rpc::OpCode::kGet;
  uint32_t expire_at = 0;
  uint64_t expected_version = 0;
};

// Checks a key and value length against the limits before anything is sent.
// kInvalidKey for an empty key, kTooLarge for a key over store::kMaxKeySize or a value over
// `max_value`.
Status validate(std::string_view key, size_t value_len, size_t max_value);

// True when key+value fit a slot of `slot_size` inline (write transport); otherwise the
// request is sent indirect (the worker READs key+value from the client's staging region).
inline bool fits_inline(uint32_t slot_size, size_t key_len, size_t value_len) {
  return rpc::request_bytes(key_len + value_len) <= slot_size;
}

// Writes header, key, value and trailer (inline request) into `out`, which must hold
// rpc::request_bytes(key.size() + value.size()) bytes. Padding between the body and the
// trailer is zeroed. Returns the request's size.
size_t encode_inline(char* out, const RequestFields& f, std::string_view key,
                     std::string_view value);

// Writes header (flags = kFlagIndirect, key_len/value_len of the staged data), the
// IndirectBody and the trailer into `out` (rpc::request_bytes(sizeof(IndirectBody)) bytes).
size_t encode_indirect(char* out, const RequestFields& f, uint16_t key_len, uint32_t value_len,
                       const rpc::IndirectBody& body);

// What a response's status means to a user.
Status from_wire(uint8_t wire_status);

// A received response, checked: nullptr-free view of header + value.
struct ParsedResponse {
  rpc::ResponseHeader header{};
  std::string_view value;
};
// Rejects (returns false) a message shorter than a header or whose value_len runs past `len`.
bool parse_response(const void* buf, size_t len, ParsedResponse* out);

}  // namespace fabkv::rpc
