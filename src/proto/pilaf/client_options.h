// The pilaf client's own knobs (ClientOptions::protocol_options.pilaf, proto/client_options.h;
// fabkv-bench --pilaf-parallel-probes). The engine's knobs are in proto/pilaf/options.h.
#pragma once

namespace fabkv::pilaf {

struct ClientOptions {
  // READ a key's three table entries at once instead of one after another (one round trip
  // instead of up to three; ~3 entry READs per GET instead of ~1.6 at 75% fill).
  bool parallel_probes = false;
};

}  // namespace fabkv::pilaf
