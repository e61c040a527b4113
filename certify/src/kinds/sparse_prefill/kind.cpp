// The sparse_prefill kind: every registered sparse prefill (mla/core/sparse_prefill.hpp's
// SparsePrefillImpl: FlashMLA's flash_mla_sparse_fwd) on calls drawn inside its claims at run time,
// judged by judge_sparse_prefill against the fp64 oracle of the call (mla/ref/sparse_prefill.hpp,
// computed here) with the bf16 pipeline as the ratio rule's reference. No stored family: the
// oracle's result is the truth, and a drawn call cannot be learnt. Registered kernels run in this
// process; an external kernel's entry (a plug-in's, ABI 1.5, or a Python kernel's) in a child on
// shared buffers this process lays out and audits (isolation/entry_calls.hpp).
//
// The drawn calls (per the kernel's claims: its first claimed head count, else 16; topk a multiple
// of its claim, at least 64; V3.2's softmax scale): every kind of entry that is no key (-1, other
// negatives, INT32_MIN, s_kv and past it, INT32_MAX) among valid ones in rows whose position 0 is
// not a key, a row with no key, a row with one key, rows with the first and last positions, a row
// of large scores (q std 30); then, where it takes them, an attention sink per head and
// topk_length cutting rows before valid entries (0, partial, all), the entries past the length
// naming positions the row does not attend; and the 512-wide call (no rope part) where it takes it.
// Then the chain cases (chain.cpp): V3.2's sparse path as deployed, the indexer's logits and their
// top-k feeding the kernel (rows sparse_chain_*).
#include <algorithm>
#include <climits>

#include <fmt/format.h>

#include "kinds/drawn_kind.hpp"
#include "kinds/entry_plans.hpp"
#include "kinds/kinds.hpp"
#include "kinds/sparse_prefill/sparse_prefill_rows.hpp"
#include "isolation/arena.hpp"
#include "mla/core/config.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/presets.hpp"
#include "mla/core/sha256.hpp"
#include "mla/judge/sparse_prefill.hpp"
#include "mla/ref/sparse_prefill.hpp"

