// libFuzzer target for the memcached front end's parsers (docs/memcached.md, "Fuzzing"): the
// input is read as a connection's byte stream, command after command, the way
// src/memcached/listener.cc reads it (text, or binary when a command starts with 0x80), and
// every command parsed is decoded into its engine request as src/memcached/commands.cc does
// (meta flags by text.h parse_meta, binary packets by binary.h to_request) and run on a small
// cache engine. Checked: a parse consumes what it says and no more than it has, "need more"
// consumes nothing, views stay inside the input, a text command parsed whole parses the same
// from a copy cut just after it. Any crash, sanitizer report or abort() below is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "memcached/binary.h"
#include "memcached/exec.h"
#include "memcached/text.h"
#include "store/engine.h"

using namespace fabkv;
using namespace fabkv::memcached;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fabkv-fuzz-memcached: %s\n", what);
  std::abort();
}

constexpr size_t kMaxValue = 4096;

store::Engine& engine() {
  static std::unique_ptr<store::Engine> e = [] {
    store::EngineOptions o;
    o.memory_bytes = size_t{4} << 20;
    o.max_value_size = kMaxValue;
    o.huge_pages = false;
    return store::make_engine(store::EngineKind::kCache, o);
  }();
  return *e;
}

bool inside(std::string_view part, std::string_view whole) {
  return part.empty() ||
         (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

void run(const Request& r) {
  std::string scratch;
  store::Engine& e = engine();
  auto mutate = [&e](std::span<const store::Request> reqs, store::CompletionFn done) {
    e.run_batch(reqs, done);
  };
  Result res = execute_st(r, e, mutate, scratch);
  if (res.outcome == Outcome::kHit && res.value.size() > kMaxValue) fail("value above the limit");
}

// The engine request of a text or meta command with a key (the meta flags through their own
// parser, as src/memcached/commands.cc runs them); false when there is none to run.
bool text_request(const TextCommand& cmd, Request* req) {
  switch (cmd.verb) {
    case Verb::kMetaGet:
    case Verb::kMetaSet:
    case Verb::kMetaDelete:
    case Verb::kMetaArith:
    case Verb::kMetaDebug: return parse_meta(cmd, 1000, req).empty();
    default: break;
  }
  if (cmd.keys.empty() || !valid_key(cmd.keys[0])) return false;
  switch (cmd.verb) {
    case Verb::kSet: req->kind = Kind::kSet; break;
    case Verb::kAppend: req->kind = Kind::kAppend; break;
    case Verb::kPrepend: req->kind = Kind::kPrepend; break;
    case Verb::kIncr: req->kind = Kind::kIncr; break;
    case Verb::kDecr: req->kind = Kind::kDecr; break;
    case Verb::kDelete: req->kind = Kind::kDelete; break;
    case Verb::kTouch: req->kind = Kind::kTouch; break;
    case Verb::kCas: req->kind = Kind::kCas; break;
    default: req->kind = Kind::kGet; break;
  }
  req->key = cmd.keys[0];
  req->value = cmd.data;
  req->flags = cmd.flags;
  req->delta = cmd.delta;
  req->cas = cmd.cas;
  req->expire_at = to_expire_at(cmd.exptime, 1000);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  std::string_view in = all;
  TextCommand cmd, again;
  for (int guard = 0; !in.empty() && guard < 10000; ++guard) {
    if (static_cast<uint8_t>(in[0]) == binary::kRequestMagic) {
      binary::Packet pk;
      binary::ParseResult r = binary::parse(in, kMaxValue, &pk);
      if (r.consumed > in.size()) fail("binary: consumed more than given");
      if (r.status == binary::Parse::kNeedMore) {
        if (r.consumed != 0) fail("binary: need more but consumed");
        break;
      }
      if (r.status == binary::Parse::kPacket) {
        if (!inside(pk.key, in) || !inside(pk.value, in) || !inside(pk.extras, in))
          fail("binary: view outside the input");
        if (pk.key.size() > kMaxKeyBytes) fail("binary: key above 250 bytes");
        Request req;
        if (binary::to_request(pk, 1000, &req) && pk.value.size() <= kMaxValue) {
          if (!inside(req.key, in) || !inside(req.value, in))
            fail("binary: request outside the input");
          run(req);
        }
      }
      if (r.consumed == 0) fail("binary: no progress");
      in.remove_prefix(r.consumed);
      if (r.status == binary::Parse::kClose) break;
      in.remove_prefix(std::min<uint64_t>(r.swallow, in.size()));
      continue;
    }
    ParseResult r = parse_text(in, kMaxValue, &cmd);
    if (r.consumed > in.size()) fail("text: consumed more than given");
    if (r.status == Parse::kNeedMore) {
      if (r.consumed != 0) fail("text: need more but consumed");
      break;
    }
    if (r.consumed == 0) fail("text: no progress");
    if (r.status == Parse::kKeys) {  // a long retrieval line: its keys one at a time
      in.remove_prefix(r.consumed);
      for (;;) {
        const NextKey k = next_key(in);
        if (k.consumed > in.size()) fail("next_key: consumed more than given");
        if (k.status == KeyScan::kKey &&
            (!inside(k.key, in) || k.key.empty() || k.key.size() > kMaxKeyBytes))
          fail("next_key: bad key");
        in.remove_prefix(k.consumed);
        if (k.status != KeyScan::kKey) break;
      }
      continue;
    }
    if (r.status == Parse::kCommand && !cmd.keys.empty() &&
        (cmd.verb == Verb::kGet || cmd.verb == Verb::kGets || cmd.verb == Verb::kGat ||
         cmd.verb == Verb::kGats)) {
      // The connection reads a whole retrieval line's keys again with next_key: the same keys.
      std::string_view rest = in.substr(static_cast<size_t>(cmd.keys[0].data() - in.data()));
      size_t n = 0;
      for (NextKey k = next_key(rest); k.status == KeyScan::kKey; k = next_key(rest)) {
        if (n >= cmd.keys.size() || k.key != cmd.keys[n]) fail("next_key: another key");
        ++n;
        rest.remove_prefix(k.consumed);
      }
      const NextKey end = next_key(rest);
      if (n != cmd.keys.size() || end.status != KeyScan::kEnd ||
          rest.data() + end.consumed != in.data() + r.consumed)
        fail("next_key: the line ends elsewhere");
    }
    if (r.status == Parse::kCommand) {
      for (std::string_view k : cmd.keys) {
        if (!inside(k, in)) fail("text: key outside the input");
        if (k.empty() || k.size() > kMaxKeyBytes) fail("text: bad key accepted");
      }
      if (!inside(cmd.data, in) || cmd.data.size() > kMaxValue) fail("text: bad data block");
      // The same bytes, cut right after the command, parse the same.
      const std::string copy(in.substr(0, r.consumed));
      ParseResult r2 = parse_text(copy, kMaxValue, &again);
      if (r2.status != Parse::kCommand || r2.consumed != r.consumed || again.verb != cmd.verb ||
          again.keys.size() != cmd.keys.size() || again.data != cmd.data)
        fail("text: parse depends on what follows the command");
      Request req;
      if (text_request(cmd, &req)) {
        if (!inside(req.key, in) || !inside(req.value, in)) fail("text: request outside the input");
        run(req);
      }
    }
    in.remove_prefix(r.consumed);
    if (r.status == Parse::kClose) break;
    if (r.status == Parse::kSwallow) in.remove_prefix(std::min<uint64_t>(r.swallow, in.size()));
  }
  return 0;
}
