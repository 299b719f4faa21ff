// HERD's answers by datagram (--herd-responses dgram, proto/herd/dgram.h) against real
// fabkv-server processes on tcp, whose datagram endpoints are libfabric's udp provider: a
// dropped answer is retried and the value read back is right; a foreign UDP socket's garbage,
// a forged answer for another client and a duplicate are counted and dropped; an answer too
// large for a datagram is refused and counted; a client killed mid-request leaves the server
// serving; a client that cannot open a datagram endpoint is refused with both sides named.
// The model-map checks of every protocol run on this mode in e2e_test.cc (tcp_write_dgram).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "proto/rpc/wire.h"
#include "server_fixture.h"
#include "support/child.h"

namespace fabkv {
namespace {

using testing::KvServer;

// tcp: the reliable side of a same-host fabkv-server, whose datagram side is udp.
constexpr const char* kProvider = "tcp";

ClientOptions options(const KvServer& s, int timeout_ms = 10000) {
  ClientOptions o;
  o.server = s.address();
  o.provider = kProvider;
  o.protocol = "herd";
  o.timeout_ms = timeout_ms;
  return o;
}

uint64_t counter(const Client& c, const char* name) {
  return c.protocol_counters().value(name, uint64_t{0});
}

// A herd counter of the server summed over its workers, once it has reached `want` or 5 s have
// passed (a worker counts an answer after it left).
uint64_t server_sum(Client& c, const char* name, uint64_t want) {
  const Deadline d = Deadline::after_ms(5000);
  while (true) {
    uint64_t n = 0;
    const nlohmann::json stats = c.stats();
    for (const auto& w : stats.at("workers"))
      n += w.at("protocols").at("herd").value(name, uint64_t{0});
    if (n >= want || d.expired()) return n;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Drives the client until `name` reaches `want` (bounded); returns what it reached.
uint64_t poll_until(Client& c, const char* name, uint64_t want) {
  const Deadline d = Deadline::after_ms(5000);
  uint64_t n = counter(c, name);
  while (n < want && !d.expired()) {
    c.poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    n = counter(c, name);
  }
  return n;
}

// One UDP datagram from a plain socket to "fi_sockaddr_in://A.B.C.D:PORT".
void send_udp(const std::string& address, const void* bytes, size_t len) {
  const std::string prefix = "fi_sockaddr_in://";
  ASSERT_EQ(address.rfind(prefix, 0), 0u) << address;
  const std::string hostport = address.substr(prefix.size());
  const size_t colon = hostport.rfind(':');
  ASSERT_NE(colon, std::string::npos) << address;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::stoi(hostport.substr(colon + 1))));
  ASSERT_EQ(inet_pton(AF_INET, hostport.substr(0, colon).c_str(), &to.sin_addr), 1) << address;
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  const ssize_t n = sendto(fd, bytes, len, 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to));
  close(fd);
  ASSERT_EQ(n, static_cast<ssize_t>(len)) << std::strerror(errno);
}

// The server drops each worker's first answer (a lossy fabric); the client's attempt times out
// and it sends the request again, whose answer comes. The PUT ran twice at the server: its
// version is the second run's, and that is the version the client is told and reads back.
TEST(HerdDgram, ADroppedAnswerIsRetriedAndTheValueReadBackIsRight) {
  KvServer server(kProvider, "herd",
                  {"--workers", "1", "--herd-responses", "dgram", "--test-herd-drop-responses",
                   "1"});
  auto c = Client::connect(options(server, 1500));  // attempts of 500 ms
  ASSERT_EQ(c->layout().at("responses"), "dgram");
  uint64_t put_version = 0, got_version = 0;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(c->put("key", "first", 0, 0, &put_version), Status::kOk);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::milliseconds(400)) << "answered before the attempt timed out";
  EXPECT_EQ(counter(*c, "retries"), 1u);
  std::string got;
  ASSERT_EQ(c->get("key", &got, &got_version), Status::kOk);
  EXPECT_EQ(got, "first");
  EXPECT_EQ(got_version, put_version);
  EXPECT_EQ(counter(*c, "retries"), 1u);  // nothing else was lost
  EXPECT_EQ(server_sum(*c, "dgram_dropped_test", 1), 1u);
  EXPECT_EQ(server_sum(*c, "puts", 2), 2u) << "a retried PUT runs again (docs/server.md)";
  EXPECT_EQ(counter(*c, "dgram_answered"), 2u);
}

// Garbage from a foreign UDP socket, an answer forged for another client, and an answer to a
// request this client never made reach the client's datagram endpoint: each is counted and
// dropped, and the client goes on with its own requests.
TEST(HerdDgram, ForeignGarbageForgedAndDuplicateDatagramsAreCountedAndDropped) {
  KvServer server(kProvider, "herd", {"--workers", "1", "--herd-responses", "dgram"});
  auto c = Client::connect(options(server));
  ASSERT_EQ(c->put("k", "v"), Status::kOk);
  const std::string address = c->protocol_counters().at("dgram_address");
  send_udp(address, "garbage", 7);
  rpc::ResponseHeader h{};
  h.seq = 1;
  h.op = static_cast<uint8_t>(rpc::OpCode::kPut);
  h.client = static_cast<uint16_t>(c->layout().at("client").get<unsigned>() + 1);
  h.epoch = static_cast<uint16_t>(c->layout().at("epoch").get<unsigned>());
  send_udp(address, &h, sizeof(h));  // another client's
  h.client--;
  h.seq = 1;  // ours, answered already: a duplicate
  send_udp(address, &h, sizeof(h));
  EXPECT_EQ(poll_until(*c, "dgram_garbage", 2), 2u);
  EXPECT_EQ(poll_until(*c, "dgram_duplicate", 1), 1u);
  std::string v;
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(c->put("k" + std::to_string(i), std::to_string(i)), Status::kOk);
    ASSERT_EQ(c->get("k" + std::to_string(i), &v), Status::kOk);
    ASSERT_EQ(v, std::to_string(i));
  }
  EXPECT_EQ(counter(*c, "retries"), 0u);
  EXPECT_EQ(counter(*c, "dgram_answered"), 41u);
}

