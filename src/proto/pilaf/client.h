// pilaf's and pilaf-vo's client side (Pilaf sec. 3): GETs by READs of the worker's
// self-verifying cuckoo table and extents (proto/pilaf/reader.h), PUT and DELETE as RPC
// messages by SEND (proto/rpc/client.h; Pilaf sec. 3.1). pilaf-vo (Pilaf sec. 5.1's
// "verbs-only" comparison point) talks to the same server and sends every request, GETs
// included, by SEND.
#pragma once

#include <memory>

#include "proto/client_protocol.h"

namespace fabkv::pilaf {
// Throws ClientError(kError) for a transport other than "" or "send".
std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options);
}  // namespace fabkv::pilaf

namespace fabkv::pilaf_vo {
std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options);
}  // namespace fabkv::pilaf_vo
