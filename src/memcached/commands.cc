// Command execution (src/memcached/shard.h): the text, meta and binary commands a connection
// sends, parsed by text.cc and binary.cc, become Calls for their keys' owners (forward.cc);
// the rest (flush_all, stats, version, ...) are answered here.
#include <fmt/format.h>

#include "memcached/shard.h"

namespace fabkv::memcached {

Result run_on_owner(Service::Shard& s, server::Worker& w, const Call& c, std::string& scratch,
                    bool count) {
  auto through_worker = [&w](std::span<const store::Request> reqs, store::CompletionFn done) {
    w.execute_st(reqs, done);
  };
  Mutate mutate = through_worker;  // a reference: the lambda must outlive it
  Result r;
  if (c.req.kind == Kind::kFlush && c.req.expire_at != 0 && c.req.expire_at > now_s()) {
    w.clear_at_st(c.req.expire_at);  // the worker runs it then, and logs it (--oplog)
    r.outcome = Outcome::kOk;
  } else if (c.req.kind == Kind::kFlush) {
    r.outcome = w.clear_st() ? Outcome::kOk : Outcome::kNotSupported;  // logged (--oplog)
  } else if (!w.readable_st(c.req.key)) {
    r.outcome = Outcome::kLogFailed;  // its last write waits for a failing log (execute_st)
  } else {
    r = execute_st(c.req, w.engine(), mutate, scratch);
  }
  if (count) count_result(s, c, r);
  return r;
}

void count_result(Service::Shard& s, const Call& c, const Result& r) {
  const bool hit = r.outcome != Outcome::kNotFound && r.outcome != Outcome::kNotStored;
  switch (c.req.kind) {
    case Kind::kGet:
      s.count(kCmdGet);
      s.count(r.outcome == Outcome::kHit ? kGetHits : kGetMisses);
      if (c.req.touch) s.count(kCmdTouch);
      break;
    case Kind::kGat:
      s.count(kCmdGet);
      s.count(kCmdTouch);
      s.count(r.outcome == Outcome::kHit ? kGetHits : kGetMisses);
      s.count(r.outcome == Outcome::kHit ? kTouchHits : kTouchMisses);
      break;
    case Kind::kTouch:
      s.count(kCmdTouch);
      s.count(hit ? kTouchHits : kTouchMisses);
      break;
    case Kind::kDelete:
      s.count(r.outcome == Outcome::kDeleted ? kDeleteHits : kDeleteMisses);
      break;
    case Kind::kIncr: s.count(r.outcome == Outcome::kNotFound ? kIncrMisses : kIncrHits); break;
    case Kind::kDecr: s.count(r.outcome == Outcome::kNotFound ? kDecrMisses : kDecrHits); break;
    case Kind::kCas:
      s.count(kCmdSet);
      s.count(r.outcome == Outcome::kStored   ? kCasHits
              : r.outcome == Outcome::kExists ? kCasBadval
                                              : kCasMisses);
      break;
    case Kind::kFlush: s.count(kCmdFlush); break;
    default: s.count(kCmdSet); break;
  }
}

// ---- text and meta commands -------------------------------------------------------------

bool Connections::refuse(Conn& c, std::string_view reply) {
  s_.count(kClientErrors);
  emit(c, reply);
  return true;
}

bool Connections::text_command(Conn& c, std::string_view in, size_t* used) {
  const ParseResult pr = parse_text(in, o_.max_value, &c.cmd);
  *used = pr.consumed;
  if (pr.status == Parse::kKeys) {  // a retrieval line too long to hold: keys in pieces
    start_retrieval(c, c.cmd);
    return true;
  }
  if (pr.status != Parse::kCommand) return text_unparsed(c, pr);
  switch (c.cmd.verb) {
    case Verb::kGet:
    case Verb::kGets:
    case Verb::kGat:
    case Verb::kGats:
      // Checked whole by the parser; its keys are now read one by one from the input, each as
      // its answer has room (listener.cc retrieval_step).
      *used = static_cast<size_t>(c.cmd.keys.front().data() - in.data());
      start_retrieval(c, c.cmd);
      return true;
    case Verb::kMetaGet:
    case Verb::kMetaSet:
    case Verb::kMetaDelete:
    case Verb::kMetaArith:
    case Verb::kMetaDebug: return meta_command(c, c.cmd);
    case Verb::kFlushAll:
    case Verb::kStats:
    case Verb::kLruCrawler:
    case Verb::kVersion:
    case Verb::kVerbosity:
    case Verb::kQuit:
    case Verb::kShutdown:
    case Verb::kMetaNoop: return text_other(c, c.cmd);
    default: return text_keyed(c, c.cmd);
  }
}

namespace {

constexpr std::string_view kBadDataChunk = "CLIENT_ERROR bad data chunk\r\n";

bool stores(Verb v) {
  return v == Verb::kSet || v == Verb::kAdd || v == Verb::kReplace || v == Verb::kAppend ||
         v == Verb::kPrepend || v == Verb::kCas;
}

}  // namespace

// A line that is not a command to run: wait for more, answer an error, or close.
bool Connections::text_unparsed(Conn& c, const ParseResult& pr) {
  // memcached 1.6 reads a storage command's noreply first, and then says nothing of a data
  // block too large or not ending in "\r\n" either.
  const bool silent = c.cmd.noreply && stores(c.cmd.verb) &&
                      (pr.status == Parse::kSwallow || pr.reply == kBadDataChunk);
  switch (pr.status) {
    case Parse::kNeedMore: return false;
    case Parse::kError:
      if (silent) s_.count(kClientErrors);
      return silent || refuse(c, pr.reply);
    case Parse::kClose:
      refuse(c, pr.reply);
      c.closing = true;
      return false;
    case Parse::kSwallow: {
      c.swallow = pr.swallow;
      if (!silent) emit(c, pr.reply);
      // memcached: a set (and an ms in any mode) too large also drops the key's old value, so
      // that a reader never takes the stale one for the value just refused.
      if ((c.cmd.verb == Verb::kSet || c.cmd.verb == Verb::kMetaSet) && valid_key(c.cmd.key())) {
        Call call;
        call.req.kind = Kind::kDelete;
        call.req.key = c.cmd.key();
        call.verb = Verb::kDelete;
        call.noreply = true;
        submit(c, call);
      }
      return true;
    }
    case Parse::kCommand:
    case Parse::kKeys: break;  // text_command's
  }
  return true;
}

// get, gets, gat, gats: the line's keys are answered one by one from here on (Conn::get).
void Connections::start_retrieval(Conn& c, const TextCommand& cmd) {
  const bool gat = cmd.verb == Verb::kGat || cmd.verb == Verb::kGats;
  c.get = Retrieval{};
  c.get.active = true;
  c.get.verb = cmd.verb;
  c.get.expire_at = gat ? to_expire_at(cmd.exptime, now_s()) : 0;
}

// The text commands on one key: stores, delete, incr, decr, touch.
bool Connections::text_keyed(Conn& c, const TextCommand& cmd) {
  const uint32_t now = now_s();
  Call call;
  call.verb = cmd.verb;
  call.noreply = cmd.noreply;
  call.req.key = cmd.key();
  switch (cmd.verb) {
    case Verb::kSet:
    case Verb::kAdd:
    case Verb::kReplace:
    case Verb::kAppend:
    case Verb::kPrepend:
    case Verb::kCas:
      call.req.kind = cmd.verb == Verb::kSet       ? Kind::kSet
                      : cmd.verb == Verb::kAdd     ? Kind::kAdd
                      : cmd.verb == Verb::kReplace ? Kind::kReplace
                      : cmd.verb == Verb::kAppend  ? Kind::kAppend
                      : cmd.verb == Verb::kPrepend ? Kind::kPrepend
                                                   : Kind::kCas;
      call.req.value = cmd.data;
      call.req.flags = cmd.flags;
      call.req.expire_at = to_expire_at(cmd.exptime, now);
      call.req.cas = cmd.verb == Verb::kCas ? cmd.cas : 0;
      if (cmd.verb == Verb::kCas && cmd.cas == 0) {
        // version 0 never exists (engine.h): memcached answers EXISTS or NOT_FOUND; ask the
        // owner with an impossible version instead of an unconditional set.
        call.req.cas = UINT64_MAX;
      }
      break;
    case Verb::kDelete: call.req.kind = Kind::kDelete; break;
    case Verb::kIncr:
    case Verb::kDecr:
      call.req.kind = cmd.verb == Verb::kIncr ? Kind::kIncr : Kind::kDecr;
      call.req.delta = cmd.delta;
      break;
    case Verb::kTouch:
      call.req.kind = Kind::kTouch;
      call.req.expire_at = to_expire_at(cmd.exptime, now);
      break;
    default: return refuse(c, "ERROR\r\n");
  }
  submit(c, call);
  return true;
}

// The text commands on no key: flush_all, stats, version, verbosity, quit, shutdown, mn.
bool Connections::text_other(Conn& c, const TextCommand& cmd) {
  switch (cmd.verb) {
    case Verb::kFlushAll: {
      Call call;
      call.verb = cmd.verb;
      call.noreply = cmd.noreply;
      call.req.kind = Kind::kFlush;
      call.req.expire_at = cmd.delay > 0 ? to_expire_at(cmd.delay, now_s()) : 0;
      if (!flush_all(c, call)) {
        if (cmd.noreply) return true;
        if (log_failing()) return refuse(c, store_reply(Outcome::kLogFailed));
        return refuse(c, "SERVER_ERROR flush_all needs the cache or store engine\r\n");
      }
      if (!cmd.noreply) emit(c, "OK\r\n");
      return true;
    }
    case Verb::kStats: stats_text(c, cmd.args); return true;
    case Verb::kLruCrawler: return lru_crawler(c, cmd.args);
    case Verb::kVersion: emit(c, fmt::format("VERSION {}\r\n", kVersionString)); return true;
    case Verb::kVerbosity:
      if (!cmd.noreply) emit(c, "OK\r\n");
      return true;
    case Verb::kQuit: c.closing = true; return false;
    case Verb::kShutdown: return refuse(c, "ERROR: shutdown not enabled\r\n");
    case Verb::kMetaNoop: emit(c, "MN\r\n"); return true;
    default: return refuse(c, "ERROR\r\n");
  }
}

// mg, ms, md, ma, me: the flags decoded by their parser (text.h parse_meta); the Call keeps
// them for the answer's return flags.
bool Connections::meta_command(Conn& c, const TextCommand& cmd) {
  Call call;
  call.style = Style::kMeta;
  call.verb = cmd.verb;
  call.noreply = cmd.noreply;
  call.meta = cmd.args;
  if (std::string_view why = parse_meta(cmd, now_s(), &call.req); !why.empty())
    return refuse(c, why);
  submit(c, call);
  return true;
}

// Empties every partition (now, or at call.req.expire_at) where the engine can: false, and
// nothing done, where it cannot.
bool Connections::flush_all(Conn& c, Call& call) {
  if (!store::engine_kind_from_string(w_.engine().name()) || log_failing()) return false;
  broadcast_flush(c, call);
  return true;
}

// ---- binary commands --------------------------------------------------------------------

bool Connections::binary_command(Conn& c, std::string_view in, size_t* used) {
  binary::Packet pk;
  const binary::ParseResult pr = binary::parse(in, o_.max_value, &pk);
  *used = pr.consumed;
  switch (pr.status) {
    case binary::Parse::kNeedMore: return false;
    case binary::Parse::kClose: c.closing = true; return false;
    case binary::Parse::kError: {
      s_.count(kClientErrors);
      c.swallow = pr.swallow;
      std::string out;
      binary::append_response(&out, pk.h.opcode, pr.error, pk.h.opaque, 0, {}, {},
                              binary::error_text(pr.error));
      emit(c, out);
      return true;
    }
    case binary::Parse::kPacket: break;
  }
  return binary_packet(c, pk);
}

bool Connections::binary_packet(Conn& c, const binary::Packet& pk) {
  using namespace binary;
  const Header& h = pk.h;
  Call call;
  call.style = Style::kBinary;
  call.opcode = h.opcode;
  call.opaque = h.opaque;
  call.noreply = quiet(h.opcode);
  auto invalid = [&] {
    std::string out;
    append_response(&out, h.opcode, kInvalid, h.opaque, 0, {}, {}, error_text(kInvalid));
    return refuse(c, out);
  };
  auto simple = [&](std::string_view value = {}) {
    std::string out;
    append_response(&out, h.opcode, kSuccess, h.opaque, 0, {}, {}, value);
    emit(c, out);
    return true;
  };
  switch (h.opcode) {
    case kQuit:
      simple();
      c.closing = true;
      return false;
    case kQuitQ: c.closing = true; return false;
    case kNoop:
    case kVerbosity: return simple();
    case kVersion: return simple(kVersionString);
    case kFlush:
    case kFlushQ:
      if (!to_request(pk, now_s(), &call.req)) return invalid();
      if (!flush_all(c, call)) {
        if (!log_failing()) return invalid();
        std::string out;
        append_response(&out, h.opcode, kInternalError, h.opaque, 0, {}, {},
                        error_text(kInternalError));
        return refuse(c, out);
      }
      if (h.opcode == kFlush) simple();
      return true;
    case kStat: stats_binary(c, call); return true;
    default:
      if (!to_request(pk, now_s(), &call.req)) return invalid();
      submit(c, call);
      return true;
  }
}

// ---- stats ------------------------------------------------------------------------------

std::vector<std::pair<std::string, std::string>> Connections::stat_lines() {
  nlohmann::json j = svc_.stats();
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& [k, v] : j.items())
    out.emplace_back(k, v.is_string() ? v.get<std::string>() : v.dump());
  return out;
}

void Connections::stats_text(Conn& c, std::span<const std::string_view> args) {
  if (!args.empty()) {
    if (args[0] == "reset") {
      emit(c, "RESET\r\n");
      return;
    }
    if (args[0] == "cachedump") {
      cachedump(c, args);
      return;
    }
    if (args.size() == 1 && stats_group(c, args[0])) return;
    // conns: nothing to say in memcached's terms; anything else (stats noreply included) is
    // not a stats group: memcached's ERROR.
    if (args[0] == "conns") {
      emit(c, "END\r\n");
      return;
    }
    s_.count(kClientErrors);
    emit(c, "ERROR\r\n");
    return;
  }
  std::string out;
  for (auto& [k, v] : stat_lines())
    out.append("STAT ").append(k).append(" ").append(v).append("\r\n");
  out.append("END\r\n");
  emit(c, out);
}

void Connections::stats_binary(Conn& c, const Call& call) {
  std::string out;
  for (auto& [k, v] : stat_lines())
    binary::append_response(&out, binary::kStat, binary::kSuccess, call.opaque, 0, {}, k, v);
  binary::append_response(&out, binary::kStat, binary::kSuccess, call.opaque, 0, {}, {}, {});
  emit(c, out);
}

}  // namespace fabkv::memcached
