// The fresh family's inputs hold what the catalog's hold: needles on every long bf16 case, placed
// by the one C++ implementation of rule needles-v1 (mla/core/needles.hpp), which reproduces the
// catalog's stored overlay bit for bit; every kind of invalid sparse index the catalog uses, in
// every row; the catalog's sentinel block id. And the drops-the-last-token plug-in is red on the
// fresh long case, which it would pass without its needles, the plug-in that reads negative
// invalid indices from the end red on the fresh sparse cases, while the correct plug-ins stay green.
#include <gtest/gtest.h>

#include <H5Cpp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/certify/append_case.hpp"
#include "mla/certify/fresh.hpp"
#include "mla/certify/twin.hpp"
#include "mla/core/conventions.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/needles.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/judge/attention.hpp"
#include "mla/ref/append.hpp"
#include "mla/ref/attention.hpp"
#include "mla/ref/prefill.hpp"
#include "mla/ref/indexer_logits.hpp"
#include "mla/ref/same_dtype.hpp"
#include "mla/reports/certificate.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace ax = mla::axes;
namespace nd = mla::needles;
namespace t = mla::certify::testing;
using mla::tol::Verdict;

const fs::path kGoldens = mla::golden::default_goldens_dir();

bool have_catalog() { return fs::exists(kGoldens / "MANIFEST.sha256"); }

// `mla certify --family fresh --seed 11` on the fresh cases `case_regex` selects, for the plug-ins
// at `paths`: the exit status, the output and the certificate (none when it wrote none).
struct Run {
  int status = -1;
  std::string output;
  std::optional<mla::reports::Certificate> cert;
};
Run certify_fresh(const std::vector<std::string>& paths, const std::string& case_regex) {
  t::TempDir tmp;
  const auto out = tmp.path() / "out";
  std::string args;
  for (const auto& p : paths) args += " --plugin " + t::quote(p);
  const auto r = t::run_command(std::string(MLA_CLI_EXE) + " certify --goldens " + t::quote(kGoldens) + " --out " +
                                t::quote(out) + " --family " + t::kFresh + " --case '" + case_regex + "' --seed 11" + args + " 2>&1");
  Run run{r.status, r.out, std::nullopt};
  if (fs::exists(out / "certificate.json")) {
    run.cert = mla::reports::certificate_from_json(nlohmann::json::parse(t::slurp(out / "certificate.json")));
  }
  return run;
}

// ---- raw reads of a golden file (what the loader does not hand out: the generator's description
// of generated inputs and the stored needles/ datasets as they are) --------------------------------

template <class T>
std::vector<T> dataset(const H5::H5File& f, const std::string& path, const H5::PredType& type) {
  const H5::DataSet ds = f.openDataSet(path);
  std::vector<T> v(static_cast<std::size_t>(ds.getSpace().getSimpleExtentNpoints()));
  if (!v.empty()) ds.read(v.data(), type);
  return v;
}

template <class T>
T attribute(const H5::H5File& f, const std::string& group, const std::string& name, const H5::PredType& type) {
  T v{};
  f.openGroup(group).openAttribute(name).read(type, &v);
  return v;
}

std::string string_attribute(const H5::H5File& f, const std::string& group, const std::string& name) {
  const H5::Attribute a = f.openGroup(group).openAttribute(name);
  H5std_string s;
  a.read(a.getStrType(), s);
  return s;
}

// The generated bf16 tensor described at `group` (splitmix64-uniform-v1), as the writer drew it.
std::vector<uint16_t> regenerate(const H5::H5File& f, const std::string& group, std::size_t n) {
  std::vector<uint16_t> v(n);
  mla::gen::fill_bf16(attribute<uint64_t>(f, group, "seed", H5::PredType::NATIVE_UINT64),
                      attribute<uint64_t>(f, group, "stream", H5::PredType::NATIVE_UINT64),
                      attribute<double>(f, group, "mean", H5::PredType::NATIVE_DOUBLE),
                      attribute<double>(f, group, "std", H5::PredType::NATIVE_DOUBLE), v);
  return v;
}

// Every (file, case) of the catalog that carries needles.
// The attention cases with needles (rule needles-v1); the prefill family's needles follow a rule
// of their own (SCHEMA.md, "Prefill needles") that the fresh decode cases do not draw.
std::vector<std::pair<fs::path, std::string>> cases_with_needles() {
  std::vector<std::pair<fs::path, std::string>> v;
  for (const auto& e : fs::directory_iterator(kGoldens)) {
    if (e.path().extension() != ".h5") continue;
    const auto info = mla::golden::read_file_info(e.path());
    if (mla::golden::family(info.family).kind != mla::golden::FamilyKind::attention) continue;
    const H5::H5File f(e.path().string(), H5F_ACC_RDONLY);
    for (const std::string& name : info.cases) {
      if (f.nameExists("/cases/" + name + "/needles")) v.emplace_back(e.path(), name);
    }
  }
  std::sort(v.begin(), v.end());
  return v;
}

