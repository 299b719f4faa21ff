#include "bench/runner.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <latch>
#include <stdexcept>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "common/cpu.h"
#include "common/deadline.h"

namespace fabkv::bench {
namespace {

constexpr int64_t kNever = INT64_MAX;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// CPU time of the calling thread so far.
double thread_cpu_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Key and value buffers for one post, reused. A driver may run completions while it posts
// (fabkv waits for a free slot by polling), and a completion may post (YCSB F's PUT), so
// posts nest: each level has its own buffers, and a deque keeps the outer ones in place.
class ScratchStack {
 public:
  struct Buffers {
    std::string key, value;
  };
  Buffers& enter() {
    if (depth_ == levels_.size()) levels_.emplace_back();
    return levels_[depth_++];
  }
  void leave() { --depth_; }

 private:
  std::deque<Buffers> levels_;
  size_t depth_ = 0;
};

}  // namespace

const char* to_string(ClientMode m) {
  return m == ClientMode::kIndependent ? "independent" : "shared";
}

ClientMode parse_client_mode(const std::string& s) {
  if (s == "shared") return ClientMode::kShared;
  if (s == "independent") return ClientMode::kIndependent;
  throw std::invalid_argument("--client-mode '" + s + "' is not shared or independent");
}

void Runner::reset_stored(uint64_t keys) {
  stored_ = std::make_unique<std::atomic<uint8_t>[]>(keys);
  stored_keys_ = keys;
}

double Runner::load(const WorkloadSpec& w, uint32_t window, const LoadProgress& progress) {
  pin_this_thread(core_);
  const uint64_t total = std::min<uint64_t>(
      w.keys, static_cast<uint64_t>(std::ceil(w.fill * static_cast<double>(w.keys))));
  reset_stored(w.keys);
  const size_t clients = driver_.clients();

  // Client c loads keys c, c+clients, ...: a completion's tag is its key id, and the id says
  // which client it was.
  struct LoadSink final : CompletionSink {
    Runner* runner = nullptr;
    std::vector<uint32_t> in_flight;
    uint64_t done = 0, outstanding = 0;
    bool failed = false;
    std::string why;
    void complete(uint64_t id, OpStatus s, std::string_view reason) override {
      in_flight[id % in_flight.size()]--;
      outstanding--;
      done++;
      if (s == OpStatus::kOk) {
        runner->stored_[id].store(1, std::memory_order_relaxed);
      } else if (!failed) {
        failed = true;
        why = reason;
      }
    }
  } sink;
  sink.runner = this;
  sink.in_flight.assign(clients, 0);
  std::vector<uint64_t> next(clients);
  for (size_t c = 0; c < clients; ++c) next[c] = c;
  std::string key, value;
  const int64_t t0 = now_ns();
  int64_t last_report = t0;
  uint32_t rounds = 0;
  while (sink.done < total && !sink.failed && !stopped()) {
    for (size_t c = 0; c < clients; ++c) {
      while (sink.in_flight[c] < window && next[c] < total) {
        const uint64_t id = next[c];
        next[c] += clients;
        make_key(id, w.key_size, &key);
        make_value(id, 0, value_size_for(w, id, 0), &value);
        sink.in_flight[c]++;
        sink.outstanding++;
        if (!driver_.put(c, key, value, Completion{&sink, id})) {
          sink.in_flight[c]--;
          sink.outstanding--;
          sink.failed = true;
          break;
        }
      }
      driver_.poll(c);
    }
    if (!progress || (++rounds & 63) != 0) continue;  // the clock only every 64 rounds
    const int64_t t = now_ns();
    if (t - last_report > 200'000'000) {
      progress(sink.done, total, static_cast<double>(t - t0) / 1e9);
      last_report = t;
    }
  }
  const Deadline deadline = Deadline::after_ms(10000);
  while (sink.outstanding > 0 && !deadline.expired())
    for (size_t c = 0; c < clients; ++c) driver_.poll(c);
  if (stopped()) throw std::runtime_error("interrupted");
  if (sink.failed) {
    std::string why = !sink.why.empty() ? sink.why : driver_.error();
    throw std::runtime_error("load phase failed: " + (why.empty() ? "a PUT was refused" : why));
  }
  double secs = static_cast<double>(now_ns() - t0) / 1e9;
  if (progress) progress(sink.done, total, secs);
  return secs;
}

// One load thread of a run: a contiguous slice of the logical clients, its own operation
// streams, its own table of outstanding requests (window slots per client; a slot's index is
// the request's Completion tag), histogram and counters. Thread 0 (the leader) drives client
// 0, opens the interval and takes the driver-wide samples at its edges.
class Runner::LoadThread final : public CompletionSink {
 public:
  // What the threads of one run share.
  struct Shared {
    explicit Shared(size_t threads)
        : threads(threads), posting_done(static_cast<std::ptrdiff_t>(threads)) {}
    const size_t threads;
    // Threads that have entered main(): the leader starts the warm-up once all have, so that
    // every client is running when the interval opens.
    std::atomic<size_t> started{0};
    std::atomic<int64_t> measure_from{kNever}, measure_to{kNever};  // published by the leader
    // The leader is taking the start-of-interval samples: the others post nothing new, or
    // their sends would be counted in the client and server verbs while their requests, answered
    // before the interval opens, are not (a stats round trip under load took long enough for
    // 16% more SENDs than requests, tests/bench/driver_test.cc).
    std::atomic<bool> sampling{false};
    std::atomic<bool> failed{false};
    std::latch posting_done;  // every thread has stopped posting
    std::latch sampled{1};    // the leader has taken the end-of-interval samples
  };

