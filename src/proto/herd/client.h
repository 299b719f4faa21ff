// herd's client side (HERD sec. 4): requests WRITten into the client's slots of a worker's
// request region (or SENT, HERD sec. 5.5, as the server's --transport says), answers by SEND
// into receive buffers. All of it is the shared RPC client (proto/rpc/client.h); this file
// only picks its configuration.
#pragma once

#include <memory>

#include "proto/client_protocol.h"

namespace fabkv::herd {

// Throws ClientError(kError) for options herd cannot honour (a transport other than "",
// "write" or "send").
std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options);

}  // namespace fabkv::herd
