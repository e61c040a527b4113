// L0: the prefill, merge and top-k entries of plug-in ABI 1.4, end to end. The template's prefill (kernels/plugin/
// examples) is an implementation of its own beside its decode, run in child processes on audited
// shared buffers and green on every stored and drawn prefill case; a prefill-only library has no
// decode rows; FlashInfer's lse conventions declared are judged after the host converts them.
// Each planted prefill bug (kernels/faults/plugins) is green wherever a row's recorded shape
// says it cannot change the answer, gets on every stored case the verdict the plug-in gets when
// called directly in this process and judged, and is red on some stored and some drawn case;
// rows left unwritten are named by the audit of the shared buffers. The loader refuses an entry that breaks a rule, naming
// the field. The merge entry the same way: the template's and FlashInfer's base-2 [n, h] lse
// declared green, a base-2 lse weighed as natural and a +inf lse weighed as a number each red on
// some stored and some drawn case and, on every stored case, as red as when called directly. The
// top-k entry: exact (absolute, and relative declared) green on every drawn case; the largest
// logit dropped at a row's last valid position and masked padding red on every drawn case.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/certify/certify.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/plugin/host.hpp"
#include "support/host_call.hpp"
#include "mla/judge/merge.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::certify::testing::certify_here;
using mla::certify::testing::expect_predicate_claims;
using mla::certify::testing::in_process_options;
using mla::certify::testing::kernel;
using mla::certify::testing::TempDir;
using nlohmann::json;

// `plugins` certified on the stored family of `kind` and the drawn cases.
json certify_plugins(const TempDir& tmp, const std::vector<std::string>& plugins, const std::string& kind = "prefill") {
  auto o = in_process_options(tmp.path() / "out", {}, {mla::golden::family_names_certified_by(kind).at(0), "fresh"});
  for (const auto& p : plugins) o.plugins.emplace_back(p);
  return certify_here(o);
}

std::string reasons(const json& row) { return fmt::format("{}", fmt::join(row.at("reasons"), " | ")); }

bool has_reason(const json& row, const std::string& words) {
  for (const auto& r : row.at("reasons")) {
    if (r.get<std::string>().find(words) != std::string::npos) return true;
  }
  return false;
}

// Whether some sequence of the row's recorded shape has (s_q, s_k) with `pred`.
bool any_sequence(const json& shape, const std::function<bool(int64_t, int64_t)>& pred) {
  const auto& q = shape.at("seqlens_q");
  const auto& k = shape.at("seqlens_k");
  for (std::size_t i = 0; i < q.size(); ++i) {
    if (pred(q[i].get<int64_t>(), k[i].get<int64_t>())) return true;
  }
  return false;
}

TEST(PluginPrefill, TheTemplatesPrefillEntryIsItsOwnImplementationRunInChildrenAndGreen) {
  TempDir tmp;
  const auto cert = certify_plugins(tmp, {MLA_PLUGIN_GOOD_APPEND});
  const auto& pre = kernel(cert, "good_append_prefill");
  EXPECT_EQ(pre.at("kinds"), json::array({"prefill"}));
  EXPECT_EQ(pre.at("origin").at("entry"), "prefill");
  EXPECT_EQ(pre.at("origin").at("kind"), "plugin");
  EXPECT_EQ(pre.at("origin").at("isolation"), "child_per_case");
  EXPECT_EQ(pre.at("origin").at("abi_minor"), MLA_PLUGIN_ABI_MINOR);
  int stored = 0, drawn = 0;
  for (const auto& row : pre.at("cases")) {
    EXPECT_EQ(row.at("verdict"), "PASS") << row.at("case") << ": " << reasons(row);
    (row.at("family") == "fresh" ? drawn : stored)++;
  }
  EXPECT_GT(stored, 0);
  EXPECT_GT(drawn, 0);
  // The decode is another implementation, with none of the prefill's rows.
  const auto& dec = kernel(cert, "good_append");
  for (const auto& row : dec.at("cases")) EXPECT_NE(row.at("file"), "fresh_prefill") << row.at("case");
}

TEST(PluginPrefill, APrefillOnlyLibraryHasNoDecodeAndDeclaredFlashInferConventionsAreConverted) {
  const auto lib = mla::plugin::Library::open(MLA_PLUGIN_GOOD_PREFILL);
  EXPECT_FALSE(lib->decodes());
  ASSERT_TRUE(lib->prefill_info().has_value());
  EXPECT_EQ(lib->prefill_info()->name, "good_prefill");
  TempDir tmp;
  const auto cert = certify_plugins(tmp, {MLA_PLUGIN_GOOD_PREFILL, MLA_PLUGIN_PREFILL_FLASHINFER_DECLARED});
  ASSERT_EQ(cert.at("kernels").size(), 2u) << "one implementation each: neither has a decode";
  for (const char* name : {"good_prefill", "prefill_flashinfer_declared"}) {
    const auto& k = kernel(cert, name);
    EXPECT_EQ(k.at("kinds"), json::array({"prefill"})) << name;
    EXPECT_FALSE(k.at("cases").empty()) << name;
    for (const auto& row : k.at("cases")) EXPECT_EQ(row.at("verdict"), "PASS") << name << " " << row.at("case") << ": " << reasons(row);
  }
  const auto& conv = kernel(cert, "prefill_flashinfer_declared").at("declared").at("conventions");
  EXPECT_EQ(conv.at("lse_base"), "2");
  EXPECT_EQ(conv.at("lse_layout"), "[b,s_q,h]");
  EXPECT_EQ(conv.at("empty_row_lse"), "-inf");
}

