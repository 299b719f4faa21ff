// One worker's share of the memcached front end (src/memcached/service.h), inside the
// front end only: its connections, the inbox through which other workers forward commands for
// its partition and send its own back, and the round that serves them (Connections, run once
// per worker round). The round's steps live in files of their own, by concern:
//   listener.cc  sockets: accept, read, write, epoll interest, answers in command order
//   commands.cc  command execution: text, meta and binary commands into Calls, stats, and
//                running a Call on its key's owner
//   forward.cc   cross-worker forwarding: a Call to its key's owner and its answer back
//   stats.cc     the stats groups (settings, slabs, items, sizes)
//   dump.cc      key listings (lru_crawler metadump, stats cachedump), a partition piece by piece
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memcached/binary.h"
#include "memcached/reply.h"
#include "memcached/service.h"
#include "memcached/text.h"
#include "store/stats.h"

namespace fabkv::memcached {

// memcached's stats counters, per shard: written by its worker only (store::add_st).
enum Counter : size_t {
  kCmdGet,
  kCmdSet,
  kCmdFlush,
  kCmdTouch,
  kGetHits,
  kGetMisses,
  kDeleteHits,
  kDeleteMisses,
  kIncrHits,
  kIncrMisses,
  kDecrHits,
  kDecrMisses,
  kCasHits,
  kCasMisses,
  kCasBadval,
  kTouchHits,
  kTouchMisses,
  kBytesRead,
  kBytesWritten,
  kTotalConns,
  kRejectedConns,
  kForwarded,
  kClientErrors,
  kMemoryCloses,
  kCounters
};
inline constexpr const char* kCounterNames[kCounters] = {
    "cmd_get",       "cmd_set",           "cmd_flush",
    "cmd_touch",     "get_hits",          "get_misses",
    "delete_hits",   "delete_misses",     "incr_hits",
    "incr_misses",   "decr_hits",         "decr_misses",
    "cas_hits",      "cas_misses",        "cas_badval",
    "touch_hits",    "touch_misses",      "bytes_read",
    "bytes_written", "total_connections", "rejected_connections",
    "forwarded",     "client_errors",     "conns_closed_for_memory"};

// One piece of a key listing (dump.cc): a bounded scan of one partition's index, run by its
// owner; the listing goes on piece by piece, one partition after the other.
struct Dump {
  bool active = false;
  bool meta = false;       // lru_crawler metadump (else stats cachedump)
  uint32_t partition = 0;  // the partition this piece scans
  uint64_t cursor = 0;     // its first index bucket (store::Engine::scan)
  uint64_t left = 0;       // items still wanted (cachedump's limit; UINT64_MAX: all)
  bool finished = false;   // set by the owner: this piece ends the listing ("END" appended)
};

// A command forwarded to its key's owner, and back.
struct Op {
  Dump dump;
  Call call;
  uint32_t origin = 0;  // the connection's shard
  uint32_t owner = 0;   // the key's shard
  int fd = -1;
  uint64_t conn_id = 0;
  std::string key, value;
  std::vector<std::string> meta_own;
  std::vector<std::string_view> meta_views;
  Result res;
  std::string res_value, scratch;
  // A retrieval's room for its value (listener.cc, "Answers in bounded memory"): a hit larger
  // than this is not copied but deferred, fetched again once it heads its connection's answers.
  size_t allowance = SIZE_MAX;
  size_t charge = 0;        // bytes it counts in its connection's in_flight or queued
  bool done = false;        // run by the owner (written there, read here after the inbox lock)
  bool arrived = false;     // back at its connection's shard (origin thread only)
  bool in_pending = false;  // its connection waits for it to answer in order
  bool ready = false;       // a finished answer in `res_value`, queued behind forwarded ones
  bool deferred = false;    // a hit above `allowance`: to be fetched again (owner sets it)
  bool unresolved = false;  // a retrieval counted in Conn::unresolved (origin thread only)
  bool held_back = false;   // in Conn::held_back, not sent yet (origin thread only)
};

// A retrieval line (get, gets, gat, gats) being answered key by key: its keys stay in the
// connection's input and are read one at a time (text.h next_key) while its answers have room.
struct Retrieval {
  bool active = false;
  bool skip_line = false;  // a key was too long: the rest of the line is dropped
  Verb verb = Verb::kGet;
  uint32_t expire_at = 0;  // gat, gats
  uint64_t keys = 0;       // keys read so far (none at the line's end: ERROR)
  size_t no_newline = 0;   // bytes of input after the next key known to hold no '\n'
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
  bool eof = false;         // the client sent its last byte: answer what it sent, then close
  bool reading = true;      // EPOLLIN wanted
  bool writing = false;     // EPOLLOUT wanted
  TextCommand cmd;
  Retrieval get;
  // Answer bytes held beyond `out` (listener.cc, "Answers in bounded memory"): finished answers
  // waiting in `pending`, and what forwarded commands hold (their data) or may bring back.
  size_t queued = 0;
  size_t in_flight = 0;
  size_t charged = 0;     // what this connection counts in its shard's `buffered`
  bool listing = false;   // a key listing runs (dump.cc): later commands wait for it
  bool metadump = false;  // that listing holds the server's one metadump
  Op* parked = nullptr;   // the listing's next piece, queued in `pending`, sent once there is room
  bool stalled = false;   // parsing stopped for want of room (not of input)
  bool resume_queued = false;  // in the shard's `resume` list
  bool budget_wait = false;    // in the shard's `budget_waiters` list
  size_t wants = 0;            // what it waits to take there (an item to fetch again), else 0
  // Since when its client has read nothing while answers wait: a write met a full socket then
  // and none has gone out since (-1: none waits, or the last write went out).
  int64_t blocked_since_ms = -1;
  int64_t read_at_ms = -1;  // when its client last took answers (a write went out)
  // Parsing stopped in the middle of a command for want of its bytes; since when it has held
  // more than the floor of them without the command completing (-1: not so).
  bool partial = false;
  int64_t partial_since_ms = -1;
  // Its forwarded retrievals not answered yet (deferred ones included), and the forwarded
  // commands held back behind them (forward.cc, "Order"): a write must not reach its owner
  // before a retrieval sent ahead of it, which a deferred one would otherwise see.
  size_t unresolved = 0;
  std::deque<Op*> held_back;
  uint64_t written = 0;  // answer bytes written to the socket so far
  // The shard's overdraft (Shard::overdraft) is ours until `written` reaches this.
  uint64_t overdraft_until = 0;
  int outq = 0;  // the socket's unsent bytes (SIOCOUTQ) when it was last seen blocked
};

// Answers in bounded memory (listener.cc): a connection takes no further command, nor the next
// key of a retrieval line, while it holds kMaxOutBytes of answers: those not yet written,
// those waiting in order behind a forwarded one (`queued`), and what its forwarded commands
// hold or may bring back (`in_flight`); or while kMaxPending answers wait. A forwarded
// retrieval may bring back its allowance (a share of the room left, at least kMinAllowance); a
// larger value is fetched again once it heads the connection's answers.
inline constexpr size_t kMaxOutBytes = size_t{1} << 20;
inline constexpr size_t kMaxPending = 4096;
inline constexpr size_t kMinAllowance = size_t{4} << 10;
inline size_t held(const Conn& c) { return c.out.size() - c.out_off + c.queued + c.in_flight; }
inline bool has_room(const Conn& c) {
  return held(c) < kMaxOutBytes && c.pending.size() < kMaxPending;
}
// Room in `out` for an answer carrying `value` bytes, made at once: appended piece by piece, a
// large answer would double the buffer (1 MiB of value, then its "\r\n": 2 MiB kept).
inline void reserve_answer(std::string& out, size_t value) {
  if (value > (size_t{4} << 10)) out.reserve(out.size() + value + 512);
}
// What a forwarded retrieval may bring back: a sixteenth of the room left, so that many go out
// at once while the values stay small.
inline size_t allowance(const Conn& c) {
  const size_t h = held(c);
  return std::max(h < kMaxOutBytes ? (kMaxOutBytes - h) / 16 : 0, kMinAllowance);
}

struct Service::Shard {
  uint32_t index = 0;
  int listen_fd = -1;
  int epoll_fd = -1;
  std::vector<std::unique_ptr<Conn>> conns;  // by fd
  uint64_t next_id = 1;
  std::vector<std::vector<Op*>> outbox;  // by owner, pushed at the end of the round
  std::string scratch;
  std::atomic<uint64_t> counters[kCounters] = {};
  std::atomic<uint32_t> curr_conns{0};
  // The inbox: commands for this partition from other shards, and this shard's forwarded
  // commands coming back.
  mutable std::mutex mu;
  std::vector<Op*> inbox;
  std::atomic<bool> inbox_pending{false};
  std::vector<Op*> taken;                        // the swapped-out batch (worker thread)
  std::vector<std::pair<int, uint64_t>> resume;  // connections to parse again (fd, id)
  // Bytes its connections' buffers hold (Conn::charged summed); the part of it above each
  // connection's floor, and its share of --memcached-conn-memory for that part (listener.cc,
  // "The server's total"); the connections waiting for it to have room (fd, id).
  size_t buffered = 0;
  size_t excess = 0;
  size_t budget = SIZE_MAX;
  std::vector<std::pair<int, uint64_t>> budget_waiters;
  // The one connection that may fetch a deferred value again past the share (listener.cc,
  // drain_pending): without it, connections whose queued answers wait behind their own
  // deferred heads could wait for each other's room for ever. (fd, id); fd -1: free.
  std::pair<int, uint64_t> overdraft{-1, 0};
  std::atomic<uint64_t> buffered_bytes{0};  // `buffered`, for stats (any thread)

