#include <stdexcept>

#include <fmt/format.h>

#include "perf/perf.h"
#include "perf/wire.h"

namespace fabkv::perf {

const char* to_string(Mode m) {
  switch (m) {
    case Mode::kInbound: return "inbound";
    case Mode::kOutbound: return "outbound";
    case Mode::kEcho: return "echo";
    case Mode::kLatency: return "latency";
    case Mode::kAtomic: return "atomic";
  }
  return "?";
}

const char* to_string(EchoKind e) {
  switch (e) {
    case EchoKind::kWriteWrite: return "write-write";
    case EchoKind::kWriteSend: return "write-send";
    case EchoKind::kSendSend: return "send-send";
  }
  return "?";
}

Mode mode_from_string(const std::string& s) {
  for (Mode m : {Mode::kInbound, Mode::kOutbound, Mode::kEcho, Mode::kLatency, Mode::kAtomic})
    if (s == to_string(m)) return m;
  throw std::invalid_argument("unknown mode '" + s +
                              "' (expected inbound, outbound, echo, latency or atomic)");
}

EchoKind echo_from_string(const std::string& s) {
  for (EchoKind e : {EchoKind::kWriteWrite, EchoKind::kWriteSend, EchoKind::kSendSend})
    if (s == to_string(e)) return e;
  throw std::invalid_argument("unknown echo '" + s +
                              "' (expected write-write, write-send or send-send)");
}

fabric::Verb verb_from_string(const std::string& s) {
  if (s == "read") return fabric::Verb::kRead;
  if (s == "write") return fabric::Verb::kWrite;
  if (s == "send") return fabric::Verb::kSend;
  throw std::invalid_argument("unknown verb '" + s + "' (expected read, write or send)");
}

std::string RunSpec::label() const {
  std::string what;
  switch (mode) {
    case Mode::kEcho: what = to_string(echo); break;
    case Mode::kAtomic: what = fmt::format("fadd z={}", z); break;
    default: what = fabric::to_string(verb);
  }
  return fmt::format("{} {}{}{} {}B c{} w{}", to_string(mode), what, inlined ? " inline" : "",
                     signal_every > 1 ? fmt::format(" sig/{}", signal_every) : "", size, clients,
                     window);
}

nlohmann::json to_json(const RunSpec& s) {
  return {{"mode", to_string(s.mode)},
          {"verb", fabric::to_string(s.verb)},
          {"echo", to_string(s.echo)},
          {"size", s.size},
          {"window", s.window},
          {"clients", s.clients},
          {"z", s.z},
          {"inline", s.inlined},
          {"signal_every", s.signal_every},
          {"duration_s", s.duration_s},
          {"warmup_s", s.warmup_s}};
}

RunSpec spec_from_json(const nlohmann::json& j) {
  RunSpec s;
  s.mode = mode_from_string(j.at("mode").get<std::string>());
  s.verb = verb_from_string(j.at("verb").get<std::string>());
  s.echo = echo_from_string(j.at("echo").get<std::string>());
  s.size = j.at("size").get<uint32_t>();
  s.window = j.at("window").get<uint32_t>();
  s.clients = j.at("clients").get<uint32_t>();
  s.z = j.at("z").get<uint32_t>();
  s.inlined = j.at("inline").get<bool>();
  s.signal_every = j.at("signal_every").get<uint32_t>();
  s.duration_s = j.at("duration_s").get<double>();
  s.warmup_s = j.at("warmup_s").get<double>();
  return s;
}

void validate(const RunSpec& s) {
  if (s.clients == 0 || s.clients > kMaxClients)
    throw std::invalid_argument(fmt::format("clients must be 1..{}", kMaxClients));
  if (s.window == 0 || s.window > 1024) throw std::invalid_argument("window must be 1..1024");
  if (s.signal_every == 0 || s.signal_every > s.window)
    throw std::invalid_argument("signal-every must be 1..window");
  if (static_cast<uint64_t>(s.size) * s.window > kClientStride)
    throw std::invalid_argument(fmt::format("size x window must fit a client's {} KiB area",
                                            kClientStride / 1024));
  if (s.mode == Mode::kLatency)
    throw std::invalid_argument("latency is a suite of window-1 runs, not a client mode");
  if (s.mode == Mode::kEcho && s.size < 16)
    throw std::invalid_argument("echo payloads carry an 8-byte header and trailer: size >= 16");
  if (s.mode == Mode::kAtomic && (s.z == 0 || s.z > kMaxZ))
    throw std::invalid_argument(fmt::format("z must be 1..{}", kMaxZ));
  if (s.mode == Mode::kOutbound && s.verb == fabric::Verb::kSend && s.size < 1)
    throw std::invalid_argument("outbound send needs size >= 1");
  if ((s.verb == fabric::Verb::kSend || s.mode == Mode::kEcho) && s.size > kRecvBufferBytes)
    throw std::invalid_argument(fmt::format("SEND payloads are limited to {} bytes here",
                                            kRecvBufferBytes));
  if (s.duration_s <= 0 || s.duration_s > 3600)
    throw std::invalid_argument("duration must be (0, 3600] s");
}

}  // namespace fabkv::perf