// A plug-in's prefill called directly in this process (the test's own, never the certifier's):
// what the certifier's verdict on a stored case must equal.
class DirectPrefill final : public mla::PrefillImpl {
 public:
  explicit DirectPrefill(std::shared_ptr<mla::plugin::Library> lib) : lib_(std::move(lib)), info_(*lib_->prefill_info()) {}
  const mla::PrefillKernelInfo& info() const override { return info_; }
  std::unique_ptr<mla::PreparedPrefill> prepare(const mla::PrefillInputs& in) const override {
    struct Prepared final : mla::PreparedPrefill {
      const mla::plugin::Library* lib = nullptr;
      mla::PrefillInputs in;
      std::vector<float> out, lse;
      void run() override {
        char err[512] = {};
        const int32_t rc = mla::plugin::call_prefill(*lib, in, out.data(), out.size() * 4, lse.data(), lse.size() * 4, err,
                                                     sizeof err, nullptr);
        if (rc != MLA_PLUGIN_OK) throw mla::Error(fmt::format("prefill returned {}: {}", rc, err));
      }
      mla::PrefillOutputs results() override {
        return {mla::OutDType::f32, std::vector<double>(out.begin(), out.end()), std::vector<double>(lse.begin(), lse.end())};
      }
    };
    auto p = std::make_unique<Prepared>();
    p->lib = lib_.get();
    p->in = in;
    p->out.assign(static_cast<std::size_t>(in.shape.total_q * in.shape.heads * in.shape.d_v), NAN);
    p->lse.assign(static_cast<std::size_t>(in.shape.total_q * in.shape.heads), NAN);
    return p;
  }

 private:
  std::shared_ptr<mla::plugin::Library> lib_;
  mla::PrefillKernelInfo info_;
};

// The verdict of `plugin`'s prefill called directly on stored case `name`, judged by the one judge.
std::string direct_verdict(const std::string& plugin, const std::string& file, const std::string& name) {
  const DirectPrefill k(mla::plugin::Library::open(plugin));
  const auto c = mla::golden::load_prefill_case(file, name);
  const auto in = c.inputs();
  return mla::testing::judge_prefill_case(k.info(), c, mla::testing::call_prefill(k, in)).pass() ? "PASS" : "FAIL";
}

// Where a bug cannot change the answer, from a row's recorded shape (s_q, s_k per sequence,
// causal): such a row must PASS. Where it can, the judge decides (a future key too small to
// matter beside a dominant logit changes nothing): a stored case's verdict must be the one the
// plug-in gets called directly; the bug must be red on some stored and some drawn case.
struct PlantedBug {
  const char* plugin;
  const char* name;
  std::function<bool(const json& row)> may_change;
};

TEST(PluginPrefill, EachPlantedPrefillBugIsRedWhereTheJudgeSeesItAndGreenWhereItCannotMatter) {
  const auto causal = [](const json& row) { return row.at("shape").at("causal").get<bool>(); };
  const auto some = [](const json& r, const std::function<bool(int64_t, int64_t)>& pred) {
    return any_sequence(r.at("shape"), pred);
  };
  const std::vector<PlantedBug> bugs = {
      // One key more than the mask allows: some causal row whose last key is not its sequence's last.
      {MLA_PLUGIN_PREFILL_SEES_NEXT_KEY, "prefill_sees_next_key",
       [&](const json& r) { return causal(r) && some(r, [](int64_t q, int64_t k) { return k >= 1 && q >= 2; }); }},
      // Top-left and bottom-right agree where s_q == s_k (or nothing is attended).
      {MLA_PLUGIN_PREFILL_TOP_LEFT, "prefill_top_left",
       [&](const json& r) { return causal(r) && some(r, [](int64_t q, int64_t k) { return q >= 1 && k >= 1 && q != k; }); }},
      // The scale: any row that attends a key (its lse is scale · q·k for one key).
      {MLA_PLUGIN_PREFILL_MSCALE_MISSING, "prefill_mscale_missing",
       [&](const json& r) { return some(r, [](int64_t q, int64_t k) { return q >= 1 && k >= 1; }); }},
      // Base 2: the same rows (a causal sequence's last row sees key s_k - 1).
      {MLA_PLUGIN_PREFILL_LSE_LOG2, "prefill_lse_log2",
       [&](const json& r) { return some(r, [](int64_t q, int64_t k) { return q >= 1 && k >= 1; }); }},
      // Rows that attend nothing: causal with more queries than keys, or a context chunk with no key.
      {MLA_PLUGIN_PREFILL_SKIPS_EMPTY_ROWS, "prefill_skips_empty_rows",
       [&](const json& r) { return some(r, [&](int64_t q, int64_t k) { return q >= 1 && (causal(r) ? q > k : k == 0); }); }},
  };
  const auto catalog = mla::golden::open_catalog(fs::path(MLA_SOURCE_DIR) / "fixtures" / "goldens", false);
  const auto& family = mla::golden::family(mla::golden::family_names_certified_by("prefill").at(0));
  const auto file = catalog.file(family.file());
  for (const auto& bug : bugs) {
    SCOPED_TRACE(bug.name);
    TempDir tmp;
    const auto cert = certify_plugins(tmp, {bug.plugin});
    int red_stored = 0, red_drawn = 0, red_twins = 0;
    for (const auto& row : kernel(cert, bug.name).at("cases")) {
      SCOPED_TRACE(row.at("case").get<std::string>());
      const auto verdict = row.at("verdict").get<std::string>();
      if (!bug.may_change(row)) EXPECT_EQ(verdict, "PASS") << reasons(row);
      if (row.at("family") == "fresh") {
        EXPECT_TRUE(verdict == "PASS" || verdict == "FAIL") << reasons(row);
        red_drawn += verdict == "FAIL";
      } else if (mla::certify::testing::is_twin(row.at("case").get<std::string>())) {
        // A stored case's twin (a plug-in is a kernel from outside): its shape, fresh values.
        EXPECT_TRUE(verdict == "PASS" || verdict == "FAIL") << reasons(row);
        red_twins += verdict == "FAIL";
      } else {
        EXPECT_EQ(verdict, direct_verdict(bug.plugin, file, row.at("case"))) << reasons(row);
        red_stored += verdict == "FAIL";
      }
    }
    EXPECT_GT(red_stored, 0) << "a planted bug no stored case catches";
    EXPECT_GT(red_drawn, 0) << "a planted bug no drawn case catches";
    EXPECT_GT(red_twins, 0) << "a planted bug no twin catches";
  }
}