  void count(Counter c, uint64_t n = 1) { store::add_st(counters[c], n); }
};

// A non-blocking listening socket on host:port with SO_REUSEPORT (every shard listens on the
// same port); `*bound` is the port it got. Throws std::runtime_error. (listener.cc)
int make_listener(const std::string& host, uint16_t port, uint16_t* bound);
// epoll_ctl `op` of `fd` for `events`, the fd as its data.
void epoll_set(int ep, int fd, uint32_t events, int op);

// What a worker does for one command of its own partition, or one forwarded to it: runs it on
// the engine (through the worker, so that the op log sees every write) and counts it.
// (commands.cc)
// `count`: false when the caller counts it later (count_result), or not at all.
Result run_on_owner(Service::Shard& s, server::Worker& w, const Call& c, std::string& scratch,
                    bool count = true);
void count_result(Service::Shard& s, const Call& c, const Result& r);

// One round of worker `w` over its shard `s`. Worker thread only.
class Connections {
 public:
  Connections(Service& svc, Service::Shard& s, server::Worker& w, const ServiceOptions& o,
              std::vector<server::Worker*>& workers,
              std::vector<std::unique_ptr<Service::Shard>>& shards, std::atomic<uint32_t>& curr)
      : svc_(svc), s_(s), w_(w), o_(o), workers_(workers), shards_(shards), curr_(curr) {}