  LoadThread(Runner& runner, const RunSpec& spec,
             const std::shared_ptr<const ScrambledZipfian>& zipf, size_t first, size_t n,
             Shared& shared, bool leader)
      : runner_(runner),
        sleep_when_idle_(spec.mode == ClientMode::kIndependent),
        driver_(runner.driver_),
        w_(spec.workload),
        window_(spec.window),
        first_(first),
        n_(n),
        sh_(shared),
        leader_(leader),
        warmup_ns_(static_cast<int64_t>(spec.warmup_s * 1e9)),
        duration_ns_(static_cast<int64_t>(spec.duration_s * 1e9)) {
    streams_.reserve(n);
    for (size_t c = 0; c < n; ++c)
      streams_.emplace_back(w_, zipf, static_cast<uint32_t>(first + c));
    in_flight_.assign(n, 0);
    slots_.resize(n * window_);
    if (w_.multiget > 1) {
      multi_ids_.resize(slots_.size() * w_.multiget);
      multi_stored_.resize(slots_.size() * w_.multiget);
      multi_keys_.resize(w_.multiget);
      multi_views_.resize(w_.multiget);
    }
    free_.resize(n * window_);
    n_free_.assign(n, window_);
    for (size_t c = 0; c < n; ++c)
      for (uint32_t i = 0; i < window_; ++i)
        free_[c * window_ + i] = static_cast<uint32_t>(c * window_ + i);
    r_.per_client_ops.assign(n, 0);
  }

  // The whole life of the thread in a run; never throws (failures are in error()).
  void main() {
    sh_.started.fetch_add(1, std::memory_order_release);
    try {
      if (leader_) wait_for_all_started(Deadline::after_ms(10000));
      loop();
    } catch (const std::exception& e) {
      fail(e.what());
    }
    const double cpu_to = thread_cpu_s();
    if (measuring_) {
      r_.load_cpu_s = cpu_to - cpu_from_;
      try {
        r_.protocol = driver_.protocol_counters(first_, n_);
        for (auto& [k, v] : r_.protocol) v -= protocol_before_[k];
        r_.server_requests = driver_.server_requests(first_, n_);
        for (size_t i = 0; i < r_.server_requests.size(); ++i)
          r_.server_requests[i] -= server_requests_before_.at(i);
      } catch (const std::exception& e) {
        fail(e.what());
      }
    }
    // The leader samples once nobody posts any more, and before anybody drains.
    sh_.posting_done.count_down();
    if (leader_) {
      sh_.posting_done.wait();
      try {
        sample_end();
      } catch (const std::exception& e) {
        fail(e.what());
      }
      sh_.sampled.count_down();
    } else {
      sh_.sampled.wait();
    }
    drained_ = drain(Deadline::after_ms(10000));
  }

