// The front end's sockets (src/memcached/shard.h): each worker's listener, its connections'
// reads and writes, and their epoll interest. A connection is read until a command is whole,
// and not read while its answers back up (a client that pipelines without reading), so that
// one client cannot hold a worker or its memory.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "common/log.h"
#include "memcached/shard.h"

namespace fabkv::memcached {

namespace {

// A connection stops being read while this much of its answers waits to be sent, or this many
// answers wait for forwarded commands (a client that pipelines without reading).
constexpr size_t kMaxOutBytes = size_t{4} << 20;
constexpr size_t kMaxPending = 4096;
// Bytes read from one connection per round, so that one busy client cannot hold the worker.
constexpr size_t kReadPerRound = size_t{256} << 10;
constexpr int kEventsPerPoll = 64;

}  // namespace

int make_listener(const std::string& host, uint16_t port, uint16_t* bound) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* ai = nullptr;
  const std::string p = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), p.c_str(), &hints, &ai);
  if (rc != 0) throw std::runtime_error(fmt::format("--memcached {}: {}", host, gai_strerror(rc)));
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(ai);
    throw std::runtime_error(fmt::format("--memcached: socket: {}", std::strerror(errno)));
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
    const int err = errno;
    freeaddrinfo(ai);
    close(fd);
    throw std::runtime_error(fmt::format("--memcached {}:{}: cannot listen: {}", host, port,
                                         std::strerror(err)));
  }
  freeaddrinfo(ai);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  *bound = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

void epoll_set(int ep, int fd, uint32_t events, int op) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  epoll_ctl(ep, op, fd, &ev);
}

bool Connections::run() {
  take_inbox();
  if (!s_.resume.empty()) {
    did_ = true;
    std::vector<std::pair<int, uint64_t>> again;
    again.swap(s_.resume);
    for (auto [fd, id] : again)
      if (Conn* c = find(fd, id); c != nullptr) process(*c);  // it checks the limits again
  }
  epoll_event evs[kEventsPerPoll];
  const int n = epoll_wait(s_.epoll_fd, evs, kEventsPerPoll, 0);
  for (int i = 0; i < n; ++i) {
    did_ = true;
    const int fd = evs[i].data.fd;
    if (fd == s_.listen_fd) {
      accept_all();
      continue;
    }
    if (static_cast<size_t>(fd) >= s_.conns.size() || !s_.conns[fd]) continue;
    Conn& c = *s_.conns[fd];
    if (evs[i].events & (EPOLLERR | EPOLLHUP)) {
      if (!(evs[i].events & EPOLLIN)) {
        close_conn(c);
        continue;
      }
    }
    if (evs[i].events & EPOLLOUT) flush_out(c);
    if (!s_.conns[fd]) continue;
    if (evs[i].events & EPOLLIN) on_readable(c);
  }
  send_outboxes();
  return did_;
}

void Connections::accept_all() {
  for (;;) {
    int fd = accept4(s_.listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE)
        spdlog::warn("memcached: cannot accept: {} (raise the descriptor limit)",
                     std::strerror(errno));
      return;
    }
    // memcached past -c (maxconns_fast): say so and close.
    if (curr_.load(std::memory_order_relaxed) >= o_.max_conns) {
      constexpr std::string_view kBusy = "ERROR Too many open connections\r\n";
      ssize_t wr = write(fd, kBusy.data(), kBusy.size());
      (void)wr;
      close(fd);
      s_.count(kRejectedConns);
      continue;
    }
    curr_.fetch_add(1, std::memory_order_relaxed);
    s_.curr_conns.fetch_add(1, std::memory_order_relaxed);
    s_.count(kTotalConns);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (static_cast<size_t>(fd) >= s_.conns.size()) s_.conns.resize(fd + 64);
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->id = s_.next_id++;
    s_.conns[fd] = std::move(c);
    epoll_set(s_.epoll_fd, fd, EPOLLIN, EPOLL_CTL_ADD);
  }
}

