// fabkv::Cluster (client/cluster.h): the ring, one lazily connected Client per server, and the
// bookkeeping of failures, ejections and replicas. Everything runs on the caller's thread:
// blocking calls are async calls followed by polling every connected server until the
// callback has run (each request carries its own deadline in its Client).
#include "client/cluster.h"

#include <algorithm>
#include <charconv>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "proto/registry.h"

namespace fabkv {

struct Cluster::Member {
  ClusterServer spec;
  std::unique_ptr<Client> client;
  bool drop = false;  // its Client saw the server go: destroy it at the next call
  uint32_t failures_in_row = 0;
  Clock::time_point retry_at{};  // while ejected
  uint64_t failed_call = 0;      // the last call in which it failed: not tried again in that call
  Status failed_status = Status::kServerGone;  // how
  ServerCounters c;
};

// One async call spread over replicas: the user's callback runs once, when the last posted
// request has answered.
struct Cluster::Fan {
  Callback cb;
  std::string key;  // get: for the next replica after a failure or a miss
  // get: the last failure of a replica (kOk: none failed), the answer when no replica has the
  // key: a replica that could not be asked may have it.
  Status failure = Status::kOk;
  size_t pending = 0;
  std::vector<Status> statuses;  // put/del: one per replica, in ring order
  uint64_t version = 0;          // put: the first replica's
};

ClusterServer parse_cluster_server(std::string_view spec) {
  auto bad = [&](const std::string& why) {
    return std::invalid_argument(fmt::format("bad server '{}': {} (HOST:PORT[:WEIGHT][ NAME])",
                                             spec, why));
  };
  ClusterServer s;
  std::string_view addr = spec;
  if (size_t sp = spec.find(' '); sp != std::string_view::npos) {
    addr = spec.substr(0, sp);
    std::string_view name = spec.substr(sp + 1);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    if (name.empty() || name.find(' ') != std::string_view::npos)
      throw bad("one name after a space");
    s.name = name;
  }
  // A third field after the port is the weight: "host:port:weight" (a bracketed v6 host keeps
  // its own colons inside the brackets).
  size_t host_end = !addr.empty() && addr.front() == '[' ? addr.find(']') : 0;
  if (host_end == std::string_view::npos) throw bad("no ']' after an IPv6 host");
  size_t c1 = addr.find(':', host_end);
  size_t c2 = c1 == std::string_view::npos ? c1 : addr.find(':', c1 + 1);
  if (c2 != std::string_view::npos) {
    std::string_view w = addr.substr(c2 + 1);
    auto [p, ec] = std::from_chars(w.data(), w.data() + w.size(), s.weight);
    if (ec != std::errc() || p != w.data() + w.size() || s.weight == 0)
      throw bad("the weight must be a whole number > 0");
    addr = addr.substr(0, c2);
  }
  if (cluster::ketama_name(addr).empty()) throw bad("not HOST:PORT");
  s.address = addr;
  if (s.name.empty()) s.name = cluster::ketama_name(addr);
  return s;
}

std::vector<ClusterServer> parse_cluster_servers(std::string_view list) {
  std::vector<ClusterServer> out;
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view one = list.substr(0, comma);
    while (!one.empty() && one.front() == ' ') one.remove_prefix(1);
    while (!one.empty() && one.back() == ' ') one.remove_suffix(1);
    if (!one.empty()) out.push_back(parse_cluster_server(one));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return out;
}

ClusterOptions load_cluster_file(const std::string& path) {
  ClusterOptions o;
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(fmt::format("{}:{}: {}", path, e.source().begin.line,
                                         e.description()));
  }
  auto fail = [&](const toml::node& n, const std::string& why) {
    return std::runtime_error(fmt::format("{}:{}: {}", path, n.source().begin.line, why));
  };
  for (auto& entry : t) {
    const std::string key(entry.first.str());
    const toml::node& v = entry.second;  // named: clang 14 cannot capture a structured binding
    auto text = [&](std::string* out) {
      if (!v.is_string()) throw fail(v, key + " must be a string");
      *out = *v.value<std::string>();
    };
    auto number = [&](auto* out, int64_t lo, int64_t hi) {
      if (!v.is_integer() || *v.value<int64_t>() < lo || *v.value<int64_t>() > hi)
        throw fail(v, fmt::format("{} must be a whole number in [{}, {}]", key, lo, hi));
      *out = static_cast<std::remove_reference_t<decltype(*out)>>(*v.value<int64_t>());
    };
    if (key == "servers") {
      const toml::array* a = v.as_array();
      if (!a) throw fail(v, "servers must be an array of \"HOST:PORT[:WEIGHT][ NAME]\" strings");
      for (const toml::node& e : *a) {
        if (!e.is_string()) throw fail(e, "each server must be a string");
        try {
          o.servers.push_back(parse_cluster_server(*e.value<std::string>()));
        } catch (const std::invalid_argument& x) {
          throw fail(e, x.what());
        }
      }
    } else if (key == "protocol") {
      text(&o.client.protocol);
    } else if (key == "provider") {
      text(&o.client.provider);
    } else if (key == "secret") {
      text(&o.client.secret);
    } else if (key == "timeout_ms") {
      number(&o.client.timeout_ms, 1, 3600000);
    } else if (key == "replicas") {
      number(&o.replicas, 1, 64);
    } else if (key == "auto_eject_hosts") {
      if (!v.is_boolean()) throw fail(v, "auto_eject_hosts must be true or false");
      o.auto_eject_hosts = *v.value<bool>();
    } else if (key == "server_failure_limit") {
      number(&o.server_failure_limit, 1, 1000000);
    } else if (key == "retry_timeout_ms") {
      number(&o.retry_timeout_ms, 0, 86400000);
    } else {
      throw fail(v, "unknown key '" + key +
                        "' (servers, protocol, provider, secret, timeout_ms, replicas, "
                        "auto_eject_hosts, server_failure_limit, retry_timeout_ms)");
    }
  }
  if (o.servers.empty()) throw std::runtime_error(path + ": no servers");
  return o;
}