  RunResult& result() { return r_; }
  const std::string& error() const { return error_; }
  bool failed() const { return failed_; }
  bool drained() const { return drained_; }
  size_t first() const { return first_; }
  int64_t measure_from() const { return measure_from_; }
  int64_t ended() const { return ended_; }

  void complete(uint64_t tag, OpStatus st, std::string_view v) override {
    Slot& sl = slots_[tag];
    const int64_t t = completion_now();
    const bool in = t >= measure_from_ && t < measure_to_;
    switch (sl.kind) {
      case OpKind::kGet:
        if (w_.multiget > 1) {
          // A multi-get: one answer per key, in order; the request ends with the last.
          const size_t i = size_t{tag} * w_.multiget + sl.multi_got++;
          check_get(multi_ids_[i], multi_stored_[i] != 0, st, v, in);
          if (sl.multi_got < w_.multiget) return;
        } else {
          check_get(sl.id, sl.was_stored, st, v, in);
        }
        break;
      case OpKind::kPut: put_done(sl, st, v, in); break;
      case OpKind::kReadModifyWrite:
        // YCSB F: read the record, then write it back modified; one op, one window slot, its
        // latency from the GET's post to the PUT's completion.
        if (!sl.rmw_put) {
          check_get(sl.id, sl.was_stored, st, v, in);
          if (st == OpStatus::kError) break;
          sl.rmw_put = true;
          if (!post_put(sl, static_cast<uint32_t>(tag))) {
            fail(driver_.error());
            break;
          }
          return;  // the slot stays taken until the PUT completes
        }
        put_done(sl, st, v, in);
        break;
    }
    finish(static_cast<uint32_t>(tag), t, in);
  }

 private:
  struct Slot {
    int64_t posted_at = 0;
    uint64_t id = 0;
    uint32_t client = 0;  // index in this thread's slice
    OpKind kind = OpKind::kGet;
    bool was_stored = false;  // the key was known to be stored when the GET was posted
    bool rmw_put = false;     // a read-modify-write past its GET
    uint32_t multi_got = 0;   // a multi-get: the keys answered so far
  };

  // One clock read per post; completions share one read per poll (or per post that ran
  // completions while it waited), taken when the first of them runs.
  int64_t now() {
    last_now_ = now_ns();
    fresh_ = true;
    return last_now_;
  }
  int64_t completion_now() {
    if (!have_poll_now_) {
      poll_now_ = now();
      have_poll_now_ = true;
    }
    return poll_now_;
  }
  void poll(size_t c) {
    have_poll_now_ = false;
    driver_.poll(first_ + c);
  }

  void loop() {
    const int64_t warm_until = now() + warmup_ns_;
    uint32_t idle_rounds = 0;
    while (true) {
      // The newest clock read of the last round is recent enough to decide the interval. A
      // round that read none (nothing posted or completed: waiting on the system) reads it
      // only every 64th time: an idle poll is ~0.1 us, and a clock read in each one was a
      // third of the load thread's profile against fabkv. The failure and stop flags are read
      // with the clock: an empty round is what a waiting answer waits half of, on average.
      const bool look = fresh_ || (++idle_rounds & 63) == 0;
      if (!fresh_ && look) now();
      const int64_t t = last_now_;
      fresh_ = false;
      if (!measuring_) {
        if (leader_ && t >= warm_until) {
          // Sample, then open the interval: the stats round trip is not charged to it.
          sh_.sampling.store(true, std::memory_order_relaxed);
          struct Resume {  // also when a sample throws (the run then fails)
            std::atomic<bool>& f;
            ~Resume() { f.store(false, std::memory_order_release); }
          } resume{sh_.sampling};
          if (auto v = driver_.client_verbs()) client_before_ = *v;
          have_poll_now_ = false;
          server_before_ = driver_.sample_server();
          const int64_t from = now_ns();
          sh_.measure_to.store(from + duration_ns_, std::memory_order_relaxed);
          sh_.measure_from.store(from, std::memory_order_release);
          start_measuring(from, from + duration_ns_);
        } else if (!leader_) {
          const int64_t from = sh_.measure_from.load(std::memory_order_acquire);
          if (from != kNever) start_measuring(from, sh_.measure_to.load(std::memory_order_relaxed));
        }
      }
      if (t >= measure_to_) break;
      if (look && (sh_.failed.load(std::memory_order_relaxed) || runner_.stopped())) break;
      // While the leader samples, only poll: what is in flight then is all that can straddle
      // the interval's start.
      const bool hold = !leader_ && !measuring_ && sh_.sampling.load(std::memory_order_acquire);
      for (size_t c = 0; c < n_; ++c) {
        while (!hold && in_flight_[c] < window_) {
          if (!issue(c)) {
            fail(driver_.error());
            return;
          }
        }
        poll(c);
      }
      // Independent clients may outnumber their cores: one waiting on its server sleeps on
      // its connection (at most 1 ms, so the interval's end is seen), or else yields, so that
      // the others run rather than it spinning out its time slice.
      if (sleep_when_idle_ && !fresh_ && !driver_.wait(first_, 1)) std::this_thread::yield();
    }
    ended_ = std::min(now_ns(), measure_to_);
  }

