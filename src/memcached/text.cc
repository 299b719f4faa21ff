#include "memcached/text.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <span>

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
    {"get", Verb::kGet},         {"gets", Verb::kGets},         {"gat", Verb::kGat},
    {"gats", Verb::kGats},       {"set", Verb::kSet},           {"add", Verb::kAdd},
    {"replace", Verb::kReplace}, {"append", Verb::kAppend},     {"prepend", Verb::kPrepend},
    {"cas", Verb::kCas},         {"delete", Verb::kDelete},     {"incr", Verb::kIncr},
    {"decr", Verb::kDecr},       {"touch", Verb::kTouch},       {"flush_all", Verb::kFlushAll},
    {"stats", Verb::kStats},     {"version", Verb::kVersion},   {"verbosity", Verb::kVerbosity},
    {"quit", Verb::kQuit},       {"shutdown", Verb::kShutdown}, {"mg", Verb::kMetaGet},
    {"ms", Verb::kMetaSet},      {"md", Verb::kMetaDelete},     {"ma", Verb::kMetaArith},
    {"mn", Verb::kMetaNoop},     {"me", Verb::kMetaDebug},      {"lru_crawler", Verb::kLruCrawler},
};

constexpr std::string_view kBadToken = "CLIENT_ERROR bad token in command line format\r\n";
constexpr std::string_view kBadModeLength = "CLIENT_ERROR incorrect length for M token\r\n";
constexpr std::string_view kBadSetMode = "CLIENT_ERROR invalid mode for ms M token\r\n";
constexpr std::string_view kBadArithMode = "CLIENT_ERROR invalid mode for ma M token\r\n";
constexpr std::string_view kBase64 = "CLIENT_ERROR base64 keys are not supported\r\n";
constexpr std::string_view kOpaqueTooLong = "CLIENT_ERROR opaque token too long\r\n";
// memcached 1.6's longest O token, its letter included (1.6.18 takes 32 bytes, refuses 33:
// tests/memcached/differential.py, FIXED).
constexpr size_t kMaxOpaqueToken = 32;

ParseResult error(std::string_view reply, size_t consumed) {
  return {Parse::kError, consumed, reply, 0};
}
ParseResult command(size_t consumed) { return {Parse::kCommand, consumed, {}, 0}; }

// The tokens of a command line, one at a time: memcached splits on ' ' only; "" at the end.
class Tokens {
 public:
  explicit Tokens(std::string_view line) : rest_(line) {}
  std::string_view next() {
    const size_t b = rest_.find_first_not_of(' ');
    if (b == std::string_view::npos) {
      rest_ = {};
      return {};
    }
    rest_.remove_prefix(b);
    const size_t e = rest_.find(' ');
    std::string_view t = rest_.substr(0, e);
    rest_.remove_prefix(e == std::string_view::npos ? rest_.size() : e);
    return t;
  }

 private:
  std::string_view rest_;
};

// A parse of one command line: the bytes it came in, where its line ends, the command it fills.
struct Line {
  std::string_view in;
  size_t end = 0;  // just past its '\n'
  size_t max_value = 0;
  TextCommand* cmd = nullptr;
};

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

