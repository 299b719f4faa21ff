// fabkv-fault-victim: a client process that the fault tests SIGKILL at a random instant.
//   fabkv-fault-victim SERVER PROVIDER PROTOCOL TRANSPORT SEED
// Connects (TRANSPORT "" = the server's), prints "READY <index> <epoch>", then runs random
// operations with several in flight until killed: GETs, PUTs of 1..3000-byte values (inline,
// padded, indirect or staged, depending on the protocol) and DELETEs, so that a kill lands
// mid-SEND, mid-READ, mid-indirect-PUT or inside the client's own progress.
#include <cstdio>
#include <random>
#include <string>

#include "client/client.h"

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: fabkv-fault-victim SERVER PROVIDER PROTOCOL TRANSPORT SEED\n");
    return 2;
  }
  fabkv::ClientOptions o;
  o.server = argv[1];
  o.provider = argv[2];
  o.protocol = argv[3];
  o.transport = argv[4];
  o.timeout_ms = 5000;
  const uint64_t seed = std::stoull(argv[5]);
  std::unique_ptr<fabkv::Client> c;
  try {
    c = fabkv::Client::connect(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "victim: %s\n", e.what());
    return 1;
  }
  std::printf("READY %u %u\n", c->layout().at("client").get<unsigned>(),
              c->layout().at("epoch").get<unsigned>());
  std::fflush(stdout);
  std::mt19937_64 rng(seed);
  std::string value(3000, 'v');
  auto done = [](fabkv::Status, std::string_view, uint64_t) {};
  for (;;) {
    while (c->in_flight() < 8) {
      std::string key = "victim-" + std::to_string(seed) + "-" + std::to_string(rng() % 32);
      int what = static_cast<int>(rng() % 10);
      fabkv::Status st;
      if (what < 5) st = c->get_async(key, done);
      else if (what < 9)
        st = c->put_async(key, std::string_view(value).substr(0, 1 + rng() % 3000), done);
      else st = c->del_async(key, done);
      if (st == fabkv::Status::kServerGone) return 1;
      if (st != fabkv::Status::kOk) break;
    }
    c->poll();
  }
}