TEST(FreshNeedles, TheCppRuleReproducesTheCatalogsStoredOverlayBitForBit) {
  if (!have_catalog()) GTEST_SKIP() << "no golden catalog at " << kGoldens;
  const auto cases = cases_with_needles();
  ASSERT_FALSE(cases.empty()) << "the catalog's long cases carry needles";
  for (const auto& [file, name] : cases) {
    SCOPED_TRACE(name);
    const auto c = mla::golden::load_attn_case(file, name);  // q and cache with the overlay written
    std::cout << fmt::format("[ needles ] {}: {} needles, alpha {}\n", name, c.needle_positions.size() / 2, c.needle_alpha);
    const H5::H5File f(file.string(), H5F_ACC_RDONLY);
    const std::string p = "/cases/" + name;
    EXPECT_TRUE(nd::is_long(c.cache_seqlens)) << "only long cases carry needles";
    ASSERT_FALSE(c.inputs_stored) << "stored inputs hold the overlay already: the rule's inputs are gone";
    // The inputs before any overlay: regenerated from the case's own description.
    mla::AttnBuffers before;
    before.shape = c.shape;
    before.softmax_scale = c.softmax_scale;
    before.q = regenerate(f, p + "/generated/q", c.q.size());
    const auto cache = regenerate(f, p + "/generated/kv_cache", c.kv_cache.size() / sizeof(uint16_t));
    before.kv_cache.resize(c.kv_cache.size());
    std::memcpy(before.kv_cache.data(), cache.data(), before.kv_cache.size());
    before.block_table = c.block_table;
    before.cache_seqlens = c.cache_seqlens;

    const nd::Overlay o = nd::make_overlay(before.view());
    EXPECT_EQ(string_attribute(f, p + "/needles", "rule"), nd::kRule);
    EXPECT_EQ(o.alpha, attribute<double>(f, p + "/needles", "alpha", H5::PredType::NATIVE_DOUBLE));
    EXPECT_EQ(o.positions, dataset<int32_t>(f, p + "/needles/positions", H5::PredType::NATIVE_INT32));
    EXPECT_EQ(o.kv, dataset<uint16_t>(f, p + "/needles/kv", H5::PredType::NATIVE_UINT16));
    EXPECT_EQ(o.q_mask, dataset<uint8_t>(f, p + "/needles/q_mask", H5::PredType::NATIVE_UINT8));
    EXPECT_EQ(o.q_values, dataset<uint16_t>(f, p + "/needles/q_values", H5::PredType::NATIVE_UINT16));
    EXPECT_EQ(o.positions, c.needle_positions);

    // Applied, it gives the loader's inputs: q everywhere, the cache on every used slot.
    nd::apply(o, before);
    EXPECT_TRUE(before.q == c.q) << "q after the overlay differs from the loaded case's";
    const int64_t ps = c.shape.page_size, row = static_cast<int64_t>(mla::kQkDim * sizeof(uint16_t));
    int64_t differ = 0;
    for (int64_t i = 0; i < c.shape.batch; ++i) {
      for (int64_t tok = 0; tok < c.cache_seqlens[static_cast<std::size_t>(i)]; ++tok) {
        const int64_t slot = int64_t{c.block_table[static_cast<std::size_t>(i * c.shape.max_blocks + tok / ps)]} * ps + tok % ps;
        differ += std::memcmp(before.kv_cache.data() + slot * row, c.kv_cache.data() + slot * row, static_cast<std::size_t>(row)) != 0;
      }
    }
    EXPECT_EQ(differ, 0) << "used cache slots differ after the overlay";
  }
}

// The claims of a kernel of every kind the fresh family draws for.
mla::Capabilities everything() {
  mla::Capabilities caps;
  caps.cache_formats = {mla::CacheFormat::bf16, mla::CacheFormat::fp8};
  caps.page_sizes = {16, 64};
  caps.sparse = true;
  return caps;
}

TEST(FreshNeedles, EveryLongBf16CaseCarriesThemAndDroppingTheLastTokenIsFarOutside) {
  for (const uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    int long_cases = 0;
    for (ax::AxisPoint p : mla::certify::fresh_points(everything(), mla::certify::fresh_seed(seed, "k"))) {
      if (!nd::is_long(p.seqlens)) continue;
      SCOPED_TRACE(p.name);
      ++long_cases;
      ASSERT_EQ(p.shape.cache_format, mla::CacheFormat::bf16);
      EXPECT_TRUE(p.needles) << p.why;
      EXPECT_NE(p.why.find("needles"), std::string::npos) << p.why;
      const auto in = ax::build_inputs(p);
      // The needle at the last position: latent[rank] = B, rope[slot] = alpha.
      const int64_t L = in.cache_seqlens[0], ps = in.shape.page_size;
      const auto pos = nd::positions(L, ps);
      ASSERT_EQ(pos.back(), L - 1);
      const int64_t n = static_cast<int64_t>(pos.size()) - 1, S = nd::slots(static_cast<int64_t>(pos.size()), in.shape.heads);
      const auto* tok = reinterpret_cast<const uint16_t*>(in.kv_cache.data()) +
                        (int64_t{in.block_table[static_cast<std::size_t>((L - 1) / ps)]} * ps + (L - 1) % ps) * mla::kQkDim;
      EXPECT_GE(mla::bf16_to_float(tok[n / S]), 2.0f);
      EXPECT_GT(mla::bf16_to_float(tok[mla::kLatentDim + n % S]), 64.0f / static_cast<float>(in.softmax_scale));

      // Dropping the last token (what drops_last_token does) judged as its f32 output would be:
      // far outside with the needles; without them, with the same seed, one token of 16K moves the
      // result less than the bounds (so the needles are what make the case see it).
      for (const bool with : {true, false}) {
        ax::AxisPoint q = p;
        q.needles = with;
        const auto full = ax::build_inputs(q);
        auto dropped_in = mla::AttnBuffers(full.view());
        dropped_in.cache_seqlens[0] = static_cast<int32_t>(L - 1);
        const auto truth = mla::ref::attention_fp64(full.view());
        const auto same = mla::ref::attention_same_dtype(full.view());
        const auto dropped = mla::ref::attention_fp64(dropped_in.view());
        mla::AttnOutputs got;
        got.dtype = mla::OutDType::f32;
        for (const double v : dropped.out) got.out.push_back(static_cast<float>(v));
        for (const double v : dropped.lse) got.lse.push_back(static_cast<float>(v));
        mla::AttentionTruth tr;
        tr.out = truth.out;
        tr.lse = truth.lse;
        tr.same_dtype_out = same.out;
        tr.same_dtype_lse = same.lse;
        const auto j = mla::judge_attention(full.shape, mla::Declaration{mla::OutDType::f32}, got, tr);
        std::cout << fmt::format("[ fresh ] seed {} {} {} needles: dropping the last token: {}\n", seed, p.name,
                                 with ? "with" : "without", j.pass() ? "PASS" : fmt::format("{}", fmt::join(j.reasons, "; ")));
        EXPECT_EQ(j.pass(), !with) << fmt::format("{}", fmt::join(j.reasons, "; "));
      }
    }
    EXPECT_EQ(long_cases, 1);
  }
}

