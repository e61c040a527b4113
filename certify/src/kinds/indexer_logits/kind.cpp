// The indexer_logits kind: every registered indexer logits kernel (mla/core/indexer_logits.hpp's
// IndexerLogitsImpl: DeepGEMM's fp8_paged_mqa_logits and fp8_mqa_logits calls) on calls drawn
// inside its claims at run time (indexer_logits/fresh.cpp), judged by judge_indexer_logits
// (judge/indexer_logits.hpp) against the C++ oracle's exact scores: -inf exactly outside each
// row's valid range, every valid logit within indexer.logits.f32. No stored family: the truth is
// computed at run time. Its kernels run in this process (no child transport yet).
#include <fmt/format.h>

#include "kinds/drawn_kind.hpp"
#include "kinds/indexer_logits/indexer_logits_rows.hpp"
#include "kinds/kinds.hpp"
#include "mla/judge/indexer_logits.hpp"

namespace mla::certify {
namespace {

reports::CaseResult logits_row(Session& s, const Implementation& k, const DrawnIndexerLogits& c) {
  auto r = drawn_row(s, kFreshIndexerLogitsFile, c.name, c.description);
  const auto in = c.inputs.view();
  const auto& sh = in.shape;
  r.shape = {{"layout", to_string(sh.layout)}, {"rows", sh.rows()}, {"cols", sh.cols()}, {"heads", sh.heads}};
  if (sh.layout == IndexerLogitsLayout::paged) r.shape["next_n"] = sh.next_n, r.shape["block_size"] = sh.block_size;
  const IndexerLogitsImpl& impl = *k.indexer_logits;
  if (!claimed_with_cost(r, impl, sh, in)) return r;
  auto run = call_in_process<PreparedIndexerLogits, std::vector<float>>(
      [&] { return impl.prepare(in); }, in_process_calls(s), [&] {
        std::string d;
        add_digest(d, in.q), add_digest(d, in.weights), add_digest(d, in.cache), add_digest(d, in.context_lens);
        add_digest(d, in.block_table), add_digest(d, in.k_codes), add_digest(d, in.k_scales);
        add_digest(d, in.ks), add_digest(d, in.ke);
        return d;
      });
  judge_in_process<std::vector<float>>(r, run, [&](reports::CaseResult&) {
    return judge_indexer_logits(in, run.outputs).reasons;
  });
  return r;
}

class IndexerLogitsKind final : public DrawnOnlyKind {
 public:
  std::string_view name() const override { return "indexer_logits"; }
  std::string_view families_are() const override { return "indexer logits calls (drawn at run time only)"; }
  std::vector<std::string> drawn_files() const override { return {kFreshIndexerLogitsFile}; }
  bool serves(const Implementation& k) const override { return k.indexer_logits != nullptr; }

 protected:
  std::string file() const override { return kFreshIndexerLogitsFile; }
  std::vector<DrawnCase> draw(const Implementation& k, uint64_t seed) const override {
    return as_drawn(draw_indexer_logits_cases(seed, k.indexer_logits->info()), &logits_row);
  }
};

}  // namespace

const CaseKind& indexer_logits_kind() {
  static const IndexerLogitsKind kind;
  return kind;
}

}  // namespace mla::certify
