#include "mla/certify/append_case.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "mla/certify/host_error.hpp"
#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/presets.hpp"
#include "mla/golden/families.hpp"
#include "mla/judge/append.hpp"
#include "mla/ref/rope.hpp"
#include "mla/reports/certificate.hpp"
#include "kinds/append/append_arena.hpp"
#include "kinds/kinds.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {

using nlohmann::json;
using tol::Verdict;
constexpr int64_t kLat = static_cast<int64_t>(kLatentDim), kRp = static_cast<int64_t>(kRopeDim);
// Streams of the counter-based generator, one per array, so no two arrays share values.
enum Stream : uint64_t { kLatentStream = 101, kRopeStream, kWeightStream, kBlockStream, kCacheStream, kOrderStream };

struct Token {
  int32_t seq, pos;
};

struct Plan {
  std::string what, description;
  std::vector<Token> tokens;
  bool reject;
};

struct Variant {
  CacheFormat format;
  ScaleFmt scale;
  uint32_t abi_scale;
  Fp8Recipe recipe;
  uint32_t abi_recipe;
};

// Every claimed format: bf16; fp8 with every declared recipe and every declared scale format
// (none declared is DeepSeek's).
std::vector<Variant> claimed_variants(uint32_t formats, uint32_t scale_fmts, uint32_t fp8_recipes) {
  std::vector<Variant> variants;
  if (formats & MLA_PLUGIN_CACHE_BF16) variants.push_back({CacheFormat::bf16, ScaleFmt::fp32, 0, Fp8Recipe::deepseek_v32, 0});
  if (formats & MLA_PLUGIN_CACHE_FP8) {
    const uint32_t recipes = fp8_recipes ? fp8_recipes : MLA_PLUGIN_RECIPE_DEEPSEEK_V32;
    for (const auto& [recipe, abi_recipe] : {std::pair{Fp8Recipe::deepseek_v32, MLA_PLUGIN_RECIPE_DEEPSEEK_V32},
                                             std::pair{Fp8Recipe::flashmla, MLA_PLUGIN_RECIPE_FLASHMLA}}) {
      if (!(recipes & abi_recipe)) continue;
      if (scale_fmts & MLA_PLUGIN_SCALE_FP32) {
        variants.push_back({CacheFormat::fp8, ScaleFmt::fp32, MLA_PLUGIN_SCALE_FP32, recipe, abi_recipe});
      }
      if (scale_fmts & MLA_PLUGIN_SCALE_UE8M0) {
        variants.push_back({CacheFormat::fp8, ScaleFmt::ue8m0, MLA_PLUGIN_SCALE_UE8M0, recipe, abi_recipe});
      }
    }
  }
  return variants;
}

// The paging, RoPE and norm weight every call of one set of cases shares.
struct Layout {
  uint64_t seed = 0;
  int32_t batch = 0, page = 0, max_blocks = 0, num_blocks = 0;
  int64_t max_seq_len = 0;
  std::vector<int32_t> block_table;
  std::vector<double> inv_freq;
  std::vector<uint16_t> weight;
  // Tokens whose values are replaced by an edge: an all-zero latent (RMSNorm of zeros: eps
  // alone, output 0), and one whose last 128-block is a million times smaller (its amax below
  // the 1e-4 scale clamp).
  Token zero_latent{1, 0}, tiny_block{0, 1};
};