// ---- invalid sparse indices ------------------------------------------------------------------

TEST(FreshSparse, EveryRowHoldsEveryKindOfInvalidIndexAndGlobalSlotsMapThemAllToMinusOne) {
  std::map<int, int64_t> count;  // kind -> entries
  int sparse_cases = 0;
  for (const uint64_t seed : {1u, 2u, 3u}) {
    for (const ax::AxisPoint& p : mla::certify::fresh_points(everything(), mla::certify::fresh_seed(seed, "k"))) {
      if (p.shape.topk == 0) continue;
      SCOPED_TRACE(p.name);
      ++sparse_cases;
      const auto in = ax::build_inputs(p);
      const auto& s = in.shape;
      const auto slots = mla::indices_to_kernel(mla::IndexNumbering::global_slots, in.view());
      for (int64_t b = 0; b < s.batch; ++b) {
        const int32_t L = in.cache_seqlens[static_cast<std::size_t>(b)];
        for (int64_t r = 0; r < s.s_q; ++r) {
          std::set<int> kinds;
          for (int64_t j = 0; j < s.topk; ++j) {
            const std::size_t k = static_cast<std::size_t>((b * s.s_q + r) * s.topk + j);
            const int32_t v = in.indices[k];
            if (v >= 0 && v < L) {
              const int32_t want = in.block_table[static_cast<std::size_t>(b * s.max_blocks + v / s.page_size)] * s.page_size +
                                   v % s.page_size;
              EXPECT_EQ(slots[k], want);
              continue;
            }
            EXPECT_EQ(slots[k], -1) << "invalid index " << v << " as a global slot";
            for (int kind = 0; kind < ax::kInvalidKinds; ++kind) {
              if (v == ax::invalid_index(kind, L)) {
                kinds.insert(kind);
                ++count[kind];
                break;
              }
            }
          }
          EXPECT_EQ(static_cast<int>(kinds.size()), ax::kInvalidKinds) << "row " << b << "," << r;
        }
      }
    }
  }
  EXPECT_GE(sparse_cases, 6) << "both cache formats, three seeds";
  for (int kind = 0; kind < ax::kInvalidKinds; ++kind) {
    std::cout << fmt::format("[ fresh ] invalid index kind {} (e.g. {} at L = 100): {} entries\n", kind,
                             ax::invalid_index(kind, 100), count[kind]);
    EXPECT_GT(count[kind], 0);
  }
  // The kinds are the catalog's: -1, -2, -7, INT_MIN, L, L + 5, INT_MAX.
  std::set<int64_t> values;
  for (int kind = 0; kind < ax::kInvalidKinds; ++kind) values.insert(ax::invalid_index(kind, 100));
  EXPECT_EQ(values, (std::set<int64_t>{-1, -2, -7, INT32_MIN, 100, 105, INT32_MAX}));
}

// ---- the sentinel block id -------------------------------------------------------------------

