#include "memcached/text.h"

#include <charconv>
#include <cstring>

#include "memcached/exec.h"

namespace fabkv::memcached {

namespace {

constexpr std::string_view kError = "ERROR\r\n";
constexpr std::string_view kBadFormat = "CLIENT_ERROR bad command line format\r\n";
constexpr std::string_view kBadChunk = "CLIENT_ERROR bad data chunk\r\n";
constexpr std::string_view kTooLarge = "SERVER_ERROR object too large for cache\r\n";
constexpr std::string_view kLineTooLong = "CLIENT_ERROR line too long\r\n";
constexpr std::string_view kBadDelta = "CLIENT_ERROR invalid numeric delta argument\r\n";
constexpr std::string_view kBadExptime = "CLIENT_ERROR invalid exptime argument\r\n";
constexpr std::string_view kBadDelete =
    "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n";
constexpr std::string_view kKeyTooLong = "CLIENT_ERROR key too long\r\n";

template <class T>
bool parse_num(std::string_view s, T* v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size();
}

struct Verbs {
  std::string_view name;
  Verb verb;
};
constexpr Verbs kVerbs[] = {
    {"get", Verb::kGet},         {"gets", Verb::kGets},       {"gat", Verb::kGat},
    {"gats", Verb::kGats},       {"set", Verb::kSet},         {"add", Verb::kAdd},
    {"replace", Verb::kReplace}, {"append", Verb::kAppend},   {"prepend", Verb::kPrepend},
    {"cas", Verb::kCas},         {"delete", Verb::kDelete},   {"incr", Verb::kIncr},
    {"decr", Verb::kDecr},       {"touch", Verb::kTouch},     {"flush_all", Verb::kFlushAll},
    {"stats", Verb::kStats},     {"version", Verb::kVersion}, {"verbosity", Verb::kVerbosity},
    {"quit", Verb::kQuit},       {"shutdown", Verb::kShutdown}, {"mg", Verb::kMetaGet},
    {"ms", Verb::kMetaSet},      {"md", Verb::kMetaDelete},   {"ma", Verb::kMetaArith},
    {"mn", Verb::kMetaNoop},     {"me", Verb::kMetaDebug},
};

ParseResult error(std::string_view reply, size_t consumed) {
  return {Parse::kError, consumed, reply, 0};
}

// A storage command's data block: `bytes` then "\r\n" after the line.
ParseResult data_block(std::string_view in, size_t line_end, uint64_t bytes, size_t max_value,
                       TextCommand* cmd) {
  if (bytes > max_value) {
    // memcached: SERVER_ERROR and swallow the block, whatever its size (conn_swallow).
    ParseResult r{Parse::kSwallow, line_end, kTooLarge, bytes + 2};
    return r;
  }
  if (in.size() - line_end < bytes + 2) return {};
  if (in.substr(line_end + bytes, 2) != "\r\n") return error(kBadChunk, line_end + bytes + 2);
  cmd->data = in.substr(line_end, bytes);
  return {Parse::kCommand, line_end + bytes + 2, {}, 0};
}

}  // namespace

bool valid_key(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) return false;
  for (unsigned char c : key)
    if (c <= ' ' || c == 0x7f) return false;
  return true;
}