Cluster::Cluster(ClusterOptions options) : o_(std::move(options)) {
  if (o_.servers.empty()) throw std::invalid_argument("a cluster needs at least one server");
  if (o_.replicas < 1 || o_.replicas > o_.servers.size())
    throw std::invalid_argument(
        fmt::format("replicas must be 1 to the number of servers ({}), not {}", o_.servers.size(),
                    o_.replicas));
  if (o_.server_failure_limit < 1) throw std::invalid_argument("server_failure_limit must be >= 1");
  // Checked here, not left to each connect: there it would count as every server failing (and
  // eject them all) while the reason sat in last_error.
  const proto::Info* p = proto::find(o_.client.protocol);
  if (p == nullptr || p->engine == proto::EngineNeed::kNone)
    throw std::invalid_argument(
        fmt::format("'{}' is not a key-value protocol of this client (it speaks: {})",
                    o_.client.protocol, proto::names()));
  for (ClusterServer& s : o_.servers) {
    if (s.name.empty()) s.name = cluster::ketama_name(s.address);
    if (s.name.empty()) throw std::invalid_argument("bad server address '" + s.address + "'");
    if (s.weight == 0) throw std::invalid_argument("weight 0 for " + s.address);
    for (const auto& m : members_)
      if (m->spec.name == s.name)
        throw std::invalid_argument(fmt::format("two servers named '{}' ({} and {})", s.name,
                                                m->spec.address, s.address));
    auto m = std::make_unique<Member>();
    m->spec = s;
    members_.push_back(std::move(m));
  }
  rebuild_ring();
}

Cluster::~Cluster() = default;

const ClusterServer& Cluster::server(size_t i) const { return members_.at(i)->spec; }

