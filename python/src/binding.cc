// fabkv._fabkv: the client library (src/client/client.h, src/client/cluster.h) for Python, with
// pybind11. The package around it is python/fabkv/ (__init__.py re-exports, errors.py has the
// exception classes); docs/python.md is the user's page.
//
// Three rules shape this file:
// - Every blocking call (connect, get, put, delete, get_multi, next, stats, close) runs with the
//   GIL released, so other Python threads run while a request waits (each is bounded by the
//   client's timeout_ms, client/client.h). Nothing that touches a Python object runs then.
// - A fabkv::Client (or Cluster) is not thread-safe (client/client.h, "Threading"), but a Python
//   object can be shared between threads: each carries a mutex (Guarded), taken after the GIL
//   is released (taking it with the GIL held would deadlock against a thread that waits for
//   the GIL while holding the mutex).
// - Errors reach Python as fabkv.errors classes chosen by status (errors.py); the status
//   numbers are the C API's (client/fabkv.h), which are stable.
#include <Python.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "client/client.h"
#include "client/cluster.h"
#include "client/fabkv.h"
#include "fabric/fabric.h"
#include "proto/registry.h"

namespace py = pybind11;

namespace fabkv::python {
namespace {

// The C API's number for a status (client/fabkv.h): what errors.py's Status enum holds.
int status_code(Status s) {
  switch (s) {
    case Status::kOk: return FABKV_OK;
    case Status::kNotFound: return FABKV_NOT_FOUND;
    case Status::kTooLarge: return FABKV_TOO_LARGE;
    case Status::kNoSpace: return FABKV_NO_SPACE;
    case Status::kVersionMismatch: return FABKV_VERSION_MISMATCH;
    case Status::kInvalidKey: return FABKV_INVALID_KEY;
    case Status::kServerGone: return FABKV_SERVER_GONE;
    case Status::kTimeout: return FABKV_TIMEOUT;
    case Status::kMalformed: return FABKV_MALFORMED;
    case Status::kError: return FABKV_ERROR;
    case Status::kContended: return FABKV_CONTENDED;
  }
  return FABKV_ERROR;
}

// The status of a C API number (the inverse of status_code), kError for an unknown one.
Status status_of(int code) {
  for (Status s : {Status::kOk, Status::kNotFound, Status::kTooLarge, Status::kNoSpace,
                   Status::kVersionMismatch, Status::kInvalidKey, Status::kServerGone,
                   Status::kTimeout, Status::kMalformed, Status::kContended})
    if (status_code(s) == code) return s;
  return Status::kError;
}

// A failed call on its way to Python: the translator registered in the module turns it into
// fabkv.errors.error_for(code, message), with the GIL held again.
class StatusError : public std::runtime_error {
 public:
  StatusError(Status status, const std::string& what)
      : std::runtime_error(what), code_(status_code(status)) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Bytes of a key or value. bytes and str (as UTF-8) are read in place: they are immutable and
// the call's own arguments keep them alive while the GIL is released. Any other object with
// the buffer protocol (bytearray, memoryview, array) may change under a released GIL, so it is
// copied first.
class ByteArg {
 public:
  ByteArg(py::handle h, const char* what) {
    PyObject* o = h.ptr();
    if (PyBytes_Check(o)) {
      view_ = std::string_view(PyBytes_AS_STRING(o), static_cast<size_t>(PyBytes_GET_SIZE(o)));
    } else if (PyUnicode_Check(o)) {
      Py_ssize_t n = 0;
      const char* p = PyUnicode_AsUTF8AndSize(o, &n);  // cached in the str object
      if (p == nullptr) throw py::error_already_set();
      view_ = std::string_view(p, static_cast<size_t>(n));
    } else if (PyObject_CheckBuffer(o)) {
      Py_buffer b;
      if (PyObject_GetBuffer(o, &b, PyBUF_SIMPLE) != 0) throw py::error_already_set();
      owned_.assign(static_cast<const char*>(b.buf), static_cast<size_t>(b.len));
      PyBuffer_Release(&b);
      view_ = owned_;
    } else {
      throw py::type_error(fmt::format("fabkv: {} must be bytes or str, not {}", what,
                                       Py_TYPE(o)->tp_name));
    }
  }
  std::string_view view() const { return view_; }

