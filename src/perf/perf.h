// fabkv-perf: the seeds' verb microbenchmarks on whatever provider is in use.
//   inbound   N client processes issue READ/WRITE/SEND to one server      (HERD fig. 3)
//   outbound  the server issues them to N clients                        (HERD fig. 4, RF-RPC fig.
//   1) echo      request/response built from WRITE/WRITE, WRITE/SEND, SEND/SEND (HERD fig. 5)
//   latency   a suite: one client, window 1, by payload size: READ, WRITE, inlined WRITE and
//             WRITE/SEND echo (HERD fig. 2)
//   atomic    fetch-and-add on one of Z counters chosen at random          (Guidelines fig. 14)
// Every process is real: a coordinator spawns one server process and N client processes of
// this same executable, which find each other through the control channel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fabric/counters.h"

namespace fabkv::perf {

enum class Mode : uint8_t { kInbound, kOutbound, kEcho, kLatency, kAtomic };
enum class EchoKind : uint8_t { kWriteWrite, kWriteSend, kSendSend };
const char* to_string(Mode m);
const char* to_string(EchoKind e);
Mode mode_from_string(const std::string& s);
EchoKind echo_from_string(const std::string& s);
fabric::Verb verb_from_string(const std::string& s);  // read|write|send

// One experiment, as the coordinator hands it to each client.
struct RunSpec {
  Mode mode = Mode::kInbound;
  fabric::Verb verb = fabric::Verb::kWrite;  // inbound/outbound/latency
  EchoKind echo = EchoKind::kWriteSend;      // echo, and latency's echo rows
  uint32_t size = 32;                        // payload bytes
  uint32_t window = 16;                      // outstanding operations per client
  uint32_t clients = 1;                      // client processes
  uint32_t z = 1;                            // atomic: distinct counters
  bool inlined = false;                      // inline payloads (fi_inject / FI_INJECT)
  uint32_t signal_every = 1;                 // selective signaling: 1 = every op signaled
  double duration_s = 1.0;
  double warmup_s = 0.2;

  std::string label() const;  // e.g. "inbound write 32B w16"
};
nlohmann::json to_json(const RunSpec& s);
RunSpec spec_from_json(const nlohmann::json& j);

// Limits of the server's target region: each client owns kClientStride bytes of it.
inline constexpr uint64_t kClientStride = 256 * 1024;
inline constexpr uint32_t kMaxClients = 64;
inline constexpr uint64_t kTargetBytes = kClientStride * kMaxClients;
inline constexpr uint32_t kMaxZ = 4096;  // atomic: counters in their own region, 8 bytes each
// Throws std::invalid_argument when a spec cannot run (e.g. size*window beyond the stride).
void validate(const RunSpec& s);

struct ServerRoleOptions {
  std::string provider = "auto";
  std::string listen = "127.0.0.1:0";
  std::string secret;
  int core = 0;
  bool stdin_control = false;  // spawned by a coordinator: stdin EOF or "STOP" ends the server
};
// Serves until SIGINT/SIGTERM (or, with stdin_control, stdin's EOF or a "STOP" line). First
// prints one line "READY <host:port>" on stdout.
int run_server(const ServerRoleOptions& o);

struct ClientRoleOptions {
  std::string provider = "auto";
  std::string server;  // host:port of the server's control channel
  std::string secret;
  int core = 1;
  RunSpec spec;
  int timeout_ms = 5000;  // deadline for any wait on the server
};
// Connects, prints "READY", waits for "GO" on stdin, runs the spec, prints one JSON line.
int run_client(const ClientRoleOptions& o);

struct CoordinatorOptions {
  std::string provider = "shm";
  std::string server;  // an already running server; empty = spawn one locally
  std::string listen = "127.0.0.1:0";
  std::string secret;
  int server_core = 0;
  int client_core = 1;
  std::vector<RunSpec> runs;
  std::string json_path;  // append one JSON line per run
  int timeout_ms = 5000;
};
int run_coordinator(const CoordinatorOptions& o);

// The result one client reports.
struct ClientResult {
  uint64_t ops = 0;      // completed in the measured phase
  uint64_t all_ops = 0;  // completed since GO, warm-up and drain included (server per-op figures)
  double seconds = 0;
  nlohmann::json histogram;  // LatencyHistogram::to_json()
  fabric::VerbSnapshot counters;
  std::string error;
};

}  // namespace fabkv::perf
