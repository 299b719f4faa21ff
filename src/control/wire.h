// The control channel's wire format: a versioned binary handshake over TCP that tells a client
// where the server's fabric endpoints and memory regions are. Data never flows here.
//
// Every frame is a fixed 12-byte header followed by a body (docs/control-channel.md has the
// byte-by-byte layouts):
//
//   offset size field
//        0    4 magic        "FKVC" (0x46 0x4B 0x56 0x43 on the wire)
//        4    2 version      kProtocolVersion of the sender
//        6    2 type         FrameType
//        8    4 body_length  bytes after the header, <= kMaxFrameSize
//
// All integers are little-endian and are encoded field by field (never a memcpy of a struct,
// so padding and host byte order never reach the wire). Strings and byte strings are a u32
// length followed by that many bytes; each field has its own limit (kMax* below).
//
// Compatibility rule: the header and the first two fields of a Welcome body (status u16,
// reserved u16, message string) are frozen for all versions, so a client of any version can
// read "wrong version" from a server of any other version and show the server's message.
//
// History:
//   v1 (fabkv 0.1): Hello {secret, service, provider, fabric_address, payload};
//                   Welcome {status, message, session_id, provider, fabric_addresses, regions,
//                   payload}; Request/Reply carry opaque bodies; Error {status, message}.
//   v2 (issue #24): the secret no longer travels. Hello {auth, reserved, service, provider,
//                   fabric_address, payload}; a server with a secret answers a Hello with
//                   auth = HMAC-SHA256 by a Challenge {method, reserved, nonce}, the client
//                   with a Proof {mac} (control/auth.h), then the Welcome. Welcome, Request,
//                   Reply and Error are as in v1.
//   v2, issue #27:  no layout change; fabkv's server fills Welcome.provider in refusals too,
//                   so that a client on another fabric learns the server's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fabkv::control {

inline constexpr uint16_t kProtocolVersion = 2;

// "FKVC" read as a little-endian u32.
inline constexpr uint32_t kFrameMagic = 0x43564B46u;
inline constexpr size_t kFrameHeaderSize = 12;
// Largest body a peer may announce. A Welcome with 256 regions and 64 4-KiB addresses is
// ~290 KiB; 1 MiB leaves room for service payloads without letting one peer pin much memory.
inline constexpr size_t kMaxFrameSize = 1 << 20;

// Per-field limits. The parser rejects (kMalformed) anything above them, so a peer cannot make
// the other side allocate more than the frame it actually sent.
inline constexpr size_t kMaxServiceSize = 64;
inline constexpr size_t kMaxProviderSize = 128;  // "verbs;ofi_rxm" etc.
inline constexpr size_t kMaxAddressSize = 4096;  // fi_getname output; verbs/tcp are < 100 B
inline constexpr size_t kMaxAddresses = 64;      // server endpoints (one per worker)
inline constexpr size_t kMaxRegions = 256;
inline constexpr size_t kMaxRegionNameSize = 64;
inline constexpr size_t kMaxMessageSize = 1024;           // Welcome/Error human-readable reason
inline constexpr size_t kMaxPayloadSize = kMaxFrameSize;  // bounded by the frame anyway
// The Challenge's nonce and the Proof's MAC (HMAC-SHA256): exactly these sizes.
inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kProofSize = 32;

enum class FrameType : uint16_t {
  kHello = 1,      // client -> server, first frame
  kWelcome = 2,    // server -> client, answer to Hello (also sent alone to reject)
  kRequest = 3,    // client -> server after the handshake, opaque body
  kReply = 4,      // server -> client, answer to a Request, opaque body
  kError = 5,      // server -> client after the handshake: {status u16, reserved u16, message}
  kChallenge = 6,  // server -> client, answer to a Hello with auth (v2): {method, nonce}
  kProof = 7,      // client -> server, answer to a Challenge (v2): {mac}
};
const char* to_string(FrameType);

// The in-memory image of the header; the wire layout is the table above and is written
// field by field, but the struct has the same shape so the layout is documented by types too.
struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t version = kProtocolVersion;
  uint16_t type = 0;
  uint32_t body_length = 0;
};
static_assert(sizeof(FrameHeader) == kFrameHeaderSize);
static_assert(alignof(FrameHeader) == 4);

enum class Status : uint16_t {
  kOk = 0,
  kBadVersion,
  kBadSecret,
  kMalformed,
  kUnknownService,
  kRejected,
  kServerBusy,
  kTimeout,
  // Local to the client: never sent on the wire (connect refused, EOF, reset).
  kConnectionFailed,
};
const char* to_string(Status);
// The largest Status value a peer may send (kConnectionFailed is client-local).
inline constexpr uint16_t kMaxWireStatus = static_cast<uint16_t>(Status::kTimeout);

enum RegionAccess : uint32_t { kRemoteRead = 1, kRemoteWrite = 2, kRemoteAtomic = 4 };
inline constexpr uint32_t kRegionAccessMask = kRemoteRead | kRemoteWrite | kRemoteAtomic;

// Wire (inside a Welcome): name str, addr u64, length u64, key u64, access u32 = 28 + name.
struct RegionDescriptor {
  std::string name;   // e.g. "perf.target"
  uint64_t addr = 0;  // what a peer passes to fi_read/fi_write: a virtual address or an
                      // offset (provider dependent; the fabric layer fills it)
  uint64_t length = 0;
  uint64_t key = 0;
  uint32_t access = 0;  // RegionAccess bits
  bool operator==(const RegionDescriptor&) const = default;
};

