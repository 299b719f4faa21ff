// The handshake layout: the JSON object a client learns from the Welcome's payload
// (control/wire.h), written by the server's admission (server/server.cc and each protocol's
// admit(), proto/server_protocol.h) and read by the protocol's client in open()
// (proto/client_protocol.h). Each part of it is a struct with one to_json/from_json, beside
// what it describes: the session's keys here, the RPC pieces' in rpc/handshake.h, and each
// protocol's in <protocol>/handshake.h. A part that each worker contributes to (one table per
// worker) is grown by add_to_layout().
//
// The keys and value types are the wire: a client and a server of this version read each
// other's layouts, so a key is renamed or retyped only with a version key of its part. A
// from_json throws nlohmann::json::exception for a missing or mistyped key; the clients turn
// that into ClientError(kMalformed) (rpc::RpcClient::read_layout).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace fabkv::proto {

// What every Welcome says, whatever the protocol (server/server.cc, Server::on_hello).
struct SessionLayout {
  uint16_t client = 0;  // the client's index: its slots in every worker's regions
  uint16_t epoch = 0;   // bumped each time the index is reused
  uint32_t workers = 0;
  uint32_t max_clients = 0;
  std::string protocol;  // proto/registry.h's name
  size_t max_value = 0;
  size_t max_key = 0;
  std::string engine;
  std::string provider;  // the libfabric provider the server runs
  std::string name;      // the server's name for its clients (server/server.h)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(SessionLayout, client, epoch, workers, max_clients, protocol,
                                   max_value, max_key, engine, provider, name)

// admit() runs once per worker, in worker order, on one WelcomeParts (server/server.cc): worker
// 0 starts the protocol's part of the layout, each later one finds it there and adds its own
// (`add(part)`).
template <class Part, class Add>
void add_to_layout(nlohmann::json* layout, uint32_t worker, Add&& add) {
  Part part = worker == 0 ? Part{} : layout->get<Part>();
  add(part);
  layout->update(nlohmann::json(part));
}

}  // namespace fabkv::proto