namespace mla::certify {
namespace {

struct DrawnSparsePrefill {
  std::string name, description;
  SparsePrefillBuffers inputs;
};

// One drawn call: `s_q` rows over `s_kv` keys; `extras` adds the sink and topk_length.
DrawnSparsePrefill draw_call(uint64_t key, int heads, int topk, int d_qk, bool sink, bool topk_length) {
  DrawnSparsePrefill c;
  auto& b = c.inputs;
  auto& s = b.shape;
  s.s_q = 12, s.s_kv = 300, s.heads = heads, s.d_qk = d_qk, s.topk = topk, s.sink = sink, s.topk_length = topk_length;
  b.sm_scale = softmax_scale(preset("v3").config);
  b.q.resize(static_cast<std::size_t>(s.s_q * heads * d_qk));
  b.kv.resize(static_cast<std::size_t>(s.s_kv * d_qk));
  gen::fill_bf16(key, 1, 0.0, 1.0, b.q);
  gen::fill_bf16(key, 2, 0.0, 1.0, b.kv);
  // Row 11: large scores (q std 30), where exp() without the running max overflows.
  std::span<uint16_t> big(b.q.data() + static_cast<std::size_t>(11 * heads * d_qk), static_cast<std::size_t>(heads * d_qk));
  gen::fill_bf16(key, 3, 0.0, 30.0, big);
  const auto perm = gen::permutation(key, 4, s.s_kv - 1);  // positions 1 .. s_kv-1, drawn
  b.indices.assign(static_cast<std::size_t>(s.s_q * topk), -1);
  const int32_t invalid[] = {-1, -2, INT32_MIN, static_cast<int32_t>(s.s_kv), INT32_MAX, static_cast<int32_t>(s.s_kv + 7)};
  for (int64_t i = 0; i < s.s_q; ++i) {
    int32_t* row = b.indices.data() + i * topk;
    const auto pos = [&](int64_t j) { return static_cast<int32_t>(1 + perm[static_cast<std::size_t>((i * 37 + j) % (s.s_kv - 1))]); };
    for (int64_t j = 0; j < topk; ++j) row[j] = pos(j);
    if (i == 1 || i == 2) {  // every invalid kind among valid ones (position 0 is not a key here)
      for (int64_t j = 0; j < topk; j += 3) row[j] = invalid[(j / 3) % 6];
    }
    if (i == 3) std::fill(row, row + topk, -1);               // no key
    if (i == 4) std::fill(row + 1, row + topk, INT32_MIN);    // one key
    if (i == 5) {  // the first and the last positions (drawn ones are 1 .. s_kv-1: 0 is new)
      row[0] = 0;
      const int32_t last = static_cast<int32_t>(s.s_kv - 1);
      if (std::find(row, row + topk, last) == row + topk) row[topk - 1] = last;
    }
  }
  if (sink) {
    b.attn_sink.resize(static_cast<std::size_t>(heads));
    for (int h = 0; h < heads; ++h) b.attn_sink[static_cast<std::size_t>(h)] = static_cast<float>(-5.0 + 10.0 * gen::uniform01(key, 5, h));
  }
  if (topk_length) {
    b.topk_length.resize(static_cast<std::size_t>(s.s_q));
    for (int64_t i = 0; i < s.s_q; ++i) {
      const int32_t len = i == 6 ? 0 : i == 7 ? topk : static_cast<int32_t>(1 + gen::bits(key, 6, i) % (topk - 1));
      b.topk_length[static_cast<std::size_t>(i)] = len;
      int32_t* row = b.indices.data() + i * topk;
      // Past the length: positions the row would otherwise attend (and repeats of earlier ones).
      for (int64_t j = len; j < topk; ++j) row[j] = j % 2 == 0 && len > 0 ? row[j % len] : static_cast<int32_t>(j % s.s_kv);
    }
  }
  c.name = fmt::format("sparse_prefill_h{}_k{}_d{}{}{}", heads, topk, d_qk, sink ? "_sink" : "", topk_length ? "_len" : "");
  c.description = fmt::format(
      "FlashMLA's sparse prefill: {} rows over {} keys, {} heads, topk {}, d_qk {}, every invalid index kind, a row with no "
      "key, one key, the first and last positions, q std 30{}{}",
      s.s_q, s.s_kv, heads, topk, d_qk, sink ? ", an attention sink per head" : "",
      topk_length ? ", topk_length 0 / partial / full with positions past it" : "");
  return c;
}

std::vector<DrawnSparsePrefill> draw_cases(uint64_t seed, const SparsePrefillKernelInfo& info) {
  const int heads = info.heads.empty() ? 16 : info.heads.front();
  const int m = std::max(1, info.topk_multiple);
  const int topk = ((64 + m - 1) / m) * m;
  const uint64_t base = hash_text(seed, "sparse_prefill");
  std::vector<DrawnSparsePrefill> out;
  const bool d576 = info.d_qks.empty() || std::count(info.d_qks.begin(), info.d_qks.end(), kMlaDqk) > 0;
  const bool d512 = info.d_qks.empty() || std::count(info.d_qks.begin(), info.d_qks.end(), 512) > 0;
  const int d = d576 ? kMlaDqk : 512;
  out.push_back(draw_call(gen::mix64(base + 1), heads, topk, d, false, false));
  if (info.sink || info.topk_length) out.push_back(draw_call(gen::mix64(base + 2), heads, topk, d, info.sink, info.topk_length));
  if (d576 && d512) out.push_back(draw_call(gen::mix64(base + 3), heads, topk, 512, info.sink, false));
  return out;
}

// The calls of an external kernel's sparse prefill in a child: call 1's outputs, widened.
InProcessRun<SparsePrefillOutputs> run_in_child(Session& s, const Implementation& k, const SparsePrefillInputs& in,
                                                const std::string& tag, bool& host_caused) {
  const auto p = sparse_prefill_entry_plan(k.sparse_prefill->info(), in);
  return external_run<SparsePrefillOutputs>(run_entry_in_child(s, k, p.calls, tag), host_caused, p.outputs);
}

reports::CaseResult sparse_row(Session& s, const Implementation& k, const DrawnSparsePrefill& c) {
  auto r = drawn_row(s, kFreshSparsePrefillFile, c.name, c.description);
  const auto in = c.inputs.view();
  const auto& sh = in.shape;
  r.shape = {{"s_q", sh.s_q}, {"s_kv", sh.s_kv}, {"heads", sh.heads}, {"d_qk", sh.d_qk},
             {"topk", sh.topk}, {"sink", sh.sink}, {"topk_length", sh.topk_length}};
  const SparsePrefillImpl& impl = *k.sparse_prefill;
  if (k.unavailable) {
    r.verdict = tol::Verdict::skipped;
    r.reasons.push_back(*k.unavailable);
    return r;
  }
  if (!claimed_with_cost(r, impl, sh, in)) return r;
  if (!entry_claimed(s, r, k, [&] { return sparse_prefill_claim_question(in); })) return r;
  bool host_caused = false;
  auto run = k.external
                 ? run_in_child(s, k, in, fmt::format("sparse-prefill-{}-{:x}", k.info.name, hash_text(0, c.name)),
                                host_caused)
                 : call_in_process<PreparedSparsePrefill, SparsePrefillOutputs>(
                       [&] { return impl.prepare(in); }, in_process_calls(s), [&] {
                         std::string d;
                         add_digest(d, in.q), add_digest(d, in.kv), add_digest(d, in.indices);
                         add_digest(d, in.attn_sink), add_digest(d, in.topk_length);
                         return d;
                       });
  if (host_caused) {
    r.verdict = tol::Verdict::host_error;
    r.reasons.push_back(run.message);
    return r;
  }
  judge_sparse_prefill_run(r, impl, in, run);
  return r;
}

class SparsePrefillKind final : public DrawnOnlyKind {
 public:
  std::string_view name() const override { return "sparse_prefill"; }
  std::string_view families_are() const override { return "sparse prefills (drawn at run time only)"; }
  std::vector<std::string> drawn_files() const override { return {kFreshSparsePrefillFile}; }
  bool serves(const Implementation& k) const override { return k.sparse_prefill != nullptr; }

