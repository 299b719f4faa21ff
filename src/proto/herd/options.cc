// HERD's knob (proto/herd/options.h): TOML table [herd], flag --transport.
#include "proto/herd/options.h"

#include "common/knobs.h"
#include "proto/registry.h"

namespace fabkv::herd {

void declare(Knobs& k, Options* o) {
  const char* name = proto::info(proto::Id::herd).name;
  auto s = k.section(name, name);
  s.choice("transport", "--transport", &o->transport,
           {{rpc::to_string(rpc::Transport::kWrite), rpc::Transport::kWrite},
            {rpc::to_string(rpc::Transport::kSend), rpc::Transport::kSend}},
           "how HERD requests arrive when the client does not say: write (into the request "
           "region, HERD sec. 4.2) | send (to the worker, HERD sec. 5.5)");
}

}  // namespace fabkv::herd
