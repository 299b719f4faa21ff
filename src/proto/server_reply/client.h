// server-reply's client side (RF-RPC sec. 5.3's "server-reply"; the contract is
// proto/server_reply/wire.h): requests are WRITten into the client's slots of worker w's
// request region "server-reply.requests.<w>", exactly as herd's write transport does
// (proto/rpc/client.h); the worker WRITEs each answer into the client's response ring, a
// region of client memory registered for remote WRITE and announced in the Hello ("ring").
// No SEND and no RECV on either side: 1 WRITE each way per request.
//
// poll() looks at the ring slot of every request it waits for: an answer is there when the
// header's seq, the trailer's seq and the trailer's checksum over header and value all match
// (a WRITE's bytes land in any order, docs/fabric.md), and header.client/epoch are ours. It
// then zeroes header and trailer and runs the callback. The value is copied out of the ring
// first: a callback may post the request that reuses the same ring slot, and the worker may
// answer it before the callback is done reading.
//
// The ring's size depends on the server's workers, W and max_value, which the client learns
// only from the Welcome: the first Hello offers a ring for up to 4 workers x W=4 x 64 KiB and
// the client says hello again with the exact size when the server needs more.
#pragma once

#include <memory>

#include "proto/client_protocol.h"

namespace fabkv::server_reply {

// Throws ClientError(kError) for a transport other than "" or "write".
std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options);

}  // namespace fabkv::server_reply