// A value larger than a datagram holds (stored by a protocol answered by rdm): herd's GET of it
// is answered kTooLarge and counted, and herd's own PUT of such a value is refused by the
// client (the layout's max_value). Everything else is served on.
TEST(HerdDgram, AnAnswerTooLargeForADatagramIsRefusedAndCounted) {
  KvServer server(kProvider, "herd,server-reply", {"--workers", "1", "--herd-responses", "dgram"});
  auto herd = Client::connect(options(server));
  ClientOptions o = options(server);
  o.protocol = "server-reply";
  auto other = Client::connect(o);
  const size_t max_value = herd->layout().at("max_value").get<size_t>();
  ASSERT_LT(max_value, 3000u);
  const std::string big(3000, 'b');
  ASSERT_EQ(other->put("big", big), Status::kOk);
  EXPECT_EQ(herd->put("big2", big), Status::kTooLarge);
  std::string v;
  EXPECT_EQ(herd->get("big", &v), Status::kTooLarge);
  EXPECT_EQ(server_sum(*herd, "dgram_oversized", 1), 1u);
  ASSERT_EQ(herd->put("small", std::string(max_value, 's')), Status::kOk);
  ASSERT_EQ(herd->get("small", &v), Status::kOk);
  EXPECT_EQ(v, std::string(max_value, 's'));
  ASSERT_EQ(other->get("big", &v), Status::kOk);
  EXPECT_EQ(v, big);
}

// A client killed with requests in flight: its answers go to a dead address, the server drops
// its address when the control connection closes, and serves the others on.
TEST(HerdDgram, AClientKilledMidRequestLeavesTheServerServing) {
  KvServer server(kProvider, "herd", {"--workers", "2", "--herd-responses", "dgram"});
  auto c = Client::connect(options(server));
  ASSERT_EQ(c->put("survivor", "still-here"), Status::kOk);
  for (int i = 0; i < 2; ++i) {
    testing::Child victim({FABKV_VICTIM_BIN, server.address(), kProvider, "herd", "",
                           std::to_string(i)});
    std::string line;
    ASSERT_TRUE(victim.proc().read_line(&line, Deadline::after_ms(30000)))
        << victim.stderr_excerpt();
    ASSERT_EQ(line.rfind("READY", 0), 0u) << line;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // mid-request
    ASSERT_TRUE(victim.kill());
  }
  std::string v;
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(c->get("survivor", &v), Status::kOk);
    ASSERT_EQ(v, "still-here");
  }
  auto fresh = Client::connect(options(server));
  ASSERT_EQ(fresh->put("after-kill", "ok"), Status::kOk);
  ASSERT_EQ(fresh->get("after-kill", &v), Status::kOk);
  EXPECT_EQ(v, "ok");
  EXPECT_GT(server_sum(*c, "dgram_sent", 51), 50u);
}

// A client whose libfabric offers no udp (FI_PROVIDER excludes it) cannot take datagram
// answers: the connect fails, naming the server's datagram provider and the client's side.
TEST(HerdDgram, AClientWithoutDatagramEndpointsIsRefusedNamingBothSides) {
  KvServer server(kProvider, "herd", {"--workers", "1", "--herd-responses", "dgram"});
  // Read by libfabric when the child initialises it; this process has not opened a fabric.
  ASSERT_EQ(setenv("FI_PROVIDER", "^udp", 1), 0);
  testing::Child cli({FABKV_CLI_BIN, "--server", server.address(), "--provider", kProvider,
                      "--protocol", "herd", "put", "k", "v"});
  unsetenv("FI_PROVIDER");
  const int status = cli.proc().wait(Deadline::after_ms(20000));
  const std::string err = cli.stderr_excerpt();
  EXPECT_GT(status, 0) << err;
  EXPECT_NE(err.find("by datagram (udp"), std::string::npos) << err;
  EXPECT_NE(err.find("beside tcp"), std::string::npos) << err;
  EXPECT_NE(err.find("--herd-responses rdm"), std::string::npos) << err;
}

// shm has no datagram endpoints: a server asked to answer by datagram there stops at start and
// says what to serve with instead.
TEST(HerdDgram, AServerOnShmStopsAtStartNamingTheWayOut) {
  testing::Child server({FABKV_SERVER_BIN, "--provider", "shm", "--listen", "127.0.0.1:0",
                         "--herd-responses", "dgram", "--workers", "1"});
  const int status = server.proc().wait(Deadline::after_ms(20000));
  const std::string err = server.stderr_excerpt();
  EXPECT_GT(status, 0) << err;
  EXPECT_NE(err.find("shm has none"), std::string::npos) << err;
  EXPECT_NE(err.find("--provider tcp"), std::string::npos) << err;
}

}  // namespace
}  // namespace fabkv
