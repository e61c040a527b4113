// L1: every registered CPU kernel (but the oracle itself) over every attention case of the
// golden catalog, judged by judge_attention as the certifier judges it. A case a kernel's capabilities exclude is recorded as unsupported, never run through
// another path.
#include <cstdio>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "mla/core/error.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/golden/families.hpp"
#include "mla/registry/registry.hpp"
#include "support/attn_builder.hpp"
#include "support/expect.hpp"
#include "support/goldens.hpp"

namespace mla {
namespace {

using testing::judged;

class KernelsOnFamily : public testing::GoldenFamilyTest {};

TEST_P(KernelsOnFamily, EveryCpuKernelMatchesTruth) {
  register_builtin_kernels();
  const std::string& file = name_;
  int ran = 0;
  std::map<std::string, testing::Worst> out_err, lse_err;
  for (const auto& name : cases_) {
    const auto c = golden::load_attn_case(file_, name);
    const AttnInputs in = c.inputs();
    const GoldenTruth truth(c);
    for (const auto& k : Registry::instance().attention()) {
      // The oracle computes ref::attention_fp64, which mla_reference_golden_tests judges case by
      // case; its wrapper is covered by the unit tests and the certifier. Not running it twice
      // keeps the long-context cases within the CI budget.
      if (k->info().backend != "cpu" || k->info().role == KernelRole::oracle) continue;
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
      AttentionJudgement j;
      EXPECT_TRUE(testing::matches(id, o, in.shape, truth.view(), k->info().out_dtype, &j));
      out_err[k->info().name].add(j.out);
      lse_err[k->info().name].add(j.lse);
      ++ran;
    }
  }
  for (const auto& [kname, w] : out_err) RecordProperty(kname + "_out_error", w.str());
  for (const auto& [kname, w] : lse_err) RecordProperty(kname + "_lse_error", w.str());
  EXPECT_GT(ran, 0) << "no CPU kernel ran any case of " << file;
}

INSTANTIATE_TEST_SUITE_P(Catalog, KernelsOnFamily, ::testing::ValuesIn(golden::family_names(golden::FamilyKind::attention)),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mla
