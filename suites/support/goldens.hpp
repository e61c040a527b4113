// Access to the verified golden catalog for the L1 tests. An absent catalog is a visible skip
// with the reason (never a silent pass); a present but corrupt one is a failure (the loader's
// FixtureError propagates).
#pragma once

#include <chrono>

#include <gtest/gtest.h>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "mla/core/numeric.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/judge/golden.hpp"

namespace mla::testing {

// The catalog, or nullopt with `why_absent` set when there is no MANIFEST.sha256 at all.
inline std::optional<golden::Catalog> open_goldens(std::string& why_absent) {
  const std::filesystem::path dir = golden::default_goldens_dir();
  if (!std::filesystem::exists(dir / "MANIFEST.sha256")) {
    why_absent = "no golden catalog at " + dir.string() + " (write it with ./mla.sh goldens)";
    return std::nullopt;
  }
  return golden::open_catalog(dir);
}

// Every stored case of the catalog's prefill families, loaded (inputs, truth, bf16 pipeline), in
// the catalog's order; empty when there is no catalog (the caller skips with that reason).
inline std::vector<golden::PrefillCase> stored_prefill_cases() {
  std::vector<golden::PrefillCase> cases;
  const std::filesystem::path dir = golden::default_goldens_dir();
  if (!std::filesystem::exists(dir / "MANIFEST.sha256")) return cases;
  const auto catalog = golden::open_catalog(dir);
  for (const auto& fam : golden::family_names(golden::FamilyKind::prefill)) {
    const auto file = catalog.file(golden::family(fam).file());
    for (const auto& name : golden::read_file_info(file).cases) cases.push_back(golden::load_prefill_case(file, name));
  }
  return cases;
}

// A case of the catalog, found by its header.
struct GoldenCaseRef {
  std::string family, file, name;
  golden::AttnHeader header;
};

// Every case of the catalog's attention families (fixtures/catalog.json, in its order) whose
// header satisfies `keep`; reads attributes only, so selecting costs nothing for long cases.
template <class Keep>
std::vector<GoldenCaseRef> attention_cases(const golden::Catalog& cat, Keep keep) {
  std::vector<GoldenCaseRef> out;
  for (const auto& fam : golden::families()) {
    if (fam.kind != golden::FamilyKind::attention || !cat.sha256.count(fam.file())) continue;
    for (const auto& name : golden::read_file_info(cat.file(fam.file())).cases) {
      auto h = golden::read_attn_header(cat.file(fam.file()), name);
      if (keep(h)) out.push_back({fam.name, fam.file(), name, std::move(h)});
    }
  }
  return out;
}

// A test over one family of the catalog description, the parameter (instantiate with
// ValuesIn(golden::family_names(...))): SetUp skips, with the reason, when there is no catalog or
// the family's file is not in it, and reads the family's case names (a family without cases is a
// failure, not a vacuous pass).
class GoldenFamilyTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    catalog_ = open_goldens(why);
    if (!catalog_) GTEST_SKIP() << why;
    name_ = golden::family(GetParam()).file();
    if (!catalog_->sha256.count(name_)) GTEST_SKIP() << name_ << " is not in the catalog at " << catalog_->dir;
    file_ = catalog_->file(name_);
    cases_ = golden::read_file_info(file_).cases;
    ASSERT_FALSE(cases_.empty()) << name_ << " has no cases";
  }
  std::optional<golden::Catalog> catalog_;
  std::string name_;            // the family's file name, "<family>.h5"
  std::filesystem::path file_;  // its path, verified against the manifest
  std::vector<std::string> cases_;
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace mla::testing
