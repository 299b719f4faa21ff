// The fabkv driver: one fabkv::Client (its own fabric, endpoint, completion queue and
// counters) per logical client, driven through the asynchronous API; or, for fabkv-cluster,
// one fabkv::Cluster per logical client (client/cluster.h: a Client per server, the ketama
// ring choosing one per key). One template drives both: they share the asynchronous calls and
// poll(), and the few things that differ (connecting, the servers behind a logical client) are
// the overloads below. Clients share nothing but the first-error text, so different load
// threads may drive different clients.
#include <fmt/format.h>

#include <fstream>
#include <mutex>
#include <sstream>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "bench/driver.h"
#include "client/client.h"
#include "client/cluster.h"
#include "proto/registry.h"

namespace fabkv::bench {

std::optional<double> process_cpu_seconds(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return std::nullopt;
  // The command name (field 2) may hold spaces: fields resume after its closing ')'.
  auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream in(line.substr(close + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

namespace {

fabric::VerbSnapshot verbs_from_json(const nlohmann::json& j) {
  fabric::VerbSnapshot s;
  for (size_t i = 0; i < fabric::kVerbKinds; ++i) {
    const char* name = fabric::to_string(static_cast<fabric::Verb>(i));
    if (!j.contains(name)) continue;
    const auto& o = j[name];
    fabric::VerbStats& v = s.verbs[i];
    v.posted = o.value("posted", uint64_t{0});
    v.bytes = o.value("bytes", uint64_t{0});
    v.completed = o.value("completed", uint64_t{0});
    v.errors = o.value("errors", uint64_t{0});
    v.inbound = o.value("inbound", uint64_t{0});
    v.inbound_bytes = o.value("inbound_bytes", uint64_t{0});
  }
  return s;
}

OpStatus map(Status s) {
  if (s == Status::kOk) return OpStatus::kOk;
  if (s == Status::kNotFound) return OpStatus::kNotFound;
  return OpStatus::kError;
}

// The servers behind one logical client, and connecting it: a Client is its one server, a
// Cluster has one Client per server (connected here, so that the runs measure requests, not
// connection set-up, and a server that is not there fails the start as --server does).
size_t server_count(const Client&) { return 1; }
size_t server_count(const Cluster& c) { return c.size(); }
const Client* server_client(const Client& c, size_t) { return &c; }
const Client* server_client(const Cluster& c, size_t i) { return c.connected_client(i); }
Client* server_client(Client& c, size_t) { return &c; }
Client* server_client(Cluster& c, size_t i) { return c.client(i); }

void open(const DriverOptions& o, const ClientOptions& co, std::unique_ptr<Client>* out) {
  try {
    *out = Client::connect(co);
  } catch (const ClientError& e) {
    throw std::runtime_error(fmt::format("fabkv server at {} ({}): {}", o.address,
                                         to_string(e.status()), e.what()));
  }
}

void open(const DriverOptions& o, const ClientOptions& co, std::unique_ptr<Cluster>* out) {
  ClusterOptions cl = *o.cluster;
  cl.client = co;
  auto c = std::make_unique<Cluster>(std::move(cl));  // invalid_argument: a bad list
  for (size_t i = 0; i < c->size(); ++i) {
    std::string why;
    if (!c->client(i, &why))
      throw std::runtime_error(fmt::format("fabkv cluster server {} at {}: {}", c->server(i).name,
                                           c->server(i).address, why));
  }
  *out = std::move(c);
}

// The sum of the CPU seconds of the servers we started; nullopt when one is unknown.
std::optional<double> servers_cpu_seconds(const DriverOptions& o) {
  if (o.server_pids.empty()) return process_cpu_seconds(o.server_pid);
  double sum = 0;
  for (pid_t p : o.server_pids) {
    auto s = process_cpu_seconds(p);
    if (!s) return std::nullopt;
    sum += *s;
  }
  return sum;
}

// Conn: Client (system "fabkv") or Cluster ("fabkv-cluster").
template <class Conn>
class FabkvDriver final : public Driver {
  static constexpr bool kCluster = std::is_same_v<Conn, Cluster>;

 public:
  explicit FabkvDriver(const DriverOptions& o)
      : o_(o),
        seq_(proto::find(o.protocol) != nullptr &&
             proto::find(o.protocol)->engine == proto::EngineNeed::kNone) {
    if (seq_ && kCluster)  // bench.cc refuses it first
      throw std::invalid_argument("a sequencer has no keys to place on a cluster");
    ClientOptions co;
    co.server = o.address;
    co.protocol = o.protocol;
    co.provider = o.provider;
    co.secret = o.secret;
    co.timeout_ms = o.timeout_ms;
    co.protocol_options.pilaf.parallel_probes = o.pilaf_parallel_probes;
    clients_.resize(o.clients);
    for (auto& c : clients_) open(o, co, &c);
    values_.resize(clients_.size());
    // The largest value every server takes; a window every server has.
    max_value_ = UINT64_MAX;
    for (size_t i = 0; i < server_count(*clients_.front()); ++i) {
      const auto& layout = server_client(std::as_const(*clients_.front()), i)->layout();
      max_value_ = std::min(max_value_, layout.value("max_value", uint64_t{0}));
      uint64_t w = layout.value("window", uint64_t{0});
      if (w && o.window > w)
        throw std::runtime_error(
            fmt::format("--window {} exceeds the server's window {} (start "
                        "fabkv-server with --window {})",
                        o.window, w, o.window));
    }
  }

  std::string system() const override { return kCluster ? "fabkv-cluster" : "fabkv"; }
  std::string protocol() const override { return o_.protocol; }
  size_t clients() const override { return clients_.size(); }

  // The callbacks hold only the 16-byte Completion, so std::function keeps them inline: no
  // allocation per request here (what the client library does inside is its own).
  bool get(size_t c, std::string_view key, Completion done) override {
    if (seq_) return next(c, done, true);
    Status s = clients_[c]->get_async(key, [done](Status st, std::string_view v, uint64_t) {
      if (st == Status::kOk || st == Status::kNotFound) done(map(st), v);
      else failed(done, st);
    });
    return posted(s);
  }
  bool put(size_t c, std::string_view key, std::string_view value, Completion done) override {
    if (seq_) return next(c, done, false);
    Status s = clients_[c]->put_async(key, value, [done](Status st, std::string_view, uint64_t) {
      if (st == Status::kOk) done(OpStatus::kOk, {});
      else failed(done, st);
    });
    return posted(s);
  }
  size_t poll(size_t c) override { return clients_[c]->poll(); }
  uint64_t max_value() const override { return max_value_; }

  std::optional<fabric::VerbSnapshot> client_verbs() const override {
    fabric::VerbSnapshot sum;
    for (const auto& c : clients_)
      for (size_t i = 0; i < server_count(*c); ++i)
        if (const Client* sc = server_client(std::as_const(*c), i)) sum += sc->counters();
    return sum;
  }

  ProtocolCounters protocol_counters(size_t first, size_t n) const override {
    ProtocolCounters sum;
    for (size_t i = first; i < first + n && i < clients_.size(); ++i)
      for (size_t j = 0; j < server_count(*clients_[i]); ++j) {
        const Client* sc = server_client(std::as_const(*clients_[i]), j);
        if (!sc) continue;
        const nlohmann::json counters = sc->protocol_counters();
        for (const auto& [k, v] : counters.items())
          if (v.is_number_unsigned()) sum[k] += v.template get<uint64_t>();
      }
    return sum;
  }

  std::vector<uint64_t> server_requests(size_t first, size_t n) const override {
    if constexpr (!kCluster) {
      return {};
    } else {
      std::vector<uint64_t> sum(clients_.front()->size(), 0);
      for (size_t i = first; i < first + n && i < clients_.size(); ++i)
        for (size_t j = 0; j < sum.size(); ++j) sum[j] += clients_[i]->counters(j).requests;
      return sum;
    }
  }

  // Summed over the servers (a cluster's are all asked, over client 0's connections).
  ServerSample sample_server() override {
    ServerSample s;
    s.cpu_s = servers_cpu_seconds(o_);
    fabric::VerbSnapshot v;
    uint64_t rounds = 0;
    for (size_t i = 0; i < server_count(*clients_.front()); ++i) {
      Client* sc = server_client(*clients_.front(), i);
      if (!sc) throw std::runtime_error(fmt::format("fabkv cluster server {} is gone", i));
      nlohmann::json st = sc->stats();
      for (const auto& w : st.value("workers", nlohmann::json::array())) {
        if (w.contains("verbs")) v += verbs_from_json(w["verbs"]);
        // Both are items the lossy cache engine gave up: log space written over (evictions)
        // and the oldest entry of a full index bucket (index_drops, MICA's lossy index).
        if (w.contains("engine"))
          s.evictions += w["engine"].value("evictions", uint64_t{0}) +
                         w["engine"].value("index_drops", uint64_t{0});
        rounds += w.value("rounds", uint64_t{0});
      }
    }
    s.verbs = v;
    s.rounds = rounds;
    return s;
  }
  std::optional<nlohmann::json> sequence_check() const override {
    if (!seq_) return std::nullopt;
    std::vector<uint64_t> all;
    uint64_t decreases = 0;
    for (const auto& vs : values_) {
      for (size_t i = 1; i < vs.size(); ++i)
        if (vs[i] <= vs[i - 1]) decreases++;
      all.insert(all.end(), vs.begin(), vs.end());
    }
    std::sort(all.begin(), all.end());
    uint64_t duplicates = 0;
    for (size_t i = 1; i < all.size(); ++i)
      if (all[i] == all[i - 1]) duplicates++;
    const uint64_t distinct = all.size() - duplicates;
    const uint64_t gaps = all.empty() ? 0 : all.back() - all.front() + 1 - distinct;
    return nlohmann::json{{"values", all.size()},
                          {"unique", duplicates == 0},
                          {"duplicates", duplicates},
                          {"per_client_increasing", decreases == 0},
                          {"decreases", decreases},
                          {"gaps", gaps},
                          {"min", all.empty() ? 0 : all.front()},
                          {"max", all.empty() ? 0 : all.back()},
                          {"failed", seq_failed_.load()},
                          {"truncated", recorded_.load() >= kMaxRecorded}};
  }

  std::string error() const override {
    std::lock_guard<std::mutex> l(error_mu_);
    return error_;
  }

 private:
  // A request that failed: the sink gets the reason (error() is for posts that failed).
  static void failed(const Completion& done, Status st) {
    const std::string why = fmt::format("fabkv request failed: {}", to_string(st));
    done(OpStatus::kError, why);
  }
  bool posted(Status s) {
    if (s == Status::kOk) return true;
    std::lock_guard<std::mutex> l(error_mu_);  // clients are driven from several threads
    if (error_.empty()) error_ = fmt::format("fabkv request failed: {}", to_string(s));
    return false;
  }

  // A sequencer's operation, whatever the workload asked for: next(). Each value is kept per
  // client in the order the answers came (sequence_check). The callback holds more than the
  // 16-byte Completion, so std::function allocates here (sequencers only).
  bool next(size_t c, Completion done, bool as_get) {
    if constexpr (kCluster) {
      return posted(Status::kError);  // refused by the constructor
    } else {
      return next_on(*clients_[c], c, done, as_get);
    }
  }
  bool next_on(Client& client, size_t c, Completion done, bool as_get) {
    Status s = client.next_async([this, c, done, as_get](Status st, std::string_view, uint64_t v) {
      if (st != Status::kOk) {
        seq_failed_.fetch_add(1, std::memory_order_relaxed);
        failed(done, st);
        return;
      }
      if (recorded_.fetch_add(1, std::memory_order_relaxed) < kMaxRecorded) values_[c].push_back(v);
      // No key-value answer to check: a GET's is reported as a miss (the runner stores
      // nothing for a sequencer: bench.cc skips the load phase), a PUT's as done.
      done(as_get ? OpStatus::kNotFound : OpStatus::kOk, {});
    });
    return posted(s);
  }

  static constexpr uint64_t kMaxRecorded = uint64_t{1} << 27;  // 1 GiB of values at most

  DriverOptions o_;
  const bool seq_;
  std::vector<std::vector<uint64_t>> values_;  // sequencer: per client, in answer order
  std::atomic<uint64_t> recorded_{0}, seq_failed_{0};
  std::vector<std::unique_ptr<Conn>> clients_;
  uint64_t max_value_ = 0;
  mutable std::mutex error_mu_;
  std::string error_;
};

}  // namespace

std::unique_ptr<Driver> make_fabkv_driver(const DriverOptions& o) {
  if (o.cluster) return std::make_unique<FabkvDriver<Cluster>>(o);
  return std::make_unique<FabkvDriver<Client>>(o);
}

}  // namespace fabkv::bench
