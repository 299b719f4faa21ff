// Server: the fabkv-server runtime. Workers (one per partition, each on its own core and
// thread), the control channel that admits clients and hands them the layout, and the stats
// everything reports.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/server.h"
#include "server/options.h"
#include "server/worker.h"

namespace fabkv::server {

class Server {
 public:
  // Opens the fabric, allocates and registers memory, binds the control channel. Throws
  // (FabricError, std::runtime_error) with a message for the user.
  explicit Server(const ServerOptions& o);
  ~Server();

  std::string address() const;  // control channel "host:port"
  const std::string& provider() const;
  // Its name on a cluster's ketama ring (--name, else from its listeners; "" when they listen
  // on a wildcard host): sent to every client in the Welcome (layout "name").
  const std::string& name() const { return name_; }
  // A front end that serves clients from outside the fabric in the workers' loops (the
  // memcached one, src/memcached/service.h), built by the caller over workers() and attached to
  // each of them: they run it from start(), and stop() destroys it once they have stopped.
  // `listen` is where its clients reach this server: without --name the server takes its ring
  // name from it, as those clients name servers by it (cluster/ketama.h). Before start().
  void attach(std::unique_ptr<LocalWork> front_end, const std::string& listen);
  std::vector<Worker*> workers() const;
  void start();  // starts the worker threads
  // Stops admitting clients, lets workers answer what they hold, joins them.
  void stop();
  nlohmann::json stats() const;

 private:
  // Admission (control thread): admit(), and a refusal names the server's provider.
  control::Welcome on_hello(uint64_t session, const control::Hello& hello);
  // The Hello checked, a client index reserved, every worker's protocol side asked, endpoints
  // opened and the client's address taken, then the Welcome (or a refusal).
  control::Welcome admit(uint64_t session, const control::Hello& hello);
  // The checks made before anything is reserved for the client: its service, fabric provider,
  // payload (`*req`), protocol (`*p`) and staging region. The refusal, or nullopt.
  std::optional<control::Welcome> check_hello(const control::Hello& hello, nlohmann::json* req,
                                              const proto::Info** p) const;
  // A free client index and its next epoch, and the server's name (under the same lock as
  // attach() sets it); false when all are taken.
  bool reserve_index(uint64_t session, uint32_t* index, uint16_t* epoch, std::string* name);
  control::Welcome welcome(uint32_t index, uint16_t epoch, const proto::Info& p,
                           proto::WelcomeParts parts, const std::string& name) const;
  void on_close(uint64_t session);
  // A control request no generic code answers: each worker's protocols that know it.
  nlohmann::json protocol_request(const std::string& op) const;

  ServerOptions o_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<control::ControlServer> control_;
  std::unique_ptr<LocalWork> front_end_;  // attach(); runs in the workers' loops
  std::string name_;                      // name()

  // The client table (control thread and stats readers), and name_, which attach() may set
  // after the control channel is open.
  mutable std::mutex mu_;
  struct Slot {
    bool used = false;
    uint16_t epoch = 0;
    uint64_t session = 0;
  };
  std::vector<Slot> clients_;
  uint64_t admitted_ = 0, departed_ = 0;
};

}  // namespace fabkv::server