// Rows a prefill leaves unwritten are named by the audit of the shared buffers, not only by the
// judge's NaN mask.
TEST(PluginPrefill, UnwrittenRowsAreNamedByTheAudit) {
  TempDir tmp;
  const auto cert = certify_plugins(tmp, {MLA_PLUGIN_PREFILL_SKIPS_EMPTY_ROWS});
  int named = 0;
  for (const auto& row : kernel(cert, "prefill_skips_empty_rows").at("cases")) {
    if (row.at("verdict") != "FAIL") continue;
    EXPECT_TRUE(has_reason(row, "out: ") && has_reason(row, "elements never written")) << reasons(row);
    named += has_reason(row, "elements never written");
  }
  EXPECT_GT(named, 0);
}

// ---- merge ------------------------------------------------------------------------------------

// A plug-in's merge called directly in this process, as DirectPrefill.
class DirectMerge final : public mla::MergeImpl {
 public:
  explicit DirectMerge(std::shared_ptr<mla::plugin::Library> lib) : lib_(std::move(lib)), info_(*lib_->merge_info()) {}
  const mla::MergeKernelInfo& info() const override { return info_; }
  std::unique_ptr<mla::PreparedMerge> prepare(const mla::MergeInputs& in) const override {
    struct Prepared final : mla::PreparedMerge {
      const mla::plugin::Library* lib = nullptr;
      mla::MergeBuffers in;
      std::vector<uint8_t> out;
      std::vector<float> lse;
      void run() override {
        char err[512] = {};
        const int32_t rc = mla::plugin::call_merge(*lib, in.view(), out.data(), out.size(), lse.data(), lse.size() * 4,
                                                   err, sizeof err, nullptr);
        if (rc != MLA_PLUGIN_OK) throw mla::Error(fmt::format("merge returned {}: {}", rc, err));
      }
      mla::MergeOutputs results() override {
        mla::MergeOutputs o;
        o.dtype = in.shape.dtype;
        for (std::size_t i = 0; i < out.size() / mla::bytes_per_value(o.dtype); ++i) {
          o.out.push_back(mla::state_value(o.dtype, out, i));
        }
        o.lse.assign(lse.begin(), lse.end());
        return o;
      }
    };
    auto p = std::make_unique<Prepared>();
    p->lib = lib_.get();
    p->in = mla::MergeBuffers(in);
    const auto n = static_cast<std::size_t>(in.shape.tokens * in.shape.heads);
    p->out.assign(n * static_cast<std::size_t>(in.shape.head_dim) * mla::bytes_per_value(in.shape.dtype), 0xFF);
    p->lse.assign(n, NAN);
    return p;
  }

 private:
  std::shared_ptr<mla::plugin::Library> lib_;
  mla::MergeKernelInfo info_;
};

// ABI 1.6: each entry's own can_implement, asked in a child before its calls. The prefill that
// claims odd head counts only is NOT_CLAIMED in its words on even ones (stored, twin and drawn),
// green on the odd ones, and red (a broken claim) where it then refuses one head; a stored case's
// twin is certified beside it. The merge of 128-wide states only and the sparse prefill without a
// sink are green where they claim and NOT_CLAIMED elsewhere. Each predicate is shown its call's
// scalars and lengths and no data (it errs otherwise).
TEST(PluginEntryClaims, EachEntrysCanImplementDecidesItsClaimAndABrokenOneIsRed) {
  TempDir tmp;
  {
    const auto cert = certify_plugins(tmp, {MLA_PLUGIN_PREFILL_ODD_HEADS_CLAIMED});
    const auto& k = kernel(cert, "prefill_odd_heads_claimed");
    EXPECT_EQ(k.at("origin").at("can_implement"), true);
    int refused = 0, broken = 0, passed = 0, twins = 0;
    for (const auto& row : k.at("cases")) {
      SCOPED_TRACE(row.at("case").get<std::string>());
      const int heads = row.at("shape").at("heads");
      if (mla::certify::testing::is_twin(row.at("case").get<std::string>())) ++twins;
      if (heads % 2 == 0) {
        ++refused;
        EXPECT_EQ(row.at("verdict"), "NOT_CLAIMED") << reasons(row);
        EXPECT_TRUE(has_reason(row, "odd head counts only")) << reasons(row);
        EXPECT_TRUE(has_reason(row, "(the kernel's can_implement)")) << reasons(row);
      } else if (heads == 1) {
        ++broken;
        EXPECT_EQ(row.at("verdict"), "FAIL") << reasons(row);
        EXPECT_TRUE(has_reason(row, "one head is not a tile of this prefill")) << reasons(row);
      } else {
        ++passed;
        EXPECT_EQ(row.at("verdict"), "PASS") << reasons(row);
      }
    }
    EXPECT_GT(refused, 0);
    EXPECT_GT(broken, 0);
    EXPECT_GT(passed, 0);
    EXPECT_GT(twins, 0);
  }
  {
    TempDir tmp2;
    const auto cert = certify_plugins(tmp2, {MLA_PLUGIN_MERGE_CLAIMS_HEAD_DIM_128}, "merge");
    expect_predicate_claims(kernel(cert, "merge_claims_head_dim_128"),
                            [](const json& row) { return row.at("shape").at("head_dim") == 128; }, "128-wide states only");
  }
  {
    TempDir tmp3;
    auto o = in_process_options(tmp3.path() / "out", {}, {"fresh"});
    o.plugins.emplace_back(MLA_PLUGIN_SPARSE_PREFILL_CLAIMS_NO_SINK);
    const auto cert = certify_here(o);
    expect_predicate_claims(kernel(cert, "sparse_prefill_claims_no_sink"),
                            [](const json& row) { return !row.at("shape").value("sink", false); }, "no attention sink");
  }
}

