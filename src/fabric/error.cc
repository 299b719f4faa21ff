#include "fabric/error.h"

#include <cstdlib>

#include <fmt/format.h>
#include <rdma/fabric.h>

namespace fabkv::fabric {

std::string error_text(long code) { return fi_strerror(static_cast<int>(code < 0 ? -code : code)); }

FabricError::FabricError(const std::string& op, long code)
    : std::runtime_error(fmt::format("{} failed: {} ({})", op, error_text(code), code)),
      op_(op),
      code_(code) {}

FabricError::FabricError(const std::string& op, const std::string& what)
    : std::runtime_error(fmt::format("{} failed: {}", op, what)), op_(op) {}

long check(long ret, const char* op) {
  if (ret < 0) throw FabricError(op, ret);
  return ret;
}

}  // namespace fabkv::fabric
