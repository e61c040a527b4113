// The prefill, merge, indexer logits, top-k and sparse prefill rows of mla-bench: through the one per-call loop with a recording side
// (timed and finished with the kernel's own cost model; a planted wrong kernel, which no flag of
// mla-bench selects because the faults are not registered, never reaches the timer), and end to
// end: mla-bench on one prefill and one merge point writes timed rows against the ceilings it
// measured, with model_flops the registered kernel's cost() of the point, computed here.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <tuple>
#include <unistd.h>
#include <string>

#include <nlohmann/json.hpp>

#include "phase_rows.hpp"
#include "mla/faults/faults.hpp"
#include "mla/registry/registry.hpp"

namespace {

namespace ax = mla::axes;

constexpr const char* kPrefillPoint = "cpu_prefill_varlen_skew_h16";
constexpr const char* kMergePoint = "merge_edge_empty_sides_bf16_t64_h16_d128";

// Counts timer calls and finishes; a host clock without eviction.
class RecordingSide : public mla::bench::PhaseSide {
 public:
  int calls = 0, finishes = 0;
  std::unique_ptr<mla::bench::CallTimer> timer(const mla::bench::KernelFacts&, std::size_t,
                                               const mla::bench::PreparedRef&) override {
    struct Timer : mla::bench::CallTimer {
      explicit Timer(RecordingSide& s) : side(s) {}
      RecordingSide& side;
      double time_call(mla::bench::TimedCall& run) override {
        ++side.calls;
        return mla::bench::HostClockTimer().time_call(run);
      }
      bool flushed() const override { return false; }
    };
    return std::make_unique<Timer>(*this);
  }
  void finish(benchmark::State&, const mla::bench::KernelFacts&, const mla::bench::RowResult&) override { ++finishes; }
};

// Runs `body` as one Google Benchmark row of `iterations` calls; returns its error ("" = timed).
std::string run_row(const std::string& name, int iterations, std::function<void(benchmark::State&)> body) {
  struct Collect : benchmark::BenchmarkReporter {
    std::string error = "not run";
    bool ReportContext(const Context&) override { return true; }
    void ReportRuns(const std::vector<Run>& runs) override {
      for (const auto& r : runs) error = r.error_occurred ? r.error_message : "";
    }
  } collect;
  benchmark::RegisterBenchmark(name.c_str(), std::move(body))->UseManualTime()->Iterations(iterations);
  benchmark::SetBenchmarkFilter("^" + name + "/");
  benchmark::RunSpecifiedBenchmarks(&collect);
  benchmark::ClearRegisteredBenchmarks();
  return collect.error;
}

const mla::PrefillImpl& prefill_kernel(const std::string& name) {
  for (const auto& k : mla::Registry::instance().prefill())
    if (k->info().name == name) return *k;
  throw std::runtime_error("no prefill kernel " + name);
}

const mla::MergeImpl& merge_kernel(const std::string& name) {
  for (const auto& k : mla::Registry::instance().merge())
    if (k->info().name == name) return *k;
  throw std::runtime_error("no merge kernel " + name);
}

class PhaseRows : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { mla::register_builtin_kernels(); }
  void TearDown() override { mla::bench::release_phase_cache(); }
};

TEST_F(PhaseRows, ATimedRowCarriesTheKernelsOwnCostModelAndFinishesOnce) {
  const auto* p = ax::find_prefill(kPrefillPoint);
  ASSERT_NE(p, nullptr);
  const auto& k = prefill_kernel("cpu_prefill_fp64");
  RecordingSide side;
  mla::bench::RowResult r;
  const auto error = run_row("phase/prefill_ok", 3, [&](benchmark::State& st) {
    r = mla::bench::time_prefill_row(st, {&k, p, 0}, side);
  });
  EXPECT_EQ(error, "");
  EXPECT_EQ(side.calls, 3);
  EXPECT_EQ(side.finishes, 1);
  const auto in = ax::build_inputs(*p);
  EXPECT_EQ(r.cost.flops, k.cost(in.view()).flops);
  EXPECT_EQ(r.cost.bytes, k.cost(in.view()).bytes);
}

