// L0: the kinds of `mla certify` whose every case is drawn at run time (top-k, the indexer key
// cache append, the indexer logits), run as a library in this process. Every registered kernel of each passes every
// case drawn for it and gets no row of another kind, with its declared conventions recorded,
// while a decode kernel beside them gets none of theirs; every planted bug of kernels/faults,
// selected with --fault, is FAIL on every drawn case its bug applies to (an fp32-for-ue8m0 scale
// bug on the ue8m0 cases, a logits scale read from the wrong place on paged calls, a later
// token's position on next_n 2 calls) and PASS on the others, with the judge's reason. The indexer
// logits also certify the stored indexer family (the reference's indexer steps): every registered
// kernel passes it as a paged call, a kernel that takes ragged calls only as a ragged one, and
// every planted logits bug is FAIL on every stored case. Top-k: a claim of one k gets that k's cases
// only; a kernel that throws is an ERROR with its message, one whose second call differs a FAIL;
// the same seed draws the same cases; a selection without the fresh family, or whose --case
// matches no drawn case, is refused saying why.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <set>
#include <sstream>

#include "mla/certify/certify.hpp"
#include "mla/core/indexer_cache.hpp"
#include "mla/core/indexer_logits.hpp"
#include "mla/golden/golden.hpp"
#include "mla/core/sparse_prefill.hpp"
#include "mla/core/topk.hpp"
#include "mla/faults/faults.hpp"
#include "mla/registry/registry.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::certify::testing::certify_here;
using mla::certify::testing::kernel;
using mla::certify::testing::slurp;
using mla::certify::testing::TempDir;
using nlohmann::json;

const std::string kDecode = "cpu_mla_fp64";
constexpr const char* kTopkFile = "fresh_topk";
constexpr const char* kAppendFile = "fresh_indexer_append";
constexpr const char* kLogitsFile = "fresh_indexer_logits";

// ---- kernels registered in this process only: cpu_topk_exact behind another behaviour ----------

class Wrapped : public mla::TopkImpl {
 public:
  Wrapped(std::string name, std::vector<int> ks) {
    info_ = exact().info();
    info_.name = std::move(name);
    info_.role = mla::KernelRole::optimized;
    info_.ks = std::move(ks);
  }
  const mla::TopkKernelInfo& info() const override { return info_; }

 protected:
  static const mla::TopkImpl& exact() {
    mla::register_builtin_kernels();
    return *mla::Registry::instance().find_topk("cpu_topk_exact");
  }
  mla::TopkKernelInfo info_;
};

// Correct, claiming k = 64 only.
class OnlyK64 final : public Wrapped {
 public:
  OnlyK64() : Wrapped("test_topk_only_k64", {64}) {}
  std::unique_ptr<mla::PreparedTopk> prepare(const mla::TopkInputs& in) const override { return exact().prepare(in); }
};

// run() throws.
class Throws final : public Wrapped {
 public:
  Throws() : Wrapped("test_topk_throws", {}) {}
  std::unique_ptr<mla::PreparedTopk> prepare(const mla::TopkInputs&) const override {
    struct P final : mla::PreparedTopk {
      void run() override { throw std::runtime_error("injected failure in run()"); }
      mla::TopkOutputs results() override { return {}; }
    };
    return std::make_unique<P>();
  }
};

// Right on its first call; from the second on, the first two slots of row 0 swapped (state
// carried from one call into the next: a valid selection, but not the same one).
class SecondCallDiffers final : public Wrapped {
 public:
  SecondCallDiffers() : Wrapped("test_topk_second_call_differs", {}) {}
  std::unique_ptr<mla::PreparedTopk> prepare(const mla::TopkInputs& in) const override {
    struct P final : mla::PreparedTopk {
      std::unique_ptr<mla::PreparedTopk> inner;
      int calls = 0;
      void run() override { inner->run(), ++calls; }
      mla::TopkOutputs results() override {
        auto o = inner->results();
        if (calls > 1 && o.indices.size() >= 2) std::swap(o.indices[0], o.indices[1]);
        return o;
      }
    };
    auto p = std::make_unique<P>();
    p->inner = exact().prepare(in);
    return p;
  }
};

