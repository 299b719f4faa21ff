// fabkv-fabric-msg-peer: the other process of endpoint_types_test.
//
//   fabkv-fabric-msg-peer msg     tcp FI_EP_MSG: listens, prints "LISTEN <hex name>" and
//                                 "REGION <addr> <len> <key>" (a remote read-write region),
//                                 accepts one connection ("CONNECTED"), then echoes every SEND
//                                 back and announces every WRITE-with-immediate ("IMM <data>").
//   fabkv-fabric-msg-peer dgram   udp FI_EP_DGRAM: prints "NAME <hex name> <max_msg_size>",
//                                 reads "PEER <hex name>" from stdin, then echoes every datagram
//                                 back to that peer.
//
// Both then serve stdin commands: "COUNTERS" -> "COUNTERS <json of the verb counters>",
// "STOP" (or stdin EOF) -> exit 0. Any failure: a message on stderr and exit 1.
#include <poll.h>
#include <unistd.h>

#include <cerrno>

#include <array>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fabric/endpoint.h"
#include "fabric/error.h"
#include "fabric/fabric.h"
#include "fabric/memory_region.h"
#include "support/hex.h"

namespace {

using namespace fabkv;
using namespace fabkv::fabric;

constexpr size_t kSlots = 16;
constexpr size_t kSlotSize = 4096;

using fabkv::testing::from_hex;
using fabkv::testing::to_hex;

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// Non-blocking line reader on stdin.
class Stdin {
 public:
  // 1: a line, 0: nothing yet, -1: EOF or error.
  int poll_line(std::string* line, int timeout_ms) {
    if (take(line)) return 1;
    pollfd p{0, POLLIN, 0};
    int r = ::poll(&p, 1, timeout_ms);
    if (r <= 0) return 0;
    char chunk[1024];
    ssize_t n = ::read(0, chunk, sizeof(chunk));
    if (n <= 0) return -1;
    buf_.append(chunk, static_cast<size_t>(n));
    return take(line) ? 1 : 0;
  }

