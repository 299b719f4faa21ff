#include "memcached/service.h"

#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <unordered_set>

#include <fmt/format.h>

#include "control/client.h"
#include "memcached/shard.h"
#include "store/stats.h"

namespace fabkv::memcached {

Service::Service(const ServiceOptions& o, std::vector<server::Worker*> workers)
    : o_(o), workers_(std::move(workers)), started_(now_s()) {
  if (!control::split_host_port(o.listen, &host_, &port_))
    throw std::invalid_argument("--memcached wants HOST:PORT, got '" + o.listen + "'");
  // Room for the connections: raise the soft descriptor limit to the hard one if needed.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < o.max_conns + 256 &&
      rl.rlim_cur < rl.rlim_max) {
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
    s->budget = o.conn_memory / workers_.size();
    shards_.push_back(std::move(s));
  }
  port_ = port;
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
  // A delayed flush_all is the worker's (Worker::clear_at_st): no work here until its time.
  return s.inbox_pending.load(std::memory_order_seq_cst) || !s.resume.empty();
}

int Service::wait_fd(const server::Worker& w) const { return shards_[w.index()]->epoll_fd; }

bool Service::run_st(server::Worker& w) {
  Connections c(*this, *shards_[w.index()], w, o_, workers_, shards_, curr_conns_);
  return c.run();
}

store::StatsSnapshot Service::engine_totals() const {
  store::StatsSnapshot es;
  for (server::Worker* w : workers_) {
    const store::StatsSnapshot x = w->engine().stats();
    es.items += x.items;
    es.bytes += x.bytes;
    es.evictions += x.evictions;
    es.index_drops += x.index_drops;
    es.puts += x.puts;
    es.expired += x.expired;
    es.no_space += x.no_space;
  }
  return es;
}

nlohmann::json Service::stats() const {
  uint64_t sums[kCounters] = {};
  for (const auto& s : shards_)
    for (size_t i = 0; i < kCounters; ++i)
      sums[i] += s->counters[i].load(std::memory_order_relaxed);
  const store::StatsSnapshot es = engine_totals();
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
  uint64_t buffered = 0;
  for (const auto& s : shards_) buffered += s->buffered_bytes.load(std::memory_order_relaxed);
  o["conn_buffer_bytes"] = buffered;
  o["threads"] = workers_.size();
  o["limit_maxbytes"] = 0;
  o["item_size_max"] = o_.max_value;
  o["curr_items"] = es.items;
  o["total_items"] = es.puts;
  o["bytes"] = es.bytes;
  o["evictions"] = es.evictions + es.index_drops;
  o["expired_unfetched"] = es.expired;
  for (auto& [k, v] : o.items()) j[k] = v;
  return j;
}

}  // namespace fabkv::memcached