// cpu_indexer_logits claiming ragged calls only (fp8_mqa_logits without its paged sibling).
class RaggedOnlyLogits final : public mla::IndexerLogitsImpl {
 public:
  RaggedOnlyLogits() {
    info_ = base().info();
    info_.name = "test_indexer_logits_ragged_only";
    info_.role = mla::KernelRole::optimized;
    info_.layouts = {mla::IndexerLogitsLayout::ragged};
  }
  const mla::IndexerLogitsKernelInfo& info() const override { return info_; }
  std::unique_ptr<mla::PreparedIndexerLogits> prepare(const mla::IndexerLogitsInputs& in) const override {
    return base().prepare(in);
  }

 private:
  static const mla::IndexerLogitsImpl& base() {
    mla::register_builtin_kernels();
    return *mla::Registry::instance().find_indexer_logits("cpu_indexer_logits");
  }
  mla::IndexerLogitsKernelInfo info_;
};

void register_test_kernels() {
  static const bool once = [] {
    mla::register_builtin_kernels();
    mla::Registry::instance().add(std::make_unique<RaggedOnlyLogits>());
    mla::Registry::instance().add(std::make_unique<OnlyK64>());
    mla::Registry::instance().add(std::make_unique<Throws>());
    mla::Registry::instance().add(std::make_unique<SecondCallDiffers>());
    return true;
  }();
  (void)once;
}

// ---- running the certifier here ----------------------------------------------------------------

mla::certify::Options options(const fs::path& out, std::vector<std::string> kernels) {
  return mla::certify::testing::in_process_options(out, std::move(kernels), {"fresh"});
}

std::vector<const json*> rows_of(const json& k, const char* file) {
  std::vector<const json*> rows;
  for (const auto& r : k["cases"]) {
    if (r["file"] == file) rows.push_back(&r);
  }
  return rows;
}
std::vector<const json*> topk_rows(const json& k) { return rows_of(k, kTopkFile); }

// Selects every planted bug of `names` in `o` (its fault and its kernel, made by `make`); returns
// the (fault, kernel name) pairs.
template <class Make>
std::vector<std::pair<std::string, std::string>> plant(mla::certify::Options& o, const std::vector<std::string>& names,
                                                       Make make) {
  std::vector<std::pair<std::string, std::string>> planted;
  for (const auto& f : names) {
    o.faults.push_back(f);
    planted.emplace_back(f, make(f)->info().name);
    o.kernels.push_back(planted.back().second);
  }
  return planted;
}

bool builtin(const std::string& name) { return name.rfind("test_", 0) != 0; }

TEST(CertifyTopk, EveryRegisteredTopkPassesEveryDrawnCaseAndNoKernelGetsAnotherKindsRows) {
  mla::register_builtin_kernels();
  std::vector<std::string> names;
  for (const auto& k : mla::Registry::instance().topk()) {
    if (builtin(k->info().name)) names.push_back(k->info().name);
  }
  ASSERT_GE(names.size(), 2u);
  auto all = names;
  all.push_back(kDecode);
  const TempDir tmp("topk-all");
  auto o = options(tmp.path() / "all", all);
  o.families.push_back("attn_core");
  o.case_regex = "^fresh/topk_|^attn_core/h3_sq2_short$";
  const auto cert = certify_here(o);
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const auto& k = kernel(cert, name);
    const auto& info = mla::Registry::instance().find_topk(name)->info();
    EXPECT_EQ(k["kinds"], json::array({"topk"}));
    EXPECT_EQ(k["origin"]["isolation"], "in_process");
    EXPECT_EQ(k["declared"]["conventions"], to_json(info.conventions));
    EXPECT_EQ(k["declared"]["precision"], mla::to_string(info.precision));
    std::set<int> ks;
    for (const auto& r : k["cases"]) {
      EXPECT_EQ(r["file"], kTopkFile) << "a row of another kind: " << r["family"] << "/" << r["case"];
      EXPECT_EQ(r["verdict"], "PASS") << r["case"] << ": " << r["reasons"].dump();
      ks.insert(r["shape"]["k"].get<int>());
    }
    // No k claimed: V3.2's 2048 and 64, each with rows longer and shorter than k.
    EXPECT_EQ(topk_rows(k).size(), 4u);
    EXPECT_EQ(ks, (std::set<int>{64, 2048}));
  }
  const auto& d = kernel(cert, kDecode);
  EXPECT_EQ(d["kinds"], json::array({"decode"}));
  EXPECT_TRUE(topk_rows(d).empty());
  EXPECT_FALSE(d["cases"].empty());
  // The Markdown shows the top-k dimensions for these kernels.
  const auto md = slurp(tmp.path() / "all" / "certificate.md");
  EXPECT_NE(md.find("| k (indices per row) | 64, 2048 |"), std::string::npos) << md;
}

