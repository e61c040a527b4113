// The one timing loop (kernel_loop.hpp) through Google Benchmark with a recording side: what a
// side is asked and when (its flush before every timed call, outside the call's CPU time; its
// finish only for a timed row), and the reasons of the rows it does not time.
#include <gtest/gtest.h>

#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <chrono>
#include <vector>

#include "kernel_loop.hpp"
#include "mla/registry/registry.hpp"
#include "mla/workloads/axes.hpp"

namespace {

// Times every call as the host does, counting what the loop asked of it.
class RecordingSide : public mla::bench::RowSide {
 public:
  std::optional<std::string> refuse_all;
  int flushes = 0, calls = 0, finishes = 0, failures = 0;
  std::vector<double> finished_seconds;

  std::optional<std::string> refuse() override { return refuse_all; }
  std::unique_ptr<mla::bench::CallTimer> timer(const mla::bench::RowCase&, mla::PreparedAttention&) override {
    return std::make_unique<Timer>(*this);
  }
  void after_failure(const std::string&) override { ++failures; }
  void finish(benchmark::State&, const mla::bench::RowCase&, const mla::AttnInputs&,
              const mla::bench::RowResult& r) override {
    ++finishes;
    finished_seconds = r.seconds;
  }

 private:
  struct Timer : mla::bench::CallTimer {
    explicit Timer(RecordingSide& s) : side(s) {}
    RecordingSide& side;
    void flush() override {
      ++side.flushes;
      // Burns CPU time the loop must not count for the call (cpu_seconds).
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    double time_call(mla::bench::TimedCall& run) override {
      ++side.calls;
      return mla::bench::HostClockTimer().time_call(run);
    }
    bool flushed() const override { return true; }
  };
};

// Collects each run's error message (empty: timed).
class Collect : public benchmark::BenchmarkReporter {
 public:
  std::map<std::string, std::string> errors;
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) errors[r.benchmark_name()] = r.error_occurred ? r.error_message : "";
  }
};

// One row of `kernel` at `point` through the loop, `iterations` timed calls.
mla::bench::RowResult run_row(RecordingSide& side, mla::bench::RowCase rc, int iterations, std::string* error) {
  mla::bench::RowResult result;
  const std::string name = "loop/" + rc.impl->info().name + "/" + rc.point->name + "/" + std::to_string(iterations);
  benchmark::RegisterBenchmark(name.c_str(), [&](benchmark::State& st) { result = mla::bench::time_kernel_row(st, rc, side); })
      ->UseManualTime()
      ->Iterations(iterations);
  Collect collect;
  // Google Benchmark appends its own parts (iterations:N, manual_time) to the name.
  std::string filter = "^" + name + "/";
  benchmark::SetBenchmarkFilter(filter);
  benchmark::RunSpecifiedBenchmarks(&collect);
  benchmark::ClearRegisteredBenchmarks();
  *error = collect.errors.empty() ? "not run" : collect.errors.begin()->second;
  return result;
}

class KernelLoop : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { mla::register_builtin_kernels(); }
  void TearDown() override { mla::bench::release_case_cache(); }
  mla::bench::RowCase row(const char* kernel, const char* point) {
    mla::bench::RowCase rc;
    rc.impl = mla::Registry::instance().find(kernel);
    rc.point = mla::axes::find(point);
    EXPECT_NE(rc.impl, nullptr) << kernel;
    EXPECT_NE(rc.point, nullptr) << point;
    return rc;
  }
};

TEST_F(KernelLoop, FlushesBeforeEveryTimedCallOutsideItsCpuTimeAndFinishesATimedRow) {
  RecordingSide side;
  std::string error;
  const auto r = run_row(side, row("cpu_mla_fp64", "edge_len1"), 4, &error);
  EXPECT_EQ(error, "");
  EXPECT_EQ(side.calls, 4);
  EXPECT_EQ(side.flushes, 4);
  EXPECT_EQ(side.finishes, 1);
  ASSERT_EQ(r.seconds.size(), 4u);
  EXPECT_EQ(side.finished_seconds, r.seconds);
  EXPECT_TRUE(r.flushed);
  EXPECT_GT(r.cost.flops, 0);
  // Four flushes burned >= 80 ms of CPU; none of it is the calls' (a call at edge_len1 is
  // microseconds), so what the loop counted must stay below one flush.
  EXPECT_LT(r.cpu_seconds, 0.02);
}

TEST_F(KernelLoop, RowsNotTimedSayWhyAndNeverReachTheTimer) {
  RecordingSide side;
  std::string error;
  auto rc = row("cpu_mla_fp64", "edge_len1");
  rc.not_timed = "not timed: outside the external points";
  auto r = run_row(side, rc, 2, &error);
  EXPECT_EQ(error, "not timed: outside the external points");
  EXPECT_EQ(r.error, error);

  rc.not_timed.clear();
  rc.claim = [](const mla::AttnShape&, std::optional<mla::ScaleFmt>) { return std::optional<std::string>("no single tokens"); };
  r = run_row(side, rc, 2, &error);
  EXPECT_EQ(error, "unsupported: the kernel's can_implement: no single tokens");

  rc.claim = {};
  rc.mem_budget = 1;  // a quarter of one byte: every point is too large
  r = run_row(side, rc, 2, &error);
  EXPECT_EQ(error.rfind("too large for this machine: ", 0), 0u) << error;

  rc.mem_budget = 0;
  side.refuse_all = "not run: an earlier row left the CUDA context unusable: x";
  r = run_row(side, rc, 2, &error);
  EXPECT_EQ(error, *side.refuse_all);

  EXPECT_EQ(side.calls, 0);
  EXPECT_EQ(side.flushes, 0);
  EXPECT_EQ(side.finishes, 0);
}

}  // namespace
