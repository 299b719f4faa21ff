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
//   engine      the storage engine it needs: `any` (cache or store; such protocols run on the
//               others too), `none` (no key-value data: the sequencers, docs/sequencer.md), or
//               the folder whose namespace fabkv::<engine> defines the engine clients reach
//               (`make_engine(const EngineSpec&)`, built by proto/engines.cc); that folder's
//               name is also what --engine takes
//
// An X-macro, not static self-registration: a static library silently drops an object file
// that nothing references, and with it the registration.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#define FABKV_PROTOCOLS(X)                                                                    \
  X(herd, "herd", herd, any,                                                                  \
    "HERD: requests WRITten into server slots (or SENT), answers by SEND")                    \
  X(server_reply, "server-reply", server_reply, any,                                          \
    "requests WRITten into server slots, answers WRITten into the client's ring")             \
  X(pilaf, "pilaf", pilaf, pilaf,                                                             \
    "Pilaf: GETs READ the server's self-verifying cuckoo table, PUT/DEL by SEND")             \
  X(pilaf_vo, "pilaf-vo", pilaf, pilaf, "Pilaf-VO: Pilaf's server, every request by SEND")    \
  X(farm, "farm", farm, farm,                                                                 \
    "FaRM-KV: GETs READ a hopscotch neighbourhood with values inline, PUT/DEL by WRITE")      \
  X(farm_var, "farm-var", farm_var, farm,                                                     \
    "FaRM-KV-VAR: GETs READ a neighbourhood of pointers, then the value; PUT/DEL by WRITE")   \
  X(drtm, "drtm", drtm, drtm,                                                                 \
    "DrTM-KV: GETs READ cached item locations, PUTs lock items by CAS and WRITE them")        \
  X(seq_rpc, "seq-rpc", seq_rpc, none,                                                        \
    "sequencer by HERD-style RPC: a round's requests claim their values with one atomic add") \
  X(seq_spec, "seq-spec", seq_spec, none,                                                     \
    "sequencer Spec-S0: header-only SENDs both ways, the client guesses the high 32 bits")    \
  X(seq_atomic, "seq-atomic", seq_atomic, none,                                               \
    "sequencer by atomics: every client fetch-and-adds one counter in server memory")         \
  X(hydradb, "hydradb", hydradb, hydradb,                                                     \
    "HydraDB: WRITE request, WRITE answer with the item's address; repeat GETs by one READ")  \
  X(rfrpc, "rfrpc", rfrpc, any,                                                               \
    "RF-RPC: requests WRITten into server slots, results READ from the server's memory")

namespace fabkv::store {
class Engine;
struct EngineOptions;
}  // namespace fabkv::store

namespace fabkv::proto {

struct ProtocolOptions;  // proto/options.h

inline constexpr const char* kService = "fabkv";  // control-channel service name

enum class Id : uint8_t {
#define FABKV_PROTO_ID(id, name, server, engine, summary) id,
  FABKV_PROTOCOLS(FABKV_PROTO_ID)
#undef FABKV_PROTO_ID
};

// What a protocol asks of the storage engine (Info::engine): any engine the worker runs (cache
// or store; the server picks cache), none (a service without key-value data, the sequencers: a
// server that serves only such protocols runs without one, server/options.h, needed_engine),
// or else the name of the engine it brings, which is its folder's.
struct EngineNeed {
  static constexpr std::string_view kAny = "any";
  static constexpr std::string_view kNone = "none";
};

struct Info {
  Id id;
  const char* name;
  Id server;                // whose server side serves it
  std::string_view engine;  // EngineNeed::kAny, kNone, or the engine's (its folder's) name
  const char* summary;
};

inline constexpr Info kProtocols[] = {
#define FABKV_PROTO_INFO(id, name, server, engine, summary) \
  {Id::id, name, Id::server, #engine, summary},
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
// Do the clients of the engine this protocol needs change its items without the worker hearing
// of it (PUTs by CAS and WRITE into the engine's memory)? The op log sees only what the worker
// executes, so it cannot serve such a protocol. Asked of the engine's folder
// (clients_write_items()); built by proto/engines.cc, so the server's only.
bool clients_write_engine(const Info& p);
// The default protocol of clients and servers.
inline constexpr Id kDefault = Id::herd;

// ---- engines (proto/engines.cc, linked by whatever builds engines: the server, tests)

// What a folder's make_engine(const EngineSpec&) builds from.
struct EngineSpec {
  std::string_view name;              // the engine (--engine): cache, store, a folder
  const store::EngineOptions& store;  // memory, largest value, index buckets
  const ProtocolOptions& options;     // the protocols' knobs (pilaf's table size, ...)
  Id protocol = kDefault;             // the protocol it serves (farm or farm-var)
};
// The engine spec.name names: cache or store (store/engine.h), one a registry line names (its
// folder's make_engine), nullptr for "none". Throws std::invalid_argument for another name, and
// what the engine's constructor throws.
std::unique_ptr<store::Engine> make_engine(const EngineSpec& spec);
// The same with every protocol knob at its default (tests, tools).
std::unique_ptr<store::Engine> make_engine(std::string_view name, const store::EngineOptions& o);
// What --engine takes: cache, store, every engine a registry line names (once, in registry
// order), none.
std::vector<std::string> engine_names();

}  // namespace fabkv::proto
