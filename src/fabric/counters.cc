#include "fabric/counters.h"

#include <nlohmann/json.hpp>

namespace fabkv::fabric {

const char* to_string(Verb v) {
  switch (v) {
    case Verb::kRead: return "read";
    case Verb::kWrite: return "write";
    case Verb::kSend: return "send";
    case Verb::kRecv: return "recv";
    case Verb::kAtomic: return "atomic";
  }
  return "?";
}

#define FABKV_VERB_FIELDS(X) \
  X(posted)                  \
  X(bytes) X(signaled) X(inlined) X(with_imm) X(completed) X(errors) X(inbound) X(inbound_bytes)

VerbStats& VerbStats::operator+=(const VerbStats& o) {
#define X(f) f += o.f;
  FABKV_VERB_FIELDS(X)
#undef X
  return *this;
}

VerbStats& VerbStats::operator-=(const VerbStats& o) {
#define X(f) f -= o.f;
  FABKV_VERB_FIELDS(X)
#undef X
  return *this;
}

VerbSnapshot VerbSnapshot::operator-(const VerbSnapshot& earlier) const {
  VerbSnapshot d = *this;
  for (size_t i = 0; i < kVerbKinds; ++i) d.verbs[i] -= earlier.verbs[i];
  return d;
}

VerbSnapshot& VerbSnapshot::operator+=(const VerbSnapshot& o) {
  for (size_t i = 0; i < kVerbKinds; ++i) verbs[i] += o.verbs[i];
  return *this;
}

uint64_t VerbSnapshot::total_posted() const {
  uint64_t n = 0;
  for (const auto& v : verbs) n += v.posted;
  return n;
}

nlohmann::json VerbSnapshot::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < kVerbKinds; ++i) {
    const VerbStats& s = verbs[i];
    nlohmann::json o;
#define X(f) o[#f] = s.f;
    FABKV_VERB_FIELDS(X)
#undef X
    j[to_string(static_cast<Verb>(i))] = o;
  }
  return j;
}

VerbSnapshot VerbCounters::snapshot() const {
  VerbSnapshot s;
  for (size_t i = 0; i < kVerbKinds; ++i) {
    const Cell& c = cells_[i];
    VerbStats& o = s.verbs[i];
#define X(f) o.f = c.f.load(std::memory_order_relaxed);
    FABKV_VERB_FIELDS(X)
#undef X
  }
  return s;
}

}  // namespace fabkv::fabric
