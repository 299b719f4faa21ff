#include "control/server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "common/deadline.h"
#include "common/log.h"
#include "control/auth.h"
#include "control/socket.h"

namespace fabkv::control {

using detail::Fd;

namespace {

// How long a rejected connection may take to read our answer before we close it. We shut
// down our write side and drain the client's leftovers instead of closing at once, because
// closing with unread input makes the kernel send RST, which can destroy the answer before
// the client reads it.
constexpr int kLingerMs = 1000;
// When accept() fails for lack of fds, retry after this long instead of spinning.
constexpr int kAcceptBackoffMs = 100;
// Bytes read from one connection per poll round, so one fast sender cannot starve others.
constexpr size_t kReadBudget = 256 * 1024;

// kHandshake waits for the Hello; kChallenged (a server with a secret) for the Proof that
// answers our Challenge. Both run under the handshake deadline.
enum class Phase { kHandshake, kChallenged, kEstablished, kClosing };
bool handshaking(Phase p) { return p == Phase::kHandshake || p == Phase::kChallenged; }

struct Connection {
  Fd fd;
  std::string peer;
  uint64_t session_id = 0;
  Phase phase = Phase::kHandshake;
  bool established = false;  // completed the handshake at some point: on_close owed
  bool dead = false;         // remove at the end of this round
  bool write_shut = false;
  Clock::time_point deadline;  // handshake deadline, or linger deadline when closing
  std::vector<uint8_t> in;
  std::vector<uint8_t> out;
  size_t out_off = 0;
  // kChallenged: the Hello as parsed and as received (the Proof covers its bytes), and the
  // nonce we sent.
  Hello hello;
  std::vector<uint8_t> hello_frame;
  std::vector<uint8_t> nonce;
};

}  // namespace

class ControlServer::Impl {
 public:
  Impl(ControlServerOptions options, Handlers handlers)
      : opt_(std::move(options)), h_(std::move(handlers)) {
    opt_.host = detail::unbracket(opt_.host);
    listen_ = bind_listener();
    wake_ = Fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!wake_.valid()) throw std::runtime_error("control: eventfd: " + detail::errno_text(errno));
    spdlog::info("control: listening on {} (handshake timeout {} ms, secret {})", address(),
                 opt_.handshake_timeout_ms, opt_.secret.empty() ? "none" : "required");
    thread_ = std::thread([this] { run(); });
  }

  ~Impl() { stop(); }

  void stop() {
    stop_.store(true);
    uint64_t one = 1;
    if (write(wake_.get(), &one, sizeof one) < 0) {
      // The eventfd counter cannot overflow with single increments; nothing to do.
    }
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  }

  uint16_t port() const { return port_; }
  std::string address() const { return detail::format_host_port(opt_.host, port_); }
  ControlServerStats stats() const {
    std::lock_guard lock(stats_mu_);
    return stats_;
  }

