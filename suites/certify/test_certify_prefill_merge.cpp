// L0: the prefill and merge kinds of `mla certify`, run as a library in this process (the
// certifier's children, which read the goldens through, are the mla executable). Every registered
// prefill and merge kernel passes every stored and drawn case of its kind and gets no decode row,
// a decode kernel gets none of theirs; a prefill kernel that drops each sequence's last key and a
// merge that reads a side whose lse is +inf are red exactly where their bugs change the answer; a
// kernel that throws is an ERROR with its message, one whose second call differs a FAIL, a dtype
// it does not claim NOT_CLAIMED with its reason; shards merged with `mla merge` and a --resume keep
// their rows (a kernel record without `kinds`, as older certificates have, reads as a decode
// kernel's); the certificate records each kernel's kinds and declared conventions. Every planted
// prefill and merge bug of kernels/faults, selected with --fault, gets from the certifier the
// verdict it gets when called and judged directly on each stored case, and is red on a drawn case.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "mla/certify/certify.hpp"
#include "mla/core/merge.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/faults/faults.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/judge/merge.hpp"
#include "mla/ref/prefill.hpp"
#include "mla/registry/registry.hpp"
#include "support/host_call.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::certify::testing::certify_here;
using mla::certify::testing::kernel;
using mla::certify::testing::slurp;
using mla::certify::testing::TempDir;
using nlohmann::json;

const fs::path kGoldens = fs::path(MLA_SOURCE_DIR) / "fixtures" / "goldens";
// One decode kernel beside them: the cheapest, on one stored case and its drawn ones.
const std::string kDecode = "cpu_mla_fp64";

// ---- kernels carrying a bug, registered in this process only -----------------------------------

// The fp64 oracle on every sequence but its last key (the off-by-one of a loop bound).
class DropsLastKey final : public mla::PrefillImpl {
 public:
  DropsLastKey() {
    info_.name = "test_prefill_drops_last_key";
    info_.backend = "cpu";
    info_.description = "the fp64 prefill oracle without each sequence's last key";
    info_.out_dtype = mla::OutDType::f64;
  }
  const mla::PrefillKernelInfo& info() const override { return info_; }
  std::unique_ptr<mla::PreparedPrefill> prepare(const mla::PrefillInputs& in) const override {
    struct Prepared final : mla::PreparedPrefill {
      mla::PrefillBuffers in;
      mla::PrefillOutputs out;
      void run() override { out = mla::ref::prefill_attention(in.view()); }
      mla::PrefillOutputs results() override { return out; }
    };
    auto p = std::make_unique<Prepared>();
    p->in = mla::PrefillBuffers(in);
    auto& b = p->in;
    const auto h = static_cast<std::size_t>(in.shape.heads);
    std::vector<uint16_t> k, v;
    std::vector<int32_t> cu{0};
    for (const auto& seq : mla::prefill_sequences(in)) {
      const auto keep = std::max<int64_t>(0, seq.s_k - 1);
      const auto k0 = static_cast<std::size_t>(seq.k_begin) * h;
      k.insert(k.end(), in.k.begin() + k0 * mla::kMhaDqk, in.k.begin() + (k0 + keep * h) * mla::kMhaDqk);
      v.insert(v.end(), in.v.begin() + k0 * mla::kMhaDv, in.v.begin() + (k0 + keep * h) * mla::kMhaDv);
      cu.push_back(cu.back() + static_cast<int32_t>(keep));
    }
    b.k = std::move(k), b.v = std::move(v), b.cu_seqlens_k = std::move(cu);
    b.shape.total_k = b.cu_seqlens_k.back();
    return p;
  }

 private:
  mla::PrefillKernelInfo info_;
};