TEST(FreshSentinel, TheGeneratorsSentinelBlockIdIsTheCatalogsAndFillsTheSameEntries) {
  if (!have_catalog()) GTEST_SKIP() << "no golden catalog at " << kGoldens;
  // The smallest case of each attention file, from the attributes alone.
  int files = 0;
  for (const auto& e : fs::directory_iterator(kGoldens)) {
    if (e.path().extension() != ".h5" || !e.path().stem().string().starts_with("attn_")) continue;
    std::string smallest;
    int64_t tokens = -1;
    for (const std::string& name : mla::golden::read_file_info(e.path()).cases) {
      const auto h = mla::golden::read_attn_header(e.path(), name);
      if (tokens < 0 || h.cache_tokens() < tokens) tokens = h.cache_tokens(), smallest = name;
    }
    ASSERT_FALSE(smallest.empty());
    SCOPED_TRACE(e.path().filename().string() + "/" + smallest);
    const auto c = mla::golden::load_attn_case(e.path(), smallest);
    EXPECT_EQ(c.sentinel_block_id, ax::kSentinelBlock);
    // The catalog writes it into every entry at or past a sequence's last page: so does the fresh
    // family's generator.
    int64_t sentinels = 0;
    for (int64_t b = 0; b < c.shape.batch; ++b) {
      const int64_t pages = (c.cache_seqlens[static_cast<std::size_t>(b)] + c.shape.page_size - 1) / c.shape.page_size;
      for (int64_t j = pages; j < c.shape.max_blocks; ++j, ++sentinels)
        EXPECT_EQ(c.block_table[static_cast<std::size_t>(b * c.shape.max_blocks + j)], c.sentinel_block_id);
    }
    EXPECT_GT(sentinels, 0) << "the case has unused table entries";
    ++files;
  }
  EXPECT_GE(files, 4);
  int fresh_sentinels = 0;
  for (const ax::AxisPoint& p : mla::certify::fresh_points(everything(), mla::certify::fresh_seed(5, "k"))) {
    if (nd::is_long(p.seqlens)) continue;
    const auto in = ax::build_inputs(p);
    for (int64_t b = 0; b < in.shape.batch; ++b) {
      const int64_t pages = (in.cache_seqlens[static_cast<std::size_t>(b)] + in.shape.page_size - 1) / in.shape.page_size;
      for (int64_t j = pages; j < in.shape.max_blocks; ++j, ++fresh_sentinels)
        EXPECT_EQ(in.block_table[static_cast<std::size_t>(b * in.shape.max_blocks + j)], ax::kSentinelBlock);
    }
  }
  EXPECT_GT(fresh_sentinels, 0);
}

// ---- through the command line: the fresh long case --------------------------------------------

TEST(FreshNeedles, DropsLastTokenIsRedOnTheFreshLongCaseAndTheCorrectPluginsGreen) {
  if (!have_catalog()) GTEST_SKIP() << "no golden catalog at " << kGoldens;
  const auto run = certify_fresh({t::plugin_path("drops_last_token"), t::plugin_path("good_plugin"),
                                  t::plugin_path("good_plugin_bf16")},
                                 "^" + t::kFresh + "/long_");
  EXPECT_EQ(run.status, 1) << run.output;
  ASSERT_TRUE(run.cert.has_value()) << run.output;
  const auto& cert = *run.cert;
  ASSERT_EQ(cert.kernels.size(), 3u);
  for (const auto& k : cert.kernels) {
    ASSERT_EQ(k.cases.size(), 1u) << k.name;
    const auto& c = k.cases.front();
    SCOPED_TRACE(k.name + " " + c.name);
    EXPECT_EQ(c.family, t::kFresh);
    EXPECT_NE(c.description.find("needles (needles-v1"), std::string::npos) << c.description;
    const auto lens = c.shape.at("cache_seqlens").get<std::vector<int>>();
    EXPECT_GE(lens.at(0), nd::kLongTokens);
    if (k.name == "drops_last_token") {
      EXPECT_EQ(c.verdict, Verdict::fail) << fmt::format("{}", fmt::join(c.reasons, " | "));
      EXPECT_TRUE(std::any_of(c.reasons.begin(), c.reasons.end(), [](const std::string& w) { return w.starts_with("out"); }))
          << fmt::format("{}", fmt::join(c.reasons, " | "));
    } else {
      EXPECT_EQ(c.verdict, Verdict::pass) << fmt::format("{}", fmt::join(c.reasons, " | "));
    }
  }
}

TEST(FreshSparse, APluginThatReadsInvalidIndicesIsRedOnTheFreshSparseCases) {
  if (!have_catalog()) GTEST_SKIP() << "no golden catalog at " << kGoldens;
  // wraps_negative_index skips -1 and reads -2 as L-2, -7 as L-7: only the catalog's other
  // negative kinds show it, which every fresh sparse row now holds.
  const auto run = certify_fresh({t::plugin_path("wraps_negative_index"), t::plugin_path("good_plugin")}, "^" + t::kFresh + "/sparse_");
  EXPECT_EQ(run.status, 1) << run.output;
  ASSERT_TRUE(run.cert.has_value()) << run.output;
  const auto& cert = *run.cert;
  ASSERT_EQ(cert.kernels.size(), 2u);
  for (const auto& k : cert.kernels) {
    EXPECT_GE(k.cases.size(), 1u) << k.name;
    for (const auto& c : k.cases) {
      SCOPED_TRACE(k.name + " " + c.name);
      EXPECT_GT(c.shape.at("topk").get<int>(), 0);
      EXPECT_EQ(c.verdict, k.name == "good_plugin" ? Verdict::pass : Verdict::fail)
          << fmt::format("{}", fmt::join(c.reasons, " | "));
    }
  }
}

// ---- fresh cache appends ---------------------------------------------------------------------

