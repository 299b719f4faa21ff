#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

#include "server/options.h"

namespace fabkv::server {
namespace {

TEST(ServerOptions, ParsesSizes) {
  EXPECT_EQ(parse_bytes("4096"), 4096u);
  EXPECT_EQ(parse_bytes("64K"), 64u << 10);
  EXPECT_EQ(parse_bytes("256M"), 256u << 20);
  EXPECT_EQ(parse_bytes("2GiB"), size_t{2} << 30);
  EXPECT_THROW(parse_bytes(""), std::invalid_argument);
  EXPECT_THROW(parse_bytes("12Q"), std::invalid_argument);
  EXPECT_THROW(parse_bytes("lots"), std::invalid_argument);
  EXPECT_THROW(parse_bytes("99999999999999T"), std::invalid_argument);
}

TEST(ServerOptions, LoadsTomlAndRejectsUnknownKeys) {
  std::string path = ::testing::TempDir() + "fabkv-server-test.toml";
  {
    std::ofstream f(path);
    f << "workers = 2\nmemory = \"128M\"\nengine = \"store\"\ntransport = \"send\"\n"
         "cores = [0, 1]\nbatching = false\n";
  }
  ServerOptions o;
  load_toml(path, &o);
  EXPECT_EQ(o.workers, 2u);
  EXPECT_EQ(o.memory, size_t{128} << 20);
  EXPECT_EQ(o.engine, "store");
  EXPECT_EQ(o.herd.transport, rpc::Transport::kSend);
  EXPECT_EQ(o.cores, (std::vector<int>{0, 1}));
  EXPECT_FALSE(o.rpc.batching);
  {
    std::ofstream f(path);
    f << "wokers = 2\n";
  }
  EXPECT_THROW(load_toml(path, &o), std::runtime_error);
  {
    std::ofstream f(path);
    f << "workers = [\n";
  }
  EXPECT_THROW(load_toml(path, &o), std::runtime_error);
  std::remove(path.c_str());
}

TEST(ServerOptions, ValidatesRanges) {
  ServerOptions o;
  EXPECT_THROW(validate(o), std::invalid_argument) << "engine not resolved yet";
  resolve_defaults(&o);
  EXPECT_EQ(o.engine, "cache");
  EXPECT_NO_THROW(validate(o));
  o.workers = 0;
  EXPECT_THROW(validate(o), std::invalid_argument);
  o = ServerOptions();
  o.engine = "btree";
  EXPECT_THROW(validate(o), std::invalid_argument);
  o = ServerOptions();
  o.protocols = {"herd", "farm"};
  resolve_defaults(&o);
  EXPECT_THROW(validate(o), std::invalid_argument) << "not a protocol of this build";
  o = ServerOptions();
  o.protocols = {};
  resolve_defaults(&o);
  EXPECT_THROW(validate(o), std::invalid_argument);
  o = ServerOptions();
  o.rpc.slot_size = 100;  // not a multiple of 8
  resolve_defaults(&o);
  EXPECT_THROW(validate(o), std::invalid_argument);
}

TEST(ServerOptions, PilafProtocolsPickThePilafEngine) {
  ServerOptions o;
  o.protocols = {"herd", "pilaf", "pilaf-vo"};
  resolve_defaults(&o);
  EXPECT_EQ(o.engine, "pilaf");
  EXPECT_NO_THROW(validate(o));
  o.engine = "cache";  // pilaf clients READ the pilaf engine's table: nothing else will do
  EXPECT_THROW(validate(o), std::invalid_argument);
  o = ServerOptions();
  o.protocols = {"pilaf"};
  o.pilaf.entries = 4;
  resolve_defaults(&o);
  EXPECT_THROW(validate(o), std::invalid_argument);
  o.pilaf.entries = 1024;
  o.pilaf.extents = 100;
  EXPECT_THROW(validate(o), std::invalid_argument);
  o = ServerOptions();
  o.rpc.slot_size = 100;  // not a multiple of 8
  EXPECT_THROW(validate(o), std::invalid_argument);
}

}  // namespace
}  // namespace fabkv::server
