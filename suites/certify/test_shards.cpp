// L0: shards for fleets of machines. `mla certify --shard I/N` certifies one part of the
// selection, cut by case identity; its certificate never reads as the catalog's pass; `mla
// merge` combines the parts into the certificate of the whole selection and refuses parts that
// did not certify the same thing. On the tiny committed catalog (fixtures/bad/good, 3 cases)
// with the good example plug-in, so each run takes about a second.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "mla/certify/certify.hpp"
#include "mla/golden/golden.hpp"
#include "mla/reports/certificate.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::certify::testing::kFresh;
using mla::certify::testing::plugin_path;
using mla::certify::testing::Proc;
using mla::certify::testing::quote;
using mla::certify::testing::run_command;
using mla::certify::testing::slurp;
using mla::certify::testing::TempDir;
using nlohmann::json;

const std::string kMla = MLA_CLI_EXE;
const fs::path kTiny = fs::path(MLA_SOURCE_DIR) / "fixtures" / "bad" / "good";

Proc certify(const fs::path& out, const std::string& extra) {
  return run_command(kMla + " certify --goldens " + quote(kTiny) + " --out " + quote(out) + " --plugin " +
                     plugin_path("good_plugin") + " --seed 7 " + extra + " 2>&1");
}

Proc merge(const std::vector<fs::path>& dirs, const fs::path& out) {
  std::string args;
  for (const auto& d : dirs) args += " " + quote(d);
  return run_command(kMla + " merge" + args + " --out " + quote(out) + " 2>&1");
}

json read_json(const fs::path& dir) { return json::parse(slurp(dir / "certificate.json")); }

void write_json(const fs::path& dir, const json& j) {
  std::ofstream(dir / "certificate.json") << j.dump(1);
}

std::set<std::string> case_names(const json& cert) {
  std::set<std::string> names;
  for (const auto& r : cert["kernels"][0]["cases"]) names.insert(r["family"].get<std::string>() + "/" + r["case"].get<std::string>());
  return names;
}

TEST(Shards, EveryCaseIsInExactlyOneShardDecidedByItsIdentityAlone) {
  std::vector<std::pair<std::string, std::string>> cases;
  for (int i = 0; i < 200; ++i) cases.push_back({i % 2 ? "attn_core" : "attn_fp8", "case_" + std::to_string(i)});
  for (int n = 1; n <= 7; ++n) {
    std::vector<int> per(n + 1, 0);
    for (const auto& [f, c] : cases) {
      const int s = mla::certify::shard_of(f, c, n);
      ASSERT_GE(s, 1);
      ASSERT_LE(s, n);
      EXPECT_EQ(s, mla::certify::shard_of(f, c, n)) << "the same case, the same shard";
      ++per[s];
    }
    // Cut by a hash: roughly even (200 cases in at most 7 shards: every shard gets some).
    for (int s = 1; s <= n; ++s) EXPECT_GT(per[s], 200 / n / 3) << "shard " << s << " of " << n;
  }
  // The family is part of the identity: the same case name in two families is two cases.
  int differ = 0;
  for (int i = 0; i < 50; ++i) {
    const auto c = "c" + std::to_string(i);
    differ += mla::certify::shard_of("attn_core", c, 4) != mla::certify::shard_of("attn_sparse", c, 4);
  }
  EXPECT_GT(differ, 0);
  EXPECT_EQ(mla::certify::parse_shard("2/4"), std::make_pair(2, 4));
  for (const char* bad : {"0/3", "4/3", "a/b", "3", "1/0", "/3", "1/", "-1/3", "1/99999999"}) {
    EXPECT_THROW(mla::certify::parse_shard(bad), mla::certify::UsageError) << bad;
  }
}

TEST(Shards, TheShardIsPartOfTheRecordAndADamagedOneIsNamed) {
  mla::reports::Certificate c;
  c.complete = true;
  c.shard = mla::reports::ShardInfo{3, 4, {}, {}};
  auto back = mla::reports::certificate_from_json(mla::reports::to_json(c));
  ASSERT_TRUE(back.shard);
  EXPECT_EQ(back.shard->index, 3);
  EXPECT_EQ(back.shard->count, 4);
  EXPECT_EQ(mla::reports::verdict_text(back), "PASS (shard 3 of 4)");
  EXPECT_EQ(mla::reports::exit_status(back), mla::reports::kExitPass) << "a shard exits by its own part";

  c.shard = mla::reports::ShardInfo{0, 4, {2, 4}, json::array()};
  back = mla::reports::certificate_from_json(mla::reports::to_json(c));
  EXPECT_EQ(back.shard->missing, (std::vector<int>{2, 4}));
  EXPECT_EQ(mla::reports::verdict_text(back), "INCOMPLETE");
  EXPECT_EQ(mla::reports::exit_status(back), mla::reports::kExitIncomplete);
  EXPECT_NE(mla::reports::to_markdown(back).find("shards 2, 4 of 4 missing"), std::string::npos);

  EXPECT_FALSE(mla::reports::certificate_from_json(mla::reports::to_json(mla::reports::Certificate{})).shard)
      << "a run without --shard has no shard";
  auto j = mla::reports::to_json(c);
  j["shard"] = {{"index", 5}, {"count", 4}};
  try {
    (void)mla::reports::certificate_from_json(j);
    ADD_FAILURE() << "shard 5 of 4 was read";
  } catch (const mla::Error& e) {
    EXPECT_NE(std::string(e.what()).find("shard"), std::string::npos) << e.what();
  }
}