std::vector<mla::certify::AppendCase> fresh_appends(uint64_t seed) {
  mla::Capabilities caps;
  caps.page_sizes = {16, 64};
  return mla::certify::make_fresh_append_cases(seed, MLA_PLUGIN_CACHE_BF16 | MLA_PLUGIN_CACHE_FP8,
                                               MLA_PLUGIN_SCALE_FP32 | MLA_PLUGIN_SCALE_UE8M0,
                                               MLA_PLUGIN_RECIPE_DEEPSEEK_V32 | MLA_PLUGIN_RECIPE_FLASHMLA, caps);
}

TEST(FreshAppend, CasesAreDrawnFromTheSeedOverEveryClaimedFormatAndTheReferencePassesThem) {
  std::set<int> pages;
  for (const uint64_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE(seed);
    const auto cases = fresh_appends(seed);
    const auto again = fresh_appends(seed);
    ASSERT_EQ(cases.size(), 10u) << "bf16 and FP8 x {fp32, ue8m0} x {deepseek_v32, flashmla}, scatter and rejected";
    std::set<std::string> names;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const auto& c = cases[i];
      SCOPED_TRACE(c.name);
      names.insert(c.name);
      if (i > 0) {
        EXPECT_LT(cases[i - 1].name, c.name) << "in name order";
      }
      EXPECT_EQ(c.in.positions, again[i].in.positions) << "the seed reproduces the case";
      EXPECT_EQ(c.in.latent, again[i].in.latent);
      const int32_t ps = c.in.page_size, msl = static_cast<int32_t>(c.in.max_seq_len);
      pages.insert(ps);
      EXPECT_NE(msl % ps, 0) << "a capacity that is not a page multiple";
      int permuted = 0;
      for (std::size_t j = 0; j < c.in.block_table.size(); ++j) permuted += c.in.block_table[j] != static_cast<int32_t>(j);
      EXPECT_GT(permuted, 0) << "pages are permuted";
      // Reference run: what the judge accepts.
      mla::certify::AppendRun run;
      run.ran = true;
      run.kv_cache = c.in.kv_cache;
      try {
        mla::ref::cache_append_reference(c.problem(), run.kv_cache);
        run.rc = MLA_PLUGIN_OK;
      } catch (const mla::CapacityError&) {
        run.rc = MLA_PLUGIN_CAPACITY;
      }
      mla::reports::CaseResult r;
      mla::certify::judge_append_run(c, run, r);
      EXPECT_EQ(r.verdict, Verdict::pass) << fmt::format("{}", fmt::join(r.reasons, " | "));
      if (c.expect_capacity) {
        EXPECT_EQ(std::count(c.in.positions.begin(), c.in.positions.end(), msl), 1);
        continue;
      }
      // Scatter: both sides of a page boundary, the last valid position, gaps in every sequence.
      std::map<int32_t, std::set<int32_t>> by_seq;
      for (std::size_t j = 0; j < c.in.positions.size(); ++j) by_seq[c.in.seq_ids[j]].insert(c.in.positions[j]);
      EXPECT_EQ(static_cast<int>(by_seq.size()), c.in.batch);
      bool last = false, boundary = false;
      for (const auto& [seq, pos] : by_seq) {
        last |= pos.count(msl - 1) > 0;
        boundary |= pos.count(ps - 1) > 0 && pos.count(ps) > 0;
        EXPECT_LT(static_cast<int64_t>(pos.size()), *pos.rbegin() - *pos.begin() + 1) << "sequence " << seq << " is contiguous";
      }
      EXPECT_TRUE(last && boundary);
      EXPECT_FALSE(std::is_sorted(c.in.positions.begin(), c.in.positions.end())) << "a drawn launch order";
    }
    for (const char* v : {"bf16", "fp8_fp32", "fp8_ue8m0", "fp8_fp32_flashmla", "fp8_ue8m0_flashmla"})
      for (const char* what : {"scatter", "rejected"}) EXPECT_EQ(names.count(fmt::format("append/{}/{}", v, what)), 1u);
    EXPECT_NE(cases.front().in.positions, fresh_appends(seed + 100).front().in.positions) << "another seed, other cases";
  }
  EXPECT_EQ(pages, (std::set<int>{16, 64})) << "each claimed page size is drawn";
}