void Cluster::rebuild_ring() {
  std::vector<cluster::Node> nodes;
  for (const auto& m : members_)
    nodes.push_back({m->spec.name, m->spec.weight, !(o_.auto_eject_hosts && m->c.ejected)});
  ring_ = cluster::Ring(nodes);
}

void Cluster::housekeeping() {
  ++call_;
  for (auto& m : members_)
    if (m->drop && m->client && m->client->in_flight() == 0) {
      m->client.reset();
      m->drop = false;
      m->c.connected = false;
    }
  auto now = Clock::now();
  if (now < next_retry_) return;
  next_retry_ = Clock::time_point::max();
  bool changed = false;
  for (auto& m : members_) {
    if (!m->c.ejected) continue;
    if (now >= m->retry_at) {
      // Back on the ring; one more failure takes it off again (twemproxy, libmemcached).
      m->c.ejected = false;
      m->failures_in_row = o_.server_failure_limit - 1;
      ++m->c.retries;
      changed = true;
    } else {
      next_retry_ = std::min(next_retry_, m->retry_at);
    }
  }
  if (changed && o_.auto_eject_hosts) rebuild_ring();
}

Client* Cluster::connect(size_t i, Status* st, bool even_ejected) {
  Member& m = *members_[i];
  // Through the ring, an ejected server is met only without auto_eject_hosts (else it is not on
  // the ring).
  if (m.c.ejected && !even_ejected) {
    *st = Status::kServerGone;
    return nullptr;
  }
  if (m.failed_call == call_) {  // failed in this very call (a multi-get): no second wait for it
    *st = m.failed_status;
    return nullptr;
  }
  if (m.client && !m.drop) return m.client.get();
  if (m.client) {  // gone, with answers (its failures) still to deliver: not reusable
    *st = Status::kServerGone;
    return nullptr;
  }
  ClientOptions co = o_.client;
  co.server = m.spec.address;
  co.connect_timeout_ms = std::min(co.connect_timeout_ms, co.timeout_ms);
  try {
    auto c = Client::connect(co);
    std::string said = c->layout().value("name", "");
    if (!said.empty() && said != m.spec.name) {
      failed(i, Status::kError,
             fmt::format("the server at {} is named '{}' on the ring (its --name or --memcached "
                         "address) but the list names it '{}': write it as '{} {}' so that "
                         "keys go where memcached's clients put them",
                         m.spec.address, said, m.spec.name, m.spec.address, said));
      *st = Status::kError;
      return nullptr;
    }
    m.client = std::move(c);
    m.c.connected = true;
    ++m.c.connects;
    return m.client.get();
  } catch (const ClientError& e) {
    *st = e.status() == Status::kTimeout ? Status::kTimeout : Status::kServerGone;
    failed(i, *st, e.what());
    return nullptr;
  }
}

void Cluster::succeeded(size_t i) { members_[i]->failures_in_row = 0; }

void Cluster::failed(size_t i, Status st, const std::string& why) {
  Member& m = *members_[i];
  ++m.c.failures;
  m.failed_call = call_;
  m.failed_status = st;
  m.c.last_error = why.empty() ? to_string(st) : why;
  if (st == Status::kServerGone && m.client) m.drop = true;  // destroyed at the next call
  if (m.c.ejected || ++m.failures_in_row < o_.server_failure_limit) return;
  m.c.ejected = true;
  ++m.c.ejections;
  m.retry_at = Clock::now() + std::chrono::milliseconds(o_.retry_timeout_ms);
  next_retry_ = std::min(next_retry_, m.retry_at);
  if (o_.auto_eject_hosts) rebuild_ring();
}

size_t Cluster::server_for_key(std::string_view key) {
  housekeeping();
  return ring_.empty() ? npos : ring_.node_for_key(key);
}

std::vector<size_t> Cluster::servers_for_key(std::string_view key) {
  housekeeping();
  return ring_.nodes_for_key(key, o_.replicas);
}