void Connections::close_conn(Conn& c) {
  epoll_ctl(s_.epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
  close(c.fd);
  // Forwarded commands still out come back to a connection that is gone and are dropped then
  // (find() fails); the finished ones go now.
  for (Op* op : c.pending) {
    if (op->arrived) delete op;
    else op->in_pending = false;  // still out: dropped when it comes back
  }
  curr_.fetch_sub(1, std::memory_order_relaxed);
  s_.curr_conns.fetch_sub(1, std::memory_order_relaxed);
  s_.conns[c.fd].reset();
}

void Connections::on_readable(Conn& c) {
  size_t total = 0;
  char buf[64 << 10];
  bool eof = false;
  while (total < kReadPerRound) {
    ssize_t n = read(c.fd, buf, sizeof buf);
    if (n > 0) {
      total += static_cast<size_t>(n);
      size_t take = static_cast<size_t>(n);
      size_t off = 0;
      if (c.swallow > 0 && c.in_off == c.in.size()) {  // nothing before it still to parse
        const size_t drop = std::min<uint64_t>(c.swallow, take);
        c.swallow -= drop;
        off = drop;
      }
      c.in.append(buf + off, take - off);
      if (static_cast<size_t>(n) < sizeof buf) break;
      continue;
    }
    if (n == 0) eof = true;
    else if (errno == EINTR) continue;
    else if (errno != EAGAIN && errno != EWOULDBLOCK) eof = true;
    break;
  }
  s_.count(kBytesRead, total);
  // The client has sent its last byte (it half-closed, or it is gone): as memcached, answer
  // every command it sent whole, then close (flush_out); a half command is dropped with the
  // connection, nothing of it stored. A client that is gone makes a write fail, which closes.
  if (eof) c.eof = true;
  process(c);  // may close and free the connection: `c` is not read after it
}

void Connections::process(Conn& c) {
  c.held = false;
  while (!c.closing) {
    if (c.out.size() - c.out_off > kMaxOutBytes || c.pending.size() > kMaxPending) {
      c.held = c.in_off < c.in.size();  // update_events parses on below the limits
      break;
    }
    std::string_view in(c.in.data() + c.in_off, c.in.size() - c.in_off);
    if (c.swallow > 0) {
      const size_t drop = std::min<uint64_t>(c.swallow, in.size());
      c.swallow -= drop;
      c.in_off += drop;
      in.remove_prefix(drop);
    }
    if (in.empty()) break;
    size_t used = 0;
    const bool progressed = static_cast<uint8_t>(in[0]) == binary::kRequestMagic
                                ? binary_command(c, in, &used)
                                : text_command(c, in, &used);
    c.in_off += used;
    if (!progressed) break;
  }
  if (c.in_off == c.in.size()) {
    c.in.clear();
    c.in_off = 0;
  } else if (c.in_off > (64 << 10)) {
    c.in.erase(0, c.in_off);
    c.in_off = 0;
  }
  if (s_.conns[c.fd]) flush_out(c);
}

void Connections::emit(Conn& c, std::string_view bytes) {
  if (bytes.empty()) return;
  if (c.pending.empty()) {
    c.out.append(bytes);
    return;
  }
  Op* op = new Op;
  op->ready = true;
  op->arrived = true;
  op->in_pending = true;
  op->res_value.assign(bytes);
  c.pending.push_back(op);
}

// Answers whose turn has come: the head of the queue while it is finished.
void Connections::drain_pending(Conn& c) {
  while (!c.pending.empty() && c.pending.front()->arrived) {
    Op* op = c.pending.front();
    c.pending.pop_front();
    if (op->ready) c.out.append(op->res_value);
    else format(op->call, op->res, &c.out);
    delete op;
  }
}

void Connections::flush_out(Conn& c) {
  drain_pending(c);
  while (c.out_off < c.out.size()) {
    ssize_t n = write(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off);
    if (n > 0) {
      c.out_off += static_cast<size_t>(n);
      s_.count(kBytesWritten, static_cast<uint64_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    close_conn(c);  // the peer is gone
    return;
  }
  if (c.out_off == c.out.size()) {
    c.out.clear();
    c.out_off = 0;
  }
  // quit, or the client's end with every command it sent whole answered (none held back).
  if ((c.closing || (c.eof && !c.held)) && c.out.empty() && c.pending.empty()) {
    close_conn(c);
    return;
  }
  update_events(c);
}

void Connections::update_events(Conn& c) {
  const bool backed_up = c.out.size() - c.out_off > kMaxOutBytes || c.pending.size() > kMaxPending;
  const bool may_parse = !backed_up && !c.closing;
  const bool want_read = may_parse && !c.eof;  // after the end, EPOLLIN would fire forever
  const bool want_write = c.out_off < c.out.size();
  // Parsing stopped at the limits with commands left in the buffer (process set `held`): once
  // below the limits, no EPOLLIN will say that commands wait (the client may have sent its last
  // bytes long ago, or half-closed), so the next round parses on. Whether reading was paused
  // does not matter: one flush_out can drain the answers below the limit before update_events
  // ever turned reading off. (Input left otherwise is half a command: it waits for bytes.)
  if (may_parse && c.held) {
    c.held = false;
    s_.resume.push_back({c.fd, c.id});
  }
  if (want_read == c.reading && want_write == c.writing) return;
  c.reading = want_read;
  c.writing = want_write;
  epoll_set(s_.epoll_fd, c.fd, (want_read ? EPOLLIN : 0u) | (want_write ? EPOLLOUT : 0u),
            EPOLL_CTL_MOD);
}

}  // namespace fabkv::memcached
