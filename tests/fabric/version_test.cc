// `fabkv-server --version` and `fabkv-perf --version` name fabkv's version and the libfabric
// loaded at run time, which must be a 2.x (docs/fabric.md, "Which libfabric").
#include <rdma/fabric.h>

#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "fabric/fabric.h"
#include "perf/process.h"

namespace fabkv::testing {
namespace {

TEST(Version, LibraryVersionIsTheRunTimeLibfabric2) {
  const uint32_t v = fi_version();
  ASSERT_EQ(FI_MAJOR(v), 2u) << "fabkv runs on libfabric 2.x; the library loaded is "
                             << fabric::library_version();
  const std::string lib = fabric::library_version();
  EXPECT_TRUE(std::regex_match(lib, std::regex(R"(2\.[0-9]+\.[0-9]+.*)"))) << lib;
  EXPECT_EQ(lib.rfind(std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v)) + ".", 0), 0u)
      << lib << " disagrees with fi_version()";
  EXPECT_STREQ(fabric::fabkv_version(), FABKV_VERSION);
  EXPECT_EQ(fabric::version_line(), std::string("fabkv ") + FABKV_VERSION + ", libfabric " + lib);
}

// Runs `binary --version`: one line on stdout, exit status 0.
std::string version_of(const std::string& binary) {
  perf::ChildProcess p({binary, "--version"});
  std::string line;
  EXPECT_TRUE(p.read_line(&line, Deadline::after_ms(10000))) << binary << " printed nothing";
  EXPECT_EQ(p.wait(Deadline::after_ms(10000)), 0) << binary << " --version failed";
  return line;
}

TEST(Version, ServerAndPerfPrintFabkvAndLibfabric2) {
  const std::string fabkv = std::regex_replace(FABKV_VERSION, std::regex(R"(\.)"), R"(\.)");
  const std::regex want("fabkv " + fabkv + R"(, libfabric 2\.[0-9]+\.[0-9]+.*)");
  for (const char* binary : {FABKV_SERVER_BIN, FABKV_PERF_BIN}) {
    std::string line = version_of(binary);
    EXPECT_TRUE(std::regex_match(line, want)) << binary << ": '" << line << "'";
    EXPECT_EQ(line, fabric::version_line()) << binary;
  }
}

}  // namespace
}  // namespace fabkv::testing
