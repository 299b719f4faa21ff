// Errors of the fabric layer. Set-up failures throw FabricError (the libfabric call that
// failed plus fi_strerror's text); the data path returns the libfabric code instead.
#pragma once

#include <stdexcept>
#include <string>

namespace fabkv::fabric {

// Text for a libfabric return code (negative or positive errno-style value).
std::string error_text(long code);

class FabricError : public std::runtime_error {
 public:
  FabricError(const std::string& op, long code);
  FabricError(const std::string& op, const std::string& what);
  const std::string& op() const { return op_; }
  long code() const { return code_; }

 private:
  std::string op_;
  long code_ = 0;
};

// Throws FabricError when `ret` is negative; returns `ret` otherwise.
long check(long ret, const char* op);

}  // namespace fabkv::fabric
