// fabkv-seq-client: a sequencer client process for tests/client/seq_e2e_test.cc.
//   fabkv-seq-client SERVER PROVIDER PROTOCOL WINDOW COUNT
// Connects, prints "READY <client index>", then asks for COUNT values with up to WINDOW
// requests in flight. COUNT > 0: prints "v <request number> <value>" for every value once all
// have arrived (requests numbered in the order they were posted), then "DONE <ok> <failed>".
// COUNT = 0: runs until killed, printing (and flushing) each value as it arrives, so that a
// test that kills it knows every value it was handed.
#include <cstdio>
#include <string>
#include <vector>

#include "client/client.h"

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: fabkv-seq-client SERVER PROVIDER PROTOCOL WINDOW COUNT\n");
    return 2;
  }
  fabkv::ClientOptions o;
  o.server = argv[1];
  o.provider = argv[2];
  o.protocol = argv[3];
  o.timeout_ms = 10000;
  const size_t window = std::stoul(argv[4]);
  const size_t count = std::stoul(argv[5]);
  std::unique_ptr<fabkv::Client> c;
  try {
    c = fabkv::Client::connect(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "seq-client: %s\n", e.what());
    return 1;
  }
  std::printf("READY %u\n", c->layout().at("client").get<unsigned>());
  std::fflush(stdout);
  std::vector<uint64_t> values(count, 0);
  size_t posted = 0, ok = 0, failed = 0;
  const bool forever = count == 0;
  while (forever || posted < count) {
    while (c->in_flight() < window && (forever || posted < count)) {
      const size_t i = posted;
      fabkv::Status st = c->next_async([&, i](fabkv::Status s, std::string_view, uint64_t v) {
        if (s != fabkv::Status::kOk) {
          failed++;
          return;
        }
        ok++;
        if (forever) {
          std::printf("v %zu %llu\n", i, static_cast<unsigned long long>(v));
          std::fflush(stdout);
        } else {
          values[i] = v;
        }
      });
      if (st == fabkv::Status::kServerGone) return 1;
      if (st != fabkv::Status::kOk) {
        std::fprintf(stderr, "seq-client: next: %s\n", fabkv::to_string(st));
        return 1;
      }
      posted++;
    }
    c->poll();
  }
  if (c->flush() != fabkv::Status::kOk) failed++;
  for (size_t i = 0; i < count; ++i)
    if (values[i] != 0) std::printf("v %zu %llu\n", i, static_cast<unsigned long long>(values[i]));
  std::printf("DONE %zu %zu\n", ok, failed);
  return failed == 0 ? 0 : 3;
}
