// The front end's sockets (src/memcached/shard.h): each worker's listener, its connections'
// reads and writes, and their epoll interest. A connection is read until a command is whole,
// and not read while its answers back up (a client that pipelines without reading), so that
// one client cannot hold a worker or its memory.
//
// Answers in bounded memory. Commands are taken, and a retrieval line's keys read one by one,
// only while the connection has room for answers (shard.h kMaxOutBytes): so a multi-get of any
// number of keys, or a pipeline of any length, streams its answers in pieces, as memcached
// does, whether or not the client reads them. A buffer that has drained keeps at most
// kKeepBufferBytes, so an idle connection holds little whatever it once sent or received.
//
// The server's total. Each shard counts what its connections' buffers hold (Conn::charged:
// input and output capacity, queued answers, forwarded commands' data and allowances); what a
// connection holds beyond kShedFloorBytes counts against the shard's share of
// --memcached-conn-memory (an idle connection, or one with a small command, never does). A
// connection takes nothing more while that share is used up, and waits (it still finishes a
// command whose bytes are coming; alone, it may take one item). At the end of the round the
// shard closes the connections whose clients have read nothing for kStalledMs while answers
// wait for them, or whose command has not completed for kStalledInputMs, until there is room
// again (for one item more, when some wait), and lets the waiting go on, those whose clients
// read most recently first. So the share is passed only by what connections took in the round
// that filled it, and a client that reads and sends whole commands is never closed.
#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "memcached/shard.h"

namespace fabkv::memcached {

namespace {

// Bytes read from one connection per round, so that one busy client cannot hold the worker.
constexpr size_t kReadPerRound = size_t{256} << 10;
constexpr int kEventsPerPoll = 64;
// The capacity a drained input or output buffer keeps (above it the buffer is given back): an
// idle connection then holds at most twice this, whatever its largest command or answer was.
constexpr size_t kKeepBufferBytes = size_t{16} << 10;
constexpr size_t kShedFloorBytes = 2 * kKeepBufferBytes;
// A client that has read nothing for this long while answers wait for it may be closed for
// memory (only such a one is): far longer than a client that reads takes between two reads,
// short enough that one waiting for room in the share waits little. Tried: 500 ms made a reading
// client wait up to 4.5 s for room behind 100 clients that never read (limits_test.cc).
constexpr int64_t kStalledMs = 100;
// The same for a command whose bytes have not all come for this long while it holds more than
// the floor of them (a client that sends a large value slowly, or stops half-way).
constexpr int64_t kStalledInputMs = 1000;

size_t excess(size_t charged) { return charged > kShedFloorBytes ? charged - kShedFloorBytes : 0; }

// Its shard's share of --memcached-conn-memory is used up, with what `c` holds now and `more`:
// it takes nothing more until there is room (shed() makes some).
bool over_budget(const Service::Shard& s, const Conn& c, size_t more = 0) {
  const size_t others = s.excess - excess(c.charged);
  // Alone, a connection may always take one item, even past a share smaller than an item.
  if (others == 0 && held(c) == 0) return false;
  const size_t mine = held(c) + c.in.capacity() + more;
  return others + excess(mine) >= s.budget;
}

// A value to fetch again (Conn::wants) at the head of `c`'s answers waits only for the others:
// its own answers queued behind it cannot go before it.
bool others_over_budget(const Service::Shard& s, const Conn& c, size_t item) {
  const size_t others = s.excess - excess(c.charged);
  return others != 0 && others + excess(item) >= s.budget;
}

int64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

// The bytes a socket has not had acknowledged (SIOCOUTQ): they go down as its client reads, even
// while epoll does not yet call the socket writable (Linux waits for a third of its buffer).
int unsent(int fd) {
  int n = 0;
  return ioctl(fd, SIOCOUTQ, &n) == 0 ? n : 0;
}

// While the rest of a get line is coming, its input is read even when its answers have no room,
// up to this much unparsed: clients such as pylibmc and pymemcache send a whole multi-get before
// they read any answer, and a line longer than the sockets' buffers would otherwise wait for
// ever. (memcached reads a get line whole.)
constexpr size_t kMaxGetLineInput = size_t{64} << 20;

// Empties `b` and gives its memory back when it grew past kKeepBufferBytes.
void reset_buffer(std::string& b) {
  if (b.capacity() > kKeepBufferBytes) std::string().swap(b);
  else b.clear();
}

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
    for (auto [fd, id] : again) {
      if (Conn* c = find(fd, id); c != nullptr) {
        c->resume_queued = false;
        process(*c);
      }
    }
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
  if (s_.excess > s_.budget || !s_.budget_waiters.empty()) shed();
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
    if (op->arrived || op == c.parked) delete op;
    else op->in_pending = false;  // still out: dropped when it comes back
  }
  // Commands held back behind retrievals (forward.cc, "Order") were sent whole: they run, their
  // answers dropped as those of the others still out.
  for (Op* op : c.held_back) s_.outbox[op->owner].push_back(op);
  if (s_.overdraft == std::pair(c.fd, c.id)) s_.overdraft = {-1, 0};
  if (c.metadump) svc_.end_metadump();
  s_.buffered -= c.charged;
  s_.excess -= excess(c.charged);
  s_.buffered_bytes.store(s_.buffered, std::memory_order_relaxed);
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
  c.stalled = false;
  bool completed = false;  // a command was taken
  while (!c.closing) {
    // No room for more answers, or a key listing answers first: wait (update_events resumes).
    // A command whose bytes were still coming is finished first, whatever the share: its input
    // is bounded, and it is what the connection holds.
    if (!has_room(c) || c.listing || (over_budget(s_, c) && !c.partial)) {
      c.stalled = true;
      break;
    }
    c.partial = false;
    std::string_view in(c.in.data() + c.in_off, c.in.size() - c.in_off);
    if (c.swallow > 0) {
      const size_t drop = std::min<uint64_t>(c.swallow, in.size());
      c.swallow -= drop;
      c.in_off += drop;
      in.remove_prefix(drop);
    }
    if (c.get.skip_line) {  // the rest of a retrieval line with a key too long
      const size_t nl = in.find('\n');
      c.in_off += nl == std::string_view::npos ? in.size() : nl + 1;
      if (nl == std::string_view::npos) break;
      c.get.skip_line = false;
      continue;
    }
    if (c.get.active) {
      if (!retrieval_step(c)) break;
      continue;
    }
    if (in.empty()) break;
    size_t used = 0;
    const bool progressed = static_cast<uint8_t>(in[0]) == binary::kRequestMagic
                                ? binary_command(c, in, &used)
                                : text_command(c, in, &used);
    c.in_off += used;
    if (!progressed) break;
    completed = true;
  }
  if (c.in_off == c.in.size()) {
    reset_buffer(c.in);
    c.in_off = 0;
  } else if (c.in_off > (64 << 10) && c.in_off >= c.in.size() / 2) {  // amortised: a long line
    c.in.erase(0, c.in_off);
    c.in_off = 0;
  }
  // Waiting for the rest of a command: its bytes keep being read, share or not, and one that
  // holds more than the floor of them may be closed for memory if it does not complete.
  c.partial = !c.stalled && !c.closing && c.in_off < c.in.size();
  if (!c.partial || c.in.capacity() <= kShedFloorBytes) c.partial_since_ms = -1;
  else if (completed || c.partial_since_ms < 0) c.partial_since_ms = now_ms();
  if (s_.conns[c.fd]) flush_out(c);
}