// How a client proves that it knows the shared secret (Hello.auth, Challenge.method).
enum class AuthMethod : uint16_t {
  kNone = 0,        // the client has no secret
  kHmacSha256 = 1,  // Challenge/Proof: HMAC-SHA256(secret, label || nonce || Hello frame)
};
inline constexpr uint16_t kMaxAuthMethod = static_cast<uint16_t>(AuthMethod::kHmacSha256);

// Client -> server, the first frame. Body (v2):
//   auth u16 (AuthMethod) | reserved u16 (0) | service str<=64 | provider str<=128 |
//   fabric_address bytes<=4096 | payload bytes
// `version` travels in the frame header.
struct Hello {
  uint16_t version = kProtocolVersion;
  AuthMethod auth = AuthMethod::kNone;  // kHmacSha256: the client has a secret to prove
  std::string service;                  // the server asked: "fabkv", "perf" (fabkv-perf)
  std::string provider;                 // client's libfabric provider, e.g. "tcp;ofi_rxm"
  std::vector<uint8_t> fabric_address;  // client's endpoint name (may be empty)
  std::vector<uint8_t> payload;         // service-specific opaque bytes
  bool operator==(const Hello&) const = default;
};

// Server -> client. Body (v1):
//   status u16 | reserved u16 (0) | message str<=1024 | session_id u64 | provider str<=128 |
//   address_count u32<=64 { bytes<=4096 } | region_count u32<=256 { RegionDescriptor } |
//   payload bytes
struct Welcome {
  Status status = Status::kOk;
  std::string message;  // reason when status != kOk
  uint64_t session_id = 0;
  std::string provider;  // the server's; fabkv's server names it in a refusal too
  std::vector<std::vector<uint8_t>> fabric_addresses;  // server endpoint names
  std::vector<RegionDescriptor> regions;
  std::vector<uint8_t> payload;  // the service's (fabkv: proto/handshake.h)
  bool operator==(const Welcome&) const = default;
};

// Server -> client, after a Hello with auth = kHmacSha256 when the server has a secret.
// Body (v2): method u16 (AuthMethod, kHmacSha256) | reserved u16 (0) | nonce bytes (exactly
// kNonceSize; fresh from a CSPRNG for every connection).
struct Challenge {
  AuthMethod method = AuthMethod::kHmacSha256;
  std::vector<uint8_t> nonce;
  bool operator==(const Challenge&) const = default;
};

// Client -> server, the answer to a Challenge. Body (v2): mac bytes (exactly kProofSize):
// HMAC-SHA256(secret, kProofLabel || nonce || the Hello frame as sent; control/auth.h).
struct Proof {
  std::vector<uint8_t> mac;
  bool operator==(const Proof&) const = default;
};

// Whole frames (header included). encode(Hello) writes hello.version into the header, so a
// test can speak another version.
std::vector<uint8_t> encode(const Hello&);
std::vector<uint8_t> encode(const Welcome&);
std::vector<uint8_t> encode(const Challenge&);
std::vector<uint8_t> encode(const Proof&);
// A Request, Reply or Error frame around an opaque body.
std::vector<uint8_t> encode_frame(FrameType type, std::span<const uint8_t> body);
// An Error frame: body = status u16 | reserved u16 | message str.
std::vector<uint8_t> encode_error(Status status, const std::string& message);

// What the sender checks before encoding: empty if every field is within its limit (and the
// frame within kMaxFrameSize), else the reason. encode() itself does not refuse; a frame
// over a limit is rejected by the peer's parser. encode(Welcome) cuts `message` to
// kMaxMessageSize.
std::string check_limits(const Hello&);
std::string check_limits(const Welcome&);
std::string check_limits(const Challenge&);
std::string check_limits(const Proof&);

// Parsers: one per format. Each takes a whole frame, checks it completely (magic, version,
// type, exact length, per-field limits, no trailing bytes), rejects with kMalformed or
// kBadVersion and a reason, and never throws or reads out of bounds. Encodings are canonical:
// for every frame that parses, encode(parsed) reproduces it byte for byte (the fuzzer checks).
struct HeaderParse {
  Status status;
  std::string error;
  FrameHeader header;
};
// Only the 12 header bytes: checks magic and body_length <= kMaxFrameSize, not the version or
// type (the caller decides what it expects).
HeaderParse parse_header(std::span<const uint8_t> bytes);

struct HelloParse {
  Status status;
  std::string error;
  Hello hello;
};
HelloParse parse_hello(std::span<const uint8_t> frame);

// A Welcome from a server of another version yields kBadVersion; if the frozen prefix
// (status, message) is readable, the error carries the server's message.
struct WelcomeParse {
  Status status;
  std::string error;
  Welcome welcome;
};
WelcomeParse parse_welcome(std::span<const uint8_t> frame);

struct ChallengeParse {
  Status status;
  std::string error;
  Challenge challenge;
};
ChallengeParse parse_challenge(std::span<const uint8_t> frame);

struct ProofParse {
  Status status;
  std::string error;
  Proof proof;
};
ProofParse parse_proof(std::span<const uint8_t> frame);

struct ErrorParse {
  Status status;  // kOk if the frame parsed; then `reported` is what the server said
  std::string error;
  Status reported = Status::kOk;
  std::string message;
};
ErrorParse parse_error(std::span<const uint8_t> frame);

}  // namespace fabkv::control
