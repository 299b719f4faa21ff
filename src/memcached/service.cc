#include "memcached/service.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <unordered_set>

#include <fmt/format.h>

#include "common/log.h"
#include "control/client.h"
#include "control/socket.h"
#include "memcached/binary.h"
#include "memcached/exec.h"
#include "memcached/text.h"
#include "store/hash.h"
#include "store/stats.h"

namespace fabkv::memcached {

namespace {

constexpr std::string_view kVersionString = "1.6.21-fabkv";
// A connection stops being read while this much of its answers waits to be sent, or this many
// answers wait for forwarded commands (a client that pipelines without reading).
constexpr size_t kMaxOutBytes = size_t{4} << 20;
constexpr size_t kMaxPending = 4096;
// Bytes read from one connection per round, so that one busy client cannot hold the worker.
constexpr size_t kReadPerRound = size_t{256} << 10;
constexpr int kEventsPerPoll = 64;

uint32_t now_s() { return store::realtime_seconds(nullptr); }

enum class Style : uint8_t { kText, kMeta, kBinary };

// Everything needed to run one key's command and to answer it.
struct Call {
  Request req;
  Style style = Style::kText;
  Verb verb = Verb::kGet;  // text and meta
  bool noreply = false;    // text noreply, meta q, binary quiet
  std::span<const std::string_view> meta;  // meta flags
  uint8_t opcode = 0;  // binary
  uint32_t opaque = 0;
};

// memcached's stats counters, per shard: written by its worker only (store::add_st).
enum Counter : size_t {
  kCmdGet, kCmdSet, kCmdFlush, kCmdTouch, kGetHits, kGetMisses, kDeleteHits, kDeleteMisses,
  kIncrHits, kIncrMisses, kDecrHits, kDecrMisses, kCasHits, kCasMisses, kCasBadval, kTouchHits,
  kTouchMisses, kBytesRead, kBytesWritten, kTotalConns, kRejectedConns, kForwarded,
  kClientErrors, kCounters
};
constexpr const char* kCounterNames[kCounters] = {
    "cmd_get", "cmd_set", "cmd_flush", "cmd_touch", "get_hits", "get_misses", "delete_hits",
    "delete_misses", "incr_hits", "incr_misses", "decr_hits", "decr_misses", "cas_hits",
    "cas_misses", "cas_badval", "touch_hits", "touch_misses", "bytes_read", "bytes_written",
    "total_connections", "rejected_connections", "forwarded", "client_errors"};

}  // namespace

// A command forwarded to its key's owner, and back.
struct Op {
  Call call;
  uint32_t origin = 0;  // the connection's shard
  int fd = -1;
  uint64_t conn_id = 0;
  std::string key, value;
  std::vector<std::string> meta_own;
  std::vector<std::string_view> meta_views;
  Result res;
  std::string res_value, scratch;
  bool done = false;     // run by the owner (written there, read here after the inbox lock)
  bool arrived = false;  // back at its connection's shard (origin thread only)
  bool in_pending = false;  // its connection waits for it to answer in order
  bool ready = false;       // a finished answer in `res_value`, queued behind forwarded ones
};

struct Conn {
  int fd = -1;
  uint64_t id = 0;
  std::string in;
  size_t in_off = 0;
  std::string out;
  size_t out_off = 0;
  std::deque<Op*> pending;  // answers in command order, some still at their owner
  uint64_t swallow = 0;     // bytes still to drop (a refused data block)
  bool closing = false;     // quit: close once the answers are out
  bool reading = true;      // EPOLLIN wanted
  bool writing = false;     // EPOLLOUT wanted
  TextCommand cmd;
};

struct Service::Shard {
  uint32_t index = 0;
  int listen_fd = -1;
  int epoll_fd = -1;
  std::vector<std::unique_ptr<Conn>> conns;  // by fd
  uint64_t next_id = 1;
  std::vector<std::vector<Op*>> outbox;      // by owner, pushed at the end of the round
  uint32_t flush_at = 0;                     // a delayed flush_all of this partition
  std::string scratch;
  std::atomic<uint64_t> counters[kCounters] = {};
  std::atomic<uint32_t> curr_conns{0};
  // The inbox: commands for this partition from other shards, and this shard's forwarded
  // commands coming back.
  mutable std::mutex mu;
  std::vector<Op*> inbox;
  std::atomic<bool> inbox_pending{false};
  std::vector<Op*> taken;  // the swapped-out batch (worker thread)
  std::vector<std::pair<int, uint64_t>> resume;  // connections to parse again (fd, id)

