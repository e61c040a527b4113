// The indexer_append kind: every registered indexer key cache append (mla/core/indexer_cache.hpp's
// IndexerAppendImpl) on appends drawn inside its claims at run time (indexer_append/fresh.cpp),
// judged by judge_indexer_append (judge/indexer_append.hpp) byte for byte against the C++ oracle's
// cache (mla/ref/indexer_append.hpp) under the float32 scale operation it declares: every written
// token's codes and scale exact, every other byte its prior value. No stored family: the oracle's
// bytes are the truth, computed at run time. Registered kernels run in this process; an external
// kernel's append (a plug-in's entry, ABI 1.5, or a Python kernel's) in a child, each call on its
// own copy of the cache as it was, on shared buffers this process lays out and audits
// (isolation/entry_calls.hpp).
#include <fmt/format.h>

#include "kinds/drawn_kind.hpp"
#include "kinds/entry_plans.hpp"
#include "kinds/stored_kind.hpp"
#include "kinds/indexer_append/indexer_append_rows.hpp"
#include "kinds/kinds.hpp"
#include "mla/core/sha256.hpp"
#include "mla/judge/indexer_append.hpp"

namespace mla::certify {
namespace {

// The calls of an external kernel's indexer append in a child: call 1's cache.
InProcessRun<std::vector<uint8_t>> run_append_in_child(Session& s, const Implementation& k, const IndexerAppendInputs& in,
                                                       const std::string& tag, bool& host_caused) {
  EntryCalls plan;
  plan.entry = kEntryIndexerAppend;
  plan.inputs = {{"keys", raw_bytes(in.keys), false, 2}, {"slot_mapping", raw_bytes(in.slot_mapping), false, 8}};
  plan.per_call = {{"kv_cache", in.cache, true, 1}};
  plan.args = indexer_append_args(in.shape);
  return external_run<std::vector<uint8_t>>(run_entry_in_child(s, k, plan, tag), host_caused,
                                            [](const auto& b) { return b[0]; });
}

reports::CaseResult append_row(Session& s, const Implementation& k, const DrawnIndexerAppend& c) {
  auto r = drawn_row(s, kFreshIndexerAppendFile, c.name, c.description);
  const auto in = c.inputs.view();
  r.shape = {{"tokens", in.shape.num_tokens},
             {"num_blocks", in.shape.num_blocks},
             {"block_size", in.shape.block_size},
             {"scale_fmt", to_string(in.shape.scale_fmt)}};
  const IndexerAppendImpl& impl = *k.indexer_append;
  if (!claimed_with_cost(r, impl, in.shape, in)) return r;
  if (!entry_claimed(s, r, k, [&] { return indexer_append_claim_question(in.shape); })) return r;
  bool host_caused = false;
  auto run = k.external
                 ? run_append_in_child(s, k, in,
                                       fmt::format("indexer-append-{}-{:x}", k.info.name, hash_text(0, c.name)),
                                       host_caused)
                 : call_in_process<PreparedIndexerAppend, std::vector<uint8_t>>(
                       [&] { return impl.prepare(in); }, in_process_calls(s), [&] {
                         std::string d;
                         add_digest(d, in.keys), add_digest(d, in.slot_mapping), add_digest(d, in.cache);
                         return d;
                       });
  if (host_caused) {
    r.verdict = tol::Verdict::host_error;
    r.reasons.push_back(run.message);
    return r;
  }
  judge_in_process<std::vector<uint8_t>>(r, run, [&](reports::CaseResult&) {
    return judge_indexer_append(in, impl.info().conventions.fp32_scale_op, run.outputs).reasons;
  });
  return r;
}

class IndexerAppendKind final : public DrawnOnlyKind {
 public:
  std::string_view name() const override { return "indexer_append"; }
  std::string_view families_are() const override { return "indexer cache appends (drawn at run time only)"; }
  std::vector<std::string> drawn_files() const override { return {kFreshIndexerAppendFile}; }
  bool serves(const Implementation& k) const override { return k.indexer_append != nullptr; }

 protected:
  std::string file() const override { return kFreshIndexerAppendFile; }
  std::vector<DrawnCase> draw(const Implementation& k, uint64_t seed) const override {
    return as_drawn(draw_indexer_append_cases(seed, k.indexer_append->info()), &append_row);
  }
};

}  // namespace

std::shared_ptr<const IndexerAppendImpl> external_indexer_append(IndexerAppendKernelInfo info) {
  return std::make_shared<ExternalEntry<IndexerAppendImpl, IndexerAppendKernelInfo, PreparedIndexerAppend, IndexerAppendInputs>>(
      std::move(info));
}

const CaseKind& indexer_append_kind() {
  static const IndexerAppendKind kind;
  return kind;
}

}  // namespace mla::certify
