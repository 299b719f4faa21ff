// The C interface (fabkv.h) over fabkv::Client. No exception crosses into C.
#include "client/fabkv.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "client/client.h"
#include "client/cluster.h"
#include "proto/registry.h"

struct fabkv_client {
  std::unique_ptr<fabkv::Client> client;
  std::string scratch;  // fabkv_get's value before it is copied out
};

struct fabkv_cluster {
  std::unique_ptr<fabkv::Cluster> cluster;
  std::string scratch;  // fabkv_cluster_get's value before it is copied out
  std::string error;    // fabkv_cluster_server_error's text
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

// The fields fabkv_options and fabkv_cluster_options share (NULL, "" or <= 0: the default).
void set_common(fabkv::ClientOptions* co, const char* protocol, const char* provider,
                const char* secret, int timeout_ms) {
  if (protocol != nullptr && *protocol != '\0') co->protocol = protocol;
  if (provider != nullptr && *provider != '\0') co->provider = provider;
  if (secret != nullptr) co->secret = secret;
  if (timeout_ms > 0) {
    co->timeout_ms = timeout_ms;
    co->connect_timeout_ms = timeout_ms;
  }
}

// get, put and del of the C interface, for a Client and a Cluster alike (T has their calls):
// arguments checked, the value copied out of `scratch` into (buf, cap), no exception out.
template <class T>
int get_into(T& t, std::string& scratch, const void* key, size_t klen, void* buf, size_t cap,
             size_t* vlen) {
  if ((key == nullptr && klen != 0) || vlen == nullptr || (buf == nullptr && cap != 0))
    return FABKV_INVALID_ARGUMENT;
  try {
    fabkv::Status s = t.get(view(key, klen), &scratch);
    if (s != fabkv::Status::kOk) return to_c(s);
  } catch (...) {
    return FABKV_ERROR;  // allocation failure: the data path itself does not throw
  }
  *vlen = scratch.size();
  if (scratch.size() > cap) return FABKV_BUFFER_TOO_SMALL;
  if (!scratch.empty()) std::memcpy(buf, scratch.data(), scratch.size());
  return FABKV_OK;
}

template <class T>
int put_from(T& t, const void* key, size_t klen, const void* val, size_t vlen) {
  if ((key == nullptr && klen != 0) || (val == nullptr && vlen != 0)) return FABKV_INVALID_ARGUMENT;
  try {
    return to_c(t.put(view(key, klen), view(val, vlen)));
  } catch (...) {
    return FABKV_ERROR;
  }
}

template <class T>
int del_of(T& t, const void* key, size_t klen) {
  if (key == nullptr && klen != 0) return FABKV_INVALID_ARGUMENT;
  try {
    return to_c(t.del(view(key, klen)));
  } catch (...) {
    return FABKV_ERROR;
  }
}

// Runs `open`, turning an exception into NULL with its text in err (cleared first).
template <class F>
auto or_null(char* err, size_t errlen, F open) -> decltype(open()) {
  set_err(err, errlen, "");
  try {
    return open();
  } catch (const std::exception& e) {
    set_err(err, errlen, e.what());
  } catch (...) {
    set_err(err, errlen, "fabkv: unknown error");
  }
  return nullptr;
}

fabkv_cluster* open_cluster(fabkv::ClusterOptions co) {
  auto c = std::make_unique<fabkv_cluster>();
  c->cluster = std::make_unique<fabkv::Cluster>(std::move(co));
  return c.release();
}

}  // namespace

