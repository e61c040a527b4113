#include "phase_rows.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/judge/indexer_logits.hpp"
#include "mla/judge/merge.hpp"
#include "mla/judge/topk.hpp"
#include "mla/judge/prefill.hpp"
#include "mla/judge/sparse_prefill.hpp"
#include "mla/ref/prefill.hpp"
#include "mla/ref/sparse_prefill.hpp"
#include "point_judge.hpp"

namespace mla::bench {
namespace {

using Clock = std::chrono::steady_clock;

// One prefill point's canonical inputs and truths, and the current kernel's prepared call there
// (its inputs in the kernel's conventions: V padded into v_storage when it declares so).
struct PrefillState {
  std::string point;
  std::optional<PrefillBuffers> in;
  std::optional<PrefillOutputs> truth, same_dtype;
  std::string key;
  std::vector<uint16_t> v_storage;
  std::unique_ptr<PreparedPrefill> prepared;
};

// One merge point's canonical inputs and truth, and the current kernel's prepared call there (the
// lse in the kernel's base and layout in the two storages).
struct MergeState {
  std::string point;
  std::optional<MergeBuffers> in;
  std::optional<ref::MergeResult> truth;
  std::string key;
  std::vector<float> lse_a, lse_b;
  std::unique_ptr<PreparedMerge> prepared;
};

// One point's inputs and the current kernel's prepared call, for the kinds that keep nothing else
// (no conventions to cross, the truth computed inside their judges): the indexer logits and the
// top-k.
template <class Buffers, class Prepared>
struct PointState {
  std::string point;
  std::optional<Buffers> in;
  std::string key;
  std::unique_ptr<Prepared> prepared;
};
using IndexerLogitsState = PointState<IndexerLogitsBuffers, PreparedIndexerLogits>;
using TopkState = PointState<TopkBuffers, PreparedTopk>;

// One sparse prefill point's inputs and truths (no conventions to cross: the contract's are
// FlashMLA's own), and the current kernel's prepared call there.
struct SparsePrefillState {
  std::string point;
  std::optional<SparsePrefillBuffers> in;
  std::optional<SparsePrefillOutputs> truth, same_dtype;
  std::string key;
  std::unique_ptr<PreparedSparsePrefill> prepared;
};

struct PhaseCache {
  PrefillState prefill;
  MergeState merge;
  IndexerLogitsState indexer_logits;
  TopkState topk;
  SparsePrefillState sparse_prefill;
  std::map<std::string, std::optional<std::string>> verdicts;  // "kernel/point": nullopt = PASS
  int truths = 0;
  double truth_seconds = 0;
};

PhaseCache& phase_cache() {
  static PhaseCache c;
  return c;
}

// Runs `f` (a truth of `point`), counting its time as the run's judging cost.
template <class F>
auto timed_truth(const std::string& point, const char* what, F f) {
  const auto t0 = Clock::now();
  auto r = f();
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  ++phase_cache().truths;
  phase_cache().truth_seconds += dt;
  std::cerr << fmt::format("[mla-bench] truth of {} ({}) in {:.2f} s\n", point, what, dt);
  return r;
}

// The inputs of `p`, built when the point changes (one point's inputs alive at a time: the other
// kind's state is dropped too).
template <class State, class Point>
State& point_state(State& s, const Point& p) {
  if (s.point == p.name && s.in) return s;
  phase_cache().prefill = PrefillState{};
  phase_cache().merge = MergeState{};
  phase_cache().indexer_logits = IndexerLogitsState{};
  phase_cache().topk = TopkState{};
  phase_cache().sparse_prefill = SparsePrefillState{};
  const auto t0 = Clock::now();
  s.in.emplace(axes::build_inputs(p));
  s.point = p.name;
  std::cerr << fmt::format("[mla-bench] built inputs of {} ({:.1f} MiB) in {:.2f} s\n", p.name,
                           static_cast<double>(axes::input_bytes(p)) / (1 << 20),
                           std::chrono::duration<double>(Clock::now() - t0).count());
  return s;
}

// One untimed call of `run`: the reason a row is not timed when it throws, else nullopt and `got`.
template <class Prepared, class Outputs>
std::optional<std::string> judged_call(Prepared& run, Outputs& got) {
  try {
    run.run();
    run.synchronize();
    got = run.results();
  } catch (const UnsupportedError& e) {
    return fmt::format("not timed: refused at run time: {}", e.what());
  } catch (const std::exception& e) {
    return fmt::format("not timed: ERROR in run(): {}", e.what());
  }
  return std::nullopt;
}

std::optional<std::string> judge_prefill_call(const PrefillImpl& impl, PrefillState& s) {
  const PrefillInputs in = s.in->view();
  PrefillOutputs got;
  if (auto why = judged_call(*s.prepared, got)) return why;
  outputs_to_canonical(impl.info().conventions, in.shape, got);
  if (!s.truth) s.truth = timed_truth(s.point, "fp64 oracle", [&] { return ref::prefill_attention(in); });
  PrefillTruth t{s.truth->out, s.truth->lse, {}, {}};
  // The ratio rule's reference, for a kernel that is not fp64 (judge_prefill arms it then).
  if (impl.info().out_dtype != OutDType::f64) {
    if (!s.same_dtype)
      s.same_dtype = timed_truth(s.point, "bf16 pipeline", [&] { return ref::prefill_same_dtype(in, OutDType::bf16); });
    t.same_dtype_out = s.same_dtype->out, t.same_dtype_lse = s.same_dtype->lse;
  }
  return not_timed_reason(judge_prefill(in.shape, {impl.info().out_dtype, impl.info().compute}, got, t));
}

std::optional<std::string> judge_merge_call(const MergeImpl& impl, MergeState& s) {
  const MergeInputs in = s.in->view();
  MergeOutputs got;
  if (auto why = judged_call(*s.prepared, got)) return why;
  outputs_to_canonical(impl.info().conventions, in.shape, got);
  if (!s.truth) s.truth = timed_truth(s.point, "fp64 oracle", [&] { return ref::merge_states(in); });
  return not_timed_reason(judge_merge(in.shape, got, {s.truth->out, s.truth->lse}));
}

// The oracle's exact scores are computed inside the judge (judge_indexer_logits), once per kernel
// and point like every verdict here, and counted as the run's judging cost.
std::optional<std::string> judge_indexer_logits_call(IndexerLogitsState& s) {
  std::vector<float> got;
  if (auto why = judged_call(*s.prepared, got)) return why;
  const auto j = timed_truth(s.point, "exact oracle and judge", [&] { return judge_indexer_logits(s.in->view(), got); });
  return not_timed_reason(j.verdict == tol::Verdict::pass, j.reasons);
}

// The indices made canonical (the kernel's declared index base), then judged against the logits
// it was given by judge_topk, with the near-tie tolerance of the precision it declares.
std::optional<std::string> judge_topk_call(const TopkImpl& impl, TopkState& s) {
  TopkOutputs got;
  if (auto why = judged_call(*s.prepared, got)) return why;
  const TopkInputs in = s.in->view();
  topk_outputs_to_canonical(impl.info().conventions, in, got);
  const auto j = timed_truth(s.point, "judge", [&] {
    return judge_topk(in, got, impl.info().precision, impl.info().conventions.sorted);
  });
  return not_timed_reason(j.pass(), j.reasons);
}

std::optional<std::string> judge_sparse_prefill_call(const SparsePrefillImpl& impl, SparsePrefillState& s) {
  SparsePrefillOutputs got;
  if (auto why = judged_call(*s.prepared, got)) return why;
  const SparsePrefillInputs in = s.in->view();
  if (!s.truth) s.truth = timed_truth(s.point, "fp64 oracle", [&] { return ref::sparse_prefill_fp64(in); });
  // The ratio rule's reference, for a kernel that is not fp64 (judge_sparse_prefill arms it then).
  const SparsePrefillOutputs* same = nullptr;
  if (impl.info().out_dtype != OutDType::f64) {
    if (!s.same_dtype)
      s.same_dtype = timed_truth(s.point, "bf16 pipeline", [&] { return ref::sparse_prefill_same_dtype(in, OutDType::bf16); });
    same = &*s.same_dtype;
  }
  const auto j = judge_sparse_prefill(in.shape, {impl.info().out_dtype, impl.info().compute}, got, *s.truth, same);
  return not_timed_reason(j.pass(), j.reasons);
}

// A judged kernel ready to time: the byte/FLOP model of one call and the call.
struct Ready {
  CostModel cost;
  std::unique_ptr<TimedCall> call;
  double logits = 0;  // the logits one call reads (top-k rows); 0 for the other kinds
  // A kernel that runs in another process and clocks each call there (a Python kernel's entry):
  // its clock is the row's time, the trip to it kept apart (round_trip_seconds).
  const SelfTimed* self_timed = nullptr;
  PreparedRef prepared;  // for the side's timer
};

KernelFacts with_process(KernelFacts k, bool out_of_process) {
  k.out_of_process = out_of_process;
  return k;
}

// The prepared call as a TimedCall, with its own clock when it has one.
template <class Prepared>
Ready ready(CostModel cost, Prepared& p, double logits = 0) {
  return Ready{cost, std::make_unique<PreparedCall<Prepared>>(p), logits, dynamic_cast<const SelfTimed*>(&p),
               PreparedRef(static_cast<const Prepared*>(&p))};
}
using Setup = std::variant<std::string, Ready>;  // the reason the row is not timed, or the call

// What every prefill and merge row does the same way: the refusals before any input exists, the
// kind's setup (inputs, check, prepare, judge), then the one per-call loop and the side's counters.
RowResult phase_row(benchmark::State& st, const KernelFacts& k, std::optional<std::string> unavailable,
                    std::size_t input_bytes, std::size_t budget, const std::function<Setup()>& setup, PhaseSide& side) {
  RowResult r;
  auto skip = [&](std::string why) {
    r.error = std::move(why);
    st.SkipWithError(r.error.c_str());
    return r;
  };
  if (unavailable) return skip("unavailable: " + *unavailable);
  if (auto why = too_large(input_bytes, budget)) return skip(*why);
  try {
    Setup s = setup();
    if (auto* why = std::get_if<std::string>(&s)) return skip(*why);
    Ready& ready = std::get<Ready>(s);
    r.cost = ready.cost;
    r.logits = ready.logits;
    const std::unique_ptr<CallTimer> timer = side.timer(k, input_bytes, ready.prepared);
    r.flushed = timer->flushed();
    (void)time_calls(st, *timer, *ready.call, r, ready.self_timed);
    if (st.error_occurred()) return r;
    if (r.round_trip_seconds > 0 && !r.seconds.empty())
      st.counters["round_trip_seconds"] = benchmark::Counter(r.round_trip_seconds / static_cast<double>(r.seconds.size()));
    side.finish(st, k, r);
  } catch (const UnsupportedError& e) {
    return skip(std::string("unsupported: ") + e.what());
  } catch (const std::exception& e) {
    return skip(std::string("error: ") + e.what());
  }
  return r;
}

// The kernel's prepared call at the state's point, prepared again only when the kernel or the
// point changed (Google Benchmark calls a row's body once per repetition). The old call is freed
// first: two points' prepared inputs are never alive together.
template <class State, class Make>
void prepare_once(State& s, const std::string& key, Make make) {
  if (s.key == key && s.prepared) return;
  s.prepared.reset();
  s.key.clear();
  s.prepared = make();
  s.key = key;
}

// The verdict of the kernel of `key` at its point, judged once (Google Benchmark calls a row's
// body once per repetition).
std::optional<std::string> verdict(const std::string& key, const std::function<std::optional<std::string>()>& judge) {
  auto& v = phase_cache().verdicts;
  if (const auto it = v.find(key); it != v.end()) return it->second;
  return v[key] = judge();
}

}  // namespace

KernelFacts facts_of(const PrefillImpl& impl) {
  const auto& i = impl.info();
  return {i.name, i.backend, i.out_dtype == OutDType::f64 ? OutDType::f64 : OutDType::f32};
}

KernelFacts facts_of(const MergeImpl& impl) { return {impl.info().name, impl.info().backend, OutDType::f32}; }

KernelFacts facts_of(const TopkImpl& impl) { return {impl.info().name, impl.info().backend, OutDType::f32}; }

KernelFacts facts_of(const IndexerLogitsImpl& impl) {
  return {impl.info().name, impl.info().backend, OutDType::f32};
}

KernelFacts facts_of(const SparsePrefillImpl& impl) {
  const auto& i = impl.info();
  return {i.name, i.backend, i.out_dtype == OutDType::f64 ? OutDType::f64 : OutDType::f32};
}

nlohmann::ordered_json point_json(const axes::SparsePrefillPoint& p) {
  return {{"axis", "sparse_prefill"}, {"why", p.why},
          {"scaled_from", p.scaled_from}, {"batch", 1},
          {"s_q", p.s_q},
          {"heads", p.heads},         {"topk", p.topk},
          {"edge", p.edge},           {"seqlen_max", p.s_kv},
          {"total_tokens", p.s_kv},   {"seed", p.seed}};
}

nlohmann::ordered_json point_json(const axes::PrefillPoint& p) {
  int32_t sq_max = 0, sk_max = 0;
  for (const auto& q : p.seqs) sq_max = std::max(sq_max, q.s_q), sk_max = std::max(sk_max, q.s_k);
  const auto b = static_cast<double>(p.seqs.size());
  return {{"axis", "prefill"},         {"why", p.why},
          {"scaled_from", p.scaled_from}, {"batch", p.seqs.size()},
          {"s_q", sq_max},             {"heads", p.heads},
          {"causal", p.causal},        {"total_q", p.total_q()},
          {"total_k", p.total_k()},    {"seqlen_max", sk_max},
          {"seqlen_mean", b > 0 ? static_cast<double>(p.total_k()) / b : 0.0},
          {"total_tokens", p.total_k()}, {"seed", p.seed}};
}

nlohmann::ordered_json point_json(const axes::MergePoint& p) {
  return {{"axis", "merge"},
          {"why", p.why},
          {"scaled_from", p.scaled_from},
          {"heads", p.shape.heads},
          {"head_dim", p.shape.head_dim},
          {"dtype", to_string(p.shape.dtype)},
          {"rows", p.rows == axes::MergeRows::finite ? "finite" : "empty_sides"},
          {"total_tokens", p.shape.tokens},
          {"seed", p.seed}};
}

nlohmann::ordered_json point_json(const axes::IndexerLogitsPoint& p) {
  const bool paged = p.layout == IndexerLogitsLayout::paged;
  const int64_t rows = paged ? p.batch * p.next_n : p.batch;
  return {{"axis", "indexer_logits"},
          {"why", p.why},
          {"scaled_from", p.scaled_from},
          {"layout", to_string(p.layout)},
          {"batch", p.batch},
          {"s_q", paged ? p.next_n : 1},
          {"heads", p.heads},
          {"page_size", paged ? p.block_size : 0},
          {"rows", rows},
          {"seqlen_max", p.context},
          {"seqlen_mean", p.context},
          {"total_tokens", paged ? p.batch * p.context : p.context},
          {"seed", p.seed}};
}

nlohmann::ordered_json point_json(const axes::TopkPoint& p) {
  const char* rows = p.rows == axes::TopkRows::decode ? "decode" : p.rows == axes::TopkRows::prefill ? "prefill" : "edge";
  return {{"axis", "topk"},          {"why", p.why},
          {"scaled_from", p.scaled_from}, {"rows", rows},
          {"batch", p.shape.rows},   {"topk", p.shape.k},
          {"seqlen_max", p.shape.n}, {"logits_read", axes::logits_read(p)},
          {"total_tokens", p.shape.n}, {"seed", p.seed}};
}

namespace {

template <class Impl>
nlohmann::ordered_json phase_kernel_json(const Impl& impl, const char* kind, const Roof& roof) {
  const auto why = impl.unavailable();
  const KernelFacts k = facts_of(impl);
  auto name_or_null = [](const std::string& s) { return s.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(s); };
  return {{"name", k.name},
          {"kind", kind},
          {"backend", k.backend},
          {"description", impl.info().description},
          {"role", to_string(impl.info().role)},
          {"out_dtype", to_string(k.compute)},
          {"unavailable", why ? *why : ""},
          {"roof_bw", name_or_null(roof.bw_name)},
          {"roof_peak", name_or_null(roof.peak_name)}};
}

}  // namespace

nlohmann::ordered_json kernel_json(const PrefillImpl& impl, const Roof& roof) {
  return phase_kernel_json(impl, "prefill", roof);
}
nlohmann::ordered_json kernel_json(const MergeImpl& impl, const Roof& roof) { return phase_kernel_json(impl, "merge", roof); }
nlohmann::ordered_json kernel_json(const TopkImpl& impl, const Roof& roof) { return phase_kernel_json(impl, "topk", roof); }
nlohmann::ordered_json kernel_json(const IndexerLogitsImpl& impl, const Roof& roof) {
  return phase_kernel_json(impl, "indexer_logits", roof);
}
nlohmann::ordered_json kernel_json(const SparsePrefillImpl& impl, const Roof& roof) {
  return phase_kernel_json(impl, "sparse_prefill", roof);
}

RowResult time_prefill_row(benchmark::State& st, const PrefillRowCase& rc, PhaseSide& side) {
  const PrefillImpl& impl = *rc.impl;
  const axes::PrefillPoint& p = *rc.point;
  return phase_row(st, with_process(facts_of(impl), rc.out_of_process), impl.unavailable(), axes::input_bytes(p), rc.mem_budget, [&]() -> Setup {
    PrefillState& s = point_state(phase_cache().prefill, p);
    const PrefillInputs in = s.in->view();
    if (auto no = impl.check(in)) return "unsupported: " + *no;
    const std::string key = impl.info().name + "/" + p.name;
    // The one boundary between the canonical conventions and the kernel's declared ones.
    prepare_once(s, key, [&] { return impl.prepare(inputs_to_kernel(impl.info().conventions, in, s.v_storage)); });
    if (!rc.overhead) {
      if (auto why = verdict(key, [&] { return judge_prefill_call(impl, s); })) return *why;
    }
    // The byte/FLOP model of exactly the call timed: one run() over the point's inputs.
    return ready(impl.cost(in), *s.prepared);
  }, side);
}

RowResult time_merge_row(benchmark::State& st, const MergeRowCase& rc, PhaseSide& side) {
  const MergeImpl& impl = *rc.impl;
  const axes::MergePoint& p = *rc.point;
  return phase_row(st, with_process(facts_of(impl), rc.out_of_process), impl.unavailable(), axes::input_bytes(p), rc.mem_budget, [&]() -> Setup {
    if (auto no = impl.check(p.shape)) return "unsupported: " + *no;
    MergeState& s = point_state(phase_cache().merge, p);
    const MergeInputs in = s.in->view();
    const std::string key = impl.info().name + "/" + p.name;
    prepare_once(s, key, [&] { return impl.prepare(inputs_to_kernel(impl.info().conventions, in, s.lse_a, s.lse_b)); });
    if (!rc.overhead) {
      if (auto why = verdict(key, [&] { return judge_merge_call(impl, s); })) return *why;
    }
    return ready(impl.cost(p.shape), *s.prepared);
  }, side);
}

RowResult time_indexer_logits_row(benchmark::State& st, const IndexerLogitsRowCase& rc, PhaseSide& side) {
  const IndexerLogitsImpl& impl = *rc.impl;
  const axes::IndexerLogitsPoint& p = *rc.point;
  return phase_row(st, with_process(facts_of(impl), rc.out_of_process), impl.unavailable(), axes::input_bytes(p), rc.mem_budget, [&]() -> Setup {
    IndexerLogitsState& s = point_state(phase_cache().indexer_logits, p);
    const IndexerLogitsInputs in = s.in->view();
    if (auto no = impl.check(in.shape)) return "unsupported: " + *no;
    const std::string key = impl.info().name + "/" + p.name;
    prepare_once(s, key, [&] { return impl.prepare(in); });
    if (!rc.overhead) {
      if (auto why = verdict(key, [&] { return judge_indexer_logits_call(s); })) return *why;
    }
    return ready(impl.cost(in), *s.prepared);
  }, side);
}

RowResult time_topk_row(benchmark::State& st, const TopkRowCase& rc, PhaseSide& side) {
  const TopkImpl& impl = *rc.impl;
  const axes::TopkPoint& p = *rc.point;
  return phase_row(st, with_process(facts_of(impl), rc.out_of_process), impl.unavailable(), axes::input_bytes(p), rc.mem_budget, [&]() -> Setup {
    if (auto no = impl.check(p.shape)) return "unsupported: " + *no;
    TopkState& s = point_state(phase_cache().topk, p);
    const TopkInputs in = s.in->view();
    const std::string key = impl.info().name + "/" + p.name;
    prepare_once(s, key, [&] { return impl.prepare(in); });
    if (!rc.overhead) {
      if (auto why = verdict(key, [&] { return judge_topk_call(impl, s); })) return *why;
    }
    return ready(impl.cost(in), *s.prepared, static_cast<double>(axes::logits_read(in)));
  }, side);
}

RowResult time_sparse_prefill_row(benchmark::State& st, const SparsePrefillRowCase& rc, PhaseSide& side) {
  const SparsePrefillImpl& impl = *rc.impl;
  const axes::SparsePrefillPoint& p = *rc.point;
  return phase_row(st, with_process(facts_of(impl), rc.out_of_process), impl.unavailable(), axes::input_bytes(p), rc.mem_budget, [&]() -> Setup {
    SparsePrefillState& s = point_state(phase_cache().sparse_prefill, p);
    const SparsePrefillInputs in = s.in->view();
    if (auto no = impl.check(in.shape)) return "unsupported: " + *no;
    const std::string key = impl.info().name + "/" + p.name;
    prepare_once(s, key, [&] { return impl.prepare(in); });
    if (!rc.overhead) {
      if (auto why = verdict(key, [&] { return judge_sparse_prefill_call(impl, s); })) return *why;
    }
    // The byte/FLOP model of exactly the call timed (sparse_prefill_cost_model: the keys the
    // valid indices name, each gathered once per query row).
    return ready(impl.cost(in), *s.prepared);
  }, side);
}

int phase_truths() { return phase_cache().truths; }
double phase_truth_seconds() { return phase_cache().truth_seconds; }

void release_phase_cache() {
  PhaseCache& c = phase_cache();
  c.prefill = PrefillState{};
  c.merge = MergeState{};
  c.indexer_logits = IndexerLogitsState{};
  c.topk = TopkState{};
  c.sparse_prefill = SparsePrefillState{};
  c.verdicts.clear();
}

}  // namespace mla::bench