// The next key of the retrieval line being answered (Conn::get): false when it waits for input.
bool Connections::retrieval_step(Conn& c) {
  const NextKey k = next_key(std::string_view(c.in).substr(c.in_off));
  c.in_off += k.consumed;
  c.get.no_newline -= std::min(c.get.no_newline, k.consumed);
  switch (k.status) {
    case KeyScan::kNeedMore: return false;
    case KeyScan::kEnd:
      c.get.active = false;
      if (c.get.keys == 0) return refuse(c, "ERROR\r\n");  // memcached: no key, no command
      emit(c, "END\r\n");
      return true;
    case KeyScan::kTooLong:
      // The answers of the keys before it may be out already: the error ends the line.
      c.get.active = false;
      c.get.skip_line = true;
      return refuse(c, "CLIENT_ERROR bad command line format\r\n");
    case KeyScan::kKey: break;
  }
  ++c.get.keys;
  const bool gat = c.get.verb == Verb::kGat || c.get.verb == Verb::kGats;
  Call call;
  call.verb = c.get.verb;
  call.req.kind = gat ? Kind::kGat : Kind::kGet;
  call.req.expire_at = c.get.expire_at;
  call.req.key = k.key;
  submit(c, call);
  return true;
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
  op->charge = bytes.size();
  c.queued += op->charge;
  c.pending.push_back(op);
}

