// The indexer_logits kind: every registered indexer logits kernel (mla/core/indexer_logits.hpp's
// IndexerLogitsImpl: DeepGEMM's fp8_paged_mqa_logits and fp8_mqa_logits calls) on every case of
// the catalog's indexer families (the reference's indexer steps, as one call inside the kernel's
// claims: indexer_logits/stored.cpp), then on calls drawn inside its claims at run time
// (indexer_logits/fresh.cpp). Judged by judge_indexer_logits (judge/indexer_logits.hpp) against
// the C++ oracle's exact scores of the call's codes: -inf exactly outside each row's valid range,
// every valid logit within indexer.logits.f32. Registered kernels run in this process; an
// external kernel's logits (a plug-in's entry, ABI 1.5, or a Python kernel's) in a child on
// shared buffers this process lays out and audits (isolation/entry_calls.hpp).
#include <cstring>

#include <fmt/format.h>

#include "kinds/drawn_kind.hpp"
#include "mla/certify/twin.hpp"
#include "kinds/indexer_logits/indexer_logits_rows.hpp"
#include "kinds/entry_plans.hpp"
#include "kinds/kinds.hpp"
#include "kinds/stored_kind.hpp"
#include "mla/golden/golden.hpp"
#include "mla/judge/indexer_logits.hpp"

namespace mla::certify {
namespace {

// The calls of an external kernel's indexer logits in a child: call 1's logits. Only the call's
// layout's arrays are laid out (the child hands the other layout's as NULL / empty).
InProcessRun<std::vector<float>> run_logits_in_child(Session& s, const Implementation& k, const IndexerLogitsInputs& in,
                                                     const std::string& tag, bool& host_caused) {
  const auto p = indexer_logits_entry_plan(in);
  return external_run<std::vector<float>>(run_entry_in_child(s, k, p.calls, tag), host_caused, p.outputs);
}

// A row `r` (family, file, name and description set) of `k` on the call `in`.
reports::CaseResult logits_row(Session& s, const Implementation& k, reports::CaseResult r, const IndexerLogitsInputs& in) {
  const auto& sh = in.shape;
  r.shape = {{"layout", to_string(sh.layout)}, {"rows", sh.rows()}, {"cols", sh.cols()}, {"heads", sh.heads}};
  if (sh.layout == IndexerLogitsLayout::paged) r.shape["next_n"] = sh.next_n, r.shape["block_size"] = sh.block_size;
  const IndexerLogitsImpl& impl = *k.indexer_logits;
  if (k.unavailable) {
    r.verdict = tol::Verdict::skipped;
    r.reasons.push_back(*k.unavailable);
    return r;
  }
  if (!claimed_with_cost(r, impl, sh, in)) return r;
  if (!entry_claimed(s, r, k, [&] { return indexer_logits_claim_question(in); })) return r;
  bool host_caused = false;
  auto run = k.external
                 ? run_logits_in_child(s, k, in,
                                       fmt::format("indexer-logits-{}-{:x}", k.info.name, hash_text(0, r.file + "/" + r.name)),
                                       host_caused)
                 : call_in_process<PreparedIndexerLogits, std::vector<float>>(
                       [&] { return impl.prepare(in); }, in_process_calls(s), [&] {
                         std::string d;
                         add_digest(d, in.q), add_digest(d, in.weights), add_digest(d, in.cache);
                         add_digest(d, in.context_lens), add_digest(d, in.block_table), add_digest(d, in.k_codes);
                         add_digest(d, in.k_scales), add_digest(d, in.ks), add_digest(d, in.ke);
                         return d;
                       });
  if (host_caused) {
    r.verdict = tol::Verdict::host_error;
    r.reasons.push_back(run.message);
    return r;
  }
  judge_in_process<std::vector<float>>(r, run, [&](reports::CaseResult&) {
    return judge_indexer_logits(in, run.outputs).reasons;
  });
  return r;
}

reports::CaseResult drawn_logits_row(Session& s, const Implementation& k, const DrawnIndexerLogits& c) {
  return logits_row(s, k, drawn_row(s, kFreshIndexerLogitsFile, c.name, c.description), c.inputs.view());
}

class IndexerLogitsKind final : public StoredCasesKind {
 public:
  std::string_view name() const override { return "indexer_logits"; }
  std::string_view families_are() const override { return "indexer families"; }
  std::optional<golden::FamilyKind> loads() const override { return golden::FamilyKind::indexer; }
  std::vector<std::string> drawn_files() const override { return {kFreshIndexerLogitsFile}; }
  bool twins() const override { return true; }
  bool serves(const Implementation& k) const override { return k.indexer_logits != nullptr; }
  void certify_fresh(Session& s, const Implementation& k, uint64_t seed) const override {
    if (!serves(k)) return;
    certify_drawn(s, k, name(), kFreshIndexerLogitsFile, [&] {
      return as_drawn(draw_indexer_logits_cases(seed, k.indexer_logits->info()), &drawn_logits_row);
    });
  }

 protected:
  void certify_case(Session& s, const CaseRef& ref, const std::vector<const Implementation*>& pending) const override {
    const auto failed = [&](const Implementation& k, const std::string& why) { record_error(s, k, ref, why); };
    golden::IndexerCase c;
    try {
      c = golden::load_indexer_case(s.catalog.file(ref.file), ref.name);
    } catch (const std::exception& e) {
      for (const auto* k : pending) failed(*k, fmt::format("case failed to load: {}", e.what()));
      return;
    }
    for (const auto* k : pending) {
      IndexerLogitsBuffers call;
      try {
        call = stored_indexer_call(c, k->indexer_logits->info());
      } catch (const std::exception& e) {
        failed(*k, fmt::format("the case could not be made a call: {}", e.what()));
        continue;
      }
      auto r = s.base_result(ref);
      r.description = c.description;
      s.record(*k, logits_row(s, *k, std::move(r), call.view()));
      if (!k->external) continue;
      // The call's twin (its layout is the kernel's, so each kernel gets its own).
      const auto seed = twin_seed(s, name(), ref);
      CaseTwin<IndexerLogitsBuffers>().record(
          s, *k, ref,
          fmt::format("fresh twin of {} (drawn from seed {}: index heads, and the dimensions of every q and key "
                      "vector, permuted and sign-flipped; the weights moved by noise of 1/32 of their RMS)",
                      ref.key(), seed),
          [&] { return std::make_unique<IndexerLogitsBuffers>(make_indexer_logits_twin(call.view(), seed)); },
          [&](const IndexerLogitsBuffers& twin, const std::string& about) {
            auto t = s.base_result(twin_ref(ref));
            t.description = about;
            return logits_row(s, *k, std::move(t), twin.view());
          });
    }
  }
};

}  // namespace

std::shared_ptr<const IndexerLogitsImpl> external_indexer_logits(IndexerLogitsKernelInfo info) {
  return std::make_shared<ExternalEntry<IndexerLogitsImpl, IndexerLogitsKernelInfo, PreparedIndexerLogits, IndexerLogitsInputs>>(
      std::move(info));
}

const CaseKind& indexer_logits_kind() {
  static const IndexerLogitsKind kind;
  return kind;
}

}  // namespace mla::certify