TEST(CertifyTopk, EveryPlantedTopkBugIsRedOnEveryDrawnCase) {
  mla::register_builtin_kernels();
  const TempDir tmp("topk-faults");
  auto o = options(tmp.path() / "faults", {});
  std::vector<std::string> kernels;
  for (const auto& [fault, name] : plant(o, mla::faults::topk_names(), &mla::faults::make_topk)) kernels.push_back(name);
  const auto cert = certify_here(o);
  for (const auto& name : kernels) {
    SCOPED_TRACE(name);
    const auto& k = kernel(cert, name);
    EXPECT_EQ(k["origin"]["kind"], "self-test");
    EXPECT_EQ(k["kinds"], json::array({"topk"}));
    const auto rows = topk_rows(k);
    EXPECT_EQ(rows.size(), 4u);
    // Each drawn case holds a row that shows every one of these bugs.
    for (const auto* r : rows) {
      EXPECT_EQ((*r)["verdict"], "FAIL") << (*r)["case"];
      ASSERT_FALSE((*r)["reasons"].empty());
      EXPECT_EQ((*r)["reasons"][0].get<std::string>().rfind("row ", 0), 0u) << "the judge's reason names its row";
    }
  }
}

TEST(CertifyTopk, AClaimOfOneKAThrowingKernelAndAKernelWhoseSecondCallDiffers) {
  register_test_kernels();
  const TempDir tmp("topk-paths");
  const auto cert = certify_here(options(tmp.path() / "paths", {"test_topk_only_k64", "test_topk_throws", "test_topk_second_call_differs"}));
  const auto& only = kernel(cert, "test_topk_only_k64");
  ASSERT_EQ(topk_rows(only).size(), 2u);
  for (const auto* r : topk_rows(only)) {
    EXPECT_EQ((*r)["shape"]["k"], 64);
    EXPECT_EQ((*r)["verdict"], "PASS") << (*r)["reasons"].dump();
  }
  for (const auto* r : topk_rows(kernel(cert, "test_topk_throws"))) {
    EXPECT_EQ((*r)["verdict"], "ERROR");
    EXPECT_NE((*r)["reasons"].dump().find("injected failure in run()"), std::string::npos) << (*r)["reasons"].dump();
  }
  for (const auto* r : topk_rows(kernel(cert, "test_topk_second_call_differs"))) {
    EXPECT_EQ((*r)["verdict"], "FAIL");
    EXPECT_NE((*r)["reasons"].dump().find("a repeated call differs"), std::string::npos) << (*r)["reasons"].dump();
  }
}

TEST(CertifyTopk, TheSameSeedDrawsTheSameCasesAndAnotherSeedOthers) {
  const TempDir tmp("topk-seed");
  const auto names = [](const json& cert) {
    std::vector<std::string> n;
    for (const auto* r : topk_rows(kernel(cert, "cpu_topk_exact"))) n.push_back((*r)["case"].get<std::string>() + (*r)["description"].get<std::string>());
    return n;
  };
  const auto a = certify_here(options(tmp.path() / "a", {"cpu_topk_exact"}));
  const auto b = certify_here(options(tmp.path() / "b", {"cpu_topk_exact"}));
  auto o = options(tmp.path() / "c", {"cpu_topk_exact"});
  o.seed = 12;
  const auto c = certify_here(o);
  EXPECT_EQ(names(a), names(b));
  EXPECT_NE(names(a), names(c)) << "the seed is in each drawn case's description";
}

TEST(CertifyTopk, ACaseSelectionThatMatchesNoDrawnCaseIsRefused) {
  const TempDir tmp("topk-no-match");
  auto o = options(tmp.path() / "none", {"cpu_topk_exact"});
  o.families.clear();  // every family: the selection must find a case somewhere
  o.case_regex = "^no/such$";
  try {
    (void)certify_here(o);
    ADD_FAILURE() << "a selection without any case was accepted";
  } catch (const mla::certify::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no drawn topk case matches --case"), std::string::npos) << e.what();
  }
  // One that matches a drawn case runs it alone.
  o.case_regex = "rows_shorter_than_k";
  o.out = tmp.path() / "some";
  const auto rows = topk_rows(kernel(certify_here(o), "cpu_topk_exact"));
  EXPECT_EQ(rows.size(), 2u);
}