TEST(Shards, ShardsMergeIntoTheWholeSelectionAndAShardNeverReadsAsTheCatalogsPass) {
  TempDir tmp;
  const auto whole = tmp.path() / "whole";
  {
    const auto run = certify(whole, "");
    ASSERT_EQ(run.status, 0) << run.out;
  }
  const auto all = case_names(read_json(whole));
  // The tiny catalog's 3 cases, their twins (the kernel is a plug-in) and the fresh cases drawn
  // from the seed: all are split.
  const auto fresh = std::count_if(all.begin(), all.end(), [](const std::string& n) { return n.starts_with(kFresh + "/"); });
  const auto twins = std::count_if(all.begin(), all.end(), [](const std::string& n) { return mla::certify::testing::is_twin(n); });
  ASSERT_EQ(twins, 3);
  ASSERT_EQ(all.size() - fresh - twins, 3u);
  ASSERT_GT(fresh, 0);

  constexpr int kN = 2;
  std::vector<fs::path> dirs;
  std::set<std::string> seen;
  std::size_t rows = 0;
  for (int i = 1; i <= kN; ++i) {
    const auto dir = tmp.path() / ("shard" + std::to_string(i));
    const auto p = certify(dir, "--shard " + std::to_string(i) + "/" + std::to_string(kN));
    ASSERT_EQ(p.status, 0) << p.out;
    const auto j = read_json(dir);
    EXPECT_EQ(j["shard"]["index"], i);
    EXPECT_EQ(j["shard"]["count"], kN);
    const auto word = fmt::format("PASS (shard {} of {})", i, kN);
    EXPECT_EQ(j["verdict"], word) << "a shard's verdict says it is a shard";
    EXPECT_NE(j["kernels"][0]["headline"].get<std::string>().find(fmt::format("shard {} of {}", i, kN)), std::string::npos);
    EXPECT_NE(slurp(dir / "certificate.md").find("# MLA attention certificate: " + word), std::string::npos);
    EXPECT_NE(slurp(dir / "certificate.junit.xml").find(fmt::format("name=\"mla-certify shard {} of {}\"", i, kN)),
              std::string::npos);
    EXPECT_NE(p.out.find("mla-certify: " + word), std::string::npos) << p.out;
    for (const auto& n : case_names(j)) {
      EXPECT_TRUE(seen.insert(n).second) << n << " is in two shards";
      const auto slash = n.find('/');
      EXPECT_EQ(mla::certify::shard_of(n.substr(0, slash), n.substr(slash + 1), kN), i);
    }
    rows += j["kernels"][0]["cases"].size();
    dirs.push_back(dir);
  }
  EXPECT_EQ(seen, all) << "the shards together are the selection";
  EXPECT_EQ(rows, all.size());

  const auto merged = tmp.path() / "merged";
  const auto m = merge(dirs, merged);
  ASSERT_EQ(m.status, 0) << m.out;
  const auto mj = read_json(merged);
  EXPECT_EQ(mj["verdict"], "PASS");
  EXPECT_EQ(case_names(mj), all);
  EXPECT_EQ(mj["kernels"][0]["counts"]["PASS"], all.size());
  EXPECT_EQ(mj["shard"]["count"], kN);
  EXPECT_TRUE(mj["shard"]["missing"].empty());
  EXPECT_EQ(mj["shard"]["merged"].size(), static_cast<std::size_t>(kN));
  // Rows in the order one run of the whole selection writes them.
  std::vector<std::string> order_whole, order_merged;
  const auto wj = read_json(whole);
  for (const auto& r : wj["kernels"][0]["cases"]) order_whole.push_back(r["case"]);
  for (const auto& r : mj["kernels"][0]["cases"]) order_merged.push_back(r["case"]);
  EXPECT_EQ(order_merged, order_whole);
  EXPECT_NE(slurp(merged / "certificate.md").find("# MLA attention certificate: PASS"), std::string::npos);
  int testcases = 0;
  const auto junit = slurp(merged / "certificate.junit.xml");
  for (auto at = junit.find("<testcase"); at != std::string::npos; at = junit.find("<testcase", at + 1)) ++testcases;
  EXPECT_EQ(testcases, static_cast<int>(all.size()));

  // A missing shard: the merge is INCOMPLETE (exit 3) and names the shard.
  const auto partial = tmp.path() / "partial";
  const auto p = merge({dirs[0]}, partial);
  EXPECT_EQ(p.status, 3) << p.out;
  const auto pj = read_json(partial);
  EXPECT_EQ(pj["verdict"], "INCOMPLETE");
  EXPECT_EQ(pj["shard"]["missing"], json::array({2}));
  EXPECT_EQ(pj["kernels"][0]["verdict"], "INCOMPLETE") << "no implementation passes a selection half certified";
  EXPECT_NE(pj["kernels"][0]["headline"].get<std::string>().find("shard 2 of 2 missing"), std::string::npos);
  EXPECT_NE(p.out.find("shard 2 of 2 missing"), std::string::npos) << p.out;
  EXPECT_NE(slurp(partial / "certificate.junit.xml").find("merged without shard 2 of 2"), std::string::npos);
}