// Answers whose turn has come: the head of the queue while it is finished.
void Connections::drain_pending(Conn& c) {
  while (!c.pending.empty() && c.pending.front()->arrived) {
    Op* op = c.pending.front();
    if (op->deferred) {  // a value above its allowance: fetched again, now that it leads
      c.wants = o_.max_value;
      if (others_over_budget(s_, c, c.wants)) {
        // Room for any item in the shard's share, or the overdraft: the others' memory may be
        // answers queued behind their own deferred heads, which wait for room as this one
        // does. One connection at a time goes on past the share, until that item is written.
        if (s_.overdraft.first >= 0 && s_.overdraft != std::pair(c.fd, c.id)) {
          wait_for_budget(c);
          return;
        }
        s_.overdraft = {c.fd, c.id};
        c.overdraft_until = UINT64_MAX;  // set when its answer is queued to be written
      }
      c.wants = 0;
      refetch(c, op);
      return;
    }
    c.pending.pop_front();
    c.queued -= op->charge;
    reserve_answer(c.out, op->res_value.size());
    if (op->ready) c.out.append(op->res_value);
    else format(op->call, op->res, &c.out);
    if (c.overdraft_until == UINT64_MAX && s_.overdraft == std::pair(c.fd, c.id))
      c.overdraft_until = c.written + (c.out.size() - c.out_off);  // the refetched answer's end
    delete op;
  }
}

void Connections::flush_out(Conn& c) {
  drain_pending(c);
  while (c.out_off < c.out.size()) {
    ssize_t n = write(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off);
    if (n > 0) {
      c.out_off += static_cast<size_t>(n);
      c.written += static_cast<uint64_t>(n);
      s_.count(kBytesWritten, static_cast<uint64_t>(n));
      c.blocked_since_ms = -1;  // the client reads
      c.read_at_ms = now_ms();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (c.blocked_since_ms < 0) {
        c.blocked_since_ms = now_ms();
        c.outq = unsent(c.fd);
      }
      break;
    }
    close_conn(c);  // the peer is gone
    return;
  }
  if (c.out_off == c.out.size()) {
    reset_buffer(c.out);
    c.out_off = 0;
    c.blocked_since_ms = -1;
  } else if (c.out_off >= kKeepBufferBytes && c.out_off >= c.out.size() / 2) {
    // What is written goes (at most as many bytes moved as were written): a client that reads
    // as fast as answers come would otherwise never see the buffer drain, and it would keep
    // every answer ever sent to it.
    c.out.erase(0, c.out_off);
    c.out_off = 0;
  }
  if (s_.overdraft == std::pair(c.fd, c.id) && c.written >= c.overdraft_until)
    s_.overdraft = {-1, 0};  // the item it fetched past the share is out
  // quit, or the client's end with every command it sent whole answered (none held back).
  if ((c.closing || (c.eof && !c.stalled)) && c.out.empty() && c.pending.empty()) {
    close_conn(c);
    return;
  }
  // A listing's next piece waits in `pending` for room (dump.cc).
  if (c.parked != nullptr && has_room(c)) {
    s_.outbox[c.parked->dump.partition].push_back(c.parked);
    c.parked = nullptr;
  }
  account(c);
  update_events(c);
}

// Closes `c` to give its memory back (shed()), telling it so where that cannot fall inside an
// answer.
void Connections::close_for_memory(Conn& c) {
  constexpr std::string_view kOutOfMemory = "SERVER_ERROR out of memory\r\n";
  s_.count(kMemoryCloses);
  if (c.out_off == c.out.size()) {
    ssize_t wr = write(c.fd, kOutOfMemory.data(), kOutOfMemory.size());
    (void)wr;
  }
  spdlog::debug("memcached: closing connection {} holding {} bytes (--memcached-conn-memory)", c.id,
                c.charged);
  close_conn(c);
}

void Connections::update_events(Conn& c) {
  // Commands are read and taken only while their answers have room (and no listing runs), and
  // read only while less than a read's worth of them waits unparsed: a client that pipelines
  // faster than the server answers would otherwise pile its commands up here.
  const bool takes = !c.closing && has_room(c) && !c.listing && !over_budget(s_, c);
  const bool line_coming = c.get.active && !c.closing && !over_budget(s_, c) &&
                           c.in.size() - c.in_off < kMaxGetLineInput && !line_end_read(c);
  // After the client's end, EPOLLIN would fire forever: what it sent is in the buffer.
  const bool want_read = !c.eof &&
                         ((takes && c.in.size() - c.in_off < kReadPerRound) || line_coming ||
                          (c.partial && !c.closing && has_room(c) && !c.listing));
  const bool want_write = c.out_off < c.out.size();
  // Parsing stopped for want of room, and there is room again: what waits in the buffer is
  // taken next round (no EPOLLIN will say it is there: the client may have sent its last bytes
  // long ago, or half-closed). Whether reading was paused does not matter: one flush_out can
  // drain the answers below the limit before update_events ever turned reading off.
  if (takes && c.stalled && !c.resume_queued) {
    c.resume_queued = true;
    s_.resume.push_back({c.fd, c.id});
  }
  if (!takes && !c.closing && over_budget(s_, c)) wait_for_budget(c);
  if (want_read == c.reading && want_write == c.writing) return;
  c.reading = want_read;
  c.writing = want_write;
  epoll_set(s_.epoll_fd, c.fd, (want_read ? EPOLLIN : 0u) | (want_write ? EPOLLOUT : 0u),
            EPOLL_CTL_MOD);
}