 private:
  Fd bind_listener() {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    std::string service = std::to_string(opt_.port);
    int rc = getaddrinfo(opt_.host.empty() ? nullptr : opt_.host.c_str(), service.c_str(), &hints,
                         &res);
    if (rc != 0)
      throw std::runtime_error("control: cannot resolve listen address " + opt_.host + ": " +
                               gai_strerror(rc));
    std::string last = "no address";
    Fd fd;
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      Fd s(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol));
      if (!s.valid()) {
        last = "socket: " + detail::errno_text(errno);
        continue;
      }
      int one = 1;
      setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(s.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
        last = "bind: " + detail::errno_text(errno);
        continue;
      }
      if (::listen(s.get(), 1024) != 0) {
        last = "listen: " + detail::errno_text(errno);
        continue;
      }
      fd = std::move(s);
      break;
    }
    freeaddrinfo(res);
    if (!fd.valid())
      throw std::runtime_error("control: cannot listen on " +
                               detail::format_host_port(opt_.host, opt_.port) + ": " + last);
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    return fd;
  }

  template <typename F>
  void count(F f) {
    std::lock_guard lock(stats_mu_);
    f(stats_);
  }

  // ---- the control thread; every function below runs only on it ----

  void run() {
    std::vector<pollfd> fds;
    std::vector<Connection*> owners;
    while (!stop_.load()) {
      auto now = Clock::now();
      fds.clear();
      owners.clear();
      fds.push_back({wake_.get(), POLLIN, 0});
      bool accepting = now >= accept_paused_until_;
      if (accepting) fds.push_back({listen_.get(), POLLIN, 0});
      Clock::time_point next = now + std::chrono::seconds(1);
      if (!accepting) next = std::min(next, accept_paused_until_);
      for (auto& [id, c] : conns_) {
        short ev = 0;
        bool pending_out = c.out_off < c.out.size();
        if (pending_out) ev |= POLLOUT;
        // An established session answers one request at a time: stop reading while a reply
        // is still queued, so a client that never reads cannot grow our buffers.
        if (!(c.phase == Phase::kEstablished && pending_out)) ev |= POLLIN;
        fds.push_back({c.fd.get(), ev, 0});
        owners.push_back(&c);
        if (c.phase != Phase::kEstablished) next = std::min(next, c.deadline);
      }
      auto wait = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
      int n = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait, 0)));
      if (n < 0 && errno != EINTR) {
        spdlog::error("control: poll failed: {}", detail::errno_text(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      if (stop_.load()) break;
      size_t base = accepting ? 2 : 1;
      if (n > 0) {
        if (fds[0].revents) drain_wake();
        for (size_t i = 0; i < owners.size(); ++i) {
          if (fds[base + i].revents) on_events(*owners[i], fds[base + i].revents);
        }
        if (accepting && fds[1].revents) accept_all();
      }
      expire(Clock::now());
      reap();
    }
    shutdown_all();
  }

  void drain_wake() {
    uint64_t v;
    while (read(wake_.get(), &v, sizeof v) > 0) {
    }
  }

  void accept_all() {
    for (;;) {
      int raw = accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (raw < 0) {
        int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK) return;
        if (err == EINTR || err == ECONNABORTED) continue;
        // EMFILE/ENFILE/ENOBUFS: the pending connection stays in the backlog; retry later
        // instead of spinning on a listener that stays readable.
        spdlog::warn("control: accept failed: {}; pausing accepts for {} ms",
                     detail::errno_text(err), kAcceptBackoffMs);
        accept_paused_until_ = Clock::now() + std::chrono::milliseconds(kAcceptBackoffMs);
        return;
      }
      detail::set_nodelay(raw);
      uint64_t id = next_session_id_++;
      Connection& c = conns_[id];
      c.fd = Fd(raw);
      c.peer = detail::peer_name(raw);
      c.session_id = id;
      c.deadline = Clock::now() + std::chrono::milliseconds(opt_.handshake_timeout_ms);
      count([](ControlServerStats& s) {
        ++s.accepted;
        ++s.handshaking;
      });
      spdlog::debug("control: accepted {} (session {})", c.peer, id);
      if (open_sessions() > opt_.max_sessions) {
        count([](ControlServerStats& s) { ++s.rejected_busy; });
        reject(c, Status::kServerBusy,
               "server busy: " + std::to_string(opt_.max_sessions) + " sessions open");
      }
    }
  }

  size_t open_sessions() const {
    size_t n = 0;
    for (const auto& [id, c] : conns_)
      if (c.phase != Phase::kClosing) ++n;
    return n;
  }

  void on_events(Connection& c, short revents) {
    if (c.dead) return;
    // POLLERR/POLLHUP with a reply queued: the send fails and marks the peer gone, instead of
    // poll reporting the hang-up forever while POLLIN is off.
    if (revents & (POLLOUT | POLLERR | POLLHUP)) {
      flush(c);
      // Requests pipelined behind a reply that had to wait for POLLOUT are already in the
      // buffer; no new POLLIN will announce them.
      if (!c.dead && c.phase == Phase::kEstablished && c.out.empty()) process_input(c);
    }
    if (c.dead) return;
    if (revents & (POLLIN | POLLHUP | POLLERR)) read_some(c);
  }

  void read_some(Connection& c) {
    uint8_t buf[64 * 1024];
    size_t budget = kReadBudget;
    while (!c.dead && budget > 0) {
      // Stop reading an established session with a reply queued (see run()).
      if (c.phase == Phase::kEstablished && c.out_off < c.out.size()) return;
      ssize_t n = ::recv(c.fd.get(), buf, std::min(sizeof buf, budget), 0);
      if (n > 0) {
        budget -= static_cast<size_t>(n);
        if (c.phase == Phase::kClosing) continue;  // draining: discard
        c.in.insert(c.in.end(), buf, buf + n);
        process_input(c);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      on_peer_gone(c, n == 0 ? "closed the connection" : detail::errno_text(errno));
      return;
    }
  }

  void on_peer_gone(Connection& c, const std::string& why) {
    if (c.phase == Phase::kChallenged) {
      spdlog::warn("control: {} {} before answering the secret's challenge", c.peer, why);
    } else if (c.phase == Phase::kHandshake) {
      // Went away before completing a Hello: a probe, or a client that gave up.
      if (!c.in.empty()) {
        count([](ControlServerStats& s) { ++s.malformed; });
        spdlog::warn("control: {} {} after {} bytes of an incomplete hello", c.peer, why,
                     c.in.size());
      } else {
        spdlog::debug("control: {} {} before sending a hello", c.peer, why);
      }
    } else if (c.phase == Phase::kEstablished) {
      spdlog::debug("control: session {} ({}) ended: {}", c.session_id, c.peer, why);
    }
    c.dead = true;
  }

  void process_input(Connection& c) {
    while (!c.dead && c.phase != Phase::kClosing && c.in.size() >= kFrameHeaderSize) {
      if (c.phase == Phase::kEstablished && c.out_off < c.out.size()) return;
      HeaderParse hp = parse_header(std::span(c.in).first(kFrameHeaderSize));
      if (hp.status != Status::kOk) {
        protocol_error(c, hp.status, hp.error);
        return;
      }
      const FrameHeader& h = hp.header;
      if (h.version != kProtocolVersion) {
        // Decided on the header alone: the body of another version has another layout.
        std::string msg = "client speaks control protocol version " + std::to_string(h.version) +
                          ", server speaks version " + std::to_string(kProtocolVersion);
        if (handshaking(c.phase)) count([](ControlServerStats& s) { ++s.rejected_version; });
        protocol_error(c, Status::kBadVersion, msg);
        return;
      }
      FrameType want = c.phase == Phase::kHandshake    ? FrameType::kHello
                       : c.phase == Phase::kChallenged ? FrameType::kProof
                                                       : FrameType::kRequest;
      if (h.type != static_cast<uint16_t>(want)) {
        protocol_error(c, Status::kMalformed,
                       "expected a " + std::string(to_string(want)) + " frame, got type " +
                           std::to_string(h.type));
        return;
      }
      size_t need = kFrameHeaderSize + h.body_length;
      if (c.in.size() < need) return;
      std::span<const uint8_t> frame = std::span(c.in).first(need);
      if (c.phase == Phase::kHandshake) handle_hello(c, frame);
      else if (c.phase == Phase::kChallenged) handle_proof(c, frame);
      else handle_request(c, frame.subspan(kFrameHeaderSize));
      // A rejected Hello moved the connection to kClosing, which already dropped the input.
      if (c.phase == Phase::kClosing || c.dead) return;
      c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(need));
    }
  }

  // A frame that cannot be processed: during the handshake the client gets a Welcome with
  // the status (what its connect() reads); afterwards an Error frame. Then close.
  void protocol_error(Connection& c, Status status, const std::string& msg) {
    if (status == Status::kMalformed) count([](ControlServerStats& s) { ++s.malformed; });
    if (handshaking(c.phase)) {
      reject(c, status, msg);
    } else {
      spdlog::warn("control: session {} ({}) protocol error, closing: {}", c.session_id, c.peer,
                   msg);
      start_closing(c, encode_error(status, msg));
    }
  }

  void handle_hello(Connection& c, std::span<const uint8_t> frame) {
    HelloParse p = parse_hello(frame);
    if (p.status != Status::kOk) {
      if (p.status == Status::kMalformed) count([](ControlServerStats& s) { ++s.malformed; });
      else if (p.status == Status::kBadVersion)
        count([](ControlServerStats& s) { ++s.rejected_version; });
      reject(c, p.status, p.error);
      return;
    }
    // The secret never travels (docs/control-channel.md, "The handshake"): a client that has
    // one says so, and proves it by answering a fresh nonce.
    const bool client_has_secret = p.hello.auth != AuthMethod::kNone;
    if (!opt_.secret.empty() && !client_has_secret) {
      count([](ControlServerStats& s) { ++s.rejected_secret; });
      reject(c, Status::kBadSecret, "this server requires a secret and none was sent");
      return;
    }
    if (opt_.secret.empty() && client_has_secret) {
      // Refused rather than ignored: the client believes it talks to a server that keeps
      // others out, and this one does not.
      count([](ControlServerStats& s) { ++s.rejected_secret; });
      reject(c, Status::kBadSecret,
             "this server has no secret, but the client has one: start the client without it");
      return;
    }
    if (!client_has_secret) {
      admit(c, p.hello);
      return;
    }
    try {
      c.nonce = make_nonce();
    } catch (const std::exception& e) {
      spdlog::error("control: no challenge for {}: {}", c.peer, e.what());
      reject(c, Status::kRejected, std::string("server error: ") + e.what());
      return;
    }
    c.hello = std::move(p.hello);
    c.hello_frame.assign(frame.begin(), frame.end());
    c.phase = Phase::kChallenged;
    Challenge ch;
    ch.nonce = c.nonce;
    queue(c, encode(ch));
  }

  // The answer to our Challenge: HMAC-SHA256 keyed by the secret over the nonce we sent and
  // the Hello as we received it, compared in constant time (control/auth.h). A Proof made
  // for another nonce (a captured handshake played again) does not match.
  void handle_proof(Connection& c, std::span<const uint8_t> frame) {
    ProofParse p = parse_proof(frame);
    if (p.status != Status::kOk) {
      if (p.status == Status::kMalformed) count([](ControlServerStats& s) { ++s.malformed; });
      else if (p.status == Status::kBadVersion)
        count([](ControlServerStats& s) { ++s.rejected_version; });
      reject(c, p.status, p.error);
      return;
    }
    bool matches = false;
    try {
      matches = proof_matches(compute_proof(opt_.secret, c.nonce, c.hello_frame), p.proof.mac);
    } catch (const std::exception& e) {
      spdlog::error("control: cannot check {}'s proof: {}", c.peer, e.what());
      reject(c, Status::kRejected, std::string("server error: ") + e.what());
      return;
    }
    c.nonce.clear();  // one answer per nonce
    c.hello_frame.clear();
    if (!matches) {
      count([](ControlServerStats& s) { ++s.rejected_secret; });
      reject(c, Status::kBadSecret, "wrong secret");
      return;
    }
    Hello hello = std::move(c.hello);
    c.hello = Hello{};
    admit(c, hello);
  }

  // A client that may come in (right version, secret proven where there is one): the
  // service's on_hello decides, and its Welcome goes out.
  void admit(Connection& c, const Hello& hello) {
    Welcome w;
    if (h_.on_hello) {
      try {
        w = h_.on_hello(c.session_id, hello);
      } catch (const std::exception& e) {
        spdlog::error("control: on_hello for {} threw: {}", c.peer, e.what());
        w = Welcome{};
        w.status = Status::kRejected;
        w.message = std::string("server error: ") + e.what();
      }
    }
    std::string over = check_limits(w);
    if (!over.empty()) {
      spdlog::error("control: welcome for {} (service '{}') exceeds wire limits: {}", c.peer,
                    hello.service, over);
      w = Welcome{};
      w.status = Status::kRejected;
      w.message = "server error: welcome exceeds wire limits: " + over;
    }
    if (w.status != Status::kOk) {
      count([](ControlServerStats& s) { ++s.rejected_by_handler; });
      Status status = w.status;
      std::string message = w.message;  // not w.message: w is moved into the same call
      reject(c, status, message, std::move(w));
      return;
    }
    w.session_id = c.session_id;
    c.phase = Phase::kEstablished;
    c.established = true;
    // Count before sending: a client that has its Welcome must see itself in stats().
    count([](ControlServerStats& s) {
      ++s.handshakes_ok;
      ++s.active;
      --s.handshaking;
    });
    queue(c, encode(w));
    spdlog::debug("control: session {} established with {} (service '{}', provider '{}')",
                  c.session_id, c.peer, hello.service, hello.provider);
  }

  void handle_request(Connection& c, std::span<const uint8_t> body) {
    count([](ControlServerStats& s) { ++s.requests; });
    if (!h_.on_request) {
      queue(c, encode_error(Status::kRejected, "this service takes no requests"));
      return;
    }
    try {
      std::vector<uint8_t> reply = h_.on_request(c.session_id, body);
      if (reply.size() > kMaxFrameSize) {
        spdlog::error("control: reply for session {} is {} bytes, over the frame limit",
                      c.session_id, reply.size());
        queue(c, encode_error(Status::kRejected, "server error: reply exceeds kMaxFrameSize"));
        return;
      }
      queue(c, encode_frame(FrameType::kReply, reply));
    } catch (const std::exception& e) {
      spdlog::error("control: on_request for session {} threw: {}", c.session_id, e.what());
      queue(c, encode_error(Status::kRejected, std::string("server error: ") + e.what()));
    }
  }

  // Sends a Welcome with a non-kOk status during the handshake, logs it, and closes.
  void reject(Connection& c, Status status, const std::string& msg, Welcome w = {}) {
    spdlog::warn("control: rejected {} ({}): {}", c.peer, to_string(status), msg);
    w.status = status;
    w.message = msg;
    w.session_id = 0;
    start_closing(c, encode(w));
  }

  void queue(Connection& c, std::vector<uint8_t> frame) {
    if (c.out_off == c.out.size()) {
      c.out = std::move(frame);
      c.out_off = 0;
    } else {
      c.out.insert(c.out.end(), frame.begin(), frame.end());
    }
    flush(c);
  }

  void flush(Connection& c) {
    while (c.out_off < c.out.size()) {
      ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      on_peer_gone(c, detail::errno_text(errno));
      return;
    }
    c.out.clear();
    c.out_off = 0;
    if (c.phase == Phase::kClosing && !c.write_shut) {
      ::shutdown(c.fd.get(), SHUT_WR);
      c.write_shut = true;
    }
  }

  // Sends `last_words`, then shuts down our side and drains until EOF or the linger deadline.
  // Counters change before the frame goes out, so a client that has read its answer sees
  // them in stats().
  void start_closing(Connection& c, std::vector<uint8_t> last_words) {
    if (handshaking(c.phase)) count([](ControlServerStats& s) { --s.handshaking; });
    c.phase = Phase::kClosing;
    c.in.clear();
    c.deadline = Clock::now() + std::chrono::milliseconds(
                                    std::min(kLingerMs, std::max(opt_.handshake_timeout_ms, 1)));
    queue(c, std::move(last_words));
  }

  void expire(Clock::time_point now) {
    for (auto& [id, c] : conns_) {
      if (c.dead || c.phase == Phase::kEstablished || now < c.deadline) continue;
      if (c.phase == Phase::kClosing) {
        c.dead = true;  // linger over: the client had its chance to read the answer
        continue;
      }
      count([](ControlServerStats& s) { ++s.timed_out; });
      reject(c, Status::kTimeout,
             "handshake not completed within " + std::to_string(opt_.handshake_timeout_ms) +
                 " ms (" +
                 (c.phase == Phase::kChallenged
                      ? std::string("no answer to the secret's challenge")
                      : "received " + std::to_string(c.in.size()) + " bytes") +
                 ")");
    }
  }

  void reap() {
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (!it->second.dead) {
        ++it;
        continue;
      }
      finish(it->second);
      it = conns_.erase(it);
    }
  }

  // Last words for a connection: counters and on_close for a session that had handshaken.
  void finish(Connection& c) {
    if (handshaking(c.phase)) count([](ControlServerStats& s) { --s.handshaking; });
    if (!c.established) return;
    count([](ControlServerStats& s) {
      ++s.closed;
      --s.active;
    });
    if (h_.on_close) {
      try {
        h_.on_close(c.session_id);
      } catch (const std::exception& e) {
        spdlog::error("control: on_close for session {} threw: {}", c.session_id, e.what());
      }
    }
  }

  void shutdown_all() {
    for (auto& [id, c] : conns_) finish(c);
    conns_.clear();
    listen_.reset();
    spdlog::info("control: stopped listening on {}", address());
  }

  ControlServerOptions opt_;
  Handlers h_;
  Fd listen_;
  Fd wake_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;

  mutable std::mutex stats_mu_;
  ControlServerStats stats_;

  // Owned by the control thread.
  std::map<uint64_t, Connection> conns_;
  uint64_t next_session_id_ = 1;
  Clock::time_point accept_paused_until_{};
};

ControlServer::ControlServer(ControlServerOptions options, Handlers handlers)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handlers))) {}

ControlServer::~ControlServer() = default;

void ControlServer::stop() { impl_->stop(); }
uint16_t ControlServer::port() const { return impl_->port(); }
std::string ControlServer::address() const { return impl_->address(); }
ControlServerStats ControlServer::stats() const { return impl_->stats(); }

}  // namespace fabkv::control
