// The C interface (fabkv.h) over fabkv::Client. No exception crosses into C.
#include "client/fabkv.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "client/client.h"
#include "proto/registry.h"

struct fabkv_client {
  std::unique_ptr<fabkv::Client> client;
  std::string scratch;  // fabkv_get's value before it is copied out
};

namespace {

int to_c(fabkv::Status s) {
  switch (s) {
    case fabkv::Status::kOk: return FABKV_OK;
    case fabkv::Status::kNotFound: return FABKV_NOT_FOUND;
    case fabkv::Status::kTooLarge: return FABKV_TOO_LARGE;
    case fabkv::Status::kNoSpace: return FABKV_NO_SPACE;
    case fabkv::Status::kVersionMismatch: return FABKV_VERSION_MISMATCH;
    case fabkv::Status::kInvalidKey: return FABKV_INVALID_KEY;
    case fabkv::Status::kServerGone: return FABKV_SERVER_GONE;
    case fabkv::Status::kTimeout: return FABKV_TIMEOUT;
    case fabkv::Status::kMalformed: return FABKV_MALFORMED;
    case fabkv::Status::kError: return FABKV_ERROR;
    case fabkv::Status::kContended: return FABKV_CONTENDED;
  }
  return FABKV_ERROR;
}

void set_err(char* err, size_t errlen, const char* what) {
  if (err == nullptr || errlen == 0) return;
  std::snprintf(err, errlen, "%s", what);
}

std::string_view view(const void* p, size_t n) {
  return n == 0 ? std::string_view() : std::string_view(static_cast<const char*>(p), n);
}

}  // namespace

extern "C" {

void fabkv_options_init(fabkv_options* o) {
  if (o != nullptr) *o = fabkv_options{};
}

fabkv_client* fabkv_connect(const fabkv_options* opts, char* err, size_t errlen) {
  set_err(err, errlen, "");
  const fabkv_options o = opts != nullptr ? *opts : fabkv_options{};
  try {
    fabkv::ClientOptions co;
    if (o.server != nullptr) co.server = o.server;
    if (o.protocol != nullptr && *o.protocol != '\0') co.protocol = o.protocol;
    if (o.provider != nullptr && *o.provider != '\0') co.provider = o.provider;
    if (o.transport != nullptr) co.transport = o.transport;
    if (o.secret != nullptr) co.secret = o.secret;
    if (o.timeout_ms > 0) {
      co.timeout_ms = o.timeout_ms;
      co.connect_timeout_ms = o.timeout_ms;
    }
    if (o.connect_timeout_ms > 0) co.connect_timeout_ms = o.connect_timeout_ms;
    if (o.poll != nullptr && *o.poll != '\0') co.poll = o.poll;
    if (o.poll_spin_us > 0) co.poll_spin_us = o.poll_spin_us;
    if (o.poll_sleep_us > 0) co.poll_sleep_us = o.poll_sleep_us;
    auto c = std::make_unique<fabkv_client>();
    c->client = fabkv::Client::connect(co);
    return c.release();
  } catch (const std::exception& e) {
    set_err(err, errlen, e.what());
  } catch (...) {
    set_err(err, errlen, "fabkv: unknown error");
  }
  return nullptr;
}

const char* fabkv_protocols(void) {
  static const std::string names = fabkv::proto::names();
  return names.c_str();
}

const char* fabkv_protocol_name(size_t i) {
  auto all = fabkv::proto::protocols();
  return i < all.size() ? all[i].name : nullptr;
}

int fabkv_get(fabkv_client* c, const void* key, size_t klen, void* buf, size_t cap,
              size_t* vlen) {
  if (c == nullptr || (key == nullptr && klen != 0) || vlen == nullptr ||
      (buf == nullptr && cap != 0))
    return FABKV_INVALID_ARGUMENT;
  try {
    fabkv::Status s = c->client->get(view(key, klen), &c->scratch);
    if (s != fabkv::Status::kOk) return to_c(s);
    *vlen = c->scratch.size();
    if (c->scratch.size() > cap) return FABKV_BUFFER_TOO_SMALL;
    if (!c->scratch.empty()) std::memcpy(buf, c->scratch.data(), c->scratch.size());
    return FABKV_OK;
  } catch (...) {
    return FABKV_ERROR;  // allocation failure: the data path itself does not throw
  }
}

int fabkv_put(fabkv_client* c, const void* key, size_t klen, const void* val, size_t vlen) {
  if (c == nullptr || (key == nullptr && klen != 0) || (val == nullptr && vlen != 0))
    return FABKV_INVALID_ARGUMENT;
  try {
    return to_c(c->client->put(view(key, klen), view(val, vlen)));
  } catch (...) {
    return FABKV_ERROR;
  }
}

int fabkv_del(fabkv_client* c, const void* key, size_t klen) {
  if (c == nullptr || (key == nullptr && klen != 0)) return FABKV_INVALID_ARGUMENT;
  try {
    return to_c(c->client->del(view(key, klen)));
  } catch (...) {
    return FABKV_ERROR;
  }
}

int fabkv_next(fabkv_client* c, uint64_t* value) {
  if (c == nullptr || value == nullptr) return FABKV_INVALID_ARGUMENT;
  try {
    return to_c(c->client->next(value));
  } catch (...) {
    return FABKV_ERROR;
  }
}

size_t fabkv_max_value(const fabkv_client* c) {
  if (c == nullptr) return 0;
  return c->client->layout().value("max_value", size_t{0});
}

void fabkv_close(fabkv_client* c) { delete c; }

const char* fabkv_strerror(int status) {
  switch (status) {
    case FABKV_OK: return "ok";
    case FABKV_NOT_FOUND: return "not found";
    case FABKV_TOO_LARGE: return "too large";
    case FABKV_NO_SPACE: return "no space";
    case FABKV_VERSION_MISMATCH: return "version mismatch";
    case FABKV_INVALID_KEY: return "invalid key";
    case FABKV_SERVER_GONE: return "server gone";
    case FABKV_TIMEOUT: return "timeout";
    case FABKV_MALFORMED: return "malformed request";
    case FABKV_ERROR: return "error";
    case FABKV_BUFFER_TOO_SMALL: return "buffer too small";
    case FABKV_INVALID_ARGUMENT: return "invalid argument";
    case FABKV_CONTENDED: return "contended";
  }
  return "unknown status";
}

}  // extern "C"