TEST(FreshAppend, CorrectAppendsAreGreenAndEachAppendBugRedWhereItShows) {
  if (!have_catalog()) GTEST_SKIP() << "no golden catalog at " << kGoldens;
  const auto run = certify_fresh({MLA_PLUGIN_GOOD_APPEND, MLA_PLUGIN_FLASHMLA_APPEND, MLA_PLUGIN_APPEND_WRITES_NEIGHBOUR,
                                  MLA_PLUGIN_APPEND_NO_CAPACITY_CHECK},
                                 "^" + t::kFresh + "/append/");
  EXPECT_EQ(run.status, 1) << run.output;
  ASSERT_TRUE(run.cert.has_value()) << run.output;
  const auto& cert = *run.cert;
  // good_append is the plug-in template: its prefill, merge, top-k and indexer entries are
  // implementations too, with no rows of the MLA cache append.
  const std::set<std::string> other_entries{"good_append_prefill", "good_append_merge", "good_append_topk",
                                            "good_append_indexer_logits", "good_append_indexer_append",
                                            "good_append_sparse_prefill"};
  ASSERT_EQ(cert.kernels.size(), 4u + other_entries.size());
  for (const auto& k : cert.kernels) {
    if (other_entries.count(k.name)) {
      EXPECT_TRUE(k.cases.empty()) << k.name << " has no append rows";
      continue;
    }
    EXPECT_GE(k.cases.size(), 4u) << k.name;
    for (const auto& c : k.cases) {
      SCOPED_TRACE(k.name + " " + c.name);
      EXPECT_EQ(c.family, t::kFresh);
      EXPECT_EQ(c.file, mla::certify::kFreshAppendFile);
      EXPECT_NE(c.description.find("drawn at run time from seed"), std::string::npos) << c.description;
      const bool rejected = c.name.ends_with("/rejected");
      Verdict want = Verdict::pass;
      if (k.name == "append_writes_neighbour" && !rejected) want = Verdict::fail;
      if (k.name == "append_no_capacity_check" && rejected) want = Verdict::fail;
      EXPECT_EQ(c.verdict, want) << fmt::format("{}", fmt::join(c.reasons, " | "));
      if (k.name == "flashmla_append" && c.name.starts_with("append/fp8")) {
        EXPECT_TRUE(c.name.ends_with("_flashmla/" + c.name.substr(c.name.rfind('/') + 1))) << "judged by the recipe it declares";
      }
    }
  }
}

}  // namespace

// ---- the fresh twin of a stored case (mla/certify/twin.hpp) ------------------------------------

namespace {

// Without the noise on q, the twin is the stored case under symmetries attention commutes with:
// its fp64 truth is the stored truth moved by the same maps (heads permuted, latent dimensions of
// out permuted and sign-flipped, lse unchanged), to fp64 roundoff (the dot products sum the same
// terms in another order). Over a bf16, an FP8 (block permutation with the scales), a sparse and
// the q-std-100 case. With the noise, q moves by about 1/32 of its RMS and every case's truth changes.
TEST(FreshTwin, IsTheStoredCaseUnderExactSymmetriesPlusNoiseOnQ) {
  if (!have_catalog()) GTEST_SKIP() << "no golden catalog at " << kGoldens;
  const auto catalog = mla::golden::open_catalog(kGoldens, /*verify_files=*/false);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"attn_core.h5", "h16_varlen_ps16"}, {"attn_core.h5", "h3_sq4_short"}, {"attn_stress.h5", "q_std100"}};
  std::vector<std::pair<std::string, std::string>> all = cases;
  for (const auto& s : mla::golden::summarize_cases(catalog.file("attn_fp8.h5"))) {
    if (mla::golden::read_attn_header(catalog.file("attn_fp8.h5"), s.name).cache_tokens() <= 4096) {
      all.push_back({"attn_fp8.h5", s.name});
      break;
    }
  }
  for (const auto& s : mla::golden::summarize_cases(catalog.file("attn_sparse.h5"))) {
    if (mla::golden::read_attn_header(catalog.file("attn_sparse.h5"), s.name).cache_tokens() <= 4096) {
      all.push_back({"attn_sparse.h5", s.name});
      break;
    }
  }
  ASSERT_EQ(all.size(), 5u) << "an FP8 and a sparse case of at most 4096 slots";
  for (const auto& [file, name] : all) {
    SCOPED_TRACE(file + "/" + name);
    const auto c = mla::golden::load_attn_case(catalog.file(file), name);
    mla::certify::TwinMap m;
    const auto twin = mla::certify::make_twin(c.view(), 1234, /*q_noise=*/0.0, &m);
    const auto a = mla::ref::attention_fp64(c.view());
    const auto b = mla::ref::attention_fp64(twin.view());
    const auto& s = c.shape;
    ASSERT_EQ(a.out.size(), b.out.size());
    double scale = 0, worst = 0;
    for (const double x : a.out) if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
    int64_t mismatched_masks = 0;
    for (int64_t r = 0; r < int64_t{s.batch} * s.s_q; ++r) {
      for (int h = 0; h < s.heads; ++h) {
        for (int i = 0; i < 512; ++i) {
          const double got = b.out[((r * s.heads + h) * 512) + i];
          const double want = (m.latent_flip[i] ? -1 : 1) * a.out[((r * s.heads + m.heads[h]) * 512) + m.latent_from[i]];
          if (std::isfinite(got) != std::isfinite(want)) ++mismatched_masks;
          else if (std::isfinite(got)) worst = std::max(worst, std::fabs(got - want));
        }
      }
    }
    EXPECT_EQ(mismatched_masks, 0);
    EXPECT_LE(worst, 1e-12 * std::max(1.0, scale)) << "out moves with the maps exactly";
    for (int64_t bi = 0; bi < s.batch; ++bi) {
      for (int h = 0; h < s.heads; ++h) {
        for (int sq = 0; sq < s.s_q; ++sq) {
          const double got = b.lse[(bi * s.heads + h) * s.s_q + sq];
          const double want = a.lse[(bi * s.heads + m.heads[h]) * s.s_q + sq];
          if (std::isinf(want)) EXPECT_EQ(got, want);
          else EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, std::fabs(want)));
        }
      }
    }
    // The cache bytes differ from the stored ones (the pages moved), and with the noise q does too.
    EXPECT_NE(std::vector<uint8_t>(c.kv_cache.begin(), c.kv_cache.end()), twin.kv_cache);
    const auto noisy = mla::certify::make_twin(c.view(), 1234);
    int64_t moved = 0;
    for (std::size_t i = 0; i < twin.q.size(); ++i) moved += twin.q[i] != noisy.q[i];
    EXPECT_GT(moved, static_cast<int64_t>(twin.q.size()) / 2) << "the noise moves most q values";
    const auto n = mla::ref::attention_fp64(noisy.view());
    // (A row over one key has the same out whatever q is: lse still moves.)
    EXPECT_TRUE(n.out != b.out || n.lse != b.lse) << "so the twin's truth is not the moved stored truth";
  }
}

}  // namespace

