// The one list of fabkv's access protocols. Server, client, CLI, bench and C API all learn
// the protocols from here; nothing else names them. Adding a protocol = one folder under
// src/proto/ plus one line below (docs/architecture.md, "Adding a protocol").
//
// Each line: X(id, "name", server side, engine, summary)
//   id          C++ identifier; the folder's namespace fabkv::<id> defines
//               make_server() (when `server side` is id) and make_client()
//   name        what users type (--protocol, --protocols, fabkv:<name>, the Hello)
//   server side the protocol whose server side serves this one: a protocol that only differs
//               on the client (pilaf-vo uses pilaf's server without its READs) names another
//   engine      the storage engine it needs: kAny (cache or store), kPilaf, kFarm, kDrtm or
//               kHydra (memory clients reach; kAny protocols run on those engines too), or kNone
//               (no key-value data: the sequencers, docs/sequencer.md)
//
// An X-macro, not static self-registration: a static library silently drops an object file
// that nothing references, and with it the registration.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#define FABKV_PROTOCOLS(X)                                                                   \
  X(herd, "herd", herd, kAny,                                                                \
    "HERD: requests WRITten into server slots (or SENT), answers by SEND")                   \
  X(server_reply, "server-reply", server_reply, kAny,                                        \
    "requests WRITten into server slots, answers WRITten into the client's ring")            \
  X(pilaf, "pilaf", pilaf, kPilaf,                                                           \
    "Pilaf: GETs READ the server's self-verifying cuckoo table, PUT/DEL by SEND")            \
  X(pilaf_vo, "pilaf-vo", pilaf, kPilaf, "Pilaf-VO: Pilaf's server, every request by SEND")  \
  X(farm, "farm", farm, kFarm,                                                               \
    "FaRM-KV: GETs READ a hopscotch neighbourhood with values inline, PUT/DEL by WRITE")     \
  X(farm_var, "farm-var", farm_var, kFarm,                                                   \
    "FaRM-KV-VAR: GETs READ a neighbourhood of pointers, then the value; PUT/DEL by WRITE") \
  X(drtm, "drtm", drtm, kDrtm,                                                               \
    "DrTM-KV: GETs READ cached item locations, PUTs lock items by CAS and WRITE them") \
  X(seq_rpc, "seq-rpc", seq_rpc, kNone,                                                      \
    "sequencer by HERD-style RPC: a round's requests claim their values with one atomic add") \
  X(seq_spec, "seq-spec", seq_spec, kNone,                                                   \
    "sequencer Spec-S0: header-only SENDs both ways, the client guesses the high 32 bits")   \
  X(seq_atomic, "seq-atomic", seq_atomic, kNone,                                             \
    "sequencer by atomics: every client fetch-and-adds one counter in server memory")         \
  X(hydradb, "hydradb", hydradb, kHydra,                                                     \
    "HydraDB: WRITE request, WRITE answer with the item's address; repeat GETs by one READ")   \
  X(rfrpc, "rfrpc", rfrpc, kAny,                                                             \
    "RF-RPC: requests WRITten into server slots, results READ from the server's memory")

namespace fabkv::proto {

inline constexpr const char* kService = "fabkv";  // control-channel service name

enum class Id : uint8_t {
#define FABKV_PROTO_ID(id, name, server, engine, summary) id,
  FABKV_PROTOCOLS(FABKV_PROTO_ID)
#undef FABKV_PROTO_ID
};

// What a protocol asks of the storage engine.
enum class EngineNeed : uint8_t {
  kAny,    // any engine the worker runs (cache or store); the server picks cache
  kPilaf,  // the pilaf engine: clients READ its table and extents
  kFarm,   // the farm engine: clients READ its hopscotch table (and extents)
  kDrtm,   // the drtm engine: clients READ its table and items, and lock and WRITE items
  kHydra,  // the hydradb engine: clients READ its items, updates out of place
  kNone,   // no engine: a service without key-value data (the sequencers); a server that
           // serves only such protocols runs without one (server/options.h, needed_engine)
};

struct Info {
  Id id;
  const char* name;
  Id server;  // whose server side serves it
  EngineNeed engine;
  const char* summary;
};

inline constexpr Info kProtocols[] = {
#define FABKV_PROTO_INFO(id, name, server, engine, summary) \
  {Id::id, name, Id::server, EngineNeed::engine, summary},
    FABKV_PROTOCOLS(FABKV_PROTO_INFO)
#undef FABKV_PROTO_INFO
};

inline std::span<const Info> protocols() { return kProtocols; }
inline const Info& info(Id id) { return kProtocols[static_cast<size_t>(id)]; }
// nullptr for an unknown name.
inline const Info* find(std::string_view name) {
  for (const Info& p : kProtocols)
    if (name == p.name) return &p;
  return nullptr;
}
// "herd, server-reply, pilaf, pilaf-vo": for help texts and error messages.
std::string names(std::string_view sep = ", ");
// The default protocol of clients and servers.
inline constexpr Id kDefault = Id::herd;

}  // namespace fabkv::proto
