// L1: the mutation score. Every bug plug-in (kernels/faults: one real-world bug or one attack
// each) is certified over the catalog (long generated cases left to L2), and must be red on every
// stored case where its bug changes the result beyond the tolerance; where that is is computed
// here from the case's own data (test_predict.hpp), never read from a past run. The rows drawn
// at run time (the stored cases' fresh twins, the fresh family) are scored too: a twin where the
// bug shows on its stored case, and every fresh row, counted and printed, and each bug must be
// red on at least one of them (a bug the drawn rows never see could hide behind stored answers).
// The test prints, per plug-in, the cases where its bug shows and how many were caught, and
// fails on any miss of a stored case. Each run certifies only the rows it scores: the stored
// cases where its bug shows, their twins and every fresh row (`--case`); a stored case where the
// bug cannot show is not scored, so certifying it only cost time (half the CPU of a bug that
// shows on few cases, such as the one that hangs on s_q = 4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/tolerance.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/reports/certificate.hpp"
#include "test_predict.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace t = mla::certify::testing;
using mla::tol::Verdict;

const fs::path kGoldens = mla::golden::default_goldens_dir();

bool lse_base2_shows(const mla::golden::AttnCase& c) {
  const auto& tl = mla::tol::tolerance_for(mla::OutDType::f32, c.shape.cache_format, "lse");
  for (double l : c.truth_lse) {
    if (std::isfinite(l) && std::fabs(l) * (1 / std::log(2.0) - 1) > 2 * std::max(tl.atol, tl.rtol * std::fabs(l))) return true;
  }
  return false;
}

// Where each bug changes the result: the predicate of its plug-in.
const std::vector<std::pair<std::string, std::function<bool(const mla::golden::AttnCase&)>>>& bugs() {
  static const std::vector<std::pair<std::string, std::function<bool(const mla::golden::AttnCase&)>>> b = {
      {"drops_last_token", [](const auto& c) { return t::predict_dropped_last(c, mla::OutDType::f32).must_fail; }},
      {"lse_log2", lse_base2_shows},
      {"reads_unused_slot", [](const auto& c) { return t::has_poisoned_slot_in_owned_page(c); }},
      {"crashes", [](const auto& c) { return t::has_empty_sequence(c); }},
      {"hangs", [](const auto& c) { return c.shape.s_q == 4; }},
      {"writes_out_of_bounds", [](const auto& c) { return c.shape.s_q == 2; }},
      {"mutates_input", [](const auto&) { return true; }},
      {"returns_nan", [](const auto&) { return true; }},
      {"reads_past_end", [](const auto& c) { return t::predict_reads_past_end(c) != t::Effect::none; }},
      {"ignores_block_table", [](const auto& c) { return t::predict_ignores_block_table(c) != t::Effect::none; }},
      {"changes_on_later_call", [](const auto&) { return true; }},
      {"state_across_processes", [](const auto&) { return true; }},
      {"rewrites_audit", [](const auto&) { return true; }},
      {"wraps_negative_index", [](const auto& c) { return t::predict_wrapped_negative(c, mla::OutDType::f32).must_fail; }},
  };
  return b;
}

// Bugs that only one family can show, certified on that family alone (CI time): a bug in the
// handling of sparse indices changes no dense case (predict_wrapped_negative says so too).
std::vector<std::string> families_for(const std::string& bug) {
  if (bug == "wraps_negative_index") return {"attn_sparse"};
  return mla::golden::family_names_certified_by("decode");
}

constexpr int64_t kMaxTokens = 16384;  // the long generated cases are L2's

// '<family>/<case>' of every stored case (within kMaxTokens) of `families` where `shows` says the
// bug changes the result: computed from each case's own data, before the run.
std::set<std::string> stored_where(const std::vector<std::string>& families,
                                   const std::function<bool(const mla::golden::AttnCase&)>& shows) {
  static const auto catalog = mla::golden::open_catalog(kGoldens, /*verify_files=*/false);
  std::set<std::string> where;
  for (const auto& family : families) {
    const auto file = catalog.file(family + ".h5");
    for (const auto& name : mla::golden::read_file_info(file).cases) {
      if (mla::golden::read_attn_header(file, name).cache_tokens() > kMaxTokens) continue;
      if (shows(mla::golden::load_attn_case(file, name))) where.insert(family + "/" + name);
    }
  }
  return where;
}