 private:
  std::string owned_;
  std::string_view view_;
};

py::object json_to_python(const nlohmann::json& j) {
  return py::module_::import("json").attr("loads")(j.dump());
}

// The exception of a failed call: the operation, the status, and what helps: the limits for a
// key or value refused, else `where` (the server, or why the cluster's servers failed).
// max_value 0: unknown.
[[noreturn]] void raise_status(Status s, const char* op, size_t klen, size_t vlen, size_t max_value,
                               const std::string& where) {
  std::string what = fmt::format("fabkv: {}: {}", op, to_string(s));
  if (s == Status::kTooLarge) {
    what += fmt::format(" (key {} bytes, at most 250; value {} bytes", klen, vlen);
    what += max_value != 0 ? fmt::format(", the server's max_value is {})", max_value) : ")";
  } else if (s == Status::kInvalidKey) {
    what += " (keys are 1 to 250 bytes)";
  } else if (!where.empty()) {
    what += " (" + where + ")";
  }
  throw StatusError(s, what);
}

// The absolute expiry of a put from its keywords: expire (relative seconds, pymemcache's and
// redis-py's) or expire_at (absolute Unix seconds, the wire's), 0 = never. Both given, a negative
// time, or one past what the wire's 32 bits hold (2106) is a ValueError: nothing is sent.
uint32_t expiry(const py::object& expire, const py::object& expire_at) {
  constexpr int64_t kMax = UINT32_MAX;
  if (!expire.is_none() && !expire_at.is_none())
    throw py::value_error(
        "fabkv: give expire (relative seconds) or expire_at (absolute Unix seconds), not both");
  if (!expire_at.is_none()) {
    int64_t at = expire_at.cast<int64_t>();
    if (at < 0 || at > kMax)
      throw py::value_error(fmt::format(
          "fabkv: expire_at must be 0 (never) or Unix seconds up to {}, not {}", kMax, at));
    return static_cast<uint32_t>(at);
  }
  if (expire.is_none()) return 0;
  int64_t rel = expire.cast<int64_t>();
  if (rel == 0) return 0;
  int64_t now = static_cast<int64_t>(::time(nullptr));
  if (rel < 0 || rel > kMax - now)
    throw py::value_error(fmt::format(
        "fabkv: expire must be 0 (never) or seconds from now up to {}, not {}", kMax - now, rel));
  return static_cast<uint32_t>(now + rel);
}

// The keys of an iterable (or the keys of a mapping) as given and as bytes.
struct Keys {
  // As the caller gave them: str and bytes as given; a bytearray or memoryview (not hashable,
  // or not for long) as the bytes it held.
  std::vector<py::object> given;
  std::vector<std::string> bytes;
  explicit Keys(const py::iterable& keys) {
    for (py::handle h : keys) {
      ByteArg k(h, "key");
      given.push_back(PyBytes_Check(h.ptr()) || PyUnicode_Check(h.ptr())
                          ? py::reinterpret_borrow<py::object>(h)
                          : py::bytes(k.view().data(), k.view().size()));
      bytes.emplace_back(k.view());
    }
  }
};

// One request of a window (PyClient::window): what to send, then its answer.
struct WindowOp {
  enum class Kind : uint8_t { kGet, kPut, kDel } kind = Kind::kGet;
  std::string key, value;
  uint32_t expire_at = 0;
  Status status = Status::kError;  // kError until its callback runs
  std::string out;                 // kGet: the value found
};

// One T (Client, Cluster) behind a mutex, null once closed. call() runs f(T&) with the GIL
// released and the mutex held.
template <typename T>
class Guarded {
 public:
  explicit Guarded(const char* kind) : kind_(kind) {}

  template <typename F>
  std::invoke_result_t<F&, T&> call(F&& f) {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    if (!obj_) throw py::value_error(fmt::format("fabkv: the {} is closed", kind_));
    return f(*obj_);
  }

  bool closed() {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    return obj_ == nullptr;
  }

  // Closes it (its connections torn down without the GIL); a second close does nothing.
  void close() {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    obj_.reset();
  }

  // Set once, by the constructor (before any other thread can see this object).
  void set(std::unique_ptr<T> obj) { obj_ = std::move(obj); }

 private:
  const char* kind_;
  std::mutex mu_;
  std::unique_ptr<T> obj_;
};

// fabkv.Client: one connection (one fabric endpoint) to one server over one protocol.
class PyClient {
 public:
  PyClient(std::string server, std::string protocol, std::string provider, std::string transport,
           std::string secret, int timeout_ms, py::object connect_timeout_ms, std::string poll)
      : client_("client") {
    options_.server = std::move(server);
    options_.protocol = std::move(protocol);
    options_.provider = std::move(provider);
    options_.transport = std::move(transport);
    options_.secret = std::move(secret);
    options_.timeout_ms = timeout_ms;
    if (!connect_timeout_ms.is_none()) options_.connect_timeout_ms = connect_timeout_ms.cast<int>();
    options_.poll = std::move(poll);
    py::gil_scoped_release nogil;
    try {
      client_.set(Client::connect(options_));
    } catch (const ClientError& e) {
      throw StatusError(e.status(), e.what());
    }
  }

  py::object get(py::handle key) {
    ByteArg k(key, "key");
    std::string value;
    Status s = call([&](Client& c) { return c.get(k.view(), &value); });
    if (s == Status::kNotFound) return py::none();
    check(s, "get", k.view().size(), 0);
    return py::bytes(value);
  }

  void put(py::handle key, py::handle value, const py::object& expire,
           const py::object& expire_at) {
    uint32_t at = expiry(expire, expire_at);
    ByteArg k(key, "key");
    ByteArg v(value, "value");
    Status s = call([&](Client& c) { return c.put(k.view(), v.view(), 0, at); });
    check(s, "put", k.view().size(), v.view().size());
  }

  // (value, version), or (None, None) when there is no such key (pymemcache's gets).
  py::tuple gets(py::handle key) {
    ByteArg k(key, "key");
    std::string value;
    uint64_t version = 0;
    Status s = call([&](Client& c) { return c.get(k.view(), &value, &version); });
    if (s == Status::kNotFound) return py::make_tuple(py::none(), py::none());
    check(s, "gets", k.view().size(), 0);
    return py::make_tuple(py::bytes(value), version);
  }

  // Stores only over `version` (gets): True stored, False the key has another version now,
  // None no such key (pymemcache's cas).
  py::object cas(py::handle key, py::handle value, uint64_t version, const py::object& expire,
                 const py::object& expire_at) {
    uint32_t at = expiry(expire, expire_at);
    if (version == 0) throw py::value_error("fabkv: cas needs the version gets returned, not 0");
    ByteArg k(key, "key");
    ByteArg v(value, "value");
    Status s = call([&](Client& c) { return c.put(k.view(), v.view(), version, at); });
    if (s == Status::kVersionMismatch) return py::bool_(false);
    if (s == Status::kNotFound) return py::none();
    check(s, "cas", k.view().size(), v.view().size());
    return py::bool_(true);
  }

