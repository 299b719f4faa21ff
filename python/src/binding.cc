// fabkv._fabkv: the client library (src/client/client.h) for Python, with pybind11. The
// package around it is python/fabkv/ (__init__.py re-exports, errors.py has the exception
// classes); docs/python.md is the user's page.
//
// Three rules shape this file:
// - Every blocking call (connect, get, put, delete, next, stats, close) runs with the GIL
//   released, so other Python threads run while a request waits (each is bounded by the
//   client's timeout_ms, client/client.h). Nothing that touches a Python object runs then.
// - A fabkv::Client is not thread-safe (client/client.h, "Threading"), but a Python object can
//   be shared between threads: each Client carries a mutex, taken after the GIL is released
//   (taking it with the GIL held would deadlock against a thread that waits for the GIL while
//   holding the mutex).
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

#include <fmt/format.h>

#include "client/client.h"
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

// fabkv.Client: one connection (one fabric endpoint) to one server over one protocol.
class PyClient {
 public:
  PyClient(std::string server, std::string protocol, std::string provider, std::string transport,
           std::string secret, int timeout_ms, py::object connect_timeout_ms, std::string poll) {
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
      client_ = Client::connect(options_);
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

  void put(py::handle key, py::handle value, uint32_t expire_at) {
    ByteArg k(key, "key");
    ByteArg v(value, "value");
    Status s = call([&](Client& c) { return c.put(k.view(), v.view(), 0, expire_at); });
    check(s, "put", k.view().size(), v.view().size());
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
  std::string provider() {
    return call([](Client& c) { return c.provider(); });
  }
  size_t max_value() {
    return call([](Client& c) { return c.layout().value("max_value", size_t{0}); });
  }
  const std::string& protocol() const { return options_.protocol; }
  const std::string& server() const { return options_.server; }
  int timeout_ms() const { return options_.timeout_ms; }

  bool closed() {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    return client_ == nullptr;
  }

  // Closes the connection; a second close does nothing.
  void close() {
    std::unique_ptr<Client> gone;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      gone = std::move(client_);
      gone.reset();  // tears down the endpoint and the control connection
    }
  }

  std::string repr() {
    bool is_closed = closed();
    return fmt::format("<fabkv.Client {} at {}{}>", options_.protocol, options_.server,
                       is_closed ? " (closed)" : "");
  }

 private:
  // Runs f(client) with the GIL released and the client's mutex held.
  template <typename F>
  std::invoke_result_t<F&, Client&> call(F&& f) {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    if (!client_) throw py::value_error("fabkv: the client is closed");
    return f(*client_);
  }

  void check(Status s, const char* op, size_t klen, size_t vlen) {
    if (s == Status::kOk) return;
    std::string what = fmt::format("fabkv: {}: {}", op, to_string(s));
    if (s == Status::kTooLarge)
      what += fmt::format(" (key {} bytes, at most 250; value {} bytes, the server's max_value is {})",
                          klen, vlen, max_value());
    else if (s == Status::kInvalidKey)
      what += " (keys are 1 to 250 bytes)";
    else if (s == Status::kServerGone || s == Status::kTimeout)
      what += " (" + options_.server + ")";
    throw StatusError(s, what);
  }

  ClientOptions options_;
  std::mutex mu_;
  std::unique_ptr<Client> client_;  // null once closed
};

const char* engine_name(proto::EngineNeed e) {
  switch (e) {
    case proto::EngineNeed::kAny: return "any";
    case proto::EngineNeed::kPilaf: return "pilaf";
    case proto::EngineNeed::kFarm: return "farm";
    case proto::EngineNeed::kDrtm: return "drtm";
    case proto::EngineNeed::kHydra: return "hydradb";
    case proto::EngineNeed::kNone: return "none";
  }
  return "?";
}

}  // namespace
}  // namespace fabkv::python

PYBIND11_MODULE(_fabkv, m) {
  using fabkv::python::PyClient;
  using fabkv::python::StatusError;
  m.doc() = "fabkv's client library (the extension under the fabkv package; docs/python.md)";
  m.attr("__version__") = fabkv::fabric::fabkv_version();

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object err =
          py::module_::import("fabkv.errors").attr("error_for")(e.code(), e.what());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err.ptr())), err.ptr());
    }
  });

  m.def(
      "protocols",
      [] {
        py::list out;
        for (const auto& p : fabkv::proto::protocols()) out.append(p.name);
        return out;
      },
      "The names of every protocol this library speaks (src/proto/registry.h), in order.");
  m.def(
      "protocol_info",
      [] {
        py::list out;
        for (const auto& p : fabkv::proto::protocols()) {
          py::dict d;
          d["name"] = p.name;
          d["server_side"] = fabkv::proto::info(p.server).name;
          d["engine"] = fabkv::python::engine_name(p.engine);
          d["sequencer"] = p.engine == fabkv::proto::EngineNeed::kNone;
          d["summary"] = p.summary;
          out.append(std::move(d));
        }
        return out;
      },
      "One dict per protocol: name, server_side, engine, sequencer, summary.");

  py::class_<PyClient>(m, "Client", R"(A connection to a fabkv-server over one protocol.

Client(server="127.0.0.1:7000", *, protocol="herd", provider="auto", transport="",
       secret="", timeout_ms=2000, connect_timeout_ms=None, poll="spin")

Connecting raises fabkv.Error (ServerGone when the server is unreachable or refuses us).
Keys and values are bytes or str (UTF-8). Every call waits at most timeout_ms, with the
GIL released. One Client may be shared between threads; its calls then take turns.)")
      .def(py::init<std::string, std::string, std::string, std::string, std::string, int,
                    py::object, std::string>(),
           py::arg("server") = "127.0.0.1:7000", py::kw_only(),
           py::arg("protocol") = fabkv::proto::info(fabkv::proto::kDefault).name,
           py::arg("provider") = "auto", py::arg("transport") = "", py::arg("secret") = "",
           py::arg("timeout_ms") = 2000, py::arg("connect_timeout_ms") = py::none(),
           py::arg("poll") = "spin")
      .def("get", &PyClient::get, py::arg("key"),
           "The value of key as bytes, or None when there is no such key.")
      .def("put", &PyClient::put, py::arg("key"), py::arg("value"), py::kw_only(),
           py::arg("expire_at") = 0,
           "Stores value under key. expire_at: absolute Unix seconds, 0 = never.")
      .def("delete", &PyClient::del, py::arg("key"),
           "Deletes key; True when it was there, False when it was not.")
      .def("next", &PyClient::next,
           "A sequencer's next value (protocols seq-rpc, seq-spec, seq-atomic).")
      .def("stats", &PyClient::stats, "The server's statistics as a dict.")
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
