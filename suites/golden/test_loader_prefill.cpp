// L0: the prefill, merge and indexer families of the real catalog load, with what SCHEMA.md
// promises (cu_seqlens, empty rows, needles, no NaN where none is allowed, causal horizons, top-k
// rows), and copies of them made to lie (one dataset or attribute rewritten in place) are refused
// with a FixtureError naming the dataset and what was wrong.
#include <gtest/gtest.h>

#include <H5Cpp.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/prefill.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "support/temp_dir.hpp"

namespace mla::golden {
namespace {

namespace fs = std::filesystem;

class PrefillGoldens : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = default_goldens_dir();
    if (!fs::exists(dir_ / "MANIFEST.sha256")) {
      GTEST_SKIP() << "no golden catalog at " << dir_ << " (write it with ./mla.sh goldens)";
    }
    cat_ = open_catalog(dir_);
    for (const char* f : {"prefill.h5", "merge.h5", "indexer.h5"}) {
      if (!cat_.sha256.count(f)) GTEST_SKIP() << "the catalog at " << dir_ << " has no " << f << " (./mla.sh goldens)";
    }
  }
  fs::path dir_;
  Catalog cat_;
};

TEST_F(PrefillGoldens, EveryPrefillCaseLoadsWithConsistentShapes) {
  const auto path = cat_.file("prefill.h5");
  const FileInfo info = read_file_info(path);
  ASSERT_EQ(family(info.family).kind, FamilyKind::prefill);
  bool generated = false, stored = false, noncausal = false, chunked = false, empty_seq = false, needles = false;
  for (const auto& name : info.cases) {
    SCOPED_TRACE(name);
    const PrefillCase c = load_prefill_case(path, name);
    ASSERT_EQ(c.q.size(), static_cast<std::size_t>(c.shape.total_q * c.shape.heads * c.shape.d_qk));
    ASSERT_EQ(c.v.size(), static_cast<std::size_t>(c.shape.total_k * c.shape.heads * c.shape.d_v));
    ASSERT_EQ(c.truth_lse.size(), static_cast<std::size_t>(c.shape.heads * c.shape.total_q));
    // Every stored case is well-formed inputs of the prefill contract, as a kernel will get them.
    EXPECT_NO_THROW(validate_prefill_inputs(c.inputs(), name));
    generated |= !c.inputs_stored;
    stored |= c.inputs_stored;
    noncausal |= !c.shape.causal;
    needles |= !c.needle_positions.empty();
    for (int64_t i = 0; i < c.shape.batch; ++i) {
      chunked |= c.shape.causal && c.s_q(i) > 0 && c.s_q(i) < c.s_k(i);
      empty_seq |= c.s_q(i) > 0 && c.s_k(i) == 0;
    }
  }
  // What the family is for: each of these has a case (a missing one would pass vacuously).
  EXPECT_TRUE(generated && stored && noncausal && chunked && empty_seq && needles);
}

TEST_F(PrefillGoldens, EveryMergeCaseLoadsAndItsEmptySidesAreWhereTheLseSaysSo) {
  const auto path = cat_.file("merge.h5");
  const FileInfo info = read_file_info(path);
  ASSERT_EQ(family(info.family).kind, FamilyKind::merge);
  std::set<std::string> dtypes;
  int nan_outs = 0, both_empty = 0;
  for (const auto& name : info.cases) {
    SCOPED_TRACE(name);
    const MergeCase c = load_merge_case(path, name);
    dtypes.insert(c.out_dtype);
    for (double o : c.out_a) nan_outs += std::isnan(o);
    for (double l : c.truth_lse) both_empty += l == -std::numeric_limits<double>::infinity();
  }
  EXPECT_EQ(dtypes, (std::set<std::string>{"bfloat16", "float16", "float32"}));
  EXPECT_GT(nan_outs, 0) << "no empty side holds NaN: the loader's allowance is untested";
  EXPECT_GT(both_empty, 0);
}

