// The `fresh` family: cases drawn at run time from the run's seed, inside each implementation's
// claims (its capabilities, the lengths and its own can_implement, asked of every candidate in one
// child; a refused candidate moves into the field's domains), so no stored answer can stand in
// for a computed one. Untrusted kernels get the other case (q negated) between their calls here
// too, judged against its own truth. Inputs come from the
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
#include "run/claims.hpp"
#include <fmt/ranges.h>
#include "mla/certify/host_error.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {

using tol::Verdict;

// The generator's own mixer (one definition of splitmix64 in the suite).
uint64_t mix(uint64_t z) { return gen::mix64(z + 0x9E3779B97F4A7C15ull); }

class DecodeDraw {
 public:
  explicit DecodeDraw(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix(state_++); }
  int in(int lo, int hi) { return hi <= lo ? lo : lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1)); }

 private:
  uint64_t state_;
};

// The choices of one drawn case, from which its point is built.
struct Choice {
  int heads = 1, page = 64, s_q = 1, topk = 0;
  CacheFormat format = CacheFormat::bf16;
  ScaleFmt sf = ScaleFmt::fp32;
  bool causal = true;
  bool alt = false;  // the slot's second form (causal: no row that attends nothing)
};

// What the field's kernels accept, so a kernel that claims only its real domain still gets its
// fresh cases (docs/field.md, "The peers' conventions"): FlashMLA's sparse decode takes 64 or 128
// heads, top-k a multiple of 64, no causal flag, the FP8 cache; its dense decode the bf16 cache
// with 64-token pages; FlashInfer's tests leave out causal rows that attend nothing.
constexpr int kFieldHeads[] = {128, 64, 16};
constexpr int kFieldTopk[] = {64, 128};
constexpr int kFieldPage = 64;
// Candidates asked per slot at most (all of a kernel's in one can_implement child).
constexpr std::size_t kMaxCandidates = 96;

