// What a client request ends with, as both the public client (client/client.h) and the
// protocols' client sides (proto/client_protocol.h) speak it: the Status of a request, the
// callback that receives it, and the error that set-up throws. Its own header so that a
// protocol reaches these without the public client API above it (the arrow points down:
// client -> proto).
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace fabkv {

enum class Status {
  kOk,
  kNotFound,         // get/del: no such key
  kTooLarge,         // key over 250 bytes or value over the server's max_value (nothing sent)
  kNoSpace,          // the server's store is full (store engine)
  kVersionMismatch,  // put with expected_version: the item changed
  kInvalidKey,       // empty key
  kServerGone,       // control connection closed or a fabric error: reconnect
  kTimeout,          // no answer within timeout_ms
  kMalformed,        // the server could not parse our request (a bug on one side)
  kError,            // anything else (the server failed to serve it, a local fabric error)
  kContended,        // pilaf GET: the key changed under every one of 64 READs (a writer is
                     // rewriting it without pause); nothing is wrong, retry later
};

constexpr const char* to_string(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kNotFound: return "not found";
    case Status::kTooLarge: return "too large";
    case Status::kNoSpace: return "no space";
    case Status::kVersionMismatch: return "version mismatch";
    case Status::kInvalidKey: return "invalid key";
    case Status::kServerGone: return "server gone";
    case Status::kTimeout: return "timeout";
    case Status::kMalformed: return "malformed request";
    case Status::kError: return "error";
    case Status::kContended: return "contended: the key kept changing under 64 READs";
  }
  return "unknown status";
}

// A request's end: value is valid only during the callback. version: get: the item's version,
// put: the new version, del: 0, next: the sequencer's value. (Callback.)
using Callback = std::function<void(Status, std::string_view value, uint64_t version)>;

// Set-up failures (connect, a layout the client cannot use) throw this; the data path never
// throws.
class ClientError : public std::runtime_error {
 public:
  ClientError(Status status, const std::string& what) : std::runtime_error(what), status_(status) {}
  Status status() const { return status_; }

 private:
  Status status_;
};

}  // namespace fabkv