// The fp64 merge with a +inf lse (an empty side, as FA2 writes it) taken as 0: it reads that
// side's out, which holds anything.
class ReadsEmptySide final : public mla::MergeImpl {
 public:
  ReadsEmptySide() {
    info_.name = "test_merge_reads_empty_side";
    info_.backend = "cpu";
    info_.description = "the fp64 merge, +inf lse taken for 0";
    info_.dtypes = {mla::StateDType::bf16, mla::StateDType::f16, mla::StateDType::f32};
  }
  const mla::MergeKernelInfo& info() const override { return info_; }
  std::unique_ptr<mla::PreparedMerge> prepare(const mla::MergeInputs& in) const override {
    struct Prepared final : mla::PreparedMerge {
      mla::MergeBuffers in;
      mla::MergeOutputs out;
      void run() override {
        const auto& s = in.shape;
        const auto n = static_cast<std::size_t>(s.tokens * s.heads * s.head_dim);
        std::vector<double> a(n), b(n), la, lb;
        for (std::size_t i = 0; i < n; ++i) a[i] = state_value(s.dtype, in.out_a, i), b[i] = state_value(s.dtype, in.out_b, i);
        for (const float x : in.lse_a) la.push_back(x == INFINITY ? 0.0 : x);
        for (const float x : in.lse_b) lb.push_back(x == INFINITY ? 0.0 : x);
        const auto m = mla::ref::merge_states(s.tokens, s.heads, s.head_dim, a, la, b, lb);
        out.dtype = s.dtype;
        std::vector<uint8_t> raw;
        for (const double x : m.out) mla::append_state_value(s.dtype, x, raw);
        out.out.resize(n);
        for (std::size_t i = 0; i < n; ++i) out.out[i] = state_value(s.dtype, raw, i);
        out.lse.clear();
        for (const double x : m.lse) out.lse.push_back(static_cast<float>(x));
      }
      mla::MergeOutputs results() override { return out; }
    };
    auto p = std::make_unique<Prepared>();
    p->in = mla::MergeBuffers(in);
    return p;
  }

 private:
  mla::MergeKernelInfo info_;
};

// A prefill whose run() throws: an ERROR with the message wherever it is called.
class Throws final : public mla::PrefillImpl {
 public:
  Throws() {
    info_.name = "test_prefill_throws";
    info_.backend = "cpu";
    info_.description = "throws from run()";
  }
  const mla::PrefillKernelInfo& info() const override { return info_; }
  std::unique_ptr<mla::PreparedPrefill> prepare(const mla::PrefillInputs&) const override {
    struct Prepared final : mla::PreparedPrefill {
      void run() override { throw std::runtime_error("injected failure in run()"); }
      mla::PrefillOutputs results() override { return {}; }
    };
    return std::make_unique<Prepared>();
  }

 private:
  mla::PrefillKernelInfo info_;
};

// A merge of float32 states only (the others are NOT_CLAIMED) that keeps state between calls:
// each call adds the number of calls before it to the first value, so the second call differs.
class LeakyF32Merge final : public mla::MergeImpl {
 public:
  LeakyF32Merge() {
    info_.name = "test_merge_leaky_f32";
    info_.backend = "cpu";
    info_.description = "the fp64 merge of f32 states, plus the count of earlier calls";
    info_.dtypes = {mla::StateDType::f32};
  }
  const mla::MergeKernelInfo& info() const override { return info_; }
  std::unique_ptr<mla::PreparedMerge> prepare(const mla::MergeInputs& in) const override {
    struct Prepared final : mla::PreparedMerge {
      mla::MergeBuffers in;
      mla::MergeOutputs out;
      int calls = 0;
      void run() override {
        const auto& s = in.shape;
        const auto n = static_cast<std::size_t>(s.tokens * s.heads * s.head_dim);
        std::vector<double> a(n), b(n);
        for (std::size_t i = 0; i < n; ++i) a[i] = state_value(s.dtype, in.out_a, i), b[i] = state_value(s.dtype, in.out_b, i);
        const std::vector<double> la(in.lse_a.begin(), in.lse_a.end()), lb(in.lse_b.begin(), in.lse_b.end());
        const auto m = mla::ref::merge_states(s.tokens, s.heads, s.head_dim, a, la, b, lb);
        out.dtype = s.dtype;
        out.out = m.out;
        for (auto& x : out.out) x = static_cast<float>(x);
        if (!out.out.empty()) out.out[0] += calls++;
        out.lse.clear();
        for (const double x : m.lse) out.lse.push_back(static_cast<float>(x));
      }
      mla::MergeOutputs results() override { return out; }
    };
    auto p = std::make_unique<Prepared>();
    p->in = mla::MergeBuffers(in);
    return p;
  }

 private:
  mla::MergeKernelInfo info_;
};