// The same for the top-k, indexer logits and indexer append entries (drawn and, for the indexer
// logits, stored cases and their twins): green where each predicate claims, NOT_CLAIMED in its
// words elsewhere; each predicate errs if it is shown data or not its lengths.
TEST(PluginEntryClaims, TheTopkAndIndexerEntriesCanImplementDecideTheirClaims) {
  TempDir tmp;
  auto o = in_process_options(tmp.path() / "out", {}, {mla::golden::family_names_certified_by("indexer_logits").at(0), "fresh"});
  for (const auto* p : {MLA_PLUGIN_TOPK_CLAIMS_LONG_ROWS, MLA_PLUGIN_INDEXER_LOGITS_CLAIMS_NEXT_N_2,
                        MLA_PLUGIN_INDEXER_APPEND_CLAIMS_UE8M0}) {
    o.plugins.emplace_back(p);
  }
  const auto cert = certify_here(o);
  struct Expect {
    const char* kernel;
    std::function<bool(const json&)> claimed;  // from the row's recorded shape and name
    const char* words;
  };
  const std::vector<Expect> expects = {
      {"topk_claims_long_rows",
       [](const json& r) { return r.at("case").get<std::string>().find("rows_longer_than_k") != std::string::npos; },
       "needs a row of at least k"},
      {"indexer_logits_claims_next_n_2",
       [](const json& r) { return !(r.at("shape").at("layout") == "paged" && r.at("shape").at("next_n") == 1); },
       "speculative step's only"},
      {"indexer_append_claims_ue8m0", [](const json& r) { return r.at("shape").at("scale_fmt") == "ue8m0"; },
       "ue8m0 scales only"},
  };
  for (const auto& e : expects) {
    SCOPED_TRACE(e.kernel);
    const auto& k = kernel(cert, e.kernel);
    EXPECT_EQ(k.at("origin").at("can_implement"), true);
    expect_predicate_claims(k, e.claimed, e.words);
  }
  // The stored indexer cases have twins beside them, for a kernel from outside.
  int twins = 0;
  for (const auto& row : kernel(cert, "indexer_logits_claims_next_n_2").at("cases")) {
    twins += mla::certify::testing::is_twin(row.at("case").get<std::string>());
  }
  EXPECT_GT(twins, 0);
}

TEST(PluginMerge, TheTemplatesMergeAndFlashInfersDeclaredConventionsAreGreen) {
  TempDir tmp;
  const auto cert = certify_plugins(tmp, {MLA_PLUGIN_GOOD_MERGE, MLA_PLUGIN_MERGE_FLASHINFER_DECLARED}, "merge");
  ASSERT_EQ(cert.at("kernels").size(), 2u) << "merge-only libraries: one implementation each";
  for (const char* name : {"good_merge", "merge_flashinfer_declared"}) {
    const auto& k = kernel(cert, name);
    EXPECT_EQ(k.at("kinds"), json::array({"merge"})) << name;
    EXPECT_EQ(k.at("origin").at("entry"), "merge") << name;
    EXPECT_EQ(k.at("origin").at("isolation"), "child_per_case") << name;
    int stored = 0, drawn = 0;
    for (const auto& row : k.at("cases")) {
      EXPECT_EQ(row.at("verdict"), "PASS") << name << " " << row.at("case") << ": " << reasons(row);
      (row.at("family") == "fresh" ? drawn : stored)++;
    }
    EXPECT_GT(stored, 0) << name;
    EXPECT_GT(drawn, 0) << name;
  }
  const auto& conv = kernel(cert, "merge_flashinfer_declared").at("declared").at("conventions");
  EXPECT_EQ(conv.at("lse_base"), "2");
  EXPECT_EQ(conv.at("lse_layout"), "[n,h]");
  // The template carries all three kinds: a decode, a prefill and a merge, each its own row set.
  const auto lib = mla::plugin::Library::open(MLA_PLUGIN_GOOD_APPEND);
  EXPECT_TRUE(lib->decodes());
  EXPECT_EQ(lib->prefill_info()->name, "good_append_prefill");
  EXPECT_EQ(lib->merge_info()->name, "good_append_merge");
}

TEST(PluginMerge, EachPlantedMergeBugIsRedWhereTheJudgeSeesIt) {
  const auto catalog = mla::golden::open_catalog(fs::path(MLA_SOURCE_DIR) / "fixtures" / "goldens", false);
  const auto& family = mla::golden::family(mla::golden::family_names_certified_by("merge").at(0));
  const auto file = catalog.file(family.file());
  for (const auto& [plugin, name] : std::vector<std::pair<std::string, std::string>>{
           {MLA_PLUGIN_MERGE_BASE2_AS_NATURAL, "merge_base2_as_natural"}, {MLA_PLUGIN_MERGE_INF_AS_NUMBER, "merge_inf_as_number"}}) {
    SCOPED_TRACE(name);
    TempDir tmp;
    const auto cert = certify_plugins(tmp, {plugin}, "merge");
    const DirectMerge direct(mla::plugin::Library::open(plugin));
    int red_stored = 0, red_drawn = 0, red_twins = 0;
    for (const auto& row : kernel(cert, name).at("cases")) {
      SCOPED_TRACE(row.at("case").get<std::string>());
      const auto verdict = row.at("verdict").get<std::string>();
      if (row.at("family") == "fresh") {
        EXPECT_TRUE(verdict == "PASS" || verdict == "FAIL") << reasons(row);
        red_drawn += verdict == "FAIL";
        continue;
      }
      if (mla::certify::testing::is_twin(row.at("case").get<std::string>())) {
        EXPECT_TRUE(verdict == "PASS" || verdict == "FAIL") << reasons(row);
        red_twins += verdict == "FAIL";
        continue;
      }
      const auto c = mla::golden::load_merge_case(file, row.at("case"));
      const auto in = c.inputs();
      const auto got = mla::testing::call_merge(direct, in.view());
      const bool pass = mla::judge_merge(in.shape, got, {c.truth_out, c.truth_lse}).pass();
      EXPECT_EQ(verdict, pass ? "PASS" : "FAIL") << reasons(row);
      red_stored += verdict == "FAIL";
    }
    EXPECT_GT(red_stored, 0) << "a planted bug no stored case catches";
    EXPECT_GT(red_drawn, 0) << "a planted bug no drawn case catches";
    EXPECT_GT(red_twins, 0) << "a planted bug no twin catches";
  }
}

