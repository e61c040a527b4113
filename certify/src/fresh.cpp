// The `fresh` family: cases drawn at run time from the run's seed, inside each implementation's
// claims, so no stored answer can stand in for a computed one. Inputs come from the
// counter-based generator (mla/workloads/axes.hpp `build_inputs`: permuted pages, NaN-poisoned
// unused slots, the catalog's sentinel block id, sparse rows with every kind of invalid index the
// catalog uses, and on a long bf16 case the catalog's needles, mla/core/needles.hpp); truth from
// the C++ fp64 oracle (mla/ref/attention.hpp) and the deployed-precision reference the ratio rule
// needs from mla/ref/same_dtype.hpp. Judged like every catalog case, by judge_attention. A plug-in
// with an append entry then gets its fresh cache-append cases (append_case.cpp) from the same seed.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "mla/core/generator.hpp"
#include "mla/core/needles.hpp"

#include "mla/judge/attention.hpp"
#include "mla/ref/attention.hpp"
#include "mla/ref/same_dtype.hpp"
#include "mla/workloads/axes.hpp"
#include "mla/certify/fresh.hpp"
#include "claims.hpp"
#include "mla/certify/host_error.hpp"
#include "session.hpp"

namespace mla::certify {
namespace {

using tol::Verdict;

// The generator's own mixer (one definition of splitmix64 in the suite).
uint64_t mix(uint64_t z) { return gen::mix64(z + 0x9E3779B97F4A7C15ull); }

class Draw {
 public:
  explicit Draw(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix(state_++); }
  int in(int lo, int hi) { return hi <= lo ? lo : lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1)); }

 private:
  uint64_t state_;
};

// The shapes one implementation's claims allow, drawn: heads at both ends of its range and an
// odd one between, s_q > 1 causal with rows that see nothing, every claimed page size with
// lengths 0, 1, page-1, page, page+1 (varlen batches when claimed), one context >= 16K, sparse
// rows with invalid entries, both cache formats and both FP8 scale formats when claimed.
std::vector<axes::AxisPoint> draw_points(const Capabilities& caps, uint64_t seed) {
  Draw d(seed);
  std::vector<axes::AxisPoint> v;
  const std::vector<int> pages = caps.page_sizes.empty() ? std::vector<int>{16, 64} : caps.page_sizes;
  const bool bf16 = std::count(caps.cache_formats.begin(), caps.cache_formats.end(), CacheFormat::bf16) > 0;
  const bool fp8 = std::count(caps.cache_formats.begin(), caps.cache_formats.end(), CacheFormat::fp8) > 0;
  const int hmax = std::min(caps.max_heads, 128), hmin = std::max(caps.min_heads, 1);
  auto odd_heads = [&] {
    int h = d.in(hmin, std::min(hmax, 33)) | 1;
    return std::clamp(h, hmin, hmax);
  };
  auto point = [&](const std::string& what, int batch, int s_q, int heads, int page, std::vector<int32_t> lens,
                   CacheFormat format, ScaleFmt sf, int topk) {
    axes::AxisPoint p;
    p.name = fmt::format("{}_h{}_sq{}_ps{}_{}{}", what, heads, s_q, page, to_string(format),
                         format == CacheFormat::fp8 ? std::string("_") + to_string(sf) : std::string());
    p.why = what;
    p.shape.batch = batch;
    p.shape.s_q = s_q;
    p.shape.heads = heads;
    p.shape.page_size = page;
    p.shape.topk = topk;
    p.shape.cache_format = format;
    p.shape.causal = true;
    p.seqlens = std::move(lens);
    p.scale_fmt = sf;
    // At least one entry of every kind of invalid index the catalog uses in every row.
    p.invalid_per_row = topk > 0 ? std::min(topk, std::max(axes::kInvalidKinds, topk / 4)) : 0;
    p.seed = d.next();
    v.push_back(std::move(p));
  };
  std::vector<CacheFormat> formats;
  if (bf16) formats.push_back(CacheFormat::bf16);
  if (fp8) formats.push_back(CacheFormat::fp8);
  if (formats.empty()) return v;
  if (caps.dense) {
    for (const int page : pages) {
      // Lengths 0, 1, page-1, page, page+1: one varlen batch, or one sequence each.
      std::vector<int32_t> lens{0, 1, page - 1, page, page + 1};
      const auto f = formats[static_cast<std::size_t>(d.in(0, static_cast<int>(formats.size()) - 1))];
      if (caps.varlen) {
        point("edges", 5, 1, odd_heads(), page, lens, f, ScaleFmt::fp32, 0);
      } else {
        for (const int32_t L : {1, page + 1}) point(fmt::format("len{}", L), 1, 1, odd_heads(), page, {L}, f, ScaleFmt::fp32, 0);
      }
    }
    // Both ends of the head range; s_q > 1 causal with a sequence shorter than s_q (rows that
    // attend nothing) next to a longer one.
    const int page = pages[static_cast<std::size_t>(d.in(0, static_cast<int>(pages.size()) - 1))];
    const int s_q = std::min(caps.max_s_q, d.in(2, 4));
    for (const int heads : std::set<int>{hmin, hmax}) {
      if (s_q >= 2 && caps.min_s_q <= s_q && caps.varlen) {
        point("causal", 2, s_q, heads, page, {static_cast<int32_t>(s_q - 1), static_cast<int32_t>(d.in(page, 3 * page))},
              formats.front(), ScaleFmt::fp32, 0);
      } else {
        point("heads", 1, std::max(1, caps.min_s_q), heads, page, {static_cast<int32_t>(d.in(page, 3 * page))},
              formats.front(), ScaleFmt::fp32, 0);
      }
    }
    // One context of at least 16K tokens, few heads: on a bf16 cache it carries needles
    // (certify_fresh), at the fewest claimed heads the rule can place them at.
    {
      const std::vector<int32_t> lens{static_cast<int32_t>(needles::kLongTokens + d.in(1, page))};
      int heads = hmin;
      if (formats.front() == CacheFormat::bf16) {
        if (const int h = needles::fewest_heads(lens, page, hmin, hmax); h > 0) heads = h;
      }
      point("long", 1, std::max(1, caps.min_s_q), heads, page, lens, formats.front(), ScaleFmt::fp32, 0);
    }
    if (fp8) {
      for (const ScaleFmt sf : {ScaleFmt::fp32, ScaleFmt::ue8m0}) {
        point("fp8", 2, 1, odd_heads(), page, {static_cast<int32_t>(d.in(1, 2 * page)), static_cast<int32_t>(d.in(1, 2 * page))},
              CacheFormat::fp8, sf, 0);
      }
    }
  }
  if (caps.sparse) {
    const int page = pages.back();
    for (const auto f : formats) {
      point("sparse", 2, 1, odd_heads(), page, {static_cast<int32_t>(d.in(8, 2 * page)), static_cast<int32_t>(d.in(40, 3 * page))},
            f, f == CacheFormat::fp8 ? ScaleFmt::ue8m0 : ScaleFmt::fp32, 32);
    }
  }
  return v;
}

}  // namespace