namespace {

// The prefill and merge twins (mla/certify/twin.hpp), held to their symmetries: without noise, the
// fp64 truth of every stored prefill case's twin is the stored case's truth moved by the maps (to
// rounding of the oracle's sums); with it, q moves and so does the truth. A merge's twin without
// noise on out merges to the stored merge moved by the maps, its empty sides where they were and
// its merged lse moved by the shift alone (to the float32 rounding of the shifted lse).
TEST(FreshTwins, PrefillAndMergeTwinsAreTheStoredCasesMovedBySymmetries) {
  const auto catalog = mla::golden::open_catalog(kGoldens, /*verify_files=*/false);
  int prefills = 0, shared_rope = 0;
  for (const auto& s : mla::golden::summarize_cases(catalog.file("prefill.h5"))) {
    const auto c = mla::golden::load_prefill_case(catalog.file("prefill.h5"), s.name);
    if (c.shape.total_q > 1024 || c.shape.total_k > 4096) continue;  // the long ones add time, not coverage
    SCOPED_TRACE(s.name);
    ++prefills;
    mla::certify::PrefillTwinMap m;
    const auto in = c.inputs();
    const auto twin = mla::certify::make_prefill_twin(in, 99, /*q_noise=*/0.0, &m);
    EXPECT_EQ(twin.cu_seqlens_q, c.cu_seqlens_q);
    EXPECT_EQ(twin.cu_seqlens_k, c.cu_seqlens_k);
    const auto a = mla::ref::prefill_attention(in);
    const auto b = mla::ref::prefill_attention(twin.view());
    const auto& sh = c.shape;
    double scale = 0, worst = 0;
    for (const double x : a.out) scale = std::max(scale, std::fabs(x));
    for (int64_t t = 0; t < sh.total_q; ++t) {
      for (int h = 0; h < sh.heads; ++h) {
        for (int i = 0; i < sh.d_v; ++i) {
          const double got = b.out[(t * sh.heads + h) * sh.d_v + i];
          const double want = (m.v_flip[i] ? -1 : 1) * a.out[(t * sh.heads + m.heads[h]) * sh.d_v + m.v_from[i]];
          worst = std::max(worst, std::fabs(got - want));
        }
        const double got = b.lse[h * sh.total_q + t], want = a.lse[m.heads[h] * sh.total_q + t];
        if (std::isinf(want)) EXPECT_EQ(got, want);
        else EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, std::fabs(want)));
      }
    }
    EXPECT_LE(worst, 1e-12 * std::max(1.0, scale)) << "out moves with the maps";
    // A k_pe shared by every head (a layer-derived case's, as MLA's) stays shared: the dimensions
    // map alike in every head.
    const auto rope_shared = [&](std::span<const uint16_t> k) {
      for (int64_t t = 0; t < sh.total_k; ++t) {
        for (int h = 1; h < sh.heads; ++h) {
          for (int i = mla::kMhaNope; i < mla::kMhaDqk; ++i) {
            if (k[(t * sh.heads + h) * sh.d_qk + i] != k[(t * sh.heads) * sh.d_qk + i]) return false;
          }
        }
      }
      return true;
    };
    if (rope_shared(in.k)) {
      ++shared_rope;
      EXPECT_TRUE(rope_shared(twin.k));
    }
    const auto noisy = mla::certify::make_prefill_twin(in, 99);
    int64_t moved = 0;
    for (std::size_t i = 0; i < twin.q.size(); ++i) moved += twin.q[i] != noisy.q[i];
    EXPECT_GT(moved, static_cast<int64_t>(twin.q.size()) / 2) << "the noise moves most q values";
  }
  EXPECT_GT(prefills, 5);
  EXPECT_GT(shared_rope, 0) << "a case whose k_pe every head shares";

  int merges = 0;
  for (const auto& s : mla::golden::summarize_cases(catalog.file("merge.h5"))) {
    SCOPED_TRACE(s.name);
    ++merges;
    const auto c = mla::golden::load_merge_case(catalog.file("merge.h5"), s.name);
    const auto in = c.inputs();
    mla::certify::MergeTwinMap m;
    const auto twin = mla::certify::make_merge_twin(in.view(), 7, /*out_noise=*/0.0, &m);
    const auto a = mla::ref::merge_states(in.view());
    const auto b = mla::ref::merge_states(twin.view());
    const auto& sh = in.shape;
    for (int64_t t = 0; t < sh.tokens; ++t) {
      for (int h = 0; h < sh.heads; ++h) {
        const double la = a.lse[m.heads[h] * sh.tokens + t], lb = b.lse[h * sh.tokens + t];
        ASSERT_FALSE(std::isnan(lb));
        EXPECT_EQ(std::isinf(la), std::isinf(lb)) << "an empty side stays empty";
        const double weight_slack = 1e-6 * std::max(1.0, std::fabs(la));  // the shifted lse's float32 rounding
        for (int i = 0; i < sh.head_dim; ++i) {
          const double want = (m.dim_flip[i] ? -1 : 1) * a.out[(t * sh.heads + m.heads[h]) * sh.head_dim + m.dim_from[i]];
          const double got = b.out[(t * sh.heads + h) * sh.head_dim + i];
          EXPECT_NEAR(got, want, weight_slack * std::max(1.0, std::fabs(want)) + 1e-12);
        }
      }
    }
    const auto noisy = mla::certify::make_merge_twin(in.view(), 7);
    const bool some_side = std::any_of(in.lse_a.begin(), in.lse_a.end(), [](float x) { return std::isfinite(x); }) ||
                           std::any_of(in.lse_b.begin(), in.lse_b.end(), [](float x) { return std::isfinite(x); });
    if (some_side) EXPECT_TRUE(noisy.out_a != twin.out_a || noisy.out_b != twin.out_b) << "the noise moves out";
  }
  EXPECT_GT(merges, 5);
}

}  // namespace

