// Writes the seed corpus for fabkv-fuzz-control: valid encodings of each frame kind, so the
// fuzzer starts from deep inside the parsers instead of guessing the magic.
//   fabkv-make-control-corpus fuzz/corpus/control
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "control/wire.h"

using namespace fabkv::control;

namespace {

void write(const std::string& dir, const std::string& name, const std::vector<uint8_t>& f) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(f.data()), static_cast<std::streamsize>(f.size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];

  write(dir, "hello-empty", encode(Hello{}));
  Hello h;
  h.auth = AuthMethod::kHmacSha256;
  h.service = "perf";
  h.provider = "tcp;ofi_rxm";
  h.fabric_address = {0x02, 0x00, 0x1f, 0x90, 0x7f, 0x00, 0x00, 0x01};
  h.payload = {1, 2, 3, 4};
  write(dir, "hello-full", encode(h));
  h.version = 3;
  write(dir, "hello-v3", encode(h));

  write(dir, "welcome-empty", encode(Welcome{}));
  Welcome w;
  w.message = "ok";
  w.session_id = 42;
  w.provider = "shm";
  w.fabric_addresses = {{'f', 'i', '_', 's', 'h', 'm', 0}, {1, 2, 3, 4}};
  w.regions.push_back({"perf.target", 0x7f0000000000ull, 1 << 20, 0x1234,
                       kRemoteRead | kRemoteWrite});
  w.regions.push_back({"atomics", 0, 64, 9, kRemoteAtomic});
  w.payload = {9, 9};
  write(dir, "welcome-full", encode(w));
  Welcome rej;
  rej.status = Status::kBadVersion;
  rej.message = "client speaks control protocol version 1, server speaks version 2";
  write(dir, "welcome-reject", encode(rej));

  Challenge c;
  for (size_t i = 0; i < kNonceSize; ++i) c.nonce.push_back(static_cast<uint8_t>(i * 13 + 1));
  write(dir, "challenge", encode(c));
  Proof p;
  for (size_t i = 0; i < kProofSize; ++i) p.mac.push_back(static_cast<uint8_t>(255 - i * 5));
  write(dir, "proof", encode(p));

  write(dir, "error", encode_error(Status::kRejected, "this service takes no requests"));
  write(dir, "request", encode_frame(FrameType::kRequest, std::vector<uint8_t>{'s', 't'}));
  return 0;
}