uint64_t fresh_seed(uint64_t run_seed, const std::string& implementation) {
  // The suite's own text hash, not std::hash: --seed must draw the same cases with any standard
  // library, on any machine.
  return hash_text(mix(run_seed ^ 0xF2E5Aull), implementation);
}

std::vector<axes::AxisPoint> fresh_points(const Capabilities& caps, uint64_t seed) {
  std::vector<axes::AxisPoint> points = draw_points(caps, seed);
  for (auto& p : points) {
    p.shape.causal = true;
    axes::derive_paging(p);
    if (!needles::is_long(p.seqlens)) continue;
    // Long cases on a bf16 cache carry needles exactly as the catalog's do.
    const std::string no = p.shape.cache_format == CacheFormat::bf16
                               ? needles::refusal(p.seqlens, p.shape.page_size, p.shape.heads)
                               : std::string("they are defined over bf16 caches only");
    p.needles = no.empty();
    if (p.needles) {
      int64_t n = 0;
      for (const int32_t L : p.seqlens) n += static_cast<int64_t>(needles::positions(L, p.shape.page_size).size());
      p.why += fmt::format(", with {} needles ({}: first and last position, both sides of every page and 64-token tile "
                           "boundary, fixtures/SCHEMA.md \"Needles\")",
                           n, needles::kRule);
    } else {
      p.why += ", no needles: " + no;
    }
  }
  // In name order, the order `mla merge` restores when it combines the shards of a run.
  std::stable_sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return points;
}

bool fresh_selected(const Options& o) {
  return o.families.empty() || std::find(o.families.begin(), o.families.end(), "fresh") != o.families.end();
}

