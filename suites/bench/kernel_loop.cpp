#include "kernel_loop.hpp"

#include <chrono>
#include <iostream>
#include <utility>

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla::bench {
namespace {

using Clock = std::chrono::steady_clock;

// One axis point's inputs and one implementation's prepared state, kept across Google
// Benchmark's calls of the same benchmark (once per trial and repetition); replaced when the
// point or the implementation changes.
struct CaseCache {
  std::string point;
  std::optional<axes::SyntheticInputs> inputs;
  std::string prepared_key;
  std::unique_ptr<PreparedAttention> prepared;

  void clear() {
    prepared.reset();  // device buffers first: they are the scarce ones
    prepared_key.clear();
    inputs.reset();
    point.clear();
  }
};

CaseCache& cache() {
  static CaseCache c;
  return c;
}

}  // namespace

double HostClockTimer::time_call(TimedCall& run) {
  const auto t0 = Clock::now();
  run.run();
  run.synchronize();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

const axes::SyntheticInputs& case_inputs(const axes::AxisPoint& p) {
  CaseCache& c = cache();
  if (c.point != p.name || !c.inputs) {
    c.clear();
    const auto t0 = Clock::now();
    c.inputs.emplace(axes::build_inputs(p));
    c.point = p.name;
    std::cerr << fmt::format("[mla-bench] built inputs of {} ({:.1f} MiB) in {:.2f} s\n", p.name,
                             static_cast<double>(axes::footprint(p).total()) / (1 << 20),
                             std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return *c.inputs;
}

PreparedAttention& case_prepared(const AttentionImpl& impl, const axes::AxisPoint& p) {
  CaseCache& c = cache();
  const std::string key = impl.info().name + "/" + p.name;
  if (c.prepared_key != key || !c.prepared) {
    c.prepared.reset();
    c.prepared_key.clear();
    c.prepared = impl.prepare(case_inputs(p).view());
    c.prepared_key = key;
  }
  return *c.prepared;
}

PointJudge& point_judge() {
  static PointJudge j;
  return j;
}

void release_case_cache() {
  cache().clear();
  point_judge() = PointJudge{};
}

namespace {

// The refusals that need no inputs: the reason, or nullopt when the row may run.
std::optional<std::string> refusal(const RowCase& rc) {
  const AttentionImpl& impl = *rc.impl;
  const axes::AxisPoint& p = *rc.point;
  if (!rc.not_timed.empty()) return rc.not_timed;
  if (auto why = impl.unavailable()) return "unavailable: " + *why;
  if (auto why = impl.check(p.shape)) return "unsupported: " + *why;
  if (rc.claim) {
    const auto scale = p.shape.cache_format == CacheFormat::fp8 ? std::optional<ScaleFmt>(p.scale_fmt) : std::nullopt;
    if (auto why = rc.claim(p.shape, scale)) return "unsupported: the kernel's can_implement: " + *why;
  }
  return too_large(axes::footprint(p).peak(), rc.mem_budget);
}

}  // namespace

std::optional<std::string> too_large(std::size_t bytes, std::size_t budget) {
  if (!budget || bytes <= budget / 4) return std::nullopt;
  return fmt::format("too large for this machine: inputs {:.2f} GiB > a quarter of the {:.2f} GiB budget",
                     static_cast<double>(bytes) / (1 << 30), static_cast<double>(budget) / (1 << 30));
}

bool time_calls(benchmark::State& st, CallTimer& timer, TimedCall& call, RowResult& r, const SelfTimed* self_timed) {
  // The whole loop, flushes included, against what the machine did meanwhile (machine_load).
  const MachineCpu m0 = machine_cpu();
  const double loop_c0 = process_cpu_seconds();
  const auto loop_t0 = Clock::now();
  bool ok = true;
  for (auto _ : st) {
    double dt = 0;
    double c0 = 0;
    try {
      timer.flush();
      c0 = process_cpu_seconds();
      dt = timer.time_call(call);
    } catch (const std::exception& e) {
      // Inside the loop, so Google Benchmark ends the run cleanly (its documented pattern).
      r.error = std::string("error in run(): ") + e.what();
      st.SkipWithError(r.error.c_str());
      ok = false;
      break;
    }
    r.cpu_seconds += process_cpu_seconds() - c0;
    if (const auto own = self_timed ? self_timed->last_run_seconds() : std::nullopt)
      r.round_trip_seconds += std::exchange(dt, *own);
    st.SetIterationTime(dt);
    r.seconds.push_back(dt);
  }
  const double loop_wall = std::chrono::duration<double>(Clock::now() - loop_t0).count();
  r.load = machine_load(m0, machine_cpu(), process_cpu_seconds() - loop_c0, loop_wall);
  return ok;
}

RowResult time_kernel_row(benchmark::State& st, const RowCase& rc, RowSide& side) {
  RowResult r;
  const AttentionImpl& impl = *rc.impl;
  const axes::AxisPoint& p = *rc.point;
  const std::string row = fmt::format("mla/{}/{}", impl.info().name, p.name);
  auto skip = [&](std::string why) {
    r.error = std::move(why);
    st.SkipWithError(r.error.c_str());
    return r;
  };
  if (auto why = side.refuse()) return skip(*why);
  if (auto why = refusal(rc)) return skip(*why);
  try {
    const AttnInputs in = case_inputs(p).view();
    PreparedAttention& run = case_prepared(impl, p);
    // Speed only where correct: one judge, table and truth for every row (point_judge.hpp).
    if (!rc.overhead)
      if (auto why = point_judge().failure(impl, run, p.name, in)) return skip(*why);
    // The byte/FLOP model of exactly the call timed below: one run() over `in`.
    r.cost = impl.cost(in);
    const std::unique_ptr<CallTimer> timer = side.timer(rc, run);
    r.flushed = timer->flushed();
    // A kernel that runs in another process clocks each call there (mla::SelfTimed): that is its
    // time; the timer's interval also holds the trip to it, kept apart (the path's own cost is its
    // empty twin's row).
    const auto* self_timed = dynamic_cast<const SelfTimed*>(&run);
    PreparedCall<PreparedAttention> call(run);
    if (!time_calls(st, *timer, call, r, self_timed)) side.after_failure(row);
    if (st.error_occurred()) return r;
    // The mean trip per call around a self-timed kernel's own clock: its time plus the path's.
    if (r.round_trip_seconds > 0 && !r.seconds.empty())
      st.counters["round_trip_seconds"] = benchmark::Counter(r.round_trip_seconds / static_cast<double>(r.seconds.size()));
    side.finish(st, rc, in, r);
  } catch (const UnsupportedError& e) {
    return skip(std::string("unsupported: ") + e.what());
  } catch (const std::exception& e) {
    skip(std::string("error: ") + e.what());
    side.after_failure(row);
  }
  return r;
}

}  // namespace mla::bench