  // The round: due flushes, the inbox, paused connections, then what epoll reports; true
  // when there was anything to do.
  bool run();

 private:
  // ---- sockets (listener.cc)
  void accept_all();
  void on_readable(Conn& c);
  void process(Conn& c);
  void emit(Conn& c, std::string_view bytes);
  void drain_pending(Conn& c);
  void flush_out(Conn& c);
  void close_conn(Conn& c);
  void update_events(Conn& c);
  bool retrieval_step(Conn& c);
  bool line_end_read(Conn& c);
  void account(Conn& c);
  void shed();
  void close_for_memory(Conn& c);
  void wait_for_budget(Conn& c);
  Conn* find(int fd, uint64_t id) {
    if (fd < 0 || static_cast<size_t>(fd) >= s_.conns.size()) return nullptr;
    Conn* c = s_.conns[fd].get();
    return c != nullptr && c->id == id ? c : nullptr;
  }

  // ---- command execution (commands.cc): each returns whether parsing may go on.
  bool text_command(Conn& c, std::string_view in, size_t* used);
  void start_retrieval(Conn& c, const TextCommand& cmd);
  bool text_unparsed(Conn& c, const ParseResult& pr);
  bool text_keyed(Conn& c, const TextCommand& cmd);
  bool text_other(Conn& c, const TextCommand& cmd);
  bool meta_command(Conn& c, const TextCommand& cmd);
  bool binary_command(Conn& c, std::string_view in, size_t* used);
  bool binary_packet(Conn& c, const binary::Packet& pk);
  bool refuse(Conn& c, std::string_view reply);  // a client error: counted and answered
  bool flush_all(Conn& c, Call& call);
  bool log_failing() const {  // a worker's op log cannot be written (Worker::log_failing)
    for (const server::Worker* w : workers_)
      if (w->log_failing()) return true;
    return false;
  }
  void stats_text(Conn& c, std::span<const std::string_view> args);
  // stats settings, slabs, items, sizes: false when `group` is none of them (stats.cc).
  bool stats_group(Conn& c, std::string_view group);

  // ---- key listings (dump.cc)
  bool lru_crawler(Conn& c, std::span<const std::string_view> args);
  bool cachedump(Conn& c, std::span<const std::string_view> args);
  void start_dump(Conn& c, bool meta, uint64_t limit);
  void queue_dump(Conn& c, const Dump& d, std::deque<Op*>::iterator at);
  void run_dump_st(Op& op);
  void continue_dump(Conn& c, Op* op);
  void stats_binary(Conn& c, const Call& call);
  std::vector<std::pair<std::string, std::string>> stat_lines();

  // ---- cross-worker forwarding (forward.cc)
  void submit(Conn& c, Call& call);
  void refetch(Conn& c, Op* op);
  void forward(Conn& c, Op* op);
  void send_forwarded(Conn& c, Op* op);
  void run_forwarded(Op* op);
  void keep_value(Op* op);
  void release_held_back(Conn& c);
  void broadcast_flush(Conn& c, Call& call);
  void hold_answer(Conn& c, uint64_t barrier, std::string answer);
  uint64_t log_barrier(const Call& call, const Result& r);
  void take_inbox();
  void send_outboxes();
  void hold_until_durable(uint64_t barrier, Op* op);

  Service& svc_;
  Service::Shard& s_;
  server::Worker& w_;
  const ServiceOptions& o_;
  std::vector<server::Worker*>& workers_;
  std::vector<std::unique_ptr<Service::Shard>>& shards_;
  std::atomic<uint32_t>& curr_;
  bool did_ = false;
};

}  // namespace fabkv::memcached