void register_broken_kernels() {
  static const bool once = [] {
    mla::register_builtin_kernels();
    mla::Registry::instance().add(std::make_unique<DropsLastKey>());
    mla::Registry::instance().add(std::make_unique<ReadsEmptySide>());
    mla::Registry::instance().add(std::make_unique<Throws>());
    mla::Registry::instance().add(std::make_unique<LeakyF32Merge>());
    return true;
  }();
  (void)once;
}

// ---- running the certifier here ----------------------------------------------------------------

mla::certify::Options options(const fs::path& out, std::vector<std::string> kernels) {
  return mla::certify::testing::in_process_options(out, std::move(kernels), {"prefill", "merge", "fresh"});
}

// A kernel's rows, in the certificate's order.
std::vector<std::string> row_keys(const json& k) {
  std::vector<std::string> keys;
  for (const auto& r : k["cases"]) keys.push_back(r["family"].get<std::string>() + "/" + r["case"].get<std::string>());
  return keys;
}

std::vector<std::string> stored_cases(const std::string& family) {
  const auto catalog = mla::golden::open_catalog(kGoldens, false);
  return mla::golden::read_file_info(catalog.file(mla::golden::family(family).file())).cases;
}

std::vector<std::string> names_of(const std::vector<std::unique_ptr<mla::PrefillImpl>>& ks) {
  std::vector<std::string> n;
  for (const auto& k : ks) n.push_back(k->info().name);
  return n;
}
std::vector<std::string> names_of(const std::vector<std::unique_ptr<mla::MergeImpl>>& ks) {
  std::vector<std::string> n;
  for (const auto& k : ks) n.push_back(k->info().name);
  return n;
}

bool builtin(const std::string& name) { return name.rfind("test_", 0) != 0; }

TEST(CertifyPrefillMerge, EveryRegisteredKernelPassesItsKindAndNoKernelGetsAnotherKindsRows) {
  mla::register_builtin_kernels();
  std::vector<std::string> prefill, merge;
  for (const auto& n : names_of(mla::Registry::instance().prefill())) if (builtin(n)) prefill.push_back(n);
  for (const auto& n : names_of(mla::Registry::instance().merge())) if (builtin(n)) merge.push_back(n);
  ASSERT_FALSE(prefill.empty());
  ASSERT_FALSE(merge.empty());
  std::vector<std::string> all = prefill;
  all.insert(all.end(), merge.begin(), merge.end());
  all.push_back(kDecode);
  const TempDir tmp("prefill-merge");
  auto o = options(tmp.path() / "all", all);
  o.families.push_back("attn_core");
  o.case_regex = "^(prefill|merge|fresh)/|^attn_core/h3_sq2_short$";
  const auto cert = certify_here(o);
  const auto stored_prefill = stored_cases("prefill"), stored_merge = stored_cases("merge");
  const std::vector<std::tuple<std::vector<std::string>, std::string, std::vector<std::string>>> kinds = {
      {prefill, "prefill", stored_prefill}, {merge, "merge", stored_merge}};
  for (const auto& [names, kind, stored] : kinds) {
    for (const auto& name : names) {
      SCOPED_TRACE(name);
      const auto& k = kernel(cert, name);
      EXPECT_EQ(k["kinds"], json::array({kind}));
      EXPECT_EQ(k["origin"]["isolation"], "in_process") << "no child transport for this kind: said so";
      ASSERT_TRUE(k["declared"].contains("conventions"));
      const json declared = kind == "prefill"
                                ? to_json(mla::Registry::instance().find_prefill(name)->info().conventions)
                                : to_json(mla::Registry::instance().find_merge(name)->info().conventions);
      EXPECT_EQ(k["declared"]["conventions"], declared);
      // A device kernel without its device (cuda_merge here): every stored row SKIPPED with the
      // reason, and no drawn case (nothing is drawn for a kernel that cannot run).
      const auto why = kind == "prefill" ? mla::Registry::instance().find_prefill(name)->unavailable()
                                         : mla::Registry::instance().find_merge(name)->unavailable();
      int stored_rows = 0, fresh_rows = 0;
      for (const auto& r : k["cases"]) {
        EXPECT_EQ(r["verdict"], why ? "SKIPPED" : "PASS") << r["family"] << "/" << r["case"] << ": " << r["reasons"].dump();
        if (why) {
          EXPECT_NE(r["reasons"].dump().find(*why), std::string::npos) << r["reasons"].dump();
        }
        if (r["family"] == kind) ++stored_rows;
        else if (r["family"] == "fresh" && r["file"] == "fresh_" + kind) ++fresh_rows;
        else ADD_FAILURE() << "a row of another kind: " << r["family"] << "/" << r["case"] << " (" << r["file"] << ")";
      }
      EXPECT_EQ(stored_rows, static_cast<int>(stored.size()));
      if (!why) {
        EXPECT_GE(fresh_rows, kind == "prefill" ? 4 : 1);
      }
    }
  }
  const auto& d = kernel(cert, kDecode);
  EXPECT_EQ(d["kinds"], json::array({"decode"}));
  int decode_rows = 0;
  for (const auto& r : d["cases"]) {
    const auto file = r["file"].get<std::string>();
    EXPECT_TRUE(r["family"] != "prefill" && r["family"] != "merge" && file != "fresh_prefill" && file != "fresh_merge")
        << r["family"] << "/" << r["case"];
    decode_rows += r["family"] == "attn_core";
  }
  EXPECT_EQ(decode_rows, 1);
  // The Markdown shows each kind's dimensions, not the decode ones, for these kernels.
  const auto md = slurp(tmp.path() / "all" / "certificate.md");
  EXPECT_NE(md.find("| calls | "), std::string::npos);
  EXPECT_NE(md.find("| state dtypes | "), std::string::npos);
}