// ---- top-k --------------------------------------------------------------------------------------

// Top-k cases are drawn at run time only: the fresh family.
json certify_topk(const TempDir& tmp, const std::vector<std::string>& plugins) {
  auto o = in_process_options(tmp.path() / "out", {}, {"fresh"});
  for (const auto& p : plugins) o.plugins.emplace_back(p);
  return certify_here(o);
}

TEST(PluginTopk, TheTemplatesTopkAndARelativeOneDeclaredAreGreenAndEachSelectionBugIsRed) {
  TempDir tmp;
  const auto cert = certify_topk(tmp, {MLA_PLUGIN_GOOD_TOPK, MLA_PLUGIN_TOPK_RELATIVE_DECLARED,
                                       MLA_PLUGIN_TOPK_DROPS_LAST_VALID, MLA_PLUGIN_TOPK_PADS_WITH_MASKED});
  ASSERT_EQ(cert.at("kernels").size(), 4u) << "top-k-only libraries: one implementation each";
  for (const char* name : {"good_topk", "topk_relative_declared"}) {
    const auto& k = kernel(cert, name);
    EXPECT_EQ(k.at("kinds"), json::array({"topk"})) << name;
    EXPECT_EQ(k.at("origin").at("entry"), "topk") << name;
    EXPECT_EQ(k.at("origin").at("isolation"), "child_per_case") << name;
    ASSERT_FALSE(k.at("cases").empty()) << name;
    for (const auto& row : k.at("cases")) EXPECT_EQ(row.at("verdict"), "PASS") << name << " " << row.at("case") << ": " << reasons(row);
  }
  EXPECT_EQ(kernel(cert, "topk_relative_declared").at("declared").at("conventions").at("index_base"), "relative");
  // Each bug is red on every drawn case (each holds the edge rows its bug changes), for a reason
  // that names it: a dropped member is one selection too few where a row has fewer than k valid
  // positions, a clear member beaten where it has more.
  const std::vector<std::pair<std::string, std::vector<std::string>>> bugs = {
      {"topk_drops_last_valid", {"expected min(k", "a clear top-"}}, {"topk_pads_with_masked", {"a masked position"}}};
  for (const auto& [name, words] : bugs) {
    const auto& k = kernel(cert, name);
    ASSERT_FALSE(k.at("cases").empty()) << name;
    for (const auto& row : k.at("cases")) {
      EXPECT_EQ(row.at("verdict"), "FAIL") << name << " " << row.at("case") << ": " << reasons(row);
      EXPECT_TRUE(std::any_of(words.begin(), words.end(), [&](const auto& w) { return has_reason(row, w); }))
          << name << " " << row.at("case") << ": " << reasons(row);
    }
  }
}

// ---- indexer logits (1.5) --------------------------------------------------------------------------

TEST(PluginIndexerLogits, TheTemplatesScoresAreGreenAndEachPlantedBugIsRedWhereItApplies) {
  TempDir tmp;
  auto o = in_process_options(tmp.path() / "out", {}, {"indexer", "fresh"});
  for (const auto* p : {MLA_PLUGIN_GOOD_INDEXER_LOGITS, MLA_PLUGIN_INDEXER_NO_RELU, MLA_PLUGIN_INDEXER_SCALE_AFTER_EACH_TOKEN,
                        MLA_PLUGIN_INDEXER_SEES_NEXT_TOKEN}) {
    o.plugins.emplace_back(p);
  }
  const auto cert = certify_here(o);
  ASSERT_EQ(cert.at("kernels").size(), 4u) << "indexer-logits-only libraries: one implementation each";
  const auto& good = kernel(cert, "good_indexer_logits");
  EXPECT_EQ(good.at("kinds"), json::array({"indexer_logits"}));
  EXPECT_EQ(good.at("origin").at("entry"), "indexer_logits");
  EXPECT_EQ(good.at("origin").at("isolation"), "child_per_case");
  ASSERT_FALSE(good.at("cases").empty());
  bool stored = false, paged2 = false, ragged = false;
  for (const auto& row : good.at("cases")) {
    EXPECT_EQ(row.at("verdict"), "PASS") << row.at("case") << ": " << reasons(row);
    stored = stored || row.at("family") == "indexer";
    const auto& sh = row.at("shape");
    paged2 = paged2 || (sh.at("layout") == "paged" && sh.at("next_n") == 2);
    ragged = ragged || sh.at("layout") == "ragged";
  }
  EXPECT_TRUE(stored && paged2 && ragged) << "stored cases, a paged next_n 2 call and a ragged call all ran";
  // Each bug is red on every row whose call it changes and green where it cannot matter: the relu
  // everywhere (each call has negative dots), the scale area on every paged call, the speculative
  // token's horizon on paged calls with next_n 2 only.
  const auto verdicts = [&](const char* name, const std::function<bool(const json& shape)>& applies) {
    const auto& k = kernel(cert, name);
    ASSERT_FALSE(k.at("cases").empty()) << name;
    for (const auto& row : k.at("cases")) {
      const bool expect_red = applies(row.at("shape"));
      EXPECT_EQ(row.at("verdict"), expect_red ? "FAIL" : "PASS") << name << " " << row.at("case") << ": " << reasons(row);
    }
  };
  verdicts("indexer_no_relu", [](const json&) { return true; });
  verdicts("indexer_scale_after_each_token", [](const json& sh) { return sh.at("layout") == "paged"; });
  verdicts("indexer_sees_next_token",
           [](const json& sh) { return sh.at("layout") == "paged" && sh.at("next_n") == 2; });
}

