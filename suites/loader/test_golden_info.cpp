// mla-golden-info, run as a person would: listing, --load, and refusal of a bad catalog.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "loader_test_util.hpp"

namespace mla::fixtures {
namespace {

struct CliRun {
  int status = -1;
  std::string output;  // stdout and stderr together
};

CliRun run_info(const std::string& args) {
  const std::string cmd = std::string("'") + MLA_GOLDEN_INFO_EXE + "' " + args + " 2>&1";
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

TEST(GoldenInfo, ListsAndLoadsTheGoodCatalog) {
  const auto dir = testing::corpus_dir() / "good";
  const CliRun r = run_info("--dir '" + dir.string() + "' --load");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* s : {"manifest verified", "attn_core.h5  family=attn_core schema=1", "dense_stored",
                        "generated", "b=1 s_q=2 h=1 page=2 blocks=3 max_blocks=3 bf16 dense causal",
                        "attn_fp8.h5  family=attn_fp8", "fp8/ue8m0", "3 cases loaded and checked"}) {
    EXPECT_NE(r.output.find(s), std::string::npos) << "missing '" << s << "' in:\n" << r.output;
  }
}

TEST(GoldenInfo, RefusesACorruptCatalogWithTheReason) {
  const auto dir = testing::corpus_dir() / "manifest_wrong_sha256";
  const CliRun r = run_info("--dir '" + dir.string() + "'");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("mla-golden-info: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("attn_core.h5"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sha256"), std::string::npos) << r.output;
}

TEST(GoldenInfo, UnknownFileAndBadUsage) {
  const auto dir = testing::corpus_dir() / "good";
  EXPECT_EQ(run_info("--dir '" + dir.string() + "' --file attn_sparse.h5").status, 1);
  EXPECT_EQ(run_info("--no-such-option").status, 2);
}

}  // namespace
}  // namespace mla::fixtures
