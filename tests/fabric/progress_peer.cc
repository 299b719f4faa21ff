// fabkv-fabric-progress-peer PROVIDER [RX_DEPTH] [waitable]: the target of progress_test and
// wait_test, a process that makes fabric progress only when told to. Prints "NAME <hex name>"
// and "REGION <addr> <key>" (1 MiB, remote read-write, zeroed), posts 16 receives of 64 bytes,
// then serves stdin, blocking (so it never polls on its own):
//   INSERT <hex name>   add a peer to the address vector      -> "OK"
//   POLL <ms>           poll the completion queue for ms      -> "POLLED <inbound arrivals so far>"
//   PEEK <offset> <n>   n bytes of the region, not polling    -> "PEEK <hex>"
//   BLOCK <ms>          (waitable) drain the queue, say "BLOCKING", then block on the endpoint's
//                       wait object (fabric::Waiter) for up to ms without polling
//                                                        -> "BLOCKED <woke> <elapsed us>"
//   REMOTE              the endpoint's inbound one-sided count (Endpoint::remote_ops, which
//                       drives progress)                 -> "REMOTE <count or 'none'>"
//   STOP (or EOF)       exit 0
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "fabric/endpoint.h"
#include "fabric/fabric.h"
#include "fabric/memory_region.h"
#include "fabric/waiter.h"
#include "support/hex.h"

using namespace fabkv;

namespace {
void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: fabkv-fabric-progress-peer shm|tcp [rx_depth] [waitable]\n");
    return 2;
  }
  try {
    fabric::FabricOptions fo;
    fo.provider = argv[1];
    fo.quiet = true;
    auto fab = fabric::Fabric::open(fo);
    fabric::EndpointOptions eo;  // fabkv's defaults unless a receive depth is given
    for (int i = 2; i < argc; ++i) {
      if (std::string(argv[i]) == "waitable") eo.waitable = true;
      else eo.rx_depth = std::stoul(argv[i]);
    }
    fabric::Endpoint ep(*fab, eo);
    fabric::Waiter waiter;
    fabric::RegisteredBuffer mem(*fab, 1 << 20, fabric::Access::kRemoteReadWrite);
    fabric::RegisteredBuffer rx(*fab, 16 * 64, fabric::Access::kLocalOnly);
    fabric::OpContext rctx[16];
    for (int i = 0; i < 16; ++i)
      if (ep.recv(rx.local(i * 64, 64), &rctx[i]) != 0) throw std::runtime_error("recv");
    say("NAME " + testing::to_hex(ep.name()));
    auto r = mem.mr().remote();
    say("REGION " + std::to_string(r.addr) + " " + std::to_string(r.key));
    uint64_t inbound = 0;
    std::string line;
    while (std::getline(std::cin, line)) {
      std::istringstream in(line);
      std::string cmd;
      in >> cmd;
      if (cmd == "STOP") break;
      if (cmd == "INSERT") {
        std::string hex;
        in >> hex;
        ep.insert_peer(testing::from_hex(hex));
        say("OK");
      } else if (cmd == "POLL") {
        int ms = 0;
        in >> ms;
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
        fabric::Completion c[16];
        while (std::chrono::steady_clock::now() < end) {
          size_t n = ep.poll(c);
          for (size_t i = 0; i < n; ++i) {
            if (c[i].error != 0) std::fprintf(stderr, "completion error: %s\n", c[i].error_text);
            if (c[i].inbound) ++inbound;
            if (c[i].inbound && c[i].verb == fabric::Verb::kRecv && c[i].context != nullptr) {
              auto* ctx = c[i].context;
              ep.recv(rx.local(static_cast<size_t>(ctx - rctx) * 64, 64), ctx);
            }
          }
        }
        say("POLLED " + std::to_string(inbound));
      } else if (cmd == "BLOCK") {
        int ms = 0;
        in >> ms;
        fabric::Completion c[16];
        while (ep.poll(c) > 0) {
        }
        say("BLOCKING");
        auto start = std::chrono::steady_clock::now();
        auto end = start + std::chrono::milliseconds(ms);
        fabric::Endpoint* eps[] = {&ep};
        fabric::Waiter::Woke woke;
        // fi_trywait may say "not now" for leftovers of earlier traffic: drain and try again.
        do {
          auto left = std::chrono::duration_cast<std::chrono::microseconds>(
              end - std::chrono::steady_clock::now());
          woke = waiter.wait(eps, {}, left);
          if (woke == fabric::Waiter::Woke::kPending)
            while (ep.poll(c) > 0) {
            }
        } while (woke == fabric::Waiter::Woke::kPending && std::chrono::steady_clock::now() < end);
        auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
        const char* names[] = {"pending", "fabric", "wake", "timeout"};
        say(std::string("BLOCKED ") + names[static_cast<int>(woke)] + " " + std::to_string(us));
      } else if (cmd == "REMOTE") {
        say("REMOTE " + (ep.counts_remote_ops() ? std::to_string(ep.remote_ops()) : "none"));
      } else if (cmd == "PEEK") {
        size_t off = 0, n = 0;
        in >> off >> n;
        say("PEEK " + testing::to_hex({reinterpret_cast<const uint8_t*>(mem.data() + off), n}));
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fabkv-fabric-progress-peer: %s\n", e.what());
    return 1;
  }
}
