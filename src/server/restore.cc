#include "server/restore.h"

namespace fabkv::server {

void EngineRestore::operator()(const OpLog::Record& r) {
  switch (r.op) {
    case OpLog::Op::kPut: {
      if (r.expire_at != 0 && r.expire_at <= now_) {
        engine_.del(r.key);
        engine_.restore_version(r.version);
        return;
      }
      store::PutOptions p;
      p.expire_at = r.expire_at;
      p.flags = r.flags;
      p.restore_version = r.version;  // the logged CAS version; the engine's counter moves past
      if (const store::Status st = engine_.put(r.key, r.value, p); st != store::Status::kOk) {
        engine_.del(r.key);
        engine_.restore_version(r.version);
        if (refused_++ == 0) {
          first_refused_.assign(r.key);
          why_ = st;
        }
      }
      return;
    }
    case OpLog::Op::kDel: engine_.del(r.key); return;
    case OpLog::Op::kClear:
      if (r.expire_at == 0) engine_.clear();
      clear_at_ = r.expire_at;
      return;
    case OpLog::Op::kVersion: engine_.restore_version(r.version); return;
  }
}

}  // namespace fabkv::server