namespace {

// get, gets, gat, gats: [exptime] and any number of keys.
ParseResult parse_retrieval(const Line& l, Tokens& tokens) {
  TextCommand* cmd = l.cmd;
  if (cmd->verb == Verb::kGat || cmd->verb == Verb::kGats) {
    std::string_view t = tokens.next();
    if (t.empty()) return error(kError, l.end);
    if (!parse_num(t, &cmd->exptime)) return error(kBadExptime, l.end);
  }
  for (std::string_view k = tokens.next(); !k.empty(); k = tokens.next()) {
    if (k.size() > kMaxKeyBytes) return error(kBadFormat, l.end);
    cmd->keys.push_back(k);
  }
  if (cmd->keys.empty()) return error(kError, l.end);
  return command(l.end);
}

// mg, ms, md, ma, me: a key, ms's datalen, then up to 32 flags (parse_meta decodes them).
ParseResult parse_meta_line(const Line& l, Tokens& tokens) {
  TextCommand* cmd = l.cmd;
  std::string_view k = tokens.next();
  if (k.empty()) return error(kError, l.end);  // memcached 1.6: too few tokens
  if (k.size() > kMaxKeyBytes) return error(kBadFormat, l.end);
  cmd->keys.push_back(k);
  uint64_t datalen = 0;
  if (cmd->verb == Verb::kMetaSet && !parse_num(tokens.next(), &datalen))
    return error(kBadFormat, l.end);
  for (std::string_view t = tokens.next(); !t.empty(); t = tokens.next()) {
    if (cmd->args.size() >= 32) return error(kBadFormat, l.end);
    if (t == "q") cmd->noreply = true;  // quiet mode; the caller decides what it hides
    cmd->args.push_back(t);
  }
  if (cmd->verb == Verb::kMetaSet) return data_block(l.in, l.end, datalen, l.max_value, cmd);
  return command(l.end);
}

// set, add, replace, append, prepend: key flags exptime bytes; cas: and the version.
ParseResult parse_storage(const Line& l, std::span<const std::string_view> tok) {
  TextCommand* cmd = l.cmd;
  const size_t want = cmd->verb == Verb::kCas ? 5 : 4;
  if (tok.size() != want) return error(kError, l.end);
  int64_t bytes = 0;
  const bool nums = parse_num(tok[1], &cmd->flags) && parse_num(tok[2], &cmd->exptime) &&
                    parse_num(tok[3], &bytes) &&
                    (cmd->verb != Verb::kCas || parse_num(tok[4], &cmd->cas));
  if (!nums || bytes < 0) return error(kBadFormat, l.end);
  cmd->keys.push_back(tok[0]);
  if (!valid_key(tok[0])) {
    // memcached answers and reads the block as commands; we skip the block as well, so that
    // a value is never taken for a command.
    return {Parse::kSwallow, l.end, kBadFormat, static_cast<uint64_t>(bytes) + 2};
  }
  return data_block(l.in, l.end, static_cast<uint64_t>(bytes), l.max_value, cmd);
}

// delete, incr, decr, touch: a key, and what else each takes.
ParseResult parse_keyed(const Line& l, std::span<const std::string_view> tok) {
  TextCommand* cmd = l.cmd;
  const size_t nt = tok.size();
  if (cmd->verb == Verb::kDelete) {
    if (nt == 0) return error(kError, l.end);
    if (nt > 2 || (nt == 2 && tok[1] != "0")) return error(kBadDelete, l.end);
  } else if (nt < 2 || nt + (cmd->noreply ? 1 : 0) > 3) {
    // memcached 1.6 takes one token more than incr, decr and touch use (ignored), counting a
    // trailing noreply: `incr k 1 2` answers, `incr k 1 2 noreply` is an ERROR.
    return error(kError, l.end);
  }
  if (!valid_key(tok[0])) return error(kBadFormat, l.end);
  if ((cmd->verb == Verb::kIncr || cmd->verb == Verb::kDecr) && !parse_num(tok[1], &cmd->delta))
    return error(kBadDelta, l.end);
  if (cmd->verb == Verb::kTouch && !parse_num(tok[1], &cmd->exptime))
    return error(kBadExptime, l.end);
  cmd->keys.push_back(tok[0]);
  return command(l.end);
}

// The commands of at most 8 tokens after the verb, a trailing "noreply" already taken off.
ParseResult parse_fixed(const Line& l, std::span<const std::string_view> tok) {
  TextCommand* cmd = l.cmd;
  const size_t nt = tok.size();
  switch (cmd->verb) {
    case Verb::kSet:
    case Verb::kAdd:
    case Verb::kReplace:
    case Verb::kAppend:
    case Verb::kPrepend:
    case Verb::kCas: return parse_storage(l, tok);
    case Verb::kDelete:
    case Verb::kIncr:
    case Verb::kDecr:
    case Verb::kTouch: return parse_keyed(l, tok);
    case Verb::kFlushAll:
      // memcached 1.6: up to two tokens, a trailing noreply among them; the first is the delay
      // whenever there is one (`flush_all 3600 x` waits an hour), and one that is not a number
      // is refused, silently with noreply (`flush_all noreply 0`: not last, so not noreply).
      if (nt + (cmd->noreply ? 1 : 0) > 2) return error(kError, l.end);
      if (nt >= 1 && !parse_num(tok[0], &cmd->delay))
        return error(cmd->noreply ? std::string_view{} : kBadExptime, l.end);
      return command(l.end);
    case Verb::kVerbosity: {
      // memcached 1.6: one or two tokens, a trailing noreply among them; the first must be a
      // number (the second is ignored), and noreply hides the refusal too, so "verbosity
      // noreply" says nothing.
      if (nt + (cmd->noreply ? 1 : 0) == 0 || nt + (cmd->noreply ? 1 : 0) > 2)
        return error(kError, l.end);
      uint64_t level = 0;
      if (nt > 0 && !parse_num(tok[0], &level) && !cmd->noreply) return error(kBadFormat, l.end);
      return command(l.end);
    }
    default: return error(kError, l.end);
  }
}

void reset(TextCommand* cmd) {
  cmd->keys.clear();
  cmd->args.clear();
  cmd->noreply = false;
  cmd->data = {};
  cmd->flags = 0;
  cmd->exptime = 0;
  cmd->cas = 0;
  cmd->delta = 0;
  cmd->delay = 0;
}

// A line with no end in its first kMaxLineBytes: a retrieval's head (its verb, gat's
// exptime) and Parse::kKeys, its keys to be read in pieces; any other line is refused.
ParseResult long_line(std::string_view in, TextCommand* cmd) {
  const ParseResult refused{Parse::kClose, in.size(), kLineTooLong, 0};
  reset(cmd);
  const size_t verb_end = in.find(' ');
  if (verb_end == std::string_view::npos) return refused;
  const std::string_view name = in.substr(0, verb_end);
  if (name == "get" || name == "gets") {
    cmd->verb = name == "get" ? Verb::kGet : Verb::kGets;
    return {Parse::kKeys, verb_end, {}, 0};
  }
  if (name != "gat" && name != "gats") return refused;
  cmd->verb = name == "gat" ? Verb::kGat : Verb::kGats;
  const size_t b = in.find_first_not_of(' ', verb_end);
  const size_t e = b == std::string_view::npos ? b : in.find(' ', b);
  if (e == std::string_view::npos || !parse_num(in.substr(b, e - b), &cmd->exptime))
    return {Parse::kClose, in.size(), kBadExptime, 0};
  return {Parse::kKeys, e, {}, 0};
}

}  // namespace