// One case per (variant, plan): the plans' tokens with values keyed by (sequence, position), so
// a token has the same inputs in every case, on a cache whose bytes start as a known pattern.
std::vector<AppendCase> build_cases(const Layout& l, const std::vector<Plan>& plans, const std::vector<Variant>& variants,
                                    const std::string& prefix, const std::string& about) {
  const uint64_t seed = l.seed;
  std::vector<AppendCase> out;
  for (const auto& v : variants) {
    const std::string fmt_name = append_variant_name(v.format, v.scale, v.recipe);
    const std::size_t bpt = cache_bytes_per_token(v.format);
    for (std::size_t pi = 0; pi < plans.size(); ++pi) {
      const auto& p = plans[pi];
      AppendCase c;
      c.name = fmt::format("{}/{}/{}", prefix, fmt_name, p.what);
      c.description = fmt::format("append ({}){}: {}", fmt_name, about, p.description);
      c.format = v.format;
      c.scale_fmt = v.scale;
      c.fp8_recipe = v.recipe;
      c.expect_capacity = p.reject;
      auto& in = c.in;
      const int32_t n = static_cast<int32_t>(p.tokens.size());
      in.num_tokens = n;
      in.batch = l.batch;
      in.max_blocks = l.max_blocks;
      in.page_size = l.page;
      in.num_blocks = l.num_blocks;
      in.max_seq_len = l.max_seq_len;
      in.cache_format = v.format == CacheFormat::fp8 ? MLA_PLUGIN_CACHE_FP8 : MLA_PLUGIN_CACHE_BF16;
      in.scale_fmt = v.abi_scale;
      in.fp8_recipe = v.abi_recipe;
      in.eps = 1e-6;  // the schema's kv_norm epsilon
      in.kv_norm_weight = l.weight;
      in.inv_freq = l.inv_freq;
      in.block_table = l.block_table;
      for (const auto& t : p.tokens) {
        in.seq_ids.push_back(t.seq);
        in.positions.push_back(t.pos);
      }
      in.latent.resize(static_cast<std::size_t>(n * kLat));
      in.k_pe.resize(static_cast<std::size_t>(n * kRp));
      for (int32_t i = 0; i < n; ++i) {
        const Token& t = p.tokens[static_cast<std::size_t>(i)];
        const uint64_t key = static_cast<uint64_t>(t.seq) * 1000003u + static_cast<uint64_t>(t.pos);
        std::span<uint16_t> lat(in.latent.data() + i * kLat, static_cast<std::size_t>(kLat));
        gen::fill_bf16(seed + key, kLatentStream, 0.0, 2.0, lat);
        gen::fill_bf16(seed + key, kRopeStream, 0.0, 1.0, std::span<uint16_t>(in.k_pe.data() + i * kRp, static_cast<std::size_t>(kRp)));
        if (t.seq == l.zero_latent.seq && t.pos == l.zero_latent.pos) {
          std::fill(lat.begin(), lat.end(), uint16_t{0});
        } else if (t.seq == l.tiny_block.seq && t.pos == l.tiny_block.pos) {
          for (int64_t j = 3 * 128; j < kLat; ++j) lat[static_cast<std::size_t>(j)] = bf16_from_double(bf16_to_float(lat[static_cast<std::size_t>(j)]) * 1e-6);
        }
      }
      in.kv_cache.resize(static_cast<std::size_t>(l.num_blocks) * l.page * bpt);
      for (std::size_t i = 0; i < in.kv_cache.size(); ++i) {
        in.kv_cache[i] = static_cast<uint8_t>(gen::bits(seed, kCacheStream + pi, i));
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

// Two spare blocks no sequence maps (whose bytes nothing may touch) and one block-table entry
// per sequence past capacity, mapped to a real block (see the header), over a permutation of
// the physical blocks.
Layout make_layout(uint64_t seed, int32_t batch, int32_t page, int64_t max_seq_len, const ModelConfig& rope) {
  Layout l;
  l.seed = seed;
  l.batch = batch;
  l.page = page;
  l.max_seq_len = max_seq_len;
  l.max_blocks = static_cast<int32_t>((max_seq_len + page - 1) / page + 1);
  l.num_blocks = batch * l.max_blocks + 2;
  l.block_table.resize(static_cast<std::size_t>(batch * l.max_blocks));
  const auto perm = gen::permutation(seed, kBlockStream, l.num_blocks);
  for (std::size_t i = 0; i < l.block_table.size(); ++i) l.block_table[i] = static_cast<int32_t>(perm[i]);
  l.inv_freq = ref::rope_inv_freq(rope);
  l.weight.resize(static_cast<std::size_t>(kLat));
  gen::fill_bf16(seed, kWeightStream, 1.0, 0.2, l.weight);
  return l;
}

}  // namespace

ref::AppendProblem AppendCase::problem() const {
  auto widen = [](const std::vector<uint16_t>& bits) {
    std::vector<double> v(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) v[i] = bf16_to_float(bits[i]);
    return v;
  };
  ref::AppendProblem p;
  p.num_tokens = in.num_tokens;
  p.latent = widen(in.latent);
  p.k_pe = widen(in.k_pe);
  p.kv_norm_weight = widen(in.kv_norm_weight);
  p.inv_freq = in.inv_freq;
  p.eps = in.eps;
  p.seq_ids = in.seq_ids;
  p.positions = in.positions;
  p.block_table = in.block_table;
  p.batch = in.batch;
  p.max_blocks = in.max_blocks;
  p.page_size = in.page_size;
  p.num_blocks = in.num_blocks;
  p.max_seq_len = in.max_seq_len;
  p.format = format;
  p.scale_fmt = scale_fmt;
  p.fp8_recipe = fp8_recipe;
  return p;
}

std::string append_variant_name(CacheFormat format, ScaleFmt scale_fmt, Fp8Recipe recipe) {
  if (format == CacheFormat::bf16) return "bf16";
  // DeepSeek's recipe keeps the names it had when it was the only one.
  return recipe == Fp8Recipe::deepseek_v32 ? fmt::format("fp8_{}", to_string(scale_fmt))
                                           : fmt::format("fp8_{}_{}", to_string(scale_fmt), to_string(recipe));
}

json AppendCase::shape() const {
  json j = {{"cache_format", to_string(format)}, {"batch", in.batch},         {"page_size", in.page_size},
            {"num_blocks", in.num_blocks},       {"max_blocks", in.max_blocks}, {"max_seq_len", in.max_seq_len},
            {"num_tokens", in.num_tokens},       {"positions", in.positions}, {"seq_ids", in.seq_ids}};
  if (format == CacheFormat::fp8) {
    j["scale_fmt"] = to_string(scale_fmt);
    j["fp8_recipe"] = to_string(fp8_recipe);
  }
  return j;
}

std::vector<AppendCase> make_append_cases(const golden::LayerCase& g, uint32_t formats, uint32_t scale_fmts,
                                          uint32_t fp8_recipes, const Capabilities& caps) {
  const int64_t msl = g.config.max_seq_len;
  if (!g.accept || !g.reject || g.steps.empty()) {
    throw Error(fmt::format("{}/{}: a cache_boundary case needs steps/0, accept and reject", g.file, g.name));
  }
  if (g.accept->start_pos != msl - 1 || g.reject->start_pos != msl) {
    throw Error(fmt::format("{}/{}: accept at {} and reject at {} are not max_seq_len - 1 and max_seq_len ({})", g.file,
                            g.name, g.accept->start_pos, g.reject->start_pos, msl));
  }
  const int64_t prefill = g.steps[0].x.shape.size() >= 2 ? g.steps[0].x.shape[1] : 0;
  if (msl < 2 || prefill < 1 || prefill > msl) {
    throw Error(fmt::format("{}/{}: max_seq_len {} / prefill {} leave no room for the cases", g.file, g.name, msl, prefill));
  }
  const uint64_t seed = static_cast<uint64_t>(g.seed);
  const int32_t page = caps.page_sizes.empty() ? 16 : caps.page_sizes.front();
  ModelConfig cfg = g.config;
  cfg.qk_rope_head_dim = kRp;  // the ABI's width; the golden's theta and YaRN parameters stay
  const Layout layout = make_layout(seed, 2, page, msl, cfg);

  std::vector<Plan> plans;
  {
    Plan p{"prefill", "", {}, false};
    for (int32_t t = 0; t < prefill && t < msl - 1; ++t) p.tokens.push_back({0, t});
    std::set<int32_t> seq1;
    for (int64_t t : {int64_t{0}, int64_t{page} - 1, int64_t{page}, 2 * int64_t{page} - 1}) {
      if (t < msl - 1) seq1.insert(static_cast<int32_t>(t));
    }
    for (int32_t t : seq1) p.tokens.push_back({1, t});
    // Launch order unrelated to positions.
    std::vector<Token> shuffled;
    for (int64_t i : gen::permutation(seed, kOrderStream, static_cast<int64_t>(p.tokens.size()))) {
      shuffled.push_back(p.tokens[static_cast<std::size_t>(i)]);
    }
    p.tokens = shuffled;
    p.description = fmt::format("{} tokens: positions [0, {}) of sequence 0 and page edges of sequence 1 (page size {})",
                                p.tokens.size(), std::min<int64_t>(prefill, msl - 1), page);
    plans.push_back(p);
  }
  plans.push_back({"last_valid",
                   fmt::format("the last valid position max_seq_len - 1 = {} (golden accept step), and a page start", msl - 1),
                   {{0, static_cast<int32_t>(msl - 1)}, {1, std::min<int32_t>(page, static_cast<int32_t>(msl - 1))}},
                   false});
  plans.push_back({"rejected",
                   fmt::format("two valid tokens, then one at max_seq_len = {} (golden reject step): must return "
                               "MLA_PLUGIN_CAPACITY having written nothing",
                               msl),
                   {{1, 1}, {1, 2}, {0, static_cast<int32_t>(msl)}},
                   true});
  if (plans[1].tokens[1].pos == plans[1].tokens[0].pos && plans[1].tokens[1].seq == plans[1].tokens[0].seq) {
    plans[1].tokens.pop_back();
  }

  return build_cases(layout, plans, claimed_variants(formats, scale_fmts, fp8_recipes), g.name, "");
}

std::vector<AppendCase> make_fresh_append_cases(uint64_t seed, uint32_t formats, uint32_t scale_fmts, uint32_t fp8_recipes,
                                                const Capabilities& caps) {
  uint64_t counter = 0;
  auto draw = [&](int64_t lo, int64_t hi) {  // uniform in [lo, hi]
    return lo + static_cast<int64_t>(gen::bits(seed, kOrderStream + 1, counter++) % static_cast<uint64_t>(hi - lo + 1));
  };
  const std::vector<int> pages = caps.page_sizes.empty() ? std::vector<int>{16, 64} : caps.page_sizes;
  const auto page = static_cast<int32_t>(pages[static_cast<std::size_t>(draw(0, static_cast<int64_t>(pages.size()) - 1))]);
  const auto batch = static_cast<int32_t>(draw(2, 3));
  // Two to five whole pages and a part of one: a capacity that is not a page multiple.
  const int64_t msl = page * draw(2, 5) + draw(1, page - 1 > 1 ? page - 1 : 1);
  ModelConfig rope = preset("v3").config;
  rope.qk_rope_head_dim = kRp;
  Layout layout = make_layout(seed, batch, page, msl, rope);

  // Per sequence: both sides of every page boundary below capacity, the first position of one
  // sequence and the last valid one of another, and drawn positions between; each sequence's
  // positions are distinct and not contiguous; the launch order is drawn.
  std::vector<Token> tokens;
  const auto last_seq = static_cast<int32_t>(draw(0, batch - 1));
  for (int32_t b = 0; b < batch; ++b) {
    std::set<int32_t> pos;
    for (int64_t edge = page; edge < msl; edge += page) {
      if (draw(0, 1) == 0 || edge == page) pos.insert(static_cast<int32_t>(edge - 1)), pos.insert(static_cast<int32_t>(edge));
    }
    if (b == 0) pos.insert(0);
    if (b == last_seq) pos.insert(static_cast<int32_t>(msl - 1));
    for (int64_t i = draw(2, 6); i > 0; --i) pos.insert(static_cast<int32_t>(draw(0, msl - 1)));
    for (const int32_t t : pos) tokens.push_back({b, t});
  }
  std::vector<Token> shuffled;
  for (const int64_t i : gen::permutation(seed, kOrderStream, static_cast<int64_t>(tokens.size()))) {
    shuffled.push_back(tokens[static_cast<std::size_t>(i)]);
  }
  layout.zero_latent = shuffled[static_cast<std::size_t>(draw(0, static_cast<int64_t>(shuffled.size()) - 1))];
  layout.tiny_block = shuffled[static_cast<std::size_t>(draw(0, static_cast<int64_t>(shuffled.size()) - 1))];

  std::vector<Plan> plans;
  plans.push_back({"scatter",
                   fmt::format("{} tokens of {} sequences at drawn, non-contiguous positions (both sides of page "
                               "boundaries, the last valid position {}), page size {}, permuted pages, drawn order",
                               shuffled.size(), batch, msl - 1, page),
                   shuffled, false});
  // Valid tokens with one at max_seq_len among them, at a drawn place: refused, nothing written.
  Plan reject{"rejected", "", {}, true};
  const auto n_valid = static_cast<std::size_t>(std::min<int64_t>(draw(1, 3), static_cast<int64_t>(shuffled.size())));
  reject.tokens.assign(shuffled.begin(), shuffled.begin() + static_cast<std::ptrdiff_t>(n_valid));
  const auto at = static_cast<std::ptrdiff_t>(draw(0, static_cast<int64_t>(n_valid)));
  reject.tokens.insert(reject.tokens.begin() + at, Token{static_cast<int32_t>(draw(0, batch - 1)), static_cast<int32_t>(msl)});
  reject.description = fmt::format("{} valid tokens and one at max_seq_len = {} (call position {}): must return "
                                   "MLA_PLUGIN_CAPACITY having written nothing",
                                   n_valid, msl, at);
  plans.push_back(std::move(reject));

  auto cases = build_cases(layout, plans, claimed_variants(formats, scale_fmts, fp8_recipes), "append",
                           fmt::format(" drawn at run time from seed {}", seed));
  // In name order, the order `mla merge` restores.
  std::sort(cases.begin(), cases.end(), [](const AppendCase& a, const AppendCase& b) { return a.name < b.name; });
  return cases;
}

// ---- certifying plug-in appends --------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;


AppendStatus status_of(int32_t rc) {
  switch (rc) {
    case MLA_PLUGIN_OK: return AppendStatus::ok;
    case MLA_PLUGIN_CAPACITY: return AppendStatus::capacity;
    case MLA_PLUGIN_UNSUPPORTED: return AppendStatus::refused;
    default: return AppendStatus::error;
  }
}

}  // namespace

void judge_append_run(const AppendCase& c, const AppendRun& run, reports::CaseResult& r) {
  r.shape = c.shape();
  if (!run.ran) {
    r.verdict = run.host_caused ? Verdict::host_error : Verdict::error;
    r.reasons.push_back(run.message);
    return;
  }
  r.run_seconds = run.run_seconds;
  const auto j = judge_append(c.problem(), c.in.kv_cache, run.kv_cache,
                              AppendCall{status_of(run.rc), plugin::describe_rc(run.rc), run.message});
  r.latent = j.latent;
  r.k_pe = j.k_pe;
  r.reasons = j.reasons;
  r.verdict = j.verdict;
  // The audit's findings (and differences between repeated calls) make a judged call FAIL.
  if (r.verdict == Verdict::pass || r.verdict == Verdict::fail) {
    for (const auto& v : run.reasons) r.reasons.push_back(v);
    r.verdict = r.reasons.empty() ? Verdict::pass : Verdict::fail;
  }
}

// Whether `fam` (a family of appends) is selected by --family.
bool appends_selected(const Session& s, const golden::Family& fam) {
  const auto& o = s.options.families;
  return o.empty() || std::find(o.begin(), o.end(), fam.certified_as) != o.end();
}

bool has_appenders(const Session& s) {
  return std::any_of(s.implementations.begin(), s.implementations.end(),
                     [](const Implementation& k) { return append_kind().serves(k); });
}

// Whether some plug-in's append case of `fam` survives the selection; the names follow
// make_append_cases ("<golden case>/<format>/<call>"), so this needs no case built.
bool any_append_case_selected(const Session& s, const golden::Family& fam) {
  if (!appends_selected(s, fam) || !has_appenders(s)) return false;
  const auto files = s.family_files.find(fam.name);
  if (files == s.family_files.end()) return false;
  if (!s.case_regex) return true;
  std::vector<std::string> names;
  for (const auto& file : files->second) {
    try {
      for (auto& n : golden::read_file_info(s.catalog.file(file)).cases) names.push_back(std::move(n));
    } catch (const std::exception&) {
      return true;  // certify_appends reports the unreadable file as an ERROR row
    }
  }
  std::vector<std::string> variants{append_variant_name(CacheFormat::bf16, ScaleFmt::fp32, Fp8Recipe::deepseek_v32)};
  for (auto r : {Fp8Recipe::deepseek_v32, Fp8Recipe::flashmla}) {
    for (auto f : {ScaleFmt::fp32, ScaleFmt::ue8m0}) variants.push_back(append_variant_name(CacheFormat::fp8, f, r));
  }
  for (const auto& n : names) {
    for (const auto& f : variants) {
      for (const char* what : {"prefill", "last_valid", "rejected"}) {
        if (std::regex_search(fmt::format("{}/{}/{}/{}", fam.certified_as, n, f, what), *s.case_regex)) return true;
      }
    }
  }
  return false;
}

void certify_append_file(Session& s, const std::vector<const Implementation*>& appenders, const golden::Family& fam,
                         const std::string& file);

// Every plug-in with an append entry on the append cases of every case of `fam`, after the
// kinds every implementation has and the drawn cases; rows of family `certified_as`
// (cache_append), judged here.
void certify_appends(Session& s, const golden::Family& fam) {
  if (!appends_selected(s, fam)) return;
  std::vector<const Implementation*> appenders;
  for (const auto& k : s.implementations) {
    if (append_kind().serves(k)) appenders.push_back(&k);
  }
  if (appenders.empty()) return;
  const auto files = s.family_files.find(fam.name);
  if (files == s.family_files.end()) {
    const auto note = fmt::format("plug-in appends not certified: no file of the catalog is of family {}", fam.name);
    s.cert.notes.push_back(note);
    s.progress << "warning: " << note << "\n";
    return;
  }
  for (const auto& file : files->second) {
    if (stop_requested(s)) return;
    certify_append_file(s, appenders, fam, file);
  }
}

// The appends built from one file of the append family.
void certify_append_file(Session& s, const std::vector<const Implementation*>& appenders, const golden::Family& fam,
                         const std::string& file) {
  const std::string family = fam.certified_as;
  std::vector<golden::LayerCase> goldens;
  try {
    golden::verify_file(s.catalog, file);
    const auto path = s.catalog.file(file);
    for (const auto& name : golden::read_file_info(path).cases) goldens.push_back(golden::load_layer_case(path, name));
  } catch (const std::exception& e) {
    const auto note = fmt::format("plug-in appends not certified: {} cannot be used: {}", file, e.what());
    s.cert.notes.push_back(note);
    s.progress << "error: " << note << "\n";
    for (const auto* k : appenders) {
      reports::CaseResult r;
      r.family = family;
      r.file = file;
      r.name = "all";
      r.verdict = Verdict::error;
      r.reasons.push_back(note);
      if (s.in_shard(family, r.name)) s.record(*k, std::move(r));  // one shard owns the row
    }
    s.save();
    return;
  }
  std::size_t index = 0;
  for (const auto* k : appenders) {
    for (const auto& g : goldens) {
      std::vector<AppendCase> cases;
      try {
        cases = make_append_cases(g, k->append_formats, k->append_scale_fmts, k->append_fp8_recipes, k->info.caps);
      } catch (const std::exception& e) {
        reports::CaseResult r;
        r.family = family;
        r.file = file;
        r.name = g.name;
        r.verdict = Verdict::error;
        r.reasons.push_back(fmt::format("append cases cannot be built: {}", e.what()));
        if (s.in_shard(family, r.name)) s.record(*k, std::move(r));
        continue;
      }
      for (const auto& c : cases) {
        if (stop_requested(s)) return;
        const CaseRef ref{family, file, c.name};
        if (s.case_regex && !std::regex_search(family + "/" + c.name, *s.case_regex)) continue;
        if (!s.in_shard(family, c.name)) continue;
        const auto t0 = Clock::now();
        if (auto kept = s.kept(*k, ref)) {
          s.record(*k, std::move(*kept));
        } else {
          auto r = s.base_result(ref);
          r.description = c.description;
          r.shape = c.shape();
          if (k->unavailable) {
            r.verdict = Verdict::skipped;
            r.reasons.push_back(*k->unavailable);
          } else {
            judge_append_run(c, run_append_in_child(s, *k, c, fmt::format("append-{}", index++)), r);
          }
          s.record(*k, std::move(r));
        }
        s.save();
        s.progress << fmt::format("[append] {}/{} {:.2f}s: {}={}\n", family, c.name, seconds_since(t0), k->info.name,
                                  tol::to_string(s.report(*k).cases.back().verdict));
      }
    }
  }
}

void certify_fresh_appends(Session& s, const Implementation& k, uint64_t seed) {
  if (!append_kind().serves(k) || k.unavailable) return;
  std::vector<AppendCase> cases;
  try {
    cases = make_fresh_append_cases(seed, k.append_formats, k.append_scale_fmts, k.append_fp8_recipes, k.info.caps);
  } catch (const std::exception& e) {
    reports::CaseResult r;
    r.family = kFresh;
    r.file = kFreshAppendFile;
    r.name = "append";
    r.verdict = Verdict::error;
    r.reasons.push_back(fmt::format("fresh append cases cannot be built: {}", e.what()));
    if (s.in_shard(kFresh, r.name)) s.record(k, std::move(r));
    return;
  }
  std::size_t index = 0;
  for (const auto& c : cases) {
    if (stop_requested(s)) break;
    if (s.case_regex && !std::regex_search(fresh_key(c.name), *s.case_regex)) continue;
    if (!s.in_shard(kFresh, c.name)) continue;
    const auto t0 = Clock::now();
    if (auto kept = s.kept_drawn(k, {kFresh, kFreshAppendFile, c.name})) {
      s.record(k, std::move(*kept));
      continue;
    }
    reports::CaseResult r;
    r.family = kFresh;
    r.file = kFreshAppendFile;
    r.name = c.name;
    r.description = c.description;
    judge_append_run(c, run_append_in_child(s, k, c, fmt::format("append-{}", 1000000 + index++)), r);
    s.record(k, std::move(r));
    s.progress << fmt::format("[fresh] {} {:.2f}s: {}={}\n", c.name, seconds_since(t0), k.info.name,
                              tol::to_string(s.report(k).cases.back().verdict));
  }
  s.save();
}

}  // namespace mla::certify
