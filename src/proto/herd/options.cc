// HERD's knob (proto/herd/options.h): TOML table [herd], flag --transport.
#include "proto/herd/options.h"

#include "common/knobs.h"
#include "proto/registry.h"

namespace fabkv::herd {

rpc::Transport resolve(TransportChoice c, std::string_view provider) {
  switch (c) {
    case TransportChoice::kWrite: return rpc::Transport::kWrite;
    case TransportChoice::kSend: return rpc::Transport::kSend;
    case TransportChoice::kAuto: break;
  }
  return provider.starts_with("shm") ? rpc::Transport::kSend : rpc::Transport::kWrite;
}

void declare(Knobs& k, Options* o) {
  const char* name = proto::info(proto::Id::herd).name;
  auto s = k.section(name, name);
  s.choice("transport", "--transport", &o->transport,
           {{"auto", TransportChoice::kAuto},
            {rpc::to_string(rpc::Transport::kWrite), TransportChoice::kWrite},
            {rpc::to_string(rpc::Transport::kSend), TransportChoice::kSend}},
           "how HERD requests arrive when the client does not say: auto (send on shm, write "
           "on tcp and verbs: the faster measured there) | write (into the request region, HERD "
           "sec. 4.2) | send (to the worker, HERD sec. 5.5)");
}

}  // namespace fabkv::herd