TEST_F(PhaseRows, APlantedWrongKernelIsNotTimedAndSaysFail) {
  RecordingSide side;
  // 192^-0.5 instead of the V3 scale the point passes.
  const auto bad_prefill = mla::faults::make_prefill("no_mscale");
  auto error = run_row("phase/prefill_fault", 2, [&](benchmark::State& st) {
    (void)mla::bench::time_prefill_row(st, {bad_prefill.get(), ax::find_prefill(kPrefillPoint), 0}, side);
  });
  EXPECT_EQ(error.rfind("not timed: FAIL (", 0), 0u) << error;
  // +inf (an empty side, FA2's) taken for a number: NaN rows at the edge point.
  const auto bad_merge = mla::faults::make_merge("pos_inf_lse_as_number");
  error = run_row("phase/merge_fault", 2, [&](benchmark::State& st) {
    (void)mla::bench::time_merge_row(st, {bad_merge.get(), ax::find_merge(kMergePoint), 0}, side);
  });
  EXPECT_EQ(error.rfind("not timed: FAIL (", 0), 0u) << error;
  // The registered merge passes the same point.
  error = run_row("phase/merge_ok", 2, [&](benchmark::State& st) {
    (void)mla::bench::time_merge_row(st, {&merge_kernel("cpu_merge_f32"), ax::find_merge(kMergePoint), 0}, side);
  });
  EXPECT_EQ(error, "");
  EXPECT_EQ(side.calls, 2);  // the merge that passed; neither fault reached the timer
}

const mla::IndexerLogitsImpl& logits_kernel(const std::string& name) {
  for (const auto& k : mla::Registry::instance().indexer_logits())
    if (k->info().name == name) return *k;
  throw std::runtime_error("no indexer logits kernel " + name);
}

// The indexer logits rows: the registered kernel is judged by the exact oracle, then timed with
// its own cost model; a kernel with the relu left out or one whose next_n 2 rows see the later
// token's position (the edge point's masked diagonal) is not timed, for the judge's reason.
TEST_F(PhaseRows, IndexerLogitsRowsAreJudgedBeforeTheyAreTimed) {
  const auto* edge = ax::find_indexer_logits("indexer_logits_edge_paged_b3_n2_bs16_ctx67");
  ASSERT_NE(edge, nullptr);
  const auto& k = logits_kernel("cpu_indexer_logits");
  RecordingSide side;
  mla::bench::RowResult r;
  auto error = run_row("phase/logits_ok", 3, [&](benchmark::State& st) {
    r = mla::bench::time_indexer_logits_row(st, {&k, edge, 0}, side);
  });
  EXPECT_EQ(error, "");
  EXPECT_EQ(side.calls, 3);
  EXPECT_EQ(side.finishes, 1);
  const auto in = ax::build_inputs(*edge);
  EXPECT_EQ(r.cost.flops, k.cost(in.view()).flops);
  EXPECT_EQ(r.cost.bytes, k.cost(in.view()).bytes);
  for (const std::string bug : {"no_relu", "sees_later_token"}) {
    const auto bad = mla::faults::make_indexer_logits(bug);
    error = run_row("phase/logits_" + bug, 2, [&](benchmark::State& st) {
      (void)mla::bench::time_indexer_logits_row(st, {bad.get(), edge, 0}, side);
    });
    EXPECT_EQ(error.rfind("not timed: FAIL (", 0), 0u) << bug << ": " << error;
  }
  EXPECT_EQ(side.calls, 3);  // neither fault reached the timer
  // A ragged point of the CPU tier is judged and timed the same way.
  const auto* ragged = ax::find_indexer_logits("cpu_indexer_logits_ragged_q128_k1024_h64");
  ASSERT_NE(ragged, nullptr);
  error = run_row("phase/logits_ragged", 1, [&](benchmark::State& st) {
    (void)mla::bench::time_indexer_logits_row(st, {&k, ragged, 0}, side);
  });
  EXPECT_EQ(error, "");
}

