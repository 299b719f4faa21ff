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

#include <cerrno>
#include <charconv>
#include <cstring>
#include <algorithm>
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

// Requests awaiting their response on one connection, in order: a ring that only grows (a
// deque would allocate and free a block every 32 requests).
class CompletionQueue {
 public:
  bool empty() const { return count_ == 0; }
  void push(Completion c) {
    if (count_ == ring_.size()) {
      std::vector<Completion> bigger(std::max<size_t>(16, ring_.size() * 2));
      for (size_t i = 0; i < count_; ++i) bigger[i] = ring_[(head_ + i) % ring_.size()];
      ring_.swap(bigger);
      head_ = 0;
    }
    ring_[(head_ + count_++) % ring_.size()] = c;
  }
  Completion pop() {
    const Completion c = ring_[head_];
    head_ = (head_ + 1) % ring_.size();
    count_--;
    return c;
  }

 private:
  std::vector<Completion> ring_;
  size_t head_ = 0, count_ = 0;
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
    k.pending.push(done);
    return true;
  }
  bool put(size_t c, std::string_view key, std::string_view value, Completion done) override {
    Conn& k = conns_[c];
    if (k.fd < 0) return false;
    encode_put(key, value, &k.out);
    k.pending.push(done);
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
        Parsed p = parse(std::string_view(k.in).substr(at));
        if (p.malformed) return fail(k, "unexpected reply: " + printable(std::string_view(k.in).substr(at)));
        if (p.consumed == 0) break;
        const Completion done = k.pending.pop();
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
  };

  // The connection is unusable: everything pending fails (callbacks run with kError).
  size_t fail(Conn& k, const std::string& why) {
    const std::string reason = fmt::format("{}: {}", system_, why);
    note_error(reason);
    ::close(k.fd);
    k.fd = -1;
    size_t n = 0;
    while (!k.pending.empty()) {
      const Completion done = k.pending.pop();
      done(OpStatus::kError, reason);
      ++n;
    }
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