  // {key: value} of the keys found, keyed as given; one window of requests.
  py::dict get_many(const py::iterable& keys) {
    Keys ks(keys);
    std::vector<WindowOp> ops(ks.bytes.size());
    for (size_t j = 0; j < ops.size(); ++j) ops[j].key = ks.bytes[j];
    window(ops, "get_many");
    py::dict out;
    for (size_t j = 0; j < ops.size(); ++j)
      if (ops[j].status == Status::kOk) out[ks.given[j]] = py::bytes(ops[j].out);
    return out;
  }

  // The keys of `items` (a mapping) that were not stored because the store is full (NoSpace),
  // as pymemcache's set_many returns those not stored; any other failure raises.
  py::list set_many(py::handle items, const py::object& expire, const py::object& expire_at) {
    uint32_t at = expiry(expire, expire_at);
    if (!py::hasattr(items, "keys"))  // PyMapping_Check takes a list too
      throw py::type_error("fabkv: set_many takes a mapping of keys to values");
    Keys ks(py::reinterpret_borrow<py::object>(items).attr("keys")());
    std::vector<WindowOp> ops(ks.bytes.size());
    for (size_t j = 0; j < ops.size(); ++j) {
      ops[j].kind = WindowOp::Kind::kPut;
      ops[j].key = ks.bytes[j];
      ops[j].value = ByteArg(items[ks.given[j]], "value").view();
      ops[j].expire_at = at;
    }
    window(ops, "set_many");
    py::list failed;
    for (size_t j = 0; j < ops.size(); ++j)
      if (ops[j].status == Status::kNoSpace) failed.append(ks.given[j]);
    return failed;
  }

  // The number of keys that were there; one window of requests.
  size_t delete_many(const py::iterable& keys) {
    Keys ks(keys);
    std::vector<WindowOp> ops(ks.bytes.size());
    for (size_t j = 0; j < ops.size(); ++j) {
      ops[j].kind = WindowOp::Kind::kDel;
      ops[j].key = ks.bytes[j];
    }
    window(ops, "delete_many");
    size_t n = 0;
    for (const WindowOp& op : ops) n += op.status == Status::kOk;
    return n;
  }

  // ---- for fabkv.aio (python/fabkv/aio.py), which runs the client from an event loop:
  // _submit posts one request and returns its token at once (never more than the window in
  // flight: the caller keeps count); _poll drives progress once (and expires late requests)
  // and returns what finished as (token, status, value, version).
  uint64_t submit(int kind, py::handle key, py::handle value, uint64_t version,
                  uint32_t expire_at) {
    ByteArg k(key, "key");
    std::string v = value.is_none() ? std::string() : std::string(ByteArg(value, "value").view());
    uint64_t token = ++last_token_;
    auto cb = [this, token](Status s, std::string_view val, uint64_t ver) {
      finished_.push_back({token, s, std::string(val), ver});
    };
    Status s = call([&](Client& c) {
      switch (kind) {
        case 0: return c.get_async(k.view(), cb);
        case 1: return c.put_async(k.view(), v, cb, version, expire_at);
        default: return c.del_async(k.view(), cb);
      }
    });
    check(s, kind == 0 ? "get" : kind == 1 ? "put" : "delete", k.view().size(), v.size());
    return token;
  }

  py::list poll_finished(bool expire) {
    std::vector<Finished> got;
    call([&](Client& c) {
      c.poll();
      if (expire) c.expire();
      got.swap(finished_);
      return 0;
    });
    py::list out;
    for (Finished& f : got)
      out.append(py::make_tuple(f.token, status_code(f.status), py::bytes(f.value), f.version));
    return out;
  }

  py::tuple wait_fds() {
    auto fds = call([](Client& c) { return c.wait_fds(); });
    return py::make_tuple(fds.fabric, fds.control, fds.answers);
  }
  bool can_wait() {
    return call([](Client& c) { return c.can_wait(); });
  }
  size_t in_flight() {
    return call([](Client& c) { return c.in_flight(); });
  }
  // The exception of a finished request's status (aio raises it in its awaiter).
  py::object error_of(int code, const std::string& op) {
    return py::module_::import("fabkv.errors")
        .attr("error_for")(code, fmt::format("fabkv: {}: {} ({})", op, to_string(status_of(code)),
                                             options_.server));
  }

  // True when the key was there.
  bool del(py::handle key) {
    ByteArg k(key, "key");
    Status s = call([&](Client& c) { return c.del(k.view()); });
    if (s == Status::kNotFound) return false;
    check(s, "delete", k.view().size(), 0);
    return true;
  }

  uint64_t next() {
    uint64_t v = 0;
    Status s = call([&](Client& c) { return c.next(&v); });
    if (s == Status::kError && proto::find(options_.protocol) != nullptr &&
        proto::find(options_.protocol)->engine != proto::EngineNeed::kNone)
      throw StatusError(s, "fabkv: next: " + options_.protocol +
                               " is a key-value protocol, not a sequencer (docs/sequencer.md)");
    check(s, "next", 0, 0);
    return v;
  }

