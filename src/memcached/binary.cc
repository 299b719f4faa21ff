#include "memcached/binary.h"

#include <cstring>

#include "memcached/text.h"

namespace fabkv::memcached::binary {

namespace {

uint16_t be16(const char* p) { return static_cast<uint16_t>((uint8_t(p[0]) << 8) | uint8_t(p[1])); }
uint32_t be32(const char* p) {
  return (uint32_t{uint8_t(p[0])} << 24) | (uint32_t{uint8_t(p[1])} << 16) |
         (uint32_t{uint8_t(p[2])} << 8) | uint8_t(p[3]);
}
uint64_t be64(const char* p) { return (uint64_t{be32(p)} << 32) | be32(p + 4); }
void put16(std::string* s, uint16_t v) {
  s->push_back(static_cast<char>(v >> 8));
  s->push_back(static_cast<char>(v));
}
void put32(std::string* s, uint32_t v) {
  put16(s, static_cast<uint16_t>(v >> 16));
  put16(s, static_cast<uint16_t>(v));
}

bool storage(uint8_t op) {
  switch (op) {
    case kSet:
    case kAdd:
    case kReplace:
    case kAppend:
    case kPrepend:
    case kSetQ:
    case kAddQ:
    case kReplaceQ:
    case kAppendQ:
    case kPrependQ: return true;
    default: return false;
  }
}

}  // namespace

bool known(uint8_t op) {
  switch (op) {
    case kGet:
    case kSet:
    case kAdd:
    case kReplace:
    case kDelete:
    case kIncrement:
    case kDecrement:
    case kQuit:
    case kFlush:
    case kGetQ:
    case kNoop:
    case kVersion:
    case kGetK:
    case kGetKQ:
    case kAppend:
    case kPrepend:
    case kStat:
    case kSetQ:
    case kAddQ:
    case kReplaceQ:
    case kDeleteQ:
    case kIncrementQ:
    case kDecrementQ:
    case kQuitQ:
    case kFlushQ:
    case kAppendQ:
    case kPrependQ:
    case kVerbosity:
    case kTouch:
    case kGat:
    case kGatQ:
    case kGatK:
    case kGatKQ: return true;
    default: return false;
  }
}

bool quiet(uint8_t op) {
  switch (op) {
    case kGetQ:
    case kGetKQ:
    case kSetQ:
    case kAddQ:
    case kReplaceQ:
    case kDeleteQ:
    case kIncrementQ:
    case kDecrementQ:
    case kQuitQ:
    case kFlushQ:
    case kAppendQ:
    case kPrependQ:
    case kGatQ:
    case kGatKQ: return true;
    default: return false;
  }
}

ParseResult parse(std::string_view in, size_t max_body, Packet* out) {
  if (in.empty()) return {};
  if (static_cast<uint8_t>(in[0]) != kRequestMagic) return {Parse::kClose, in.size(), 0, kInvalid};
  if (in.size() < kHeaderBytes) return {};
  Header& h = out->h;
  const char* p = in.data();
  h.magic = static_cast<uint8_t>(p[0]);
  h.opcode = static_cast<uint8_t>(p[1]);
  h.keylen = be16(p + 2);
  h.extlen = static_cast<uint8_t>(p[4]);
  h.datatype = static_cast<uint8_t>(p[5]);
  h.vbucket = be16(p + 6);
  h.bodylen = be32(p + 8);
  h.opaque = be32(p + 12);
  h.cas = be64(p + 16);
  const uint64_t parts = uint64_t{h.keylen} + h.extlen;
  if (parts > h.bodylen || h.keylen > kMaxKeyBytes)
    return {Parse::kError, kHeaderBytes, h.bodylen, kInvalid};
  if (h.bodylen > max_body + kMaxKeyBytes + 64)
    return {Parse::kError, kHeaderBytes, h.bodylen, storage(h.opcode) ? kTooBig : kInvalid};
  if (in.size() < kHeaderBytes + h.bodylen) return {};
  out->extras = in.substr(kHeaderBytes, h.extlen);
  out->key = in.substr(kHeaderBytes + h.extlen, h.keylen);
  out->value = in.substr(kHeaderBytes + parts, h.bodylen - parts);
  if (!known(h.opcode)) return {Parse::kError, kHeaderBytes + h.bodylen, 0, kUnknownCommand};
  return {Parse::kPacket, kHeaderBytes + h.bodylen, 0, kSuccess};
}

bool to_request(const Packet& pk, uint32_t now, Request* req) {
  const Header& h = pk.h;
  *req = Request{};
  req->key = pk.key;
  req->cas = h.cas;
  const bool bare = h.extlen == 0 && !pk.key.empty() && pk.value.empty();
  auto expiry = [now](uint32_t raw) { return to_expire_at(static_cast<int32_t>(raw), now); };
  switch (h.opcode) {
    case kGet:
    case kGetQ:
    case kGetK:
    case kGetKQ:
      req->kind = Kind::kGet;
      req->cas = 0;
      return bare;
    case kGat:
    case kGatQ:
    case kGatK:
    case kGatKQ:
    case kTouch:
      if (h.extlen != 4 || pk.key.empty() || !pk.value.empty()) return false;
      req->kind = Kind::kGat;  // TOUCH too: answered with the flags, like GAT
      req->cas = 0;
      req->expire_at = expiry(be32(pk.extras.data()));
      return true;
    case kSet:
    case kSetQ:
    case kAdd:
    case kAddQ:
    case kReplace:
    case kReplaceQ:
      if (h.extlen != 8 || pk.key.empty()) return false;
      req->flags = be32(pk.extras.data());
      req->expire_at = expiry(be32(pk.extras.data() + 4));
      req->value = pk.value;
      req->kind = (h.opcode == kSet || h.opcode == kSetQ)   ? (h.cas ? Kind::kCas : Kind::kSet)
                  : (h.opcode == kAdd || h.opcode == kAddQ) ? Kind::kAdd
                                                            : Kind::kReplace;
      // memcached 1.6: ADD and REPLACE with a CAS are a cas (ADD of a missing key: Not found).
      if (req->kind != Kind::kCas && h.cas != 0) req->kind = Kind::kCas;
      return true;
    case kAppend:
    case kAppendQ:
    case kPrepend:
    case kPrependQ:
      if (h.extlen != 0 || pk.key.empty()) return false;
      req->kind = (h.opcode == kAppend || h.opcode == kAppendQ) ? Kind::kAppend : Kind::kPrepend;
      req->value = pk.value;
      return true;
    case kDelete:
    case kDeleteQ: req->kind = Kind::kDelete; return bare;
    case kIncrement:
    case kIncrementQ:
    case kDecrement:
    case kDecrementQ: {
      if (h.extlen != 20 || pk.key.empty() || !pk.value.empty()) return false;
      const bool incr = h.opcode == kIncrement || h.opcode == kIncrementQ;
      req->kind = incr ? Kind::kIncr : Kind::kDecr;
      req->delta = be64(pk.extras.data());
      req->initial = be64(pk.extras.data() + 8);
      const uint32_t exp = be32(pk.extras.data() + 16);
      req->create = exp != 0xffffffffu;  // all ones: a miss is NOT_FOUND, not a new counter
      req->expire_at = req->create ? expiry(exp) : 0;
      return true;
    }
    case kFlush:
    case kFlushQ: {
      if (h.extlen != 0 && h.extlen != 4) return false;
      req->kind = Kind::kFlush;
      req->key = {};
      const int64_t delay = h.extlen == 4 ? static_cast<int32_t>(be32(pk.extras.data())) : 0;
      req->expire_at = delay > 0 ? to_expire_at(delay, now) : 0;
      return true;
    }
    default: return false;
  }
}

void append_response(std::string* out, uint8_t opcode, uint16_t status, uint32_t opaque,
                     uint64_t cas, std::string_view extras, std::string_view key,
                     std::string_view value) {
  out->push_back(static_cast<char>(kResponseMagic));
  out->push_back(static_cast<char>(opcode));
  put16(out, static_cast<uint16_t>(key.size()));
  out->push_back(static_cast<char>(extras.size()));
  out->push_back(0);  // datatype: raw bytes
  put16(out, status);
  put32(out, static_cast<uint32_t>(extras.size() + key.size() + value.size()));
  // opaque is echoed byte for byte, as the client sent it
  out->push_back(static_cast<char>(opaque >> 24));
  out->push_back(static_cast<char>(opaque >> 16));
  out->push_back(static_cast<char>(opaque >> 8));
  out->push_back(static_cast<char>(opaque));
  put32(out, static_cast<uint32_t>(cas >> 32));
  put32(out, static_cast<uint32_t>(cas));
  out->append(extras).append(key).append(value);
}

std::string_view error_text(uint16_t status) {
  switch (status) {
    case kKeyNotFound: return "Not found";
    case kKeyExists: return "Data exists for key.";
    case kTooBig: return "Too large.";
    case kInvalid: return "Invalid arguments";
    case kNotStored: return "Not stored.";
    case kNonNumeric: return "Non-numeric server-side value for incr or decr";
    case kUnknownCommand: return "Unknown command";
    case kOutOfMemory: return "Out of memory";
    case kInternalError: return "The op log cannot be written (disk full?): writes refused";
    default: return "";
  }
}

}  // namespace fabkv::memcached::binary