  // The start barrier (leader only): throws when a thread has not started within the bound.
  void wait_for_all_started(Deadline deadline) {
    while (sh_.started.load(std::memory_order_acquire) < sh_.threads) {
      if (sh_.failed.load(std::memory_order_relaxed)) return;
      if (deadline.expired())
        throw std::runtime_error(fmt::format("{} of {} load threads started within 10 s",
                                             sh_.started.load(), sh_.threads));
      std::this_thread::yield();
    }
  }

  void start_measuring(int64_t from, int64_t to) {
    protocol_before_ = driver_.protocol_counters(first_, n_);
    server_requests_before_ = driver_.server_requests(first_, n_);
    cpu_from_ = thread_cpu_s();
    measure_from_ = from;
    measure_to_ = to;
    measuring_ = true;
  }

  // The driver-wide samples at the interval's end (leader only).
  void sample_end() {
    if (sh_.failed.load() || !measuring_) return;
    if (auto v = driver_.client_verbs()) r_.client_verbs = *v - client_before_;
    have_poll_now_ = false;
    ServerSample after = driver_.sample_server();
    if (after.rounds && server_before_.rounds)
      r_.server_rounds = *after.rounds - *server_before_.rounds;
    if (after.verbs && server_before_.verbs) r_.server_verbs = *after.verbs - *server_before_.verbs;
    if (after.cpu_s && server_before_.cpu_s) r_.server_cpu_s = *after.cpu_s - *server_before_.cpu_s;
    r_.evictions = after.evictions;
  }

  bool issue(size_t c) {
    const Op op = streams_[c].next();
    const uint32_t s = free_[c * window_ + --n_free_[c]];
    Slot& sl = slots_[s];
    sl.id = op.key;
    sl.client = static_cast<uint32_t>(c);
    sl.kind = op.kind;
    sl.rmw_put = false;
    sl.was_stored = runner_.stored_[op.key].load(std::memory_order_relaxed) != 0;
    in_flight_[c]++;
    outstanding_++;
    ScratchStack::Buffers& b = scratch_.enter();
    make_key(op.key, w_.key_size, &b.key);
    bool ok;
    if (op.kind == OpKind::kPut) {
      const uint32_t version = streams_[c].next_version();
      make_value(op.key, version, value_size_for(w_, op.key, version), &b.value);
      sl.posted_at = post_now();
      ok = driver_.put(first_ + c, b.key, b.value, Completion{this, s});
    } else if (w_.multiget > 1) {
      // Keys 1.. are further draws from the distribution; their ids and whether they were
      // stored are kept per slot for the answers' checks.
      const size_t at = size_t{s} * w_.multiget;
      for (uint32_t i = 0; i < w_.multiget; ++i) {
        const uint64_t id = i == 0 ? op.key : streams_[c].next_key();
        multi_ids_[at + i] = id;
        multi_stored_[at + i] = runner_.stored_[id].load(std::memory_order_relaxed);
        make_key(id, w_.key_size, &multi_keys_[i]);
        multi_views_[i] = multi_keys_[i];
      }
      sl.multi_got = 0;
      sl.posted_at = post_now();
      ok = driver_.multi_get(first_ + c, multi_views_, Completion{this, s});
    } else {
      sl.posted_at = post_now();
      ok = driver_.get(first_ + c, b.key, Completion{this, s});
    }
    scratch_.leave();
    if (!ok) {
      in_flight_[c]--;
      outstanding_--;
      free_[c * window_ + n_free_[c]++] = s;
    }
    return ok;
  }
  int64_t post_now() {
    have_poll_now_ = false;  // completions run inside the post read the clock themselves
    return now();
  }