// Posts a GET to order[k], or to the next replica that can take it. A replica that fails or
// does not have the key hands the read on to the next: one back on the ring after an ejection
// (or restarted) lacks what was written meanwhile, which the next replica took in its place
// (docs/cluster.md, Replicas). The answer is the first value found; else the last failure, if
// a replica failed; else kNotFound.
Status Cluster::post_get(std::shared_ptr<Fan> fan, std::vector<size_t> order, size_t k) {
  for (; k < order.size(); ++k) {
    size_t i = order[k];
    Status st;
    Client* c = connect(i, &st);
    if (!c) {
      fan->failure = st;
      continue;
    }
    st = c->get_async(fan->key, [this, fan, order, k, i](Status s, std::string_view v,
                                                         uint64_t ver) {
      if (is_failure(s)) {
        failed(i, s);
        fan->failure = s;
      } else {
        succeeded(i);
      }
      bool miss = s == Status::kNotFound || is_failure(s);
      if (miss && k + 1 < order.size() && post_get(fan, order, k + 1) == Status::kOk) return;
      if (miss && fan->failure != Status::kOk) s = fan->failure;
      fan->cb(s, v, ver);
    });
    if (st == Status::kOk) {
      ++members_[i]->c.requests;
      return st;
    }
    fan->failure = st;
    if (!is_failure(st)) return st;  // the key itself (too large, empty): no replica helps
    failed(i, st);
  }
  return fan->failure;  // not kOk: order is never empty, and every replica failed
}

Status Cluster::get_async(std::string_view key, Callback cb) {
  housekeeping();
  return start_get(key, std::move(cb));
}

Status Cluster::start_get(std::string_view key, Callback cb) {
  auto order = ring_.nodes_for_key(key, o_.replicas);
  if (order.empty()) return Status::kServerGone;
  auto fan = std::make_shared<Fan>();
  fan->cb = std::move(cb);
  fan->key = key;
  return post_get(std::move(fan), std::move(order), 0);
}

// A PUT (put = true) or DELETE to every replica of the key: the R distinct servers that follow
// it on the ring, ejected ones being off it. With fewer than R on the ring nothing is sent: an
// acknowledgement must mean R servers hold the write (docs/cluster.md, Replicas), and a write
// to fewer would be lost with the next server's death.
Status Cluster::fan_out(bool put, std::string_view key, std::string_view value, uint32_t expire_at,
                        Callback cb) {
  auto order = ring_.nodes_for_key(key, o_.replicas);
  if (order.size() < o_.replicas) return Status::kServerGone;
  auto fan = std::make_shared<Fan>();
  fan->cb = std::move(cb);
  fan->statuses.assign(order.size(), Status::kOk);
  ++fan->pending;  // held while posting, so no answer finishes the fan early
  auto finish = [](Fan& f) {
    if (--f.pending != 0) return;
    // A failure anywhere is the answer (the others may hold the write); else kOk when any
    // replica had the key: a DELETE finds nothing on a replica back from an ejection if the key
    // was written meanwhile, and the next replica has it.
    Status s = Status::kNotFound;
    for (Status x : f.statuses) {
      if (x != Status::kOk && x != Status::kNotFound) {
        s = x;
        break;
      }
      if (x == Status::kOk) s = x;
    }
    f.cb(s, {}, f.version);
  };
  size_t posted = 0;
  Status first_error = Status::kOk;
  for (size_t k = 0; k < order.size(); ++k) {
    size_t i = order[k];
    Status st;
    Client* c = connect(i, &st);
    if (c) {
      auto done = [this, fan, finish, k, i](Status s, std::string_view, uint64_t ver) {
        if (is_failure(s)) failed(i, s);
        else succeeded(i);
        fan->statuses[k] = s;
        if (k == 0) fan->version = ver;
        finish(*fan);
      };
      ++fan->pending;
      st = put ? c->put_async(key, value, done, 0, expire_at) : c->del_async(key, done);
      if (st == Status::kOk) {
        ++members_[i]->c.requests;
        ++posted;
        continue;
      }
      --fan->pending;
      // The key or value itself (too large, empty): every replica would say the same.
      if (!is_failure(st) && posted == 0) return st;
      if (is_failure(st)) failed(i, st);
    }
    fan->statuses[k] = st;
    if (first_error == Status::kOk) first_error = st;
  }
  if (posted == 0) return first_error;  // nothing sent: no callback
  finish(*fan);                         // drops the posting hold; the last answer runs the callback
  return Status::kOk;
}

