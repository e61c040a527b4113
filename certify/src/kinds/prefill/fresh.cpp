// The prefill cases drawn at run time (family fresh, rows of file fresh_prefill): from the run's
// seed, per implementation, inside its claims, so no stored answer can stand in for a computed
// one. Each is a few hundred tokens at most (well under a tenth of a second on one core for the
// oracles and two calls): the CI runs the certifier many times. With --long, two long cases
// besides (draw_prefill_cases says which): on the 2-core VM, 2 s for the fp64 prefill and 18 s
// for the naive fp32 one, oracles included, at one head.
#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kinds/prefill/prefill_rows.hpp"
#include "kinds/stored_kind.hpp"
#include "mla/core/generator.hpp"
#include "mla/workloads/axes.hpp"
#include "mla/workloads/phase_axes.hpp"

namespace mla::certify {
namespace {

using Clock = std::chrono::steady_clock;

class PrefillDraw {
 public:
  explicit PrefillDraw(uint64_t seed) : state_(seed) {}
  uint64_t next() { return gen::mix64(state_++ + 0x9E3779B97F4A7C15ull); }
  int in(int lo, int hi) { return hi <= lo ? lo : lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1)); }

 private:
  uint64_t state_;
};

using Seq = axes::PrefillSeq;

// The two softmax scales a prefill kernel meets: DeepSeek-V3's under YaRN (192^-0.5 · mscale²,
// 0.1352), what a deployment passes, and the plain 192^-0.5 of a model without YaRN. Drawn cases
// use both, so a kernel that drops (or hard-codes) the mscale² factor is red on fresh cases too.
double yarn_scale() { return axes::deepseek_v3_softmax_scale(); }
double plain_scale() { return 1.0 / std::sqrt(static_cast<double>(kMhaDqk)); }

// The inputs of one drawn case: the benchmarks' prefill inputs (mla/workloads/phase_axes.hpp),
// so a drawn case and a bench point of the same lengths and seed are the same bytes.
PrefillBuffers build(uint64_t seed, int heads, bool causal, const std::vector<Seq>& seqs, double q_std, double scale) {
  return axes::build_prefill(seed, heads, causal, seqs, q_std, scale);
}

