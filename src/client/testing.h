// Test-only ways into the client library: connecting with proto::ClientTestHooks (fault and
// clock injection: a skewed clock, a first sequence number near the wrap, a garbage request,
// a drtm holder that dies or stalls holding its lock). Not part of the public API: only tests
// include this header, and nothing else can set the hooks (client/client.h).
#pragma once

#include <memory>

#include "client/client.h"
#include "proto/client_settings.h"

namespace fabkv::testing {

using ClientHooks = proto::ClientTestHooks;

// Client::connect(options) with `hooks` handed to the protocol (proto::ClientSettings::test).
// Throws ClientError as Client::connect does.
std::unique_ptr<Client> connect(const ClientOptions& options, const ClientHooks& hooks);

}  // namespace fabkv::testing