ParseResult parse_text(std::string_view in, size_t max_value, TextCommand* cmd) {
  // Only a line's first kMaxLineBytes are looked at: a longer one is a retrieval read in pieces
  // or refused, however much of it has come.
  const size_t nl = in.substr(0, kMaxLineBytes + 1).find('\n');
  if (nl == std::string_view::npos) {
    if (in.size() > kMaxLineBytes) return long_line(in, cmd);
    return {};
  }
  const Line l{in, nl + 1, max_value, cmd};
  std::string_view line = in.substr(0, nl);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

  reset(cmd);
  Tokens tokens(line);
  std::string_view name = tokens.next();
  const Verbs* v = nullptr;
  for (const Verbs& x : kVerbs)
    if (x.name == name) v = &x;
  if (v == nullptr) return error(kError, l.end);
  cmd->verb = v->verb;

  // Multi-key and meta commands take any number of tokens.
  switch (cmd->verb) {
    case Verb::kGat:
    case Verb::kGats:
    case Verb::kGet:
    case Verb::kGets: return parse_retrieval(l, tokens);
    case Verb::kMetaGet:
    case Verb::kMetaSet:
    case Verb::kMetaDelete:
    case Verb::kMetaArith:
    case Verb::kMetaDebug: return parse_meta_line(l, tokens);
    case Verb::kVersion:
    case Verb::kShutdown:
    case Verb::kQuit:
    case Verb::kMetaNoop: return command(l.end);  // memcached 1.6 ignores their arguments
    case Verb::kStats:
    case Verb::kLruCrawler:
      for (std::string_view t = tokens.next(); !t.empty(); t = tokens.next()) {
        if (cmd->args.size() >= 8) return error(kError, l.end);
        cmd->args.push_back(t);
      }
      return command(l.end);
    default: break;
  }
  std::string_view tok[8];
  size_t nt = 0;
  for (std::string_view t = tokens.next(); !t.empty(); t = tokens.next()) {
    if (nt == std::size(tok)) return error(kError, l.end);
    tok[nt++] = t;
  }
  // A trailing "noreply" (memcached's set_noreply_maybe), for the commands that take one.
  if (nt > 0 && tok[nt - 1] == "noreply") {
    cmd->noreply = true;
    --nt;
  }
  return parse_fixed(l, std::span<const std::string_view>(tok, nt));
}

NextKey next_key(std::string_view in) {
  NextKey r;
  const size_t b = in.find_first_not_of(' ');
  if (b == std::string_view::npos) {
    r.consumed = in.size();
    return r;
  }
  const size_t e = in.find_first_of(" \n", b);
  if (e == std::string_view::npos) {
    // No end yet: room for a key of kMaxKeyBytes and the "\r" of a line's end.
    if (in.size() - b > kMaxKeyBytes + 1) return {KeyScan::kTooLong, in.size(), {}};
    r.consumed = b;
    return r;
  }
  std::string_view key = in.substr(b, e - b);
  if (in[e] == '\n' && !key.empty() && key.back() == '\r') key.remove_suffix(1);
  if (key.empty()) return {KeyScan::kEnd, e + 1, {}};  // only a "\r" before the "\n"
  if (key.size() > kMaxKeyBytes) return {KeyScan::kTooLong, b + key.size(), {}};
  return {KeyScan::kKey, b + key.size(), key};
}

// ---- meta flags -------------------------------------------------------------------------

