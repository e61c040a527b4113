// L0: `mla judge`, the door through which tests outside C++ (the Python kernels' tests) ask the
// certifier's judge about a result: a result the judge must pass passes, one it must fail fails
// with the reason, the verdict and reasons are judge_attention's own on the same numbers, the
// declared lse conventions are undone as the certifier undoes them, and a result that cannot be
// judged (wrong shape, missing file, unknown case) is an error that says what is wrong.
#include <gtest/gtest.h>

#include <H5Cpp.h>

#include <cmath>
#include <string>
#include <vector>

#include "mla/core/conventions.hpp"
#include "mla/core/numeric.hpp"
#include "mla/golden/golden.hpp"
#include "mla/judge/attention.hpp"
#include "mla/judge/golden.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::certify::testing::Proc;
using mla::certify::testing::quote;
using mla::certify::testing::run_command;
using mla::certify::testing::TempDir;
using nlohmann::json;

const fs::path kGoldens = mla::golden::default_goldens_dir();

mla::golden::AttnCase load(const std::string& family, const std::string& name) {
  return mla::golden::load_attn_case(kGoldens / (family + ".h5"), name);
}

std::vector<hsize_t> dims(const std::vector<int64_t>& shape) { return {shape.begin(), shape.end()}; }

template <class T>
void write(H5::H5File& f, const std::string& name, const std::vector<T>& v, const std::vector<int64_t>& shape,
           const H5::PredType& type, const std::string& dtype) {
  const auto d = dims(shape);
  H5::DataSpace space(static_cast<int>(d.size()), d.data());
  H5::DataSet ds = f.createDataSet(name, type, space);
  ds.write(v.data(), type);
  H5::StrType str(H5::PredType::C_S1, dtype.size());
  ds.createAttribute("dtype", str, H5::DataSpace(H5S_SCALAR)).write(str, dtype);
}

// A result file as the Python tests write one: out in `dtype` ("f32" | "bf16"), lse float32.
fs::path write_result(const fs::path& path, const std::vector<double>& out, const std::vector<int64_t>& out_shape,
                      const std::vector<double>& lse, const std::vector<int64_t>& lse_shape, const std::string& dtype) {
  H5::H5File f(path.string(), H5F_ACC_TRUNC);
  if (dtype == "bf16") {
    std::vector<uint16_t> bits;
    for (double x : out) bits.push_back(mla::bf16_from_double(x));
    write(f, "out", bits, out_shape, H5::PredType::NATIVE_UINT16, "bfloat16");
  } else {
    write(f, "out", std::vector<float>(out.begin(), out.end()), out_shape, H5::PredType::NATIVE_FLOAT, "float32");
  }
  write(f, "lse", std::vector<float>(lse.begin(), lse.end()), lse_shape, H5::PredType::NATIVE_FLOAT, "float32");
  return path;
}

// What the file holds, widened, as the judge sees it.
std::vector<double> rounded(const std::vector<double>& v, const std::string& dtype) {
  std::vector<double> r;
  for (double x : v) {
    r.push_back(dtype == "bf16" ? static_cast<double>(mla::bf16_to_float(mla::bf16_from_double(x)))
                                : static_cast<double>(static_cast<float>(x)));
  }
  return r;
}

struct Judged {
  Proc proc;
  json j;
};

Judged judge(const std::string& key, const fs::path& result, const std::string& extra = "") {
  Judged r;
  r.proc = run_command(std::string(MLA_CLI_EXE) + " judge --goldens " + quote(kGoldens) + " --case " + key +
                       " --result " + quote(result) + " " + extra + " 2>&1");
  if (r.proc.status == 0) r.j = json::parse(r.proc.out);
  return r;
}

// judge_attention in this process on the numbers the file holds: the certifier's verdict.
mla::AttentionJudgement in_process(const mla::golden::AttnCase& c, const std::vector<double>& out,
                                   const std::vector<double>& lse, const std::string& dtype) {
  const mla::GoldenTruth truth(c);
  const auto dt = mla::out_dtype_from_string(dtype);
  const mla::AttnOutputs got{dt, rounded(out, dtype), rounded(lse, "f32")};
  return mla::judge_attention(c.shape, mla::Declaration{dt, std::nullopt}, got, truth.view());
}

