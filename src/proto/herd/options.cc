// HERD's knobs (proto/herd/options.h): TOML table [herd], flags --transport, --herd-responses.
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
  s.choice("responses", "--herd-responses", &o->responses,
           {{to_string(Responses::kRdm), Responses::kRdm},
            {to_string(Responses::kDgram), Responses::kDgram}},
           "how HERD answers leave: rdm (a SEND on the reliable endpoint) | dgram (one datagram "
           "endpoint per worker, HERD sec. 3.3: udp beside tcp, not yet verbs; a lost answer is "
           "the client's timeout and retry)");
  s.number("test_drop_responses", "--test-herd-drop-responses", &o->test_drop_responses,
           "TEST ONLY: with --herd-responses dgram each worker drops this many of its first "
           "answers");
}

}  // namespace fabkv::herd
