// V3.2's sparse path certified as deployed (sparse_prefill_rows.hpp, chain_row): the lightning
// indexer's logits over a prefill chunk, their top-k, then the sparse prefill over the keys the
// top-k selected, each link's output the next link's input. Every fact a verdict rests on is this
// process's: each link's output is judged by its own kind's judge before it is handed on (the
// indexer by judge_indexer_logits against the exact oracle, the top-k by judge_topk against the
// logits it was given, made absolute from its declared index base), and the attention by
// judge_sparse_prefill against the fp64 attention over the selected keys. The true top-k set is
// computed too, from the exact logits: a correct stack selects it except at near-ties its links'
// declared precisions allow, and the row says on how many rows it did.
//
// Why a chain and not three kinds alone: the links meet at conventions no single kind exercises
// with the others' real outputs: a top-k's -1 padding on the first rows of a sequence prefilled
// from its start (they see fewer keys than topk) handed to an attention as FlashMLA's indices, the
// indexer's -inf outside each row's causal range as the top-k's input, the index base the top-k
// declared. An external kernel (a plug-in, or a Python kernel) that has all three entries is a
// stack: its own indexer logits and top-k feed its sparse prefill. A sparse prefill without them
// is fed by the suite's reference links (cpu_indexer_logits, cpu_topk_radix_f32), as an attention
// kernel is in a deployment that takes its indexer from elsewhere.
#include <algorithm>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "kinds/drawn_kind.hpp"
#include "kinds/entry_plans.hpp"
#include "kinds/sparse_prefill/sparse_prefill_rows.hpp"
#include "kinds/stored_kind.hpp"
#include "mla/core/config.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/presets.hpp"
#include "mla/core/sha256.hpp"
#include "mla/judge/indexer_logits.hpp"
#include "mla/judge/topk.hpp"
#include "mla/ref/indexer_logits.hpp"
#include "mla/registry/registry.hpp"
#include "mla/workloads/phase_axes.hpp"

