// Cross-worker forwarding (src/memcached/service.h, "Threads and queues"): a command whose key
// another worker owns goes to that worker's inbox as an Op, runs there, and comes back the same
// way to be answered in its connection's order; each partition is touched by its owner only.
#include "memcached/shard.h"
#include "store/hash.h"

namespace fabkv::memcached {

namespace {
// A formatted answer's bytes beside its value and key (VALUE line, flags, cas, binary header).
constexpr size_t kAnswerOverhead = 64;

// get, gets, gat, gats, mg and the binary GETs: what may bring a value back.
bool is_retrieval(const Request& req) { return req.kind == Kind::kGet || req.kind == Kind::kGat; }
}  // namespace

// Runs `call` for one key: here if this worker owns the key, else forwarded to its owner.
void Connections::submit(Conn& c, Call& call) {
  const uint32_t owner = store::partition_of(store::hash_key(call.req.key),
                                             static_cast<uint32_t>(workers_.size()));
  if (owner == s_.index) {
    Result r = run_on_owner(s_, w_, call, s_.scratch);
    if (const uint64_t barrier = log_barrier(call, r); barrier != 0) {
      // With --oplog the answer waits for the log (docs/durability.md), in its place among
      // the connection's answers, as a forwarded one waits for its owner. A noreply command
      // has none, but holds the answers after it the same way (an `mn` after it says it is
      // done, and a later GET must not answer before it).
      std::string answer;
      format(call, r, &answer);
      hold_answer(c, barrier, std::move(answer));
      return;
    }
    if (c.pending.empty()) {
      reserve_answer(c.out, r.value.size());
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
  op->owner = owner;
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
  // Every forwarded command takes its place among the connection's answers, a text noreply
  // one too (it answers nothing when its turn comes): a later answer must not leave before the
  // write it follows is done, and it counts towards the connection's limit (listener.cc).
  op->in_pending = true;
  // What it holds until it is back: its data, or for a retrieval the value it may bring.
  const bool retrieval = is_retrieval(call.req);
  if (retrieval) op->allowance = allowance(c);
  op->charge = retrieval ? op->allowance : op->key.size() + op->value.size();
  c.in_flight += op->charge;
  c.pending.push_back(op);
  forward(c, op);
}

// Order. A forwarded retrieval whose value turns out too large for its allowance is fetched
// again later (refetch), and a write sent after it to the same owner would run first and show
// in its answer (a `get k` answered with the value of the `set k` after it, or a miss after a
// `delete k`). So while a connection has retrievals out, a forwarded write waits here, and so
// does everything after it, until those retrievals are answered; retrievals alone go out at
// once (multi-gets stay pipelined). Local commands run at once: their keys are not any
// forwarded command's.
void Connections::forward(Conn& c, Op* op) {
  const bool retrieval = is_retrieval(op->call.req);
  if (!c.held_back.empty() || (!retrieval && c.unresolved > 0)) {
    op->held_back = true;
    c.held_back.push_back(op);
    return;
  }
  send_forwarded(c, op);
}

void Connections::send_forwarded(Conn& c, Op* op) {
  if (is_retrieval(op->call.req)) {
    op->unresolved = true;
    ++c.unresolved;
  }
  s_.outbox[op->owner].push_back(op);
  s_.count(kForwarded);
}

// Sends what waited behind retrievals now answered (forward()).
void Connections::release_held_back(Conn& c) {
  while (!c.held_back.empty()) {
    Op* op = c.held_back.front();
    const bool retrieval = is_retrieval(op->call.req);
    if (!retrieval && c.unresolved > 0) return;
    c.held_back.pop_front();
    op->held_back = false;
    send_forwarded(c, op);
  }
}

// A forwarded retrieval whose value was above its allowance (Op::deferred), now at the head of
// its connection's answers: fetched again with room for any value, one item at most.
void Connections::refetch(Conn& c, Op* op) {
  op->deferred = false;
  op->arrived = false;
  op->done = false;
  op->allowance = SIZE_MAX;
  op->charge = o_.max_value;
  c.in_flight += op->charge;
  s_.outbox[op->owner].push_back(op);
}

void Connections::broadcast_flush(Conn& c, Call& call) {
  for (uint32_t p = 0; p < workers_.size(); ++p) {
    if (p == s_.index) {
      run_on_owner(s_, w_, call, s_.scratch);
      // Its CLEAR is logged: the OK after it waits for the log, as every write's answer does.
      if (const uint64_t barrier = w_.log_barrier_st({}); barrier != 0) hold_answer(c, barrier, {});
      continue;
    }
    Op* op = new Op;
    op->call = call;
    op->call.req.key = {};
    op->origin = s_.index;
    op->owner = p;
    op->fd = c.fd;
    op->conn_id = c.id;
    op->in_pending = true;
    c.pending.push_back(op);
    forward(c, op);
  }
}

// A forwarded command, run by its key's owner. A retrieval whose value is larger than its
// allowance is not run at all but deferred (fetched again once it heads its connection's
// answers, with room for any value): a gat, or an mg with T, is first looked at without the
// touch, so that a deferred one has touched nothing, logged nothing and counted nothing, and
// runs once.
void Connections::run_forwarded(Op* op) {
  const Request& req = op->call.req;
  if (is_retrieval(req) && op->allowance != SIZE_MAX) {
    const bool plain = req.kind == Kind::kGet && !req.touch;
    Call look;
    look.req.key = req.key;  // a plain get (Request's default kind)
    Result r = run_on_owner(s_, w_, plain ? op->call : look, op->scratch, false);
    if (r.outcome == Outcome::kHit && r.value.size() > op->allowance) {
      op->deferred = true;
      return;
    }
    if (plain) {
      count_result(s_, op->call, r);
      op->res = r;
      keep_value(op);
      return;
    }
  }
  op->res = run_on_owner(s_, w_, op->call, op->scratch);
  keep_value(op);
}

// A hit's value copied into the op: the engine's view lasts only until a put.
void Connections::keep_value(Op* op) {
  if (op->res.outcome != Outcome::kHit) return;
  op->res_value.assign(op->res.value);
  op->res.value = op->res_value;
}

void Connections::take_inbox() {
  if (!s_.inbox_pending.load(std::memory_order_acquire)) return;
  {
    std::lock_guard lock(s_.mu);
    s_.taken.swap(s_.inbox);
    s_.inbox_pending.store(false, std::memory_order_relaxed);
  }
  did_ = true;
  // The connections to flush, by (fd, id) and looked up again before each flush: a flush can
  // close and free its connection (its answers end in quit, or the peer is gone), and the same
  // connection can come twice, not back to back (A, B, A).
  std::vector<std::pair<int, uint64_t>> touched;
  for (Op* op : s_.taken) {
    if (op->origin != s_.index || !op->done) {
      if (op->dump.active) {  // a piece of a key listing (dump.cc)
        run_dump_st(*op);
        s_.outbox[op->origin].push_back(op);
        continue;
      }
      // A command for this partition: run it and send it home.
      run_forwarded(op);
      op->done = true;
      if (const uint64_t barrier = log_barrier(op->call, op->res); barrier != 0) {
        hold_until_durable(barrier, op);  // --oplog-sync always: home once the log has it
        continue;
      }
      s_.outbox[op->origin].push_back(op);
      continue;
    }
    // One of ours, back from its owner: what it held is given back, its answer (if any) counted
    // as queued until it is written.
    op->arrived = true;
    Conn* c = find(op->fd, op->conn_id);
    if (c != nullptr) {
      c->in_flight -= op->charge;
      op->charge = 0;
      if (op->unresolved && !op->deferred) {  // answered: what waited behind it may go
        op->unresolved = false;
        --c->unresolved;
        release_held_back(*c);
      }
      if (touched.empty() || touched.back() != std::pair(c->fd, c->id))
        touched.emplace_back(c->fd, c->id);
    }
    if (c == nullptr || !op->in_pending) {
      delete op;
      continue;
    }
    op->value = std::string();  // its data is in the engine now (the answer needs only the key)
    op->call.req.value = {};
    if (!op->deferred)
      op->charge = op->res_value.size() + (op->ready ? 0 : op->key.size() + kAnswerOverhead);
    c->queued += op->charge;
    if (op->dump.active) continue_dump(*c, op);
  }
  s_.taken.clear();
  for (auto [fd, id] : touched)
    if (Conn* c = find(fd, id); c != nullptr) flush_out(*c);
}

// What the answer of `call` with result `r` waits for (Worker::log_barrier_st); a refusal for a
// failing log shows nothing and waits for nothing.
uint64_t Connections::log_barrier(const Call& call, const Result& r) {
  return r.outcome == Outcome::kLogFailed ? 0 : w_.log_barrier_st(call.req.key);
}

// Queues `answer` (may be empty: it then only keeps the answers after it waiting) among c's
// answers, to be sent once the worker's log is durable up to `barrier`; it comes back through
// this shard's inbox then.
void Connections::hold_answer(Conn& c, uint64_t barrier, std::string answer) {
  Op* op = new Op;
  op->origin = s_.index;
  op->fd = c.fd;
  op->conn_id = c.id;
  op->ready = true;
  op->done = true;
  op->in_pending = true;
  op->res_value = std::move(answer);
  op->charge = op->res_value.size();
  c.in_flight += op->charge;
  c.pending.push_back(op);
  hold_until_durable(barrier, op);
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

}  // namespace fabkv::memcached