// The top-k rows: both registered top-k kernels pass the edge and the prefill point and are timed
// with their logits per call; every planted top-k bug is not timed on at least one of the two
// (the edge rows hold ranges shorter than k, masked positions and ties; the prefill rows ranges
// that start past 0, where relative and absolute indices differ, and larger logits past their
// ends).
TEST_F(PhaseRows, TopkRowsAreJudgedBeforeTheyAreTimedAndCountTheLogitsRead) {
  const auto* edge = ax::find_topk("topk_edge_r12_n4096_k2048");
  const auto* prefill = ax::find_topk("cpu_topk_prefill_r256_n4096_k2048");
  ASSERT_NE(edge, nullptr);
  ASSERT_NE(prefill, nullptr);
  RecordingSide side;
  int timed = 0;
  for (const auto& k : mla::Registry::instance().topk())
    for (const auto* p : {edge, prefill}) {
      SCOPED_TRACE(k->info().name + "/" + p->name);
      mla::bench::RowResult r;
      const auto error = run_row("phase/topk_ok", 2, [&](benchmark::State& st) {
        r = mla::bench::time_topk_row(st, {k.get(), p, 0}, side);
      });
      EXPECT_EQ(error, "");
      timed += 2;
      EXPECT_EQ(r.logits, static_cast<double>(ax::logits_read(*p)));
      EXPECT_EQ(r.logits, static_cast<double>(ax::logits_read(ax::build_inputs(*p).view())));
      EXPECT_GT(r.cost.bytes, 4 * r.logits);  // every logit read once, plus ranges and indices
    }
  EXPECT_GE(timed, 4);
  EXPECT_EQ(side.calls, timed);
  for (const auto& bug : mla::faults::topk_names()) {
    const auto bad = mla::faults::make_topk(bug);
    std::string errors;
    for (const auto* p : {edge, prefill}) {
      errors += run_row("phase/topk_" + bug, 1, [&](benchmark::State& st) {
        (void)mla::bench::time_topk_row(st, {bad.get(), p, 0}, side);
      }) + " | ";
    }
    EXPECT_NE(errors.find("not timed: FAIL ("), std::string::npos) << bug << ": " << errors;
  }
}

// The sparse prefill rows: the registered kernel passes the edge point (rows with fewer keys than
// topk, every kind of entry that is no key, a row with none) and the CPU point, and is timed with
// its own cost model; every planted sparse prefill bug that needs no sink or topk_length (the bench
// points have neither: every sparse prefill kernel takes that call) is not timed on the edge point,
// where each one changes some row (the row of no key turns -1 into position 0; every row with a key
// has an lse).
TEST_F(PhaseRows, SparsePrefillRowsAreJudgedBeforeTheyAreTimed) {
  const auto* edge = ax::find_sparse_prefill("sparse_prefill_edge_h64_sq80_skv80_k64");
  const auto* cpu = ax::find_sparse_prefill("cpu_sparse_prefill_h16_sq128_skv1024_k256");
  ASSERT_NE(edge, nullptr);
  ASSERT_NE(cpu, nullptr);
  const mla::SparsePrefillImpl* k = mla::Registry::instance().find_sparse_prefill("cpu_sparse_prefill_f32");
  ASSERT_NE(k, nullptr);
  RecordingSide side;
  for (const auto* p : {edge, cpu}) {
    SCOPED_TRACE(p->name);
    mla::bench::RowResult r;
    const auto error = run_row("phase/sparse_ok", 2, [&](benchmark::State& st) {
      r = mla::bench::time_sparse_prefill_row(st, {k, p, 0}, side);
    });
    EXPECT_EQ(error, "");
    const auto in = ax::build_inputs(*p);
    EXPECT_EQ(r.cost.flops, k->cost(in.view()).flops);
    EXPECT_EQ(r.cost.bytes, k->cost(in.view()).bytes);
    EXPECT_GT(r.cost.flops, 0);
  }
  EXPECT_EQ(side.calls, 4);
  int bugs = 0;
  for (const auto& bug : mla::faults::sparse_prefill_names()) {
    if (bug.find("sink") != std::string::npos || bug.find("topk_length") != std::string::npos) continue;
    ++bugs;
    const auto bad = mla::faults::make_sparse_prefill(bug);
    const auto error = run_row("phase/sparse_" + bug, 1, [&](benchmark::State& st) {
      (void)mla::bench::time_sparse_prefill_row(st, {bad.get(), edge, 0}, side);
    });
    EXPECT_EQ(error.rfind("not timed: FAIL (", 0), 0u) << bug << ": " << error;
  }
  EXPECT_GE(bugs, 2);
  EXPECT_EQ(side.calls, 4);  // no fault reached the timer
}