// A copy of `file` in a temporary folder with `edit` applied through HDF5, loaded by `load`:
// returns the refusal (fails the test when it is accepted).
std::string refusal(const fs::path& file, const std::function<void(H5::H5File&)>& edit,
                    const std::function<void(const fs::path&)>& load, const std::string& dataset) {
  const mla::testing::TempDir dir("mla-prefill-bad");
  const fs::path tmp = dir.path() / file.filename();
  fs::copy_file(file, tmp);
  {
    H5::H5File f(tmp.string(), H5F_ACC_RDWR);
    edit(f);
  }
  try {
    load(tmp);
  } catch (const FixtureError& e) {
    EXPECT_EQ(e.file(), tmp.string());
    EXPECT_EQ(e.dataset(), dataset) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "the lying copy was accepted";
  return "";
}

template <class T>
void rewrite(H5::H5File& f, const std::string& ds, const H5::PredType& type, const std::function<void(std::vector<T>&)>& change) {
  H5::DataSet d = f.openDataSet(ds);
  std::vector<T> v(static_cast<std::size_t>(d.getSpace().getSimpleExtentNpoints()));
  d.read(v.data(), type);
  change(v);
  d.write(v.data(), type);
}

void set_int_attr(H5::H5File& f, const std::string& group, const std::string& name, int64_t value) {
  H5::Group g = f.openGroup(group);
  g.openAttribute(name).write(H5::PredType::NATIVE_INT64, &value);
}

void set_str_attr(H5::H5File& f, const std::string& group, const std::string& name, const std::string& value) {
  H5::Group g = f.openGroup(group);
  g.removeAttr(name);
  H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
  t.setCset(H5T_CSET_UTF8);
  g.createAttribute(name, t, H5::DataSpace(H5S_SCALAR)).write(t, value);
}

struct Lie {
  const char* what;
  const char* file;
  const char* case_name;
  const char* dataset;  // relative to the case
  const char* message;  // a substring of what()
  std::function<void(H5::H5File&, const std::string& case_path)> edit;
};

std::vector<Lie> lies() {
  using I = std::vector<int32_t>;
  using D = std::vector<double>;
  using U = std::vector<uint16_t>;
  using F = std::vector<float>;
  const auto nan = std::numeric_limits<double>::quiet_NaN();
  return {
      {"cu_seqlens_q not monotone", "prefill.h5", "h1_varlen", "/inputs/cu_seqlens_q", "never decrease",
       [](H5::H5File& f, const std::string& p) {
         rewrite<int32_t>(f, p + "/inputs/cu_seqlens_q", H5::PredType::NATIVE_INT32, [](I& v) { v[2] = v[3] + 1; });
       }},
      {"cu_seqlens_k not starting at 0", "prefill.h5", "h3_chunked", "/inputs/cu_seqlens_k", "0 as the first entry",
       [](H5::H5File& f, const std::string& p) {
         rewrite<int32_t>(f, p + "/inputs/cu_seqlens_k", H5::PredType::NATIVE_INT32, [](I& v) { v[0] = 1; });
       }},
      {"cu_seqlens_k total mismatch", "prefill.h5", "h3_chunked", "/inputs/cu_seqlens_k", "(total_k of the case attributes)",
       [](H5::H5File& f, const std::string& p) {
         rewrite<int32_t>(f, p + "/inputs/cu_seqlens_k", H5::PredType::NATIVE_INT32, [](I& v) { v.back() -= 1; });
       }},
      {"heads attribute disagrees with the data", "prefill.h5", "dominant_logit", "/inputs/q", "heads=3",
       [](H5::H5File& f, const std::string& p) { set_int_attr(f, p, "heads", 3); }},
      {"heads of a generated tensor", "prefill.h5", "h16_chunked", "/generated/q", "heads=15",
       [](H5::H5File& f, const std::string& p) { set_int_attr(f, p, "heads", 15); }},
      {"NaN in a stored q", "prefill.h5", "dominant_logit", "/inputs/q", "finite values",
       [](H5::H5File& f, const std::string& p) {
         rewrite<uint16_t>(f, p + "/inputs/q", H5::PredType::NATIVE_UINT16, [](U& v) { v[5] = 0x7FC0; });
       }},
      {"NaN in the truth", "prefill.h5", "q_std100", "/truth/out", "finite values",
       [nan](H5::H5File& f, const std::string& p) {
         rewrite<double>(f, p + "/truth/out", H5::PredType::NATIVE_DOUBLE, [nan](D& v) { v[7] = nan; });
       }},
      {"an empty row with a finite lse", "prefill.h5", "noncausal_context", "/truth/lse", "+inf in a row that attends nothing",
       [](H5::H5File& f, const std::string& p) {
         // rows 4..6 of the batch are the sequence with no key
         rewrite<double>(f, p + "/truth/lse", H5::PredType::NATIVE_DOUBLE, [](D& v) { v[5] = 1.0; });
       }},
      {"a needle past its sequence", "prefill.h5", "needles_diagonal", "/needles/positions", "0 <= position < s_k",
       [](H5::H5File& f, const std::string& p) {
         rewrite<int32_t>(f, p + "/needles/positions", H5::PredType::NATIVE_INT32, [](I& v) { v.back() = 3; });
       }},
      {"a needle the stored k does not hold", "prefill.h5", "needles_diagonal", "/inputs/k", "the needle overlay",
       [](H5::H5File& f, const std::string& p) {
         rewrite<int32_t>(f, p + "/needles/positions", H5::PredType::NATIVE_INT32, [](I& v) { v[3] = 2; });
       }},
      {"a NaN lse", "merge.h5", "random_fp32", "/inputs/lse_b", "never NaN",
       [](H5::H5File& f, const std::string& p) {
         rewrite<float>(f, p + "/inputs/lse_b", H5::PredType::NATIVE_FLOAT,
                        [](F& v) { v[3] = std::numeric_limits<float>::quiet_NaN(); });
       }},
      {"NaN out on a side that attended keys", "merge.h5", "random_bf16", "/inputs/out_a", "finite values where the side's lse is finite",
       [](H5::H5File& f, const std::string& p) {
         rewrite<uint16_t>(f, p + "/inputs/out_a", H5::PredType::NATIVE_UINT16, [](U& v) { v[9] = 0x7FC0; });
       }},
      {"a finite merged lse where both sides are empty", "merge.h5", "empty_rows_fp32", "/truth/lse", "-inf where both sides are empty",
       [](H5::H5File& f, const std::string& p) {
         // token 5 of head 0: both sides -inf
         rewrite<double>(f, p + "/truth/lse", H5::PredType::NATIVE_DOUBLE, [](D& v) { v[5] = 0.0; });
       }},
      {"an unknown out dtype", "merge.h5", "random_fp16", "", "out_dtype one of bfloat16, float16, float32",
       [](H5::H5File& f, const std::string& p) { set_str_attr(f, p, "out_dtype", "float8"); }},
      // indexer.h5, case tiny_interleaved_ue8m0: batch 2, a 12-token prompt (step 0), a decode step
      // (step 1); top-8, so prompt row i keeps min(8, i + 1) positions.
      {"a RoPE layout nobody uses", "indexer.h5", "tiny_interleaved_ue8m0", "", "rope_layout 'interleaved' or 'half'",
       [](H5::H5File& f, const std::string& p) { set_str_attr(f, p, "rope_layout", "neox2"); }},
      {"heads attribute disagrees with the data", "indexer.h5", "tiny_half_ue8m0", "/steps/0/q", "heads=5",
       [](H5::H5File& f, const std::string& p) { set_int_attr(f, p, "heads", 5); }},
      {"a decode step that does not follow the prompt", "indexer.h5", "tiny_half_fp32", "/steps/1",
       "the previous step's end", [](H5::H5File& f, const std::string& p) { set_int_attr(f, p + "/steps/1", "start_pos", 11); }},
      {"an e4m3 NaN code", "indexer.h5", "tiny_interleaved_ue8m0", "/steps/0/q_codes", "without NaN",
       [](H5::H5File& f, const std::string& p) {
         rewrite<uint8_t>(f, p + "/steps/0/q_codes", H5::PredType::NATIVE_UINT8, [](std::vector<uint8_t>& v) { v[5] = 0xFF; });
       }},
      {"a ue8m0 scale that is no power of two", "indexer.h5", "tiny_interleaved_ue8m0", "/steps/1/k_scale", "powers of two",
       [](H5::H5File& f, const std::string& p) {
         rewrite<float>(f, p + "/steps/1/k_scale", H5::PredType::NATIVE_FLOAT, [](F& v) { v[1] = 0.3f; });
       }},
      {"a row's valid count off by one", "indexer.h5", "tiny_interleaved_fp32", "/steps/0/n_valid", "(causal)",
       [](H5::H5File& f, const std::string& p) {
         rewrite<int32_t>(f, p + "/steps/0/n_valid", H5::PredType::NATIVE_INT32, [](I& v) { v[3] += 1; });
       }},
      {"a logit past the causal horizon", "indexer.h5", "tiny_half_ue8m0", "/steps/0/logits_truth", "-inf past the row's causal horizon",
       [](H5::H5File& f, const std::string& p) {
         rewrite<double>(f, p + "/steps/0/logits_truth", H5::PredType::NATIVE_DOUBLE, [](D& v) { v[1] = 0.5; });  // row 0, position 1
       }},
      {"a masked logit inside the horizon", "indexer.h5", "tiny_half_ue8m0", "/steps/1/logits_deployed",
       "a finite logit inside the row's causal horizon",
       [](H5::H5File& f, const std::string& p) {
         rewrite<float>(f, p + "/steps/1/logits_deployed", H5::PredType::NATIVE_FLOAT,
                        [](F& v) { v[4] = -std::numeric_limits<float>::infinity(); });
       }},
      {"a duplicated top-k position", "indexer.h5", "tiny_interleaved_ue8m0", "/steps/0/topk_truth", "distinct positions",
       [](H5::H5File& f, const std::string& p) {
         // row 11 (12 valid positions) keeps 8: entries 88 .. 95
         rewrite<int32_t>(f, p + "/steps/0/topk_truth", H5::PredType::NATIVE_INT32, [](I& v) { v[89] = v[88]; });
       }},
      {"a masked position in the padding", "indexer.h5", "tiny_interleaved_ue8m0", "/steps/0/topk_deployed",
       "-1 past the row's valid count",
       [](H5::H5File& f, const std::string& p) {
         // row 0 sees position 0 only: entries 1 .. 7 are padding
         rewrite<int32_t>(f, p + "/steps/0/topk_deployed", H5::PredType::NATIVE_INT32, [](I& v) { v[1] = 1; });
       }},
  };
}

TEST_F(PrefillGoldens, LyingCopiesAreRefusedNamingTheDatasetAndTheProblem) {
  for (const auto& lie : lies()) {
    SCOPED_TRACE(lie.what);
    const std::string p = std::string("/cases/") + lie.case_name;
    const std::string file = lie.file;
    auto load = [&](const fs::path& f) {
      if (file == "prefill.h5") (void)load_prefill_case(f, lie.case_name);
      else if (file == "merge.h5") (void)load_merge_case(f, lie.case_name);
      else (void)load_indexer_case(f, lie.case_name);
    };
    // The unedited case loads: the refusal below is the edit's doing.
    ASSERT_NO_THROW(load(cat_.file(lie.file)));
    const std::string m = refusal(cat_.file(lie.file), [&](H5::H5File& f) { lie.edit(f, p); }, load,
                                  p + lie.dataset);
    EXPECT_NE(m.find(lie.message), std::string::npos) << "expected '" << lie.message << "' in: " << m;
  }
}

TEST_F(PrefillGoldens, EachLoaderRefusesTheOtherKindsFiles) {
  try {
    (void)load_prefill_case(cat_.file("merge.h5"), "random_fp32");
    ADD_FAILURE() << "a merge file loaded as prefill";
  } catch (const FixtureError& e) {
    EXPECT_NE(std::string(e.what()).find("a prefill family (prefill)"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)load_merge_case(cat_.file("prefill.h5"), "h1_varlen"), FixtureError);
  EXPECT_THROW((void)load_attn_case(cat_.file("prefill.h5"), "h1_varlen"), FixtureError);
  EXPECT_THROW((void)load_indexer_case(cat_.file("merge.h5"), "random_fp32"), FixtureError);
  EXPECT_THROW((void)load_prefill_case(cat_.file("indexer.h5"), "tiny_half_fp32"), FixtureError);
  // The kind-blind entry point takes each to its own loader.
  EXPECT_NO_THROW(validate_case(cat_.file("prefill.h5"), "h1_varlen"));
  EXPECT_NO_THROW(validate_case(cat_.file("merge.h5"), "random_fp32"));
  EXPECT_NO_THROW(validate_case(cat_.file("indexer.h5"), "h64_half_ue8m0"));
}

TEST(Float16, WidensExactly) {
  // The merge family's float16 outs: sign, subnormals, the largest finite, infinities, NaN.
  EXPECT_EQ(float16_to_double(0x3C00), 1.0);
  EXPECT_EQ(float16_to_double(0xC000), -2.0);
  EXPECT_EQ(float16_to_double(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(float16_to_double(0x7BFF), 65504.0);
  EXPECT_EQ(float16_to_double(0xFC00), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(float16_to_double(0x7E00)));
}

}  // namespace
}  // namespace mla::golden