TEST(CertifyPrefillMerge, ABrokenPrefillAndABrokenMergeAreRedWhereTheirBugChangesTheAnswer) {
  register_broken_kernels();
  const TempDir tmp("prefill-merge-broken");
  const auto cert = certify_here(options(tmp.path() / "broken", {"test_prefill_drops_last_key", "test_merge_reads_empty_side"}));
  // Dropping a key changes every row that attends one: every case here has keys.
  int prefill_fail = 0;
  for (const auto& r : kernel(cert, "test_prefill_drops_last_key")["cases"]) {
    EXPECT_EQ(r["verdict"], "FAIL") << r["case"];
    prefill_fail += r["verdict"] == "FAIL";
  }
  EXPECT_GE(prefill_fail, static_cast<int>(stored_cases("prefill").size()) + 4);
  // Reading a +inf side matters exactly where a side is +inf: found from the goldens themselves.
  const auto catalog = mla::golden::open_catalog(kGoldens, false);
  const auto file = catalog.file(mla::golden::family("merge").file());
  std::set<std::string> affected;
  for (const auto& name : stored_cases("merge")) {
    const auto c = mla::golden::load_merge_case(file, name);
    for (const auto* lse : {&c.lse_a, &c.lse_b}) {
      if (std::any_of(lse->begin(), lse->end(), [](double x) { return x == INFINITY; })) affected.insert(name);
    }
  }
  ASSERT_FALSE(affected.empty());
  ASSERT_LT(affected.size(), stored_cases("merge").size());
  int fresh = 0;
  for (const auto& r : kernel(cert, "test_merge_reads_empty_side")["cases"]) {
    const auto name = r["case"].get<std::string>();
    if (r["family"] == "fresh") {
      ++fresh;
      EXPECT_EQ(r["verdict"], "FAIL") << name << ": every drawn merge has a +inf side";
    } else {
      EXPECT_EQ(r["verdict"], affected.count(name) ? "FAIL" : "PASS") << name << ": " << r["reasons"].dump();
    }
  }
  EXPECT_EQ(fresh, 3);
}