// ---- indexer append (1.5) --------------------------------------------------------------------------

// Indexer appends are drawn at run time only (their truth is the C++ oracle's bytes).
TEST(PluginIndexerAppend, VllmsRecipeIsGreenAndEachWrongWriteIsRedOnEveryDrawnAppend) {
  TempDir tmp;
  auto o = in_process_options(tmp.path() / "out", {}, {"fresh"});
  for (const auto* p : {MLA_PLUGIN_GOOD_INDEXER_APPEND, MLA_PLUGIN_INDEXER_APPEND_SCALE_AFTER_EACH_TOKEN,
                        MLA_PLUGIN_INDEXER_APPEND_CLAMP_AFTER_DIVIDE, MLA_PLUGIN_INDEXER_APPEND_WRITES_SKIPPED_SLOTS}) {
    o.plugins.emplace_back(p);
  }
  const auto cert = certify_here(o);
  ASSERT_EQ(cert.at("kernels").size(), 4u) << "indexer-append-only libraries: one implementation each";
  const auto& good = kernel(cert, "good_indexer_append");
  EXPECT_EQ(good.at("kinds"), json::array({"indexer_append"}));
  EXPECT_EQ(good.at("origin").at("entry"), "indexer_append");
  EXPECT_EQ(good.at("origin").at("isolation"), "child_per_case");
  EXPECT_EQ(good.at("declared").at("conventions").at("fp32_scale_op"), "divide");
  std::set<std::string> fmts;
  for (const auto& row : good.at("cases")) {
    EXPECT_EQ(row.at("verdict"), "PASS") << row.at("case") << ": " << reasons(row);
    fmts.insert(row.at("shape").at("scale_fmt").get<std::string>());
  }
  EXPECT_EQ(fmts, (std::set<std::string>{"fp32", "ue8m0"})) << "both recipes drawn";
  // Every drawn append has skipped tokens, tokens whose amax is under the clamp and blocks with
  // more than one token: each bug changes bytes on every one.
  for (const char* name : {"indexer_append_scale_after_each_token", "indexer_append_clamp_after_divide",
                           "indexer_append_writes_skipped_slots"}) {
    const auto& k = kernel(cert, name);
    ASSERT_EQ(k.at("cases").size(), good.at("cases").size()) << name;
    for (const auto& row : k.at("cases")) EXPECT_EQ(row.at("verdict"), "FAIL") << name << " " << row.at("case") << ": " << reasons(row);
  }
}

// ---- sparse prefill (1.5) --------------------------------------------------------------------------

TEST(PluginSparsePrefill, TheTemplatesSparsePrefillIsGreenAndEachPlantedBugRedOnEveryDrawnCall) {
  TempDir tmp;
  auto o = in_process_options(tmp.path() / "out", {}, {"fresh"});
  for (const auto* p : {MLA_PLUGIN_GOOD_SPARSE_PREFILL, MLA_PLUGIN_SPARSE_PREFILL_MINUS_ONE_AS_ZERO,
                        MLA_PLUGIN_SPARSE_PREFILL_LSE_LOG2}) {
    o.plugins.emplace_back(p);
  }
  const auto cert = certify_here(o);
  ASSERT_EQ(cert.at("kernels").size(), 3u) << "sparse-prefill-only libraries: one implementation each";
  const auto& good = kernel(cert, "good_sparse_prefill");
  EXPECT_EQ(good.at("kinds"), json::array({"sparse_prefill"}));
  EXPECT_EQ(good.at("origin").at("entry"), "sparse_prefill");
  EXPECT_EQ(good.at("origin").at("isolation"), "child_per_case");
  ASSERT_EQ(good.at("cases").size(), 5u) << "the plain call, the one with a sink and topk_length, the 512-wide one, "
                                             "the two chain cases";
  for (const auto& row : good.at("cases")) {
    EXPECT_EQ(row.at("verdict"), "PASS") << row.at("case") << ": " << reasons(row);
    EXPECT_EQ(row.at("max_logits").at("tolerance"), "sparse_prefill.max_logits.f32") << "written as float32";
  }
  // A library of the sparse prefill alone: the suite's links feed its chain.
  for (const auto& row : good.at("cases")) {
    if (row.at("case").get<std::string>().rfind("sparse_chain_", 0) != 0) continue;
    EXPECT_NE(row.at("description").get<std::string>().find("by cpu_indexer_logits"), std::string::npos);
  }
  // Every drawn call has -1 entries in rows that do not name position 0, and rows with keys (the
  // chain's -1 entries are a top-k's padding of rows that selected position 0: there it cannot
  // matter, drawn_kinds' test says why).
  const std::vector<std::pair<std::string, std::string>> bugs = {{"sparse_prefill_minus_one_as_zero", "out: "},
                                                                 {"sparse_prefill_lse_log2", "lse: "}};
  for (const auto& [name, words] : bugs) {
    const auto& k = kernel(cert, name);
    ASSERT_EQ(k.at("cases").size(), 5u) << name;
    for (const auto& row : k.at("cases")) {
      if (name == "sparse_prefill_minus_one_as_zero" && row.at("case").get<std::string>().rfind("sparse_chain_", 0) == 0)
        continue;
      EXPECT_EQ(row.at("verdict"), "FAIL") << name << " " << row.at("case") << ": " << reasons(row);
      EXPECT_TRUE(has_reason(row, words)) << name << " " << row.at("case") << ": " << reasons(row);
    }
  }
}

