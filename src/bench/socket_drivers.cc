// The baseline drivers: memcached's text protocol and redis's RESP over loopback TCP, written
// here rather than taken from client libraries so both pipeline exactly like the fabkv driver:
// each logical client has its own non-blocking socket and keeps up to `window` requests
// outstanding; requests posted in one turn leave in one send(), responses are matched in order.
//
// Threading: each connection (its socket, buffers and pending queue) belongs to one logical
// client and is touched only by the thread driving it; only the first-error text is shared.
//
// Waiting is busy polling (recv returning EAGAIN), as the fabkv client does: a blocking client
// pays a 15-20 us sleep/wake-up per request on these hosts (PROVIDERS.md), which would make
// the baselines look slower than they are.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "bench/driver.h"

namespace fabkv::bench {
namespace {

// One response parsed from the front of a buffer.
struct Parsed {
  size_t consumed = 0;  // 0: incomplete, wait for more bytes
  OpStatus status = OpStatus::kOk;
  std::string_view value;
  bool malformed = false;
};

bool split_host_port(const std::string& a, std::string* host, uint16_t* port) {
  auto colon = a.rfind(':');
  if (colon == std::string::npos) return false;
  *host = a.substr(0, colon);
  int p = 0;
  auto [ptr, ec] = std::from_chars(a.data() + colon + 1, a.data() + a.size(), p);
  if (ec != std::errc() || ptr != a.data() + a.size() || p <= 0 || p > 65535) return false;
  *port = static_cast<uint16_t>(p);
  return true;
}

int connect_tcp(const std::string& address, int timeout_ms) {
  std::string host;
  uint16_t port = 0;
  if (!split_host_port(address, &host, &port))
    throw std::runtime_error("bad address '" + address + "' (HOST:PORT)");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (::inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(), &sa.sin_addr) != 1)
    throw std::runtime_error("bad IPv4 address '" + host + "'");
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    rc = ::poll(&p, 1, timeout_ms) == 1 ? 0 : -1;
    int err = 0;
    socklen_t len = sizeof(err);
    if (rc == 0 && (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)) {
      errno = err ? err : errno;
      rc = -1;
    } else if (rc != 0) {
      errno = ETIMEDOUT;
    }
  }
  if (rc != 0) {
    int e = errno;
    ::close(fd);
    throw std::runtime_error(fmt::format("connect {}: {}", address, std::strerror(e)));
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// A request awaiting its response: its completion, and for a multi-get its number of keys and
// the bytes its keys take in the connection's key list.
struct Pending {
  Completion done;
  uint32_t keys = 0;  // 0: a single GET or PUT
  uint32_t key_bytes = 0;
};

// Requests awaiting their response on one connection, in order: a ring that only grows (a
// deque would allocate and free a block every 32 requests).
class CompletionQueue {
 public:
  bool empty() const { return count_ == 0; }
  void push(Pending c) {
    if (count_ == ring_.size()) {
      std::vector<Pending> bigger(std::max<size_t>(16, ring_.size() * 2));
      for (size_t i = 0; i < count_; ++i) bigger[i] = ring_[(head_ + i) % ring_.size()];
      ring_.swap(bigger);
      head_ = 0;
    }
    ring_[(head_ + count_++) % ring_.size()] = c;
  }
  const Pending& front() const { return ring_[head_]; }
  Pending pop() {
    const Pending c = ring_[head_];
    head_ = (head_ + 1) % ring_.size();
    count_--;
    return c;
  }

 private:
  std::vector<Pending> ring_;
  size_t head_ = 0, count_ = 0;
};

// One key's answer within a multi-get's response.
struct KeyAnswer {
  OpStatus status;
  std::string_view value;
};

// The shared machinery: buffers, in-order matching, failure reporting.
class SocketDriver : public Driver {
 public:
  SocketDriver(const DriverOptions& o, std::string system, std::string protocol)
      : o_(o), system_(std::move(system)), protocol_(std::move(protocol)) {
    for (size_t i = 0; i < o.clients; ++i) {
      conns_.emplace_back();
      conns_.back().fd = connect_tcp(o.address, o.timeout_ms);
    }
  }
  ~SocketDriver() override {
    for (auto& c : conns_)
      if (c.fd >= 0) ::close(c.fd);
  }

  std::string system() const override { return system_; }
  std::string protocol() const override { return protocol_; }
  size_t clients() const override { return conns_.size(); }

  bool get(size_t c, std::string_view key, Completion done) override {
    Conn& k = conns_[c];
    if (k.fd < 0) return false;
    encode_get(key, &k.out);
    k.pending.push({done});
    return true;
  }
  bool supports_multi_get() const override { return true; }
  bool multi_get(size_t c, std::span<const std::string_view> keys, Completion done) override {
    Conn& k = conns_[c];
    if (k.fd < 0 || keys.empty()) return false;
    encode_multi_get(keys, &k.out);
    const size_t before = k.multi.size();
    for (std::string_view key : keys) k.multi.append(key).push_back(' ');
    k.pending.push({done, static_cast<uint32_t>(keys.size()),
                    static_cast<uint32_t>(k.multi.size() - before)});
    return true;
  }
  bool put(size_t c, std::string_view key, std::string_view value, Completion done) override {
    Conn& k = conns_[c];
    if (k.fd < 0) return false;
    encode_put(key, value, &k.out);
    k.pending.push({done});
    return true;
  }

  size_t poll(size_t c) override {
    Conn& k = conns_[c];
    if (k.fd < 0) return 0;
    size_t ran = 0;
    if (!k.pending.empty()) {
      // Read what has come back (also while our own sends are blocked: the server may be
      // waiting for us to drain its replies).
      char buf[16384];
      while (true) {
        ssize_t n = ::recv(k.fd, buf, sizeof(buf), 0);
        if (n > 0) {
          k.in.append(buf, static_cast<size_t>(n));
          if (static_cast<size_t>(n) < sizeof(buf)) break;
          continue;
        }
        if (n == 0) return fail(k, "connection closed by the server");
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        return fail(k, std::string("recv: ") + std::strerror(errno));
      }
      size_t at = 0;
      while (!k.pending.empty() && at < k.in.size()) {
        if (k.pending.front().keys > 0) {
          // A multi-get: its answers are taken only once the whole response is there.
          const Pending& front = k.pending.front();
          const uint32_t n = front.keys;
          k.answers.clear();
          bool malformed = false;
          const size_t used = parse_multi(std::string_view(k.in).substr(at),
                                          std::string_view(k.multi).substr(k.multi_off,
                                                                           front.key_bytes),
                                          n, &k.answers, &malformed);
          if (malformed)
            return fail(k, "unexpected reply: " + printable(std::string_view(k.in).substr(at)));
          if (used == 0) break;
          const Pending p = k.pending.pop();
          const Completion done = p.done;
          k.multi_off += p.key_bytes;
          if (k.multi_off == k.multi.size()) {  // nothing pending: start the list over
            k.multi.clear();
            k.multi_off = 0;
          } else if (k.multi_off > 4096) {  // always some pending: drop what was consumed
            k.multi.erase(0, k.multi_off);
            k.multi_off = 0;
          }
          // The callbacks may post more (appending to k.out and k.multi), not parse: the
          // answers (views into k.in) stay put.
          for (const KeyAnswer& a : k.answers) done(a.status, a.value);
          ran += n;
          at += used;
          continue;
        }
        Parsed p = parse(std::string_view(k.in).substr(at));
        if (p.malformed)
          return fail(k, "unexpected reply: " + printable(std::string_view(k.in).substr(at)));
        if (p.consumed == 0) break;
        const Completion done = k.pending.pop().done;
        // The callback may post more requests on this connection (appending to k.out): the
        // input buffer and `at` are untouched by that.
        if (p.status == OpStatus::kError) {
          std::string why = fmt::format("{} answered an error: {}", system_,
                                        printable(std::string_view(k.in).substr(at, p.consumed)));
          note_error(why);
          done(p.status, why);
        } else {
          done(p.status, p.value);
        }
        ++ran;
        at += p.consumed;
      }
      k.in.erase(0, at);
    }
    // Send what was posted (including what callbacks just posted) in one go.
    while (k.out_pos < k.out.size()) {
      ssize_t n = ::send(k.fd, k.out.data() + k.out_pos, k.out.size() - k.out_pos, MSG_NOSIGNAL);
      if (n > 0) {
        k.out_pos += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && errno == EINTR) continue;
      return fail(k, std::string("send: ") + std::strerror(errno)) + ran;
    }
    if (k.out_pos == k.out.size()) {
      k.out.clear();
      k.out_pos = 0;
    }
    return ran;
  }

  bool wait(size_t c, int timeout_ms) override {
    Conn& k = conns_[c];
    if (k.fd < 0) return false;
    pollfd p{k.fd, static_cast<short>(POLLIN | (k.out_pos < k.out.size() ? POLLOUT : 0)), 0};
    while (::poll(&p, 1, timeout_ms) < 0 && errno == EINTR) {
    }
    return true;
  }

  ServerSample sample_server() override {
    ServerSample s;
    s.cpu_s = process_cpu_seconds(o_.server_pid);
    return s;
  }
  std::string error() const override {
    std::lock_guard<std::mutex> l(error_mu_);
    return error_;
  }

 protected:
  virtual void encode_get(std::string_view key, std::string* out) = 0;
  virtual void encode_put(std::string_view key, std::string_view value, std::string* out) = 0;
  virtual Parsed parse(std::string_view in) = 0;
  virtual void encode_multi_get(std::span<const std::string_view> keys, std::string* out) = 0;
  // The response to a multi-get of `n` keys (`keys`: each followed by one space) at the front of
  // `in`: the bytes it takes and one answer per key in order, or 0 while incomplete.
  virtual size_t parse_multi(std::string_view in, std::string_view keys, uint32_t n,
                             std::vector<KeyAnswer>* out, bool* malformed) = 0;

  static std::string printable(std::string_view s) {
    std::string r;
    for (char ch : s.substr(0, 60)) r += (ch >= 32 && ch < 127) ? ch : '.';
    return r;
  }

 private:
  struct Conn {
    int fd = -1;
    std::string out, in;
    size_t out_pos = 0;
    CompletionQueue pending;
    // The keys of the pending multi-gets, in order, each followed by a space; consumed from
    // multi_off (one buffer that is reused: posting a multi-get allocates nothing once warm).
    std::string multi;
    size_t multi_off = 0;
    std::vector<KeyAnswer> answers;  // a multi-get's answers while they are handed out
  };

  // The connection is unusable: everything pending fails (callbacks run with kError).
  size_t fail(Conn& k, const std::string& why) {
    const std::string reason = fmt::format("{}: {}", system_, why);
    note_error(reason);
    ::close(k.fd);
    k.fd = -1;
    size_t n = 0;
    while (!k.pending.empty()) {
      const Pending p = k.pending.pop();
      for (uint32_t i = 0; i < std::max<uint32_t>(1, p.keys); ++i) {
        p.done(OpStatus::kError, reason);
        ++n;
      }
    }
    k.multi.clear();
    k.multi_off = 0;
    return n;
  }
  // The first failure; clients may be driven from several threads.
  void note_error(const std::string& why) {
    std::lock_guard<std::mutex> l(error_mu_);
    if (error_.empty()) error_ = why;
  }

  DriverOptions o_;
  std::string system_, protocol_;
  std::deque<Conn> conns_;
  mutable std::mutex error_mu_;
  std::string error_;
};

bool parse_u64(std::string_view s, uint64_t* v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size();
}

// memcached text protocol (protocol.txt): "get <key>" / "set <key> 0 0 <bytes>".
class MemcachedDriver final : public SocketDriver {
 public:
  MemcachedDriver(const DriverOptions& o, const std::string& system, const std::string& protocol)
      : SocketDriver(o, system, protocol) {}
  // memcached's default item size limit (-I 1m) less its item header.
  uint64_t max_value() const override { return 1024 * 1024 - 512; }

 protected:
  void encode_get(std::string_view key, std::string* out) override {
    out->append("get ").append(key).append("\r\n");
  }
  void encode_put(std::string_view key, std::string_view value, std::string* out) override {
    fmt::format_to(std::back_inserter(*out), "set {} 0 0 {}\r\n", key, value.size());
    out->append(value).append("\r\n");
  }
  void encode_multi_get(std::span<const std::string_view> keys, std::string* out) override {
    out->append("get");
    for (std::string_view key : keys) out->append(" ").append(key);
    out->append("\r\n");
  }
  // "VALUE <key> <flags> <bytes>\r\n<data>\r\n" per hit, in the keys' order, then "END\r\n":
  // a requested key without a VALUE is a miss (a key asked twice is answered twice).
  size_t parse_multi(std::string_view in, std::string_view keys, uint32_t n,
                     std::vector<KeyAnswer>* out, bool* malformed) override {
    size_t at = 0;
    while (true) {
      const size_t eol = in.find("\r\n", at);
      if (eol == std::string_view::npos) {
        *malformed = in.size() - at > 1024;
        return 0;
      }
      const std::string_view line = in.substr(at, eol - at);
      if (line == "END") {
        at = eol + 2;
        break;
      }
      // VALUE <key> <flags> <bytes>: the key, then the requested keys it skipped were misses.
      const size_t sp1 = line.find(' '), sp2 = line.find(' ', sp1 + 1), sp3 = line.rfind(' ');
      uint64_t bytes = 0;
      if (!line.starts_with("VALUE ") || sp2 == std::string_view::npos || sp3 == sp2 ||
          !parse_u64(line.substr(sp3 + 1), &bytes)) {
        *malformed = true;
        return 0;
      }
      if (in.size() < eol + 2 + bytes + 2) return 0;
      if (in.substr(eol + 2 + bytes, 2) != "\r\n") {
        *malformed = true;
        return 0;
      }
      const std::string_view key = line.substr(sp1 + 1, sp2 - sp1 - 1);
      while (true) {
        if (keys.empty()) {  // a VALUE for a key not asked for (or out of order)
          *malformed = true;
          return 0;
        }
        const std::string_view want = keys.substr(0, keys.find(' '));
        keys.remove_prefix(want.size() + 1);
        if (want == key) break;
        out->push_back({OpStatus::kNotFound, {}});
      }
      out->push_back({OpStatus::kOk, in.substr(eol + 2, bytes)});
      at = eol + 2 + bytes + 2;
    }
    while (out->size() < n) out->push_back({OpStatus::kNotFound, {}});
    return at;
  }
  Parsed parse(std::string_view in) override {
    Parsed r;
    size_t eol = in.find("\r\n");
    if (eol == std::string_view::npos) {
      r.malformed = in.size() > 1024;
      return r;
    }
    std::string_view line = in.substr(0, eol);
    if (line == "END") return {eol + 2, OpStatus::kNotFound, {}, false};
    if (line == "STORED") return {eol + 2, OpStatus::kOk, {}, false};
    if (line.starts_with("VALUE ")) {
      // VALUE <key> <flags> <bytes>
      size_t sp = line.rfind(' ');
      uint64_t bytes = 0;
      if (sp == std::string_view::npos || !parse_u64(line.substr(sp + 1), &bytes)) {
        r.malformed = true;
        return r;
      }
      size_t need = eol + 2 + bytes + 2 + 5;  // data, "\r\n", "END\r\n"
      if (in.size() < need) return r;
      if (in.substr(eol + 2 + bytes, 7) != "\r\nEND\r\n") {
        r.malformed = true;
        return r;
      }
      return {need, OpStatus::kOk, in.substr(eol + 2, bytes), false};
    }
    if (line == "NOT_STORED" || line == "ERROR" || line.starts_with("SERVER_ERROR") ||
        line.starts_with("CLIENT_ERROR"))
      return {eol + 2, OpStatus::kError, {}, false};
    r.malformed = true;
    return r;
  }
};

// redis RESP2: arrays of bulk strings in, "$n" bulk / "$-1" nil / "+OK" / "-ERR" out.
class RedisDriver final : public SocketDriver {
 public:
  explicit RedisDriver(const DriverOptions& o) : SocketDriver(o, "redis", "resp") {}
  uint64_t max_value() const override { return 512ull << 20; }  // proto-max-bulk-len

 protected:
  void encode_get(std::string_view key, std::string* out) override {
    fmt::format_to(std::back_inserter(*out), "*2\r\n$3\r\nGET\r\n${}\r\n", key.size());
    out->append(key).append("\r\n");
  }
  void encode_multi_get(std::span<const std::string_view> keys, std::string* out) override {
    fmt::format_to(std::back_inserter(*out), "*{}\r\n$4\r\nMGET\r\n", keys.size() + 1);
    for (std::string_view key : keys) {
      fmt::format_to(std::back_inserter(*out), "${}\r\n", key.size());
      out->append(key).append("\r\n");
    }
  }
  // "*<n>\r\n" and one bulk string (or "$-1", a miss) per key.
  size_t parse_multi(std::string_view in, std::string_view, uint32_t n, std::vector<KeyAnswer>* out,
                     bool* malformed) override {
    const size_t eol = in.find("\r\n");
    if (eol == std::string_view::npos) {
      *malformed = in.size() > 1024;
      return 0;
    }
    uint64_t count = 0;
    if (in[0] != '*' || !parse_u64(in.substr(1, eol - 1), &count) || count != n) {
      *malformed = true;
      return 0;
    }
    size_t at = eol + 2;
    for (uint32_t i = 0; i < n; ++i) {
      const Parsed p = parse(in.substr(at));
      if (p.malformed || p.status == OpStatus::kError) {
        *malformed = true;
        return 0;
      }
      if (p.consumed == 0) return 0;
      out->push_back({p.status, p.value});
      at += p.consumed;
    }
    return at;
  }
  void encode_put(std::string_view key, std::string_view value, std::string* out) override {
    fmt::format_to(std::back_inserter(*out), "*3\r\n$3\r\nSET\r\n${}\r\n", key.size());
    out->append(key).append("\r\n");
    fmt::format_to(std::back_inserter(*out), "${}\r\n", value.size());
    out->append(value).append("\r\n");
  }
  Parsed parse(std::string_view in) override {
    Parsed r;
    size_t eol = in.find("\r\n");
    if (eol == std::string_view::npos) {
      r.malformed = in.size() > 1024;
      return r;
    }
    std::string_view line = in.substr(0, eol);
    if (line.empty()) {
      r.malformed = true;
      return r;
    }
    switch (line[0]) {
      case '+': return {eol + 2, OpStatus::kOk, {}, false};
      case '-': return {eol + 2, OpStatus::kError, {}, false};
      case '$': {
        if (line == "$-1") return {eol + 2, OpStatus::kNotFound, {}, false};
        uint64_t n = 0;
        if (!parse_u64(line.substr(1), &n)) break;
        if (in.size() < eol + 2 + n + 2) return r;
        if (in.substr(eol + 2 + n, 2) != "\r\n") break;
        return {eol + 2 + n + 2, OpStatus::kOk, in.substr(eol + 2, n), false};
      }
      default: break;
    }
    r.malformed = true;
    return r;
  }
};

}  // namespace

std::unique_ptr<Driver> make_memcached_driver(const DriverOptions& o, const std::string& system,
                                              const std::string& protocol) {
  return std::make_unique<MemcachedDriver>(o, system, protocol);
}
std::unique_ptr<Driver> make_redis_driver(const DriverOptions& o) {
  return std::make_unique<RedisDriver>(o);
}

}  // namespace fabkv::bench
