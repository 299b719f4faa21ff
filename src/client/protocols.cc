// The client factory table: one entry per line of FABKV_PROTOCOLS (proto/registry.h), each
// the make_client() of the protocol's folder (src/proto/<id>/client.h). The only place that
// turns a protocol's name into its client.
#include <iterator>
#include <memory>
#include <string>

#include "client/session.h"
#include "proto/registry.h"

#define FABKV_DECLARE_CLIENT(id, name, server, engine, summary)                     \
  namespace fabkv::id {                                                             \
  std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost&,            \
                                                     const proto::ClientSettings&); \
  }
FABKV_PROTOCOLS(FABKV_DECLARE_CLIENT)
#undef FABKV_DECLARE_CLIENT

namespace fabkv {

namespace {

using Factory = std::unique_ptr<proto::ClientProtocol> (*)(proto::ClientHost&,
                                                           const proto::ClientSettings&);

constexpr Factory kFactories[] = {
#define FABKV_CLIENT_FACTORY(id, name, server, engine, summary) &fabkv::id::make_client,
    FABKV_PROTOCOLS(FABKV_CLIENT_FACTORY)
#undef FABKV_CLIENT_FACTORY
};
static_assert(std::size(kFactories) == std::size(proto::kProtocols));

}  // namespace

std::unique_ptr<proto::ClientProtocol> make_client_protocol(std::string_view name,
                                                            proto::ClientHost& host,
                                                            const proto::ClientSettings& settings) {
  const proto::Info* p = proto::find(name);
  if (p == nullptr)
    throw ClientError(Status::kError, "fabkv: unknown protocol '" + std::string(name) +
                                          "' (this client speaks: " + proto::names() + ")");
  return kFactories[static_cast<size_t>(p->id)](host, settings);
}

}  // namespace fabkv