  py::object stats() {
    nlohmann::json j;
    call([&](Client& c) {
      try {
        j = c.stats();
      } catch (const ClientError& e) {
        throw StatusError(e.status(), e.what());
      }
      return Status::kOk;
    });
    return json_to_python(j);
  }

  py::object layout() {
    return json_to_python(call([](Client& c) { return c.layout(); }));
  }
  // {verb: {posted, completed, bytes, ...}} of this client's endpoint (fabric/counters.h).
  py::object verb_counters() {
    return json_to_python(call([](Client& c) { return c.counters().to_json(); }));
  }
  std::string provider() {
    return call([](Client& c) { return c.provider(); });
  }
  size_t max_value() {
    return call([](Client& c) { return c.layout().value("max_value", size_t{0}); });
  }
  const std::string& protocol() const { return options_.protocol; }
  const std::string& server() const { return options_.server; }
  int timeout_ms() const { return options_.timeout_ms; }

  bool closed() { return client_.closed(); }
  // Closes the connection; a second close does nothing.
  void close() { client_.close(); }

  std::string repr() {
    bool is_closed = closed();
    return fmt::format("<fabkv.Client {} at {}{}>", options_.protocol, options_.server,
                       is_closed ? " (closed)" : "");
  }

 private:
  template <typename F>
  std::invoke_result_t<F&, Client&> call(F&& f) {
    return client_.call(std::forward<F>(f));
  }

  // Posts every op (get_async, put_async, del_async: each waits for a free slot when its
  // worker's window is full) and then waits for all (flush): one window of requests, not a
  // round trip each, bounded by timeout_ms after the last post. Raises for the first op that
  // failed other than by a miss or a full store (kNotFound, kNoSpace: the caller's to report).
  void window(std::vector<WindowOp>& ops, const char* op) {
    call([&](Client& c) {
      for (WindowOp& w : ops) {
        auto cb = [p = &w](Status s, std::string_view v, uint64_t) {
          p->status = s;
          if (s == Status::kOk && p->kind == WindowOp::Kind::kGet) p->out.assign(v);
        };
        Status s = Status::kError;
        switch (w.kind) {
          case WindowOp::Kind::kGet: s = c.get_async(w.key, cb); break;
          case WindowOp::Kind::kPut: s = c.put_async(w.key, w.value, cb, 0, w.expire_at); break;
          case WindowOp::Kind::kDel: s = c.del_async(w.key, cb); break;
        }
        if (s != Status::kOk) w.status = s;  // not sent: the callback will not run
      }
      c.flush();
      return 0;
    });
    for (const WindowOp& w : ops)
      if (w.status != Status::kOk && w.status != Status::kNotFound && w.status != Status::kNoSpace)
        check(w.status, op, w.key.size(), w.value.size());
  }

  void check(Status s, const char* op, size_t klen, size_t vlen) {
    if (s == Status::kOk) return;
    raise_status(s, op, klen, vlen, s == Status::kTooLarge ? max_value() : 0,
                 s == Status::kServerGone || s == Status::kTimeout ? options_.server : "");
  }

  struct Finished {
    uint64_t token;
    Status status;
    std::string value;
    uint64_t version;
  };

  ClientOptions options_;
  Guarded<Client> client_;
  // fabkv.aio's requests: tokens handed out, and what finished since the last _poll (filled
  // by callbacks, which run inside the client's calls, under Guarded's mutex).
  uint64_t last_token_ = 0;
  std::vector<Finished> finished_;
};

// fabkv.Cluster: many servers, each key on its ketama server (client/cluster.h). Connects to
// nothing until a key needs a server.
class PyCluster {
 public:
  // servers: "HOST:PORT[:WEIGHT][ NAME]" strings, or one string of them comma-separated.
  PyCluster(py::object servers, std::string protocol, std::string provider, py::object secret,
            int timeout_ms, uint32_t replicas, bool auto_eject_hosts, uint32_t server_failure_limit,
            int retry_timeout_ms)
      : cluster_("cluster") {
    ClusterOptions o;
    if (py::isinstance<py::str>(servers)) {
      o.servers = parse_cluster_servers(servers.cast<std::string>());
    } else {
      for (py::handle h : servers) {
        if (!py::isinstance<py::str>(h))
          throw py::type_error(fmt::format("fabkv: each server must be a str, not {}",
                                           Py_TYPE(h.ptr())->tp_name));
        o.servers.push_back(parse_cluster_server(h.cast<std::string>()));
      }
    }
    o.client.protocol = std::move(protocol);
    o.client.provider = std::move(provider);
    if (!secret.is_none()) o.client.secret = secret.cast<std::string>();
    if (timeout_ms <= 0) throw py::value_error("fabkv: timeout_ms must be > 0");
    o.client.timeout_ms = timeout_ms;
    o.replicas = replicas;
    o.auto_eject_hosts = auto_eject_hosts;
    o.server_failure_limit = server_failure_limit;
    if (retry_timeout_ms < 0) throw py::value_error("fabkv: retry_timeout_ms must be >= 0");
    o.retry_timeout_ms = retry_timeout_ms;
    open(std::move(o));
  }

  // Cluster.from_file(path): a TOML cluster file (client/cluster.h, load_cluster_file).
  explicit PyCluster(ClusterOptions o) : cluster_("cluster") { open(std::move(o)); }

  static std::unique_ptr<PyCluster> from_file(const std::string& path) {
    // Python's own open() first, for its FileNotFoundError or PermissionError.
    py::module_::import("builtins").attr("open")(path, "rb").attr("close")();
    ClusterOptions o;
    try {
      o = load_cluster_file(path);
    } catch (const std::runtime_error& e) {
      throw py::value_error(e.what());  // the file's content, with its line
    }
    return std::make_unique<PyCluster>(std::move(o));
  }

