// fabkv::Cluster: many fabkv-servers as one store. Each key lives on the server the ketama ring
// of memcached's clients gives it (cluster/ketama.h: libmemcached's KETAMA_WEIGHTED with MD5,
// twemproxy's `distribution: ketama` + `hash: md5`), so a Cluster, pylibmc and nutcracker
// given the same servers agree on every key. There is no traffic between servers: placement,
// failure handling and replicas are the client's, as in memcached's world. docs/cluster.md
// walks from one server to three and says what replicas do and do not guarantee.
//
//   fabkv::ClusterOptions o;
//   o.servers = fabkv::parse_cluster_servers("10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000");
//   fabkv::Cluster c(o);                  // connects to nothing yet
//   c.put("k", "v");                      // connects to the key's server, then puts
//   size_t s = c.server_for_key("k");     // which one (an index into o.servers)
//
// Failures: a server that does not answer fails its keys within timeout_ms (connecting
// included) and never holds up calls to the others; after server_failure_limit failures in a
// row it is ejected from the ring (auto_eject_hosts: its keys then go to the next servers,
// libmemcached's REMOVE_FAILED_SERVERS, twemproxy's auto_eject_hosts) or, without
// auto_eject_hosts, its keys fail at once; either way for retry_timeout_ms, then it is tried
// again.
//
// Threading: like Client, a Cluster is not thread-safe; one per thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/client.h"
#include "cluster/ketama.h"

namespace fabkv {

struct ClusterServer {
  std::string address;  // the server's control channel HOST:PORT
  uint32_t weight = 1;  // share of the ring against the others' (ketama_weighted)
  // Its ring name: what memcached's clients would call it. "" = that of `address` ("host" for
  // port 11211, else "host:port"). A server that calls itself otherwise in the handshake
  // (fabkv-server --name, or its --memcached address) is refused with both names.
  std::string name;
};

// "HOST:PORT[:WEIGHT][ NAME]", twemproxy's server form (its address is fabkv's control
// address). Throws std::invalid_argument with the reason.
ClusterServer parse_cluster_server(std::string_view spec);
// A comma-separated list of them.
std::vector<ClusterServer> parse_cluster_servers(std::string_view list);

struct ClusterOptions {
  std::vector<ClusterServer> servers;
  // How to reach each server (its `server` field is ignored): protocol, provider, secret, and
  // timeout_ms, which bounds every call to one server, connecting included.
  ClientOptions client;
  // Each PUT/DELETE goes to the R distinct servers that follow the key on the ring (ejected
  // ones are off it), and is refused while fewer than R are on it; a GET reads the first of
  // them that answers (libmemcached's NUMBER_OF_REPLICAS). 1 = none.
  uint32_t replicas = 1;
  bool auto_eject_hosts = true;       // eject a failing server from the ring (else fail its keys)
  uint32_t server_failure_limit = 2;  // failures in a row that eject it (twemproxy's default)
  int retry_timeout_ms = 2000;        // then try it again after this (libmemcached's default)
};

// A TOML cluster file (docs/cluster.md):
//   servers = ["10.0.0.1:7000", "10.0.0.2:7000:2", "10.0.0.3:7000:1 cache-c"]
//   protocol = "<name>"          # and provider, secret, timeout_ms
//   replicas = 2                 # and auto_eject_hosts, server_failure_limit, retry_timeout_ms
// Throws std::runtime_error naming the file and what is wrong.
ClusterOptions load_cluster_file(const std::string& path);

class Cluster {
 public:
  using Callback = Client::Callback;
  static constexpr size_t npos = size_t(-1);

  // Checks the list (at least one server, no name twice, replicas <= servers) and builds the
  // ring; connects to nothing. Throws std::invalid_argument.
  explicit Cluster(ClusterOptions options);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // ---- blocking calls, as Client's. kServerGone when no server is left on the ring.
  // With replicas, get answers with the first of the key's replicas (in ring order) that has
  // it: one that fails or misses hands the read on to the next. kNotFound when every replica
  // said so; when none had the key and one failed, that failure (the key may be on it).
  Status get(std::string_view key, std::string* value, uint64_t* version = nullptr);
  // expected_version (cas) needs replicas = 1: versions differ between replicas (kError,
  // nothing sent). With replicas, kOk means all R replicas acknowledged; otherwise the first
  // failure, and the replicas that did acknowledge keep the value. A write (put, del and
  // their _multi and _async forms) while fewer than R servers are on the ring is kServerGone,
  // nothing sent.
  Status put(std::string_view key, std::string_view value, uint64_t expected_version = 0,
             uint32_t expire_at = 0);
  // With replicas, kOk when any replica had the key, kNotFound when none had it.
  Status del(std::string_view key);