  void count(Counter c, uint64_t n = 1) { store::add_st(counters[c], n); }
};

namespace {

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
    throw std::runtime_error(
        fmt::format("--memcached {}:{}: cannot listen: {}", host, port, std::strerror(err)));
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

void append_u64(std::string* s, uint64_t v) {
  char buf[24];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  s->append(buf, p);
}

// ---- answers ----------------------------------------------------------------------------

std::string_view store_reply(Outcome o) {
  switch (o) {
    case Outcome::kStored: return "STORED\r\n";
    case Outcome::kNotStored: return "NOT_STORED\r\n";
    case Outcome::kExists: return "EXISTS\r\n";
    case Outcome::kNotFound: return "NOT_FOUND\r\n";
    case Outcome::kTooLarge: return "SERVER_ERROR object too large for cache\r\n";
    case Outcome::kNoMemory: return "SERVER_ERROR out of memory storing object\r\n";
    default: return "SERVER_ERROR unexpected outcome\r\n";
  }
}

void format_text(const Call& c, const Result& r, std::string* out) {
  if (c.noreply) return;
  switch (c.verb) {
    case Verb::kGet: case Verb::kGets: case Verb::kGat: case Verb::kGats:
      if (r.outcome != Outcome::kHit) {
        if (r.outcome == Outcome::kTooLarge || r.outcome == Outcome::kNoMemory)
          out->append(store_reply(r.outcome));
        return;
      }
      out->append("VALUE ").append(c.req.key).push_back(' ');
      append_u64(out, r.flags);
      out->push_back(' ');
      append_u64(out, r.value.size());
      if (c.verb == Verb::kGets || c.verb == Verb::kGats) {
        out->push_back(' ');
        append_u64(out, r.cas);
      }
      out->append("\r\n").append(r.value).append("\r\n");
      return;
    case Verb::kDelete:
      out->append(r.outcome == Outcome::kDeleted ? "DELETED\r\n" : "NOT_FOUND\r\n");
      return;
    case Verb::kIncr: case Verb::kDecr:
      if (r.outcome == Outcome::kNumber) {
        append_u64(out, r.number);
        out->append("\r\n");
      } else if (r.outcome == Outcome::kNonNumeric) {
        out->append("CLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
      } else if (r.outcome == Outcome::kNotFound) {
        out->append("NOT_FOUND\r\n");
      } else {
        out->append("SERVER_ERROR out of memory\r\n");
      }
      return;
    case Verb::kTouch:
      out->append(r.outcome == Outcome::kTouched ? "TOUCHED\r\n" : "NOT_FOUND\r\n");
      return;
    case Verb::kFlushAll:
      return;  // "OK" once every partition has run it
    default:
      out->append(store_reply(r.outcome));
  }
}

// Meta commands (protocol.txt "Meta Commands"): the return flags asked for, in their order.
void meta_flags(const Call& c, const Result& r, std::string* out) {
  for (std::string_view f : c.meta) {
    switch (f[0]) {
      case 'O': case 'k': case 'b':
        out->push_back(' ');
        if (f[0] == 'k') out->append("k").append(c.req.key);
        else if (f[0] == 'O') out->append(f);
        break;
      case 'c': out->append(" c"); append_u64(out, r.cas); break;
      case 'f': out->append(" f"); append_u64(out, r.flags); break;
      case 's': out->append(" s"); append_u64(out, r.value.size()); break;
      case 't':
        if (r.expire_at == 0) {
          out->append(" t-1");
        } else {
          const uint32_t now = now_s();
          out->append(" t");
          append_u64(out, r.expire_at > now ? r.expire_at - now : 0);
        }
        break;
      default: break;
    }
  }
  out->append("\r\n");
}

void format_meta(const Call& c, const Result& r, std::string* out) {
  const bool quiet = c.noreply;
  switch (c.verb) {
    case Verb::kMetaGet: {
      if (r.outcome != Outcome::kHit) {
        if (!quiet) out->append("EN\r\n");
        return;
      }
      bool value = false;
      for (std::string_view f : c.meta) value |= f == "v";
      if (value) {
        out->append("VA ");
        append_u64(out, r.value.size());
        meta_flags(c, r, out);
        out->append(r.value).append("\r\n");
      } else {
        if (quiet) return;  // a hit without a value says nothing in quiet mode
        out->append("HD");
        meta_flags(c, r, out);
      }
      return;
    }
    case Verb::kMetaDebug:
      if (r.outcome != Outcome::kHit) {
        out->append("EN\r\n");
        return;
      }
      out->append("ME ").append(c.req.key).append(" exp=");
      if (r.expire_at == 0) out->append("-1");
      else append_u64(out, r.expire_at > now_s() ? r.expire_at - now_s() : 0);
      out->append(" la=0 cas=");
      append_u64(out, r.cas);
      out->append(" fetch=no cls=1 size=");
      append_u64(out, r.value.size());
      out->append("\r\n");
      return;
    case Verb::kMetaArith: {
      if (r.outcome == Outcome::kNumber) {
        bool value = false;
        for (std::string_view f : c.meta) value |= f == "v";
        std::string num = std::to_string(r.number);
        Result shown = r;
        shown.value = num;
        if (value) {
          out->append("VA ");
          append_u64(out, num.size());
          meta_flags(c, shown, out);
          out->append(num).append("\r\n");
        } else if (!quiet) {
          out->append("HD");
          meta_flags(c, shown, out);
        }
        return;
      }
      if (r.outcome == Outcome::kNotFound) out->append("NF\r\n");
      else if (r.outcome == Outcome::kExists) out->append("EX\r\n");
      else if (r.outcome == Outcome::kNonNumeric)
        out->append("CLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
      else out->append("NS\r\n");
      return;
    }
    default: {  // ms, md
      const bool ok = r.outcome == Outcome::kStored || r.outcome == Outcome::kDeleted ||
                      r.outcome == Outcome::kTouched;
      if (ok) {
        if (quiet) return;
        out->append("HD");
        meta_flags(c, r, out);
        return;
      }
      switch (r.outcome) {
        case Outcome::kNotStored: out->append("NS\r\n"); break;
        case Outcome::kExists: out->append("EX\r\n"); break;
        case Outcome::kNotFound: out->append("NF\r\n"); break;
        default: out->append(store_reply(r.outcome)); break;
      }
    }
  }
}

void put_be32(char* p, uint32_t v) {
  p[0] = static_cast<char>(v >> 24);
  p[1] = static_cast<char>(v >> 16);
  p[2] = static_cast<char>(v >> 8);
  p[3] = static_cast<char>(v);
}

void format_binary(const Call& c, const Result& r, std::string* out) {
  using namespace binary;
  const uint8_t op = c.opcode;
  auto fail = [&](uint16_t st) {
    append_response(out, op, st, c.opaque, 0, {}, {}, error_text(st));
  };
  switch (op) {
    case kGet: case kGetQ: case kGetK: case kGetKQ:
    case kGat: case kGatQ: case kGatK: case kGatKQ: case kTouch: {
      if (r.outcome != Outcome::kHit && r.outcome != Outcome::kTouched) {
        if (c.noreply) return;  // GETQ/GETKQ: misses say nothing
        if (r.outcome == Outcome::kTooLarge || r.outcome == Outcome::kNoMemory) fail(kOutOfMemory);
        else if (op == kGetK || op == kGatK)
          append_response(out, op, kKeyNotFound, c.opaque, 0, {}, c.req.key, {});
        else fail(kKeyNotFound);
        return;
      }
      char flags[4];
      put_be32(flags, r.flags);
      const bool with_key = op == kGetK || op == kGetKQ || op == kGatK || op == kGatKQ;
      append_response(out, op, kSuccess, c.opaque, r.cas, std::string_view(flags, 4),
                      with_key ? c.req.key : std::string_view(),
                      op == kTouch ? std::string_view() : r.value);
      return;
    }
    case kIncrement: case kIncrementQ: case kDecrement: case kDecrementQ: {
      if (r.outcome == Outcome::kNumber) {
        if (c.noreply) return;
        char v[8];
        put_be32(v, static_cast<uint32_t>(r.number >> 32));
        put_be32(v + 4, static_cast<uint32_t>(r.number));
        append_response(out, op, kSuccess, c.opaque, r.cas, {}, {}, std::string_view(v, 8));
        return;
      }
      fail(r.outcome == Outcome::kNotFound ? kKeyNotFound
           : r.outcome == Outcome::kExists ? kKeyExists
           : r.outcome == Outcome::kNonNumeric ? kNonNumeric : kOutOfMemory);
      return;
    }
    case kDelete: case kDeleteQ:
      if (r.outcome == Outcome::kDeleted) {
        if (!c.noreply) append_response(out, op, kSuccess, c.opaque, 0, {}, {}, {});
        return;
      }
      fail(r.outcome == Outcome::kExists ? kKeyExists : kKeyNotFound);
      return;
    case kFlush: case kFlushQ:
      return;  // answered once every partition has run it
    default: {  // storage
      if (r.outcome == Outcome::kStored) {
        if (!c.noreply) append_response(out, op, kSuccess, c.opaque, r.cas, {}, {}, {});
        return;
      }
      uint16_t st = kNotStored;
      switch (r.outcome) {
        case Outcome::kExists: st = kKeyExists; break;
        case Outcome::kNotFound: st = kKeyNotFound; break;
        case Outcome::kTooLarge: st = kTooBig; break;
        case Outcome::kNoMemory: st = kOutOfMemory; break;
        case Outcome::kNotStored:
          // add of a present key: "exists"; replace of a missing one: "not found"
          st = (op == kAdd || op == kAddQ) ? kKeyExists
               : (op == kReplace || op == kReplaceQ) ? kKeyNotFound : kNotStored;
          break;
        default: break;
      }
      fail(st);
    }
  }
}

void format(const Call& c, const Result& r, std::string* out) {
  switch (c.style) {
    case Style::kText: format_text(c, r, out); break;
    case Style::kMeta: format_meta(c, r, out); break;
    case Style::kBinary: format_binary(c, r, out); break;
  }
}

}  // namespace

// ---- the service ------------------------------------------------------------------------

namespace {

// What a worker does for one command of its own partition, or one forwarded to it.
Result run_on_owner(Service::Shard& s, server::Worker& w, const Call& c, std::string& scratch) {
  auto through_worker = [&w](std::span<const store::Request> reqs, store::CompletionFn done) {
    w.execute_st(reqs, done);
  };
  Mutate mutate = through_worker;  // a reference: the lambda must outlive it
  Result r;
  if (c.req.kind == Kind::kFlush && c.req.expire_at != 0 && c.req.expire_at > now_s()) {
    s.flush_at = c.req.expire_at;  // later (run_st watches it)
    r.outcome = Outcome::kOk;
  } else if (c.req.kind == Kind::kFlush) {
    s.flush_at = 0;
    r.outcome = w.clear_st() ? Outcome::kOk : Outcome::kNotSupported;  // logged (--oplog)
  } else {
    r = execute_st(c.req, w.engine(), mutate, scratch);
  }
  const bool hit = r.outcome != Outcome::kNotFound && r.outcome != Outcome::kNotStored;
  switch (c.req.kind) {
    case Kind::kGet:
      s.count(kCmdGet);
      s.count(r.outcome == Outcome::kHit ? kGetHits : kGetMisses);
      if (c.req.touch) s.count(kCmdTouch);
      break;
    case Kind::kGat:
      s.count(kCmdGet);
      s.count(kCmdTouch);
      s.count(r.outcome == Outcome::kHit ? kGetHits : kGetMisses);
      s.count(r.outcome == Outcome::kHit ? kTouchHits : kTouchMisses);
      break;
    case Kind::kTouch:
      s.count(kCmdTouch);
      s.count(hit ? kTouchHits : kTouchMisses);
      break;
    case Kind::kDelete: s.count(r.outcome == Outcome::kDeleted ? kDeleteHits : kDeleteMisses); break;
    case Kind::kIncr: s.count(r.outcome == Outcome::kNotFound ? kIncrMisses : kIncrHits); break;
    case Kind::kDecr: s.count(r.outcome == Outcome::kNotFound ? kDecrMisses : kDecrHits); break;
    case Kind::kCas:
      s.count(kCmdSet);
      s.count(r.outcome == Outcome::kStored  ? kCasHits
              : r.outcome == Outcome::kExists ? kCasBadval : kCasMisses);
      break;
    case Kind::kFlush: s.count(kCmdFlush); break;
    default: s.count(kCmdSet); break;
  }
  return r;
}

}  // namespace

class Connections {
 public:
  Connections(Service& svc, Service::Shard& s, server::Worker& w, const ServiceOptions& o,
              std::vector<server::Worker*>& workers, std::vector<std::unique_ptr<Service::Shard>>& shards,
              std::atomic<uint32_t>& curr)
      : svc_(svc), s_(s), w_(w), o_(o), workers_(workers), shards_(shards), curr_(curr) {}

  bool run();

 private:
  void accept_all();
  void on_readable(Conn& c);
  void process(Conn& c);
  bool text_command(Conn& c, std::string_view in, size_t* used);
  bool binary_command(Conn& c, std::string_view in, size_t* used);
  void submit(Conn& c, Call& call);
  void broadcast_flush(Conn& c, Call& call);
  void emit(Conn& c, std::string_view bytes);
  void drain_pending(Conn& c);
  void flush_out(Conn& c);
  void close_conn(Conn& c);
  void update_events(Conn& c);
  void take_inbox();
  void send_outboxes();
  void hold_until_durable(uint64_t barrier, Op* op);
  void stats_text(Conn& c, std::span<const std::string_view> args);
  void stats_binary(Conn& c, const Call& call);
  std::vector<std::pair<std::string, std::string>> stat_lines();
  Conn* find(int fd, uint64_t id) {
    if (fd < 0 || static_cast<size_t>(fd) >= s_.conns.size()) return nullptr;
    Conn* c = s_.conns[fd].get();
    return c != nullptr && c->id == id ? c : nullptr;
  }

  Service& svc_;
  Service::Shard& s_;
  server::Worker& w_;
  const ServiceOptions& o_;
  std::vector<server::Worker*>& workers_;
  std::vector<std::unique_ptr<Service::Shard>>& shards_;
  std::atomic<uint32_t>& curr_;
  bool did_ = false;
};

Service::Service(const ServiceOptions& o, std::vector<server::Worker*> workers)
    : o_(o), workers_(std::move(workers)), started_(now_s()) {
  if (!control::split_host_port(o.listen, &host_, &port_))
    throw std::invalid_argument("--memcached wants HOST:PORT, got '" + o.listen + "'");
  // Room for the connections: raise the soft descriptor limit to the hard one if needed.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < o.max_conns + 256 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, o.max_conns + 256);
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  uint16_t port = port_;
  for (uint32_t i = 0; i < workers_.size(); ++i) {
    auto s = std::make_unique<Shard>();
    s->index = i;
    uint16_t bound = 0;
    s->listen_fd = make_listener(host_, port, &bound);
    port = bound;  // the others join the first one's port (SO_REUSEPORT)
    s->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (s->epoll_fd < 0) throw std::runtime_error("--memcached: epoll_create1 failed");
    epoll_set(s->epoll_fd, s->listen_fd, EPOLLIN, EPOLL_CTL_ADD);
    s->outbox.resize(workers_.size());
    shards_.push_back(std::move(s));
  }
  port_ = port;
  for (server::Worker* w : workers_) w->attach(this);
}

Service::~Service() {
  // An op can be in a queue and in its connection's answers at once (forwarded, or held for
  // the op log): each is deleted once.
  std::unordered_set<Op*> ops;
  for (auto& s : shards_) {
    for (auto& c : s->conns)
      if (c) {
        close(c->fd);
        ops.insert(c->pending.begin(), c->pending.end());
      }
    ops.insert(s->inbox.begin(), s->inbox.end());
    for (auto& box : s->outbox) ops.insert(box.begin(), box.end());
    close(s->listen_fd);
    close(s->epoll_fd);
  }
  for (Op* op : ops) delete op;
}

std::string Service::address() const { return fmt::format("{}:{}", host_, port_); }

bool Service::pending_st(const server::Worker& w) const {
  const Shard& s = *shards_[w.index()];
  return s.inbox_pending.load(std::memory_order_seq_cst) || s.flush_at != 0 || !s.resume.empty();
}

int Service::wait_fd(const server::Worker& w) const { return shards_[w.index()]->epoll_fd; }

bool Service::run_st(server::Worker& w) {
  Connections c(*this, *shards_[w.index()], w, o_, workers_, shards_, curr_conns_);
  return c.run();
}

bool Connections::run() {
  if (s_.flush_at != 0 && now_s() >= s_.flush_at) {
    s_.flush_at = 0;
    w_.clear_st();
  }
  take_inbox();
  if (!s_.resume.empty()) {
    did_ = true;
    std::vector<std::pair<int, uint64_t>> again;
    again.swap(s_.resume);
    for (auto [fd, id] : again)
      if (Conn* c = find(fd, id); c != nullptr && c->reading) process(*c);
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
        spdlog::warn("memcached: cannot accept: {} (raise the descriptor limit)", std::strerror(errno));
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
  process(c);
  if (eof) {
    // The client is gone (or half-closed): what it sent whole has been answered above; a half
    // command is dropped with the connection, nothing of it stored.
    if (s_.conns[c.fd]) {
      flush_out(c);
      if (s_.conns[c.fd]) close_conn(c);
    }
  }
}

void Connections::process(Conn& c) {
  while (!c.closing) {
    if (c.out.size() - c.out_off > kMaxOutBytes || c.pending.size() > kMaxPending) break;
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

// Runs `call` for one key: here if this worker owns the key, else forwarded to its owner.
void Connections::submit(Conn& c, Call& call) {
  const uint32_t owner = store::partition_of(store::hash_key(call.req.key),
                                             static_cast<uint32_t>(workers_.size()));
  if (owner == s_.index) {
    Result r = run_on_owner(s_, w_, call, s_.scratch);
    if (const uint64_t barrier = w_.log_barrier_st(); barrier != 0) {
      // --oplog-sync always: the answer waits for the log (docs/durability.md), in its place
      // among the connection's answers, as a forwarded one waits for its owner; it comes back
      // through this shard's inbox once the log has it.
      std::string answer;
      format(call, r, &answer);
      if (answer.empty()) return;  // noreply
      Op* op = new Op;
      op->origin = s_.index;
      op->fd = c.fd;
      op->conn_id = c.id;
      op->ready = true;
      op->done = true;
      op->in_pending = true;
      op->res_value = std::move(answer);
      c.pending.push_back(op);
      hold_until_durable(barrier, op);
      return;
    }
    if (c.pending.empty()) {
      format(call, r, &c.out);  // straight from the engine's memory, before any later put
    } else {
      std::string tmp;
      format(call, r, &tmp);
      emit(c, tmp);
    }
    return;
  }
  Op* op = new Op;
  op->call = call;
  op->origin = s_.index;
  op->fd = c.fd;
  op->conn_id = c.id;
  op->key.assign(call.req.key);
  op->value.assign(call.req.value);
  op->call.req.key = op->key;
  op->call.req.value = op->value;
  if (!call.meta.empty()) {
    for (std::string_view f : call.meta) op->meta_own.emplace_back(f);
    for (const std::string& f : op->meta_own) op->meta_views.emplace_back(f);
    op->call.meta = op->meta_views;
  }
  op->in_pending = !(call.style == Style::kText && call.noreply);
  if (op->in_pending) c.pending.push_back(op);
  s_.outbox[owner].push_back(op);
  s_.count(kForwarded);
}

void Connections::broadcast_flush(Conn& c, Call& call) {
  for (uint32_t p = 0; p < workers_.size(); ++p) {
    if (p == s_.index) {
      run_on_owner(s_, w_, call, s_.scratch);
      continue;
    }
    Op* op = new Op;
    op->call = call;
    op->call.req.key = {};
    op->origin = s_.index;
    op->fd = c.fd;
    op->conn_id = c.id;
    op->in_pending = true;
    c.pending.push_back(op);
    s_.outbox[p].push_back(op);
  }
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
  if (c.closing && c.out.empty() && c.pending.empty()) {
    close_conn(c);
    return;
  }
  update_events(c);
}

void Connections::update_events(Conn& c) {
  const bool backed_up = c.out.size() - c.out_off > kMaxOutBytes || c.pending.size() > kMaxPending;
  const bool want_read = !backed_up && !c.closing;
  const bool want_write = c.out_off < c.out.size();
  if (want_read == c.reading && want_write == c.writing) return;
  // Reading again after a pause: commands may already wait in the buffer, and no EPOLLIN
  // will say so; the next round takes them.
  if (want_read && !c.reading && c.in_off < c.in.size()) s_.resume.push_back({c.fd, c.id});
  c.reading = want_read;
  c.writing = want_write;
  epoll_set(s_.epoll_fd, c.fd, (want_read ? EPOLLIN : 0u) | (want_write ? EPOLLOUT : 0u),
            EPOLL_CTL_MOD);
}

void Connections::take_inbox() {
  if (!s_.inbox_pending.load(std::memory_order_acquire)) return;
  {
    std::lock_guard lock(s_.mu);
    s_.taken.swap(s_.inbox);
    s_.inbox_pending.store(false, std::memory_order_relaxed);
  }
  did_ = true;
  std::vector<Conn*> touched;
  for (Op* op : s_.taken) {
    if (op->origin != s_.index || !op->done) {
      // A command for this partition: run it and send it home.
      op->res = run_on_owner(s_, w_, op->call, op->scratch);
      if (op->res.outcome == Outcome::kHit) {
        op->res_value.assign(op->res.value);  // the engine's view lasts only until a put
        op->res.value = op->res_value;
      }
      op->done = true;
      if (const uint64_t barrier = w_.log_barrier_st(); barrier != 0) {
        hold_until_durable(barrier, op);  // --oplog-sync always: home once the log has it
        continue;
      }
      s_.outbox[op->origin].push_back(op);
      continue;
    }
    // One of ours, back from its owner.
    op->arrived = true;
    Conn* c = find(op->fd, op->conn_id);
    if (c == nullptr || !op->in_pending) {
      delete op;
      continue;
    }
    if (touched.empty() || touched.back() != c) touched.push_back(c);
  }
  s_.taken.clear();
  for (Conn* c : touched) {
    if (!s_.conns[c->fd] || s_.conns[c->fd].get() != c) continue;
    flush_out(*c);
  }
}

// Sends `op` home (to its connection's shard, this one included) once the worker's log is
// durable up to `barrier`. The worker runs the release before this service's next run, which
// sends the outboxes.
void Connections::hold_until_durable(uint64_t barrier, Op* op) {
  Service::Shard* s = &s_;
  w_.when_durable_st(barrier, [s, op] { s->outbox[op->origin].push_back(op); });
}

void Connections::send_outboxes() {
  for (uint32_t p = 0; p < s_.outbox.size(); ++p) {
    std::vector<Op*>& box = s_.outbox[p];
    if (box.empty()) continue;
    Service::Shard& to = *shards_[p];
    {
      std::lock_guard lock(to.mu);
      to.inbox.insert(to.inbox.end(), box.begin(), box.end());
      to.inbox_pending.store(true, std::memory_order_seq_cst);
    }
    box.clear();
    workers_[p]->notify();
  }
}

// ---- text and meta commands -------------------------------------------------------------

bool Connections::text_command(Conn& c, std::string_view in, size_t* used) {
  TextCommand& cmd = c.cmd;
  ParseResult pr = parse_text(in, o_.max_value, &cmd);
  *used = pr.consumed;
  switch (pr.status) {
    case Parse::kNeedMore:
      return false;
    case Parse::kError:
      s_.count(kClientErrors);
      emit(c, pr.reply);
      return true;
    case Parse::kClose:
      s_.count(kClientErrors);
      emit(c, pr.reply);
      c.closing = true;
      return false;
    case Parse::kSwallow: {
      c.swallow = pr.swallow;
      emit(c, pr.reply);
      // memcached: a set too large also drops the key's old value, so that a reader never
      // takes the stale one for the value just refused.
      if (cmd.verb == Verb::kSet && valid_key(cmd.key())) {
        Call call;
        call.req.kind = Kind::kDelete;
        call.req.key = cmd.key();
        call.verb = Verb::kDelete;
        call.noreply = true;
        submit(c, call);
      }
      return true;
    }
    case Parse::kCommand:
      break;
  }
  const uint32_t now = now_s();
  Call call;
  call.style = Style::kText;
  call.verb = cmd.verb;
  call.noreply = cmd.noreply;
  auto bad = [&](std::string_view reply) {
    s_.count(kClientErrors);
    emit(c, reply);
    return true;
  };
  switch (cmd.verb) {
    case Verb::kGet: case Verb::kGets: case Verb::kGat: case Verb::kGats: {
      const bool gat = cmd.verb == Verb::kGat || cmd.verb == Verb::kGats;
      call.req.kind = gat ? Kind::kGat : Kind::kGet;
      call.req.expire_at = gat ? to_expire_at(cmd.exptime, now) : 0;
      for (std::string_view k : cmd.keys) {
        call.req.key = k;
        submit(c, call);
      }
      emit(c, "END\r\n");
      return true;
    }
    case Verb::kSet: case Verb::kAdd: case Verb::kReplace: case Verb::kAppend:
    case Verb::kPrepend: case Verb::kCas:
      call.req.kind = cmd.verb == Verb::kSet ? Kind::kSet
                      : cmd.verb == Verb::kAdd ? Kind::kAdd
                      : cmd.verb == Verb::kReplace ? Kind::kReplace
                      : cmd.verb == Verb::kAppend ? Kind::kAppend
                      : cmd.verb == Verb::kPrepend ? Kind::kPrepend : Kind::kCas;
      call.req.key = cmd.key();
      call.req.value = cmd.data;
      call.req.flags = cmd.flags;
      call.req.expire_at = to_expire_at(cmd.exptime, now);
      call.req.cas = cmd.verb == Verb::kCas ? cmd.cas : 0;
      if (cmd.verb == Verb::kCas && cmd.cas == 0) {
        // version 0 never exists (engine.h): memcached answers EXISTS or NOT_FOUND; ask the
        // owner with an impossible version instead of an unconditional set.
        call.req.cas = UINT64_MAX;
      }
      submit(c, call);
      return true;
    case Verb::kDelete:
      call.req.kind = Kind::kDelete;
      call.req.key = cmd.key();
      submit(c, call);
      return true;
    case Verb::kIncr: case Verb::kDecr:
      call.req.kind = cmd.verb == Verb::kIncr ? Kind::kIncr : Kind::kDecr;
      call.req.key = cmd.key();
      call.req.delta = cmd.delta;
      submit(c, call);
      return true;
    case Verb::kTouch:
      call.req.kind = Kind::kTouch;
      call.req.key = cmd.key();
      call.req.expire_at = to_expire_at(cmd.exptime, now);
      submit(c, call);
      return true;
    case Verb::kFlushAll: {
      if (!store::engine_kind_from_string(w_.engine().name())) {
        if (!cmd.noreply) return bad("SERVER_ERROR flush_all needs the cache or store engine\r\n");
        return true;
      }
      call.req.kind = Kind::kFlush;
      call.req.expire_at = cmd.delay > 0 ? to_expire_at(cmd.delay, now) : 0;
      broadcast_flush(c, call);
      if (!cmd.noreply) emit(c, "OK\r\n");
      return true;
    }
    case Verb::kStats:
      stats_text(c, cmd.args);
      return true;
    case Verb::kVersion:
      emit(c, fmt::format("VERSION {}\r\n", kVersionString));
      return true;
    case Verb::kVerbosity:
      if (!cmd.noreply) emit(c, "OK\r\n");
      return true;
    case Verb::kQuit:
      c.closing = true;
      return false;
    case Verb::kShutdown:
      return bad("ERROR: shutdown not enabled\r\n");
    case Verb::kMetaNoop:
      emit(c, "MN\r\n");
      return true;
    default:
      break;
  }

  // Meta commands: mg, ms, md, ma, me.
  call.style = Style::kMeta;
  call.meta = cmd.args;
  call.req.key = cmd.key();
  if (!valid_key(call.req.key)) return bad("CLIENT_ERROR bad data chunk\r\n");
  auto num = [](std::string_view f, auto* v) {
    if (f.size() < 2) return false;
    auto [p, ec] = std::from_chars(f.data() + 1, f.data() + f.size(), *v);
    return ec == std::errc() && p == f.data() + f.size();
  };
  for (std::string_view f : cmd.args) {
    if (f.empty()) continue;
    if (f[0] == 'b') return bad("CLIENT_ERROR base64 keys are not supported\r\n");
  }
  switch (cmd.verb) {
    case Verb::kMetaGet:
    case Verb::kMetaDebug: {
      call.req.kind = Kind::kGet;
      for (std::string_view f : cmd.args) {
        if (f[0] == 'T') {
          int64_t ttl = 0;
          if (!num(f, &ttl)) return bad("CLIENT_ERROR bad token in command line format\r\n");
          call.req.touch = true;
          call.req.expire_at = to_expire_at(ttl, now);
        }
      }
      submit(c, call);
      return true;
    }
    case Verb::kMetaSet: {
      call.req.kind = Kind::kSet;
      call.req.value = cmd.data;
      for (std::string_view f : cmd.args) {
        bool ok = true;
        int64_t ttl = 0;
        switch (f[0]) {
          case 'F': ok = num(f, &call.req.flags); break;
          case 'T': ok = num(f, &ttl); call.req.expire_at = to_expire_at(ttl, now); break;
          case 'C': ok = num(f, &call.req.cas); break;
          case 'M':
            ok = f.size() == 2;
            if (!ok) break;
            switch (f[1]) {
              case 'E': case 'e': call.req.kind = Kind::kAdd; break;
              case 'A': case 'a': call.req.kind = Kind::kAppend; break;
              case 'P': case 'p': call.req.kind = Kind::kPrepend; break;
              case 'R': case 'r': call.req.kind = Kind::kReplace; break;
              case 'S': case 's': call.req.kind = Kind::kSet; break;
              default: ok = false;
            }
            break;
          default: break;
        }
        if (!ok) return bad("CLIENT_ERROR bad token in command line format\r\n");
      }
      if (call.req.cas != 0 && call.req.kind == Kind::kSet) call.req.kind = Kind::kCas;
      submit(c, call);
      return true;
    }
    case Verb::kMetaDelete:
      call.req.kind = Kind::kDelete;
      for (std::string_view f : cmd.args)
        if (f[0] == 'C' && !num(f, &call.req.cas))
          return bad("CLIENT_ERROR bad token in command line format\r\n");
      submit(c, call);
      return true;
    case Verb::kMetaArith: {
      call.req.kind = Kind::kIncr;
      call.req.delta = 1;
      for (std::string_view f : cmd.args) {
        bool ok = true;
        int64_t ttl = 0;
        switch (f[0]) {
          case 'N': ok = num(f, &ttl); call.req.create = true;
                    call.req.expire_at = to_expire_at(ttl, now); break;
          case 'J': ok = num(f, &call.req.initial); break;
          case 'D': ok = num(f, &call.req.delta); break;
          case 'C': ok = num(f, &call.req.cas); break;
          case 'M':
            ok = f.size() == 2;
            if (!ok) break;
            if (f[1] == 'I' || f[1] == 'i' || f[1] == '+') call.req.kind = Kind::kIncr;
            else if (f[1] == 'D' || f[1] == 'd' || f[1] == '-') call.req.kind = Kind::kDecr;
            else ok = false;
            break;
          default: break;
        }
        if (!ok) return bad("CLIENT_ERROR bad token in command line format\r\n");
      }
      submit(c, call);
      return true;
    }
    default:
      return bad("ERROR\r\n");
  }
}

// ---- binary commands --------------------------------------------------------------------

bool Connections::binary_command(Conn& c, std::string_view in, size_t* used) {
  using namespace binary;
  Packet pk;
  binary::ParseResult pr = binary::parse(in, o_.max_value, &pk);
  *used = pr.consumed;
  switch (pr.status) {
    case binary::Parse::kNeedMore:
      return false;
    case binary::Parse::kClose:
      c.closing = true;
      return false;
    case binary::Parse::kError: {
      s_.count(kClientErrors);
      c.swallow = pr.swallow;
      std::string out;
      append_response(&out, pk.h.opcode, pr.error, pk.h.opaque, 0, {}, {}, error_text(pr.error));
      emit(c, out);
      return true;
    }
    case binary::Parse::kPacket:
      break;
  }
  const Header& h = pk.h;
  const uint32_t now = now_s();
  Call call;
  call.style = Style::kBinary;
  call.opcode = h.opcode;
  call.opaque = h.opaque;
  call.noreply = quiet(h.opcode);
  call.req.key = pk.key;
  call.req.cas = h.cas;
  auto be32 = [](std::string_view s, size_t off) {
    return (uint32_t{uint8_t(s[off])} << 24) | (uint32_t{uint8_t(s[off + 1])} << 16) |
           (uint32_t{uint8_t(s[off + 2])} << 8) | uint8_t(s[off + 3]);
  };
  auto invalid = [&] {
    s_.count(kClientErrors);
    std::string out;
    append_response(&out, h.opcode, kInvalid, h.opaque, 0, {}, {}, error_text(kInvalid));
    emit(c, out);
    return true;
  };
  auto simple = [&](std::string_view value = {}) {
    std::string out;
    append_response(&out, h.opcode, kSuccess, h.opaque, 0, {}, {}, value);
    emit(c, out);
    return true;
  };
  switch (h.opcode) {
    case kGet: case kGetQ: case kGetK: case kGetKQ:
      if (h.extlen != 0 || pk.key.empty() || !pk.value.empty()) return invalid();
      call.req.kind = Kind::kGet;
      call.req.cas = 0;
      submit(c, call);
      return true;
    case kGat: case kGatQ: case kGatK: case kGatKQ: case kTouch:
      if (h.extlen != 4 || pk.key.empty() || !pk.value.empty()) return invalid();
      call.req.kind = h.opcode == kTouch ? Kind::kTouch : Kind::kGat;
      call.req.cas = 0;
      call.req.expire_at = to_expire_at(static_cast<int32_t>(be32(pk.extras, 0)), now);
      if (h.opcode == kTouch) call.req.kind = Kind::kGat;  // answered with the flags, like GAT
      submit(c, call);
      return true;
    case kSet: case kSetQ: case kAdd: case kAddQ: case kReplace: case kReplaceQ:
      if (h.extlen != 8 || pk.key.empty()) return invalid();
      call.req.flags = be32(pk.extras, 0);
      call.req.expire_at = to_expire_at(static_cast<int32_t>(be32(pk.extras, 4)), now);
      call.req.value = pk.value;
      call.req.kind = (h.opcode == kSet || h.opcode == kSetQ) ? (h.cas ? Kind::kCas : Kind::kSet)
                      : (h.opcode == kAdd || h.opcode == kAddQ) ? Kind::kAdd : Kind::kReplace;
      if (call.req.kind == Kind::kAdd && h.cas != 0) return invalid();
      if (call.req.kind == Kind::kReplace && h.cas != 0) call.req.kind = Kind::kCas;
      submit(c, call);
      return true;
    case kAppend: case kAppendQ: case kPrepend: case kPrependQ:
      if (h.extlen != 0 || pk.key.empty()) return invalid();
      call.req.kind = (h.opcode == kAppend || h.opcode == kAppendQ) ? Kind::kAppend : Kind::kPrepend;
      call.req.value = pk.value;
      submit(c, call);
      return true;
    case kDelete: case kDeleteQ:
      if (h.extlen != 0 || pk.key.empty() || !pk.value.empty()) return invalid();
      call.req.kind = Kind::kDelete;
      submit(c, call);
      return true;
    case kIncrement: case kIncrementQ: case kDecrement: case kDecrementQ: {
      if (h.extlen != 20 || pk.key.empty() || !pk.value.empty()) return invalid();
      call.req.kind = (h.opcode == kIncrement || h.opcode == kIncrementQ) ? Kind::kIncr : Kind::kDecr;
      call.req.delta = (uint64_t{be32(pk.extras, 0)} << 32) | be32(pk.extras, 4);
      call.req.initial = (uint64_t{be32(pk.extras, 8)} << 32) | be32(pk.extras, 12);
      const uint32_t exp = be32(pk.extras, 16);
      call.req.create = exp != 0xffffffffu;
      call.req.expire_at = call.req.create ? to_expire_at(static_cast<int32_t>(exp), now) : 0;
      submit(c, call);
      return true;
    }
    case kQuit:
      simple();
      c.closing = true;
      return false;
    case kQuitQ:
      c.closing = true;
      return false;
    case kNoop:
      return simple();
    case kVersion:
      return simple(kVersionString);
    case kVerbosity:
      return simple();
    case kFlush: case kFlushQ: {
      if (h.extlen != 0 && h.extlen != 4) return invalid();
      if (!store::engine_kind_from_string(w_.engine().name())) return invalid();
      call.req.kind = Kind::kFlush;
      call.req.key = {};
      const int64_t delay = h.extlen == 4 ? static_cast<int32_t>(be32(pk.extras, 0)) : 0;
      call.req.expire_at = delay > 0 ? to_expire_at(delay, now) : 0;
      broadcast_flush(c, call);
      if (h.opcode == kFlush) simple();
      return true;
    }
    case kStat:
      stats_binary(c, call);
      return true;
    default:
      return invalid();
  }
}

// ---- stats ------------------------------------------------------------------------------

std::vector<std::pair<std::string, std::string>> Connections::stat_lines() {
  nlohmann::json j = svc_.stats();
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& [k, v] : j.items())
    out.emplace_back(k, v.is_string() ? v.get<std::string>() : v.dump());
  return out;
}

void Connections::stats_text(Conn& c, std::span<const std::string_view> args) {
  if (!args.empty()) {
    if (args[0] == "reset") {
      emit(c, "RESET\r\n");
      return;
    }
    if (args[0] == "settings") {
      emit(c, fmt::format("STAT maxconns {}\r\nSTAT tcpport {}\r\nSTAT item_size_max {}\r\n"
                          "STAT num_threads {}\r\nSTAT evictions on\r\nSTAT cas_enabled yes\r\nEND\r\n",
                          o_.max_conns, svc_.address().substr(svc_.address().rfind(':') + 1),
                          o_.max_value, workers_.size()));
      return;
    }
    // items, slabs, sizes, conns: nothing to say in memcached's terms; anything else (stats
    // noreply included) is not a stats group: memcached's ERROR.
    if (args[0] == "items" || args[0] == "slabs" || args[0] == "sizes" || args[0] == "conns") {
      emit(c, "END\r\n");
      return;
    }
    s_.count(kClientErrors);
    emit(c, "ERROR\r\n");
    return;
  }
  std::string out;
  for (auto& [k, v] : stat_lines()) out.append("STAT ").append(k).append(" ").append(v).append("\r\n");
  out.append("END\r\n");
  emit(c, out);
}

void Connections::stats_binary(Conn& c, const Call& call) {
  std::string out;
  for (auto& [k, v] : stat_lines())
    binary::append_response(&out, binary::kStat, binary::kSuccess, call.opaque, 0, {}, k, v);
  binary::append_response(&out, binary::kStat, binary::kSuccess, call.opaque, 0, {}, {}, {});
  emit(c, out);
}

nlohmann::json Service::stats() const {
  uint64_t sums[kCounters] = {};
  for (const auto& s : shards_)
    for (size_t i = 0; i < kCounters; ++i) sums[i] += s->counters[i].load(std::memory_order_relaxed);
  store::StatsSnapshot es;
  for (server::Worker* w : workers_) {
    store::StatsSnapshot x = w->engine().stats();
    es.items += x.items;
    es.bytes += x.bytes;
    es.evictions += x.evictions + x.index_drops;
    es.puts += x.puts;
    es.expired += x.expired;
  }
  const uint32_t now = now_s();
  nlohmann::json j = nlohmann::json::object();
  // Insertion order is memcached's; nlohmann::json sorts keys, so build an ordered array.
  nlohmann::ordered_json o;
  o["pid"] = getpid();
  o["uptime"] = now - started_;
  o["time"] = now;
  o["version"] = std::string(kVersionString);
  o["pointer_size"] = 64;
  o["curr_connections"] = curr_conns_.load(std::memory_order_relaxed);
  o["max_connections"] = o_.max_conns;
  for (size_t i = 0; i < kCounters; ++i) o[kCounterNames[i]] = sums[i];
  o["threads"] = workers_.size();
  o["limit_maxbytes"] = 0;
  o["item_size_max"] = o_.max_value;
  o["curr_items"] = es.items;
  o["total_items"] = es.puts;
  o["bytes"] = es.bytes;
  o["evictions"] = es.evictions;
  o["expired_unfetched"] = es.expired;
  for (auto& [k, v] : o.items()) j[k] = v;
  return j;
}

}  // namespace fabkv::memcached