Status Cluster::put_async(std::string_view key, std::string_view value, Callback cb,
                          uint32_t expire_at) {
  housekeeping();
  return fan_out(true, key, value, expire_at, std::move(cb));
}

Status Cluster::del_async(std::string_view key, Callback cb) {
  housekeeping();
  return fan_out(false, key, {}, 0, std::move(cb));
}

size_t Cluster::poll() {
  size_t n = 0;
  for (size_t i = 0; i < members_.size(); ++i)
    if (members_[i]->client) n += members_[i]->client->poll();
  return n;
}

size_t Cluster::in_flight() const {
  size_t n = 0;
  for (const auto& m : members_)
    if (m->client) n += m->client->in_flight();
  return n;
}

Status Cluster::flush() {
  Status s = wait_all();
  housekeeping();
  return s;
}

// Polls every connected server until nothing is in flight. Each request has its deadline in
// its Client, and a callback's retry on another replica has one of its own, so this ends.
Status Cluster::wait_all() {
  Status result = Status::kOk;
  while (in_flight() > 0) {
    for (auto& m : members_) {
      if (!m->client || m->client->in_flight() == 0) continue;
      if (m->client->flush() == Status::kServerGone) result = Status::kServerGone;
    }
  }
  return result;
}

namespace {
// The result of one blocking call, shared with its callback.
struct Outcome {
  bool done = false;
  Status status = Status::kError;
  std::string value;
  uint64_t version = 0;
};
}  // namespace

Status Cluster::get(std::string_view key, std::string* value, uint64_t* version) {
  auto out = std::make_shared<Outcome>();
  Status st = get_async(key, [out, value](Status s, std::string_view v, uint64_t ver) {
    out->done = true;
    out->status = s;
    if (value && s == Status::kOk) out->value = v;
    out->version = ver;
  });
  if (st != Status::kOk) return st;
  while (!out->done && in_flight() > 0) poll();
  if (!out->done) return Status::kError;  // cannot happen: a posted request always answers
  if (value && out->status == Status::kOk) *value = std::move(out->value);
  if (version) *version = out->version;
  return out->status;
}

Status Cluster::put(std::string_view key, std::string_view value, uint64_t expected_version,
                    uint32_t expire_at) {
  if (expected_version != 0) {
    if (o_.replicas > 1) return Status::kError;  // versions are per replica (docs/cluster.md)
    housekeeping();
    auto order = ring_.nodes_for_key(key, 1);
    if (order.empty()) return Status::kServerGone;
    Status st;
    Client* c = connect(order[0], &st);
    if (!c) return st;
    ++members_[order[0]]->c.requests;
    st = c->put(key, value, expected_version, expire_at);
    if (is_failure(st)) failed(order[0], st);
    else succeeded(order[0]);
    return st;
  }
  auto out = std::make_shared<Outcome>();
  Status st = put_async(
      key, value,
      [out](Status s, std::string_view, uint64_t) {
        out->done = true;
        out->status = s;
      },
      expire_at);
  if (st != Status::kOk) return st;
  while (!out->done && in_flight() > 0) poll();
  return out->done ? out->status : Status::kError;
}

