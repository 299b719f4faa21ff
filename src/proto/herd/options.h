// HERD's own knob: how its requests arrive (the shared RPC knobs are in proto/rpc/options.h).
#pragma once

#include "proto/rpc/options.h"

namespace fabkv::herd {

struct Options {
  // write: into the client's slots of the request region (HERD sec. 4.2); send: as messages
  // (HERD sec. 5.5). A client may ask for either; this is what it gets when it does not say.
  rpc::Transport transport = rpc::Transport::kWrite;
};

// Declares this knob (TOML table [herd]; flag --transport); proto/herd/options.cc.
void declare(Knobs& k, Options* o);

}  // namespace fabkv::herd
