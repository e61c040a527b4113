// The top-k kind: every registered top-k selection (mla/core/topk.hpp's TopkImpl) on cases drawn
// inside its claims at run time (topk/fresh.cpp), its indices made canonical from its declared
// base (topk_outputs_to_canonical) and judged by judge_topk (judge/topk.hpp) against the logits
// it was given, with the tolerance entry of its declared logits precision. It has no stored
// family: a selection's truth is its input, so a stored case would only be one more drawn case
// that a kernel could be tuned to. Registered kernels run in this process; an external kernel's
// top-k (a plug-in's entry, ABI 1.4, or a Python kernel's) in a child on shared buffers this
// process lays out and audits (isolation/entry_calls.hpp).
#include <cstring>

#include <fmt/format.h>

#include "kinds/entry_plans.hpp"
#include "kinds/kinds.hpp"
#include "kinds/drawn_kind.hpp"
#include "kinds/topk/topk_rows.hpp"
#include "mla/core/sha256.hpp"
#include "mla/judge/topk.hpp"

namespace mla::certify {
namespace {

// The calls of an external kernel's top-k in a child: call 1's indices (in its index base).
InProcessRun<TopkOutputs> run_topk_in_child(Session& s, const Implementation& k, const TopkInputs& in,
                                            const std::string& tag, bool& host_caused) {
  const auto p = topk_entry_plan(k.topk->info(), in);
  return external_run<TopkOutputs>(run_entry_in_child(s, k, p.calls, tag), host_caused, p.outputs);
}

// The row of `k` on one drawn case: NOT_CLAIMED with its check()'s reason, else its calls in
// this process judged by judge_topk.
reports::CaseResult topk_row(Session& s, const Implementation& k, const DrawnTopk& c) {
  auto r = drawn_row(s, kFreshTopkFile, c.name, c.description);
  const auto in = c.inputs.view();
  r.shape = {{"rows", in.shape.rows}, {"n", in.shape.n}, {"k", in.shape.k}};
  const TopkImpl& impl = *k.topk;
  if (!claimed_with_cost(r, impl, in.shape, in)) return r;
  if (!entry_claimed(s, r, k, [&] { return topk_claim_question(in); })) return r;
  bool host_caused = false;
  auto run = k.external ? run_topk_in_child(s, k, in, fmt::format("topk-{}-{:x}", k.info.name, hash_text(0, c.name)),
                                            host_caused)
                        : call_in_process<PreparedTopk, TopkOutputs>(
                              [&] { return impl.prepare(in); }, in_process_calls(s), [&] {
                                std::string d;
                                add_digest(d, in.logits), add_digest(d, in.starts), add_digest(d, in.ends);
                                return d;
                              });
  if (host_caused) {
    r.verdict = tol::Verdict::host_error;
    r.reasons.push_back(run.message);
    return r;
  }
  judge_in_process<TopkOutputs>(r, run, [&](reports::CaseResult&) {
    // The one boundary between the kernel's index base and the canonical (absolute) one.
    const auto& info = impl.info();
    topk_outputs_to_canonical(info.conventions, in, run.outputs);
    return judge_topk(in, run.outputs, info.precision, info.conventions.sorted).reasons;
  });
  return r;
}

class TopkKind final : public DrawnOnlyKind {
 public:
  std::string_view name() const override { return "topk"; }
  std::string_view families_are() const override { return "top-k selections (drawn at run time only)"; }
  std::vector<std::string> drawn_files() const override { return {kFreshTopkFile}; }
  bool serves(const Implementation& k) const override { return k.topk != nullptr; }

 protected:
  std::string file() const override { return kFreshTopkFile; }
  std::vector<DrawnCase> draw(const Implementation& k, uint64_t seed) const override {
    return as_drawn(draw_topk_cases(seed, k.topk->info()), &topk_row);
  }
};

}  // namespace

std::shared_ptr<const TopkImpl> external_topk(TopkKernelInfo info) {
  return std::make_shared<ExternalEntry<TopkImpl, TopkKernelInfo, PreparedTopk, TopkInputs>>(std::move(info));
}

const CaseKind& topk_kind() {
  static const TopkKind kind;
  return kind;
}

}  // namespace mla::certify