// The template has all three of V3.2's sparse entries: a stack. Its chain cases feed its sparse
// prefill with its own indexer logits and top-k, each judged in turn, all green.
TEST(PluginSparsePrefill, TheTemplatesThreeSparseEntriesCertifyAsAChain) {
  TempDir tmp;
  auto o = in_process_options(tmp.path() / "out", {}, {"fresh"});
  o.plugins.emplace_back(MLA_PLUGIN_GOOD_APPEND);
  o.case_regex = "sparse_chain_";
  const auto cert = certify_here(o);
  const auto& k = kernel(cert, "good_append_sparse_prefill");
  ASSERT_EQ(k.at("cases").size(), 2u) << "a chunk over a prefix and a sequence from its start";
  for (const auto& row : k.at("cases")) {
    EXPECT_EQ(row.at("verdict"), "PASS") << row.at("case") << ": " << reasons(row);
    const auto d = row.at("description").get<std::string>();
    EXPECT_NE(d.find("by good_append_indexer_logits, their top-64 by good_append_topk, then good_append_sparse_prefill"),
              std::string::npos)
        << d;
    EXPECT_TRUE(row.at("out").is_object() && row.at("lse").is_object() && row.at("max_logits").is_object());
  }
}

// validate_descriptor of `good` with its `member` entry replaced by a copy that `change` altered
// (the descriptor too, when it changes that): a refusal naming `words`.
template <class Entry>
void expect_refused(const mla_plugin_descriptor& good, const Entry* mla_plugin_descriptor::*member,
                    const std::function<void(mla_plugin_descriptor&, Entry&)>& change, const std::string& words) {
  mla_plugin_descriptor d = good;
  Entry e = *(good.*member);
  d.*member = &e;
  change(d, e);
  try {
    mla::plugin::validate_descriptor(d);
    ADD_FAILURE() << "accepted; expected a refusal naming " << words;
  } catch (const mla::plugin::PluginError& ex) {
    EXPECT_NE(std::string(ex.what()).find(words), std::string::npos) << ex.what();
  }
}

