// The one factory of engines: cache and store from src/store/, and every engine a registry
// line names from its folder (proto/registry.h). Its own file, apart from registry.cc, so that
// what only needs the protocol list (the client) links no engine.

#include <stdexcept>
#include <string>

#include "proto/options.h"
#include "proto/registry.h"
#include "store/engine.h"

namespace fabkv {

// Every engine on a registry line is its folder's make_engine.
#define FABKV_DECLARE_ENGINE(id, label, server, engine, summary)             \
  namespace engine {                                                         \
  std::unique_ptr<store::Engine> make_engine(const proto::EngineSpec& spec); \
  bool clients_write_items();                                                \
  }
FABKV_PROTOCOLS(FABKV_DECLARE_ENGINE)
#undef FABKV_DECLARE_ENGINE

// `any` and `none` stand where a folder would, so they answer the same call: neither brings an
// engine of its own (the worker runs the cache or store --engine names, or none).
namespace any {
std::unique_ptr<store::Engine> make_engine(const proto::EngineSpec&) { return nullptr; }
bool clients_write_items() { return false; }
}  // namespace any
namespace none {
std::unique_ptr<store::Engine> make_engine(const proto::EngineSpec&) { return nullptr; }
bool clients_write_items() { return false; }
}  // namespace none

namespace proto {

std::unique_ptr<store::Engine> make_engine(const EngineSpec& spec) {
  if (auto kind = store::engine_kind_from_string(spec.name))
    return store::make_engine(*kind, spec.store);
#define FABKV_MAKE_ENGINE(id, label, server, engine, summary) \
  if (spec.name == #engine) return engine::make_engine(spec);
  FABKV_PROTOCOLS(FABKV_MAKE_ENGINE)
#undef FABKV_MAKE_ENGINE
  throw std::invalid_argument("unknown engine '" + std::string(spec.name) + "'");
}

bool clients_write_engine(const Info& p) {
#define FABKV_CLIENTS_WRITE(id_, label, server, engine, summary) \
  if (p.id == Id::id_) return engine::clients_write_items();
  FABKV_PROTOCOLS(FABKV_CLIENTS_WRITE)
#undef FABKV_CLIENTS_WRITE
  return false;
}

std::unique_ptr<store::Engine> make_engine(std::string_view name, const store::EngineOptions& o) {
  const ProtocolOptions defaults;
  return make_engine(EngineSpec{.name = name, .store = o, .options = defaults});
}

}  // namespace proto
}  // namespace fabkv
