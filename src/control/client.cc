#include "control/client.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "control/auth.h"

namespace fabkv::control {

using detail::IoResult;
using detail::IoStatus;

bool split_host_port(const std::string& s, std::string* host, uint16_t* port) {
  std::string h, p;
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':') return false;
    h = s.substr(1, close - 1);
    p = s.substr(close + 2);
    if (h.empty() || h.find(':') == std::string::npos) return false;  // brackets are for v6
  } else {
    size_t colon = s.find(':');
    if (colon == std::string::npos || s.find(':', colon + 1) != std::string::npos) return false;
    h = s.substr(0, colon);
    p = s.substr(colon + 1);
    if (h.empty()) return false;
  }
  if (p.empty() || p.size() > 5) return false;
  uint32_t v = 0;
  for (char c : p) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v > 65535) return false;
  *host = h;
  *port = static_cast<uint16_t>(v);
  return true;
}

namespace {

[[noreturn]] void throw_io(const IoResult& r, const std::string& what, const std::string& peer) {
  Status s = r.status == IoStatus::kTimeout ? Status::kTimeout : Status::kConnectionFailed;
  throw ControlError(s, "control " + peer + ": " + what + ": " + r.error);
}

struct Frame {
  FrameHeader header;
  std::vector<uint8_t> bytes;  // header + body
};

// Reads one whole frame within the deadline. The header is validated before the body is
// read so a hostile length cannot make us allocate more than kMaxFrameSize.
Frame read_frame(int fd, const Deadline& deadline, const std::string& what,
                 const std::string& peer) {
  Frame f;
  f.bytes.resize(kFrameHeaderSize);
  IoResult r = detail::recv_exact(fd, f.bytes, deadline);
  if (r.status != IoStatus::kOk) throw_io(r, what, peer);
  HeaderParse hp = parse_header(f.bytes);
  if (hp.status != Status::kOk)
    throw ControlError(Status::kMalformed, "control " + peer + ": " + what + ": " + hp.error);
  f.header = hp.header;
  f.bytes.resize(kFrameHeaderSize + hp.header.body_length);
  r = detail::recv_exact(fd, std::span(f.bytes).subspan(kFrameHeaderSize), deadline);
  if (r.status != IoStatus::kOk) throw_io(r, what, peer);
  return f;
}

}  // namespace

ControlClient ControlClient::connect(const std::string& host_port, const Hello& hello,
                                     int timeout_ms, const std::string& secret) {
  Hello h = hello;
  h.auth = secret.empty() ? AuthMethod::kNone : AuthMethod::kHmacSha256;
  std::string bad = check_limits(h);
  if (!bad.empty()) throw ControlError(Status::kMalformed, "control hello not sent: " + bad);
  std::vector<uint8_t> frame = encode(h);
  return handshake(host_port, frame, timeout_ms, secret);
}

ControlClient ControlClient::connect_raw(const std::string& host_port,
                                         std::span<const uint8_t> first_bytes, int timeout_ms) {
  return handshake(host_port, first_bytes, timeout_ms, {});
}