// A descriptor whose prefill entry breaks one rule: the loader's validation names the field.
TEST(PluginPrefill, AnEntryThatBreaksARuleIsRefusedNamingTheField) {
  const auto lib = mla::plugin::Library::open(MLA_PLUGIN_GOOD_APPEND);
  const mla_plugin_descriptor good = lib->descriptor();
  ASSERT_NE(good.prefill, nullptr);
  mla::plugin::validate_descriptor(good);
  const auto refused = [&](const std::function<void(mla_plugin_descriptor&, mla_plugin_prefill_entry&)>& change,
                           const std::string& words) { expect_refused(good, &mla_plugin_descriptor::prefill, change, words); };
  refused([](auto&, auto& e) { e.struct_size = 8; }, "prefill entry struct_size 8");
  refused([](auto&, auto& e) { e.name = "Bad-Name"; }, "prefill entry name 'Bad-Name'");
  refused([](auto& d, auto& e) { e.name = d.name; }, "is another entry's");
  refused([](auto&, auto& e) { e.out_dtype = 7; }, "prefill.out_dtype 7");
  refused([](auto&, auto& e) { e.min_heads = 0; }, "prefill heads range [0, 128]");
  refused([](auto&, auto& e) { e.calls = MLA_PLUGIN_PREFILL_VARLEN; }, "prefill.calls 0x4");
  refused([](auto&, auto& e) { e.max_total_tokens = 0; }, "prefill.max_total_tokens 0");
  refused([](auto&, auto& e) { e.lse_base = 2; }, "prefill.lse_base 2");
  refused([](auto&, auto& e) { e.v_padded = 3; }, "prefill.v_padded 3");
  refused([](auto&, auto& e) { e.causal_alignment = 2; }, "prefill.causal_alignment 2");
  refused([](auto&, auto& e) { e.operand_precision = MLA_PLUGIN_PRECISION_BF16; }, "must both be declared");
  refused([](auto&, auto& e) { e.prefill = nullptr; }, "no prefill entry point");
  refused([](auto& d, auto& e) {
            d.decode = nullptr, d.prefill = nullptr, d.merge = nullptr, d.topk = nullptr, d.indexer_logits = nullptr;
            d.indexer_append = nullptr, d.sparse_prefill = nullptr;
            (void)e;
          },
          "no decode entry point");
  // The merge entry's rules.
  ASSERT_NE(good.merge, nullptr);
  const auto merge_refused = [&](const std::function<void(mla_plugin_merge_entry&)>& change, const std::string& words) {
    expect_refused<mla_plugin_merge_entry>(good, &mla_plugin_descriptor::merge, [&](auto&, auto& e) { change(e); }, words);
  };
  merge_refused([](auto& e) { e.struct_size = 4; }, "merge entry struct_size 4");
  merge_refused([](auto& e) { e.name = "good_append_prefill"; }, "merge entry name 'good_append_prefill' is another entry's");
  merge_refused([](auto& e) { e.dtypes = 0; }, "merge.dtypes 0x0");
  merge_refused([](auto& e) { e.dtypes = 0x8; }, "merge.dtypes 0x8");
  merge_refused([](auto& e) { e.num_head_dims = 17; }, "merge.num_head_dims 17");
  merge_refused([](auto& e) { e.num_head_dims = 1, e.head_dims[0] = 0; }, "merge.head_dims[0] = 0");
  merge_refused([](auto& e) { e.lse_layout = 2; }, "merge.lse_layout 2");
  merge_refused([](auto& e) { e.both_empty_lse = 5; }, "merge.both_empty_lse 5");
  merge_refused([](auto& e) { e.merge = nullptr; }, "no merge entry point");
  // The top-k entry's rules.
  ASSERT_NE(good.topk, nullptr);
  const auto topk_refused = [&](const std::function<void(mla_plugin_topk_entry&)>& change, const std::string& words) {
    expect_refused<mla_plugin_topk_entry>(good, &mla_plugin_descriptor::topk, [&](auto&, auto& e) { change(e); }, words);
  };
  topk_refused([](auto& e) { e.struct_size = 4; }, "top-k entry struct_size 4");
  topk_refused([](auto& e) { e.name = "good_append_merge"; }, "top-k entry name 'good_append_merge' is another entry's");
  topk_refused([](auto& e) { e.num_ks = -1; }, "topk.num_ks -1");
  topk_refused([](auto& e) { e.num_ks = 1, e.ks[0] = 0; }, "topk.ks[0] = 0");
  topk_refused([](auto& e) { e.max_n = -5; }, "topk.max_n -5");
  topk_refused([](auto& e) { e.index_base = 2; }, "topk.index_base 2");
  topk_refused([](auto& e) { e.sorted = 2; }, "topk.sorted 2");
  topk_refused([](auto& e) { e.logits_precision = 3; }, "topk.logits_precision 3");
  topk_refused([](auto& e) { e.range_all_valid = 7; }, "topk.range_all_valid 7");
  topk_refused([](auto& e) { e.topk = nullptr; }, "no top-k entry point");
  // The indexer logits entry's rules (1.5).
  ASSERT_NE(good.indexer_logits, nullptr);
  const auto logits_refused = [&](const std::function<void(mla_plugin_indexer_logits_entry&)>& change,
                                  const std::string& words) {
    expect_refused<mla_plugin_indexer_logits_entry>(good, &mla_plugin_descriptor::indexer_logits,
                                                    [&](auto&, auto& e) { change(e); }, words);
  };
  logits_refused([](auto& e) { e.struct_size = 4; }, "indexer logits entry struct_size 4");
  logits_refused([](auto& e) { e.name = "good_append_topk"; },
                 "indexer logits entry name 'good_append_topk' is another entry's");
  logits_refused([](auto& e) { e.layouts = 0; }, "indexer_logits.layouts 0x0");
  logits_refused([](auto& e) { e.layouts = 0x4; }, "indexer_logits.layouts 0x4");
  logits_refused([](auto& e) { e.next_ns = 0x4; }, "indexer_logits.next_ns 0x4");
  logits_refused([](auto& e) { e.num_heads = 17; }, "indexer_logits.num_heads 17");
  logits_refused([](auto& e) { e.num_heads = 1, e.heads[0] = 0; }, "indexer_logits.heads[0] = 0");
  logits_refused([](auto& e) { e.num_block_sizes = 1, e.block_sizes[0] = -64; }, "indexer_logits.block_sizes[0] = -64");
  logits_refused([](auto& e) { e.max_context = -1; }, "indexer_logits.max_context -1");
  logits_refused([](auto& e) { e.indexer_logits = nullptr; }, "no indexer_logits entry point");
  // The indexer append entry's rules (1.5).
  ASSERT_NE(good.indexer_append, nullptr);
  const auto append_refused = [&](const std::function<void(mla_plugin_indexer_append_entry&)>& change,
                                  const std::string& words) {
    expect_refused<mla_plugin_indexer_append_entry>(good, &mla_plugin_descriptor::indexer_append,
                                                    [&](auto&, auto& e) { change(e); }, words);
  };
  append_refused([](auto& e) { e.struct_size = 4; }, "indexer append entry struct_size 4");
  append_refused([](auto& e) { e.name = "good_append_indexer_logits"; },
                 "indexer append entry name 'good_append_indexer_logits' is another entry's");
  append_refused([](auto& e) { e.scale_fmts = 0; }, "indexer_append.scale_fmts 0x0");
  append_refused([](auto& e) { e.scale_fmts = 0x4; }, "indexer_append.scale_fmts 0x4");
  append_refused([](auto& e) { e.fp32_scale_op = 2; }, "indexer_append.fp32_scale_op 2");
  append_refused([](auto& e) { e.num_block_sizes = 99; }, "indexer_append.num_block_sizes 99");
  append_refused([](auto& e) { e.num_block_sizes = 1, e.block_sizes[0] = 0; }, "indexer_append.block_sizes[0] = 0");
  append_refused([](auto& e) { e.indexer_append = nullptr; }, "no indexer_append entry point");
  // The sparse prefill entry's rules (1.5).
  ASSERT_NE(good.sparse_prefill, nullptr);
  const auto sparse_refused = [&](const std::function<void(mla_plugin_sparse_prefill_entry&)>& change,
                                  const std::string& words) {
    expect_refused<mla_plugin_sparse_prefill_entry>(good, &mla_plugin_descriptor::sparse_prefill,
                                                    [&](auto&, auto& e) { change(e); }, words);
  };
  sparse_refused([](auto& e) { e.struct_size = 4; }, "sparse prefill entry struct_size 4");
  sparse_refused([](auto& e) { e.name = "good_append_merge"; }, "sparse prefill entry name 'good_append_merge' is another entry's");
  sparse_refused([](auto& e) { e.out_dtype = 9; }, "sparse_prefill.out_dtype 9");
  sparse_refused([](auto& e) { e.accum_precision = MLA_PLUGIN_PRECISION_UNDECLARED; }, "must both be declared");
  sparse_refused([](auto& e) { e.num_heads = 1, e.heads[0] = 0; }, "sparse_prefill.heads[0] = 0");
  sparse_refused([](auto& e) { e.topk_multiple = 0; }, "sparse_prefill.topk_multiple 0");
  sparse_refused([](auto& e) { e.d_qks = 0x4; }, "sparse_prefill.d_qks 0x4");
  sparse_refused([](auto& e) { e.takes_sink = 2; }, "sparse_prefill.takes_sink 2");
  sparse_refused([](auto& e) { e.sparse_prefill = nullptr; }, "no sparse_prefill entry point");
  // Without a decode, the decode's claims are not looked at.
  mla_plugin_descriptor d = good;
  d.decode = nullptr;
  d.caps = {};
  mla::plugin::validate_descriptor(d);
}

}  // namespace