std::string lengths(const std::vector<Seq>& seqs) {
  std::vector<std::string> parts;
  for (const auto& s : seqs) parts.push_back(fmt::format("{}x{}", s.s_q, s.s_k));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

std::vector<DrawnPrefill> draw_prefill_cases(uint64_t seed, const PrefillCapabilities& caps, bool long_cases) {
  PrefillDraw d(hash_text(seed, "prefill"));
  const int hmin = std::max(1, caps.min_heads), hmax = std::max(hmin, std::min(caps.max_heads, 128));
  const auto odd_heads = [&] { return std::clamp(d.in(hmin, std::min(hmax, 7)) | 1, hmin, hmax); };
  // A kernel that claims fixed-length batches only gets every sequence of a case as its `keep`-th.
  const auto claimable = [&](std::vector<Seq> seqs, std::size_t keep) {
    if (!caps.varlen) std::fill(seqs.begin(), seqs.end(), seqs[keep]);
    return seqs;
  };
  std::vector<DrawnPrefill> cases;
  // One case at `h` heads; `add` draws an odd head count first (the order of the draws is the
  // seed's meaning: it stays the same).
  const auto add_at = [&](int h, const std::string& what, const std::string& about, bool causal,
                          const std::vector<Seq>& seqs, double q_std, double scale) {
    DrawnPrefill c;
    c.name = fmt::format("prefill_{}_h{}", what, h);
    c.description = fmt::format("{} ({}, {} heads, sequences s_q x s_k: {}, softmax scale {:.10f}; drawn from seed "
                                "{}, truth from the C++ oracles)",
                                about, causal ? "causal, bottom-right" : "non-causal", h, lengths(seqs), scale, seed);
    c.inputs = build(d.next(), h, causal, seqs, q_std, scale);
    cases.push_back(std::move(c));
  };
  const auto add = [&](const std::string& what, const std::string& about, bool causal, const std::vector<Seq>& seqs,
                       double q_std, double scale) {
    const int h = odd_heads();
    add_at(h, what, about, causal, seqs, q_std, scale);
  };
  // Causal where it claims causal calls, else the context-chunk call (the same lengths).
  const bool causal = caps.causal;
  if (caps.causal || caps.non_causal) {
    // The tile edges of the field's kernels (64-row blocks) and the empty and one-token sequences.
    std::vector<Seq> seqs;
    for (const int n : {0, 1, 63, 64, 65}) seqs.push_back({n, n});
    std::rotate(seqs.begin(), seqs.begin() + d.in(0, 4), seqs.end());
    const auto at65 = static_cast<std::size_t>(std::find_if(seqs.begin(), seqs.end(), [](Seq s) { return s.s_q == 65; }) - seqs.begin());
    add("varlen", "varlen lengths 0, 1, 63, 64, 65", causal, claimable(seqs, at65), 1.0, yarn_scale());
  }
  if (caps.causal) {
    // Chunked prefill over a cached prefix: fewer queries than keys, bottom-right aligned.
    const int q1 = d.in(1, 8), q2 = d.in(9, 20);
    add("chunk", "a chunk with fewer queries than keys", true,
        claimable({{q1, q1 + d.in(20, 70)}, {q2, q2 + d.in(1, 10)}}, 0), 1.0, yarn_scale());
  }
  if (caps.non_causal) {
    // The context chunk of chunked prefill, one sequence of which has no cached key.
    add("context", "a non-causal context chunk, one sequence with no key", false,
        claimable({{d.in(2, 8), d.in(10, 60)}, {d.in(2, 8), 0}, {d.in(1, 6), d.in(1, 12)}}, 0), 1.0, yarn_scale());
  }
  if (caps.causal || caps.non_causal) {
    // Logits in the hundreds: a softmax without its running maximum overflows (the plain scale,
    // which makes them larger still).
    const int n = d.in(16, 40);
    add("q_std", "q with standard deviation 100", causal, {{n, n}}, 100.0, plain_scale());
  }
  if (long_cases && (caps.causal || caps.non_causal)) {
    // What the short cases cannot show: running maxima and sums over tens of thousands of keys
    // (a kernel that loses precision as it accumulates, or whose tile loop overflows an index,
    // drifts only there), at the lengths a deployment prefills. Drawn after every short case, so
    // --long leaves the short cases of a seed as they were. The fewest heads claimed: the cost is
    // the oracles' (fp64 and the bf16 pipeline), proportional to the heads.
    const int h = hmin;
    // A varlen batch of 16 385 query tokens: one sequence of 8192 (a power of two), the tile
    // edges around it and the empty and one-token sequences; fixed-length kernels get four
    // sequences of 4097 (16 388 tokens).
    std::vector<Seq> batch;
    if (caps.varlen) {
      for (const int n : {8192, 4097, 2048, 1024, 511, 256, 129, 64, 63, 1, 0}) batch.push_back({n, n});
      std::rotate(batch.begin(), batch.begin() + d.in(0, static_cast<int>(batch.size()) - 1), batch.end());
    } else {
      batch.assign(4, Seq{4097, 4097});
    }
    add_at(h, "long_varlen", "a batch of 16K+ tokens, --long", causal, batch, 1.0, yarn_scale());
    // Chunked prefill at the end of a long prompt: a chunk of 257 queries over 32K+ keys, so the
    // last query attends every one of them (causal, bottom-right; else the context-chunk call).
    const int prefix = 32768 + d.in(0, 63);
    add_at(h, "long_chunk", "a 257-query chunk over a prefix of 32K+ keys, --long", causal, {{257, prefix + 257}}, 1.0,
           yarn_scale());
  }
  return cases;
}

void certify_fresh_prefill(Session& s, const Implementation& k, uint64_t seed) {
  if (!k.prefill || k.unavailable) return;
  std::vector<DrawnPrefill> cases;
  try {
    cases = draw_prefill_cases(seed, k.prefill->info().caps, s.options.long_cases);
  } catch (const std::exception& e) {
    auto r = s.base_result({kFresh, kFreshPrefillFile, "prefill"});
    r.verdict = tol::Verdict::error;
    r.reasons.push_back(fmt::format("fresh prefill cases cannot be drawn: {}", e.what()));
    if (s.in_shard(kFresh, r.name)) s.record(k, std::move(r));
    return;
  }
  // In name order, as every drawn row of a run (`mla merge` puts a shard's rows in that order).
  std::sort(cases.begin(), cases.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& c : cases) {
    if (stop_requested(s)) break;
    if (drawn_case(s, k, kFreshPrefillFile, c.name) != Drawn::run) continue;
    const auto t0 = Clock::now();
    const auto in = c.inputs.view();
    PrefillReference reference(in);
    s.record(k, prefill_row(s, k, {kFresh, kFreshPrefillFile, c.name}, c.description, in, reference));
    s.progress << fmt::format("[fresh] {} {:.2f}s: {}={}\n", c.name,
                              std::chrono::duration<double>(Clock::now() - t0).count(), k.info.name,
                              tol::to_string(s.report(k).cases.back().verdict));
  }
  s.save();
}

}  // namespace mla::certify
