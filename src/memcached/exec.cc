#include "memcached/exec.h"

#include <charconv>

namespace fabkv::memcached {

namespace {

struct Put {
  store::Status status = store::Status::kOk;
  uint64_t version = 0;
};

Put put(Mutate mutate, store::KeyHash h, std::string_view key, std::string_view value,
        uint32_t flags, uint32_t expire_at, uint64_t expected) {
  store::Request req;
  req.op = store::Op::kPut;
  req.hash = h;
  req.key = key;
  req.value = value;
  req.put.flags = flags;
  req.put.expire_at = expire_at;
  req.put.expected_version = expected;
  Put out;
  mutate(std::span<const store::Request>(&req, 1), [&](size_t, const store::Response& r) {
    out.status = r.status;
    out.version = r.version;
  });
  return out;
}

store::Status del(Mutate mutate, store::KeyHash h, std::string_view key) {
  store::Request req;
  req.op = store::Op::kDel;
  req.hash = h;
  req.key = key;
  store::Status st = store::Status::kNotFound;
  mutate(std::span<const store::Request>(&req, 1),
         [&](size_t, const store::Response& r) { st = r.status; });
  return st;
}

Outcome deleted(store::Status st) {
  return st == store::Status::kOk          ? Outcome::kDeleted
         : st == store::Status::kLogFailed ? Outcome::kLogFailed
                                           : Outcome::kNotFound;
}

Result stored(const Put& p) {
  Result r;
  switch (p.status) {
    case store::Status::kOk: r.outcome = Outcome::kStored; break;
    case store::Status::kTooLarge:
    case store::Status::kInvalidKey: r.outcome = Outcome::kTooLarge; break;
    case store::Status::kNoSpace: r.outcome = Outcome::kNoMemory; break;
    case store::Status::kVersionMismatch: r.outcome = Outcome::kExists; break;
    case store::Status::kNotFound: r.outcome = Outcome::kNotFound; break;
    case store::Status::kLogFailed: r.outcome = Outcome::kLogFailed; break;
  }
  r.cas = p.version;
  return r;
}

// memcached's incr/decr read the value as a decimal number (digits only; memcached also
// accepts trailing spaces left by an earlier shorter decr). Any number of digits, as long as
// the number is below 2^64: memcached reads 000000000000000000001 as 1.
bool parse_number(std::string_view v, uint64_t* n) {
  while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
  if (v.empty()) return false;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), *n);
  return ec == std::errc() && p == v.data() + v.size();
}

}  // namespace

uint32_t to_expire_at(int64_t exptime, uint32_t now) {
  if (exptime == 0) return 0;
  if (exptime < 0) return 1;  // in the past: expired at once
  if (exptime > kMaxRelativeExptime)
    return exptime > int64_t{UINT32_MAX} ? UINT32_MAX : static_cast<uint32_t>(exptime);
  const uint64_t at = uint64_t{now} + static_cast<uint64_t>(exptime);
  return at > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(at);
}

namespace {

// One command's key, read once: each step below decides from the item it found and writes
// back through `mutate`, on the owner thread, so nothing runs between the read and the write.
struct Target {
  const Request& r;
  Mutate mutate;
  store::KeyHash h;
  std::string& scratch;
  store::ItemView item;
  bool hit = false;