  py::object get(py::handle key) {
    ByteArg k(key, "key");
    std::string value;
    Status s = run("get", k.view(), 0, [&](Cluster& c) { return c.get(k.view(), &value); });
    if (s == Status::kNotFound) return py::none();
    return py::bytes(value);
  }

  // (value, version), or (None, None) when there is no such key.
  py::tuple gets(py::handle key) {
    ByteArg k(key, "key");
    std::string value;
    uint64_t version = 0;
    Status s = run("gets", k.view(), 0,
                   [&](Cluster& c) { return c.get(k.view(), &value, &version); });
    if (s == Status::kNotFound) return py::make_tuple(py::none(), py::none());
    return py::make_tuple(py::bytes(value), version);
  }

  void put(py::handle key, py::handle value, const py::object& expire, const py::object& expire_at,
           uint64_t version) {
    uint32_t at = expiry(expire, expire_at);
    ByteArg k(key, "key");
    ByteArg v(value, "value");
    if (version != 0 && replicas_ > 1)
      throw StatusError(Status::kError,
                        "fabkv: put: a version needs replicas=1 (each replica "
                        "numbers its versions itself)");
    Status s = run("put", k.view(), v.view().size(),
                   [&](Cluster& c) { return c.put(k.view(), v.view(), version, at); });
    if (s == Status::kNotFound) raise_status(s, "put", 0, 0, 0, "no such key to replace");
  }

  // Client.cas's answers: True stored, False another version now, None no such key.
  py::object cas(py::handle key, py::handle value, uint64_t version, const py::object& expire,
                 const py::object& expire_at) {
    uint32_t at = expiry(expire, expire_at);
    if (version == 0) throw py::value_error("fabkv: cas needs the version gets returned, not 0");
    if (replicas_ > 1)
      throw StatusError(Status::kError,
                        "fabkv: cas: a version needs replicas=1 (each replica numbers its "
                        "versions itself)");
    ByteArg k(key, "key");
    ByteArg v(value, "value");
    std::string detail;
    Status s = cluster_.call([&](Cluster& c) {
      auto before = failures(c);
      Status st = c.put(k.view(), v.view(), version, at);
      if (st != Status::kOk) detail = what_failed(c, before);
      return st;
    });
    if (s == Status::kVersionMismatch) return py::bool_(false);
    if (s == Status::kNotFound) return py::none();
    if (s != Status::kOk) raise_status(s, "cas", k.view().size(), v.view().size(), 0, detail);
    return py::bool_(true);
  }

  bool del(py::handle key) {
    ByteArg k(key, "key");
    return run("delete", k.view(), 0, [&](Cluster& c) { return c.del(k.view()); }) == Status::kOk;
  }

  // {key: value} of the keys found, keyed as given (str stays str). A key that is missing, or whose
  // servers failed, is left out, as pylibmc leaves out what it could not get; the call raises
  // only when every key failed (no server answered for any), or for a key refused as such
  // (TooLarge, InvalidKey: nothing could ever read it).
  py::dict get_multi(py::iterable keys) {
    Keys ks(keys);
    std::vector<py::object>& given = ks.given;
    std::vector<std::string>& bytes = ks.bytes;
    std::vector<Cluster::GetResult> got;
    std::string detail;
    cluster_.call([&](Cluster& c) {
      auto before = failures(c);
      got = c.get_multi(bytes);
      detail = what_failed(c, before);
      return 0;
    });
    py::dict out;
    size_t failed = 0;
    const Cluster::GetResult* first_failure = nullptr;
    for (size_t j = 0; j < got.size(); ++j) {
      Status s = got[j].status;
      if (s == Status::kOk) {
        out[given[j]] = py::bytes(got[j].value);
      } else if (s == Status::kTooLarge || s == Status::kInvalidKey) {
        raise_status(s, "get_multi", bytes[j].size(), 0, 0, "");
      } else if (s != Status::kNotFound) {
        ++failed;
        if (first_failure == nullptr) first_failure = &got[j];
      }
    }
    if (failed > 0 && failed == got.size())
      raise_status(first_failure->status, "get_multi", 0, 0, 0,
                   fmt::format("all {} keys failed; {}", failed, detail));
    return out;
  }

  // The keys of `items` (a mapping) that were not stored, as pylibmc's set_multi returns them;
  // raises when none was stored, or for a key or value refused as such (TooLarge, InvalidKey).
  py::list put_multi(py::handle items, const py::object& expire, const py::object& expire_at) {
    uint32_t at = expiry(expire, expire_at);
    if (!py::hasattr(items, "keys"))  // PyMapping_Check takes a list too
      throw py::type_error("fabkv: put_multi takes a mapping of keys to values");
    std::vector<py::object> given;
    std::vector<std::pair<std::string, std::string>> kv;
    for (py::handle k : py::reinterpret_borrow<py::object>(items).attr("keys")()) {
      ByteArg key(k, "key");
      ByteArg value(items[k], "value");
      given.push_back(py::reinterpret_borrow<py::object>(k));
      kv.emplace_back(std::string(key.view()), std::string(value.view()));
    }
    std::vector<Status> got;
    std::string detail;
    cluster_.call([&](Cluster& c) {
      auto before = failures(c);
      got = c.put_multi(kv, at);
      detail = what_failed(c, before);
      return 0;
    });
    py::list failed;
    for (size_t j = 0; j < got.size(); ++j) {
      if (got[j] == Status::kTooLarge || got[j] == Status::kInvalidKey)
        raise_status(got[j], "put_multi", kv[j].first.size(), kv[j].second.size(), 0, "");
      if (got[j] != Status::kOk) failed.append(given[j]);
    }
    if (!got.empty() && failed.size() == got.size())
      raise_status(got[0], "put_multi", 0, 0, 0,
                   fmt::format("all {} keys failed; {}", got.size(), detail));
    return failed;
  }