struct Probe {
  std::string family, name, dtype, out_entry;
};

// Named in ctest's list by its case, not by its bytes.
void PrintTo(const Probe& p, std::ostream* os) { *os << p.family << "/" << p.name << " as " << p.dtype; }

class MlaJudge : public ::testing::TestWithParam<Probe> {};

TEST_P(MlaJudge, TruthRoundedPassesAndAPerturbedResultFailsAsTheCertifierJudgesThem) {
  const Probe& p = GetParam();
  const auto c = load(p.family, p.name);
  const auto os = mla::out_shape(c.shape), ls = mla::lse_shape(c.shape);
  TempDir tmp("mla-judge");
  const std::string key = p.family + "/" + p.name;

  const auto good = write_result(tmp.path() / "good.h5", c.truth_out, os, c.truth_lse, ls, p.dtype);
  const auto g = judge(key, good);
  ASSERT_EQ(g.proc.status, 0) << g.proc.out;
  EXPECT_EQ(g.j.at("verdict"), "PASS") << g.j.dump(1);
  EXPECT_TRUE(g.j.at("reasons").empty());
  EXPECT_EQ(g.j.at("out").at("tolerance"), p.out_entry);
  EXPECT_EQ(g.j.at("tolerances").at("out").at("name"), p.out_entry);
  EXPECT_EQ(g.j.at("declared").at("produced"), p.dtype);
  EXPECT_TRUE(in_process(c, c.truth_out, c.truth_lse, p.dtype).pass());

  // One element of out moved by ten times the largest magnitude: outside every bound.
  auto bad_out = c.truth_out;
  double mx = 0;
  for (double x : bad_out) mx = std::isfinite(x) ? std::max(mx, std::fabs(x)) : mx;
  std::size_t at = 0;
  while (!std::isfinite(bad_out[at])) ++at;
  bad_out[at] += 10 * std::max(mx, 1.0);
  const auto bad = write_result(tmp.path() / "bad.h5", bad_out, os, c.truth_lse, ls, p.dtype);
  const auto b = judge(key, bad);
  ASSERT_EQ(b.proc.status, 0) << "a FAIL is a verdict, not an error: " << b.proc.out;
  EXPECT_EQ(b.j.at("verdict"), "FAIL");
  const auto reasons = b.j.at("reasons").get<std::vector<std::string>>();
  ASSERT_FALSE(reasons.empty());
  EXPECT_EQ(reasons.front().rfind("out: ", 0), 0u) << reasons.front();
  EXPECT_EQ(b.j.at("out").at("max_abs_index").get<std::vector<int64_t>>(), [&] {
    std::vector<int64_t> idx(os.size());
    auto rest = static_cast<int64_t>(at);
    for (std::size_t d = os.size(); d-- > 0;) {
      idx[d] = rest % os[d];
      rest /= os[d];
    }
    return idx;
  }());
  EXPECT_EQ(b.j.at("lse").at("verdict"), "PASS");
  // The same reasons, word for word, as judge_attention gives the certifier on these numbers.
  EXPECT_EQ(reasons, in_process(c, bad_out, c.truth_lse, p.dtype).reasons);
}

INSTANTIATE_TEST_SUITE_P(Cases, MlaJudge,
                         ::testing::Values(Probe{"attn_core", "h3_sq4_short", "f32", "attn.out.f32"},
                                           Probe{"attn_core", "h3_sq4_short", "bf16", "attn.out.bf16"},
                                           Probe{"attn_fp8", "fp8_ue8m0_h64_sq2", "bf16", "attn.out.fp8"}),
                         [](const auto& info) { return info.param.name + "_" + info.param.dtype; });

