#include "client/request.h"

#include "store/limits.h"

namespace fabkv::client_detail {

Status validate(std::string_view key, size_t value_len, size_t max_value) {
  if (key.empty()) return Status::kInvalidKey;
  if (key.size() > store::kMaxKeySize || value_len > max_value) return Status::kTooLarge;
  return Status::kOk;
}

namespace {

void put_header(char* out, const RequestFields& f, uint8_t flags, uint16_t key_len,
                uint32_t value_len, const void* body, size_t body_bytes) {
  herd::RequestHeader h{};
  h.seq = f.seq;
  h.client = f.client;
  h.epoch = f.epoch;
  h.op = static_cast<uint8_t>(f.op);
  h.flags = flags;
  h.key_len = key_len;
  h.value_len = value_len;
  h.expire_at = f.expire_at;
  h.expected_version = f.expected_version;
  h.check = herd::request_check(f.seq, body, body_bytes);
  herd::store(out, h);
}

size_t put_trailer(char* out, uint32_t seq, size_t body_bytes) {
  size_t body_end = sizeof(herd::RequestHeader) + body_bytes;
  size_t t = herd::trailer_offset(body_bytes);
  std::memset(out + body_end, 0, t - body_end);  // padding: never leak stale bytes
  herd::store(out + t, herd::RequestTrailer{seq});
  return herd::request_bytes(body_bytes);
}

}  // namespace

size_t encode_inline(char* out, const RequestFields& f, std::string_view key,
                     std::string_view value) {
  char* body = out + sizeof(herd::RequestHeader);
  if (!key.empty()) std::memcpy(body, key.data(), key.size());
  if (!value.empty()) std::memcpy(body + key.size(), value.data(), value.size());
  size_t body_bytes = key.size() + value.size();
  put_header(out, f, 0, static_cast<uint16_t>(key.size()), static_cast<uint32_t>(value.size()),
             body, body_bytes);
  return put_trailer(out, f.seq, body_bytes);
}

size_t encode_indirect(char* out, const RequestFields& f, uint16_t key_len, uint32_t value_len,
                       const herd::IndirectBody& ib) {
  char* body = out + sizeof(herd::RequestHeader);
  herd::store(body, ib);
  put_header(out, f, herd::kFlagIndirect, key_len, value_len, body, sizeof(herd::IndirectBody));
  return put_trailer(out, f.seq, sizeof(herd::IndirectBody));
}

Status from_wire(uint8_t s) {
  switch (static_cast<herd::WireStatus>(s)) {
    case herd::WireStatus::kOk: return Status::kOk;
    case herd::WireStatus::kNotFound: return Status::kNotFound;
    case herd::WireStatus::kTooLarge: return Status::kTooLarge;
    case herd::WireStatus::kInvalidKey: return Status::kInvalidKey;
    case herd::WireStatus::kNoSpace: return Status::kNoSpace;
    case herd::WireStatus::kVersionMismatch: return Status::kVersionMismatch;
    case herd::WireStatus::kMalformed: return Status::kMalformed;
    case herd::WireStatus::kInternal: return Status::kError;
  }
  return Status::kError;
}

bool parse_response(const void* buf, size_t len, ParsedResponse* out) {
  if (len < sizeof(herd::ResponseHeader)) return false;
  out->header = herd::load<herd::ResponseHeader>(buf);
  size_t room = len - sizeof(herd::ResponseHeader);
  if (out->header.value_len > room) return false;
  out->value = std::string_view(static_cast<const char*>(buf) + sizeof(herd::ResponseHeader),
                                out->header.value_len);
  return true;
}

}  // namespace fabkv::client_detail