 protected:
  std::string file() const override { return kFreshSparsePrefillFile; }
  std::vector<DrawnCase> draw(const Implementation& k, uint64_t seed) const override {
    auto cases = as_drawn(draw_cases(seed, k.sparse_prefill->info()), &sparse_row);
    for (auto& c : as_drawn(draw_chain_cases(seed, k.sparse_prefill->info()), &chain_row)) cases.push_back(std::move(c));
    return cases;
  }
};

}  // namespace

void judge_sparse_prefill_run(reports::CaseResult& r, const SparsePrefillImpl& impl, const SparsePrefillInputs& in,
                              const InProcessRun<SparsePrefillOutputs>& run) {
  judge_in_process<SparsePrefillOutputs>(r, run, [&](reports::CaseResult& row) {
    const auto& info = impl.info();
    const auto truth = ref::sparse_prefill_fp64(in);
    const auto same = ref::sparse_prefill_same_dtype(in, info.out_dtype == OutDType::bf16 ? OutDType::bf16 : OutDType::f32);
    auto j = judge_sparse_prefill(in.shape, {info.out_dtype, info.compute}, run.outputs, truth, &same);
    row.out = std::move(j.out);
    row.lse = std::move(j.lse);
    row.max_logits = std::move(j.max_logits);
    return j.reasons;
  });
}

std::shared_ptr<const SparsePrefillImpl> external_sparse_prefill(SparsePrefillKernelInfo info) {
  return std::make_shared<ExternalEntry<SparsePrefillImpl, SparsePrefillKernelInfo, PreparedSparsePrefill, SparsePrefillInputs>>(
      std::move(info));
}

const CaseKind& sparse_prefill_kind() {
  static const SparsePrefillKind kind;
  return kind;
}

}  // namespace mla::certify
