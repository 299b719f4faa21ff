// HERD's server side (HERD sec. 4): requests arrive in the client's slots of the worker's
// request region ("herd.requests.<w>") or as messages (sec. 5.5), as --transport says (auto:
// proto/herd/options.h); every answer is one SEND (sec. 4.2 uses UD SENDs) through the
// worker's endpoints, in turn over rpc.queues of them (Guidelines sec. 4.3.1). All of it is the
// shared RPC piece (proto/rpc/server.h, TransportServer).

#include "proto/rpc/server.h"

namespace fabkv::herd {

std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w) {
  // One message per answer: header + value, padded (RpcServer::Config::answer_bytes).
  return std::make_unique<rpc::TransportServer>(w, proto::info(proto::Id::herd),
                                                rpc::RpcServer::Config{});
}

}  // namespace fabkv::herd
