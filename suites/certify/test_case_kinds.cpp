// The case-kind registry (mla/certify/case_kind.hpp) against the catalog description: every
// certified family names a registered kind whose loader reads its family kind, every kind
// certifies some family, and a description that does not fit is refused naming the family.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "mla/certify/case_kind.hpp"
#include "mla/core/error.hpp"
#include "mla/golden/families.hpp"

namespace {

using mla::certify::case_kinds;
using mla::golden::Family;
using mla::golden::FamilyKind;

std::string refusal(const std::vector<Family>& families) {
  try {
    mla::certify::check_catalog_kinds(families);
  } catch (const mla::Error& e) {
    return e.what();
  }
  return {};
}

Family family(std::string name, FamilyKind kind, std::string certify) {
  Family f;
  f.name = f.certified_as = std::move(name);
  f.kind = kind;
  f.certify = std::move(certify);
  return f;
}

TEST(CaseKinds, EveryCertifiedFamilyOfTheCatalogHasItsKindAndEveryKindAFamily) {
  ASSERT_NO_THROW((void)case_kinds());
  std::set<std::string> certified_by;
  for (const auto* list : {&mla::golden::families(), &mla::golden::generated_families()}) {
    for (const auto& f : *list) {
      if (!f.certified()) continue;
      const auto* kind = mla::certify::case_kind_of(f);
      ASSERT_NE(kind, nullptr) << f.name;
      EXPECT_EQ(kind->loads(), f.kind) << f.name;
      certified_by.insert(std::string(kind->name()));
    }
  }
  std::set<std::string> names, drawn;
  for (const auto* kind : case_kinds()) {
    EXPECT_TRUE(names.insert(std::string(kind->name())).second) << kind->name() << " registered twice";
    // A kind with a golden loader certifies a stored family; one without draws every case at run
    // time (so it has drawn files) and no family may name it.
    if (kind->loads()) {
      EXPECT_TRUE(certified_by.count(std::string(kind->name()))) << kind->name() << " certifies no family of the catalog";
    } else {
      EXPECT_FALSE(certified_by.count(std::string(kind->name()))) << kind->name();
      EXPECT_FALSE(kind->drawn_files().empty()) << kind->name() << " has neither stored nor drawn cases";
    }
    EXPECT_EQ(mla::certify::find_case_kind(kind->name()), kind);
    // Drawn rows are told from stored ones by their file: no two kinds may share one.
    for (const auto& f : kind->drawn_files()) EXPECT_TRUE(drawn.insert(f).second) << f;
  }
  EXPECT_TRUE(drawn.count(std::string(mla::golden::kFreshFamily)));
  EXPECT_EQ(mla::certify::find_case_kind("no_such_kind"), nullptr);
  // Rows are found by the family name they carry.
  for (const auto& f : mla::golden::families()) {
    if (f.certified()) {
      EXPECT_EQ(mla::certify::case_kind_of_rows(f.certified_as), mla::certify::case_kind_of(f)) << f.name;
    }
  }
  EXPECT_EQ(mla::certify::case_kind_of_rows("no_such_family"), nullptr);
}

TEST(CaseKinds, AFamilyThatFitsNoKindIsRefusedNamingIt) {
  const auto* first = case_kinds().front();
  ASSERT_TRUE(first->loads());
  const auto other = *first->loads() == FamilyKind::attention ? FamilyKind::layer : FamilyKind::attention;
  EXPECT_EQ(refusal({family("fits", *first->loads(), std::string(first->name())),
                     family("uncertified", other, std::string(mla::golden::kNotCertified))}),
            "");
  const auto unknown = refusal({family("fits", *first->loads(), std::string(first->name())),
                                family("odd", *first->loads(), "no_such_kind")});
  EXPECT_NE(unknown.find("family 'odd'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("no_such_kind"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find(std::string(first->name())), std::string::npos) << "names the registered kinds: " << unknown;
  const auto wrong = refusal({family("misread", other, std::string(first->name()))});
  EXPECT_NE(wrong.find("family 'misread'"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find(mla::golden::to_string(*first->loads())), std::string::npos) << wrong;
  // A kind whose cases are all drawn at run time certifies no stored family.
  for (const auto* kind : case_kinds()) {
    if (kind->loads()) continue;
    const auto drawn = refusal({family("stored", FamilyKind::attention, std::string(kind->name()))});
    EXPECT_NE(drawn.find("family 'stored'"), std::string::npos) << drawn;
    EXPECT_NE(drawn.find("drawn at run time"), std::string::npos) << drawn;
  }
}

}  // namespace
