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

Result stored(const Put& p) {
  Result r;
  switch (p.status) {
    case store::Status::kOk: r.outcome = Outcome::kStored; break;
    case store::Status::kTooLarge:
    case store::Status::kInvalidKey: r.outcome = Outcome::kTooLarge; break;
    case store::Status::kNoSpace: r.outcome = Outcome::kNoMemory; break;
    case store::Status::kVersionMismatch: r.outcome = Outcome::kExists; break;
    case store::Status::kNotFound: r.outcome = Outcome::kNotFound; break;
  }
  r.cas = p.version;
  return r;
}

// memcached's incr/decr read the value as a decimal number (digits only; memcached also
// accepts trailing spaces left by an earlier shorter decr).
bool parse_number(std::string_view v, uint64_t* n) {
  while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
  if (v.empty() || v.size() > 20) return false;
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

Result execute_st(const Request& r, store::Engine& e, Mutate mutate, std::string& scratch) {
  Result out;
  if (r.kind == Kind::kFlush) {
    out.outcome = e.clear() ? Outcome::kOk : Outcome::kNotSupported;
    return out;
  }
  const store::KeyHash h = store::hash_key(r.key);
  if (r.kind == Kind::kSet)
    return stored(put(mutate, h, r.key, r.value, r.flags, r.expire_at, r.cas));
  if (r.kind == Kind::kDelete && r.cas == 0) {
    out.outcome = del(mutate, h, r.key) == store::Status::kOk ? Outcome::kDeleted : Outcome::kNotFound;
    return out;
  }

  store::ItemView item;
  const store::Status got = e.get(h, r.key, item);
  if (got == store::Status::kTooLarge || got == store::Status::kInvalidKey) {
    out.outcome = Outcome::kNotFound;  // keys are checked before they get here
    return out;
  }
  const bool hit = got == store::Status::kOk;
  switch (r.kind) {
    case Kind::kGet:
    case Kind::kGat:
      if (!hit) return out;
      if (r.kind == Kind::kGat || r.touch) {
        // A new expiry is a new PUT of the same value (the engine keeps expiry with the item).
        scratch.assign(item.value);
        const Put p = put(mutate, h, r.key, scratch, item.flags, r.expire_at, 0);
        if (p.status != store::Status::kOk) return stored(p);
        out.outcome = Outcome::kHit;
        out.value = scratch;
        out.flags = item.flags;
        out.cas = p.version;
        out.expire_at = r.expire_at;
        return out;
      }
      out.outcome = Outcome::kHit;
      out.value = item.value;
      out.flags = item.flags;
      out.cas = item.version;
      out.expire_at = item.expire_at;
      return out;
    case Kind::kAdd:
      if (hit) {
        out.outcome = Outcome::kNotStored;
        return out;
      }
      return stored(put(mutate, h, r.key, r.value, r.flags, r.expire_at, 0));
    case Kind::kReplace:
      if (!hit) {
        out.outcome = Outcome::kNotStored;
        return out;
      }
      return stored(put(mutate, h, r.key, r.value, r.flags, r.expire_at, 0));
    case Kind::kCas:
      if (!hit) return out;  // kNotFound
      if (item.version != r.cas) {
        out.outcome = Outcome::kExists;
        return out;
      }
      return stored(put(mutate, h, r.key, r.value, r.flags, r.expire_at, r.cas));
    case Kind::kAppend:
    case Kind::kPrepend: {
      if (!hit) {
        out.outcome = Outcome::kNotStored;
        return out;
      }
      if (r.cas != 0 && item.version != r.cas) {
        out.outcome = Outcome::kExists;
        return out;
      }
      if (item.value.size() + r.value.size() > e.max_value_size()) {
        out.outcome = Outcome::kTooLarge;
        return out;
      }
      // Copied out first: the put below may reuse the old item's memory.
      if (r.kind == Kind::kAppend) {
        scratch.assign(item.value);
        scratch.append(r.value);
      } else {
        scratch.assign(r.value);
        scratch.append(item.value);
      }
      return stored(put(mutate, h, r.key, scratch, item.flags, item.expire_at, item.version));
    }
    case Kind::kDelete:  // with a cas (meta md C, binary DELETE with cas)
      if (!hit) return out;
      if (item.version != r.cas) {
        out.outcome = Outcome::kExists;
        return out;
      }
      out.outcome = del(mutate, h, r.key) == store::Status::kOk ? Outcome::kDeleted : Outcome::kNotFound;
      return out;
    case Kind::kIncr:
    case Kind::kDecr: {
      if (!hit) {
        if (!r.create) return out;
        scratch = std::to_string(r.initial);
        const Put p = put(mutate, h, r.key, scratch, r.flags, r.expire_at, 0);
        if (p.status != store::Status::kOk) return stored(p);
        out.outcome = Outcome::kNumber;
        out.number = r.initial;
        out.cas = p.version;
        return out;
      }
      if (r.cas != 0 && item.version != r.cas) {
        out.outcome = Outcome::kExists;
        return out;
      }
      uint64_t n = 0;
      if (!parse_number(item.value, &n)) {
        out.outcome = Outcome::kNonNumeric;
        return out;
      }
      // incr wraps at 2^64; decr stops at 0 (protocol.txt).
      n = r.kind == Kind::kIncr ? n + r.delta : (r.delta > n ? 0 : n - r.delta);
      scratch = std::to_string(n);
      const Put p = put(mutate, h, r.key, scratch, item.flags, item.expire_at, item.version);
      if (p.status != store::Status::kOk) return stored(p);
      out.outcome = Outcome::kNumber;
      out.number = n;
      out.cas = p.version;
      return out;
    }
    case Kind::kTouch: {
      if (!hit) return out;
      scratch.assign(item.value);
      const Put p = put(mutate, h, r.key, scratch, item.flags, r.expire_at, 0);
      if (p.status != store::Status::kOk) return stored(p);
      out.outcome = Outcome::kTouched;
      out.cas = p.version;
      return out;
    }
    case Kind::kSet:
    case Kind::kFlush:
      break;  // handled above
  }
  return out;
}

}  // namespace fabkv::memcached