namespace {

// The indexer logits twin: without noise on the weights, every logit is the stored call's (a
// joint permutation and sign flip of q and key dimensions leaves each q8·k8, so each relu, as it
// was; the heads move with their weights); with it, the logits move. Paged and ragged alike.
TEST(FreshTwins, AnIndexerLogitsTwinKeepsEveryDotProductAndItsNoiseMovesTheLogits) {
  for (const auto layout : {mla::IndexerLogitsLayout::ragged, mla::IndexerLogitsLayout::paged}) {
    SCOPED_TRACE(mla::to_string(layout));
    mla::IndexerLogitsBuffers b;
    auto& s = b.shape;
    s.layout = layout;
    s.heads = 4;
    const auto code = [](uint64_t i) {  // any finite e4m3 code (0x7F and 0xFF are NaN)
      const auto c = static_cast<uint8_t>(mla::gen::bits(5, 1, i) % 0x7F);
      return static_cast<uint8_t>(c | ((mla::gen::bits(5, 2, i) & 1u) << 7));
    };
    if (layout == mla::IndexerLogitsLayout::ragged) {
      s.batch = 5, s.next_n = 1, s.num_keys = 9;
      for (int64_t i = 0; i < s.num_keys * 128; ++i) b.k_codes.push_back(code(1000 + static_cast<uint64_t>(i)));
      for (int64_t i = 0; i < s.num_keys; ++i) b.k_scales.push_back(0.01f * static_cast<float>(i + 1));
      for (int64_t r = 0; r < s.batch; ++r) b.ks.push_back(static_cast<int32_t>(r)), b.ke.push_back(static_cast<int32_t>(r + 4));
    } else {
      s.batch = 2, s.next_n = 2, s.block_size = 4, s.max_blocks = 3, s.num_blocks = 6, s.max_context = 10;
      b.context_lens = {10, 5};
      b.block_table = {4, 0, 2, 1, 3, 5};
      b.cache.resize(static_cast<std::size_t>(s.num_blocks * s.block_size * 132));
      for (std::size_t i = 0; i < b.cache.size(); ++i) b.cache[i] = code(i);
      for (int64_t blk = 0; blk < s.num_blocks; ++blk) {  // the scale area: positive float32 scales
        for (int64_t t = 0; t < s.block_size; ++t) {
          const float scale = 0.02f * static_cast<float>(t + 1);
          std::memcpy(b.cache.data() + blk * s.block_size * 132 + s.block_size * 128 + t * 4, &scale, 4);
        }
      }
    }
    for (int64_t i = 0; i < s.rows() * s.heads * 128; ++i) b.q.push_back(code(static_cast<uint64_t>(i)));
    for (int64_t i = 0; i < s.rows() * s.heads; ++i) b.weights.push_back(static_cast<float>(mla::gen::value(5, 3, static_cast<uint64_t>(i), 0, 1)));
    const auto a = mla::ref::indexer_logits_reference(b.view());
    const auto twin = mla::certify::make_indexer_logits_twin(b.view(), 31, /*w_noise=*/0.0);
    const auto t = mla::ref::indexer_logits_reference(twin.view());
    ASSERT_EQ(a.logits.size(), t.logits.size());
    for (std::size_t i = 0; i < a.logits.size(); ++i) {
      if (std::isinf(a.logits[i])) EXPECT_EQ(t.logits[i], a.logits[i]) << i;
      else EXPECT_NEAR(t.logits[i], a.logits[i], 1e-12 * std::max(1.0, a.magnitude[i])) << i;
    }
    EXPECT_NE(twin.q, b.q) << "the dimensions and heads moved";
    const auto noisy = mla::certify::make_indexer_logits_twin(b.view(), 31);
    const auto n = mla::ref::indexer_logits_reference(noisy.view());
    int moved = 0;
    for (std::size_t i = 0; i < a.logits.size(); ++i) moved += std::isfinite(a.logits[i]) && n.logits[i] != a.logits[i];
    EXPECT_GT(moved, 0) << "the noise on the weights moves the logits";
  }
}

}  // namespace
