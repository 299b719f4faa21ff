// seq-rpc's server side: a sequencer over HERD's RPC (Guidelines sec. 4.2, "HERD-RPC" of
// Table 3). Requests arrive as herd's do (WRITten into the client's slots of the worker's
// request region, or SENT, as herd's --transport says: proto/herd/options.h); each carries
// OpCode::kNext and no key. A worker that collected N of them in a round claims N values with
// one atomic add on the counter all workers share (proto/seq/counter.h) and answers each with
// one SEND whose header carries its value (the paper's batching optimization); the shared RPC
// piece does the rest (proto/rpc/server.h, Config::next). No engine: the worker runs none when
// only sequencers are served (server/options.h, needed_engine).

#include "proto/rpc/server.h"
#include "fabric/isolation.h"
#include "proto/seq/counter.h"

namespace fabkv::seq_rpc {

namespace {

class SeqRpcServer final : public rpc::TransportServer {
 public:
  explicit SeqRpcServer(proto::ServerHost& w)
      : TransportServer(w, proto::info(proto::Id::seq_rpc), config(w)),
        counter_(seq::Counter::open(w.settings().data_dir)) {}

  nlohmann::json stats() const override {
    nlohmann::json j = TransportServer::stats();
    j["sequence"] = {{"start", counter_->start()},
                     {"mark", counter_->mark()},
                     {"block", seq::Counter::kBlock},
                     {"reservations", counter_->reservations()},
                     {"persist_errors", counter_->errors()}};
    return j;
  }

 private:
  static Config config(proto::ServerHost& w) {
    Config c;
    // The value travels in the header; room for the padding a provider may need
    // (fabric/isolation.h).
    c.answer_bytes = fabric::lock_free_capacity(w.fabric(), sizeof(rpc::ResponseHeader));
    c.next = true;
    c.kv = false;
    return c;
  }

  uint64_t claim_st(size_t n) override { return counter_->claim(n); }

  const std::shared_ptr<seq::Counter> counter_;
};

}  // namespace

std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w) {
  return std::make_unique<SeqRpcServer>(w);
}

}  // namespace fabkv::seq_rpc