ControlClient ControlClient::handshake(const std::string& host_port,
                                       std::span<const uint8_t> first_bytes, int timeout_ms,
                                       const std::string& secret) {
  Deadline deadline = Deadline::after_ms(timeout_ms);
  std::string host;
  uint16_t port = 0;
  if (!split_host_port(host_port, &host, &port))
    throw ControlError(Status::kConnectionFailed,
                       "control: bad server address \"" + host_port + "\" (want HOST:PORT)");
  std::string error;
  bool timed_out = false;
  detail::Fd fd = detail::connect_tcp(host, port, deadline, &error, &timed_out);
  if (!fd.valid())
    throw ControlError(timed_out ? Status::kTimeout : Status::kConnectionFailed,
                       "control: " + error);

  IoResult r = detail::send_all(fd.get(), first_bytes, deadline);
  // A server that rejects early (bad magic, wrong version) may answer and close before it
  // has read everything; its Welcome is still worth reading, so a failed send is only fatal
  // if no answer follows.
  std::string send_error = r.status == IoStatus::kOk ? "" : r.error;
  if (r.status == IoStatus::kTimeout) throw_io(r, "sending hello", host_port);

  Frame f;
  try {
    f = read_frame(fd.get(), deadline, "waiting for welcome", host_port);
  } catch (const ControlError& e) {
    if (send_error.empty()) throw;
    throw ControlError(e.status(), std::string(e.what()) + " (send failed: " + send_error + ")");
  }
  if (f.header.type == static_cast<uint16_t>(FrameType::kChallenge) &&
      f.header.version == kProtocolVersion) {
    // A server with a secret: prove ours over its nonce and the Hello we sent.
    if (secret.empty())
      throw ControlError(Status::kMalformed, "control " + host_port +
                                                 ": the server sent a challenge, but this "
                                                 "client has no secret to answer it with");
    ChallengeParse cp = parse_challenge(f.bytes);
    if (cp.status != Status::kOk)
      throw ControlError(cp.status, "control " + host_port + ": bad challenge: " + cp.error);
    Proof proof;
    proof.mac = compute_proof(secret, cp.challenge.nonce, first_bytes);
    r = detail::send_all(fd.get(), encode(proof), deadline);
    // As for the Hello: a server that refuses may close before reading; its Welcome says why.
    send_error = r.status == IoStatus::kOk ? "" : r.error;
    if (r.status == IoStatus::kTimeout) throw_io(r, "sending proof", host_port);
    try {
      f = read_frame(fd.get(), deadline, "waiting for welcome", host_port);
    } catch (const ControlError& e) {
      if (send_error.empty()) throw;
      throw ControlError(e.status(), std::string(e.what()) + " (send failed: " + send_error + ")");
    }
  }
  WelcomeParse wp = parse_welcome(f.bytes);
  if (wp.status != Status::kOk)
    throw ControlError(wp.status, "control " + host_port + ": bad welcome: " + wp.error);
  const Welcome& w = wp.welcome;
  if (w.status != Status::kOk) {
    throw ControlError(w.status,
                       "control " + host_port + ": server rejected the handshake (" +
                           to_string(w.status) + "): " + w.message,
                       w.provider);
  }
  return ControlClient(std::move(fd), std::move(wp.welcome), host_port);
}

std::vector<uint8_t> ControlClient::request(std::span<const uint8_t> body, int timeout_ms) {
  if (!fd_.valid())
    throw ControlError(Status::kConnectionFailed, "control " + peer_ + ": client is closed");
  if (body.size() > kMaxFrameSize)
    throw ControlError(Status::kMalformed, "control request of " + std::to_string(body.size()) +
                                               " bytes exceeds kMaxFrameSize");
  Deadline deadline = Deadline::after_ms(timeout_ms);
  std::vector<uint8_t> frame = encode_frame(FrameType::kRequest, body);
  IoResult r = detail::send_all(fd_.get(), frame, deadline);
  if (r.status != IoStatus::kOk) throw_io(r, "sending request", peer_);
  Frame f = read_frame(fd_.get(), deadline, "waiting for reply", peer_);
  if (f.header.version != kProtocolVersion)
    throw ControlError(Status::kBadVersion, "control " + peer_ + ": reply of version " +
                                                std::to_string(f.header.version));
  if (f.header.type == static_cast<uint16_t>(FrameType::kReply))
    return {f.bytes.begin() + kFrameHeaderSize, f.bytes.end()};
  if (f.header.type == static_cast<uint16_t>(FrameType::kError)) {
    ErrorParse ep = parse_error(f.bytes);
    if (ep.status != Status::kOk)
      throw ControlError(ep.status, "control " + peer_ + ": bad error frame: " + ep.error);
    throw ControlError(ep.reported, "control " + peer_ + ": request failed (" +
                                        to_string(ep.reported) + "): " + ep.message);
  }
  throw ControlError(Status::kMalformed, "control " + peer_ + ": unexpected frame type " +
                                             std::to_string(f.header.type) + " after request");
}

bool ControlClient::alive() const {
  if (!fd_.valid()) return false;
  pollfd p{fd_.get(), POLLIN, 0};
  int n = ::poll(&p, 1, 0);
  if (n <= 0) return true;  // nothing to report (or EINTR: assume alive, ask again later)
  if (p.revents & (POLLERR | POLLHUP)) return false;
  uint8_t b;
  ssize_t got = ::recv(fd_.get(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (got == 0) return false;
  if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
  return true;
}

void ControlClient::close() { fd_.reset(); }

}  // namespace fabkv::control