template <class T>
void add_unique(std::vector<T>& v, T x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

// draw_slots' state and its steps, one per kind of slot. Every drawn case follows from the order
// of the draws from `d`: draw() calls the steps in that order, and the s_q and page the dense
// steps share are drawn between the edges and the head range.
struct SlotDrawer {
  const Capabilities& caps;
  DecodeDraw d;
  std::vector<FreshSlot> slots;
  std::vector<int> pages;
  std::vector<CacheFormat> formats;
  bool fp8 = false;
  int hmax = 0, hmin = 0;

  SlotDrawer(const Capabilities& c, uint64_t seed) : caps(c), d(seed) {
    pages = caps.page_sizes.empty() ? std::vector<int>{16, kFieldPage} : caps.page_sizes;
    for (const auto f : {CacheFormat::bf16, CacheFormat::fp8}) {
      if (std::count(caps.cache_formats.begin(), caps.cache_formats.end(), f) > 0) formats.push_back(f);
    }
    fp8 = std::count(formats.begin(), formats.end(), CacheFormat::fp8) > 0;
    hmax = std::min(caps.max_heads, 128), hmin = std::max(caps.min_heads, 1);
  }

  std::vector<FreshSlot> draw() {
    if (formats.empty()) return slots;
    if (caps.dense) {
      dense_edges();
      const int s_q = std::min(caps.max_s_q, d.in(2, 4));
      const int page = pick(pages);
      dense_head_range(s_q, page);
      dense_long(page);
      if (fp8) dense_fp8(page);
      dense_stress(page);
    }
    if (caps.sparse) sparse();
    return std::move(slots);
  }

  int odd_heads() { return std::clamp(d.in(hmin, std::min(hmax, 33)) | 1, hmin, hmax); }
  template <class V>
  typename V::value_type pick(const V& v) {
    return v[static_cast<std::size_t>(d.in(0, static_cast<int>(v.size()) - 1))];
  }

  // A slot: `first` drawn, `build` makes the point of a choice (its lengths drawn once, by the
  // caller, as numbers the choice scales), the candidates every combination of the field's values.
  template <class Build>
  void slot(const std::string& what, Choice first, Build build, bool vary_causal, bool vary_topk,
            bool vary_alt = false) {
    FreshSlot sl;
    sl.what = what;
    std::vector<int> hs{first.heads};
    for (const int h : kFieldHeads) add_unique(hs, std::clamp(h, hmin, hmax));
    add_unique(hs, hmin), add_unique(hs, hmax);
    std::vector<int> ps{first.page};
    for (const int p : pages) add_unique(ps, p);
    std::vector<CacheFormat> fs{first.format};
    for (const auto f : formats) add_unique(fs, f);
    std::vector<bool> cs{first.causal};
    if (vary_causal) add_unique(cs, !first.causal);
    std::vector<int> ts{first.topk};
    if (vary_topk) for (const int t : kFieldTopk) add_unique(ts, t);
    std::vector<bool> alts{false};
    if (vary_alt) alts.push_back(true);
    for (const bool alt : alts) {
    for (const bool c : cs) {
      for (const int t : ts) {
        for (const auto f : fs) {
          for (const int p : ps) {
            for (const int h : hs) {
              if (sl.candidates.size() >= kMaxCandidates) break;
              Choice ch = first;
              ch.heads = h, ch.page = p, ch.format = f, ch.causal = c, ch.topk = t, ch.alt = alt;
              if (f != CacheFormat::fp8) ch.sf = ScaleFmt::fp32;
              sl.candidates.push_back(build(ch));
            }
          }
        }
      }
    }
    }
    slots.push_back(std::move(sl));
  }

  static axes::AxisPoint point(const std::string& what, int batch, const Choice& c, std::vector<int32_t> lens,
                               uint64_t pseed) {
    axes::AxisPoint p;
    p.name = fmt::format("{}_h{}_sq{}_ps{}_{}{}{}{}", what, c.heads, c.s_q, c.page, to_string(c.format),
                         c.format == CacheFormat::fp8 ? std::string("_") + to_string(c.sf) : std::string(),
                         c.topk > 0 ? fmt::format("_topk{}", c.topk) : std::string(), c.causal ? "" : "_noncausal");
    p.why = what;
    p.shape.batch = batch;
    p.shape.s_q = c.s_q;
    p.shape.heads = c.heads;
    p.shape.page_size = c.page;
    p.shape.topk = c.topk;
    p.shape.cache_format = c.format;
    p.shape.causal = c.causal;
    p.seqlens = std::move(lens);
    p.scale_fmt = c.sf;
    // At least one entry of every kind of invalid index the catalog uses in every row.
    p.invalid_per_row = c.topk > 0 ? std::min(c.topk, std::max(axes::kInvalidKinds, c.topk / 4)) : 0;
    p.seed = pseed;
    return p;
  }

  void dense_edges() {
    for (const int page : pages) {
      // Lengths 0, 1, page-1, page, page+1: one varlen batch, or one sequence each.
      Choice c;
      c.heads = odd_heads(), c.page = page, c.format = pick(formats);
      const uint64_t ps = d.next();
      if (caps.varlen) {
        slot(fmt::format("edges{}", page), c, [&, ps](const Choice& ch) {
          return point("edges", 5, ch, {0, 1, ch.page - 1, ch.page, ch.page + 1}, ps);
        }, true, false);
      } else {
        for (const int32_t add : {1, 0}) {
          slot(fmt::format("len{}_{}", page, add), c, [&, ps, add](const Choice& ch) {
            const int32_t L = add ? ch.page + 1 : 1;
            return point(fmt::format("len{}", L), 1, ch, {L}, ps);
          }, true, false);
        }
      }
    }
  }

  void dense_head_range(int s_q, int page) {
    // Both ends of the head range; s_q > 1 causal with a sequence shorter than s_q (rows that
    // attend nothing) next to a longer one.
    for (const int heads : std::set<int>{hmin, hmax}) {
      Choice c;
      c.heads = heads, c.page = page, c.format = formats.front();
      const uint64_t ps = d.next();
      const int u = d.in(1, 3 * 64);
      if (s_q >= 2 && caps.min_s_q <= s_q && caps.varlen) {
        c.s_q = s_q;
        // Its second form, for a kernel that does not claim rows that attend nothing (FlashInfer's
        // tests leave them out): the short sequence just long enough for every row.
        slot(fmt::format("causal_h{}", heads), c, [&, ps, u](const Choice& ch) {
          const auto shortest = static_cast<int32_t>(ch.alt ? ch.s_q : ch.s_q - 1);
          return point(ch.alt ? "causal_seen" : "causal", 2, ch, {shortest, static_cast<int32_t>(ch.page + u)}, ps);
        }, false, false, true);
      } else {
        c.s_q = std::max(1, caps.min_s_q);
        slot(fmt::format("heads_h{}", heads), c, [&, ps, u](const Choice& ch) {
          return point("heads", 1, ch, {static_cast<int32_t>(ch.page + u)}, ps);
        }, true, false);
      }
    }
  }

  void dense_long(int page) {
    // One context of exactly needles::kLongTokens, so `--max-tokens` at that nominal length
    // keeps it: on a bf16 cache it carries needles (fresh_points), at the fewest claimed heads
    // the rule can place them at.
    Choice c;
    c.heads = hmin, c.page = page, c.format = formats.front(), c.s_q = std::max(1, caps.min_s_q);
    const uint64_t ps = d.next();
    slot("long", c, [&, ps](const Choice& ch0) {
      Choice ch = ch0;
      const std::vector<int32_t> lens{static_cast<int32_t>(needles::kLongTokens)};
      if (ch.format == CacheFormat::bf16 && ch.heads == hmin) {
        if (const int h = needles::fewest_heads(lens, ch.page, hmin, hmax); h > 0) ch.heads = h;
      }
      return point("long", 1, ch, lens, ps);
    }, true, false);
  }

  void dense_fp8(int page) {
    for (const ScaleFmt sf : {ScaleFmt::fp32, ScaleFmt::ue8m0}) {
      Choice c;
      c.heads = odd_heads(), c.page = page, c.format = CacheFormat::fp8, c.sf = sf;
      const uint64_t ps = d.next();
      const int u1 = d.in(1, 128), u2 = d.in(1, 128);
      slot(fmt::format("fp8_{}", to_string(sf)), c, [&, ps, u1, u2](const Choice& ch) {
        return point("fp8", 2, ch, {u1, u2}, ps);
      }, true, false);
    }
  }

  void dense_stress(int page) {
    // The catalog's stress classes, drawn afresh.
    Choice c;
    c.heads = odd_heads(), c.page = page, c.format = pick(formats);
    const uint64_t ps = d.next();
    const int u = d.in(64, 1024);
    slot("large_q", c, [&, ps, u](const Choice& ch) {
      auto p = point("large_q_std100", 1, ch, {u}, ps);
      p.q_std = 100.0;
      return p;
    }, true, false);
    Choice t = c;
    t.format = fp8 ? CacheFormat::fp8 : formats.front();
    t.sf = fp8 ? pick(std::vector<ScaleFmt>{ScaleFmt::fp32, ScaleFmt::ue8m0}) : ScaleFmt::fp32;
    const uint64_t ps2 = d.next();
    slot("tiny_kv", t, [&, ps2, u](const Choice& ch) {
      auto p = point("tiny_kv_std1e-6", 1, ch, {u}, ps2);
      p.kv_std = 1e-6;
      return p;
    }, true, false);
  }

  void sparse() {
    // One sparse case with an odd head count and a top-k no field kernel uses, one inside the
    // field's sparse domain (64 or 128 heads, top-k a multiple of 64, not causal), per format.
    const int page = std::find(pages.begin(), pages.end(), kFieldPage) != pages.end() ? kFieldPage : pages.back();
    for (const auto f : formats) {
      const ScaleFmt sf = f == CacheFormat::fp8 ? ScaleFmt::ue8m0 : ScaleFmt::fp32;
      Choice odd;
      odd.heads = odd_heads(), odd.page = page, odd.format = f, odd.sf = sf, odd.topk = 32;
      const uint64_t ps = d.next();
      const int u1 = d.in(8, 128), u2 = d.in(40, 192);
      slot(fmt::format("sparse_{}", to_string(f)), odd, [&, ps, u1, u2](const Choice& ch) {
        return point("sparse", 2, ch, {u1, static_cast<int32_t>(u2)}, ps);
      }, true, true);
      Choice field = odd;
      field.heads = std::clamp(pick(std::vector<int>{64, 128}), hmin, hmax);
      field.topk = pick(std::vector<int>{64, 128});
      field.causal = false;
      const uint64_t ps2 = d.next();
      const int v1 = d.in(8, 64), v2 = d.in(64, 256);
      slot(fmt::format("sparse_field_{}", to_string(f)), field, [&, ps2, v1, v2](const Choice& ch) {
        // One row shorter than top-k (it ends in invalid entries), one longer.
        return point("sparse_field", 2, ch, {v1, static_cast<int32_t>(ch.topk + v2)}, ps2);
      }, true, true);
    }
  }
};

// The slots one implementation's declared capabilities allow, each with its candidates: the
// drawn choice first, then the same case moved into the field's domains one more dimension at a
// time. Heads at both ends of its range and an odd one between, s_q > 1 causal with rows that
// see nothing, every claimed page size with lengths 0, 1, page-1, page, page+1 (varlen batches
// when claimed), one context of needles::kLongTokens, sparse rows with invalid entries, both
// cache formats and both FP8 scale formats when claimed, and the catalog's stress classes: q of
// std 100 (logits that overflow without the running maximum), a cache of std 1e-6 (near-equal
// logits; on FP8 blocks of tiny amax, where the scale recipes differ).
std::vector<FreshSlot> draw_slots(const Capabilities& caps, uint64_t seed) { return SlotDrawer(caps, seed).draw(); }

// What fresh_points and the certifier do to every drawn point: paging derived, needles on a long
// bf16 case where the rule can place them, and the why.
void finish(axes::AxisPoint& p) {
  axes::derive_paging(p);
  if (!needles::is_long(p.seqlens)) return;
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

}  // namespace

uint64_t fresh_seed(uint64_t run_seed, const std::string& implementation) {
  // The suite's own text hash, not std::hash: --seed must draw the same cases with any standard
  // library, on any machine.
  return hash_text(mix(run_seed ^ 0xF2E5Aull), implementation);
}

std::vector<FreshSlot> fresh_slots(const Capabilities& caps, uint64_t seed) {
  auto slots = draw_slots(caps, seed);
  for (auto& sl : slots) {
    for (auto& p : sl.candidates) finish(p);
  }
  return slots;
}

namespace {
bool inside(const Capabilities& caps, const axes::AxisPoint& p) {
  return !check_capabilities(caps, p.shape) && !check_varlen(caps, p.seqlens);
}
void by_name(std::vector<axes::AxisPoint>& points) {
  // In name order, the order `mla merge` restores when it combines the shards of a run.
  std::stable_sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
}
}  // namespace

std::vector<axes::AxisPoint> fresh_points(const Capabilities& caps, uint64_t seed) {
  std::vector<axes::AxisPoint> points;
  std::set<std::string> names;
  for (auto& sl : fresh_slots(caps, seed)) {
    for (auto& p : sl.candidates) {
      if (!inside(caps, p) || names.count(p.name)) continue;
      names.insert(p.name);
      points.push_back(std::move(p));
      break;
    }
  }
  by_name(points);
  return points;
}

bool fresh_selected(const Options& o) {
  return o.families.empty() || std::find(o.families.begin(), o.families.end(), kFresh) != o.families.end();
}

namespace {

void note_once(std::vector<std::string>& notes, std::string why) {
  if (std::find(notes.begin(), notes.end(), why) == notes.end()) notes.push_back(std::move(why));
}

// Of each slot, the first candidate `k` claims, its can_implement included (all of its questions
// in one child); a slot with none is a note naming what was asked, a can_implement that failed an
// ERROR row of the kernel. In name order.
std::vector<axes::AxisPoint> choose_points(Session& s, const Implementation& k, std::vector<FreshSlot> slots) {
  auto& notes = s.cert.kernels[k.report_index].notes;
  std::vector<ClaimQuestion> questions;
  for (auto& sl : slots) {
    std::erase_if(sl.candidates, [&](const axes::AxisPoint& p) { return claim_refusal(k, p.shape, &p.seqlens).has_value(); });
    for (const auto& p : sl.candidates) questions.push_back({p.shape, p.scale_fmt, p.seqlens});
  }
  ask_claims(s, k, questions);
  std::vector<axes::AxisPoint> points;
  std::set<std::string> names;
  std::vector<std::string> none;
  for (auto& sl : slots) {
    bool chosen = false;
    std::size_t refused = 0;
    for (auto& p : sl.candidates) {
      if (names.count(p.name)) continue;
      Claim c;
      try {
        c = claim(s, k, p.shape, p.scale_fmt, p.seqlens);
      } catch (const std::exception& e) {
        reports::CaseResult r;
        r.family = r.file = kFresh;
        r.name = p.name;
        r.description = fmt::format("drawn at run time from seed {}: {}", s.seed, p.why);
        r.verdict = Verdict::error;
        r.reasons.push_back(fmt::format("the claim could not be decided (can_implement): {}", e.what()));
        s.record(k, std::move(r));
        chosen = true;
        break;
      }
      if (!c.claimed) {
        ++refused;
        continue;
      }
      names.insert(p.name);
      points.push_back(std::move(p));
      chosen = true;
      break;
    }
    if (!chosen && !sl.candidates.empty()) none.push_back(fmt::format("{} ({} candidates refused)", sl.what, refused));
  }
  if (!none.empty()) {
    note_once(notes, fmt::format("{}: no case drawn inside its claims for {}", kFresh, fmt::join(none, ", ")));
  }
  by_name(points);
  return points;
}

}  // namespace

void certify_fresh_decode(Session& s, const Implementation& k, uint64_t seed) {
  std::vector<axes::AxisPoint> points;
  try {
    points = choose_points(s, k, fresh_slots(k.info.caps, seed));
  } catch (const std::exception& e) {
    // The host could not draw: a row, never a silent gap (the run cannot read as a pass).
    reports::CaseResult r;
    r.family = kFresh;
    r.file = kFresh;
    r.name = "draw";
    r.description = fmt::format("the cases drawn from seed {} inside {}'s claims", s.seed, k.info.name);
    r.verdict = Verdict::host_error;
    r.reasons.push_back(fmt::format("the fresh cases could not be drawn: {}", e.what()));
    s.progress << fmt::format("[{}] {} draw {}\n", kFresh, k.info.name, tol::to_string(r.verdict));
    s.record(k, std::move(r));
    return;
  }
  if (points.empty()) {
    note_once(s.cert.kernels[k.report_index].notes,
              kFresh + ": no case can be drawn inside its claims (neither a dense nor a sparse call on a cache "
                       "format the fresh family generates, or its can_implement refused every candidate)");
  }
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (stop_requested(s)) break;
    auto& p = points[i];
    if (s.case_regex && !std::regex_search(fresh_key(p.name), *s.case_regex)) continue;
    // Split like the catalog's cases; the shards of one run share its seed (mla merge refuses
    // shards whose options, the seed among them, differ), so together they hold each drawn case once.
    if (!s.in_shard(kFresh, p.name)) continue;
    // --resume keeps a drawn case's result exactly as a catalog case's: same seed, same draw.
    if (auto kept = s.kept_drawn(k, {kFresh, kFresh, p.name}, &p.seqlens)) {
      s.record(k, std::move(*kept));
      continue;
    }
    reports::CaseResult r;
    r.family = kFresh;
    r.file = kFresh;
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
        r.cause = reports::Cause::over_max_tokens;
        r.reasons.push_back(fmt::format("cache of {} tokens > --max-tokens {}", tokens, *s.options.max_tokens));
        s.record(k, std::move(r));
        continue;
      }
      const auto truth = compute_truth(b.view());
      CallSchedule plan;
      plan.calls = k.external ? calls_per_case(s.seed, k.info.name, fresh_key(p.name)) : std::max(1, s.options.repeats);
      plan.second_process = k.external;
      if (b.shape.cache_format == CacheFormat::fp8) plan.scale_fmt = p.scale_fmt;
      // Untrusted kernels get the other case between their calls here too, and it is judged.
      std::optional<AttnBuffers> between;
      std::optional<ComputedTruth> between_truth;
      if (k.external) {
        between = negated_q(b.view());
        plan.between = between->view();
      }
      const auto run = run_declared(s, k, b.view(), plan, fmt::format("fresh-{}-{}", k.report_index, i));
      if (between && run.status == RunResult::Status::ran) between_truth = compute_truth(between->view());
      const AttentionTruth bt = between_truth ? between_truth->view() : AttentionTruth{};
      judge_run(r, k, b.shape, run, truth.view(), between_truth ? &bt : nullptr);
    } catch (const std::exception& e) {
      r.verdict = failure_verdict(e);
      r.reasons.push_back(fmt::format("the fresh case could not be built or judged: {}", e.what()));
    }
    s.progress << fmt::format("[fresh] {} {} {}\n", k.info.name, p.name, tol::to_string(r.verdict));
    s.record(k, std::move(r));
  }
  s.save();
}

}  // namespace mla::certify