TEST(Shards, MergeRefusesShardsThatDidNotCertifyTheSameThingNamingTheFieldAndBothValues) {
  TempDir tmp;
  const auto s1 = tmp.path() / "s1", s2 = tmp.path() / "s2";
  {
    const auto run = certify(s1, "--shard 1/2");
    ASSERT_EQ(run.status, 0) << run.out;
  }
  {
    const auto run = certify(s2, "--shard 2/2");
    ASSERT_EQ(run.status, 0) << run.out;
  }
  const auto out = tmp.path() / "out";
  auto refused = [&](const std::vector<fs::path>& dirs, const std::vector<std::string>& words) {
    const auto p = merge(dirs, out);
    EXPECT_EQ(p.status, 2) << p.out;
    for (const auto& w : words) EXPECT_NE(p.out.find(w), std::string::npos) << "'" << w << "' not in: " << p.out;
    EXPECT_FALSE(fs::exists(out / "certificate.json")) << "a refused merge writes nothing";
  };
  refused({s1, s1}, {"shard 1 of 2 is given twice"});
  const auto into_shard = merge({s1, s2}, s2);
  EXPECT_EQ(into_shard.status, 2) << into_shard.out;
  EXPECT_NE(into_shard.out.find("it is the report folder of a shard"), std::string::npos) << into_shard.out;

  const auto whole = tmp.path() / "whole";
  {
    const auto run = certify(whole, "");
    ASSERT_EQ(run.status, 0) << run.out;
  }
  refused({s1, whole}, {"is not a shard's certificate"});

  const auto other_n = tmp.path() / "other_n";
  {
    const auto run = certify(other_n, "--shard 2/3");
    ASSERT_EQ(run.status, 0) << run.out;
  }
  refused({s1, other_n}, {"shard count", "has 2", "has 3"});

  const auto other_opts = tmp.path() / "other_opts";
  {
    const auto run = certify(other_opts, "--shard 2/2 --repeat 3");
    ASSERT_EQ(run.status, 0) << run.out;
  }
  refused({s1, other_opts}, {"options.repeats", "has 2", "has 3"});

  // What a hand-made or another build's certificate would carry, field by field.
  const auto edited = tmp.path() / "edited";
  struct Lie {
    std::string pointer, value, field;
  };
  for (const Lie& lie : {Lie{"/catalog/manifest_sha256", "0000feed", "catalog.manifest_sha256"},
                         Lie{"/build/tolerance_table_sha256", "0000cafe", "build.tolerance_table_sha256"},
                         Lie{"/kernels/0/origin/sha256", "0000beef", "kernels[0] (good_plugin).origin.sha256"},
                         Lie{"/kernels/0/version", "9.9.9", "kernels[0] (good_plugin).version"},
                         Lie{"/tool_version", "0.0.1", "tool_version"}}) {
    fs::remove_all(edited);
    fs::create_directories(edited);
    auto j = read_json(s2);
    const auto before = j.at(json::json_pointer(lie.pointer)).get<std::string>();
    j[json::json_pointer(lie.pointer)] = lie.value;
    write_json(edited, j);
    refused({s1, edited}, {lie.field, before, lie.value});
  }

  // The same case in two shards: the shards were not cut from one selection. The copy that
  // claims the other shard's index holds cases of another shard, which is refused naming it.
  auto j1 = read_json(s1), j2 = read_json(s2);
  const bool one_has_rows = !j1["kernels"][0]["cases"].empty();
  const fs::path& donor = one_has_rows ? s1 : s2;
  auto dup = read_json(donor);
  dup["shard"]["index"] = one_has_rows ? 2 : 1;
  fs::remove_all(edited);
  fs::create_directories(edited);
  write_json(edited, dup);
  refused({donor, edited}, {fmt::format("belongs to shard {} of 2, not to this certificate's shard {}", one_has_rows ? 1 : 2,
                                        one_has_rows ? 2 : 1)});

  // --resume does not mix shards: another shard's results are not kept.
  const auto p = certify(s1, "--shard 2/2 --resume");
  EXPECT_EQ(p.status, 0) << p.out;
  EXPECT_NE(p.out.find("shard 1/2 vs 2/2"), std::string::npos) << p.out;
  EXPECT_EQ(case_names(read_json(s1)), case_names(j2));
}

}  // namespace