TEST(CertifyPrefillMerge, AThrowingKernelIsAnErrorAStatefulOneFailsAndAnUnclaimedDtypeIsNotClaimed) {
  register_broken_kernels();
  const TempDir tmp("prefill-merge-paths");
  const auto cert = certify_here(options(tmp.path() / "paths", {"test_prefill_throws", "test_merge_leaky_f32"}));
  const auto& throws = kernel(cert, "test_prefill_throws")["cases"];
  ASSERT_FALSE(throws.empty());
  for (const auto& r : throws) {
    EXPECT_EQ(r["verdict"], "ERROR") << r["case"];
    EXPECT_NE(r["reasons"].dump().find("injected failure in run()"), std::string::npos) << r["reasons"].dump();
  }
  int f32 = 0, unclaimed = 0;
  for (const auto& r : kernel(cert, "test_merge_leaky_f32")["cases"]) {
    SCOPED_TRACE(r["case"].get<std::string>());
    if (r["shape"]["dtype"] == "f32") {
      ++f32;
      EXPECT_EQ(r["verdict"], "FAIL");
      EXPECT_NE(r["reasons"].dump().find("differs between repeated runs"), std::string::npos) << r["reasons"].dump();
    } else {
      ++unclaimed;
      EXPECT_EQ(r["family"], "merge") << "a dtype it does not claim is never drawn for it";
      EXPECT_EQ(r["verdict"], "NOT_CLAIMED");
      EXPECT_NE(r["reasons"].dump().find("is not one it merges"), std::string::npos) << r["reasons"].dump();
    }
  }
  EXPECT_GT(f32, 1) << "stored f32 cases and the drawn one";
  EXPECT_GT(unclaimed, 0);
}

TEST(CertifyPrefillMerge, ShardsMergedAndAResumeKeepPrefillAndMergeRows) {
  mla::register_builtin_kernels();
  const TempDir tmp("prefill-merge-shards");
  std::vector<std::string> kernels = {"cpu_prefill_naive_fp32", "cpu_merge_f32", kDecode};
  auto o = options(tmp.path() / "whole", kernels);
  o.families.push_back("attn_core");
  o.case_regex = "^(prefill|merge|fresh)/|^attn_core/h3_sq2_short$";
  const auto whole = certify_here(o);
  std::vector<fs::path> parts;
  for (int i = 1; i <= 2; ++i) {
    auto p = o;
    p.out = tmp.path() / ("shard" + std::to_string(i));
    p.shard_index = i, p.shard_count = 2;
    (void)certify_here(p);
    parts.push_back(p.out);
  }
  std::ostringstream said;
  // Refused, were the prefill and merge kernels compared with the decode kernel's stored rows.
  ASSERT_NO_THROW((void)mla::certify::merge(parts, tmp.path() / "merged", said)) << said.str();
  const auto merged = json::parse(slurp(tmp.path() / "merged" / "certificate.json"));
  for (const auto& name : kernels) {
    SCOPED_TRACE(name);
    EXPECT_EQ(row_keys(kernel(merged, name)), row_keys(kernel(whole, name))) << "the rows, in one run's order";
    EXPECT_EQ(kernel(merged, name)["kinds"], kernel(whole, name)["kinds"]);
  }
  // A decode kernel's record written before the kinds were: read as a kernel with the decode
  // entry, so the shards still merge.
  std::vector<fs::path> older;
  for (const auto& part : parts) {
    const auto dir = tmp.path() / ("older-" + part.filename().string());
    fs::create_directories(dir);
    auto j = json::parse(slurp(part / "certificate.json"));
    for (auto& k : j["kernels"]) {
      if (k["name"] == kDecode) k.erase("kinds");
    }
    std::ofstream(dir / "certificate.json") << j.dump(1);
    older.push_back(dir);
  }
  ASSERT_NO_THROW((void)mla::certify::merge(older, tmp.path() / "merged-older", said)) << said.str();
  EXPECT_EQ(row_keys(kernel(json::parse(slurp(tmp.path() / "merged-older" / "certificate.json")), kDecode)),
            row_keys(kernel(whole, kDecode)));
  // ... and compared with another such kernel: one without the stored decode row is refused.
  for (const auto& dir : older) {
    auto j = json::parse(slurp(dir / "certificate.json"));
    auto copy = kernel(j, kDecode);
    copy["name"] = "older_decode_copy";
    json kept = json::array();
    for (const auto& row : copy["cases"]) {
      if (row["family"] != "attn_core") kept.push_back(row);
    }
    copy["cases"] = kept;
    j["kernels"].push_back(copy);
    std::ofstream(dir / "certificate.json") << j.dump(1);
  }
  try {
    (void)mla::certify::merge(older, tmp.path() / "merged-older-2", said);
    ADD_FAILURE() << "merged kernels of the decode kind that cover different stored cases";
  } catch (const mla::certify::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("older_decode_copy has no row for case attn_core/h3_sq2_short"),
              std::string::npos)
        << e.what();
  }
  auto r = o;
  r.resume = true;
  std::string progress;
  const auto resumed = certify_here(r, &progress);
  std::size_t rows = 0;
  for (const auto& name : kernels) {
    EXPECT_EQ(row_keys(kernel(resumed, name)), row_keys(kernel(whole, name))) << name;
    rows += kernel(whole, name)["cases"].size();
  }
  EXPECT_NE(progress.find("resume: kept " + std::to_string(rows) + " of " + std::to_string(rows)), std::string::npos)
      << progress;
}

}  // namespace