extern "C" {

void fabkv_options_init(fabkv_options* o) {
  if (o != nullptr) *o = fabkv_options{};
}

fabkv_client* fabkv_connect(const fabkv_options* opts, char* err, size_t errlen) {
  const fabkv_options o = opts != nullptr ? *opts : fabkv_options{};
  return or_null(err, errlen, [&] {
    fabkv::ClientOptions co;
    if (o.server != nullptr) co.server = o.server;
    set_common(&co, o.protocol, o.provider, o.secret, o.timeout_ms);
    if (o.transport != nullptr) co.transport = o.transport;
    if (o.connect_timeout_ms > 0) co.connect_timeout_ms = o.connect_timeout_ms;
    if (o.poll != nullptr && *o.poll != '\0') co.poll = o.poll;
    if (o.poll_spin_us > 0) co.poll_spin_us = o.poll_spin_us;
    if (o.poll_sleep_us > 0) co.poll_sleep_us = o.poll_sleep_us;
    auto c = std::make_unique<fabkv_client>();
    c->client = fabkv::Client::connect(co);
    return c.release();
  });
}

const char* fabkv_protocols(void) {
  static const std::string names = fabkv::proto::names();
  return names.c_str();
}

const char* fabkv_protocol_name(size_t i) {
  auto all = fabkv::proto::protocols();
  return i < all.size() ? all[i].name : nullptr;
}

int fabkv_get(fabkv_client* c, const void* key, size_t klen, void* buf, size_t cap, size_t* vlen) {
  return c == nullptr ? FABKV_INVALID_ARGUMENT
                      : get_into(*c->client, c->scratch, key, klen, buf, cap, vlen);
}

int fabkv_put(fabkv_client* c, const void* key, size_t klen, const void* val, size_t vlen) {
  return c == nullptr ? FABKV_INVALID_ARGUMENT : put_from(*c->client, key, klen, val, vlen);
}

int fabkv_del(fabkv_client* c, const void* key, size_t klen) {
  return c == nullptr ? FABKV_INVALID_ARGUMENT : del_of(*c->client, key, klen);
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

fabkv_cluster* fabkv_cluster_open(const fabkv_cluster_options* opts, char* err, size_t errlen) {
  const fabkv_cluster_options o = opts != nullptr ? *opts : fabkv_cluster_options{};
  return or_null(err, errlen, [&] {
    fabkv::ClusterOptions co;
    co.servers = fabkv::parse_cluster_servers(o.servers != nullptr ? o.servers : "");
    set_common(&co.client, o.protocol, o.provider, o.secret, o.timeout_ms);
    if (o.replicas > 0) co.replicas = static_cast<uint32_t>(o.replicas);
    if (o.auto_eject_hosts < 0) co.auto_eject_hosts = false;
    if (o.server_failure_limit > 0)
      co.server_failure_limit = static_cast<uint32_t>(o.server_failure_limit);
    if (o.retry_timeout_ms > 0) co.retry_timeout_ms = o.retry_timeout_ms;
    return open_cluster(std::move(co));
  });
}

fabkv_cluster* fabkv_cluster_open_file(const char* path, char* err, size_t errlen) {
  return or_null(err, errlen, [&]() -> fabkv_cluster* {
    if (path == nullptr) throw std::invalid_argument("fabkv: no cluster file given");
    return open_cluster(fabkv::load_cluster_file(path));
  });
}

int fabkv_cluster_get(fabkv_cluster* c, const void* key, size_t klen, void* buf, size_t cap,
                      size_t* vlen) {
  return c == nullptr ? FABKV_INVALID_ARGUMENT
                      : get_into(*c->cluster, c->scratch, key, klen, buf, cap, vlen);
}

int fabkv_cluster_put(fabkv_cluster* c, const void* key, size_t klen, const void* val,
                      size_t vlen) {
  return c == nullptr ? FABKV_INVALID_ARGUMENT : put_from(*c->cluster, key, klen, val, vlen);
}

int fabkv_cluster_del(fabkv_cluster* c, const void* key, size_t klen) {
  return c == nullptr ? FABKV_INVALID_ARGUMENT : del_of(*c->cluster, key, klen);
}

size_t fabkv_cluster_size(const fabkv_cluster* c) { return c == nullptr ? 0 : c->cluster->size(); }

size_t fabkv_cluster_server_for_key(fabkv_cluster* c, const void* key, size_t klen) {
  if (c == nullptr || (key == nullptr && klen != 0)) return FABKV_NO_SERVER;
  static_assert(fabkv::Cluster::npos == FABKV_NO_SERVER);
  return c->cluster->server_for_key(view(key, klen));
}

const char* fabkv_cluster_server_name(const fabkv_cluster* c, size_t i) {
  if (c == nullptr || i >= c->cluster->size()) return nullptr;
  return c->cluster->server(i).name.c_str();
}

const char* fabkv_cluster_server_error(fabkv_cluster* c, size_t i) {
  if (c == nullptr || i >= c->cluster->size()) return nullptr;
  try {
    c->error = c->cluster->counters(i).last_error;
  } catch (...) {
    c->error.clear();
  }
  return c->error.c_str();
}

void fabkv_cluster_close(fabkv_cluster* c) { delete c; }

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