  struct GetResult {
    Status status = Status::kError;
    std::string value;
    uint64_t version = 0;
  };
  // The keys split by server, every server's share posted before any answer is awaited, so a
  // dead server costs its own keys one timeout and nothing more. result[i] is keys[i]'s.
  std::vector<GetResult> get_multi(const std::vector<std::string>& keys);
  // Stores each (key, value), every server's share posted before any answer is awaited (as
  // pylibmc's set_multi); result[i] is items[i]'s status, with replicas as put's.
  std::vector<Status> put_multi(const std::vector<std::pair<std::string, std::string>>& items,
                                uint32_t expire_at = 0);
  // Deletes each key, every server's share posted before any answer is awaited (as pylibmc's
  // delete_multi); result[i] is keys[i]'s status (kNotFound: it was not there), with replicas
  // as put's.
  std::vector<Status> del_multi(const std::vector<std::string>& keys);

  // ---- asynchronous calls, as Client's: kOk once posted (the callback then runs exactly once
  // from poll()/flush()); anything else means nothing was sent and no callback will run.
  Status get_async(std::string_view key, Callback cb);
  Status put_async(std::string_view key, std::string_view value, Callback cb,
                   uint32_t expire_at = 0);
  Status del_async(std::string_view key, Callback cb);
  size_t poll();   // polls every connected server once; callbacks run
  Status flush();  // waits for everything in flight on every server (each bounded)
  size_t in_flight() const;

  // ---- placement
  size_t size() const { return members_.size(); }
  const ClusterServer& server(size_t i) const;  // names filled in
  // The server a key is on now (ejected servers left out), npos when none is left.
  size_t server_for_key(std::string_view key);
  // Its replicas in order, the first being server_for_key: the R distinct servers that follow
  // the key on the ring (fewer while fewer are on it).
  std::vector<size_t> servers_for_key(std::string_view key);

  // ---- counters and the connection of one server (for tools and tests).
  struct ServerCounters {
    uint64_t requests = 0;   // posted to it
    uint64_t failures = 0;   // calls it failed (timeout, gone, could not connect)
    uint64_t ejections = 0;  // times it was taken off the ring (or marked dead)
    uint64_t retries = 0;    // times it was put back after retry_timeout_ms
    uint64_t connects = 0;   // connections opened
    bool connected = false;
    bool ejected = false;
    std::string last_error;  // why its last connection attempt or call failed
  };
  ServerCounters counters(size_t i) const;
  // {"servers": [{"address", "name", "weight", "requests", ...}], "replicas", "ring_points"}.
  nlohmann::json stats() const;
  // The connected client of server i, connecting first; nullptr (with *why) when it cannot.
  // Bypasses the ring: for reading one server directly, ejected or not. A failure to connect
  // counts as any other (server_failure_limit of them eject the server, for retry_timeout_ms).
  Client* client(size_t i, std::string* why = nullptr);
  // The client of server i while the Cluster holds one, else nullptr: connects nothing, changes
  // nothing, so another thread may read its counters() while this one makes no call that
  // posts (fabkv-bench sums them at its interval's edges: src/bench/fabkv_driver.cc).
  const Client* connected_client(size_t i) const;

 private:
  struct Member;
  struct Fan;
  using Clock = std::chrono::steady_clock;

  void housekeeping();  // drops dead clients, brings ejected ones back
  void rebuild_ring();
  // Server i's client, connecting first; nullptr with *st when it cannot. An ejected server is
  // refused unless even_ejected (client(i)).
  Client* connect(size_t i, Status* st, bool even_ejected = false);
  void succeeded(size_t i);
  void failed(size_t i, Status st, const std::string& why = {});
  static bool is_failure(Status s) { return s == Status::kTimeout || s == Status::kServerGone; }
  Status start_get(std::string_view key, Callback cb);
  Status post_get(std::shared_ptr<Fan> fan, std::vector<size_t> order, size_t k);
  Status fan_out(bool put, std::string_view key, std::string_view value, uint32_t expire_at,
                 Callback cb);
  Status wait_all();
  std::vector<Status> write_multi(size_t n, const std::function<Status(size_t, Callback)>& start);

  ClusterOptions o_;
  std::vector<std::unique_ptr<Member>> members_;
  cluster::Ring ring_;
  Clock::time_point next_retry_ = Clock::time_point::max();
  uint64_t call_ =
      0;  // public calls so far (a server that failed to connect in one is not retried in it)
};

}  // namespace fabkv