TEST(CertifyTopk, ATopkSelectionWithoutTheFreshFamilyIsRefusedSayingWhereItsCasesComeFrom) {
  const TempDir tmp("topk-no-fresh");
  auto o = options(tmp.path() / "none", {"cpu_topk_exact"});
  o.families = {"attn_core"};
  try {
    (void)certify_here(o);
    ADD_FAILURE() << "a selection without any case was accepted";
  } catch (const mla::certify::UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("topk cases are drawn at run time only"), std::string::npos) << what;
    EXPECT_NE(what.find("fresh"), std::string::npos) << what;
  }
}

// ---- the indexer key cache append -------------------------------------------------------------

TEST(CertifyIndexerAppend, EveryRegisteredAppendWritesTheOraclesBytesOnEveryDrawnCase) {
  mla::register_builtin_kernels();
  std::vector<std::string> names;
  for (const auto& k : mla::Registry::instance().indexer_append()) names.push_back(k->info().name);
  ASSERT_FALSE(names.empty());
  auto all = names;
  all.push_back("cpu_topk_exact");
  const TempDir tmp("indexer-append-all");
  const auto cert = certify_here(options(tmp.path() / "all", all));
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const auto& k = kernel(cert, name);
    const auto& info = mla::Registry::instance().find_indexer_append(name)->info();
    EXPECT_EQ(k["kinds"], json::array({"indexer_append"}));
    EXPECT_EQ(k["declared"]["conventions"]["fp32_scale_op"], mla::to_string(info.conventions.fp32_scale_op));
    std::set<std::string> fmts;
    for (const auto& r : k["cases"]) {
      EXPECT_EQ(r["file"], kAppendFile) << "a row of another kind: " << r["case"];
      EXPECT_EQ(r["verdict"], "PASS") << r["case"] << ": " << r["reasons"].dump();
      fmts.insert(r["shape"]["scale_fmt"].get<std::string>());
    }
    // Per scale format it claims, block sizes 64 and 16.
    EXPECT_EQ(rows_of(k, kAppendFile).size(), 2 * info.scale_fmts.size());
    EXPECT_EQ(fmts.size(), info.scale_fmts.size());
  }
  EXPECT_TRUE(rows_of(kernel(cert, "cpu_topk_exact"), kAppendFile).empty());
  EXPECT_TRUE(topk_rows(kernel(cert, names.front())).empty());
}

TEST(CertifyIndexerAppend, EveryPlantedAppendBugIsRedOnEveryDrawnCaseItAppliesTo) {
  mla::register_builtin_kernels();
  const TempDir tmp("indexer-append-faults");
  auto o = options(tmp.path() / "faults", {});
  const auto planted = plant(o, mla::faults::indexer_append_names(), &mla::faults::make_indexer_append);  // (fault, kernel)
  const auto cert = certify_here(o);
  for (const auto& [fault, name] : planted) {
    SCOPED_TRACE(name);
    const auto& k = kernel(cert, name);
    EXPECT_EQ(k["origin"]["kind"], "self-test");
    const auto rows = rows_of(k, kAppendFile);
    EXPECT_EQ(rows.size(), 4u);
    for (const auto* r : rows) {
      // Float32 scales written for ue8m0 ones change nothing where float32 ones are asked for.
      const bool applies = fault != "fp32_scale_for_ue8m0" || (*r)["shape"]["scale_fmt"] == "ue8m0";
      EXPECT_EQ((*r)["verdict"], applies ? "FAIL" : "PASS") << (*r)["case"] << ": " << (*r)["reasons"].dump();
    }
  }
}

// ---- the indexer logits ------------------------------------------------------------------------

