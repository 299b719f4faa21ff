// fabkv-herd-test-client: a separate client process for the server tests.
//   victim SERVER PROVIDER        connect, leave `window` PUTs in flight, print READY, sleep
//   victim-indirect SERVER PROVIDER  the same with indirect PUTs (write transport)
//   stress SERVER PROVIDER SEED N N random get/put/del on keys of its own, checked against a
//                                 model map; exit 0 when every answer matched, 1 otherwise
#include <unistd.h>

#include <cstdio>
#include <map>
#include <random>
#include <string>

#include "raw_client.h"

using namespace fabkv;
using namespace fabkv::testing;

namespace {

int victim(const std::string& server, const std::string& provider) {
  RawClient c(provider, server);
  char req[1024];
  for (uint32_t r = 0; r < c.window; ++r) {
    std::string key = "victim-" + std::to_string(r);
    size_t n = c.build(r + 1, rpc::OpCode::kPut, key, "v", req);
    if (c.layout.at("transport") == "send") c.send_raw(c.worker_of(key), req, n);
    else c.write_slot(c.worker_of(key), r, req, n);
  }
  std::printf("READY %u %u\n", c.client, c.epoch);
  std::fflush(stdout);
  ::pause();  // killed by the test, mid-window, never reading its responses
  return 0;
}

// Leaves an indirect PUT (body in its own memory, for the worker to READ) in every slot of
// one worker, then sleeps without driving progress again: on tcp the worker's READs of the
// bodies wait for this process's progress, which it drives only while it posts (a worker
// fetches one body at a time per client), so one is still outstanding when the test kills it.
int victim_indirect(const std::string& server, const std::string& provider) {
  RawClient c(provider, server, "write");
  char req[1024];
  const std::string key = "reuse-0";
  const uint32_t w = c.worker_of(key);
  for (uint32_t r = 0; r < c.window; ++r) {
    size_t n = c.build_indirect_put(r + 1, key, std::string(2000, static_cast<char>('a' + r)),
                                    r * 4096, req);
    c.write_slot(w, r, req, n);
  }
  std::printf("READY %u %u\n", c.client, c.epoch);
  std::fflush(stdout);
  ::pause();
  return 0;
}

int stress(const std::string& server, const std::string& provider, uint64_t seed, int ops) {
  RawClient c(provider, server);
  std::mt19937_64 rng(seed);
  std::map<std::string, std::string> model;
  std::vector<uint32_t> seq(c.layout.at("workers").get<uint32_t>(), 0);
  char req[1024];
  for (int i = 0; i < ops; ++i) {
    std::string key = "s" + std::to_string(seed) + "-" + std::to_string(rng() % 64);
    uint32_t w = c.worker_of(key);
    uint32_t s = ++seq[w];
    int what = static_cast<int>(rng() % 10);
    rpc::OpCode op = what < 5   ? rpc::OpCode::kGet
                     : what < 9 ? rpc::OpCode::kPut
                                : rpc::OpCode::kDel;
    std::string value;
    if (op == rpc::OpCode::kPut)
      value = std::string(1 + rng() % 300, static_cast<char>('a' + rng() % 26));
    size_t n = c.build(s, op, key, value, req);
    if (c.layout.at("transport") == "send") c.send_raw(w, req, n);
    else c.write_slot(w, s - 1, req, n);
    auto r = c.response(5000);
    if (!r || r->h.seq != s) {
      std::fprintf(stderr, "stress: no or wrong response to op %d\n", i);
      return 1;
    }
    auto st = static_cast<rpc::WireStatus>(r->h.status);
    auto it = model.find(key);
    if (op == rpc::OpCode::kGet) {
      bool ok = it == model.end() ? st == rpc::WireStatus::kNotFound
                                  : (st == rpc::WireStatus::kOk && r->value == it->second);
      if (!ok) {
        std::fprintf(stderr, "stress: GET %s mismatch (status %d)\n", key.c_str(), r->h.status);
        return 1;
      }
    } else if (op == rpc::OpCode::kPut) {
      if (st != rpc::WireStatus::kOk) return 1;
      model[key] = value;
    } else {
      bool ok = (it == model.end()) == (st == rpc::WireStatus::kNotFound);
      if (!ok) return 1;
      model.erase(key);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::string(argv[1]) == "victim") return victim(argv[2], argv[3]);
  if (argc >= 4 && std::string(argv[1]) == "victim-indirect")
    return victim_indirect(argv[2], argv[3]);
  if (argc >= 6 && std::string(argv[1]) == "stress")
    return stress(argv[2], argv[3], std::stoull(argv[4]), std::stoi(argv[5]));
  std::fprintf(stderr, "usage: fabkv-herd-test-client victim|stress SERVER PROVIDER [SEED N]\n");
  return 2;
}