  Put put(std::string_view value, uint32_t flags, uint32_t expire_at, uint64_t expected) const {
    return memcached::put(mutate, h, r.key, value, flags, expire_at, expected);
  }
  // touch, gat, mg T: a new expiry and nothing else (store::Engine::touch), as memcached
  // changes only the expiry: the version stays, and the cache's log gets no new copy of the
  // item, which would evict others. `after` is the item as it is then.
  store::Status retouch(uint32_t expire_at, store::ItemView* after) const {
    store::Request req;
    req.op = store::Op::kTouch;
    req.hash = h;
    req.key = r.key;
    req.put.expire_at = expire_at;
    store::Status st = store::Status::kNotFound;
    mutate(std::span<const store::Request>(&req, 1), [&](size_t, const store::Response& x) {
      st = x.status;
      *after = {x.value, x.version, x.expire_at, x.flags};
    });
    return st;
  }
};

Result outcome(Outcome o) {
  Result out;
  out.outcome = o;
  return out;
}

// get, gat, mg (T: a new expiry, Target::retouch).
Result retrieve(const Target& t) {
  if (!t.hit) return {};
  Result out = outcome(Outcome::kHit);
  out.flags = t.item.flags;
  if (t.r.kind == Kind::kGat || t.r.touch) {
    store::ItemView after;
    if (const store::Status st = t.retouch(t.r.expire_at, &after); st != store::Status::kOk)
      return outcome(st == store::Status::kLogFailed ? Outcome::kLogFailed : Outcome::kNotFound);
    out.value = after.value;
    out.cas = after.version;
    out.expire_at = after.expire_at;
    return out;
  }
  out.value = t.item.value;
  out.cas = t.item.version;
  out.expire_at = t.item.expire_at;
  return out;
}

// add, replace, cas: a store that depends on what is there.
Result store_if(const Target& t) {
  const Request& r = t.r;
  if (r.kind == Kind::kAdd)
    return t.hit ? outcome(Outcome::kNotStored) : stored(t.put(r.value, r.flags, r.expire_at, 0));
  if (r.kind == Kind::kReplace)
    return t.hit ? stored(t.put(r.value, r.flags, r.expire_at, 0)) : outcome(Outcome::kNotStored);
  if (!t.hit) return {};  // kNotFound
  if (t.item.version != r.cas) return outcome(Outcome::kExists);
  return stored(t.put(r.value, r.flags, r.expire_at, r.cas));
}

// append, prepend (cas: only on that version).
Result concat(const Target& t, size_t max_value) {
  const Request& r = t.r;
  if (!t.hit) return outcome(Outcome::kNotStored);
  if (r.cas != 0 && t.item.version != r.cas) return outcome(Outcome::kExists);
  if (t.item.value.size() + r.value.size() > max_value) return outcome(Outcome::kTooLarge);
  // Copied out first: the put below may reuse the old item's memory.
  if (r.kind == Kind::kAppend) {
    t.scratch.assign(t.item.value);
    t.scratch.append(r.value);
  } else {
    t.scratch.assign(r.value);
    t.scratch.append(t.item.value);
  }
  return stored(t.put(t.scratch, t.item.flags, t.item.expire_at, t.item.version));
}

// A delete with a cas (meta md C, binary DELETE with cas).
Result delete_if(const Target& t) {
  if (!t.hit) return {};
  if (t.item.version != t.r.cas) return outcome(Outcome::kExists);
  return outcome(deleted(del(t.mutate, t.h, t.r.key)));
}

// incr, decr: a number stored as decimal text; a miss may create it (binary, meta ma N).
Result arith(const Target& t) {
  const Request& r = t.r;
  Result out = outcome(Outcome::kNumber);
  if (!t.hit) {
    if (!r.create) return {};
    t.scratch = std::to_string(r.initial);
    const Put p = t.put(t.scratch, r.flags, r.expire_at, 0);
    if (p.status != store::Status::kOk) return stored(p);
    out.number = r.initial;
    out.cas = p.version;
    return out;
  }
  if (r.cas != 0 && t.item.version != r.cas) return outcome(Outcome::kExists);
  uint64_t n = 0;
  if (!parse_number(t.item.value, &n)) return outcome(Outcome::kNonNumeric);
  // incr wraps at 2^64; decr stops at 0 (protocol.txt).
  n = r.kind == Kind::kIncr ? n + r.delta : (r.delta > n ? 0 : n - r.delta);
  t.scratch = std::to_string(n);
  const Put p = t.put(t.scratch, t.item.flags, t.item.expire_at, t.item.version);
  if (p.status != store::Status::kOk) return stored(p);
  out.number = n;
  out.cas = p.version;
  return out;
}

Result touch_item(const Target& t) {
  if (!t.hit) return {};
  store::ItemView after;
  if (const store::Status st = t.retouch(t.r.expire_at, &after); st != store::Status::kOk)
    return outcome(st == store::Status::kLogFailed ? Outcome::kLogFailed : Outcome::kNotFound);
  Result out = outcome(Outcome::kTouched);
  out.cas = after.version;
  return out;
}

}  // namespace

Result execute_st(const Request& r, store::Engine& e, Mutate mutate, std::string& scratch) {
  if (r.kind == Kind::kFlush) return outcome(e.clear() ? Outcome::kOk : Outcome::kNotSupported);
  const store::KeyHash h = store::hash_key(r.key);
  if (r.kind == Kind::kSet)
    return stored(put(mutate, h, r.key, r.value, r.flags, r.expire_at, r.cas));
  if (r.kind == Kind::kDelete && r.cas == 0) return outcome(deleted(del(mutate, h, r.key)));
  Target t{r, mutate, h, scratch, {}};
  const store::Status got = e.get(h, r.key, t.item);
  if (got == store::Status::kTooLarge || got == store::Status::kInvalidKey)
    return {};  // kNotFound: keys are checked before they get here
  t.hit = got == store::Status::kOk;
  switch (r.kind) {
    case Kind::kGet:
    case Kind::kGat: return retrieve(t);
    case Kind::kAdd:
    case Kind::kReplace:
    case Kind::kCas: return store_if(t);
    case Kind::kAppend:
    case Kind::kPrepend: return concat(t, e.max_value_size());
    case Kind::kDelete: return delete_if(t);
    case Kind::kIncr:
    case Kind::kDecr: return arith(t);
    case Kind::kTouch: return touch_item(t);
    case Kind::kSet:
    case Kind::kFlush: break;  // handled above
  }
  return {};
}

}  // namespace fabkv::memcached