TEST(CertifyIndexerLogits, EveryRegisteredLogitsKernelPassesEveryDrawnCall) {
  mla::register_builtin_kernels();
  std::vector<std::string> names;
  for (const auto& k : mla::Registry::instance().indexer_logits()) names.push_back(k->info().name);
  ASSERT_FALSE(names.empty());
  const TempDir tmp("indexer-logits-all");
  const auto cert = certify_here(options(tmp.path() / "all", names));
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const auto& k = kernel(cert, name);
    EXPECT_EQ(k["kinds"], json::array({"indexer_logits"}));
    std::set<std::string> layouts;
    for (const auto& r : k["cases"]) {
      EXPECT_EQ(r["file"], kLogitsFile) << "a row of another kind: " << r["case"];
      EXPECT_EQ(r["verdict"], "PASS") << r["case"] << ": " << r["reasons"].dump();
      layouts.insert(r["shape"]["layout"].get<std::string>());
    }
    // Both layouts it claims; paged with next_n 1 and 2.
    EXPECT_EQ(layouts.size(), mla::Registry::instance().find_indexer_logits(name)->info().layouts.size());
    EXPECT_GE(rows_of(k, kLogitsFile).size(), 3u);
  }
}

TEST(CertifyIndexerLogits, EveryPlantedLogitsBugIsRedOnEveryDrawnCallItAppliesTo) {
  mla::register_builtin_kernels();
  const TempDir tmp("indexer-logits-faults");
  auto o = options(tmp.path() / "faults", {});
  const auto planted = plant(o, mla::faults::indexer_logits_names(), &mla::faults::make_indexer_logits);  // (fault, kernel)
  const auto cert = certify_here(o);
  for (const auto& [fault, name] : planted) {
    SCOPED_TRACE(name);
    const auto rows = rows_of(kernel(cert, name), kLogitsFile);
    EXPECT_EQ(rows.size(), 3u);
    for (const auto* r : rows) {
      const auto& shape = (*r)["shape"];
      const bool paged = shape["layout"] == "paged";
      // A scale's place exists only in the paged cache; a later query token only with next_n 2.
      const bool applies = (fault != "reads_scale_after_codes" || paged) &&
                           (fault != "sees_later_token" || (paged && shape["next_n"] == 2));
      EXPECT_EQ((*r)["verdict"], applies ? "FAIL" : "PASS") << (*r)["case"] << ": " << (*r)["reasons"].dump();
    }
  }
}

// ---- the indexer logits on the stored indexer family --------------------------------------------

// The stored cases of the indexer family, as the catalog lists them.
std::vector<std::string> stored_indexer_cases() {
  const auto file = fs::path(MLA_SOURCE_DIR) / "fixtures" / "goldens" / "indexer.h5";
  return mla::golden::read_file_info(file).cases;
}

TEST(CertifyIndexerLogits, TheStoredIndexerStepsPassEveryLogitsKernelAndFailEveryPlantedBug) {
  register_test_kernels();
  const auto cases = stored_indexer_cases();
  ASSERT_GE(cases.size(), 4u);
  const TempDir tmp("indexer-logits-stored");
  std::vector<std::string> good;
  for (const auto& k : mla::Registry::instance().indexer_logits()) good.push_back(k->info().name);
  auto o = mla::certify::testing::in_process_options(tmp.path() / "stored", good, {"indexer"});
  const auto planted = plant(o, mla::faults::indexer_logits_names(), &mla::faults::make_indexer_logits);  // (fault, kernel)
  const auto cert = certify_here(o);
  for (const auto& name : good) {
    SCOPED_TRACE(name);
    const bool paged = name != "test_indexer_logits_ragged_only";
    std::set<std::string> seen;
    for (const auto& r : kernel(cert, name)["cases"]) {
      EXPECT_EQ(r["family"], "indexer") << r["case"];
      EXPECT_EQ(r["verdict"], "PASS") << r["case"] << ": " << r["reasons"].dump();
      EXPECT_EQ(r["shape"]["layout"], paged ? "paged" : "ragged") << r["case"];
      // Paged: each sequence's last two positions (a decode step with its speculative token).
      if (paged) {
        EXPECT_EQ(r["shape"]["next_n"], 2) << r["case"];
      }
      seen.insert(r["case"].get<std::string>());
    }
    EXPECT_EQ(seen, std::set<std::string>(cases.begin(), cases.end()));
  }
  // Paged calls hold every place a logits kernel can go wrong: each planted bug is red on every case.
  for (const auto& [fault, name] : planted) {
    SCOPED_TRACE(name);
    const auto& rows = kernel(cert, name)["cases"];
    EXPECT_EQ(rows.size(), cases.size());
    for (const auto& r : rows) EXPECT_EQ(r["verdict"], "FAIL") << r["case"] << ": " << r["reasons"].dump();
  }
}