  // The number of keys that were there; every server's share posted before any answer is
  // awaited. A key whose servers failed raises (its value may still be there), as
  // Client.delete_many does; the message says how many failed.
  size_t delete_multi(py::iterable keys) {
    Keys ks(keys);
    std::vector<Status> got;
    std::string detail;
    cluster_.call([&](Cluster& c) {
      auto before = failures(c);
      got = c.del_multi(ks.bytes);
      detail = what_failed(c, before);
      return 0;
    });
    size_t deleted = 0, failed = 0;
    Status first = Status::kOk;
    size_t first_len = 0;
    for (size_t j = 0; j < got.size(); ++j) {
      if (got[j] == Status::kOk) {
        ++deleted;
      } else if (got[j] != Status::kNotFound) {
        if (failed++ == 0) first = got[j], first_len = ks.bytes[j].size();
      }
    }
    if (failed > 0)
      raise_status(first, "delete_multi", first_len, 0, 0,
                   fmt::format("{} of {} keys failed; {}", failed, got.size(), detail));
    return deleted;
  }

  py::object server_for_key(py::handle key) {
    ByteArg k(key, "key");
    size_t i = cluster_.call([&](Cluster& c) { return c.server_for_key(k.view()); });
    if (i == Cluster::npos) return py::none();
    return py::int_(i);
  }

  py::list servers_for_key(py::handle key) {
    ByteArg k(key, "key");
    auto v = cluster_.call([&](Cluster& c) { return c.servers_for_key(k.view()); });
    py::list out;
    for (size_t i : v) out.append(i);
    return out;
  }

  py::list servers() {
    auto list = cluster_.call([](Cluster& c) {
      std::vector<ClusterServer> v;
      for (size_t i = 0; i < c.size(); ++i) v.push_back(c.server(i));
      return v;
    });
    py::list out;
    for (const ClusterServer& s : list) {
      py::dict d;
      d["address"] = s.address;
      d["name"] = s.name;
      d["weight"] = s.weight;
      out.append(std::move(d));
    }
    return out;
  }

  py::object stats() {
    return json_to_python(cluster_.call([](Cluster& c) { return c.stats(); }));
  }

  bool closed() { return cluster_.closed(); }
  void close() { cluster_.close(); }

  std::string repr() {
    bool is_closed = closed();
    return fmt::format("<fabkv.Cluster of {} servers, {}{}>", size_, protocol_,
                       is_closed ? " (closed)" : "");
  }

 private:
  void open(ClusterOptions o) {
    protocol_ = o.client.protocol;
    size_ = o.servers.size();
    replicas_ = o.replicas;
    cluster_.set(std::make_unique<Cluster>(std::move(o)));  // std::invalid_argument: ValueError
  }

  static std::vector<uint64_t> failures(const Cluster& c) {
    std::vector<uint64_t> v(c.size());
    for (size_t i = 0; i < c.size(); ++i) v[i] = c.counters(i).failures;
    return v;
  }

  // The servers that failed since `before`, each with its reason; else those off the ring (a
  // write with replicas is refused while fewer than `replicas` servers are on it).
  std::string what_failed(const Cluster& c, const std::vector<uint64_t>& before) const {
    std::string out, ejected;
    for (size_t i = 0; i < c.size(); ++i) {
      auto n = c.counters(i);
      std::string one = fmt::format("{}{} '{}': {}", out.empty() ? "" : "; ", c.server(i).address,
                                    c.server(i).name, n.last_error);
      if (n.failures > before[i]) out += one;
      else if (n.ejected) ejected += (ejected.empty() ? "" : "; ") + one;
    }
    if (out.empty() && !ejected.empty() && replicas_ > 1)
      out = fmt::format(
          "fewer than replicas={} servers left on the ring (a write needs them all); "
          "off it: {}",
          replicas_, ejected);
    else if (out.empty() && !ejected.empty()) out = "no server left on the ring for it: " + ejected;
    return out;
  }

  // Runs one keyed call; raises for anything but kOk and kNotFound, saying which servers failed
  // and why (a server's name refused, nobody listening, a timeout).
  template <typename F>
  Status run(const char* op, std::string_view key, size_t vlen, F&& f) {
    std::string detail;
    size_t max_value = 0;
    Status s = cluster_.call([&](Cluster& c) {
      auto before = failures(c);
      Status st = f(c);
      if (st == Status::kOk || st == Status::kNotFound) return st;
      detail = what_failed(c, before);
      if (st == Status::kTooLarge) {
        size_t i = c.server_for_key(key);
        if (i != Cluster::npos && c.counters(i).connected)
          max_value = c.client(i)->layout().value("max_value", size_t{0});
      }
      return st;
    });
    if (s != Status::kOk && s != Status::kNotFound)
      raise_status(s, op, key.size(), vlen, max_value, detail);
    return s;
  }