ParseResult parse_text(std::string_view in, size_t max_value, TextCommand* cmd) {
  const size_t nl = in.find('\n');
  if (nl == std::string_view::npos) {
    if (in.size() > kMaxLineBytes) return {Parse::kClose, in.size(), kLineTooLong, 0};
    return {};
  }
  if (nl > kMaxLineBytes) return {Parse::kClose, nl + 1, kLineTooLong, 0};
  const size_t line_end = nl + 1;
  std::string_view line = in.substr(0, nl);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

  // Tokens separated by spaces (memcached splits on ' ' only).
  cmd->keys.clear();
  cmd->args.clear();
  cmd->noreply = false;
  cmd->data = {};
  cmd->flags = 0;
  cmd->exptime = 0;
  cmd->cas = 0;
  cmd->delta = 0;
  cmd->delay = 0;
  std::string_view tok[8];
  size_t nt = 0;
  std::string_view rest = line;
  auto next = [&rest]() -> std::string_view {
    size_t b = rest.find_first_not_of(' ');
    if (b == std::string_view::npos) {
      rest = {};
      return {};
    }
    rest.remove_prefix(b);
    size_t e = rest.find(' ');
    std::string_view t = rest.substr(0, e);
    rest.remove_prefix(e == std::string_view::npos ? rest.size() : e);
    return t;
  };
  std::string_view name = next();
  if (name.empty()) return error(kError, line_end);
  const Verbs* v = nullptr;
  for (const Verbs& x : kVerbs)
    if (x.name == name) v = &x;
  if (v == nullptr) return error(kError, line_end);
  cmd->verb = v->verb;

  // Multi-key and meta commands take any number of tokens.
  switch (cmd->verb) {
    case Verb::kGat:
    case Verb::kGats:
    case Verb::kGet:
    case Verb::kGets: {
      if (cmd->verb == Verb::kGat || cmd->verb == Verb::kGats) {
        std::string_view t = next();
        if (t.empty()) return error(kError, line_end);
        if (!parse_num(t, &cmd->exptime)) return error(kBadExptime, line_end);
      }
      for (std::string_view k = next(); !k.empty(); k = next()) {
        if (k.size() > kMaxKeyBytes) return error(kBadFormat, line_end);
        cmd->keys.push_back(k);
      }
      if (cmd->keys.empty()) return error(kError, line_end);
      return {Parse::kCommand, line_end, {}, 0};
    }
    case Verb::kMetaGet:
    case Verb::kMetaSet:
    case Verb::kMetaDelete:
    case Verb::kMetaArith:
    case Verb::kMetaDebug: {
      std::string_view k = next();
      if (k.empty()) return error("CLIENT_ERROR bad command line format\r\n", line_end);
      if (k.size() > kMaxKeyBytes) return error(kKeyTooLong, line_end);
      cmd->keys.push_back(k);
      uint64_t datalen = 0;
      if (cmd->verb == Verb::kMetaSet) {
        std::string_view t = next();
        if (!parse_num(t, &datalen)) return error(kBadFormat, line_end);
      }
      for (std::string_view t = next(); !t.empty(); t = next()) {
        if (cmd->args.size() >= 32) return error(kBadFormat, line_end);
        if (t == "q") cmd->noreply = true;  // quiet mode; the caller decides what it hides
        cmd->args.push_back(t);
      }
      if (cmd->verb == Verb::kMetaSet) {
        ParseResult r = data_block(in, line_end, datalen, max_value, cmd);
        if (r.status == Parse::kSwallow) r.reply = "SERVER_ERROR object too large for cache\r\n";
        return r;
      }
      return {Parse::kCommand, line_end, {}, 0};
    }
    case Verb::kStats:
      for (std::string_view t = next(); !t.empty(); t = next()) {
        if (cmd->args.size() >= 8) return error(kError, line_end);
        cmd->args.push_back(t);
      }
      return {Parse::kCommand, line_end, {}, 0};
    default:
      break;
  }

  for (std::string_view t = next(); !t.empty(); t = next()) {
    if (nt == std::size(tok)) return error(kError, line_end);
    tok[nt++] = t;
  }
  // A trailing "noreply" (memcached's set_noreply_maybe).
  auto take_noreply = [&] {
    if (nt > 0 && tok[nt - 1] == "noreply") {
      cmd->noreply = true;
      --nt;
    }
  };

  switch (cmd->verb) {
    case Verb::kSet:
    case Verb::kAdd:
    case Verb::kReplace:
    case Verb::kAppend:
    case Verb::kPrepend:
    case Verb::kCas: {
      const size_t want = cmd->verb == Verb::kCas ? 5 : 4;
      take_noreply();
      if (nt != want) return error(kError, line_end);
      int64_t bytes = 0;
      const bool nums = parse_num(tok[1], &cmd->flags) && parse_num(tok[2], &cmd->exptime) &&
                        parse_num(tok[3], &bytes) &&
                        (cmd->verb != Verb::kCas || parse_num(tok[4], &cmd->cas));
      if (!nums || bytes < 0) return error(kBadFormat, line_end);
      cmd->keys.push_back(tok[0]);
      if (!valid_key(tok[0])) {
        // memcached answers and reads the block as commands; we skip the block as well, so that
        // a value is never taken for a command.
        return {Parse::kSwallow, line_end, kBadFormat, static_cast<uint64_t>(bytes) + 2};
      }
      return data_block(in, line_end, static_cast<uint64_t>(bytes), max_value, cmd);
    }
    case Verb::kDelete:
      take_noreply();
      if (nt == 0) return error(kError, line_end);
      if (nt > 2 || (nt == 2 && tok[1] != "0")) return error(kBadDelete, line_end);
      if (!valid_key(tok[0])) return error(kBadFormat, line_end);
      cmd->keys.push_back(tok[0]);
      return {Parse::kCommand, line_end, {}, 0};
    case Verb::kIncr:
    case Verb::kDecr:
      take_noreply();
      if (nt != 2) return error(kError, line_end);
      if (!valid_key(tok[0])) return error(kBadFormat, line_end);
      if (!parse_num(tok[1], &cmd->delta)) return error(kBadDelta, line_end);
      cmd->keys.push_back(tok[0]);
      return {Parse::kCommand, line_end, {}, 0};
    case Verb::kTouch:
      take_noreply();
      if (nt != 2) return error(kError, line_end);
      if (!valid_key(tok[0])) return error(kBadFormat, line_end);
      if (!parse_num(tok[1], &cmd->exptime)) return error(kBadExptime, line_end);
      cmd->keys.push_back(tok[0]);
      return {Parse::kCommand, line_end, {}, 0};
    case Verb::kFlushAll:
      take_noreply();
      if (nt > 1) return error(kError, line_end);
      if (nt == 1 && !parse_num(tok[0], &cmd->delay)) return error(kBadFormat, line_end);
      return {Parse::kCommand, line_end, {}, 0};
    case Verb::kVerbosity:
      // memcached 1.6 takes "verbosity noreply" silently, and a level with or without noreply.
      take_noreply();
      if (nt > 1 || (nt == 0 && !cmd->noreply)) return error(kError, line_end);
      return {Parse::kCommand, line_end, {}, 0};
    case Verb::kVersion:  // memcached 1.6 ignores version's arguments
      return {Parse::kCommand, line_end, {}, 0};
    case Verb::kQuit:
    case Verb::kMetaNoop:
      if (nt != 0) return error(kError, line_end);
      return {Parse::kCommand, line_end, {}, 0};
    case Verb::kShutdown:
      return {Parse::kCommand, line_end, {}, 0};
    default:
      break;
  }
  return error(kError, line_end);
}

}  // namespace fabkv::memcached
