// The one timing loop of mla-bench: a kernel row `mla/<kernel>/<point>` whether the kernel is
// timed on the host or on a device. What every row does the same way lives here (the refusals
// and their reasons, the point's inputs and the prepared call kept across Google Benchmark's
// repetitions, the judging before timing, the per-call loop and its error handling); what
// differs is a RowSide: how one call is timed and what is evicted before it (a CallTimer: host
// clock after a host LLC eviction, or CUDA events after a device L2 flush), which counters and
// label the row gets, and what a failed call may have broken (a device's CUDA context).
//
// Free of CUDA: suites/device implements the device side against this header, so mla-bench
// links CUDA only through that library.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_host.hpp"
#include "point_judge.hpp"
#include "mla/core/kernel.hpp"
#include "mla/workloads/axes.hpp"

namespace mla::bench {

// One call of a prepared kernel of any kind (decode attention, prefill, merge) as the timers
// drive it: the timed work and the wait for its completion.
class TimedCall {
 public:
  virtual ~TimedCall() = default;
  virtual void run() = 0;
  virtual void synchronize() = 0;
};

// A prepared call of any kind (PreparedAttention, PreparedPrefill, PreparedMerge) as a TimedCall.
template <class Prepared>
class PreparedCall final : public TimedCall {
 public:
  explicit PreparedCall(Prepared& p) : p_(p) {}
  void run() override { p_.run(); }
  void synchronize() override { p_.synchronize(); }

 private:
  Prepared& p_;
};

// How one call is timed and what is evicted before it (untimed).
class CallTimer {
 public:
  virtual ~CallTimer() = default;
  // Evicts what this timer evicts before a call (untimed, outside the CPU time counted for the
  // call); nothing for a warm timer.
  virtual void flush() {}
  // Times one call of `run` (its work through completion); returns the seconds of the timed
  // interval. Throws what run() throws.
  virtual double time_call(TimedCall& run) = 0;
  // Whether a cache was evicted before each call (the row's cold_cache counter).
  virtual bool flushed() const = 0;
};

// The host clock around run() + synchronize(), after `flush` (nullptr: warm caches).
class HostClockTimer : public CallTimer {
 public:
  explicit HostClockTimer(std::function<void()> flush = {}) : flush_(std::move(flush)) {}
  void flush() override {
    if (flush_) flush_();
  }
  double time_call(TimedCall& run) override;
  bool flushed() const override { return static_cast<bool>(flush_); }

 private:
  std::function<void()> flush_;
};

// Calls per repetition of an overhead row (a calling path with an empty kernel). A fixed count:
// by minimum time, a path of microseconds would need tens of thousands of calls, each after a
// cache eviction of milliseconds, so one repetition would take minutes; 100 calls bound it to
// about 100 evictions and still resolve a microsecond path.
inline constexpr int kOverheadCalls = 100;

// One row: which kernel at which point, and what the caller knows about the kernel.
struct RowCase {
  const AttentionImpl* impl = nullptr;
  const axes::AxisPoint* point = nullptr;
  std::size_t mem_budget = 0;  // refuse points whose inputs exceed a quarter of it (0: no limit)
  // An external kernel's own answer on the point's shape and FP8 scale format (empty: none).
  std::function<std::optional<std::string>(const AttnShape&, std::optional<ScaleFmt>)> claim;
  std::string not_timed;        // a reason decided before the run (not empty: the row's skip reason)
  bool overhead = false;        // a calling path with an empty kernel: timed, never judged
  bool out_of_process = false;  // computes in another process (a Python kernel's door child)
};

// What a row measured, or why it did not (error: the row's skip reason, empty when timed).
struct RowResult {
  std::vector<double> seconds;  // each timed call
  double cpu_seconds = 0;       // this process's CPU time during the timed calls
  MachineLoad load;             // the rest of the machine during the whole loop
  CostModel cost;               // the byte/FLOP model of one call
  bool flushed = false;
  // Kernels that clock their own calls (SelfTimed): the sum of the timer's intervals around them,
  // the trip included; 0 for every other kernel.
  double round_trip_seconds = 0;
  // The logits one call reads, for a kind measured in logits per second (top-k); 0 otherwise.
  double logits = 0;
  std::string error;
  double total() const {
    double s = 0;
    for (double x : seconds) s += x;
    return s;
  }
};

// Host or device: what differs between a row timed here and one timed on a device.
class RowSide {
 public:
  virtual ~RowSide() = default;
  // A reason to refuse every row before anything runs (a device context left unusable).
  virtual std::optional<std::string> refuse() { return std::nullopt; }
  // The timer of this row's calls; `run` is the prepared call (a device timer asks it for its
  // stream).
  virtual std::unique_ptr<CallTimer> timer(const RowCase& rc, PreparedAttention& run) = 0;
  // After a call or a prepare threw: note what it may have broken (`row` names it).
  virtual void after_failure(const std::string& row) { (void)row; }
  // The counters and label of a row that was timed.
  virtual void finish(benchmark::State& st, const RowCase& rc, const AttnInputs& in, const RowResult& r) = 0;
};

// One kernel row as a Google Benchmark function body: refusals (unavailable, unsupported, the
// kernel's can_implement, too large), the judge before timing (point_judge.hpp), one timed call
// per iteration (manual time), then side.finish(). A row that is not timed is a SkipWithError
// with the reason, which the result carries too.
RowResult time_kernel_row(benchmark::State& st, const RowCase& rc, RowSide& side);

// "too large for this machine: ..." when inputs of `bytes` exceed a quarter of `budget` (0: no
// limit), else nullopt: the refusal of every kind's rows.
std::optional<std::string> too_large(std::size_t bytes, std::size_t budget);

// The per-call loop of every row, whatever its kind: per iteration the timer's flush (untimed),
// one timed call (manual time), the CPU time of the call; the machine's load over the whole loop
// (flushes included). `self_timed`: the call's own clock replaces the timer's interval (kept as
// round_trip_seconds). A call that throws ends the row: r.error holds "error in run(): ...", the
// state is a SkipWithError, and false is returned (the caller notes what the call may have broken).
bool time_calls(benchmark::State& st, CallTimer& timer, TimedCall& call, RowResult& r,
                const SelfTimed* self_timed = nullptr);

// The inputs of the current point and the prepared call of the current kernel there, shared by
// every row (one point's inputs alive at a time, on the host and on a device), and the judge.
const axes::SyntheticInputs& case_inputs(const axes::AxisPoint& p);
PreparedAttention& case_prepared(const AttentionImpl& impl, const axes::AxisPoint& p);
PointJudge& point_judge();
// Frees the cached inputs, prepared call (device buffers, a door's child) and truths: call after
// RunSpecifiedBenchmarks, before the CUDA runtime is torn down at exit.
void release_case_cache();

}  // namespace mla::bench
