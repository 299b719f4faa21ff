// The server sides of proto/registry.h's protocols, made by id (server/protocols.cc expands
// the registration list).
#pragma once

#include <memory>

#include "proto/registry.h"
#include "proto/server_protocol.h"

namespace fabkv::server {

class Worker;

// The server side `id` names (an Info::server). Throws std::invalid_argument for an id that
// has no server side of its own.
std::unique_ptr<proto::ServerProtocol> make_server_side(proto::Id id, Worker& w);

}  // namespace fabkv::server
