// farm's and farm-var's client side (HERD sec. 5.1.2; docs/farm.md): GETs by one READ of the
// key's hopscotch neighbourhood (farm-var, and items too large for a bucket: one more READ of
// the record), proto/farm/reader.h; PUT and DELETE by FaRM's message path: the request is
// WRITten into the client's slots of the worker's request region and the answer WRITten back
// into the client's ring. That path is server-reply's, so a farm client owns a server-reply
// client (proto/server_reply/client.h) and hands it everything but its GETs.
#pragma once

#include <memory>

#include "proto/client_protocol.h"

namespace fabkv::farm {
// Throws ClientError(kError) for a transport other than "" or "write".
std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options);
}  // namespace fabkv::farm

namespace fabkv::farm_var {
std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options);
}  // namespace fabkv::farm_var
