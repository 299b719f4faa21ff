// libFuzzer target for the memcached front end's connections (docs/memcached.md, "Fuzzing"):
// one server of 2 workers with the front end runs inside the fuzzer for its whole life, and
// each input is a script of up to 4 client connections over loopback TCP that send pipelined
// bytes (text and binary commands, large values), half-close, reset, read or not, in any
// interleaving. Keys of both partitions make commands forwarded between the workers. Checked:
// no sanitizer report or crash in the server's code (it runs in this process), and at the end
// of every script each connection still open is half-closed and read: the server must answer
// what it was sent and close within kEndMs, whatever came before (a connection left hanging is
// a bug: abort()).
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "memcached/service.h"
#include "server/options.h"
#include "server/server.h"

using namespace fabkv;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fabkv-fuzz-memcached-conns: %s\n", what);
  std::abort();
}

constexpr int kConns = 4;
constexpr int kEndMs = 5000;    // a half-closed connection is answered and closed within this
constexpr int kStuckMs = 5000;  // a send that makes no progress for this long: the server hangs

uint16_t g_port = 0;

// The server, started once for the fuzzer's life (and never stopped: the process exits).
void start_server() {
  server::ServerOptions o;
  o.provider = "tcp";
  o.listen = "127.0.0.1:0";
  o.workers = 2;
  o.cores = {-1, -1};
  o.memory = size_t{32} << 20;
  o.memcached = "127.0.0.1:0";
  o.memcached_item_size = size_t{256} << 10;
  o.log_level = "error";
  spdlog::set_level(spdlog::level::err);
  server::resolve_defaults(&o);
  server::validate(o);
  static std::unique_ptr<server::Server> srv = std::make_unique<server::Server>(o);
  memcached::ServiceOptions mo;
  mo.listen = o.memcached;
  mo.max_conns = o.memcached_max_conns;
  mo.max_value = server::engine_max_value(o);
  mo.memory = o.memory;
  auto front_end = std::make_unique<memcached::Service>(mo, srv->workers());
  const std::string address = front_end->address();
  g_port = static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
  srv->attach(std::move(front_end), address);
  srv->start();
}

int connect_client() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("socket");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(g_port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) fail("connect");
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

struct Client {
  int fd = -1;
  bool half_closed = false;
};

// Reads whatever is there; false once the server has closed (or reset) the connection.
bool drain(int fd) {
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

// Sends all of `bytes`, reading the answers meanwhile (the server stops reading a connection
// whose answers back up). False when the server closed it.
bool send_all(int fd, std::string_view bytes) {
  auto last_progress = std::chrono::steady_clock::now();
  while (!bytes.empty()) {
    const ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      last_progress = std::chrono::steady_clock::now();
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    if (!drain(fd)) return false;
    pollfd p{fd, POLLOUT | POLLIN, 0};
    poll(&p, 1, 10);
    if (std::chrono::steady_clock::now() - last_progress > std::chrono::milliseconds(kStuckMs))
      fail("a send made no progress: the server neither reads nor answers");
  }
  return true;
}

// Half-closes `fd` (unless done) and reads until the server closes it.
void finish(Client& c) {
  if (!c.half_closed) shutdown(c.fd, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kEndMs);
  while (drain(c.fd)) {
    if (std::chrono::steady_clock::now() > deadline)
      fail("a half-closed connection was not closed: answers stopped coming");
    pollfd p{c.fd, POLLIN, 0};
    poll(&p, 1, 10);
  }
  close(c.fd);
  c = Client{};
}

// Resets the connection (RST): the server finds it gone, maybe in the middle of answering.
void reset(Client& c) {
  linger l{1, 0};
  setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(c.fd);
  c = Client{};
}

// Bulk bytes from two operand bytes x, y, so that a small input reaches the sizes that matter:
// x < 128, a set of a value of y KiB under one of 8 keys (answers large enough to back a
// connection up, 4 MiB in src/memcached/listener.cc); else (x & 127) * 256 + y spaces (reads
// that end exactly at the server's 64 KiB buffer, lines near the 64 KiB limit).
std::string bulk(uint8_t x, uint8_t y) {
  if (x & 0x80) return std::string(size_t{x & 0x7fu} << 8 | y, ' ');
  const size_t n = size_t{y} << 10;
  return fmt::format("set k{} 0 0 {}\r\n{}\r\n", x % 8, n, std::string(n, 'v'));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::signal(SIGPIPE, SIG_IGN);
  start_server();
  return 0;
}

// The script: op bytes, each followed by its operands. op & 3: the connection (opened at its
// first use); op >> 2 & 7: 0-3 send the next `len` bytes (one byte: len + 1), 4 half-close,
// 5 reset, 6 read what has come, 7 send bulk bytes (two operand bytes: bulk()); op >> 5: a pause
// of that many 100 us before the next op, so that the workers' rounds interleave differently.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::array<Client, kConns> conns;
  size_t i = 0;
  while (i < size) {
    const uint8_t op = data[i++];
    Client& c = conns[op & 3];
    const int kind = op >> 2 & 7;
    if (c.fd < 0) c.fd = connect_client();
    bool open = true;
    switch (kind) {
      case 0:
      case 1:
      case 2:
      case 3: {
        if (i >= size) break;
        const size_t len = std::min<size_t>(size_t{data[i]} + 1, size - i - 1);
        ++i;
        if (!c.half_closed)
          open = send_all(c.fd, std::string_view(reinterpret_cast<const char*>(data + i), len));
        i += len;
        break;
      }
      case 4:
        if (!c.half_closed) shutdown(c.fd, SHUT_WR);
        c.half_closed = true;
        break;
      case 5: reset(c); break;
      case 6: open = drain(c.fd); break;
      case 7:
        if (i + 2 > size) break;
        if (!c.half_closed) open = send_all(c.fd, bulk(data[i], data[i + 1]));
        i += 2;
        break;
    }
    if (!open && c.fd >= 0) {  // closed by the server (quit, a line too long, ...)
      close(c.fd);
      c = Client{};
    }
    if (op >> 5) std::this_thread::sleep_for(std::chrono::microseconds(100 * (op >> 5)));
  }
  for (Client& c : conns)
    if (c.fd >= 0) finish(c);
  return 0;
}