// A sparse prefill point's indices are what a top-k hands the attention: each row's entries the
// positions it may see (bottom-right causal), distinct, all of them when it sees fewer than topk
// (the rest -1, or on the edge point's odd rows the other kinds of entry that are no key).
TEST(SparsePrefillAxis, IndicesAreACausalTopkSelection) {
  for (const auto& p : ax::sparse_prefill_catalog()) {
    if (p.s_q * p.s_kv > 1024 * 1024) continue;  // the production points: the same code, larger
    SCOPED_TRACE(p.name);
    const auto b = ax::build_inputs(p);
    int rows_without_key = 0, short_rows = 0;
    for (int64_t i = 0; i < p.s_q; ++i) {
      const int64_t sees = p.s_kv - p.s_q + i + 1;
      std::set<int32_t> keys;
      for (int64_t j = 0; j < p.topk; ++j) {
        const int32_t v = b.indices[static_cast<std::size_t>(i * p.topk + j)];
        if (v >= 0 && v < p.s_kv) {
          EXPECT_LT(v, sees) << "row " << i << " lists a position it may not see";
          EXPECT_TRUE(keys.insert(v).second) << "row " << i << " lists " << v << " twice";
        }
      }
      if (keys.empty()) ++rows_without_key;
      else EXPECT_EQ(static_cast<int64_t>(keys.size()), std::min<int64_t>(sees, p.topk)) << "row " << i;
      if (sees < p.topk) ++short_rows;
    }
    EXPECT_EQ(rows_without_key, p.edge ? 1 : 0);
    if (p.s_q == p.s_kv) EXPECT_GT(short_rows, 0);
  }
}

TEST_F(PhaseRows, TooLargeIsRefusedBeforeAnyInputIsBuilt) {
  RecordingSide side;
  const auto error = run_row("phase/too_large", 2, [&](benchmark::State& st) {
    (void)mla::bench::time_prefill_row(st, {&prefill_kernel("cpu_prefill_fp64"), ax::find_prefill(kPrefillPoint), 1}, side);
  });
  EXPECT_EQ(error.rfind("too large for this machine: ", 0), 0u) << error;
  EXPECT_EQ(side.calls, 0);
}

// The benchmark JSON's row of `kernel` at `point` (the median aggregate, else the first run).
const nlohmann::json* row_of(const nlohmann::json& doc, const std::string& kernel, const std::string& point) {
  const nlohmann::json* found = nullptr;
  for (const auto& b : doc["benchmarks"]) {
    if (b.value("run_name", "") != "mla/" + kernel + "/" + point + "/manual_time") continue;
    if (!found || b.value("aggregate_name", "") == "median") found = &b;
  }
  return found;
}