namespace {

// What the planted bug gets when the tests call it directly (suites/support/host_call.hpp) on a
// stored case: the certifier's verdict on that case must be the same.
std::string direct_verdict(const std::string& fault, const fs::path& file, const std::string& kind,
                           const std::string& name) {
  if (kind == "prefill") {
    const auto k = mla::faults::make_prefill(fault);
    const auto c = mla::golden::load_prefill_case(file, name);
    return mla::testing::judge_prefill_case(k->info(), c, mla::testing::call_prefill(*k, c.inputs())).pass() ? "PASS" : "FAIL";
  }
  const auto k = mla::faults::make_merge(fault);
  const auto c = mla::golden::load_merge_case(file, name);
  const auto in = c.inputs();
  return mla::judge_merge(in.shape, mla::testing::call_merge(*k, in.view()), {c.truth_out, c.truth_lse}).pass() ? "PASS" : "FAIL";
}

TEST(CertifyPrefillMerge, EveryPlantedPrefillAndMergeBugGetsTheVerdictItGetsWhenCalledDirectly) {
  mla::register_builtin_kernels();
  const TempDir tmp("prefill-merge-faults");
  std::vector<std::tuple<std::string, std::string, std::string>> planted;  // fault, kernel, kind
  for (const auto& f : mla::faults::prefill_names()) planted.emplace_back(f, mla::faults::make_prefill(f)->info().name, "prefill");
  for (const auto& f : mla::faults::merge_names()) planted.emplace_back(f, mla::faults::make_merge(f)->info().name, "merge");
  auto o = options(tmp.path() / "faults", {});
  for (const auto& [fault, name, kind] : planted) o.faults.push_back(fault), o.kernels.push_back(name);
  const auto cert = certify_here(o);
  const auto catalog = mla::golden::open_catalog(kGoldens, false);
  for (const auto& [fault, name, kind] : planted) {
    SCOPED_TRACE(name);
    const auto& k = kernel(cert, name);
    EXPECT_EQ(k["origin"]["kind"], "self-test");
    EXPECT_EQ(k["kinds"], json::array({kind}));
    const auto file = catalog.file(mla::golden::family(kind).file());
    int stored = 0, red_drawn = 0;
    for (const auto& r : k["cases"]) {
      red_drawn += r["family"] == "fresh" && r["verdict"] == "FAIL";
      if (r["family"] != kind) continue;
      ++stored;
      const auto c = r["case"].get<std::string>();
      EXPECT_EQ(r["verdict"].get<std::string>(), direct_verdict(fault, file, kind, c)) << c << ": " << r["reasons"].dump();
    }
    EXPECT_EQ(stored, static_cast<int>(stored_cases(kind).size()));
    // The stored verdicts are the direct ones (the mutation score of test_prefill_merge_faults
    // holds each bug red somewhere there); the drawn cases, which nothing can be tuned to, must
    // catch every bug on their own too.
    EXPECT_GT(red_drawn, 0) << "a planted bug no drawn case catches";
  }
}

TEST(CertifyPrefillMerge, AnUnknownFaultNamesTheFaultsOfEveryKind) {
  const TempDir tmp("prefill-merge-unknown-fault");
  auto o = options(tmp.path() / "unknown", {});
  o.faults = {"no_such_fault"};
  try {
    (void)certify_here(o);
    ADD_FAILURE() << "an unknown fault was accepted";
  } catch (const mla::certify::UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no_such_fault"), std::string::npos) << what;
    for (const auto* names : {&mla::faults::names(), &mla::faults::prefill_names(), &mla::faults::merge_names(),
                              &mla::faults::topk_names(), &mla::faults::indexer_append_names(),
                              &mla::faults::indexer_logits_names()}) {
      for (const auto& n : *names) EXPECT_NE(what.find(n), std::string::npos) << n << " missing from: " << what;
    }
  }
}

}  // namespace