Status Cluster::del(std::string_view key) {
  auto out = std::make_shared<Outcome>();
  Status st = del_async(key, [out](Status s, std::string_view, uint64_t) {
    out->done = true;
    out->status = s;
  });
  if (st != Status::kOk) return st;
  while (!out->done && in_flight() > 0) poll();
  return out->done ? out->status : Status::kError;
}

std::vector<Cluster::GetResult> Cluster::get_multi(const std::vector<std::string>& keys) {
  auto results = std::make_shared<std::vector<GetResult>>(keys.size());
  housekeeping();  // once: a server that cannot be reached is tried once for all its keys
  for (size_t j = 0; j < keys.size(); ++j) {
    Status st = start_get(keys[j], [results, j](Status s, std::string_view v, uint64_t ver) {
      GetResult& r = (*results)[j];
      r.status = s;
      if (s == Status::kOk) r.value = v;
      r.version = ver;
    });
    if (st != Status::kOk) (*results)[j].status = st;
  }
  wait_all();
  return std::move(*results);
}

std::vector<Status> Cluster::put_multi(
    const std::vector<std::pair<std::string, std::string>>& items, uint32_t expire_at) {
  return write_multi(items.size(), [&](size_t j, Callback cb) {
    return fan_out(true, items[j].first, items[j].second, expire_at, std::move(cb));
  });
}

std::vector<Status> Cluster::del_multi(const std::vector<std::string>& keys) {
  return write_multi(keys.size(), [&](size_t j, Callback cb) {
    return fan_out(false, keys[j], {}, 0, std::move(cb));
  });
}

// put_multi's and del_multi's loop: request j is started by start(j, its callback), all before
// any answer is awaited; result[j] is its status.
std::vector<Status> Cluster::write_multi(size_t n,
                                         const std::function<Status(size_t, Callback)>& start) {
  auto results = std::make_shared<std::vector<Status>>(n, Status::kError);
  housekeeping();  // once, as get_multi
  for (size_t j = 0; j < n; ++j) {
    Status st = start(j, [results, j](Status s, std::string_view, uint64_t) { (*results)[j] = s; });
    if (st != Status::kOk) (*results)[j] = st;
  }
  wait_all();
  return std::move(*results);
}

Cluster::ServerCounters Cluster::counters(size_t i) const {
  ServerCounters c = members_.at(i)->c;
  c.connected = members_[i]->client != nullptr && !members_[i]->drop;
  return c;
}

nlohmann::json Cluster::stats() const {
  nlohmann::json servers = nlohmann::json::array();
  auto points = ring_.points_per_node();
  for (size_t i = 0; i < members_.size(); ++i) {
    const Member& m = *members_[i];
    ServerCounters c = counters(i);
    servers.push_back({{"address", m.spec.address},
                       {"name", m.spec.name},
                       {"weight", m.spec.weight},
                       {"ring_points", points[i]},
                       {"requests", c.requests},
                       {"failures", c.failures},
                       {"ejections", c.ejections},
                       {"retries", c.retries},
                       {"connects", c.connects},
                       {"connected", c.connected},
                       {"ejected", c.ejected},
                       {"last_error", c.last_error}});
  }
  return {{"servers", servers},
          {"replicas", o_.replicas},
          {"auto_eject_hosts", o_.auto_eject_hosts}};
}

const Client* Cluster::connected_client(size_t i) const { return members_.at(i)->client.get(); }

// A direct read of one server ignores the ring's verdict on it, but a failure to connect counts
// as one through the ring. `ejected` is not touched around the connect, so that failed() sees
// the server's true state: one that this connect ejects is marked and put back after
// retry_timeout_ms by housekeeping(), one ejected already is not ejected again.
Client* Cluster::client(size_t i, std::string* why) {
  housekeeping();
  const Member& m = *members_.at(i);
  Status st;
  Client* c = connect(i, &st, /*even_ejected=*/true);
  if (!c && why) *why = m.c.last_error.empty() ? to_string(st) : m.c.last_error;
  return c;
}

}  // namespace fabkv
