// L1: every registered CPU kernel (but the reference itself) over every attention case of the
// golden catalog, judged against the fp64 truth with the table entry for the kernel's output
// dtype. A case a kernel's capabilities exclude is recorded as unsupported, never run through
// another path.
#include <cstdio>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "mla/core/error.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/kernels/registry.hpp"
#include "support/attn_builder.hpp"
#include "support/expect.hpp"
#include "support/goldens.hpp"

namespace mla {
namespace {

using testing::judged;

class KernelsOnFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(KernelsOnFamily, EveryCpuKernelMatchesTruth) {
  std::string why;
  const auto cat = testing::open_goldens(why);
  if (!cat) GTEST_SKIP() << why;
  const std::string file = GetParam() + ".h5";
  if (!cat->sha256.count(file)) GTEST_SKIP() << file << " is not in the catalog at " << cat->dir;
  register_builtin_kernels();
  const auto info = fixtures::read_file_info(cat->file(file));
  ASSERT_FALSE(info.cases.empty()) << file << " has no cases";
  int ran = 0;
  std::map<std::string, testing::Worst> out_err, lse_err;
  for (const auto& name : info.cases) {
    const auto c = fixtures::load_attn_case(cat->file(file), name);
    const AttnInputs in = c.inputs();
    for (const auto& k : Registry::instance().attention()) {
      // cpu_mla_fp64 computes ref::attention_fp64, which mla_reference_golden_tests judges case
      // by case; its wrapper is covered by the unit tests and the certifier. Not running it twice
      // keeps the long-context cases within the CI budget.
      if (k->info().backend != "cpu" || k->info().name == "cpu_mla_fp64") continue;
      const std::string id = fmt::format("{}:{} {}", file, name, k->info().name);
      SCOPED_TRACE(id);
      if (auto reason = k->check(in.shape)) {
        RecordProperty(name + "_" + k->info().name, "unsupported: " + *reason);
        continue;
      }
      auto prepared = k->prepare(in);
      const auto t0 = std::chrono::steady_clock::now();
      prepared->run();
      prepared->synchronize();
      const double secs = testing::seconds_since(t0);
      const AttnOutputs o = prepared->results();
      RecordProperty(name + "_" + k->info().name + "_seconds", fmt::format("{:.3f}", secs));
      if (secs > 1.0) std::fprintf(stderr, "[kernels] %s %.2f s\n", id.c_str(), secs);
      EXPECT_EQ(o.dtype, k->info().out_dtype);
      EXPECT_TRUE(judged(id + " out", o.out, c.truth_out, testing::out_shape(in.shape),
                         tol::tolerance_for(o.dtype, in.shape.cache_format, "out"), &out_err[k->info().name]));
      EXPECT_TRUE(judged(id + " lse", o.lse, c.truth_lse, testing::lse_shape(in.shape),
                         tol::tolerance_for(o.dtype, in.shape.cache_format, "lse"), &lse_err[k->info().name]));
      ++ran;
    }
  }
  for (const auto& [kname, w] : out_err) RecordProperty(kname + "_out_error", w.str());
  for (const auto& [kname, w] : lse_err) RecordProperty(kname + "_lse_error", w.str());
  EXPECT_GT(ran, 0) << "no CPU kernel ran any case of " << file;
}

INSTANTIATE_TEST_SUITE_P(Catalog, KernelsOnFamily,
                         ::testing::Values("attn_core", "attn_fp8", "attn_sparse", "attn_stress"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mla