// Whether the end of the get line being answered is in `c`'s input already (then nothing more
// of it needs reading). Each byte is looked at once (Retrieval::no_newline).
bool Connections::line_end_read(Conn& c) {
  const size_t from = c.in_off + c.get.no_newline;
  if (from >= c.in.size()) return false;
  if (std::memchr(c.in.data() + from, '\n', c.in.size() - from) != nullptr) return true;
  c.get.no_newline = c.in.size() - c.in_off;
  return false;
}

// `c` waits for room in its shard's share of --memcached-conn-memory (shed() lets it go on).
void Connections::wait_for_budget(Conn& c) {
  if (c.budget_wait) return;
  c.budget_wait = true;
  s_.budget_waiters.push_back({c.fd, c.id});
}

// What `c` holds, into its shard's total.
void Connections::account(Conn& c) {
  const size_t now = c.in.capacity() + c.out.capacity() + c.queued + c.in_flight;
  s_.buffered = s_.buffered - c.charged + now;
  s_.excess = s_.excess - excess(c.charged) + excess(now);
  c.charged = now;
  s_.buffered_bytes.store(s_.buffered, std::memory_order_relaxed);
}

// The shard's connections hold more than its share of --memcached-conn-memory, or some wait
// for room in it: the connections whose clients have read nothing for kStalledMs while answers
// wait for them, or whose command has not completed for kStalledInputMs, are closed, longest
// stood still first, until the share has room for one item more (when some wait) or is kept. A
// client that reads is never closed for memory: it is what the others wait for, and its own
// answers go as it reads them.
void Connections::shed() {
  const size_t target = s_.budget_waiters.empty()  ? s_.budget
                        : s_.budget > o_.max_value ? s_.budget - o_.max_value
                                                   : 0;
  const int64_t now = now_ms();
  if (s_.excess > target) {
    // A client that has read since its socket was seen full is reading, whether or not a write
    // went out since (epoll may not have called the socket writable yet).
    for (auto& c : s_.conns) {
      if (!c || c->blocked_since_ms < 0 || now - c->blocked_since_ms < kStalledMs) continue;
      if (const int q = unsent(c->fd); q < c->outq) {
        c->outq = q;
        c->blocked_since_ms = now;
        c->read_at_ms = now;
      }
    }
    std::vector<Conn*> v;
    auto since = [now](const Conn& c) {  // how long it has stood still, -1: it has not
      if (c.blocked_since_ms >= 0 && now - c.blocked_since_ms >= kStalledMs)
        return now - c.blocked_since_ms;
      if (c.partial_since_ms >= 0 && now - c.partial_since_ms >= kStalledInputMs)
        return now - c.partial_since_ms;
      return int64_t{-1};
    };
    for (auto& c : s_.conns)
      if (c && c->charged > kShedFloorBytes && since(*c) >= 0) v.push_back(c.get());
    std::sort(v.begin(), v.end(),
              [&](const Conn* a, const Conn* b) { return since(*a) > since(*b); });
    for (Conn* c : v) {
      if (s_.excess <= target) break;
      close_for_memory(*c);
    }
  }
  // Those that now have room go on, the clients that read most recently first (they take the
  // room before one that has not read yet, which may never); the others are looked at again next
  // round (a worker runs one at least every 10 ms, Worker::block_st), not spun on.
  std::vector<Conn*> waiting;
  for (auto [fd, id] : s_.budget_waiters)
    if (Conn* c = find(fd, id); c != nullptr) waiting.push_back(c);
  s_.budget_waiters.clear();
  std::stable_sort(waiting.begin(), waiting.end(),
                   [](const Conn* a, const Conn* b) { return a->read_at_ms > b->read_at_ms; });
  for (Conn* c : waiting) {
    if (c->wants != 0 ? others_over_budget(s_, *c, c->wants) : over_budget(s_, *c)) {
      s_.budget_waiters.push_back({c->fd, c->id});
      continue;
    }
    c->budget_wait = false;
    if (!c->resume_queued) {  // parsed again next round, its answers drained
      c->resume_queued = true;
      s_.resume.push_back({c->fd, c->id});
    }
  }
}

}  // namespace fabkv::memcached
