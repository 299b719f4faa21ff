// The smallest fabkv client: put a key, read it back, delete it (docs/client.md).
// Usage: fabkv-example-hello [HOST:PORT] [PROVIDER] [PROTOCOL]
#include <cstdio>
#include <string>

#include "client/client.h"

int main(int argc, char** argv) {
  fabkv::ClientOptions options;
  if (argc > 1) options.server = argv[1];    // default 127.0.0.1:7000
  if (argc > 2) options.provider = argv[2];  // default auto
  if (argc > 3) options.protocol = argv[3];  // default herd (proto/registry.h lists them)
  std::unique_ptr<fabkv::Client> kv;
  try {
    kv = fabkv::Client::connect(options);
  } catch (const fabkv::ClientError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  if (fabkv::Status s = kv->put("hello", "world"); s != fabkv::Status::kOk) {
    std::fprintf(stderr, "put: %s\n", fabkv::to_string(s));
    return 2;
  }
  std::string value;
  fabkv::Status s = kv->get("hello", &value);
  std::printf("hello -> %s (%s)\n", value.c_str(), fabkv::to_string(s));
  kv->del("hello");
  return s == fabkv::Status::kOk ? 0 : 1;
}