 private:
  bool take(std::string* line) {
    auto nl = buf_.find('\n');
    if (nl == std::string::npos) return false;
    *line = buf_.substr(0, nl);
    buf_.erase(0, nl + 1);
    return true;
  }
  std::string buf_;
};

// Echo server over one endpoint: kSlots receives posted; each arrival is copied to the
// matching send slot, sent back to `peer`, and its receive reposted.
int serve(Endpoint& ep, Fabric& fabric, PeerAddr peer, Stdin& in) {
  RegisteredBuffer rx(fabric, kSlots * kSlotSize, Access::kLocalOnly);
  RegisteredBuffer tx(fabric, kSlots * kSlotSize, Access::kLocalOnly);
  std::array<OpContext, kSlots> rctx{}, sctx{};
  std::array<bool, kSlots> send_busy{};
  for (size_t i = 0; i < kSlots; ++i) {
    rctx[i].tag = i;
    sctx[i].tag = i;
    if (long r = ep.recv(rx.local(i * kSlotSize, kSlotSize), &rctx[i]); r != 0) {
      std::fprintf(stderr, "msg-peer: recv: %s\n", error_text(r).c_str());
      return 1;
    }
  }
  say("SERVING");
  // Completions reaped while waiting inside handle(): send completions free their slot at
  // once, everything else is kept for the main loop.
  std::deque<Completion> pending;
  auto drain = [&] {
    Completion more[8];
    size_t n = ep.poll(more);
    for (size_t k = 0; k < n; ++k) {
      if (more[k].error == 0 && more[k].context >= &sctx[0] && more[k].context <= &sctx[kSlots - 1])
        send_busy[more[k].context->tag] = false;
      else pending.push_back(std::move(more[k]));
    }
  };
  auto handle = [&](const Completion& c) -> bool {
    if (c.error != 0) {
      // Receives still posted when the connection goes away complete as canceled.
      if (c.error != ECANCELED)
        std::fprintf(stderr, "msg-peer: error completion: %s\n", c.error_text);
      return true;  // keep serving; the test decides
    }
    if (c.context >= &sctx[0] && c.context <= &sctx[kSlots - 1]) {
      send_busy[c.context->tag] = false;
      return true;
    }
    bool is_rx_slot = c.context >= &rctx[0] && c.context <= &rctx[kSlots - 1];
    if (c.has_data && c.verb == Verb::kWrite)
      say("IMM " + std::to_string(c.data) + " " + std::to_string(c.len));
    if (!is_rx_slot) return true;
    size_t i = c.context->tag;
    if (c.verb == Verb::kRecv) {
      // The send slot may still be in flight from the previous round on this slot.
      Deadline d = Deadline::after_ms(5000);
      while (send_busy[i] && !d.expired()) drain();
      if (send_busy[i]) return false;
      std::memcpy(tx.data() + i * kSlotSize, rx.data() + i * kSlotSize, c.len);
      long r;
      Deadline ds = Deadline::after_ms(5000);
      while ((r = ep.send(tx.local(i * kSlotSize, c.len), peer, &sctx[i])) == kAgain &&
             !ds.expired())
        drain();
      if (r != 0) {
        std::fprintf(stderr, "msg-peer: send: %s\n", error_text(r).c_str());
        return false;
      }
      send_busy[i] = true;
    }
    if (long r = ep.recv(rx.local(i * kSlotSize, kSlotSize), &rctx[i]); r != 0) {
      std::fprintf(stderr, "msg-peer: recv: %s\n", error_text(r).c_str());
      return false;
    }
    return true;
  };
  uint32_t spins = 0;
  while (true) {
    drain();
    while (!pending.empty()) {
      Completion c = std::move(pending.front());
      pending.pop_front();
      if (!handle(c)) return 1;
    }
    if ((++spins & 0xff) != 0) continue;
    std::string line;
    int r = in.poll_line(&line, 0);
    if (r < 0 || line == "STOP") return 0;
    if (r > 0 && line == "COUNTERS") say("COUNTERS " + ep.counters().snapshot().to_json().dump());
  }
}

int run_msg() {
  FabricOptions fo;
  fo.provider = "tcp";
  fo.type = EndpointType::kMsg;
  fo.bind_host = "127.0.0.1";
  fo.quiet = true;
  auto fabric = Fabric::open(fo);
  Listener listener(*fabric);
  RegisteredBuffer region(*fabric, 1 << 20, Access::kRemoteReadWrite);
  RemoteRegion rr = region.remote();
  say("LISTEN " + to_hex(listener.name()));
  say("REGION " + std::to_string(rr.addr) + " " + std::to_string(rr.length) + " " +
      std::to_string(rr.key));
  auto ep = listener.accept(EndpointOptions{}, Deadline::after_ms(20000));
  if (!ep) {
    std::fprintf(stderr, "msg-peer: no connection within 20 s\n");
    return 1;
  }
  say("CONNECTED");
  Stdin in;
  return serve(*ep, *fabric, kNoPeer, in);
}

int run_dgram() {
  FabricOptions fo;
  fo.provider = "udp";
  fo.type = EndpointType::kDgram;
  fo.quiet = true;
  auto fabric = Fabric::open(fo);
  Endpoint ep(*fabric);
  say("NAME " + to_hex(ep.name()) + " " + std::to_string(fabric->max_msg_size()));
  Stdin in;
  std::string line;
  Deadline d = Deadline::after_ms(20000);
  int r = 0;
  while ((r = in.poll_line(&line, 100)) == 0 && !d.expired()) {
  }
  if (r <= 0 || line.rfind("PEER ", 0) != 0) {
    std::fprintf(stderr, "msg-peer: expected PEER <hex> on stdin\n");
    return 1;
  }
  PeerAddr peer = ep.insert_peer(from_hex(line.substr(5)));
  return serve(ep, *fabric, peer, in);
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "msg";
  try {
    if (mode == "msg") return run_msg();
    if (mode == "dgram") return run_dgram();
    std::fprintf(stderr, "usage: fabkv-fabric-msg-peer msg|dgram\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "msg-peer: %s\n", e.what());
    return 1;
  }
}