namespace {

// A flag's number: the digits after its letter ("T30"), nothing else.
template <class T>
bool flag_num(std::string_view f, T* v) {
  return f.size() >= 2 && parse_num(f.substr(1), v);
}

// One flag of mg or me: T sets a new expiry.
bool get_flag(std::string_view f, uint32_t now, Request* req) {
  if (f[0] != 'T') return true;
  int64_t ttl = 0;
  if (!flag_num(f, &ttl)) return false;
  req->touch = true;
  req->expire_at = to_expire_at(ttl, now);
  return true;
}

// One flag of ms: F client flags, T ttl, C compare-and-swap, M mode.
bool set_flag(std::string_view f, uint32_t now, Request* req) {
  int64_t ttl = 0;
  switch (f[0]) {
    case 'F': return flag_num(f, &req->flags);
    case 'T':
      if (!flag_num(f, &ttl)) return false;
      req->expire_at = to_expire_at(ttl, now);
      return true;
    case 'C': return flag_num(f, &req->cas);
    case 'M':
      if (f.size() != 2) return false;
      switch (f[1]) {
        case 'E':
        case 'e': req->kind = Kind::kAdd; return true;
        case 'A':
        case 'a': req->kind = Kind::kAppend; return true;
        case 'P':
        case 'p': req->kind = Kind::kPrepend; return true;
        case 'R':
        case 'r': req->kind = Kind::kReplace; return true;
        case 'S':
        case 's': req->kind = Kind::kSet; return true;
        default: return false;
      }
    default: return true;
  }
}

// One flag of md: C compare-and-swap.
bool delete_flag(std::string_view f, uint32_t, Request* req) {
  return f[0] != 'C' || flag_num(f, &req->cas);
}

// One flag of ma: N auto-create with a ttl, J initial value, D delta, C cas, M mode.
bool arith_flag(std::string_view f, uint32_t now, Request* req) {
  int64_t ttl = 0;
  switch (f[0]) {
    case 'N':
      if (!flag_num(f, &ttl)) return false;
      req->create = true;
      req->expire_at = to_expire_at(ttl, now);
      return true;
    case 'J': return flag_num(f, &req->initial);
    case 'D': return flag_num(f, &req->delta);
    case 'C': return flag_num(f, &req->cas);
    case 'M':
      if (f.size() != 2) return false;
      if (f[1] == 'I' || f[1] == 'i' || f[1] == '+') req->kind = Kind::kIncr;
      else if (f[1] == 'D' || f[1] == 'd' || f[1] == '-') req->kind = Kind::kDecr;
      else return false;
      return true;
    default: return true;
  }
}

}  // namespace

std::string_view parse_meta(const TextCommand& cmd, uint32_t now, Request* req) {
  *req = Request{};
  req->key = cmd.key();
  if (!valid_key(req->key)) return kBadChunk;
  for (std::string_view f : cmd.args) {
    if (!f.empty() && f[0] == 'b') return kBase64;
    if (!f.empty() && f[0] == 'O' && f.size() > kMaxOpaqueToken) return kOpaqueTooLong;
  }
  bool (*flag)(std::string_view, uint32_t, Request*) = nullptr;
  switch (cmd.verb) {
    case Verb::kMetaGet:
    case Verb::kMetaDebug:
      req->kind = Kind::kGet;
      flag = get_flag;
      break;
    case Verb::kMetaSet:
      req->kind = Kind::kSet;
      req->value = cmd.data;
      flag = set_flag;
      break;
    case Verb::kMetaDelete:
      req->kind = Kind::kDelete;
      flag = delete_flag;
      break;
    case Verb::kMetaArith:
      req->kind = Kind::kIncr;
      req->delta = 1;
      flag = arith_flag;
      break;
    default: return kError;
  }
  for (std::string_view f : cmd.args) {
    if (f.empty() || flag(f, now, req)) continue;
    // memcached 1.6's answers for a bad mode (proto_text.c, _meta_flag_preparse and the
    // mode switches of ms and ma).
    if (f[0] == 'M' && f.size() != 2) return kBadModeLength;
    if (f[0] == 'M') return cmd.verb == Verb::kMetaSet ? kBadSetMode : kBadArithMode;
    return kBadToken;
  }
  // memcached 1.6 (proto_text.c): ms in set or replace mode with a C is a cas; C0 there and on
  // md compares with 0, which no item has (version 0 never exists, store/engine.h), so ask
  // with an impossible version rather than unconditionally. C0 on append, prepend and ma
  // checks nothing.
  const bool has_cas = std::any_of(cmd.args.begin(), cmd.args.end(),
                                   [](std::string_view f) { return !f.empty() && f[0] == 'C'; });
  const bool cas_store = req->kind == Kind::kSet || req->kind == Kind::kReplace;
  if (has_cas && req->cas == 0 && (cas_store || req->kind == Kind::kDelete)) req->cas = UINT64_MAX;
  if (has_cas && cas_store) req->kind = Kind::kCas;
  return {};
}

}  // namespace fabkv::memcached