  // The PUT half of a read-modify-write, in the GET's slot.
  bool post_put(const Slot& sl, uint32_t tag) {
    ScratchStack::Buffers& b = scratch_.enter();
    const uint32_t version = streams_[sl.client].next_version();
    make_key(sl.id, w_.key_size, &b.key);
    make_value(sl.id, version, value_size_for(w_, sl.id, version), &b.value);
    const bool saved = have_poll_now_;
    const bool ok = driver_.put(first_ + sl.client, b.key, b.value, Completion{this, tag});
    have_poll_now_ = saved;
    scratch_.leave();
    return ok;
  }

  // A GET's answer (one key's, in a multi-get): checked against the generator whatever the
  // system. `was_stored`: the key was known to be stored when the GET was posted.
  void check_get(uint64_t id, bool was_stored, OpStatus s, std::string_view v, bool in) {
    if (in) r_.gets++;
    if (s == OpStatus::kOk) {
      r_.check.checked++;
      if (!check_value(id, w_, v)) r_.check.mismatches++;
    } else if (s == OpStatus::kNotFound) {
      r_.check.misses++;
      if (was_stored) r_.check.unexpected_misses++;
    } else {
      fail(v);
    }
  }
  void put_done(const Slot& sl, OpStatus s, std::string_view why, bool in) {
    if (in) r_.puts++;
    if (s == OpStatus::kOk) runner_.stored_[sl.id].store(1, std::memory_order_relaxed);
    else fail(why);
  }

  void finish(uint32_t tag, int64_t t, bool in) {
    const Slot& sl = slots_[tag];
    const uint32_t c = sl.client;
    in_flight_[c]--;
    outstanding_--;
    free_[c * window_ + n_free_[c]++] = tag;
    if (in) {
      r_.per_client_ops[c]++;
      r_.ops++;
      r_.latency.record(static_cast<uint64_t>(t - sl.posted_at));
    }
  }

  void fail(std::string_view why) {
    if (!failed_ && !why.empty()) error_ = why;
    failed_ = true;
    sh_.failed.store(true, std::memory_order_relaxed);
  }

  // Polls this slice until nothing is in flight; false when `deadline` passes first.
  bool drain(Deadline deadline) {
    while (outstanding_ > 0) {
      for (size_t c = 0; c < n_; ++c) poll(c);
      if (deadline.expired()) return false;
    }
    return true;
  }

  Runner& runner_;
  const bool sleep_when_idle_;
  Driver& driver_;
  const WorkloadSpec& w_;
  const uint32_t window_;
  const size_t first_, n_;
  Shared& sh_;
  const bool leader_;
  const int64_t warmup_ns_, duration_ns_;

  std::vector<OpStream> streams_;
  std::vector<uint32_t> in_flight_;
  std::vector<Slot> slots_;
  // Multi-gets (w_.multiget > 1): per slot its keys' ids and stored flags; the keys being posted.
  std::vector<uint64_t> multi_ids_;
  std::vector<uint8_t> multi_stored_;
  std::vector<std::string> multi_keys_;
  std::vector<std::string_view> multi_views_;
  std::vector<uint32_t> free_;    // per client: a stack of its free slot indices
  std::vector<uint32_t> n_free_;  // per client: how many are on it
  uint64_t outstanding_ = 0;
  ScratchStack scratch_;

  int64_t last_now_ = 0, poll_now_ = 0;
  bool fresh_ = false, have_poll_now_ = false;
  bool measuring_ = false;
  int64_t measure_from_ = kNever, measure_to_ = kNever, ended_ = kNever;
  double cpu_from_ = 0;
  ProtocolCounters protocol_before_;
  std::vector<uint64_t> server_requests_before_;
  fabric::VerbSnapshot client_before_;
  ServerSample server_before_;