// An lse in FlashInfer's conventions (base 2, [b, s_q, h], -inf for an empty row) passes when
// they are declared, as the certifier converts a kernel's declared conventions, and fails when
// they are not (the case has empty rows, s_q != h).
TEST(MlaJudgeConventions, DeclaredLseConventionsAreUndoneBeforeJudging) {
  const auto c = load("attn_core", "h3_sq4_short");
  mla::Conventions fi;
  fi.lse_base = mla::LseBase::two;
  fi.lse_layout = mla::LseLayout::b_sq_h;
  fi.empty_row_lse = mla::EmptyRowLse::neg_inf;
  const auto lse = mla::lse_to_kernel(fi, c.shape, c.truth_lse);
  const std::vector<int64_t> ls{c.shape.batch, c.shape.s_q, c.shape.heads};
  TempDir tmp("mla-judge");
  const auto file = write_result(tmp.path() / "fi.h5", c.truth_out, mla::out_shape(c.shape), lse, ls, "f32");
  const auto ok = judge("attn_core/h3_sq4_short", file, "--lse-base 2 --lse-layout '[b,s_q,h]' --empty-row-lse -inf");
  ASSERT_EQ(ok.proc.status, 0) << ok.proc.out;
  EXPECT_EQ(ok.j.at("verdict"), "PASS") << ok.j.dump(1);
  const auto undeclared = judge("attn_core/h3_sq4_short", file);
  EXPECT_EQ(undeclared.proc.status, 2) << "[b,s_q,h] read as [b,h,s_q]: " << undeclared.proc.out;
  EXPECT_NE(undeclared.proc.out.find("/lse: expected shape [2, 3, 4], found shape [2, 4, 3]"), std::string::npos)
      << undeclared.proc.out;
}

// What cannot be judged is exit 2 and a message naming what is wrong, never a verdict.
TEST(MlaJudgeErrors, ResultsAndCasesThatCannotBeJudgedAreNamed) {
  const auto c = load("attn_core", "h3_sq4_short");
  TempDir tmp("mla-judge");
  auto short_shape = mla::out_shape(c.shape);
  short_shape.back() = 100;
  std::vector<double> short_out(static_cast<std::size_t>(c.shape.batch * c.shape.s_q * c.shape.heads * 100), 0.0);
  const auto wrong = write_result(tmp.path() / "wrong.h5", short_out, short_shape, c.truth_lse,
                                  mla::lse_shape(c.shape), "f32");
  const auto good = write_result(tmp.path() / "good.h5", c.truth_out, mla::out_shape(c.shape), c.truth_lse,
                                 mla::lse_shape(c.shape), "f32");
  struct Bad {
    std::string key;
    fs::path result;
    std::string extra, says;
  };
  for (const Bad& b : {Bad{"attn_core/h3_sq4_short", wrong, "", "/out: expected shape [2, 4, 3, 512], found shape [2, 4, 3, 100]"},
                       Bad{"attn_core/h3_sq4_short", tmp.path() / "none.h5", "", "expected a result file (HDF5 with /out and /lse), found missing"},
                       Bad{"attn_core/no_such_case", good, "", "attn_core.h5 has no case 'no_such_case'"},
                       Bad{"full_layer/prefill", good, "", "'full_layer' is not an attention family"},
                       Bad{"h3_sq4_short", good, "", "expected <family>/<case>"},
                       Bad{"attn_core/h3_sq4_short", good, "--out-dtype f16", "f16"},
                       Bad{"attn_core/h3_sq4_short", good, "--compute bf16/bf16", "accumulating in bf16"}}) {
    const auto r = judge(b.key, b.result, b.extra);
    EXPECT_EQ(r.proc.status, 2) << b.key << " " << b.extra << ": " << r.proc.out;
    EXPECT_NE(r.proc.out.find("mla judge: "), std::string::npos) << r.proc.out;
    EXPECT_NE(r.proc.out.find(b.says), std::string::npos) << b.key << " " << b.extra << ": " << r.proc.out;
  }
}

}  // namespace
