// The server sides of proto/registry.h's protocols, made by id (server/protocols.cc expands
// the registration list).
#pragma once

#include <memory>

#include "proto/registry.h"
#include "proto/server_host.h"
#include "proto/server_protocol.h"

namespace fabkv::server {

// The server side `id` names (an Info::server). Throws std::invalid_argument for an id that
// has no server side of its own. `host` is the worker that will drive it.
std::unique_ptr<proto::ServerProtocol> make_server_side(proto::Id id, proto::ServerHost& host);

}  // namespace fabkv::server
