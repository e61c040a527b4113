// L1: the long drawn prefill cases (`mla certify --long`, certify/src/kinds/prefill/fresh.cpp):
// a varlen batch of 16K+ tokens and a chunk of 257 queries over a prefix of 32K+ keys, built by
// the generator and judged against the C++ oracles at run time (about 40 s of CPU on the 2-core
// VM, most of it the fp32 naive kernel on the batch). The registered host prefill kernels pass both; a top-left causal mask
// fails the chunk (queries and keys differ in number) and passes the batch (they do not: both
// alignments are the same mask there); a scale without YaRN's mscale² fails both. Without --long
// the run draws neither, and the short drawn cases are the same with and without it.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "mla/faults/faults.hpp"
#include "mla/registry/registry.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::certify::testing::certify_here;
using mla::certify::testing::kernel;
using mla::certify::testing::TempDir;
using nlohmann::json;

// The drawn prefill rows of a kernel: case name -> verdict.
std::map<std::string, std::string> drawn_rows(const json& k) {
  std::map<std::string, std::string> rows;
  for (const auto& r : k["cases"]) {
    if (r["family"] == "fresh") rows[r["case"].get<std::string>()] = r["verdict"].get<std::string>();
  }
  return rows;
}

std::vector<std::string> long_rows(const std::map<std::string, std::string>& rows) {
  std::vector<std::string> names;
  for (const auto& [name, verdict] : rows) {
    if (name.rfind("prefill_long_", 0) == 0) names.push_back(name);
  }
  return names;
}

TEST(CertifyLongPrefill, TheLongCasesAreDrawnOnlyWithLongAndJudgeTheKernelsAndTheirBugs) {
  mla::register_builtin_kernels();
  const TempDir tmp("long-prefill");
  const std::vector<std::string> good = {"cpu_prefill_fp64", "cpu_prefill_naive_fp32"};
  const std::string top_left = mla::faults::make_prefill("top_left_mask")->info().name;
  const std::string no_mscale = mla::faults::make_prefill("no_mscale")->info().name;

  auto o = mla::certify::testing::in_process_options(tmp.path() / "long", good, {"fresh"});
  o.faults = {"top_left_mask", "no_mscale"};
  o.kernels.push_back(top_left);
  o.kernels.push_back(no_mscale);
  o.long_cases = true;
  const auto cert = certify_here(o);
  EXPECT_EQ(cert["options"]["long_cases"], true) << "the certificate says the long cases were asked for";

  auto shorter = mla::certify::testing::in_process_options(tmp.path() / "short", good, {"fresh"});
  const auto short_cert = certify_here(shorter);
  EXPECT_EQ(short_cert["options"]["long_cases"], false);

  for (const auto& name : good) {
    SCOPED_TRACE(name);
    const auto rows = drawn_rows(kernel(cert, name));
    const auto longs = long_rows(rows);
    ASSERT_EQ(longs, (std::vector<std::string>{"prefill_long_chunk_h1", "prefill_long_varlen_h1"}));
    for (const auto& l : longs) EXPECT_EQ(rows.at(l), "PASS") << l;
    // The 16K+ batch and the 32K+ prefix, as the rows record their shapes.
    for (const auto& r : kernel(cert, name)["cases"]) {
      if (r["case"] == "prefill_long_varlen_h1") {
        EXPECT_GE(r["shape"]["total_q"].get<int64_t>(), 16384) << r["shape"].dump();
      }
      if (r["case"] == "prefill_long_chunk_h1") {
        int64_t longest = 0;
        for (const auto& s : r["shape"]["seqlens_k"]) longest = std::max(longest, s.get<int64_t>());
        EXPECT_GE(longest, 32768) << r["shape"].dump();
      }
    }
    // The short drawn cases are the same rows with the same verdicts: --long only adds.
    auto without = drawn_rows(kernel(short_cert, name));
    EXPECT_TRUE(long_rows(without).empty()) << "no long case without --long";
    auto with = rows;
    for (const auto& l : longs) with.erase(l);
    EXPECT_EQ(with, without);
  }
  const auto tl = drawn_rows(kernel(cert, top_left));
  EXPECT_EQ(tl.at("prefill_long_chunk_h1"), "FAIL") << "257 queries over 32K+ keys: top-left sees the wrong keys";
  EXPECT_EQ(tl.at("prefill_long_varlen_h1"), "PASS") << "s_q == s_k everywhere: the two alignments are one mask";
  const auto nm = drawn_rows(kernel(cert, no_mscale));
  EXPECT_EQ(nm.at("prefill_long_chunk_h1"), "FAIL");
  EXPECT_EQ(nm.at("prefill_long_varlen_h1"), "FAIL");
}

}  // namespace
