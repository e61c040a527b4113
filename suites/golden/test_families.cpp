// The catalog description (fixtures/catalog.json, mla/golden/families.hpp): what the embedded
// file says, that the parser refuses a malformed description naming what is wrong, and that the
// committed catalog and its description agree (every listed family's file carries that family).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "loader_test_util.hpp"
#include "mla/golden/families.hpp"

namespace mla::golden {
namespace {

TEST(Families, TheDescriptionDeclaresEveryFamilyOnceWithHowItIsJudged) {
  const auto& all = families();
  ASSERT_FALSE(all.empty());
  std::set<std::string> names;
  for (const auto& f : all) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    EXPECT_EQ(f.file(), f.name + ".h5");
    EXPECT_FALSE(f.about.empty()) << f.name;
    EXPECT_EQ(&family(f.name), &f);
    if (f.kind == FamilyKind::attention) {
      EXPECT_EQ(f.case_kind, "attn_core") << f.name;
    }
  }
  EXPECT_EQ(find_family("no_such_family"), nullptr);
  EXPECT_THROW((void)family("no_such_family"), Error);
  // The lists the tests and the certifier iterate are views of the same description.
  EXPECT_EQ(family_names().size(), all.size());
  std::size_t of_a_kind = 0;
  for (auto k : {FamilyKind::attention, FamilyKind::layer, FamilyKind::prefill, FamilyKind::merge, FamilyKind::indexer}) {
    of_a_kind += family_names(k).size();
  }
  EXPECT_EQ(of_a_kind, all.size());
  // Which case kind certifies which family kind is the certifier's registry's to check
  // (suites/certify/test_case_kinds.cpp); here: every family is certified by someone or "none".
  std::size_t by_kind = 0;
  for (const auto& f : all) by_kind += f.certified() ? family_names_certified_by(f.certify).size() > 0 : 1;
  EXPECT_EQ(by_kind, all.size());
}

TEST(Families, AMalformedDescriptionIsRefusedNamingWhatIsWrong) {
  auto refused = [](const std::string& text, const std::string& needle) {
    try {
      (void)parse_families(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const std::string head = R"({"format": "mla-golden-catalog", "version": 1, "families": [)";
  const std::string good = R"({"name": "a", "seed": 1, "kind": "attention", "case_kind": "attn_core", "certify": "decode", "about": "x"})";
  EXPECT_EQ(parse_families(head + good + "]}").size(), 1u);
  refused("not json", "malformed");
  refused(R"({"format": "other", "version": 1, "families": []})", "not format mla-golden-catalog");
  refused(head + "]}", "lists no family");
  refused(head + good + "," + good + "]}", "family 'a' is described twice");
  refused(head + R"({"name": "B!", "seed": 1, "kind": "attention", "case_kind": "k", "certify": "none", "about": "x"})" + "]}",
          "not [a-z0-9_]+");
  refused(head + R"({"name": "a", "seed": 1, "kind": "tensor", "case_kind": "k", "certify": "none", "about": "x"})" + "]}",
          "kind 'tensor'");
  refused(head + R"({"name": "a", "seed": 1, "kind": "layer", "case_kind": "k", "certify": "De code", "about": "x"})" + "]}",
          "family 'a': certify is not [a-z0-9_]+");
  refused(head + R"({"name": "a", "kind": "attention", "case_kind": "k", "certify": "none", "about": "x"})" + "]}",
          "family 'a' is malformed");
  // A generated family has no seed (its cases come from the run's), and says so with a boolean.
  const std::string drawn = R"({"name": "d", "generated": true, "kind": "attention", "case_kind": "attn_core", "certify": "decode", "about": "x"})";
  const auto parsed = parse_families(head + good + "," + drawn + "]}");
  ASSERT_EQ(parsed.size(), 2u);
  EXPECT_FALSE(parsed[0].generated);
  EXPECT_TRUE(parsed[1].generated);
  refused(head + R"({"name": "d", "generated": true, "seed": 1, "kind": "attention", "case_kind": "k", "certify": "none", "about": "x"})" + "]}",
          "family 'd': a generated family has no seed of its own");
  refused(head + R"({"name": "d", "generated": "yes", "kind": "attention", "case_kind": "k", "certify": "none", "about": "x"})" + "]}",
          "family 'd' is malformed");
}

// The cases mla certify draws at run time are a family of the catalog, declared as generated:
// the certifier takes their name from kFreshFamily, and this is the check that the catalog
// agrees. Being generated, it has no file, so no reader of stored families meets it.
TEST(Families, TheFreshFamilyIsDeclaredAsGenerated) {
  const Family& fresh = fresh_family();
  EXPECT_EQ(fresh.name, kFreshFamily);
  EXPECT_TRUE(fresh.generated);
  EXPECT_EQ(fresh.certified_as, kFreshFamily) << "its rows carry its own name";
  EXPECT_EQ(fresh.certify, "decode");
  EXPECT_EQ(find_family(kFreshFamily), nullptr) << "a stored family of that name would need a file";
  for (const auto& f : families()) EXPECT_FALSE(f.generated) << f.name;
  ASSERT_FALSE(generated_families().empty());
  for (const auto& f : generated_families()) EXPECT_TRUE(f.generated) << f.name;
}

TEST(Families, TheTinyCatalogsFilesCarryTheirFamily) {
  const auto cat = open_catalog(testing::corpus_dir() / "good");
  for (const auto& [file, digest] : cat.sha256) {
    const auto info = read_file_info(cat.file(file));
    const Family& f = family(info.family);
    EXPECT_EQ(f.file(), file);
  }
}

}  // namespace
}  // namespace mla::golden