TEST_F(PhaseRows, MlaBenchWritesTimedPhaseRowsAgainstItsCeilings) {
  const auto out = std::filesystem::temp_directory_path() / ("mla_bench_phase_" + std::to_string(::getpid()) + ".json");
  const std::string cmd = std::string("\"") + MLA_BENCH_EXE + "\" --mla_quick --mla_points=" + kPrefillPoint +
                          ",cpu_merge_bf16_t2048_h16_d128,indexer_logits_edge_paged_b3_n2_bs16_ctx67,"
                          "topk_edge_r12_n4096_k2048,cpu_sparse_prefill_h16_sq128_skv1024_k256 "
                          "--mla_kernels=cpu_prefill_fp64,cpu_merge_f32,cpu_indexer_logits,cpu_topk_radix_f32,"
                          "cpu_sparse_prefill_f32 "
                          "--mla_stream_mib=64 --mla_ceiling_reps=1 --benchmark_repetitions=2 "
                          "--benchmark_out=" + out.string() + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::filesystem::remove(out);
  // The cv aggregate of a constant counter is 0/0, written as NaN (which the report's Python
  // reads); nlohmann's strict parser wants null there.
  for (const std::string nan : {"-NaN", "NaN"}) {
    for (std::size_t at; (at = text.find(": " + nan)) != std::string::npos;) text.replace(at + 2, nan.size(), "null");
  }
  const auto doc = nlohmann::json::parse(text);
  // Points and kernels in the context, as the report reads them.
  const auto points = nlohmann::json::parse(doc["context"]["mla_points"].get<std::string>());
  EXPECT_EQ(points[kPrefillPoint]["axis"], "prefill");
  EXPECT_EQ(points["cpu_merge_bf16_t2048_h16_d128"]["axis"], "merge");
  EXPECT_EQ(points["indexer_logits_edge_paged_b3_n2_bs16_ctx67"]["axis"], "indexer_logits");
  EXPECT_EQ(points["topk_edge_r12_n4096_k2048"]["axis"], "topk");
  EXPECT_EQ(points["cpu_sparse_prefill_h16_sq128_skv1024_k256"]["axis"], "sparse_prefill");
  // The top-k row: no FLOPs, memory-bound, and its rate in logits read per second of wall time.
  const auto* tp = ax::find_topk("topk_edge_r12_n4096_k2048");
  // One repetition's row (not an aggregate: the median of a rate and of a time are taken apart):
  // its rate times its mean manual time is the logits one call reads.
  const nlohmann::json* tr = nullptr;
  for (const auto& b : doc["benchmarks"])
    if (b.value("run_name", "") == "mla/cpu_topk_radix_f32/" + tp->name + "/manual_time" &&
        b.value("run_type", "") == "iteration")
      tr = &b;
  ASSERT_NE(tr, nullptr);
  EXPECT_FALSE(tr->value("error_occurred", false)) << tr->value("error_message", "");
  EXPECT_EQ((*tr)["model_flops"].get<double>(), 0.0);
  EXPECT_EQ((*tr)["memory_bound"].get<double>(), 1.0);
  const std::string unit = tr->value("time_unit", "ns");
  const double per_unit = unit == "s" ? 1.0 : unit == "ms" ? 1e-3 : unit == "us" ? 1e-6 : 1e-9;
  const double seconds = (*tr)["real_time"].get<double>() * per_unit;
  ASSERT_GT(seconds, 0);
  EXPECT_NEAR((*tr)["logits_per_second"].get<double>() * seconds, static_cast<double>(ax::logits_read(*tp)),
              1e-6 * static_cast<double>(ax::logits_read(*tp)));

  const auto* pp = ax::find_prefill(kPrefillPoint);
  const auto* mp = ax::find_merge("cpu_merge_bf16_t2048_h16_d128");
  const auto& pk = prefill_kernel("cpu_prefill_fp64");
  const auto& mk = merge_kernel("cpu_merge_f32");
  const double prefill_flops = pk.cost(ax::build_inputs(*pp).view()).flops;
  const double merge_flops = mk.cost(mp->shape).flops;
  const auto* lp = ax::find_indexer_logits("indexer_logits_edge_paged_b3_n2_bs16_ctx67");
  const auto& lk = logits_kernel("cpu_indexer_logits");
  const double logits_flops = lk.cost(ax::build_inputs(*lp).view()).flops;
  const auto* sp = ax::find_sparse_prefill("cpu_sparse_prefill_h16_sq128_skv1024_k256");
  const auto* sk = mla::Registry::instance().find_sparse_prefill("cpu_sparse_prefill_f32");
  ASSERT_NE(sk, nullptr);
  const double sparse_flops = sk->cost(ax::build_inputs(*sp).view()).flops;
  for (const auto& [kernel, point, flops, memory_bound] :
       {std::tuple{pk.info().name, pp->name, prefill_flops, 0.0}, std::tuple{mk.info().name, mp->name, merge_flops, 1.0},
        std::tuple{lk.info().name, lp->name, logits_flops, 0.0},
        std::tuple{sk->info().name, sp->name, sparse_flops, 0.0}}) {
    SCOPED_TRACE(kernel + "/" + point);
    const auto* r = row_of(doc, kernel, point);
    ASSERT_NE(r, nullptr);
    EXPECT_FALSE(r->value("error_occurred", false)) << r->value("error_message", "");
    ASSERT_TRUE(r->contains("pct_of_ceiling"));
    EXPECT_GT((*r)["pct_of_ceiling"].get<double>(), 0);
    EXPECT_DOUBLE_EQ((*r)["model_flops"].get<double>(), flops);
    // The bound is the row's intensity against the ridge of the ceilings measured in this run
    // (which a loaded machine moves: a bandwidth probe that shared its cores reads low), and the
    // kinds sit on the sides the models put them: prefill at tens of FLOPs a byte, merge below
    // one, the indexer logits at 64 heads about 2 * 64 FLOPs per key byte (each key is scored by
    // every head), right of every CPU ridge; the sparse prefill at 16 heads sharing each gathered
    // 1152-byte key row, about 2 * 16 * 1088 FLOPs for it, right of the ridge too.
    const double ai = (*r)["ai_flop_per_byte"].get<double>(), ridge = (*r)["ridge_flop_per_byte"].get<double>();
    EXPECT_EQ((*r)["memory_bound"].get<double>(), ai < ridge ? 1.0 : 0.0) << "ai " << ai << ", ridge " << ridge;
    if (memory_bound == 1.0) {
      EXPECT_LT(ai, 1.0);
    } else {
      EXPECT_GT(ai, 10.0);
    }
  }
}

}  // namespace
