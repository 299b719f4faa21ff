#include "proto/rpc/request.h"

#include "store/limits.h"

namespace fabkv::rpc {

Status validate(std::string_view key, size_t value_len, size_t max_value) {
  if (key.empty()) return Status::kInvalidKey;
  if (key.size() > store::kMaxKeySize || value_len > max_value) return Status::kTooLarge;
  return Status::kOk;
}

namespace {

void put_header(char* out, const RequestFields& f, uint8_t flags, uint16_t key_len,
                uint32_t value_len, const void* body, size_t body_bytes) {
  rpc::RequestHeader h{};
  h.seq = f.seq;
  h.client = f.client;
  h.epoch = f.epoch;
  h.op = static_cast<uint8_t>(f.op);
  h.flags = flags;
  h.key_len = key_len;
  h.value_len = value_len;
  h.expire_at = f.expire_at;
  h.expected_version = f.expected_version;
  h.check = rpc::request_check(h, body, body_bytes);
  rpc::store(out, h);
}

size_t put_trailer(char* out, uint32_t seq, size_t body_bytes) {
  size_t body_end = sizeof(rpc::RequestHeader) + body_bytes;
  size_t t = rpc::trailer_offset(body_bytes);
  std::memset(out + body_end, 0, t - body_end);  // padding: never leak stale bytes
  rpc::store(out + t, rpc::RequestTrailer{seq});
  return rpc::request_bytes(body_bytes);
}

}  // namespace

size_t encode_inline(char* out, const RequestFields& f, std::string_view key,
                     std::string_view value) {
  char* body = out + sizeof(rpc::RequestHeader);
  if (!key.empty()) std::memcpy(body, key.data(), key.size());
  if (!value.empty()) std::memcpy(body + key.size(), value.data(), value.size());
  size_t body_bytes = key.size() + value.size();
  put_header(out, f, 0, static_cast<uint16_t>(key.size()), static_cast<uint32_t>(value.size()),
             body, body_bytes);
  return put_trailer(out, f.seq, body_bytes);
}

size_t encode_indirect(char* out, const RequestFields& f, uint16_t key_len, uint32_t value_len,
                       const rpc::IndirectBody& ib) {
  char* body = out + sizeof(rpc::RequestHeader);
  rpc::store(body, ib);
  put_header(out, f, rpc::kFlagIndirect, key_len, value_len, body, sizeof(rpc::IndirectBody));
  return put_trailer(out, f.seq, sizeof(rpc::IndirectBody));
}

Status from_wire(uint8_t s) {
  switch (static_cast<rpc::WireStatus>(s)) {
    case rpc::WireStatus::kOk: return Status::kOk;
    case rpc::WireStatus::kNotFound: return Status::kNotFound;
    case rpc::WireStatus::kTooLarge: return Status::kTooLarge;
    case rpc::WireStatus::kInvalidKey: return Status::kInvalidKey;
    case rpc::WireStatus::kNoSpace: return Status::kNoSpace;
    case rpc::WireStatus::kVersionMismatch: return Status::kVersionMismatch;
    case rpc::WireStatus::kMalformed: return Status::kMalformed;
    case rpc::WireStatus::kInternal: return Status::kError;
  }
  return Status::kError;
}

bool parse_response(const void* buf, size_t len, ParsedResponse* out) {
  if (len < sizeof(rpc::ResponseHeader)) return false;
  out->header = rpc::load<rpc::ResponseHeader>(buf);
  size_t room = len - sizeof(rpc::ResponseHeader);
  if (out->header.value_len > room) return false;
  out->value = std::string_view(static_cast<const char*>(buf) + sizeof(rpc::ResponseHeader),
                                out->header.value_len);
  return true;
}

}  // namespace fabkv::rpc