  Guarded<Cluster> cluster_;
  std::string protocol_;
  size_t size_ = 0;
  uint32_t replicas_ = 1;
};

// The registry as Python sees it: fabkv.protocols(), fabkv.protocol_info().
void bind_protocols(py::module_& m) {
  m.def(
      "protocols",
      [] {
        py::list out;
        for (const auto& p : proto::protocols()) out.append(p.name);
        return out;
      },
      "The names of every protocol this library speaks (src/proto/registry.h), in order.");
  m.def(
      "protocol_info",
      [] {
        py::list out;
        for (const auto& p : proto::protocols()) {
          py::dict d;
          d["name"] = p.name;
          d["server_side"] = proto::info(p.server).name;
          d["engine"] = std::string(p.engine);
          d["sequencer"] = p.engine == proto::EngineNeed::kNone;
          d["summary"] = p.summary;
          out.append(std::move(d));
        }
        return out;
      },
      "One dict per protocol: name, server_side, engine, sequencer, summary.");
}

void bind_client(py::module_& m) {
  py::class_<PyClient>(m, "Client", R"(A connection to a fabkv-server over one protocol.

Client(server="127.0.0.1:7000", *, protocol="herd", provider="auto", transport="",
       secret="", timeout_ms=2000, connect_timeout_ms=None, poll="spin")

Connecting raises fabkv.Error (ServerGone when the server is unreachable or refuses us).
Keys and values are bytes or str (UTF-8). Every call waits at most timeout_ms, with the
GIL released. One Client may be shared between threads; its calls then take turns.)")
      .def(py::init<std::string, std::string, std::string, std::string, std::string, int,
                    py::object, std::string>(),
           py::arg("server") = "127.0.0.1:7000", py::kw_only(),
           py::arg("protocol") = proto::info(proto::kDefault).name, py::arg("provider") = "auto",
           py::arg("transport") = "", py::arg("secret") = "", py::arg("timeout_ms") = 2000,
           py::arg("connect_timeout_ms") = py::none(), py::arg("poll") = "spin")
      .def("get", &PyClient::get, py::arg("key"),
           "The value of key as bytes, or None when there is no such key.")
      .def("put", &PyClient::put, py::arg("key"), py::arg("value"), py::kw_only(),
           py::arg("expire") = py::none(), py::arg("expire_at") = py::none(),
           "Stores value under key. expire: seconds from now, or expire_at: absolute Unix "
           "seconds (not both); 0 or neither = never.")
      .def("set", &PyClient::put, py::arg("key"), py::arg("value"), py::kw_only(),
           py::arg("expire") = py::none(), py::arg("expire_at") = py::none(),
           "put's other name (pymemcache's, redis-py's).")
      .def("gets", &PyClient::gets, py::arg("key"),
           "(value, version), or (None, None) when there is no such key.")
      .def("cas", &PyClient::cas, py::arg("key"), py::arg("value"), py::arg("cas"), py::kw_only(),
           py::arg("expire") = py::none(), py::arg("expire_at") = py::none(),
           "Stores value only if key still has version cas (from gets): True stored, False "
           "it has another version now, None there is no such key.")
      .def("get_many", &PyClient::get_many, py::arg("keys"),
           "{key: value} of the keys found (one window of requests).")
      .def("set_many", &PyClient::set_many, py::arg("mapping"), py::kw_only(),
           py::arg("expire") = py::none(), py::arg("expire_at") = py::none(),
           "Stores every key: value of the mapping (one window of requests); returns the keys "
           "not stored because the store is full.")
      .def("delete_many", &PyClient::delete_many, py::arg("keys"),
           "Deletes every key (one window of requests); returns how many were there.")
      .def("_submit", &PyClient::submit, py::arg("kind"), py::arg("key"), py::arg("value"),
           py::arg("version"), py::arg("expire_at"))
      .def("_poll", &PyClient::poll_finished, py::arg("expire"))
      .def("_wait_fds", &PyClient::wait_fds)
      .def("_can_wait", &PyClient::can_wait)
      .def("_error", &PyClient::error_of, py::arg("code"), py::arg("op"))
      .def_property_readonly("_in_flight", &PyClient::in_flight)
      .def("delete", &PyClient::del, py::arg("key"),
           "Deletes key; True when it was there, False when it was not.")
      .def("next", &PyClient::next,
           "A sequencer's next value (protocols seq-rpc, seq-spec, seq-atomic).")
      .def("stats", &PyClient::stats, "The server's statistics as a dict.")
      .def("verb_counters", &PyClient::verb_counters,
           "This client's fabric operations per verb (posted, completed, bytes, ...), a dict.")
      .def("close", &PyClient::close, "Closes the connection (again: nothing).")
      .def_property_readonly("closed", &PyClient::closed)
      .def_property_readonly("protocol", &PyClient::protocol)
      .def_property_readonly("server", &PyClient::server)
      .def_property_readonly("timeout_ms", &PyClient::timeout_ms)
      .def_property_readonly("provider", &PyClient::provider,
                             "The provider in use, e.g. 'shm' or 'tcp;ofi_rxm'.")
      .def_property_readonly("max_value", &PyClient::max_value,
                             "The server's largest value in bytes.")
      .def_property_readonly("layout", &PyClient::layout,
                             "The layout the server handed out at connect, as a dict.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](PyClient& c, py::handle, py::handle, py::handle) {
             c.close();
             return false;
           })
      .def("__repr__", &PyClient::repr);
}

void bind_cluster(py::module_& m) {
  py::class_<PyCluster>(m, "Cluster", R"(Many fabkv-servers as one store: each key on the server the
ketama ring of memcached's clients gives it (pylibmc's ketama_weighted, twemproxy's ketama), so
fabkv, pylibmc and nutcracker given the same servers agree on every key (docs/cluster.md).

Cluster(servers, *, protocol="herd", provider="auto", secret=None, timeout_ms=2000,
        replicas=1, auto_eject_hosts=True, server_failure_limit=2, retry_timeout_ms=2000)
Cluster.from_file(path)   # a TOML cluster file

servers: "HOST:PORT[:WEIGHT][ NAME]" strings (control addresses; NAME is the server's ring
name, by default "host:port"), or one string of them comma-separated. A bad list raises
ValueError; nothing is connected until a key needs its server. Calls raise fabkv.Error classes
as Client's do, with the GIL released.)")
      .def(py::init<py::object, std::string, std::string, py::object, int, uint32_t, bool, uint32_t,
                    int>(),
           py::arg("servers"), py::kw_only(),
           py::arg("protocol") = proto::info(proto::kDefault).name, py::arg("provider") = "auto",
           py::arg("secret") = py::none(), py::arg("timeout_ms") = 2000, py::arg("replicas") = 1,
           py::arg("auto_eject_hosts") = true, py::arg("server_failure_limit") = 2,
           py::arg("retry_timeout_ms") = 2000)
      .def_static("from_file", &PyCluster::from_file, py::arg("path"),
                  "A Cluster as a TOML cluster file says (docs/cluster.md).")
      .def("get", &PyCluster::get, py::arg("key"),
           "The value of key as bytes, or None when there is no such key.")
      .def("gets", &PyCluster::gets, py::arg("key"),
           "(value, version), or (None, None) when there is no such key.")
      .def("put", &PyCluster::put, py::arg("key"), py::arg("value"), py::kw_only(),
           py::arg("expire") = py::none(), py::arg("expire_at") = py::none(),
           py::arg("version") = 0,
           "Stores value under key on its server (and replicas). expire: seconds from now, or "
           "expire_at: absolute Unix seconds (not both), 0 = never; version: store only over "
           "that version (gets), needs replicas=1.")
      .def("set", &PyCluster::put, py::arg("key"), py::arg("value"), py::kw_only(),
           py::arg("expire") = py::none(), py::arg("expire_at") = py::none(),
           py::arg("version") = 0, "put's other name (pymemcache's, redis-py's).")
      .def("cas", &PyCluster::cas, py::arg("key"), py::arg("value"), py::arg("cas"), py::kw_only(),
           py::arg("expire") = py::none(), py::arg("expire_at") = py::none(),
           "Stores value only if key still has version cas (from gets): True stored, False "
           "it has another version now, None there is no such key. Needs replicas=1.")
      .def("delete", &PyCluster::del, py::arg("key"),
           "Deletes key; True when it was there, False when it was not.")
      .def("get_multi", &PyCluster::get_multi, py::arg("keys"),
           "{key: value} of the keys found; missing keys and keys whose servers failed are left "
           "out (raises only when every key failed).")
      .def("put_multi", &PyCluster::put_multi, py::arg("items"), py::kw_only(),
           py::arg("expire") = py::none(), py::arg("expire_at") = py::none(),
           "Stores every key: value of the mapping, each server's share pipelined; returns the "
           "keys not stored (raises only when none was).")
      .def("delete_multi", &PyCluster::delete_multi, py::arg("keys"),
           "Deletes every key, each server's share pipelined; returns how many were there. "
           "Raises when a key's servers failed (the message says how many).")
      .def("get_many", &PyCluster::get_multi, py::arg("keys"), "get_multi's other name.")
      .def("delete_many", &PyCluster::delete_multi, py::arg("keys"),
           "delete_multi's other name (pymemcache's).")
      .def("set_many", &PyCluster::put_multi, py::arg("mapping"), py::kw_only(),
           py::arg("expire") = py::none(), py::arg("expire_at") = py::none(),
           "put_multi's other name.")
      .def("server_for_key", &PyCluster::server_for_key, py::arg("key"),
           "The index in servers of the key's server now, None when no server is left.")
      .def("servers_for_key", &PyCluster::servers_for_key, py::arg("key"),
           "The key's replicas in ring order (the first is server_for_key).")
      .def_property_readonly("servers", &PyCluster::servers,
                             "One dict per server: address, name, weight.")
      .def("stats", &PyCluster::stats,
           "The client's counters per server (requests, failures, ejections, ...) as a dict.")
      .def("close", &PyCluster::close, "Closes every connection (again: nothing).")
      .def_property_readonly("closed", &PyCluster::closed)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](PyCluster& c, py::handle, py::handle, py::handle) {
             c.close();
             return false;
           })
      .def("__repr__", &PyCluster::repr);
}

}  // namespace
}  // namespace fabkv::python

PYBIND11_MODULE(_fabkv, m) {
  using fabkv::python::StatusError;
  m.doc() = "fabkv's client library (the extension under the fabkv package; docs/python.md)";
  m.attr("__version__") = fabkv::fabric::fabkv_version();

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object err = py::module_::import("fabkv.errors").attr("error_for")(e.code(), e.what());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err.ptr())), err.ptr());
    }
  });

  m.def("_expiry", &fabkv::python::expiry, py::arg("expire"), py::arg("expire_at"),
        "The absolute expiry (Unix seconds, 0 = never) of a put's expire= or expire_at=.");
  fabkv::python::bind_protocols(m);
  fabkv::python::bind_client(m);
  fabkv::python::bind_cluster(m);
}
