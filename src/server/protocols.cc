#include "server/protocols.h"

#include <stdexcept>
#include <string>

// Every protocol folder with a server side of its own defines
//   std::unique_ptr<proto::ServerProtocol> fabkv::<id>::make_server(proto::ServerHost&)
// in its server.cc. Declared here from the registration list, so that adding a protocol needs
// no include and no edit here.
#define FABKV_DECLARE_SERVER(id_, name, srv_, engine, summary)                       \
  namespace fabkv::id_ {                                                             \
  std::unique_ptr<proto::ServerProtocol> make_server(::fabkv::proto::ServerHost& w); \
  }
FABKV_PROTOCOLS(FABKV_DECLARE_SERVER)
#undef FABKV_DECLARE_SERVER

namespace fabkv::server {

namespace {

// Calls `make` only for a protocol that is its own server side (Info::server == id); for one
// served by another's (pilaf-vo) the call is discarded at compile time, so its make_server
// is never needed.
template <proto::Id Self, proto::Id Server, class Make>
std::unique_ptr<proto::ServerProtocol> own_side(Make make, proto::ServerHost& w) {
  if constexpr (Self == Server) return make(w);
  else return nullptr;
}

}  // namespace

std::unique_ptr<proto::ServerProtocol> make_server_side(proto::Id id, proto::ServerHost& w) {
  std::unique_ptr<proto::ServerProtocol> side;
#define FABKV_MAKE_SERVER(id_, name, srv_, engine, summary) \
  if (id == proto::Id::id_)                                 \
    side = own_side<proto::Id::id_, proto::Id::srv_>(       \
        [](auto& wk) { return ::fabkv::id_::make_server(wk); }, w);
  FABKV_PROTOCOLS(FABKV_MAKE_SERVER)
#undef FABKV_MAKE_SERVER
  if (!side)
    throw std::invalid_argument(std::string("no server side of its own: ") + proto::info(id).name);
  return side;
}

}  // namespace fabkv::server
