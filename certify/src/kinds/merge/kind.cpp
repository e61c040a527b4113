// The merge kind: every registered merge of two attention states (mla/core/merge.hpp's MergeImpl)
// on every case of the catalog's merge families, then on cases drawn inside its claims. Judged by
// judge_merge (judge/merge.hpp) against the C++ fp64 oracle (mla::ref::merge_states), computed
// here. Registered kernels run in this process; an external kernel's merge (a plug-in's entry,
// ABI 1.4, or a Python kernel's) runs in a child on shared buffers this process lays out and
// audits (isolation/entry_calls.hpp).
#include <fmt/format.h>

#include "kinds/entry_plans.hpp"
#include "kinds/kinds.hpp"
#include "kinds/merge/merge_rows.hpp"
#include "kinds/stored_kind.hpp"
#include "mla/certify/twin.hpp"
#include "mla/core/sha256.hpp"
#include "mla/golden/golden.hpp"
#include "isolation/arena.hpp"
#include "mla/judge/merge.hpp"

namespace mla::certify {
namespace {

using tol::Verdict;

nlohmann::json shape_json(const MergeShape& s) {
  return {{"tokens", s.tokens}, {"heads", s.heads}, {"head_dim", s.head_dim}, {"dtype", to_string(s.dtype)}};
}

class MergeKind final : public StoredCasesKind {
 public:
  std::string_view name() const override { return "merge"; }
  std::string_view families_are() const override { return "merge families"; }
  std::optional<golden::FamilyKind> loads() const override { return golden::FamilyKind::merge; }
  std::vector<std::string> drawn_files() const override { return {kFreshMergeFile}; }
  bool twins() const override { return true; }
  bool serves(const Implementation& k) const override { return k.merge != nullptr; }
  void certify_fresh(Session& s, const Implementation& k, uint64_t seed) const override {
    certify_fresh_merge(s, k, seed);
  }

 protected:
  void certify_case(Session& s, const CaseRef& ref, const std::vector<const Implementation*>& pending) const override {
    golden::MergeCase c;
    MergeBuffers in;
    ref::MergeResult truth;
    try {
      c = golden::load_merge_case(s.catalog.file(ref.file), ref.name);
      in = c.inputs();
      truth = merge_truth(in.view());
    } catch (const std::exception& e) {
      for (const auto* k : pending) record_error(s, *k, ref, fmt::format("case failed to load: {}", e.what()));
      return;
    }
    const auto seed = twin_seed(s, name(), ref);
    const auto description = fmt::format("fresh twin of {} (drawn from seed {}: heads and head dimensions permuted and "
                                         "sign-flipped, both lse shifted alike, out moved by noise of 1/32 of its RMS)",
                                         ref.key(), seed);
    CaseTwin<TwinCase> twin;
    for (const auto* k : pending) {
      s.record(*k, merge_row(s, *k, ref, c.description, in.view(), truth));
      if (!k->external) continue;
      twin.record(
          s, *k, ref, description,
          [&] {
            auto t = std::make_unique<TwinCase>();
            t->b = make_merge_twin(in.view(), seed);
            t->truth = merge_truth(t->b.view());
            return t;
          },
          [&](const TwinCase& t, const std::string& about) {
            return merge_row(s, *k, twin_ref(ref), about, t.b.view(), t.truth);
          });
    }
  }

 private:
  struct TwinCase {
    MergeBuffers b;
    ref::MergeResult truth;
  };
};

// The calls of an external kernel's merge on `kin` (lse in its conventions) in a child: call 1's
// out and lse widened (still in its conventions), the audit's findings as reasons.
InProcessRun<MergeOutputs> run_merge_in_child(Session& s, const Implementation& k, const MergeInputs& kin,
                                              const std::string& tag, bool& host_caused) {
  const auto p = merge_entry_plan(kin);
  return external_run<MergeOutputs>(run_entry_in_child(s, k, p.calls, tag), host_caused, p.outputs);
}

}  // namespace

std::shared_ptr<const MergeImpl> external_merge(MergeKernelInfo info) {
  return std::make_shared<ExternalEntry<MergeImpl, MergeKernelInfo, PreparedMerge, MergeInputs>>(std::move(info));
}

ref::MergeResult merge_truth(const MergeInputs& in) { return ref::merge_states(in); }

reports::CaseResult merge_row(Session& s, const Implementation& k, const CaseRef& ref, const std::string& description,
                              const MergeInputs& in, const ref::MergeResult& truth) {
  auto r = s.base_result(ref);
  r.description = description;
  r.shape = shape_json(in.shape);
  const MergeImpl& impl = *k.merge;
  if (k.unavailable) {
    r.verdict = Verdict::skipped;
    r.reasons.push_back(*k.unavailable);
    return r;
  }
  if (!claimed_with_cost(r, impl, in.shape, in.shape)) return r;
  // The one boundary between the canonical conventions and the kernel's declared ones.
  const auto& conv = impl.info().conventions;
  std::vector<float> lse_a, lse_b;
  const MergeInputs kin = inputs_to_kernel(conv, in, lse_a, lse_b);
  if (!entry_claimed(s, r, k, [&] { return merge_claim_question(kin); })) return r;
  bool host_caused = false;
  auto run = k.external ? run_merge_in_child(s, k, kin, fmt::format("merge-{}-{:x}", k.info.name, hash_text(0, ref.key())),
                                             host_caused)
                        : call_in_process<PreparedMerge, MergeOutputs>(
                              [&] { return impl.prepare(kin); }, in_process_calls(s), [&] {
                                std::string d;
                                add_digest(d, kin.out_a), add_digest(d, kin.out_b), add_digest(d, kin.lse_a),
                                    add_digest(d, kin.lse_b);
                                return d;
                              });
  if (host_caused) {
    r.verdict = Verdict::host_error;
    r.reasons.push_back(run.message);
    return r;
  }
  judge_in_process<MergeOutputs>(r, run, [&] {
    outputs_to_canonical(conv, in.shape, run.outputs);
    return judge_merge(in.shape, run.outputs, {truth.out, truth.lse});
  });
  return r;
}

const CaseKind& merge_kind() {
  static const MergeKind kind;
  return kind;
}

}  // namespace mla::certify
