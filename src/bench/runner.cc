#include "bench/runner.h"

#include <time.h>

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "common/cpu.h"
#include "common/deadline.h"

namespace fabkv::bench {
namespace {

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

// Polls every client until nothing is in flight; false when `deadline` passes first.
bool drain(Driver& d, size_t clients, const uint64_t& in_flight, Deadline deadline) {
  while (in_flight > 0) {
    for (size_t c = 0; c < clients; ++c) d.poll(c);
    if (deadline.expired()) return false;
  }
  return true;
}

}  // namespace

double Runner::load(const WorkloadSpec& w, uint32_t window, const LoadProgress& progress) {
  pin_this_thread(core_);
  const uint64_t total = std::min<uint64_t>(
      w.keys, static_cast<uint64_t>(std::ceil(w.fill * static_cast<double>(w.keys))));
  stored_.assign(w.keys, 0);
  const size_t clients = driver_.clients();
  std::vector<uint64_t> next(clients);  // client c loads keys c, c+clients, ...
  std::vector<uint32_t> in_flight(clients, 0);
  for (size_t c = 0; c < clients; ++c) next[c] = c;
  uint64_t done = 0, outstanding = 0;
  bool failed = false;
  std::string value;
  const int64_t t0 = now_ns();
  int64_t last_report = t0;
  auto stopped = [this] { return stop_ && stop_->load(std::memory_order_relaxed); };
  while (done < total && !failed && !stopped()) {
    for (size_t c = 0; c < clients; ++c) {
      while (in_flight[c] < window && next[c] < total) {
        uint64_t id = next[c];
        next[c] += clients;
        make_value(id, 0, value_size_for(w, id, 0), &value);
        bool ok = driver_.put(c, make_key(id, w.key_size), value,
                              [&, id, c](OpStatus s, std::string_view) {
                                in_flight[c]--;
                                outstanding--;
                                if (s != OpStatus::kOk) failed = true;
                                stored_[id] = 1;
                                done++;
                              });
        if (!ok) {
          failed = true;
          break;
        }
        in_flight[c]++;
        outstanding++;
      }
      driver_.poll(c);
    }
    int64_t t = now_ns();
    if (progress && t - last_report > 200'000'000) {
      progress(done, total, static_cast<double>(t - t0) / 1e9);
      last_report = t;
    }
  }
  drain(driver_, clients, outstanding, Deadline::after_ms(10000));
  if (stopped()) throw std::runtime_error("interrupted");
  if (failed) {
    std::string why = driver_.error();
    throw std::runtime_error("load phase failed: " + (why.empty() ? "a PUT was refused" : why));
  }
  double secs = static_cast<double>(now_ns() - t0) / 1e9;
  if (progress) progress(done, total, secs);
  return secs;
}

RunResult Runner::run(const RunSpec& spec, std::shared_ptr<const ScrambledZipfian> zipf) {
  pin_this_thread(core_);
  const WorkloadSpec& w = spec.workload;
  if (stored_.size() != w.keys) stored_.assign(w.keys, 0);
  if (spec.clients > driver_.clients())
    throw std::runtime_error(fmt::format("{} clients asked, driver has {}", spec.clients,
                                         driver_.clients()));
  RunResult r;
  r.per_client_ops.assign(spec.clients, 0);
  std::vector<OpStream> streams;
  for (size_t c = 0; c < spec.clients; ++c)
    streams.emplace_back(w, zipf, static_cast<uint32_t>(c));
  std::vector<uint32_t> in_flight(spec.clients, 0);
  uint64_t outstanding = 0;
  bool failed = false;
  // The interval [measure_from, measure_to) in ns; before it starts, measure_from is "never".
  int64_t measure_from = INT64_MAX, measure_to = INT64_MAX;

  auto complete = [&](size_t c, int64_t posted_at, bool is_rmw) {
    in_flight[c]--;
    outstanding--;
    int64_t t = now_ns();
    if (t >= measure_from && t < measure_to) {
      r.per_client_ops[c]++;
      r.ops++;
      r.latency.record(static_cast<uint64_t>(t - posted_at));
      (void)is_rmw;
    }
  };
  auto in_interval = [&] {
    int64_t t = now_ns();
    return t >= measure_from && t < measure_to;
  };
  // A GET's answer: checked against the generator whatever the system.
  auto check_get = [&](uint64_t id, bool was_stored, OpStatus s, std::string_view v) {
    if (in_interval()) r.gets++;
    if (s == OpStatus::kOk) {
      r.check.checked++;
      if (!check_value(id, w, v)) r.check.mismatches++;
    } else if (s == OpStatus::kNotFound) {
      r.check.misses++;
      if (was_stored) r.check.unexpected_misses++;
    } else {
      failed = true;
    }
  };
  std::string value;

  auto issue = [&](size_t c) -> bool {
    Op op = streams[c].next();
    const int64_t posted_at = now_ns();
    std::string key = make_key(op.key, w.key_size);
    const uint64_t id = op.key;
    switch (op.kind) {
      case OpKind::kGet:
        return driver_.get(c, key, [&, c, id, posted_at, was = stored_[id] != 0](OpStatus s, std::string_view v) {
          check_get(id, was, s, v);
          complete(c, posted_at, false);
        });
      case OpKind::kPut: {
        {
          uint32_t version = streams[c].next_version();
          make_value(id, version, value_size_for(w, id, version), &value);
        }
        return driver_.put(c, key, value, [&, c, id, posted_at](OpStatus s, std::string_view) {
          if (in_interval()) r.puts++;
          if (s == OpStatus::kOk) stored_[id] = 1;
          else failed = true;
          complete(c, posted_at, false);
        });
      }
      case OpKind::kReadModifyWrite:
        // YCSB F: read the record, then write it back modified; one op, one window slot, its
        // latency from the GET's post to the PUT's completion.
        return driver_.get(c, key, [&, c, id, key, posted_at, was = stored_[id] != 0](OpStatus s, std::string_view v) {
          check_get(id, was, s, v);
          std::string nv;
          uint32_t version = streams[c].next_version();
          make_value(id, version, value_size_for(w, id, version), &nv);
          bool ok = driver_.put(c, key, nv, [&, c, id, posted_at](OpStatus s2, std::string_view) {
            if (in_interval()) r.puts++;
            if (s2 == OpStatus::kOk) stored_[id] = 1;
            else failed = true;
            complete(c, posted_at, true);
          });
          if (!ok) {
            failed = true;
            complete(c, posted_at, true);
          }
        });
    }
    return false;
  };

  const int64_t start = now_ns();
  const int64_t warm_until = start + static_cast<int64_t>(spec.warmup_s * 1e9);
  const int64_t run_until = warm_until + static_cast<int64_t>(spec.duration_s * 1e9);
  fabric::VerbSnapshot client_before;
  ServerSample server_before;
  ProtocolCounters protocol_before;
  bool measuring = false;
  double cpu_from = 0;
  auto stopped = [this] { return stop_ && stop_->load(std::memory_order_relaxed); };
  while (!failed && !stopped()) {
    int64_t t = now_ns();
    if (!measuring && t >= warm_until) {
      // Sample, then open the interval: the stats round trip is not charged to it.
      if (auto v = driver_.client_verbs()) client_before = *v;
      protocol_before = driver_.protocol_counters();
      server_before = driver_.sample_server();
      measuring = true;
      cpu_from = thread_cpu_s();
      measure_from = now_ns();
      measure_to = measure_from + (run_until - warm_until);
    }
    if (measuring && t >= measure_to) break;
    for (size_t c = 0; c < spec.clients; ++c) {
      while (in_flight[c] < spec.window) {
        if (!issue(c)) {
          failed = true;
          break;
        }
        in_flight[c]++;
        outstanding++;
      }
      driver_.poll(c);
    }
  }
  if (measuring) r.load_cpu_s = thread_cpu_s() - cpu_from;
  const int64_t ended = std::min(now_ns(), measure_to);
  r.elapsed_s = static_cast<double>(ended - measure_from) / 1e9;
  r.requests = r.gets + r.puts;
  if (!failed) {
    if (auto v = driver_.client_verbs()) r.client_verbs = *v - client_before;
    r.protocol = driver_.protocol_counters();
    for (auto& [k, v] : r.protocol) v -= protocol_before[k];
    ServerSample after = driver_.sample_server();
    if (after.rounds && server_before.rounds) r.server_rounds = *after.rounds - *server_before.rounds;
    if (after.verbs && server_before.verbs) r.server_verbs = *after.verbs - *server_before.verbs;
    if (after.cpu_s && server_before.cpu_s) r.server_cpu_s = *after.cpu_s - *server_before.cpu_s;
    r.evictions = after.evictions;
  }
  bool drained = drain(driver_, spec.clients, outstanding, Deadline::after_ms(10000));
  if (stopped()) throw std::runtime_error("interrupted");
  if (failed || !drained) {
    std::string why = driver_.error();
    if (why.empty()) why = failed ? "a request failed" : "requests did not complete within 10 s";
    throw std::runtime_error(why);
  }
  return r;
}

}  // namespace fabkv::bench
