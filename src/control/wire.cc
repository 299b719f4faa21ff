#include "control/wire.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

namespace fabkv::control {

const char* to_string(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kBadVersion: return "bad version";
    case Status::kBadSecret: return "bad secret";
    case Status::kMalformed: return "malformed";
    case Status::kUnknownService: return "unknown service";
    case Status::kRejected: return "rejected";
    case Status::kServerBusy: return "server busy";
    case Status::kTimeout: return "timeout";
    case Status::kConnectionFailed: return "connection failed";
  }
  return "unknown status";
}

const char* to_string(FrameType t) {
  switch (t) {
    case FrameType::kHello: return "hello";
    case FrameType::kWelcome: return "welcome";
    case FrameType::kRequest: return "request";
    case FrameType::kReply: return "reply";
    case FrameType::kError: return "error";
    case FrameType::kChallenge: return "challenge";
    case FrameType::kProof: return "proof";
  }
  return "unknown frame type";
}

namespace {

// Appends little-endian integers and length-prefixed strings; the header's body_length is
// patched once the body is complete.
class FrameWriter {
 public:
  FrameWriter(FrameType type, uint16_t version) {
    out_.reserve(256);
    u32(kFrameMagic);
    u16(version);
    u16(static_cast<uint16_t>(type));
    u32(0);
  }
  void u16(uint16_t v) {
    for (int i = 0; i < 2; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void bytes(std::span<const uint8_t> b) {
    u32(static_cast<uint32_t>(b.size()));
    out_.insert(out_.end(), b.begin(), b.end());
  }
  void str(std::string_view s) { bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }
  std::vector<uint8_t> finish() {
    uint32_t len = static_cast<uint32_t>(out_.size() - kFrameHeaderSize);
    for (int i = 0; i < 4; ++i) out_[8 + i] = static_cast<uint8_t>(len >> (8 * i));
    return std::move(out_);
  }

 private:
  std::vector<uint8_t> out_;
};

// Bounds-checked cursor. The first failure sticks (later reads return zero/empty) and names
// the field, so parse functions read straight through and check ok() at the end.
class BodyReader {
 public:
  explicit BodyReader(std::span<const uint8_t> b) : b_(b) {}
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  size_t remaining() const { return b_.size() - pos_; }

  uint16_t u16(const char* field) { return static_cast<uint16_t>(uint(field, 2)); }
  uint32_t u32(const char* field) { return static_cast<uint32_t>(uint(field, 4)); }
  uint64_t u64(const char* field) { return uint(field, 8); }

  std::span<const uint8_t> bytes(const char* field, size_t max) {
    uint32_t n = u32(field);
    if (!ok()) return {};
    if (n > max) {
      fail(field, "length " + std::to_string(n) + " exceeds the limit of " + std::to_string(max));
      return {};
    }
    if (n > remaining()) {
      fail(field, "length " + std::to_string(n) + " runs past the end of the frame");
      return {};
    }
    auto s = b_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  std::vector<uint8_t> byte_vec(const char* field, size_t max) {
    auto s = bytes(field, max);
    return {s.begin(), s.end()};
  }
  std::string str(const char* field, size_t max) {
    auto s = bytes(field, max);
    return {reinterpret_cast<const char*>(s.data()), s.size()};
  }
  void fail(const char* field, const std::string& why) {
    if (ok()) error_ = std::string(field) + ": " + why;
  }
  void expect_end() {
    if (ok() && remaining() != 0)
      error_ = std::to_string(remaining()) + " unexpected trailing bytes";
  }

 private:
  uint64_t uint(const char* field, size_t n) {
    if (!ok()) return 0;
    if (remaining() < n) {
      fail(field, "truncated");
      return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t{b_[pos_ + i]} << (8 * i);
    pos_ += n;
    return v;
  }

  std::span<const uint8_t> b_;
  size_t pos_ = 0;
  std::string error_;
};

uint32_t load_u32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

// Header checks shared by every frame parser: complete header, magic, the expected type,
// and a body_length that matches the frame exactly. Version is checked by the caller
// because a Welcome of another version is still partly readable.
template <typename Result>
bool check_frame(std::span<const uint8_t> frame, FrameType want, Result* r, FrameHeader* h) {
  HeaderParse hp = parse_header(frame);
  if (hp.status != Status::kOk) {
    r->status = hp.status;
    r->error = hp.error;
    return false;
  }
  *h = hp.header;
  if (h->type != static_cast<uint16_t>(want)) {
    r->status = Status::kMalformed;
    r->error = "expected a " + std::string(to_string(want)) + " frame, got type " +
               std::to_string(h->type);
    return false;
  }
  if (frame.size() - kFrameHeaderSize != h->body_length) {
    r->status = Status::kMalformed;
    r->error = "header announces a " + std::to_string(h->body_length) + "-byte body but " +
               std::to_string(frame.size() - kFrameHeaderSize) + " bytes follow";
    return false;
  }
  return true;
}

std::string version_mismatch(uint16_t got, const char* who) {
  return std::string(who) + " speaks control protocol version " + std::to_string(got) +
         ", this side speaks version " + std::to_string(kProtocolVersion);
}

// The frozen prefix of Welcome and Error bodies.
bool read_status(BodyReader& r, Status* status) {
  uint16_t s = r.u16("status");
  uint16_t reserved = r.u16("reserved");
  if (!r.ok()) return false;
  if (s > kMaxWireStatus) {
    r.fail("status", "unknown value " + std::to_string(s));
    return false;
  }
  if (reserved != 0) {
    r.fail("reserved", "must be zero");
    return false;
  }
  *status = static_cast<Status>(s);
  return true;
}

}  // namespace

std::vector<uint8_t> encode(const Hello& h) {
  FrameWriter w(FrameType::kHello, h.version);
  w.u16(static_cast<uint16_t>(h.auth));
  w.u16(0);
  w.str(h.service);
  w.str(h.provider);
  w.bytes(h.fabric_address);
  w.bytes(h.payload);
  return w.finish();
}

std::vector<uint8_t> encode(const Welcome& m) {
  FrameWriter w(FrameType::kWelcome, kProtocolVersion);
  w.u16(static_cast<uint16_t>(m.status));
  w.u16(0);
  w.str(std::string_view(m.message).substr(0, kMaxMessageSize));
  w.u64(m.session_id);
  w.str(m.provider);
  w.u32(static_cast<uint32_t>(m.fabric_addresses.size()));
  for (const auto& a : m.fabric_addresses) w.bytes(a);
  w.u32(static_cast<uint32_t>(m.regions.size()));
  for (const auto& r : m.regions) {
    w.str(r.name);
    w.u64(r.addr);
    w.u64(r.length);
    w.u64(r.key);
    w.u32(r.access);
  }
  w.bytes(m.payload);
  return w.finish();
}

std::vector<uint8_t> encode(const Challenge& c) {
  FrameWriter w(FrameType::kChallenge, kProtocolVersion);
  w.u16(static_cast<uint16_t>(c.method));
  w.u16(0);
  w.bytes(c.nonce);
  return w.finish();
}

std::vector<uint8_t> encode(const Proof& p) {
  FrameWriter w(FrameType::kProof, kProtocolVersion);
  w.bytes(p.mac);
  return w.finish();
}

std::vector<uint8_t> encode_frame(FrameType type, std::span<const uint8_t> body) {
  FrameWriter w(type, kProtocolVersion);
  std::vector<uint8_t> out = w.finish();
  out.insert(out.end(), body.begin(), body.end());
  uint32_t len = static_cast<uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) out[8 + i] = static_cast<uint8_t>(len >> (8 * i));
  return out;
}

std::vector<uint8_t> encode_error(Status status, const std::string& message) {
  FrameWriter w(FrameType::kError, kProtocolVersion);
  w.u16(static_cast<uint16_t>(status));
  w.u16(0);
  w.str(message.size() > kMaxMessageSize ? message.substr(0, kMaxMessageSize) : message);
  return w.finish();
}

namespace {
std::string over(const char* field, size_t n, size_t max) {
  return std::string(field) + " has " + std::to_string(n) + " bytes/entries, the limit is " +
         std::to_string(max);
}
}  // namespace

std::string check_limits(const Hello& h) {
  if (static_cast<uint16_t>(h.auth) > kMaxAuthMethod)
    return "auth method " + std::to_string(static_cast<uint16_t>(h.auth)) + " is unknown";
  if (h.service.size() > kMaxServiceSize) return over("service", h.service.size(), kMaxServiceSize);
  if (h.provider.size() > kMaxProviderSize)
    return over("provider", h.provider.size(), kMaxProviderSize);
  if (h.fabric_address.size() > kMaxAddressSize)
    return over("fabric_address", h.fabric_address.size(), kMaxAddressSize);
  size_t body = 2 + 2 + 4 * 4 + h.service.size() + h.provider.size() + h.fabric_address.size() +
                h.payload.size();
  if (body > kMaxFrameSize) return over("hello body", body, kMaxFrameSize);
  return {};
}

std::string check_limits(const Challenge& c) {
  if (c.method != AuthMethod::kHmacSha256)
    return "challenge method " + std::to_string(static_cast<uint16_t>(c.method)) +
           " is not HMAC-SHA256";
  if (c.nonce.size() != kNonceSize)
    return "nonce has " + std::to_string(c.nonce.size()) + " bytes, not " +
           std::to_string(kNonceSize);
  return {};
}

std::string check_limits(const Proof& p) {
  if (p.mac.size() != kProofSize)
    return "mac has " + std::to_string(p.mac.size()) + " bytes, not " + std::to_string(kProofSize);
  return {};
}

std::string check_limits(const Welcome& m) {
  if (static_cast<uint16_t>(m.status) > kMaxWireStatus)
    return std::string("status ") + to_string(m.status) + " cannot be sent";
  if (m.provider.size() > kMaxProviderSize)
    return over("provider", m.provider.size(), kMaxProviderSize);
  if (m.fabric_addresses.size() > kMaxAddresses)
    return over("fabric_addresses", m.fabric_addresses.size(), kMaxAddresses);
  size_t body = 2 + 2 + 4 + std::min(m.message.size(), kMaxMessageSize) + 8 + 4 +
                m.provider.size() + 4 + 4 + 4 + m.payload.size();
  for (const auto& a : m.fabric_addresses) {
    if (a.size() > kMaxAddressSize) return over("fabric_address", a.size(), kMaxAddressSize);
    body += 4 + a.size();
  }
  if (m.regions.size() > kMaxRegions) return over("regions", m.regions.size(), kMaxRegions);
  for (const auto& r : m.regions) {
    if (r.name.size() > kMaxRegionNameSize)
      return over("region name", r.name.size(), kMaxRegionNameSize);
    if ((r.access & ~kRegionAccessMask) != 0)
      return "region " + r.name + " has unknown access bits";
    body += 4 + r.name.size() + 28;
  }
  if (body > kMaxFrameSize) return over("welcome body", body, kMaxFrameSize);
  return {};
}

HeaderParse parse_header(std::span<const uint8_t> bytes) {
  HeaderParse r{Status::kOk, {}, {}};
  if (bytes.size() < kFrameHeaderSize) {
    r.status = Status::kMalformed;
    r.error = "truncated frame header (" + std::to_string(bytes.size()) + " of " +
              std::to_string(kFrameHeaderSize) + " bytes)";
    return r;
  }
  r.header.magic = load_u32(&bytes[0]);
  r.header.version = load_u16(&bytes[4]);
  r.header.type = load_u16(&bytes[6]);
  r.header.body_length = load_u32(&bytes[8]);
  if (r.header.magic != kFrameMagic) {
    char buf[96];
    snprintf(buf, sizeof buf, "bad magic 0x%08x (expected \"FKVC\"): not a fabkv control peer",
             r.header.magic);
    r.status = Status::kMalformed;
    r.error = buf;
    return r;
  }
  if (r.header.body_length > kMaxFrameSize) {
    r.status = Status::kMalformed;
    r.error = "frame body of " + std::to_string(r.header.body_length) +
              " bytes exceeds the limit of " + std::to_string(kMaxFrameSize);
    return r;
  }
  return r;
}

HelloParse parse_hello(std::span<const uint8_t> frame) {
  HelloParse r{Status::kOk, {}, {}};
  FrameHeader h;
  if (!check_frame(frame, FrameType::kHello, &r, &h)) return r;
  r.hello.version = h.version;
  if (h.version != kProtocolVersion) {
    r.status = Status::kBadVersion;
    r.error = version_mismatch(h.version, "client");
    return r;
  }
  BodyReader b(frame.subspan(kFrameHeaderSize));
  uint16_t auth = b.u16("auth");
  uint16_t reserved = b.u16("reserved");
  if (b.ok() && auth > kMaxAuthMethod) b.fail("auth", "unknown method " + std::to_string(auth));
  if (b.ok() && reserved != 0) b.fail("reserved", "must be zero");
  r.hello.auth = static_cast<AuthMethod>(b.ok() ? auth : 0);
  r.hello.service = b.str("service", kMaxServiceSize);
  r.hello.provider = b.str("provider", kMaxProviderSize);
  r.hello.fabric_address = b.byte_vec("fabric_address", kMaxAddressSize);
  r.hello.payload = b.byte_vec("payload", kMaxPayloadSize);
  b.expect_end();
  if (!b.ok()) {
    r.status = Status::kMalformed;
    r.error = "hello: " + b.error();
  }
  return r;
}

WelcomeParse parse_welcome(std::span<const uint8_t> frame) {
  WelcomeParse r{Status::kOk, {}, {}};
  FrameHeader h;
  if (!check_frame(frame, FrameType::kWelcome, &r, &h)) return r;
  BodyReader b(frame.subspan(kFrameHeaderSize));
  if (h.version != kProtocolVersion) {
    // Only the frozen prefix is meaningful across versions.
    r.status = Status::kBadVersion;
    r.error = version_mismatch(h.version, "server");
    Status s;
    if (read_status(b, &s)) {
      std::string msg = b.str("message", kMaxMessageSize);
      if (b.ok()) {
        r.welcome.status = s;
        r.welcome.message = msg;
        if (!msg.empty()) r.error += " (server says: " + msg + ")";
      }
    }
    return r;
  }
  Welcome& w = r.welcome;
  read_status(b, &w.status);
  w.message = b.str("message", kMaxMessageSize);
  w.session_id = b.u64("session_id");
  w.provider = b.str("provider", kMaxProviderSize);
  uint32_t naddr = b.u32("address_count");
  if (b.ok() && naddr > kMaxAddresses)
    b.fail("address_count",
           std::to_string(naddr) + " exceeds the limit of " + std::to_string(kMaxAddresses));
  for (uint32_t i = 0; b.ok() && i < naddr; ++i)
    w.fabric_addresses.push_back(b.byte_vec("fabric_address", kMaxAddressSize));
  uint32_t nreg = b.u32("region_count");
  if (b.ok() && nreg > kMaxRegions)
    b.fail("region_count",
           std::to_string(nreg) + " exceeds the limit of " + std::to_string(kMaxRegions));
  for (uint32_t i = 0; b.ok() && i < nreg; ++i) {
    RegionDescriptor d;
    d.name = b.str("region.name", kMaxRegionNameSize);
    d.addr = b.u64("region.addr");
    d.length = b.u64("region.length");
    d.key = b.u64("region.key");
    d.access = b.u32("region.access");
    if (b.ok() && (d.access & ~kRegionAccessMask) != 0)
      b.fail("region.access", "unknown access bits " + std::to_string(d.access));
    w.regions.push_back(std::move(d));
  }
  w.payload = b.byte_vec("payload", kMaxPayloadSize);
  b.expect_end();
  if (!b.ok()) {
    r.status = Status::kMalformed;
    r.error = "welcome: " + b.error();
    r.welcome = Welcome{};
  }
  return r;
}

ChallengeParse parse_challenge(std::span<const uint8_t> frame) {
  ChallengeParse r{Status::kOk, {}, {}};
  FrameHeader h;
  if (!check_frame(frame, FrameType::kChallenge, &r, &h)) return r;
  if (h.version != kProtocolVersion) {
    r.status = Status::kBadVersion;
    r.error = version_mismatch(h.version, "server");
    return r;
  }
  BodyReader b(frame.subspan(kFrameHeaderSize));
  uint16_t method = b.u16("method");
  uint16_t reserved = b.u16("reserved");
  if (b.ok() && method != static_cast<uint16_t>(AuthMethod::kHmacSha256))
    b.fail("method", "unknown method " + std::to_string(method));
  if (b.ok() && reserved != 0) b.fail("reserved", "must be zero");
  std::span<const uint8_t> nonce = b.bytes("nonce", kNonceSize);
  if (b.ok() && nonce.size() != kNonceSize)
    b.fail("nonce",
           "has " + std::to_string(nonce.size()) + " bytes, not " + std::to_string(kNonceSize));
  b.expect_end();
  if (!b.ok()) {
    r.status = Status::kMalformed;
    r.error = "challenge: " + b.error();
    return r;
  }
  r.challenge.method = AuthMethod::kHmacSha256;
  r.challenge.nonce.assign(nonce.begin(), nonce.end());
  return r;
}

ProofParse parse_proof(std::span<const uint8_t> frame) {
  ProofParse r{Status::kOk, {}, {}};
  FrameHeader h;
  if (!check_frame(frame, FrameType::kProof, &r, &h)) return r;
  if (h.version != kProtocolVersion) {
    r.status = Status::kBadVersion;
    r.error = version_mismatch(h.version, "client");
    return r;
  }
  BodyReader b(frame.subspan(kFrameHeaderSize));
  std::span<const uint8_t> mac = b.bytes("mac", kProofSize);
  if (b.ok() && mac.size() != kProofSize)
    b.fail("mac",
           "has " + std::to_string(mac.size()) + " bytes, not " + std::to_string(kProofSize));
  b.expect_end();
  if (!b.ok()) {
    r.status = Status::kMalformed;
    r.error = "proof: " + b.error();
    return r;
  }
  r.proof.mac.assign(mac.begin(), mac.end());
  return r;
}

ErrorParse parse_error(std::span<const uint8_t> frame) {
  ErrorParse r{Status::kOk, {}, Status::kOk, {}};
  FrameHeader h;
  if (!check_frame(frame, FrameType::kError, &r, &h)) return r;
  if (h.version != kProtocolVersion) {
    r.status = Status::kBadVersion;
    r.error = version_mismatch(h.version, "server");
    return r;
  }
  BodyReader b(frame.subspan(kFrameHeaderSize));
  read_status(b, &r.reported);
  r.message = b.str("message", kMaxMessageSize);
  b.expect_end();
  if (!b.ok()) {
    r.status = Status::kMalformed;
    r.error = "error frame: " + b.error();
  }
  return r;
}

}  // namespace fabkv::control
