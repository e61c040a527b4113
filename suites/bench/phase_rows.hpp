// The prefill, merge, indexer logits, top-k and sparse prefill rows of mla-bench
// (`mla/<kernel>/<point>`, the point names carrying the kind: prefill_..., cpu_prefill_...,
// merge_..., cpu_merge_..., indexer_logits_..., cpu_indexer_logits_..., topk_..., cpu_topk_...,
// sparse_prefill_..., cpu_sparse_prefill_...), through the same per-call loop,
// timers, flush policy and counters as the decode rows (kernel_loop.hpp, time_calls): refusals
// with their reasons, the point's inputs and the kernel's prepared call kept across Google
// Benchmark's repetitions (one point's inputs alive at a time), the judge before timing, then
// the timed calls.
//
// Speed only where correct: each kernel's output at the point is judged before timing, prefill by
// judge_prefill against the fp64 oracle mla::ref::prefill_attention (and, for a kernel that is
// not fp64, the bf16 pipeline mla::ref::prefill_same_dtype the ratio rule measures against), merge
// by judge_merge against mla::ref::merge_states, a sparse prefill by judge_sparse_prefill against
// mla::ref::sparse_prefill_fp64 (and the bf16 pipeline for a kernel that is not fp64); inputs cross to the kernel's conventions and its
// outputs back through the one boundary (inputs_to_kernel, outputs_to_canonical). A point it does
// not pass is a "not timed: FAIL (...)" row.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <variant>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "kernel_loop.hpp"
#include "mla/core/indexer_logits.hpp"
#include "mla/core/merge.hpp"
#include "mla/core/topk.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/core/sparse_prefill.hpp"
#include "mla/workloads/phase_axes.hpp"

namespace mla::bench {

// What the host side needs of a kernel of any kind to time it and count its row.
struct KernelFacts {
  std::string name, backend;
  // The precision its FLOPs run in: f64 is judged against the fp64 FMA roof, else the fp32 one.
  OutDType compute = OutDType::f64;
  // It computes in another process (a Python kernel's entry, or its overhead twin): this
  // process's CPU time says nothing of it.
  bool out_of_process = false;
};
KernelFacts facts_of(const PrefillImpl& impl);
// Merge kernels declare state dtypes, not a compute precision: they compute in fp32 (no merge
// kernel widens to fp64), and are memory-bound whichever FMA roof they are held to.
KernelFacts facts_of(const MergeImpl& impl);
// Indexer logits kernels compute in fp32 (the contract's float32 logits); memory-bound too.
KernelFacts facts_of(const IndexerLogitsImpl& impl);
// Top-k kernels do no arithmetic (the cost model counts bytes only); fp32 for the roof's sake.
KernelFacts facts_of(const TopkImpl& impl);
// A sparse prefill computes in its declared precision class: fp64 only for an fp64 kernel.
KernelFacts facts_of(const SparsePrefillImpl& impl);

// The points and kernels in the JSON context (mla_points, mla_kernels), in the decode rows'
// vocabulary where it applies (axis, why, scaled_from, heads, total_tokens, seed; a kernel's
// backend, role, out_dtype, roofs) plus each kind's own shape fields.
nlohmann::ordered_json point_json(const axes::PrefillPoint& p);
nlohmann::ordered_json point_json(const axes::MergePoint& p);
nlohmann::ordered_json point_json(const axes::IndexerLogitsPoint& p);
nlohmann::ordered_json point_json(const axes::TopkPoint& p);
nlohmann::ordered_json point_json(const axes::SparsePrefillPoint& p);
nlohmann::ordered_json kernel_json(const PrefillImpl& impl, const Roof& roof);
nlohmann::ordered_json kernel_json(const MergeImpl& impl, const Roof& roof);
nlohmann::ordered_json kernel_json(const IndexerLogitsImpl& impl, const Roof& roof);
nlohmann::ordered_json kernel_json(const TopkImpl& impl, const Roof& roof);
nlohmann::ordered_json kernel_json(const SparsePrefillImpl& impl, const Roof& roof);

// The prepared call a row times, through its kind's interface: a side may look for more in it
// (the device side casts it to the CUDA kernels' StreamBound, to time the work on its stream with
// events), which a TimedCall wrapper would hide.
using PreparedRef = std::variant<const PreparedPrefill*, const PreparedMerge*, const PreparedTopk*,
                                 const PreparedIndexerLogits*, const PreparedSparsePrefill*>;

// How the run times and counts a row of these kinds: mla-bench's host side, and on a device the
// device side for the CUDA kernels (suites/device/gpu_bench.hpp).
class PhaseSide {
 public:
  virtual ~PhaseSide() = default;
  // The timer of a row whose canonical inputs take `input_bytes`, for the prepared call `call`.
  virtual std::unique_ptr<CallTimer> timer(const KernelFacts& k, std::size_t input_bytes, const PreparedRef& call) = 0;
  // The counters and label of a row that was timed.
  virtual void finish(benchmark::State& st, const KernelFacts& k, const RowResult& r) = 0;
};

// One row of a kind: the kernel, the point, and how it is timed. `overhead`: an external kernel's
// calling path with an entry that does nothing (certify/external_bench.hpp): timed, never judged
// (its outputs mean nothing).
template <class Impl, class Point>
struct PhaseRowCase {
  const Impl* impl = nullptr;
  const Point* point = nullptr;
  std::size_t mem_budget = 0;  // refuse points whose inputs exceed a quarter of it (0: no limit)
  bool overhead = false;
  bool out_of_process = false;  // a Python kernel's entry (KernelFacts::out_of_process)
};
using PrefillRowCase = PhaseRowCase<PrefillImpl, axes::PrefillPoint>;
using MergeRowCase = PhaseRowCase<MergeImpl, axes::MergePoint>;
using TopkRowCase = PhaseRowCase<TopkImpl, axes::TopkPoint>;
using IndexerLogitsRowCase = PhaseRowCase<IndexerLogitsImpl, axes::IndexerLogitsPoint>;
using SparsePrefillRowCase = PhaseRowCase<SparsePrefillImpl, axes::SparsePrefillPoint>;

// One row as a Google Benchmark function body; a row that is not timed is a SkipWithError with
// the reason, which the result carries too.
RowResult time_prefill_row(benchmark::State& st, const PrefillRowCase& rc, PhaseSide& side);
RowResult time_merge_row(benchmark::State& st, const MergeRowCase& rc, PhaseSide& side);
// Indexer logits: judged by judge_indexer_logits (the exact oracle inside it) before timing.
RowResult time_indexer_logits_row(benchmark::State& st, const IndexerLogitsRowCase& rc, PhaseSide& side);
// Top-k: judged by judge_topk before timing; the row also counts the logits a call reads
// (RowResult::logits, the counter logits_per_second).
RowResult time_topk_row(benchmark::State& st, const TopkRowCase& rc, PhaseSide& side);
// Sparse prefill: judged by judge_sparse_prefill (out, lse and max_logits) before timing.
RowResult time_sparse_prefill_row(benchmark::State& st, const SparsePrefillRowCase& rc, PhaseSide& side);

// Truths computed for prefill and merge points and their seconds (untimed), for the run's summary.
int phase_truths();
double phase_truth_seconds();
// Frees the cached inputs, prepared calls and truths.
void release_phase_cache();

}  // namespace mla::bench
