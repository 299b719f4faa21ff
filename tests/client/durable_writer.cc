// fabkv-durable-writer: a client process that PUTs fresh keys into a server that the durability
// tests SIGKILL at a random instant, and writes down every PUT the server acknowledged.
//   fabkv-durable-writer SERVER PROVIDER PROTOCOL SEED VALUE_BYTES
// PROTOCOL is a fabkv protocol, or "memcached" (SERVER is then the front end's HOST:PORT and
// each write is a text-protocol `set` with flags). Prints "READY", and one line per
// acknowledged write:
//   ACK <key> <n> <version> <flags>
// (the value is value_for(key, n, VALUE_BYTES), tests/client/values.h; version 0 for
// memcached), "STARTED" once kStartedAfter writes were acknowledged. fabkv protocols keep up to
// kWindow PUTs in flight. When the server is gone it prints the ACK lines, then "GONE <n>": how
// many PUTs were sent and never answered, and exits 0.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <random>
#include <string>

#include "client/client.h"

#include "values.h"

namespace {

constexpr size_t kWindow = 8;
constexpr uint64_t kStartedAfter = 10;  // acknowledgements before "STARTED"

// The acknowledgements are kept here and printed once the server is gone: a writer that
// printed each one could block on a full pipe while the test is busy, and a kill would then
// find nothing in flight.
std::string acks;
uint64_t acked = 0;

void ack(const std::string& key, uint64_t n, uint64_t version, uint32_t flags) {
  acks += "ACK " + key + " " + std::to_string(n) + " " + std::to_string(version) + " " +
          std::to_string(flags) + "\n";
  if (++acked == kStartedAfter) {
    std::printf("STARTED\n");
    std::fflush(stdout);
  }
}

void report(uint64_t unanswered, const std::string& why) {
  std::fwrite(acks.data(), 1, acks.size(), stdout);
  std::printf("GONE %llu %s\n", static_cast<unsigned long long>(unanswered), why.c_str());
  std::fflush(stdout);
}

int run_fabkv(const fabkv::ClientOptions& o, const std::string& prefix, size_t bytes) {
  std::unique_ptr<fabkv::Client> c;
  try {
    c = fabkv::Client::connect(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "writer: %s\n", e.what());
    return 1;
  }
  std::printf("READY\n");
  std::fflush(stdout);
  bool gone = false;
  uint64_t posted = 0;
  std::string why;  // how the writer learnt that the server was gone
  for (uint64_t n = 0; !gone;) {
    while (!gone && c->in_flight() < kWindow) {
      const std::string key = prefix + std::to_string(n);
      const std::string value = fabkv::testing::value_for(key, n, bytes);
      auto done = [&gone, &why, key, n](fabkv::Status s, std::string_view, uint64_t version) {
        if (s == fabkv::Status::kOk) {
          ack(key, n, version, 0);
        } else if (!gone) {
          gone = true;  // before the kill every PUT succeeds
          why = std::string("answer:") + fabkv::to_string(s);
        }
      };
      const fabkv::Status s = c->put_async(key, value, done);
      if (s == fabkv::Status::kServerGone || s == fabkv::Status::kTimeout) {
        if (!gone)
          why = std::string("post:") + fabkv::to_string(s) +
                ":in_flight=" + std::to_string(c->in_flight());
        gone = true;
      } else if (s != fabkv::Status::kOk) {
        break;
      } else posted++;
      n++;
    }
    c->poll();
  }
  c->flush();  // the rest of what was out when the server went
  // Sent and never acknowledged: in flight when the server died.
  report(posted - acked, why + ":posted=" + std::to_string(posted));
  return 0;
}

int connect_tcp(const std::string& hostport) {
  const size_t colon = hostport.rfind(':');
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* ai = nullptr;
  if (getaddrinfo(hostport.substr(0, colon).c_str(), hostport.substr(colon + 1).c_str(), &hints,
                  &ai) != 0)
    return -1;
  int fd = socket(ai->ai_family, SOCK_STREAM, 0);
  if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    close(fd);
    fd = -1;
  }
  freeaddrinfo(ai);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval tv{5, 0};  // a dead server ends the read
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  return fd;
}

// One `set` at a time (memcached's default client), so that each STORED names one key.
int run_memcached(const std::string& server, const std::string& prefix, size_t bytes,
                  uint64_t seed) {
  const int fd = connect_tcp(server);
  if (fd < 0) {
    std::fprintf(stderr, "writer: cannot connect to %s\n", server.c_str());
    return 1;
  }
  std::printf("READY\n");
  std::fflush(stdout);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::string in;
  uint64_t unanswered = 0;  // a set sent and not answered
  for (uint64_t n = 0;; n++) {
    const std::string key = prefix + std::to_string(n);
    const std::string value = fabkv::testing::value_for(key, n, bytes);
    const uint32_t flags = rng();
    const std::string cmd = "set " + key + " " + std::to_string(flags) + " 0 " +
                            std::to_string(value.size()) + "\r\n" + value + "\r\n";
    if (send(fd, cmd.data(), cmd.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(cmd.size())) break;
    unanswered = 1;
    bool stored = false;
    for (;;) {
      const size_t eol = in.find("\r\n");
      if (eol != std::string::npos) {
        stored = in.compare(0, eol, "STORED") == 0;
        in.erase(0, eol + 2);
        break;
      }
      char buf[256];
      const ssize_t r = recv(fd, buf, sizeof buf, 0);
      if (r <= 0) break;
      in.append(buf, static_cast<size_t>(r));
    }
    if (!stored) break;
    unanswered = 0;
    ack(key, n, 0, flags);
  }
  close(fd);
  report(unanswered, "memcached");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: fabkv-durable-writer SERVER PROVIDER PROTOCOL SEED VALUE_BYTES\n");
    return 2;
  }
  const std::string protocol = argv[3];
  const uint64_t seed = std::stoull(argv[4]);
  const size_t bytes = std::stoull(argv[5]);
  const std::string prefix = "durable-" + std::to_string(seed) + "-";
  if (protocol == "memcached") return run_memcached(argv[1], prefix, bytes, seed);
  fabkv::ClientOptions o;
  o.server = argv[1];
  o.provider = argv[2];
  o.protocol = protocol;
  // An fdatasync behind other processes' writes was seen to take 3 s on a busy CI disk; a
  // dead server is noticed at once anyway (its control connection closes).
  o.timeout_ms = 20000;
  return run_fabkv(o, prefix, bytes);
}
