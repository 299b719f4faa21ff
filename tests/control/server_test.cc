// The control server and client over real loopback sockets: handshakes, every rejection
// (each followed by a good client), silent peers, client death, requests, many clients.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "control/client.h"
#include "control/server.h"
#include "control/socket.h"

namespace fabkv::control {
namespace {

using namespace std::chrono_literals;

// Polls `pred` until it holds or `ms` pass; returns its last value. Tests wait on state, not
// on sleeps, so they are fast when things work and fail (not hang) when they do not.
template <typename Pred>
bool wait_until(Pred pred, int ms = 5000) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= until) return pred();
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

// Records on_close calls.
struct CloseLog {
  std::mutex mu;
  std::multiset<uint64_t> closed;
  void add(uint64_t id) {
    std::lock_guard lock(mu);
    closed.insert(id);
  }
  size_t count(uint64_t id) {
    std::lock_guard lock(mu);
    return closed.count(id);
  }
  size_t size() {
    std::lock_guard lock(mu);
    return closed.size();
  }
};

Welcome test_welcome() {
  Welcome w;
  w.provider = "tcp;ofi_rxm";
  w.fabric_addresses = {{10, 20, 30}, {40, 50}};
  w.regions.push_back({"perf.target", 0x1000, 4096, 42, kRemoteRead | kRemoteWrite});
  w.payload = {7, 7, 7};
  return w;
}

Hello good_hello() {
  Hello h;
  h.service = "perf";
  h.provider = "tcp;ofi_rxm";
  h.fabric_address = {1, 2, 3, 4};
  return h;
}

struct Fixture {
  explicit Fixture(ControlServerOptions opt = {}) : server(opt, handlers()) {}
  ControlServer::Handlers handlers() {
    ControlServer::Handlers h;
    h.on_hello = [this](uint64_t, const Hello& hello) {
      if (hello.service == "nope") {
        Welcome w;
        w.status = Status::kUnknownService;
        w.message = "no service named 'nope'";
        return w;
      }
      if (hello.service == "elsewhere") {  // as fabkv's server refuses another fabric
        Welcome w;
        w.status = Status::kRejected;
        w.message = "the server serves verbs";
        w.provider = "verbs;ofi_rxm";
        return w;
      }
      hellos.fetch_add(1);
      return test_welcome();
    };
    h.on_request = [](uint64_t id, std::span<const uint8_t> body) {
      std::vector<uint8_t> r(body.begin(), body.end());
      r.push_back(static_cast<uint8_t>(id));
      return r;
    };
    h.on_close = [this](uint64_t id) { closes.add(id); };
    return h;
  }
  std::atomic<int> hellos{0};
  CloseLog closes;
  ControlServer server;  // last: stopped (joined) before the members its handlers use die
};

ControlServerOptions fast_options(int handshake_timeout_ms = 300) {
  ControlServerOptions o;
  o.handshake_timeout_ms = handshake_timeout_ms;
  return o;
}

// Asserts that connect() throws ControlError with `status` and a message containing `text`.
void expect_rejected(const std::function<void()>& f, Status status, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "expected ControlError " << to_string(status);
  } catch (const ControlError& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

void expect_good_handshake(Fixture& fx, const std::string& secret = "") {
  ControlClient c = ControlClient::connect(fx.server.address(), good_hello(), 3000, secret);
  Welcome want = test_welcome();
  want.session_id = c.welcome().session_id;
  EXPECT_EQ(c.welcome(), want);
  EXPECT_NE(c.session_id(), 0u);
}

// A plain socket that connects and then does what the test says (usually nothing).
detail::Fd raw_connect(uint16_t port) {
  detail::Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

TEST(ControlServer, HandshakeReturnsTheServiceWelcome) {
  Fixture fx;
  ControlClient c = ControlClient::connect(fx.server.address(), good_hello(), 3000);
  Welcome want = test_welcome();
  want.session_id = c.session_id();
  EXPECT_EQ(c.welcome(), want);
  EXPECT_TRUE(c.alive());
  EXPECT_EQ(fx.hellos.load(), 1);
  auto s = fx.server.stats();
  EXPECT_EQ(s.accepted, 1u);
  EXPECT_EQ(s.handshakes_ok, 1u);
  EXPECT_EQ(s.active, 1u);
}

// Reads one whole frame from a raw socket (header, then the announced body).
std::vector<uint8_t> read_raw_frame(int fd) {
  detail::set_nonblocking(fd);  // so the deadline applies: a missing frame fails, not hangs
  std::vector<uint8_t> f(kFrameHeaderSize);
  Deadline d = Deadline::after_ms(3000);
  EXPECT_EQ(detail::recv_exact(fd, f, d).status, detail::IoStatus::kOk);
  HeaderParse hp = parse_header(f);
  EXPECT_EQ(hp.status, Status::kOk) << hp.error;
  if (hp.status != Status::kOk) return {};
  f.resize(kFrameHeaderSize + hp.header.body_length);
  EXPECT_EQ(detail::recv_exact(fd, std::span(f).subspan(kFrameHeaderSize), d).status,
            detail::IoStatus::kOk);
  return f;
}

detail::Fd raw_connect(uint16_t port);

TEST(ControlServer, HelloArrivingByteByByte) {
  // The server's stream reassembly: every split point of the Hello across TCP reads.
  Fixture fx;
  detail::Fd fd = raw_connect(fx.server.port());
  detail::set_nodelay(fd.get());
  auto hello = encode(good_hello());
  for (uint8_t b : hello) {
    ASSERT_EQ(::send(fd.get(), &b, 1, MSG_NOSIGNAL), 1);
    std::this_thread::sleep_for(200us);
  }
  WelcomeParse wp = parse_welcome(read_raw_frame(fd.get()));
  ASSERT_EQ(wp.status, Status::kOk) << wp.error;
  EXPECT_EQ(wp.welcome.status, Status::kOk) << wp.welcome.message;
  EXPECT_EQ(wp.welcome.regions, test_welcome().regions);
}

TEST(ControlServer, HelloAndRequestsPipelinedInOneSend) {
  Fixture fx;
  detail::Fd fd = raw_connect(fx.server.port());
  auto bytes = encode(good_hello());
  for (uint8_t i = 0; i < 3; ++i) {
    auto r = encode_frame(FrameType::kRequest, std::vector<uint8_t>{i});
    bytes.insert(bytes.end(), r.begin(), r.end());
  }
  ASSERT_EQ(::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
  WelcomeParse wp = parse_welcome(read_raw_frame(fd.get()));
  ASSERT_EQ(wp.status, Status::kOk) << wp.error;
  for (uint8_t i = 0; i < 3; ++i) {
    auto reply = read_raw_frame(fd.get());
    ASSERT_EQ(reply.size(), kFrameHeaderSize + 2);
    EXPECT_EQ(reply[6], static_cast<uint8_t>(FrameType::kReply));
    EXPECT_EQ(reply[kFrameHeaderSize], i);
    EXPECT_EQ(reply[kFrameHeaderSize + 1], static_cast<uint8_t>(wp.welcome.session_id));
  }
  EXPECT_EQ(fx.server.stats().requests, 3u);
}

TEST(ControlServer, PipelinedRequestsBehindASlowReader) {
  // Small requests, big replies: more reply bytes than the server's socket send buffer can
  // hold (tcp_wmem max is typically 4 MiB) while the client is not reading, so the server
  // waits for POLLOUT with the next requests already in its buffer. No new
  // POLLIN will announce those; they must still be answered once the reply drains.
  constexpr size_t kReply = 1000 * 1000;
  constexpr uint8_t kRequests = 8;
  ControlServer::Handlers h;
  h.on_request = [](uint64_t, std::span<const uint8_t> body) {
    return std::vector<uint8_t>(kReply, body.empty() ? 0 : body[0]);
  };
  ControlServer server({}, h);
  detail::Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
  int small = 4096;
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(server.port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  auto bytes = encode(good_hello());
  for (uint8_t i = 0; i < kRequests; ++i) {
    auto r = encode_frame(FrameType::kRequest, std::vector<uint8_t>{i});
    bytes.insert(bytes.end(), r.begin(), r.end());
  }
  ASSERT_EQ(::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
  std::this_thread::sleep_for(100ms);  // let the server fill its send buffer and block
  ASSERT_EQ(parse_welcome(read_raw_frame(fd.get())).status, Status::kOk);
  for (uint8_t i = 0; i < kRequests; ++i) {
    auto reply = read_raw_frame(fd.get());
    ASSERT_EQ(reply.size(), kFrameHeaderSize + kReply) << "reply " << int(i);
    EXPECT_EQ(reply[kFrameHeaderSize], i);
  }
  EXPECT_EQ(server.stats().requests, uint64_t{kRequests});
}

TEST(ControlServer, Ipv6Loopback) {
  ControlServerOptions o;
  o.host = "::1";
  std::unique_ptr<Fixture> fx;
  try {
    fx = std::make_unique<Fixture>(o);
  } catch (const std::runtime_error& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  EXPECT_EQ(fx->server.address(), "[::1]:" + std::to_string(fx->server.port()));
  expect_good_handshake(*fx);
}

TEST(ControlServer, BindFailureThrowsWithErrnoText) {
  Fixture fx;
  ControlServerOptions o;
  o.port = fx.server.port();  // already taken
  try {
    ControlServer second(o, {});
    ADD_FAILURE() << "bind to a used port succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("Address already in use"), std::string::npos) << e.what();
  }
  o.host = "not an address!";
  EXPECT_THROW(ControlServer(o, {}), std::runtime_error);
}

TEST(ControlServer, WrongVersionIsRejectedThenGoodClientServed) {
  Fixture fx;
  Hello h = good_hello();
  h.version = 3;
  expect_rejected([&] { ControlClient::connect(fx.server.address(), h, 3000); },
                  Status::kBadVersion, "version 3");
  expect_rejected([&] { ControlClient::connect(fx.server.address(), h, 3000); },
                  Status::kBadVersion, "server speaks version 2");
  EXPECT_EQ(fx.server.stats().rejected_version, 2u);
  expect_good_handshake(fx);
  EXPECT_EQ(fx.server.stats().handshakes_ok, 1u);
}

TEST(ControlServer, WrongOrMissingSecretIsRejected) {
  ControlServerOptions o;
  o.secret = "open sesame";
  Fixture fx(o);
  auto with_secret = [&](const std::string& secret) {
    return
        [&fx, secret] { ControlClient::connect(fx.server.address(), good_hello(), 3000, secret); };
  };
  expect_rejected(with_secret("open sesamE"), Status::kBadSecret, "wrong secret");
  expect_rejected(with_secret(""), Status::kBadSecret,
                  "this server requires a secret and none was sent");
  expect_rejected(with_secret("open sesame!"), Status::kBadSecret, "wrong secret");
  expect_rejected(with_secret(std::string(10000, 'x')), Status::kBadSecret, "wrong secret");
  EXPECT_EQ(fx.server.stats().rejected_secret, 4u);
  EXPECT_EQ(fx.hellos.load(), 0);  // the service never saw them
  expect_good_handshake(fx, "open sesame");
  EXPECT_EQ(fx.server.stats().handshaking, 0u);
}

// A client that has a secret is refused by a server that has none: it believes others are kept
// out, and here they are not. A client without one is served as before.
TEST(ControlServer, ASecretTheServerDoesNotHaveIsRefused) {
  Fixture fx;
  expect_rejected([&] { ControlClient::connect(fx.server.address(), good_hello(), 3000, "s"); },
                  Status::kBadSecret, "this server has no secret, but the client has one");
  EXPECT_EQ(fx.server.stats().rejected_secret, 1u);
  EXPECT_EQ(fx.hellos.load(), 0);
  expect_good_handshake(fx);
}

TEST(ControlServer, GarbageIsRejectedAsMalformed) {
  Fixture fx;
  std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  std::vector<uint8_t> bytes(http.begin(), http.end());
  expect_rejected([&] { ControlClient::connect_raw(fx.server.address(), bytes, 3000); },
                  Status::kMalformed, "bad magic");

  // A header announcing more than kMaxFrameSize.
  auto f = encode_frame(FrameType::kHello, {});
  uint32_t big = kMaxFrameSize + 1;
  for (int i = 0; i < 4; ++i) f[8 + i] = static_cast<uint8_t>(big >> (8 * i));
  expect_rejected([&] { ControlClient::connect_raw(fx.server.address(), f, 3000); },
                  Status::kMalformed, "exceeds the limit");

  // A well-framed Hello whose body is garbage.
  auto g = encode_frame(FrameType::kHello, std::vector<uint8_t>{0xff, 0xff, 0xff, 0xff, 1});
  expect_rejected([&] { ControlClient::connect_raw(fx.server.address(), g, 3000); },
                  Status::kMalformed, "auth");

  // A request before the handshake.
  auto r = encode_frame(FrameType::kRequest, {});
  expect_rejected([&] { ControlClient::connect_raw(fx.server.address(), r, 3000); },
                  Status::kMalformed, "expected a hello");

  EXPECT_EQ(fx.server.stats().malformed, 4u);
  expect_good_handshake(fx);
}

TEST(ControlServer, TruncatedThenSilentTimesOut) {
  Fixture fx(fast_options(300));
  auto f = encode(good_hello());
  std::vector<uint8_t> half_header(f.begin(), f.begin() + 6);
  expect_rejected([&] { ControlClient::connect_raw(fx.server.address(), half_header, 3000); },
                  Status::kTimeout, "handshake not completed within 300 ms (received 6 bytes)");
  std::vector<uint8_t> cut_body(f.begin(), f.end() - 3);
  expect_rejected([&] { ControlClient::connect_raw(fx.server.address(), cut_body, 3000); },
                  Status::kTimeout, "handshake not completed");
  EXPECT_EQ(fx.server.stats().timed_out, 2u);
  expect_good_handshake(fx);
}

TEST(ControlServer, ClientDeadlineFiresWhenServerNeverAnswers) {
  // A listener that never accepts: the kernel completes the TCP handshake, nobody answers.
  detail::Fd l(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(l.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(l.get(), 4), 0);
  socklen_t len = sizeof a;
  getsockname(l.get(), reinterpret_cast<sockaddr*>(&a), &len);
  std::string addr = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  expect_rejected([&] { ControlClient::connect(addr, good_hello(), 200); }, Status::kTimeout,
                  "waiting for welcome");
}

TEST(ControlServer, ConnectionRefusedAndBadAddress) {
  uint16_t port;
  {
    Fixture fx;
    port = fx.server.port();
  }
  expect_rejected(
      [&] { ControlClient::connect("127.0.0.1:" + std::to_string(port), good_hello(), 1000); },
      Status::kConnectionFailed, "refused");
  expect_rejected([&] { ControlClient::connect("localhost", good_hello(), 1000); },
                  Status::kConnectionFailed, "bad server address");
}

TEST(ControlServer, SilentClientsDoNotDelayOthers) {
  // Long handshake timeout: if a silent peer could block the server, the good clients below
  // would wait for it to expire.
  Fixture fx(fast_options(20000));
  std::vector<detail::Fd> silent;
  for (int i = 0; i < 5; ++i) silent.push_back(raw_connect(fx.server.port()));
  auto hdr = encode(good_hello());
  for (int i = 0; i < 5; ++i) {
    detail::Fd fd = raw_connect(fx.server.port());
    ASSERT_EQ(::send(fd.get(), hdr.data(), 7, MSG_NOSIGNAL), 7);  // half a header
    silent.push_back(std::move(fd));
  }
  ASSERT_TRUE(wait_until([&] { return fx.server.stats().handshaking == 10; }));
  for (int i = 0; i < 10; ++i) expect_good_handshake(fx);
  auto s = fx.server.stats();
  EXPECT_EQ(s.handshakes_ok, 10u);
  EXPECT_EQ(s.timed_out, 0u);     // nobody had to wait for the silent peers' deadline
  EXPECT_EQ(s.handshaking, 10u);  // and they are still pending
}

TEST(ControlServer, RejectionsConcurrentWithGoodClients) {
  ControlServerOptions o = fast_options(200);
  o.secret = "k";
  Fixture fx(o);
  std::atomic<bool> done{false};
  std::atomic<int> bad_tries{0};
  std::thread bad([&] {
    std::vector<uint8_t> junk = {'j', 'u', 'n', 'k', 0, 0, 0, 0, 0, 0, 0, 0};
    Hello v = good_hello();
    v.version = 9;
    int i = 0;
    while (!done.load()) {
      try {
        switch (i++ % 3) {
          case 0: ControlClient::connect_raw(fx.server.address(), junk, 3000); break;
          case 1: ControlClient::connect(fx.server.address(), v, 3000, "k"); break;
          default: ControlClient::connect(fx.server.address(), good_hello(), 3000, "x"); break;
        }
        ADD_FAILURE() << "bad client accepted";
      } catch (const ControlError&) {
      }
      bad_tries++;
    }
  });
  std::thread silent([&] {
    std::vector<detail::Fd> fds;
    while (!done.load() && fds.size() < 20) {
      fds.push_back(raw_connect(fx.server.port()));
      std::this_thread::sleep_for(5ms);
    }
  });
  for (int i = 0; i < 30; ++i) expect_good_handshake(fx, "k");
  // The 30 good handshakes can all end before the bad thread's first try is refused (seen 1 in
  // 40 runs): the good ones are only concurrent with bad ones if the bad thread keeps going
  // until each of its three kinds has been refused once.
  Deadline d = Deadline::after_ms(5000);
  while (bad_tries.load() < 3 && !d.expired()) std::this_thread::sleep_for(1ms);
  done.store(true);
  bad.join();
  silent.join();
  // The server counts a refusal after sending it: the count may trail the client's error.
  auto s = fx.server.stats();
  while (s.malformed + s.rejected_version + s.rejected_secret < 3 && !d.expired()) {
    std::this_thread::sleep_for(1ms);
    s = fx.server.stats();
  }
  EXPECT_EQ(s.handshakes_ok, 30u);
  EXPECT_GE(bad_tries.load(), 3);
  EXPECT_GE(s.malformed + s.rejected_version + s.rejected_secret, 3u);
}

TEST(ControlServer, HandlerRejectionReachesClient) {
  Fixture fx;
  Hello h = good_hello();
  h.service = "nope";
  expect_rejected([&] { ControlClient::connect(fx.server.address(), h, 3000); },
                  Status::kUnknownService, "no service named 'nope'");
  EXPECT_EQ(fx.server.stats().rejected_by_handler, 1u);
  expect_good_handshake(fx);
}

// The provider a refusal names reaches the client as ControlError::server_provider() (an auto
// client follows it, src/client/session.cc); the control channel's own refusals name none.
TEST(ControlServer, ARefusalHandsTheServersProviderToTheClient) {
  Fixture fx;
  Hello h = good_hello();
  h.service = "elsewhere";
  try {
    ControlClient::connect(fx.server.address(), h, 3000);
    ADD_FAILURE() << "admitted";
  } catch (const ControlError& e) {
    EXPECT_EQ(e.status(), Status::kRejected) << e.what();
    EXPECT_EQ(e.server_provider(), "verbs;ofi_rxm") << e.what();
  }
  h = good_hello();
  h.version = 1;
  try {
    ControlClient::connect(fx.server.address(), h, 3000);
    ADD_FAILURE() << "admitted";
  } catch (const ControlError& e) {
    EXPECT_EQ(e.status(), Status::kBadVersion) << e.what();
    EXPECT_EQ(e.server_provider(), "") << e.what();
  }
  expect_good_handshake(fx);
}

TEST(ControlServer, HandlerThatThrowsRejectsOnlyThatClient) {
  ControlServer::Handlers h;
  std::atomic<int> n{0};
  h.on_hello = [&](uint64_t, const Hello&) -> Welcome {
    if (n.fetch_add(1) == 0) throw std::runtime_error("out of regions");
    return Welcome{};
  };
  ControlServer server({}, h);
  expect_rejected([&] { ControlClient::connect(server.address(), good_hello(), 3000); },
                  Status::kRejected, "out of regions");
  ControlClient c = ControlClient::connect(server.address(), good_hello(), 3000);
  EXPECT_TRUE(c.alive());
}

TEST(ControlServer, ServerBusyBeyondMaxSessions) {
  ControlServerOptions o;
  o.max_sessions = 2;
  Fixture fx(o);
  ControlClient a = ControlClient::connect(fx.server.address(), good_hello(), 3000);
  ControlClient b = ControlClient::connect(fx.server.address(), good_hello(), 3000);
  expect_rejected([&] { ControlClient::connect(fx.server.address(), good_hello(), 3000); },
                  Status::kServerBusy, "server busy");
  EXPECT_EQ(fx.server.stats().rejected_busy, 1u);
  a.close();
  ASSERT_TRUE(wait_until([&] { return fx.server.stats().active == 1; }));
  expect_good_handshake(fx);
}

TEST(ControlServer, RequestsAfterHandshake) {
  Fixture fx;
  ControlClient c = ControlClient::connect(fx.server.address(), good_hello(), 3000);
  for (int i = 0; i < 50; ++i) {
    std::vector<uint8_t> body(static_cast<size_t>(i), static_cast<uint8_t>(i));
    std::vector<uint8_t> reply = c.request(body, 3000);
    body.push_back(static_cast<uint8_t>(c.session_id()));
    ASSERT_EQ(reply, body);
  }
  // A large request crosses several reads on the server side.
  std::vector<uint8_t> big(512 * 1024, 0x5a);
  auto reply = c.request(big, 5000);
  EXPECT_EQ(reply.size(), big.size() + 1);
  EXPECT_EQ(fx.server.stats().requests, 51u);
  EXPECT_TRUE(c.alive());
}

TEST(ControlServer, RequestWithoutHandlerGetsErrorAndSessionSurvives) {
  ControlServer server({}, {});
  ControlClient c = ControlClient::connect(server.address(), good_hello(), 3000);
  expect_rejected([&] { c.request(std::vector<uint8_t>{1}, 3000); }, Status::kRejected,
                  "takes no requests");
  EXPECT_TRUE(c.alive());
  expect_rejected([&] { c.request(std::vector<uint8_t>{1}, 3000); }, Status::kRejected,
                  "takes no requests");
}

TEST(ControlServer, OnCloseFiresWhenClientSocketCloses) {
  Fixture fx;
  ControlClient a = ControlClient::connect(fx.server.address(), good_hello(), 3000);
  uint64_t id_a = a.session_id();
  std::optional<ControlClient> b = ControlClient::connect(fx.server.address(), good_hello(), 3000);
  uint64_t id_b = b->session_id();
  EXPECT_NE(id_a, id_b);
  a.close();
  EXPECT_FALSE(a.alive());
  ASSERT_TRUE(wait_until([&] { return fx.closes.count(id_a) == 1; }));
  b.reset();  // destructor closes
  ASSERT_TRUE(wait_until([&] { return fx.closes.count(id_b) == 1; }));
  auto s = fx.server.stats();
  EXPECT_EQ(s.closed, 2u);
  EXPECT_EQ(s.active, 0u);
  EXPECT_EQ(fx.closes.size(), 2u);
}

TEST(ControlServer, OnCloseFiresWhenClientProcessDies) {
  // Fork before the server starts its thread, so the child is single-threaded.
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    uint16_t port = 0;
    if (read(to_child[0], &port, sizeof port) != sizeof port) _exit(2);
    try {
      ControlClient c = ControlClient::connect("127.0.0.1:" + std::to_string(port), good_hello(),
                                               3000);
      uint64_t id = c.session_id();
      if (write(to_parent[1], &id, sizeof id) != sizeof id) _exit(3);
      pause();  // killed by the parent while connected
    } catch (...) {
      _exit(4);
    }
    _exit(5);
  }
  Fixture fx;
  uint16_t port = fx.server.port();
  ASSERT_EQ(write(to_child[1], &port, sizeof port), static_cast<ssize_t>(sizeof port));
  uint64_t id = 0;
  ASSERT_EQ(read(to_parent[0], &id, sizeof id), static_cast<ssize_t>(sizeof id));
  EXPECT_EQ(fx.server.stats().active, 1u);
  EXPECT_EQ(fx.closes.count(id), 0u);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  // Killed by our SIGKILL while connected, not ended by anything of its own before (its exit
  // codes 2-5 say which step failed).
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  EXPECT_TRUE(wait_until([&] { return fx.closes.count(id) == 1; }));
  EXPECT_EQ(fx.server.stats().active, 0u);
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) ::close(fd);
}

TEST(ControlServer, StopClosesSessionsAndFiresOnClose) {
  auto fx = std::make_unique<Fixture>();
  ControlClient c = ControlClient::connect(fx->server.address(), good_hello(), 3000);
  uint64_t id = c.session_id();
  fx->server.stop();
  EXPECT_EQ(fx->closes.count(id), 1u);  // fired before stop() returned
  EXPECT_TRUE(wait_until([&] { return !c.alive(); }));
  expect_rejected([&] { c.request(std::vector<uint8_t>{1}, 1000); }, Status::kConnectionFailed,
                  "closed");
  fx->server.stop();  // idempotent
}

TEST(ControlServer, ClientDeathDoesNotKillServerWithSigpipe) {
  // A client that sends a request and disappears before the reply: the server's send must
  // fail quietly (MSG_NOSIGNAL), not raise SIGPIPE.
  Fixture fx;
  for (int i = 0; i < 20; ++i) {
    ControlClient c = ControlClient::connect(fx.server.address(), good_hello(), 3000);
    detail::Fd raw = raw_connect(fx.server.port());
    auto h = encode(good_hello());
    auto req = encode_frame(FrameType::kRequest, std::vector<uint8_t>(200000, 1));
    h.insert(h.end(), req.begin(), req.end());
    (void)::send(raw.get(), h.data(), h.size(), MSG_NOSIGNAL);
    struct linger lg {
      1, 0
    };  // close with RST
    setsockopt(raw.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  expect_good_handshake(fx);
}

TEST(ControlServer, ManyConcurrentClients) {
  Fixture fx;
  constexpr int kThreads = 8, kPerThread = 25;
  std::vector<std::vector<ControlClient>> held(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        try {
          held[t].push_back(ControlClient::connect(fx.server.address(), good_hello(), 10000));
          std::vector<uint8_t> body = {static_cast<uint8_t>(i)};
          if (held[t].back().request(body, 10000).size() != 2) failures.fetch_add(1);
        } catch (const ControlError& e) {
          failures.fetch_add(1);
          ADD_FAILURE() << e.what();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  std::set<uint64_t> ids;
  for (auto& v : held)
    for (auto& c : v) ids.insert(c.session_id());
  EXPECT_EQ(ids.size(), size_t{kThreads * kPerThread});
  auto s = fx.server.stats();
  EXPECT_EQ(s.handshakes_ok, uint64_t{kThreads * kPerThread});
  EXPECT_EQ(s.active, uint64_t{kThreads * kPerThread});
  held.clear();
  EXPECT_TRUE(wait_until([&] { return fx.closes.size() == size_t{kThreads * kPerThread}; }));
  EXPECT_EQ(fx.server.stats().active, 0u);
}

// ----------------------------------------------------------------- the secret's challenge

// A TCP proxy for one connection to the server that keeps a copy of every byte each way: what
// a client really puts on the wire.
class RecordingProxy {
 public:
  explicit RecordingProxy(uint16_t server_port) : server_port_(server_port) {
    listen_ = detail::Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(listen_.get(), reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(::listen(listen_.get(), 1), 0);
    EXPECT_EQ(::getsockname(listen_.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~RecordingProxy() {
    stop_.store(true);
    thread_.join();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::vector<uint8_t> from_client() {
    std::lock_guard lock(mu_);
    return up_;
  }
  std::vector<uint8_t> from_server() {
    std::lock_guard lock(mu_);
    return down_;
  }

 private:
  void run() {
    pollfd l{listen_.get(), POLLIN, 0};
    while (!stop_.load() && ::poll(&l, 1, 20) <= 0) {
    }
    if (stop_.load()) return;
    detail::Fd client(::accept(listen_.get(), nullptr, nullptr));
    detail::Fd server = raw_connect(server_port_);
    pollfd fds[2] = {{client.get(), POLLIN, 0}, {server.get(), POLLIN, 0}};
    uint8_t buf[4096];
    while (!stop_.load()) {
      if (::poll(fds, 2, 20) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].revents == 0) continue;
        ssize_t n = ::recv(fds[i].fd, buf, sizeof buf, 0);
        if (n <= 0) return;  // either side closed: so does the proxy
        {
          std::lock_guard lock(mu_);
          auto& log = i == 0 ? up_ : down_;
          log.insert(log.end(), buf, buf + n);
        }
        Deadline d = Deadline::after_ms(3000);
        if (detail::send_all(fds[1 - i].fd, std::span<const uint8_t>(buf, n), d).status !=
            detail::IoStatus::kOk)
          return;
      }
    }
  }

  uint16_t server_port_;
  uint16_t port_ = 0;
  detail::Fd listen_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<uint8_t> up_, down_;
  std::thread thread_;  // last: started once everything it uses exists
};

bool contains(const std::vector<uint8_t>& haystack, const std::string& needle) {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end()) !=
         haystack.end();
}

// Splits a byte stream into whole frames (header + body).
std::vector<std::vector<uint8_t>> split_frames(const std::vector<uint8_t>& bytes) {
  std::vector<std::vector<uint8_t>> frames;
  size_t at = 0;
  while (bytes.size() - at >= kFrameHeaderSize) {
    HeaderParse hp = parse_header(std::span(bytes).subspan(at, kFrameHeaderSize));
    if (hp.status != Status::kOk || bytes.size() - at - kFrameHeaderSize < hp.header.body_length)
      break;
    size_t n = kFrameHeaderSize + hp.header.body_length;
    frames.emplace_back(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                        bytes.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  return frames;
}

// What a client with a secret sends is its Hello (which only says it has one) and an HMAC
// over the server's nonce: the secret itself appears nowhere in the bytes, either way.
TEST(ControlServer, TheSecretNeverAppearsOnTheWire) {
  const std::string secret = "correct horse battery staple";
  ControlServerOptions o;
  o.secret = secret;
  Fixture fx(o);
  RecordingProxy proxy(fx.server.port());
  {
    ControlClient c = ControlClient::connect(proxy.address(), good_hello(), 3000, secret);
    EXPECT_NE(c.session_id(), 0u);
  }
  EXPECT_TRUE(wait_until([&] { return fx.closes.size() == 1; }));
  std::vector<uint8_t> up = proxy.from_client(), down = proxy.from_server();
  // The capture is real: the Hello's service and provider are in it, as the Hello and the
  // Proof frames, and the server's Challenge and Welcome came back.
  EXPECT_TRUE(contains(up, "perf"));
  EXPECT_TRUE(contains(up, "tcp;ofi_rxm"));
  auto sent = split_frames(up);
  ASSERT_EQ(sent.size(), 2u);
  HelloParse hp = parse_hello(sent[0]);
  ASSERT_EQ(hp.status, Status::kOk) << hp.error;
  EXPECT_EQ(hp.hello.auth, AuthMethod::kHmacSha256);
  EXPECT_EQ(parse_proof(sent[1]).status, Status::kOk);
  auto got = split_frames(down);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(parse_challenge(got[0]).status, Status::kOk);
  EXPECT_EQ(parse_welcome(got[1]).welcome.status, Status::kOk);
  // Nor any part of it that a reader could start from.
  for (const std::string& piece : {secret, std::string("correct horse"), std::string("staple")}) {
    EXPECT_FALSE(contains(up, piece)) << piece;
    EXPECT_FALSE(contains(down, piece)) << piece;
  }
}

// A handshake captured on the wire and played again: the server's fresh nonce makes the old
// Proof worthless, however exactly it is replayed.
TEST(ControlServer, AReplayedProofIsRefused) {
  const std::string secret = "open sesame";
  ControlServerOptions o;
  o.secret = secret;
  Fixture fx(o);
  std::vector<uint8_t> captured;
  {
    RecordingProxy proxy(fx.server.port());
    ControlClient c = ControlClient::connect(proxy.address(), good_hello(), 3000, secret);
    captured = proxy.from_client();
  }
  auto frames = split_frames(captured);
  ASSERT_EQ(frames.size(), 2u);  // Hello, Proof
  std::set<std::vector<uint8_t>> nonces;
  for (int i = 0; i < 3; ++i) {
    detail::Fd fd = raw_connect(fx.server.port());
    ASSERT_EQ(::send(fd.get(), frames[0].data(), frames[0].size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(frames[0].size()));
    ChallengeParse cp = parse_challenge(read_raw_frame(fd.get()));
    ASSERT_EQ(cp.status, Status::kOk) << cp.error;
    nonces.insert(cp.challenge.nonce);
    ASSERT_EQ(::send(fd.get(), frames[1].data(), frames[1].size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(frames[1].size()));
    WelcomeParse wp = parse_welcome(read_raw_frame(fd.get()));
    ASSERT_EQ(wp.status, Status::kOk) << wp.error;
    EXPECT_EQ(wp.welcome.status, Status::kBadSecret);
    EXPECT_EQ(wp.welcome.message, "wrong secret");
  }
  EXPECT_EQ(nonces.size(), 3u);  // a fresh nonce for every connection
  EXPECT_EQ(fx.server.stats().rejected_secret, 3u);
  EXPECT_EQ(fx.hellos.load(), 1);  // only the real client reached the service
  // The same Proof also proves nothing about another Hello: a proof covers the Hello it
  // answers for, and a client that knows the secret is still served.
  expect_good_handshake(fx, secret);
}

// Other frames in the wrong place: a Proof where a Hello belongs, a Proof of the wrong size, a
// client that never answers the challenge. Each gets its answer and the server serves on.
TEST(ControlServer, ChallengeMisusesGetClearAnswers) {
  ControlServerOptions o = fast_options(300);
  o.secret = "k";
  Fixture fx(o);
  Proof proof;
  proof.mac.assign(kProofSize, 1);
  expect_rejected([&] { ControlClient::connect_raw(fx.server.address(), encode(proof), 3000); },
                  Status::kMalformed, "expected a hello frame, got type 7");
  Hello h = good_hello();
  h.auth = AuthMethod::kHmacSha256;
  {
    detail::Fd fd = raw_connect(fx.server.port());
    auto hello = encode(h);
    ASSERT_EQ(::send(fd.get(), hello.data(), hello.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(hello.size()));
    ASSERT_EQ(parse_challenge(read_raw_frame(fd.get())).status, Status::kOk);
    auto short_proof = encode_frame(FrameType::kProof, std::vector<uint8_t>{3, 0, 0, 0, 1, 2, 3});
    ASSERT_EQ(::send(fd.get(), short_proof.data(), short_proof.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(short_proof.size()));
    WelcomeParse wp = parse_welcome(read_raw_frame(fd.get()));
    EXPECT_EQ(wp.welcome.status, Status::kMalformed);
    EXPECT_NE(wp.welcome.message.find("mac"), std::string::npos) << wp.welcome.message;
  }
  {
    detail::Fd fd = raw_connect(fx.server.port());
    auto hello = encode(h);
    ASSERT_EQ(::send(fd.get(), hello.data(), hello.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(hello.size()));
    ASSERT_EQ(parse_challenge(read_raw_frame(fd.get())).status, Status::kOk);
    WelcomeParse wp = parse_welcome(read_raw_frame(fd.get()));  // after the 300 ms deadline
    EXPECT_EQ(wp.welcome.status, Status::kTimeout);
    EXPECT_NE(wp.welcome.message.find("no answer to the secret's challenge"), std::string::npos)
        << wp.welcome.message;
  }
  auto s = fx.server.stats();
  EXPECT_EQ(s.timed_out, 1u);
  EXPECT_EQ(s.malformed, 2u);
  EXPECT_EQ(fx.hellos.load(), 0);
  expect_good_handshake(fx, "k");
  EXPECT_TRUE(wait_until([&] { return fx.server.stats().handshaking == 0; }));
}

// Peers of the version before: a v1 client (its Hello carried the secret in clear) is told the
// versions apart, and so is this client by a v1 server (whose refusal keeps the frozen prefix).
TEST(ControlServer, Version1PeersAreRefusedWithBothVersions) {
  ControlServerOptions o;
  o.secret = "open sesame";
  Fixture fx(o);
  // A v1 Hello: secret, service, provider, fabric_address, payload, each a u32 length + bytes.
  std::vector<uint8_t> v1 = {'F', 'K', 'V', 'C', 1, 0, 1, 0, 0, 0, 0, 0};
  for (const std::string& field : {std::string("open sesame"), std::string("perf"),
                                   std::string("tcp;ofi_rxm"), std::string(), std::string()}) {
    for (int i = 0; i < 4; ++i) v1.push_back(static_cast<uint8_t>(field.size() >> (8 * i)));
    v1.insert(v1.end(), field.begin(), field.end());
  }
  v1[8] = static_cast<uint8_t>(v1.size() - kFrameHeaderSize);
  expect_rejected([&] { ControlClient::connect_raw(fx.server.address(), v1, 3000); },
                  Status::kBadVersion,
                  "client speaks control protocol version 1, server speaks version 2");
  EXPECT_EQ(fx.server.stats().rejected_version, 1u);
  expect_good_handshake(fx, "open sesame");

  // A v1 server: it reads our header, answers a v1 Welcome that refuses us, and closes.
  detail::Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), len), 0);
  ASSERT_EQ(::listen(listener.get(), 1), 0);
  ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  std::thread v1_server([&] {
    detail::Fd c(::accept(listener.get(), nullptr, nullptr));
    std::vector<uint8_t> header(kFrameHeaderSize);
    detail::set_nonblocking(c.get());
    (void)detail::recv_exact(c.get(), header, Deadline::after_ms(3000));
    Welcome w;
    w.status = Status::kBadVersion;
    w.message = "client speaks control protocol version 2, server speaks version 1";
    auto f = encode(w);
    f[4] = 1;
    (void)detail::send_all(c.get(), f, Deadline::after_ms(3000));
    ::shutdown(c.get(), SHUT_WR);
    uint8_t drain[256];
    Deadline d = Deadline::after_ms(1000);
    while (!d.expired() && ::recv(c.get(), drain, sizeof drain, 0) != 0)
      std::this_thread::sleep_for(1ms);
  });
  expect_rejected(
      [&] {
        ControlClient::connect("127.0.0.1:" + std::to_string(ntohs(a.sin_port)), good_hello(), 3000,
                               "open sesame");
      },
      Status::kBadVersion, "server speaks version 1");
  v1_server.join();
}

}  // namespace
}  // namespace fabkv::control
