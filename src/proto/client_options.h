// The client sides' own knobs, one member per protocol that has any, each declared in its
// folder (proto/<id>/client_options.h), as proto/options.h gathers the servers' option blocks.
// The public ClientOptions carries them as `protocol_options`; the session hands them to the
// protocol in proto::ClientSettings (proto/client_settings.h). A protocol reads only its own.
#pragma once

#include "proto/pilaf/client_options.h"

namespace fabkv::proto {

struct ClientProtocolOptions {
  pilaf::ClientOptions pilaf;
};

}  // namespace fabkv::proto
