// The one benchmark harness of mla-bench, host and device side (suites/device): what a point
// and an implementation are in the JSON context, and the counters and label words that put a
// timed kernel row against its roofs. Both sides write through these functions, so reports/tools
// reads one format whichever side timed a row. Header-only: the device side links neither the
// CPU ceilings nor mla-bench's main.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "mla/core/attention.hpp"
#include "mla/core/kernel.hpp"
#include "mla/workloads/axes.hpp"

namespace mla::bench {

// One mla_points entry: the point's shape, what it is for and what it was scaled from.
inline nlohmann::ordered_json point_json(const axes::AxisPoint& p) {
  int32_t mx = 0;
  for (int32_t l : p.seqlens) mx = std::max(mx, l);
  return {{"axis", axes::to_string(p.axis)},
          {"why", p.why},
          {"scaled_from", p.scaled_from},
          {"batch", p.shape.batch},
          {"s_q", p.shape.s_q},
          {"heads", p.shape.heads},
          {"page_size", p.shape.page_size},
          {"topk", p.shape.topk},
          {"cache_format", to_string(p.shape.cache_format)},
          {"scale_fmt", p.shape.cache_format != CacheFormat::fp8 ? ""
                        : p.scale_fmt == ScaleFmt::ue8m0   ? "ue8m0"
                                                           : "fp32"},
          {"seqlen_max", mx},
          {"seqlen_mean", p.shape.batch ? static_cast<double>(p.total_tokens()) / p.shape.batch : 0.0},
          {"total_tokens", p.total_tokens()},
          {"seed", p.seed}};
}

// The roofs that judge one implementation: keys of mla_ceilings and their measured values.
// Empty names: none measured in this run for it (the row says so instead of a % of a wrong roof).
struct Roof {
  std::string bw_name, peak_name;
  double bw = 0, peak = 0;
  bool known() const { return !bw_name.empty() && !peak_name.empty() && bw > 0 && peak > 0; }
};

// One mla_kernels entry.
inline nlohmann::ordered_json kernel_json(const AttentionImpl& impl, const Roof& roof) {
  const auto why = impl.unavailable();
  auto name_or_null = [](const std::string& s) { return s.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(s); };
  return {{"name", impl.info().name},
          {"backend", impl.info().backend},
          {"description", impl.info().description},
          {"role", to_string(impl.info().role)},
          {"out_dtype", to_string(impl.info().out_dtype)},
          {"unavailable", why ? *why : ""},
          {"roof_bw", name_or_null(roof.bw_name)},
          {"roof_peak", name_or_null(roof.peak_name)}};
}

// The counters of a timed kernel row from its cost model and the summed seconds of its
// iterations: bytes and FLOP rates, the models, the arithmetic intensity, and against `roof`
// the % of each ceiling, the bound (below the ridge: memory) and the % of the binding one.
// Returns the label's first words ("memory-bound; roof read_bw+fma_f64"), or "" when the roof
// is unknown (the caller says why).
inline std::string roofline_counters(benchmark::State& st, const CostModel& cost, double seconds, const Roof& roof) {
  using C = benchmark::Counter;
  const double iters = static_cast<double>(st.iterations());
  st.SetBytesProcessed(static_cast<int64_t>(cost.bytes) * st.iterations());
  st.counters["flop_per_second"] = C(cost.flops, C::kIsIterationInvariantRate);
  st.counters["model_bytes"] = C(cost.bytes);
  st.counters["model_flops"] = C(cost.flops);
  const double ai = cost.bytes > 0 ? cost.flops / cost.bytes : 0.0;
  st.counters["ai_flop_per_byte"] = C(ai);
  if (!roof.known() || seconds <= 0) return "";
  const double bps = cost.bytes * iters / seconds, fps = cost.flops * iters / seconds;
  const double ridge = roof.peak / roof.bw;
  const bool mem = ai < ridge;
  st.counters["pct_of_bw_ceiling"] = C(100.0 * bps / roof.bw);
  st.counters["pct_of_flop_ceiling"] = C(100.0 * fps / roof.peak);
  st.counters["pct_of_ceiling"] = C(100.0 * (mem ? bps / roof.bw : fps / roof.peak));
  st.counters["memory_bound"] = C(mem ? 1.0 : 0.0);
  st.counters["ridge_flop_per_byte"] = C(ridge);
  return std::string(mem ? "memory-bound" : "compute-bound") + "; roof " + roof.bw_name + "+" + roof.peak_name;
}

}  // namespace mla::bench