void certify_fresh(Session& s) {
  for (auto& k : s.implementations) {
    if (stop_requested(s)) return;
    if (k.unavailable) continue;
    std::vector<axes::AxisPoint> points;
    try {
      points = fresh_points(k.info.caps, fresh_seed(s.seed, k.info.name));
    } catch (const std::exception& e) {
      // The host could not draw: a row, never a silent gap (the run cannot read as a pass).
      reports::CaseResult r;
      r.family = "fresh";
      r.file = "fresh";
      r.name = "draw";
      r.description = fmt::format("the cases drawn from seed {} inside {}'s claims", s.seed, k.info.name);
      r.verdict = Verdict::host_error;
      r.reasons.push_back(fmt::format("the fresh cases could not be drawn: {}", e.what()));
      s.progress << fmt::format("[fresh] {} draw {}\n", k.info.name, tol::to_string(r.verdict));
      s.record(k, std::move(r));
      continue;
    }
    if (points.empty()) {
      auto& notes = s.cert.kernels[k.report_index].notes;
      const std::string why =
          "fresh: no case can be drawn inside its claims (neither a dense nor a sparse call on a cache format the "
          "fresh family generates)";
      if (std::find(notes.begin(), notes.end(), why) == notes.end()) notes.push_back(why);
    }
    for (std::size_t i = 0; i < points.size(); ++i) {
      if (stop_requested(s)) break;
      auto& p = points[i];
      if (s.case_regex && !std::regex_search("fresh/" + p.name, *s.case_regex)) continue;
      // Split like the catalog's cases; the shards of one run share its seed (mla merge refuses
      // shards whose options, the seed among them, differ), so together they hold each drawn case once.
      if (!s.in_shard("fresh", p.name)) continue;
      // --resume keeps a drawn case's result exactly as a catalog case's: same seed, same draw.
      if (auto kept = s.kept_drawn(k, {"fresh", "fresh", p.name}, &p.seqlens)) {
        s.record(k, std::move(*kept));
        continue;
      }
      reports::CaseResult r;
      r.family = "fresh";
      r.file = "fresh";
      r.name = p.name;
      r.description = fmt::format("drawn at run time from seed {} (inside {}'s claims): {}", s.seed, k.info.name, p.why);
      try {
        const auto in = axes::build_inputs(p);
        AttnBuffers b;
        b.shape = in.shape;
        b.softmax_scale = axes::deepseek_v3_softmax_scale();
        b.q = in.q;
        b.kv_cache = in.kv_cache;
        b.block_table = in.block_table;
        b.cache_seqlens = in.cache_seqlens;
        b.indices = in.indices;
        r.shape = to_json(b.shape);
        if (b.shape.cache_format == CacheFormat::fp8) r.shape["scale_fmt"] = to_string(p.scale_fmt);
        r.shape["cache_seqlens"] = b.cache_seqlens;
        int64_t tokens = 0;
        for (const int32_t L : b.cache_seqlens) tokens += L;
        if (s.options.max_tokens && tokens > *s.options.max_tokens) {
          r.verdict = Verdict::skipped;
          r.reasons.push_back(fmt::format("cache of {} tokens > --max-tokens {}", tokens, *s.options.max_tokens));
          s.record(k, std::move(r));
          continue;
        }
        if (auto no = claim_refusal(k, b.shape, &b.cache_seqlens)) {
          r.verdict = Verdict::not_claimed;
          r.reasons.push_back(*no);
          s.record(k, std::move(r));
          continue;
        }
        const auto truth = ref::attention_fp64(b.view());
        const auto same = ref::attention_same_dtype(b.view());
        CallSchedule plan;
        plan.calls = k.plugin ? calls_per_case(s.seed, k.info.name, "fresh/" + p.name) : std::max(1, s.options.repeats);
        plan.second_process = k.plugin;
        if (b.shape.cache_format == CacheFormat::fp8) plan.scale_fmt = p.scale_fmt;
        const auto run = run_declared(s, k, b.view(), plan, fmt::format("fresh-{}-{}", k.report_index, i));
        AttentionTruth t;
        t.out = truth.out;
        t.lse = truth.lse;
        t.same_dtype_out = same.out;
        t.same_dtype_lse = same.lse;
        judge_run(r, k, b.shape, run, t);
      } catch (const std::exception& e) {
        r.verdict = failure_verdict(e);
        r.reasons.push_back(fmt::format("the fresh case could not be built or judged: {}", e.what()));
      }
      s.progress << fmt::format("[fresh] {} {} {}\n", k.info.name, p.name, tol::to_string(r.verdict));
      s.record(k, std::move(r));
    }
    s.save();
    if (stop_requested(s)) return;
    // Then its appends, drawn from the same seed (rows of file fresh_append, after the attention rows).
    certify_fresh_appends(s, k, fresh_seed(s.seed, k.info.name));
  }
}

}  // namespace mla::certify