// The certifier's --case regex for those cases and the fresh family (a stored case selected
// brings its twin: the regex is matched against stored cases only).
std::string case_regex(const std::set<std::string>& where) {
  std::string alt = t::kFresh + "/.*";
  for (const auto& c : where) {
    alt += '|';
    for (char ch : c) {
      if (std::string_view("\\^$.|?*+()[]{}").find(ch) != std::string_view::npos) alt += '\\';
      alt += ch;
    }
  }
  return "^(" + alt + ")$";
}

// One test per bug plug-in, so ctest runs them side by side; each prints its line of the score.
class MutationScore : public ::testing::TestWithParam<std::string> {};

TEST_P(MutationScore, CaughtWhereverItsBugChangesTheResult) {
  if (!fs::exists(kGoldens / "MANIFEST.sha256")) GTEST_SKIP() << "no golden catalog at " << kGoldens;
  const std::string name = GetParam();
  const auto bug = std::find_if(bugs().begin(), bugs().end(), [&](const auto& b) { return b.first == name; });
  ASSERT_NE(bug, bugs().end());
  const auto families = families_for(name);
  const auto shows = stored_where(families, bug->second);
  t::TempDir tmp;
  const auto out = tmp.path() / "out";
  std::string family_args;
  for (const auto& f : families) family_args += " --family " + f;
  const auto p = t::run_command("TMPDIR=" + t::quote(tmp.path()) + " " + std::string(MLA_CLI_EXE) + " certify --goldens " +
                                t::quote(kGoldens) + " --out " + t::quote(out) + " --max-tokens " +
                                std::to_string(kMaxTokens) + " --timeout 3 --no-probe-unclaimed" + family_args + " --family " +
                                t::kFresh + " --case " + t::quote(case_regex(shows)) + " --plugin " + t::plugin_path(name) +
                                " 2>&1");
  EXPECT_EQ(p.status, 1) << p.out;
  ASSERT_TRUE(fs::exists(out / "certificate.json")) << p.out;
  const auto cert = mla::reports::certificate_from_json(nlohmann::json::parse(t::slurp(out / "certificate.json")));
  ASSERT_EQ(cert.kernels.size(), 1u);
  std::vector<std::string> where, missed;
  std::set<std::string> certified;
  int drawn = 0, drawn_red = 0;
  for (const auto& r : cert.kernels.front().cases) {
    const bool is_twin = t::is_twin(r.name);
    if (r.family != t::kFresh && !is_twin) certified.insert(r.family + "/" + r.name);
    if (r.verdict == Verdict::skipped || r.verdict == Verdict::unsupported) continue;
    if (r.family == t::kFresh || is_twin) {
      // Drawn per run: where a bug shows depends on drawn values, so these are scored, not predicted.
      const auto stored = is_twin ? r.name.substr(0, r.name.size() - std::string_view(mla::certify::kTwinSuffix).size()) : std::string();
      EXPECT_TRUE(!is_twin || shows.contains(r.family + "/" + stored)) << r.family << "/" << r.name << " was not selected";
      ++drawn;
      drawn_red += r.verdict == Verdict::fail || r.verdict == Verdict::error;
      continue;
    }
    EXPECT_TRUE(shows.contains(r.family + "/" + r.name)) << r.family << "/" << r.name << " was not selected";
    where.push_back(r.family + "/" + r.name);
    const bool red = r.verdict == Verdict::fail || r.verdict == Verdict::error;
    if (!red) missed.push_back(where.back());
    EXPECT_TRUE(red) << name << " missed on " << where.back();
  }
  EXPECT_EQ(certified, shows) << name << ": every selected stored case gets a row";
  EXPECT_FALSE(where.empty()) << name << " changes no case of the catalog: the catalog cannot see it";
  EXPECT_GT(drawn_red, 0) << name << " is red on none of the " << drawn << " rows drawn at run time";
  std::cout << fmt::format("mutation score: {} caught on {} of {} stored cases where its bug changes the result ({}); "
                           "red on {} of {} drawn rows (twins where the bug shows on the stored case, fresh cases)\n",
                           name, where.size() - missed.size(), where.size(), fmt::join(where, ", "), drawn_red, drawn);
}

std::vector<std::string> bug_names() {
  std::vector<std::string> v;
  for (const auto& b : bugs()) v.push_back(b.first);
  return v;
}

INSTANTIATE_TEST_SUITE_P(BugPlugins, MutationScore, ::testing::ValuesIn(bug_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
