// The prefill kind: every registered prefill implementation (mla/core/prefill_kernel.hpp's
// PrefillImpl; MLA's prefill in the MHA form) on every case of the catalog's prefill families,
// then on cases drawn inside its claims. Judged by judge_prefill (judge/prefill.hpp) against the
// C++ fp64 oracle and, for a kernel that is not fp64, the bf16 pipeline (ref/prefill.hpp), both
// computed here. Registered kernels run in this process; a plug-in's prefill entry (ABI 1.4) runs
// in a child on shared buffers this process lays out and audits (isolation/entry_calls.hpp).
#include <fmt/format.h>

#include "isolation/entry_calls.hpp"
#include "kinds/entry_plans.hpp"
#include "kinds/kinds.hpp"
#include "kinds/prefill/prefill_rows.hpp"
#include "kinds/stored_kind.hpp"
#include "mla/certify/twin.hpp"
#include "mla/core/sha256.hpp"
#include "mla/plugin/host.hpp"
#include "mla/golden/golden.hpp"
#include "mla/judge/prefill.hpp"
#include "mla/ref/prefill.hpp"

namespace mla::certify {
namespace {

using tol::Verdict;

nlohmann::json shape_json(const PrefillInputs& in) {
  auto j = to_json(in.shape);
  std::vector<int64_t> q, k;
  for (const auto& seq : prefill_sequences(in)) q.push_back(seq.s_q), k.push_back(seq.s_k);
  j["seqlens_q"] = q;
  j["seqlens_k"] = k;
  return j;
}

class PrefillKind final : public StoredCasesKind {
 public:
  std::string_view name() const override { return "prefill"; }
  std::string_view families_are() const override { return "prefill families"; }
  std::optional<golden::FamilyKind> loads() const override { return golden::FamilyKind::prefill; }
  std::vector<std::string> drawn_files() const override { return {kFreshPrefillFile}; }
  bool twins() const override { return true; }
  bool serves(const Implementation& k) const override { return k.prefill != nullptr; }
  void certify_fresh(Session& s, const Implementation& k, uint64_t seed) const override {
    certify_fresh_prefill(s, k, seed);
  }

 protected:
  void certify_case(Session& s, const CaseRef& ref, const std::vector<const Implementation*>& pending) const override {
    golden::PrefillCase c;
    try {
      c = golden::load_prefill_case(s.catalog.file(ref.file), ref.name);
    } catch (const std::exception& e) {
      for (const auto* k : pending) record_error(s, *k, ref, fmt::format("case failed to load: {}", e.what()));
      return;
    }
    const auto in = c.inputs();
    PrefillReference reference(in);
    const auto seed = twin_seed(s, name(), ref);
    const auto description = fmt::format("fresh twin of {} (drawn from seed {}: heads, q/k and V dimensions permuted "
                                         "and sign-flipped, q moved by noise of 1/32 of its RMS)", ref.key(), seed);
    CaseTwin<TwinCase> twin;
    for (const auto* k : pending) {
      s.record(*k, prefill_row(s, *k, ref, c.description, in, reference));
      if (!k->external) continue;
      twin.record(
          s, *k, ref, description, [&] { return std::make_unique<TwinCase>(make_prefill_twin(in, seed)); },
          [&](const TwinCase& t, const std::string& about) {
            return prefill_row(s, *k, twin_ref(ref), about, t.in, t.reference);
          });
    }
  }

 private:
  // A twin's inputs and their references (which keep a reference to the view).
  struct TwinCase {
    explicit TwinCase(PrefillBuffers buffers) : b(std::move(buffers)), in(b.view()), reference(in) {}
    PrefillBuffers b;
    PrefillInputs in;
    mutable PrefillReference reference;
  };
};

// The calls of an external kernel's prefill on `kin` (in its conventions) in a child: call 1's out
// and lse widened (still in its conventions), the audit's findings as reasons.
InProcessRun<PrefillOutputs> run_prefill_in_child(Session& s, const Implementation& k, const PrefillInputs& kin,
                                                  const std::string& tag, bool& host_caused) {
  const auto p = prefill_entry_plan(k.prefill->info(), kin);
  return external_run<PrefillOutputs>(run_entry_in_child(s, k, p.calls, tag), host_caused, p.outputs);
}

}  // namespace

std::shared_ptr<const PrefillImpl> external_prefill(PrefillKernelInfo info) {
  return std::make_shared<ExternalEntry<PrefillImpl, PrefillKernelInfo, PreparedPrefill, PrefillInputs>>(std::move(info));
}

const PrefillOutputs& PrefillReference::truth() {
  if (!truth_) truth_ = ref::prefill_attention(in_);
  return *truth_;
}

const PrefillOutputs& PrefillReference::same_dtype() {
  if (!same_) same_ = ref::prefill_same_dtype(in_, OutDType::bf16);
  return *same_;
}

reports::CaseResult prefill_row(Session& s, const Implementation& k, const CaseRef& ref, const std::string& description,
                                const PrefillInputs& in, PrefillReference& reference) {
  auto r = s.base_result(ref);
  r.description = description;
  r.shape = shape_json(in);
  const PrefillImpl& impl = *k.prefill;
  if (k.unavailable) {
    r.verdict = Verdict::skipped;
    r.reasons.push_back(*k.unavailable);
    return r;
  }
  if (!claimed_with_cost(r, impl, in, in)) return r;
  // The one boundary between the canonical conventions and the kernel's declared ones.
  const auto& conv = impl.info().conventions;
  std::vector<uint16_t> v_storage;
  const PrefillInputs kin = inputs_to_kernel(conv, in, v_storage);
  // The kernel's own can_implement on the call as it would be made (its conventions: V padded or
  // not): the claim's last word, after the declared one (claimed_with_cost).
  if (!entry_claimed(s, r, k, [&] { return prefill_claim_question(kin); })) return r;
  bool host_caused = false;
  auto run = k.external ? run_prefill_in_child(s, k, kin, fmt::format("prefill-{}-{:x}", k.info.name, hash_text(0, ref.key())), host_caused)
                        : call_in_process<PreparedPrefill, PrefillOutputs>(
                              [&] { return impl.prepare(kin); }, in_process_calls(s), [&] {
                                std::string d;
                                add_digest(d, kin.q), add_digest(d, kin.k), add_digest(d, kin.v);
                                add_digest(d, kin.cu_seqlens_q), add_digest(d, kin.cu_seqlens_k);
                                return d;
                              });
  if (host_caused) {
    r.verdict = Verdict::host_error;
    r.reasons.push_back(run.message);
    return r;
  }
  judge_in_process<PrefillOutputs>(r, run, [&] {
    outputs_to_canonical(conv, in.shape, run.outputs);
    const auto& truth = reference.truth();
    PrefillTruth t{truth.out, truth.lse, {}, {}};
    // The ratio rule's reference, for a kernel that is not fp64 (judge_prefill arms it then).
    if (impl.info().out_dtype != OutDType::f64) {
      const auto& same = reference.same_dtype();
      t.same_dtype_out = same.out, t.same_dtype_lse = same.lse;
    }
    return judge_prefill(in.shape, {impl.info().out_dtype, impl.info().compute}, run.outputs, t);
  });
  return r;
}

const CaseKind& prefill_kind() {
  static const PrefillKind kind;
  return kind;
}

}  // namespace mla::certify