namespace mla::certify {
namespace {

using tol::Verdict;

// The suite's links for a sparse prefill that brings none of its own.
constexpr const char* kReferenceIndexer = "cpu_indexer_logits";
constexpr const char* kReferenceTopk = "cpu_topk_radix_f32";

// One chain case: `s_q` query rows, the newest of a sequence of `s_kv` tokens.
DrawnChain draw_chain(uint64_t key, const std::string& what, int64_t s_q, int64_t s_kv, int heads, int topk, int d_qk) {
  DrawnChain c;
  axes::IndexerLogitsPoint p;
  p.name = "sparse_chain_" + what;
  p.layout = IndexerLogitsLayout::ragged;
  p.batch = s_q;      // ragged: row r sees keys [0, s_kv - s_q + r + 1), bottom-right causal
  p.context = s_kv;
  p.heads = 64;       // V3.2's index_n_heads
  p.seed = gen::mix64(key + 1);
  c.indexer = axes::build_inputs(p);
  auto& a = c.attention;
  a.shape.s_q = s_q, a.shape.s_kv = s_kv, a.shape.heads = heads, a.shape.d_qk = d_qk, a.shape.topk = topk;
  a.sm_scale = softmax_scale(preset("v3").config);
  a.q.resize(static_cast<std::size_t>(s_q * heads * d_qk));
  a.kv.resize(static_cast<std::size_t>(s_kv * d_qk));
  gen::fill_bf16(key, 2, 0.0, 1.0, a.q);
  gen::fill_bf16(key, 3, 0.0, 1.0, a.kv);
  a.indices.assign(static_cast<std::size_t>(s_q * topk), -1);  // the top-k link's, once it ran
  c.name = fmt::format("sparse_chain_{}_h{}_k{}_d{}", what, heads, topk, d_qk);
  return c;
}

// The implementation of the same external kernel as `k` that has the entry `has` names, or null.
const Implementation* sibling(const Session& s, const Implementation& k, bool (*has)(const Implementation&)) {
  for (const auto& o : s.implementations) {
    if (&o == &k || !has(o)) continue;
    const bool same_plugin = k.ref.plugin && o.ref.plugin && *k.ref.plugin == *o.ref.plugin;
    const bool same_python = k.ref.python && o.ref.python && k.ref.python->spec == o.ref.python->spec;
    if (same_plugin || same_python) return &o;
  }
  return nullptr;
}

// One link: its name, its object, and the Implementation that calls it in a child when it is an
// external kernel's entry (null for a registered link, called in this process).
template <class Impl>
struct Link {
  std::string name;
  const Impl* impl = nullptr;
  const Implementation* external = nullptr;
};

// A link's calls: in a child through the entry's plan when it is external, else in this process.
template <class Prepared, class Outputs, class Impl, class Inputs, class Plan>
InProcessRun<Outputs> run_link(Session& s, const Link<Impl>& link, const Inputs& in, const Plan& plan,
                               const std::string& tag, bool& host_caused, const std::function<std::string()>& digest) {
  if (link.external) {
    const auto p = plan();
    return external_run<Outputs>(run_entry_in_child(s, *link.external, p.calls, tag), host_caused, p.outputs);
  }
  return call_in_process<Prepared, Outputs>([&] { return link.impl->prepare(in); }, in_process_calls(s), digest);
}

// Why a link's run decides the row (its words prefixed by the link), or nullopt when it ran. A
// refusal of a call its check() accepted is a broken claim, as in its own kind.
template <class Outputs>
bool link_decides(reports::CaseResult& r, const InProcessRun<Outputs>& run, bool host_caused, const std::string& link) {
  using Status = typename InProcessRun<Outputs>::Status;
  if (host_caused) {
    r.verdict = Verdict::host_error;
    r.reasons.push_back(fmt::format("{}: {}", link, run.message));
    return true;
  }
  if (run.status == Status::unsupported) {
    r.verdict = Verdict::fail;
    r.cause = reports::Cause::broken_claim;
    r.reasons.push_back(fmt::format("{}: refused a call it claims: {}", link, run.message));
    return true;
  }
  if (run.status == Status::error) {
    r.verdict = Verdict::error;
    r.reasons.push_back(fmt::format("{}: {}", link, run.message));
    return true;
  }
  for (const auto& why : run.reasons) r.reasons.push_back(fmt::format("{}: {}", link, why));
  return false;
}

// The rows whose selection (canonical, -1 padded) is the exact top-k set of the exact logits
// (ties at the boundary count either way).
int64_t rows_with_exact_set(const IndexerLogitsInputs& in, const std::vector<int64_t>& selected, int topk) {
  const auto exact = ref::indexer_logits_reference(in).logits;
  const int64_t rows = in.shape.rows(), cols = in.shape.cols();
  int64_t same = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = exact.data() + r * cols;
    std::vector<int64_t> order;
    for (int64_t c = 0; c < cols; ++c)
      if (row[c] > -std::numeric_limits<double>::infinity()) order.push_back(c);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    const auto n = std::min<std::size_t>(order.size(), static_cast<std::size_t>(topk));
    const double cut = n > 0 ? row[order[n - 1]] : 0;
    bool ok = true;
    int64_t count = 0;
    for (int64_t j = 0; j < topk; ++j) {
      const int64_t v = selected[static_cast<std::size_t>(r * topk + j)];
      if (v < 0) continue;
      ++count;
      ok = ok && v < cols && row[v] >= cut;
    }
    if (ok && count == static_cast<int64_t>(n)) ++same;
  }
  return same;
}

}  // namespace

std::vector<DrawnChain> draw_chain_cases(uint64_t seed, const SparsePrefillKernelInfo& info) {
  const int heads = info.heads.empty() ? 16 : info.heads.front();
  const int m = std::max(1, info.topk_multiple);
  const int topk = ((64 + m - 1) / m) * m;
  const bool d576 = info.d_qks.empty() || std::count(info.d_qks.begin(), info.d_qks.end(), kMlaDqk) > 0;
  const int d = d576 ? kMlaDqk : 512;
  const uint64_t base = hash_text(seed, "sparse_chain");
  std::vector<DrawnChain> out;
  // A chunk over a cached prefix: every row sees more keys than topk.
  out.push_back(draw_chain(gen::mix64(base + 1), "chunk", 24, 3 * topk, heads, topk, d));
  // A sequence prefilled from its start: its first topk - 1 rows see fewer keys than topk, so the
  // top-k pads them with -1, which the attention must skip.
  out.push_back(draw_chain(gen::mix64(base + 2), "from_start", topk + 16, topk + 16, heads, topk, d));
  return out;
}