  RunResult r_;
  std::string error_;
  bool failed_ = false, drained_ = false;
};

bool Runner::stopped() const { return stop_ && stop_->load(std::memory_order_relaxed); }

RunResult Runner::run(const RunSpec& spec, std::shared_ptr<const ScrambledZipfian> zipf) {
  pin_this_thread(core_);
  const WorkloadSpec& w = spec.workload;
  if (stored_keys_ != w.keys) reset_stored(w.keys);
  if (spec.clients > driver_.clients())
    throw std::runtime_error(fmt::format("{} clients asked, driver has {}", spec.clients,
                                         driver_.clients()));
  // Independent: a thread per client, spread over `spec.threads` cores from the client core.
  const bool independent = spec.mode == ClientMode::kIndependent;
  const size_t threads = independent ? spec.clients
                                     : std::clamp<size_t>(spec.threads, 1, spec.clients);
  const size_t cores = std::clamp<size_t>(spec.threads, 1, threads);
  LoadThread::Shared shared(threads);
  std::vector<std::unique_ptr<LoadThread>> lts;
  for (size_t i = 0; i < threads; ++i) {
    const size_t first = i * spec.clients / threads, end = (i + 1) * spec.clients / threads;
    lts.push_back(std::make_unique<LoadThread>(*this, spec, zipf, first, end - first, shared,
                                               i == 0));
  }
  std::vector<std::thread> others;
  std::string start_error;
  for (size_t i = 1; i < threads; ++i) {
    try {
      others.emplace_back([this, &lts, i, cores] {
        pin_this_thread(core_ < 0 ? -1 : core_ + static_cast<int>(i % cores));
        lts[i]->main();
      });
    } catch (const std::system_error& e) {
      // The threads that did start stop at once; the missing ones are counted as done.
      start_error = fmt::format("cannot start load thread {}: {}", i, e.what());
      shared.failed.store(true);
      for (size_t j = i; j < threads; ++j) shared.posting_done.count_down();
      break;
    }
  }
  lts[0]->main();
  for (auto& t : others) t.join();

  RunResult r;
  r.load_threads = threads;
  r.mode = spec.mode;
  r.per_client_ops.assign(spec.clients, 0);
  const LoadThread& leader = *lts[0];
  r.elapsed_s = static_cast<double>(leader.ended() - leader.measure_from()) / 1e9;
  bool failed = !start_error.empty(), drained = true;
  std::string why = start_error;
  for (auto& lt : lts) {
    RunResult& p = lt->result();
    r.ops += p.ops;
    r.gets += p.gets;
    r.puts += p.puts;
    r.load_cpu_s += p.load_cpu_s;
    r.latency.merge(p.latency);
    r.check.checked += p.check.checked;
    r.check.mismatches += p.check.mismatches;
    r.check.misses += p.check.misses;
    r.check.unexpected_misses += p.check.unexpected_misses;
    for (const auto& [k, v] : p.protocol) r.protocol[k] += v;
    r.server_requests.resize(std::max(r.server_requests.size(), p.server_requests.size()));
    for (size_t i = 0; i < p.server_requests.size(); ++i)
      r.server_requests[i] += p.server_requests[i];
    std::copy(p.per_client_ops.begin(), p.per_client_ops.end(),
              r.per_client_ops.begin() + lt->first());
    failed |= lt->failed();
    drained &= lt->drained();
    if (why.empty() && lt->failed()) why = lt->error();
  }
  // A multi-get's keys are answered in one poll, so they fall in the interval together.
  r.requests = r.gets / spec.workload.multiget + r.puts;
  RunResult& lr = lts[0]->result();
  r.client_verbs = lr.client_verbs;
  r.server_verbs = lr.server_verbs;
  r.server_cpu_s = lr.server_cpu_s;
  r.server_rounds = lr.server_rounds;
  r.evictions = lr.evictions;
  if (stopped()) throw std::runtime_error("interrupted");
  if (failed || !drained) {
    if (why.empty()) why = driver_.error();
    if (why.empty()) why = failed ? "a request failed" : "requests did not complete within 10 s";
    throw std::runtime_error(why);
  }
  return r;
}

}  // namespace fabkv::bench
