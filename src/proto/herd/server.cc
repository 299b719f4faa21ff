// HERD's server side (HERD sec. 4): requests arrive in the client's slots of the worker's
// request region ("herd.requests.<w>") or as messages (sec. 5.5), as --transport says (auto:
// proto/herd/options.h); every answer is one SEND through the worker's endpoints, in turn over
// rpc.queues of them (Guidelines sec. 4.3.1), or, with --herd-responses dgram, one datagram from
// the worker's datagram endpoint (sec. 3.3, 4.3: UD SENDs; proto/herd/dgram.h). The rest is the
// shared RPC piece (proto/rpc/server.h, TransportServer).

#include <fmt/format.h>

#include "common/log.h"
#include "fabric/error.h"
#include "proto/herd/dgram.h"
#include "proto/herd/options.h"
#include "proto/rpc/server.h"

namespace fabkv::herd {

namespace {

class HerdServer final : public rpc::TransportServer {
 public:
  HerdServer(proto::ServerHost& w, const proto::Info& p)
      : TransportServer(w, p, rpc::RpcServer::Config{}), responses_(w.settings().herd.responses) {}

  void open() override {
    if (responses_ == Responses::kDgram) {
      try {
        dgram_ = std::make_unique<DgramSender>(worker_.fabric(), max_clients_,
                                               worker_.settings().herd.test_drop_responses,
                                               worker_.index() > 0);
      } catch (const fabric::FabricError& e) {
        throw std::runtime_error(
            fmt::format("{}; --herd-responses dgram needs datagram endpoints beside the "
                        "{} provider (tcp has udp's; shm has none): serve with "
                        "--provider tcp, or answer by --herd-responses rdm",
                        e.what(), worker_.fabric().provider_name()));
      }
    }
    TransportServer::open();
  }

  std::string admit(const proto::Info& p, const nlohmann::json& hello, uint32_t client,
                    uint16_t epoch, proto::WelcomeParts* out) override {
    if (std::string why = check_responses(hello); !why.empty()) return why;
    if (std::string why = TransportServer::admit(p, hello, client, epoch, out); !why.empty())
      return why;
    DgramLayout l;
    l.responses = to_string(responses_);
    if (dgram_) {
      l.dgram_provider = dgram_->fabric().provider_name();
      l.dgram_max = dgram_->max_message();
      // A GET's answer is one datagram: values that cannot travel back are refused at the PUT
      // by this client (an answer too large for a datagram is still counted and refused,
      // answer_st: another protocol may have stored a larger value).
      const size_t room = l.dgram_max - sizeof(rpc::ResponseHeader);
      out->layout["max_value"] = std::min(max_value_, room);
    }
    out->layout.update(nlohmann::json(l));
    return "";
  }

  void add_client_st(uint32_t c, uint16_t epoch, const proto::Info& p,
                     const nlohmann::json& hello) override {
    if (dgram_) {
      dgram_->remove_st(c);
      if (const auto it = hello.find("dgram_address"); it != hello.end())
        dgram_->add_st(c, it->get<std::vector<uint8_t>>());  // admit() checked it
    }
    TransportServer::add_client_st(c, epoch, p, hello);
  }

  void remove_client_st(uint32_t c) override {
    if (dgram_) dgram_->remove_st(c);
    TransportServer::remove_client_st(c);
  }

  void poll_st() override {
    TransportServer::poll_st();
    if (dgram_) dgram_->poll_st();
  }

  nlohmann::json stats() const override {
    nlohmann::json j = TransportServer::stats();
    j["responses"] = to_string(responses_);
    if (dgram_) j.update(dgram_->stats());
    return j;
  }
  fabric::VerbSnapshot own_verbs() const override {
    return dgram_ ? dgram_->verbs() : fabric::VerbSnapshot{};
  }

 protected:
  fabric::Fabric& answer_fabric() override {
    return dgram_ ? dgram_->fabric() : TransportServer::answer_fabric();
  }

  void answer_st(uint32_t c, uint16_t epoch, uint32_t seq, char* slot, size_t len) override {
    if (!dgram_) return TransportServer::answer_st(c, epoch, seq, slot, len);
    if (!worker_.serving_st(c, epoch)) return;
    if (len > dgram_->max_message()) {
      // A value stored by another protocol, larger than a datagram holds: the client gets
      // kTooLarge at once rather than a timeout.
      dgram_->note_oversized();
      auto h = rpc::load<rpc::ResponseHeader>(slot);
      h.status = static_cast<uint8_t>(rpc::WireStatus::kTooLarge);
      h.value_len = 0;
      h.expire_at = 0;
      rpc::store(slot, h);
      len = sizeof(h);
    }
    dgram_->send_st(c, answer_buffer(c, seq, len));
  }

 private:
  // "" when the client takes answers the way this server sends them (proto/herd/dgram.h, the
  // handshake); else the refusal, naming both sides.
  std::string check_responses(const nlohmann::json& hello) const;

  const Responses responses_;
  std::unique_ptr<DgramSender> dgram_;
};

std::string HerdServer::check_responses(const nlohmann::json& hello) const {
  const auto it = hello.find("responses");
  if (it != hello.end() && !it->is_string()) return "responses must be a string";
  const std::string asked = it == hello.end() ? "rdm" : it->get<std::string>();
  if (responses_ == Responses::kRdm) {
    if (asked == "dgram")
      return "the server answers herd requests by rdm (its --herd-responses rdm); this client "
             "asked for datagram answers";
    return "";
  }
  const std::string provider = dgram_->fabric().provider_name();
  if (asked == "follow") return "";  // it opens a datagram endpoint and says Hello again
  if (asked != "dgram")
    return fmt::format(
        "the server answers herd requests by datagram (its --herd-responses dgram, {} "
        "endpoints); this client takes answers by rdm only: start the server with "
        "--herd-responses rdm",
        provider);
  const auto addr = hello.find("dgram_address");
  if (addr == hello.end() || !addr->is_array()) return "dgram_address must be an array of bytes";
  std::vector<uint8_t> name;
  try {
    name = addr->get<std::vector<uint8_t>>();
  } catch (const nlohmann::json::exception&) {
    return "dgram_address must be an array of bytes";
  }
  if (std::string why = dgram_->address_problem(name); !why.empty())
    return fmt::format("the server cannot use this client's datagram address ({}): {}", provider,
                       why);
  return "";
}

}  // namespace

std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w) {
  // One message per answer: header + value, padded (RpcServer::Config::answer_bytes).
  return std::make_unique<HerdServer>(w, proto::info(proto::Id::herd));
}

}  // namespace fabkv::herd