reports::CaseResult chain_row(Session& s, const Implementation& k, const DrawnChain& c) {
  const SparsePrefillImpl& attention = *k.sparse_prefill;
  const IndexerLogitsInputs iin = c.indexer.view();
  const auto& ash = c.attention.shape;
  auto r = drawn_row(s, kFreshSparsePrefillFile, c.name, "");
  r.shape = {{"s_q", ash.s_q}, {"s_kv", ash.s_kv}, {"heads", ash.heads}, {"d_qk", ash.d_qk}, {"topk", ash.topk},
             {"index_heads", iin.shape.heads}, {"sink", false}, {"topk_length", false}};
  // The links: the same external kernel's entries where it has them, else the suite's.
  Link<IndexerLogitsImpl> indexer{kReferenceIndexer, Registry::instance().find_indexer_logits(kReferenceIndexer), nullptr};
  Link<TopkImpl> topk{kReferenceTopk, Registry::instance().find_topk(kReferenceTopk), nullptr};
  if (k.external) {
    if (const auto* o = sibling(s, k, [](const Implementation& i) { return i.indexer_logits != nullptr; }))
      indexer = {o->info.name, o->indexer_logits, o};
    if (const auto* o = sibling(s, k, [](const Implementation& i) { return i.topk != nullptr; })) topk = {o->info.name, o->topk, o};
  }
  r.description = fmt::format(
      "V3.2's sparse path as deployed, drawn from seed {}: the indexer logits of {} rows over {} keys (bottom-right causal, "
      "{} index heads) by {}, their top-{} by {}, then {} over the selected keys ({} heads, d_qk {}); each link judged by "
      "its kind's judge, the attention against the fp64 attention over the keys the top-k selected",
      s.seed, ash.s_q, ash.s_kv, iin.shape.heads, indexer.name, ash.topk, topk.name, k.info.name, ash.heads, ash.d_qk);
  if (k.unavailable) {
    r.verdict = Verdict::skipped;
    r.reasons.push_back(*k.unavailable);
    return r;
  }
  // A stack's link that cannot run here (its library is not installed) skips the chain, saying so.
  for (const Implementation* link : {indexer.external, topk.external}) {
    if (link && link->unavailable) {
      r.verdict = Verdict::skipped;
      r.reasons.push_back(fmt::format("{}: {}", link->info.name, *link->unavailable));
      return r;
    }
  }
  if (!indexer.impl || !topk.impl) {
    r.verdict = Verdict::error;
    r.reasons.push_back("the suite's reference links are not registered in this build");
    return r;
  }
  // Every link must claim its call; a link that does not leaves the chain unclaimed, in its words.
  const TopkShape tsh{ash.s_q, ash.s_kv, ash.topk};
  try {
    for (const auto& [link, no] : {std::pair{indexer.name, indexer.impl->check(iin.shape)},
                                   std::pair{topk.name, topk.impl->check(tsh)},
                                   std::pair{k.info.name, attention.check(ash)}}) {
      if (no) {
        r.verdict = Verdict::not_claimed;
        r.reasons.push_back(fmt::format("{}: {}", link, *no));
        return r;
      }
    }
  } catch (const std::exception& e) {
    r.verdict = Verdict::error;
    r.reasons.push_back(fmt::format("the claim could not be decided (check()): {}", e.what()));
    return r;
  }
  // The attention's own can_implement (a kernel from outside) on its call's shape, which the
  // selection does not change: asked before any link runs, a refusal in the kernel's words.
  if (!entry_claimed(s, r, k, [&] { return sparse_prefill_claim_question(c.attention.view()); })) return r;
  // And a stack's own links' (the suite's reference links have none).
  if (indexer.external && !entry_claimed(s, r, *indexer.external, [&] { return indexer_logits_claim_question(iin); })) {
    return r;
  }
  if (topk.external) {
    TopkInputs question_of;
    question_of.shape = tsh;
    question_of.starts = c.indexer.ks;
    question_of.ends = c.indexer.ke;
    if (!entry_claimed(s, r, *topk.external, [&] { return topk_claim_question(question_of); })) return r;
  }
  const std::string tag = fmt::format("{}-{:x}", k.info.name, hash_text(0, c.name));
  bool host_caused = false;

  // 1. The indexer's logits, judged against the exact oracle.
  auto logits = run_link<PreparedIndexerLogits, std::vector<float>>(
      s, indexer, iin, [&] { return indexer_logits_entry_plan(iin); }, "chain-indexer-" + tag, host_caused, [&] {
        std::string d;
        add_digest(d, iin.q), add_digest(d, iin.weights), add_digest(d, iin.k_codes), add_digest(d, iin.k_scales);
        add_digest(d, iin.ks), add_digest(d, iin.ke);
        return d;
      });
  const std::string il = "indexer logits (" + indexer.name + ")";
  if (link_decides(r, logits, host_caused, il)) return r;
  try {
    const auto j = judge_indexer_logits(iin, logits.outputs);
    for (const auto& why : j.reasons) r.reasons.push_back(fmt::format("{}: {}", il, why));
    if (j.verdict != Verdict::pass && j.reasons.empty()) r.reasons.push_back(il + ": not within its tolerance");
  } catch (const std::exception& e) {
    r.verdict = Verdict::error;
    r.reasons.push_back(fmt::format("{}: the logits could not be judged: {}", il, e.what()));
    return r;
  }
  if (!r.reasons.empty()) {
    r.verdict = Verdict::fail;
    return r;  // the next links would be judged on logits already wrong
  }

  // 2. Their top-k over each row's causal range, judged against the logits it was given.
  TopkBuffers tb;
  tb.shape = tsh;
  tb.logits = logits.outputs;
  tb.starts.assign(c.indexer.ks.begin(), c.indexer.ks.end());
  tb.ends.assign(c.indexer.ke.begin(), c.indexer.ke.end());
  const TopkInputs tin = tb.view();
  auto sel = run_link<PreparedTopk, TopkOutputs>(
      s, topk, tin, [&] { return topk_entry_plan(topk.impl->info(), tin); }, "chain-topk-" + tag, host_caused, [&] {
        std::string d;
        add_digest(d, tin.logits), add_digest(d, tin.starts), add_digest(d, tin.ends);
        return d;
      });
  const std::string tl = "top-k (" + topk.name + ")";
  if (link_decides(r, sel, host_caused, tl)) return r;
  try {
    // The one boundary between the top-k's index base and the canonical (absolute) one.
    topk_outputs_to_canonical(topk.impl->info().conventions, tin, sel.outputs);
    const auto j = judge_topk(tin, sel.outputs, topk.impl->info().precision, topk.impl->info().conventions.sorted);
    for (const auto& why : j.reasons) r.reasons.push_back(fmt::format("{}: {}", tl, why));
  } catch (const std::exception& e) {
    r.verdict = Verdict::error;
    r.reasons.push_back(fmt::format("{}: the selection could not be judged: {}", tl, e.what()));
    return r;
  }
  if (!r.reasons.empty()) {
    r.verdict = Verdict::fail;
    return r;
  }
  const int64_t exact_rows = rows_with_exact_set(iin, sel.outputs.indices, ash.topk);
  r.description += fmt::format("; the selection is the exact top-k set of the exact logits on {} of {} rows (elsewhere "
                               "a near-tie the top-k rule tolerates)",
                               exact_rows, ash.s_q);

  // 3. The attention over the selected keys, as FlashMLA takes them ([s_q, topk], -1 padded).
  SparsePrefillBuffers ab = c.attention;
  for (std::size_t i = 0; i < ab.indices.size(); ++i) ab.indices[i] = static_cast<int32_t>(sel.outputs.indices[i]);
  const SparsePrefillInputs ain = ab.view();
  try {
    validate_sparse_prefill_inputs(ain, "the top-k's selection as the attention's indices");
    const auto cost = attention.cost(ain);
    r.bytes = cost.bytes;
    r.flops = cost.flops;
  } catch (const std::exception& e) {
    r.verdict = Verdict::error;
    r.reasons.push_back(e.what());
    return r;
  }
  auto run = run_link<PreparedSparsePrefill, SparsePrefillOutputs>(
      s, Link<SparsePrefillImpl>{k.info.name, &attention, k.external ? &k : nullptr}, ain,
      [&] { return sparse_prefill_entry_plan(attention.info(), ain); }, "chain-attention-" + tag, host_caused, [&] {
        std::string d;
        add_digest(d, ain.q), add_digest(d, ain.kv), add_digest(d, ain.indices);
        return d;
      });
  if (host_caused) {
    r.verdict = Verdict::host_error;
    r.reasons.push_back(run.message);
    return r;
  }
  judge_sparse_prefill_run(r, attention, ain, run);
  return r;
}

}  // namespace mla::certify
