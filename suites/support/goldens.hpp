// Access to the verified golden catalog for the L1 tests. An absent catalog is a visible skip
// with the reason (never a silent pass); a present but corrupt one is a failure (the loader's
// FixtureError propagates).
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "mla/core/numeric.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/judge/attention.hpp"

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

// A golden attention case's truth for judge_attention: its fp64 truth, its deployed-precision
// reference (widened from the stored bf16 / fp32) and, for FP8, its unquantized result.
class GoldenTruth {
 public:
  explicit GoldenTruth(const golden::AttnCase& c) : c_(c) {
    for (uint16_t b : c.same_dtype_out) same_out_.push_back(bf16_to_float(b));
    same_lse_.assign(c.same_dtype_lse.begin(), c.same_dtype_lse.end());
  }
  AttentionTruth view() const {
    AttentionTruth t;
    t.out = c_.truth_out;
    t.lse = c_.truth_lse;
    t.same_dtype_out = same_out_;
    t.same_dtype_lse = same_lse_;
    t.unquantized_out = c_.unquantized_out;
    t.unquantized_lse = c_.unquantized_lse;
    return t;
  }

 private:
  const golden::AttnCase& c_;
  std::vector<double> same_out_, same_lse_;
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace mla::testing