// ---- the sparse prefill (drawn only) --------------------------------------------------------------

constexpr const char* kSparseFile = "fresh_sparse_prefill";

TEST(CertifySparsePrefill, EveryRegisteredSparsePrefillPassesEveryDrawnCallWithItsThreeComparisons) {
  mla::register_builtin_kernels();
  const TempDir tmp("sparse-prefill");
  std::vector<std::string> names;
  for (const auto& k : mla::Registry::instance().sparse_prefill()) names.push_back(k->info().name);
  ASSERT_FALSE(names.empty());
  const auto cert = certify_here(options(tmp.path() / "all", names));
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const auto& k = kernel(cert, name);
    EXPECT_EQ(k["kinds"], json::array({"sparse_prefill"}));
    const auto rows = rows_of(k, kSparseFile);
    // The plain call, the one with a sink and topk_length, the 512-wide call, and the two chain
    // cases (the suite's indexer and top-k feeding it).
    ASSERT_EQ(rows.size(), 5u);
    std::set<std::string> seen;
    for (const auto* r : rows) {
      EXPECT_EQ((*r)["verdict"], "PASS") << (*r)["case"] << ": " << (*r)["reasons"].dump();
      for (const char* what : {"out", "lse", "max_logits"}) EXPECT_TRUE((*r)[what].is_object()) << what;
      // The bound the judge used for max_logits is the table's, and the baseline uses little of it.
      EXPECT_EQ((*r)["max_logits"]["tolerance"], "sparse_prefill.max_logits.f32");
      EXPECT_LT((*r)["max_logits"]["max_bound_use"].get<double>(), 0.5);
      seen.insert((*r)["case"].get<std::string>());
    }
    EXPECT_TRUE(seen.count("sparse_prefill_h16_k64_d576") && seen.count("sparse_prefill_h16_k64_d576_sink_len") &&
                seen.count("sparse_prefill_h16_k64_d512_sink"));
    EXPECT_TRUE(seen.count("sparse_chain_chunk_h16_k64_d576") && seen.count("sparse_chain_from_start_h16_k64_d576"));
    for (const auto* r : rows) {
      if ((*r)["case"].get<std::string>().rfind("sparse_chain_", 0) != 0) continue;
      // The chain names its links, and says how often the top-k chose the exact set (drawn
      // logits have no near-tie in practice: every row).
      const auto d = (*r)["description"].get<std::string>();
      EXPECT_NE(d.find("by cpu_indexer_logits, their top-64 by cpu_topk_radix_f32, then " + name), std::string::npos) << d;
      const auto s_q = (*r)["shape"]["s_q"].get<int64_t>();
      EXPECT_NE(d.find(fmt::format("exact logits on {} of {} rows", s_q, s_q)), std::string::npos) << d;
    }
  }
}

TEST(CertifySparsePrefill, EveryPlantedSparsePrefillBugIsRedOnEveryDrawnCallItAppliesTo) {
  mla::register_builtin_kernels();
  const TempDir tmp("sparse-prefill-faults");
  auto o = options(tmp.path() / "faults", {});
  const auto planted = plant(o, mla::faults::sparse_prefill_names(), &mla::faults::make_sparse_prefill);
  const auto cert = certify_here(o);
  for (const auto& [fault, name] : planted) {
    SCOPED_TRACE(name);
    const auto rows = rows_of(kernel(cert, name), kSparseFile);
    EXPECT_EQ(rows.size(), 5u);
    for (const auto* r : rows) {
      const auto& shape = (*r)["shape"];
      const bool chain = (*r)["case"].get<std::string>().rfind("sparse_chain_", 0) == 0;
      // Every drawn call has -1 entries in rows that do not name position 0 and rows with keys;
      // the sink and topk_length exist only where drawn. A chain's -1 entries are a top-k's
      // padding of rows that see fewer keys than topk, so each such row selected position 0
      // already: reading -1 as position 0 cannot change it there.
      const bool applies = (fault != "sparse_sink_in_lse" || shape["sink"] == true) &&
                           (fault != "sparse_ignores_topk_length" || shape["topk_length"] == true) &&
                           (fault != "sparse_minus_one_as_zero" || !chain);
      EXPECT_EQ((*r)["verdict"], applies ? "FAIL" : "PASS") << (*r)["case"] << ": " << (*r)["reasons"].dump();
    }
  }
}

}  // namespace
