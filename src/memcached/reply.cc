#include "memcached/reply.h"

#include <charconv>

#include "memcached/binary.h"

namespace fabkv::memcached {

namespace {

void append_u64(std::string* s, uint64_t v) {
  char buf[24];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  s->append(buf, p);
}

}  // namespace

std::string_view store_reply(Outcome o) {
  switch (o) {
    case Outcome::kStored: return "STORED\r\n";
    case Outcome::kNotStored: return "NOT_STORED\r\n";
    case Outcome::kExists: return "EXISTS\r\n";
    case Outcome::kNotFound: return "NOT_FOUND\r\n";
    case Outcome::kTooLarge: return "SERVER_ERROR object too large for cache\r\n";
    case Outcome::kNoMemory: return "SERVER_ERROR out of memory storing object\r\n";
    case Outcome::kLogFailed:
      return "SERVER_ERROR the op log cannot be written (disk full?): writes refused\r\n";
    default: return "SERVER_ERROR unexpected outcome\r\n";
  }
}

namespace {

void format_text(const Call& c, const Result& r, std::string* out) {
  if (c.noreply) return;
  switch (c.verb) {
    case Verb::kGet:
    case Verb::kGets:
    case Verb::kGat:
    case Verb::kGats:
      if (r.outcome != Outcome::kHit) {
        if (r.outcome == Outcome::kTooLarge || r.outcome == Outcome::kNoMemory)
          out->append(store_reply(r.outcome));
        return;
      }
      out->append("VALUE ").append(c.req.key).push_back(' ');
      append_u64(out, r.flags);
      out->push_back(' ');
      append_u64(out, r.value.size());
      if (c.verb == Verb::kGets || c.verb == Verb::kGats) {
        out->push_back(' ');
        append_u64(out, r.cas);
      }
      out->append("\r\n").append(r.value).append("\r\n");
      return;
    case Verb::kDelete:
      out->append(r.outcome == Outcome::kDeleted ? "DELETED\r\n" : "NOT_FOUND\r\n");
      return;
    case Verb::kIncr:
    case Verb::kDecr:
      if (r.outcome == Outcome::kNumber) {
        append_u64(out, r.number);
        out->append("\r\n");
      } else if (r.outcome == Outcome::kNonNumeric) {
        out->append("CLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
      } else if (r.outcome == Outcome::kNotFound) {
        out->append("NOT_FOUND\r\n");
      } else {
        out->append("SERVER_ERROR out of memory\r\n");
      }
      return;
    case Verb::kTouch:
      out->append(r.outcome == Outcome::kTouched ? "TOUCHED\r\n" : "NOT_FOUND\r\n");
      return;
    case Verb::kFlushAll: return;  // "OK" once every partition has run it
    default: out->append(store_reply(r.outcome));
  }
}

// Meta commands (protocol.txt "Meta Commands"): the return flags asked for, in their order.
// The return flags of c.meta that `shown` names, in the command's order (memcached 1.6's
// proto_text.c: a miss or a failure still returns O and k; ms returns O, k and c; ma's number
// c, t, O and k).
void meta_flags(const Call& c, const Result& r, std::string* out,
                std::string_view shown = "Okbcfst") {
  for (std::string_view f : c.meta) {
    if (shown.find(f[0]) == std::string_view::npos) continue;
    switch (f[0]) {
      case 'O':
      case 'k':
      case 'b':
        out->push_back(' ');
        if (f[0] == 'k') out->append("k").append(c.req.key);
        else if (f[0] == 'O') out->append(f);
        break;
      case 'c':
        out->append(" c");
        append_u64(out, r.cas);
        break;
      case 'f':
        out->append(" f");
        append_u64(out, r.flags);
        break;
      case 's':
        out->append(" s");
        append_u64(out, r.value.size());
        break;
      case 't':
        if (r.expire_at == 0) {
          out->append(" t-1");
        } else {
          const uint32_t now = now_s();
          out->append(" t");
          append_u64(out, r.expire_at > now ? r.expire_at - now : 0);
        }
        break;
      default: break;
    }
  }
  out->append("\r\n");
}

void format_meta(const Call& c, const Result& r, std::string* out) {
  const bool quiet = c.noreply;
  switch (c.verb) {
    case Verb::kMetaGet: {
      if (r.outcome != Outcome::kHit) {
        if (quiet) return;
        out->append("EN");
        meta_flags(c, r, out, "Ok");
        return;
      }
      bool value = false;
      for (std::string_view f : c.meta) value |= f == "v";
      if (value) {
        out->append("VA ");
        append_u64(out, r.value.size());
        meta_flags(c, r, out);
        out->append(r.value).append("\r\n");
      } else {
        out->append("HD");  // quiet mode hides only EN (protocol.txt, "Meta Get")
        meta_flags(c, r, out);
      }
      return;
    }
    case Verb::kMetaDebug:
      if (r.outcome != Outcome::kHit) {
        out->append("EN\r\n");
        return;
      }
      out->append("ME ").append(c.req.key).append(" exp=");
      if (r.expire_at == 0) out->append("-1");
      else append_u64(out, r.expire_at > now_s() ? r.expire_at - now_s() : 0);
      out->append(" la=0 cas=");
      append_u64(out, r.cas);
      out->append(" fetch=no cls=1 size=");
      append_u64(out, r.value.size());
      out->append("\r\n");
      return;
    case Verb::kMetaArith: {
      if (r.outcome == Outcome::kNumber) {
        bool value = false;
        for (std::string_view f : c.meta) value |= f == "v";
        std::string num = std::to_string(r.number);
        Result shown = r;
        shown.value = num;
        if (quiet) return;  // memcached 1.6 hides ma's number in quiet mode, VA included
        if (value) {
          out->append("VA ");
          append_u64(out, num.size());
          meta_flags(c, shown, out, "ctOkb");
          out->append(num).append("\r\n");
        } else {
          out->append("HD");
          meta_flags(c, shown, out, "ctOkb");
        }
        return;
      }
      if (r.outcome == Outcome::kNonNumeric) {
        out->append("CLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
        return;
      }
      out->append(r.outcome == Outcome::kNotFound ? "NF"
                  : r.outcome == Outcome::kExists ? "EX"
                                                  : "NS");
      meta_flags(c, r, out, "Ok");
      return;
    }
    default: {  // ms, md
      const bool ok = r.outcome == Outcome::kStored || r.outcome == Outcome::kDeleted ||
                      r.outcome == Outcome::kTouched;
      const std::string_view shown = c.verb == Verb::kMetaSet ? "Okbc" : "Okb";
      if (ok) {
        if (quiet) return;
        out->append("HD");
        meta_flags(c, r, out, shown);
        return;
      }
      switch (r.outcome) {
        case Outcome::kNotStored: out->append("NS"); break;
        case Outcome::kExists: out->append("EX"); break;
        case Outcome::kNotFound: out->append("NF"); break;
        default: out->append(store_reply(r.outcome)); return;
      }
      meta_flags(c, r, out, shown);
    }
  }
}

void put_be32(char* p, uint32_t v) {
  p[0] = static_cast<char>(v >> 24);
  p[1] = static_cast<char>(v >> 16);
  p[2] = static_cast<char>(v >> 8);
  p[3] = static_cast<char>(v);
}

void format_binary(const Call& c, const Result& r, std::string* out) {
  using namespace binary;
  const uint8_t op = c.opcode;
  auto fail = [&](uint16_t st) {
    append_response(out, op, st, c.opaque, 0, {}, {}, error_text(st));
  };
  switch (op) {
    case kGet:
    case kGetQ:
    case kGetK:
    case kGetKQ:
    case kGat:
    case kGatQ:
    case kGatK:
    case kGatKQ:
    case kTouch: {
      if (r.outcome != Outcome::kHit && r.outcome != Outcome::kTouched) {
        if (c.noreply) return;  // GETQ/GETKQ: misses say nothing
        if (r.outcome == Outcome::kTooLarge || r.outcome == Outcome::kNoMemory) fail(kOutOfMemory);
        else if (op == kGetK || op == kGatK)
          append_response(out, op, kKeyNotFound, c.opaque, 0, {}, c.req.key, {});
        else fail(kKeyNotFound);
        return;
      }
      char flags[4];
      put_be32(flags, r.flags);
      const bool with_key = op == kGetK || op == kGetKQ || op == kGatK || op == kGatKQ;
      append_response(out, op, kSuccess, c.opaque, r.cas, std::string_view(flags, 4),
                      with_key ? c.req.key : std::string_view(),
                      op == kTouch ? std::string_view() : r.value);
      return;
    }
    case kIncrement:
    case kIncrementQ:
    case kDecrement:
    case kDecrementQ: {
      if (r.outcome == Outcome::kNumber) {
        if (c.noreply) return;
        char v[8];
        put_be32(v, static_cast<uint32_t>(r.number >> 32));
        put_be32(v + 4, static_cast<uint32_t>(r.number));
        append_response(out, op, kSuccess, c.opaque, r.cas, {}, {}, std::string_view(v, 8));
        return;
      }
      fail(r.outcome == Outcome::kNotFound     ? kKeyNotFound
           : r.outcome == Outcome::kExists     ? kKeyExists
           : r.outcome == Outcome::kNonNumeric ? kNonNumeric
                                               : kOutOfMemory);
      return;
    }
    case kDelete:
    case kDeleteQ:
      if (r.outcome == Outcome::kDeleted) {
        if (!c.noreply) append_response(out, op, kSuccess, c.opaque, 0, {}, {}, {});
        return;
      }
      fail(r.outcome == Outcome::kExists ? kKeyExists : kKeyNotFound);
      return;
    case kFlush:
    case kFlushQ: return;  // answered once every partition has run it
    default: {             // storage
      if (r.outcome == Outcome::kStored) {
        if (!c.noreply) append_response(out, op, kSuccess, c.opaque, r.cas, {}, {}, {});
        return;
      }
      uint16_t st = kNotStored;
      switch (r.outcome) {
        case Outcome::kExists: st = kKeyExists; break;
        case Outcome::kNotFound: st = kKeyNotFound; break;
        case Outcome::kTooLarge: st = kTooBig; break;
        case Outcome::kNoMemory: st = kOutOfMemory; break;
        case Outcome::kNotStored:
          // add of a present key: "exists"; replace of a missing one: "not found"
          st = (op == kAdd || op == kAddQ)           ? kKeyExists
               : (op == kReplace || op == kReplaceQ) ? kKeyNotFound
                                                     : kNotStored;
          break;
        default: break;
      }
      fail(st);
    }
  }
}

}  // namespace

void format(const Call& c, const Result& r, std::string* out) {
  // A command refused for the op log (docs/durability.md, "A full disk"): memcached's
  // SERVER_ERROR, which text noreply hides (as memcached 1.6 does) and quiet meta and binary
  // commands show.
  if (r.outcome == Outcome::kLogFailed) {
    if (c.style == Style::kText && c.noreply) return;
    if (c.style == Style::kBinary)
      binary::append_response(out, c.opcode, binary::kInternalError, c.opaque, 0, {}, {},
                              binary::error_text(binary::kInternalError));
    else out->append(store_reply(r.outcome));
    return;
  }
  switch (c.style) {
    case Style::kText: format_text(c, r, out); break;
    case Style::kMeta: format_meta(c, r, out); break;
    case Style::kBinary: format_binary(c, r, out); break;
  }
}

}  // namespace fabkv::memcached
