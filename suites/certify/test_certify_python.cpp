// The Python front door end to end: `mla certify --python SPEC` as a user runs it, on a narrow
// selection of the real catalog (children are forked from the door's server, which imported
// torch once; a server that could not start would cost about 1.8 s per child here). A FlashInfer-convention torch decode certifies green through the
// host's conversions, the same code declaring the canonical conventions is red, and each broken
// variant (suites/certify/python/door_kernels.py) is red or refused for the reason that names its
// fault, through the audit every C plug-in gets. Skipped (with the reason) without the catalog or
// without a python3 that imports torch.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <fstream>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/certify/isolation.hpp"
#include "mla/certify/python_declaration.hpp"
#include "mla/core/error.hpp"
#include "mla/golden/golden.hpp"
#include "mla/reports/certificate.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::certify::testing::expect_predicate_claims;
using mla::certify::testing::kFresh;
using mla::certify::testing::quote;
using mla::certify::testing::run_command;
using mla::certify::testing::slurp;
using mla::certify::testing::TempDir;
using mla::tol::Verdict;
using nlohmann::json;

const fs::path kGoldens = mla::golden::default_goldens_dir();
const fs::path kSource = MLA_SOURCE_DIR;
const fs::path kKernels = kSource / "suites" / "certify" / "python" / "door_kernels.py";
const fs::path kExamples = kSource / "kernels" / "python" / "examples";
// The project's Python (mla.sh installs python3-torch for it).
const std::string kTorchPython = MLA_TORCH_PYTHON;

// A dense case with an empty causal row (h=3, s_q=2, one sequence of length 1) and a sparse one
// with every kind of invalid index and an all-invalid row: together they exercise every
// convention the host converts.
const std::string kTwoCases = "--family attn_core --family attn_sparse --case 'attn_core/h3_sq2_short$|sparse_bf16_topk16$'";
const std::string kOneCase = "--family attn_core --case 'attn_core/h3_sq2_short$'";

struct Run {
  int status = -1;
  std::string output;  // stdout and stderr together
  json cert;
};

Run certify(const std::string& args, const std::string& env = "", const fs::path& out = {}) {
  TempDir dir;
  const fs::path o = out.empty() ? dir.path() : out;
  Run r;
  const auto p = run_command(fmt::format("{} {} certify --goldens {} --out {} {} 2>&1", env.empty() ? "" : "env " + env,
                                         MLA_CLI_EXE, quote(kGoldens), quote(o), args));
  r.status = p.status;
  r.output = p.out;
  if (fs::exists(o / "certificate.json")) r.cert = json::parse(slurp(o / "certificate.json"));
  return r;
}

std::string spec(const std::string& attr) { return " --python " + quote(kKernels.string() + ":" + attr); }

const json& kernel(const Run& r, const std::string& name) {
  for (const auto& k : r.cert.at("kernels")) {
    if (k.at("name") == name) return k;
  }
  throw std::runtime_error("no kernel " + name + " in the certificate:\n" + r.output);
}

// The row of `kernel` on case `name`.
const json& row(const Run& r, const std::string& k, const std::string& name) {
  for (const auto& c : kernel(r, k).at("cases")) {
    if (c.at("case") == name) return c;
  }
  throw std::runtime_error("no case " + name + " for " + k);
}

std::string reasons(const json& c) { return c.at("reasons").dump(); }

bool torch_here() { return run_command(kTorchPython + " -c 'import torch' 2>/dev/null").status == 0; }

class CertifyPython : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kGoldens / "MANIFEST.sha256")) {
      GTEST_SKIP() << "no golden catalog at " << kGoldens << " (generate it: ./mla.sh goldens)";
    }
    if (!torch_here()) GTEST_SKIP() << kTorchPython << " cannot import torch (mla.sh installs python3-torch)";
  }
  // A PATH on which python3 is the project's torch Python, whatever the user's PATH holds first.
  std::string torch_path() const { return "PATH=" + fs::path(kTorchPython).parent_path().string() + ":/usr/bin:/bin"; }
};

TEST_F(CertifyPython, FlashInferConventionsCertifyGreenAndTheSameCodeUndeclaredIsRed) {
  const auto fi = kExamples / "flashinfer_conventions.py";
  const auto r = certify(kTwoCases + " --python " + quote(fi.string() + ":KERNEL") + " --python " +
                             quote(fi.string() + ":KERNEL_UNDECLARED") + spec("CLAIMS_THREE_HEADS"),
                         torch_path());
  ASSERT_EQ(r.status, 1) << r.output;  // the undeclared variant is red
  for (const char* c : {"h3_sq2_short", "sparse_bf16_topk16"}) {
    const auto& g = row(r, "flashinfer_conventions_cpu", c);
    EXPECT_EQ(g.at("verdict"), "PASS") << c << ": " << reasons(g);
    const auto& bad = row(r, "flashinfer_conventions_undeclared", c);
    EXPECT_NE(bad.at("verdict"), "PASS") << c << ": " << reasons(bad);
    EXPECT_NE(bad.at("verdict"), "SKIPPED") << c;
  }
  // What the kernel declared is what the certificate records, with where it ran.
  const auto& k = kernel(r, "flashinfer_conventions_cpu");
  const auto& conv = k.at("declared").at("conventions");
  EXPECT_EQ(conv.at("lse_base"), "2");
  EXPECT_EQ(conv.at("lse_layout"), "[b,s_q,h]");
  EXPECT_EQ(conv.at("empty_row_lse"), "-inf");
  EXPECT_EQ(conv.at("indices"), "global_slots");
  const auto& origin = k.at("origin");
  EXPECT_EQ(origin.at("kind"), "python");
  EXPECT_EQ(origin.at("spec"), fi.string() + ":KERNEL");
  EXPECT_EQ(fs::path(origin.at("python").get<std::string>()), fs::path(kTorchPython));
  const auto versions = run_command(kTorchPython + " -c 'import platform, torch; print(platform.python_version(), torch.__version__)'");
  EXPECT_EQ(origin.at("python_version").get<std::string>() + " " + origin.at("torch_version").get<std::string>() + "\n",
            versions.out);
  // The kernel's own can_implement: its refusal is NOT_CLAIMED with its words, never against it.
  EXPECT_EQ(row(r, "door_three_heads", "h3_sq2_short").at("verdict"), "PASS");
  const auto& nc = row(r, "door_three_heads", "sparse_bf16_topk16");
  EXPECT_EQ(nc.at("verdict"), "NOT_CLAIMED");
  EXPECT_NE(reasons(nc).find("16 heads only as 3 (the kernel's can_implement)"), std::string::npos) << reasons(nc);
}

// The field's prefills (mla_door.adapters.flash_attn, mla_door.adapters.flashinfer_prefill) over
// their CPU stand-ins: FlashAttention 2 (V padded to 192, +inf for an empty row), 3 (-inf) and
// FlashInfer's ragged prefill (base-2 lse laid out [total_q, h], -inf) green through the host's
// conversions on every stored and drawn prefill case, each a prefill-only implementation run in
// the door's children; the stand-in's top-left mask and its cu_seqlens read one sequence off red
// wherever the rows' shapes say the bug changes what is attended; FA3's code declared with FA2's
// empty-row lse red exactly on the cases with a row that attends nothing; FlashInfer's natural-log
// lse under its base-2 declaration red on the lse and only where some row attends a key.
TEST_F(CertifyPython, PrefillsOfTheFieldCertifyThroughTheDoorAndTheirBugsAreRed) {
  const auto fa = kExamples / "flash_attn_cpu.py";
  const auto fi = kExamples / "flashinfer_prefill_cpu.py";
  std::string args = " --family prefill --family fresh";
  for (const char* a : {"FA2", "FA3", "BUG_TOP_LEFT", "BUG_CU_SEQLENS", "FA3_DECLARED_PLUS_INF"}) {
    args += " --python " + quote(fa.string() + ":" + a);
  }
  for (const char* a : {"RAGGED", "BUG_NATURAL_LSE"}) args += " --python " + quote(fi.string() + ":" + a);
  const auto r = certify(args, torch_path());
  ASSERT_EQ(r.status, 1) << r.output;  // the bugs are red
  ASSERT_EQ(r.cert.at("kernels").size(), 7u) << "prefill-only kernels: one implementation each";
  // Whether some sequence of a row's recorded shape has (s_q, s_k) with `pred`.
  const auto some = [](const json& c, auto pred) {
    const auto& q = c.at("shape").at("seqlens_q");
    const auto& k = c.at("shape").at("seqlens_k");
    for (std::size_t i = 0; i < q.size(); ++i) {
      if (pred(q[i].get<int64_t>(), k[i].get<int64_t>())) return true;
    }
    return false;
  };
  const auto causal = [](const json& c) { return c.at("shape").at("causal").get<bool>(); };
  const auto empty_row = [&](const json& c) {
    return some(c, [&](int64_t q, int64_t k) { return q >= 1 && (causal(c) ? q > k : k == 0); });
  };
  for (const char* name : {"flash_attn2_cpu_standin", "flash_attn3_cpu_standin", "flashinfer_ragged_cpu_standin"}) {
    const auto& k = kernel(r, name);
    EXPECT_EQ(k.at("kinds"), json::array({"prefill"})) << name;
    EXPECT_EQ(k.at("origin").at("entry"), "prefill") << name;
    EXPECT_EQ(k.at("origin").at("isolation"), "child_per_case") << name;
    int stored = 0, drawn = 0;
    for (const auto& c : k.at("cases")) {
      EXPECT_EQ(c.at("verdict"), "PASS") << name << " " << c.at("case") << ": " << reasons(c);
      (c.at("family") == "fresh" ? drawn : stored)++;
    }
    EXPECT_GT(stored, 0) << name;
    EXPECT_GT(drawn, 0) << name;
  }
  const auto& fa2 = kernel(r, "flash_attn2_cpu_standin").at("declared");
  EXPECT_EQ(fa2.at("conventions").at("v_padded"), true);
  EXPECT_EQ(fa2.at("conventions").at("empty_row_lse"), "+inf");
  EXPECT_EQ(fa2.at("precision").at("operands"), "bf16");
  EXPECT_EQ(kernel(r, "flash_attn3_cpu_standin").at("declared").at("conventions").at("empty_row_lse"), "-inf");
  const auto& ragged = kernel(r, "flashinfer_ragged_cpu_standin").at("declared").at("conventions");
  EXPECT_EQ(ragged.at("lse_base"), "2");
  EXPECT_EQ(ragged.at("lse_layout"), "[b,s_q,h]");
  EXPECT_EQ(ragged.at("empty_row_lse"), "-inf");
  EXPECT_EQ(ragged.at("v_padded"), false);
  int red = 0;
  for (const auto& c : kernel(r, "flash_attn2_cpu_bug_top_left").at("cases")) {
    // Top-left and bottom-right differ only on a causal sequence with s_q != s_k that attends keys.
    const bool differs = causal(c) && some(c, [](int64_t q, int64_t k) { return q >= 1 && k >= 1 && q != k; });
    if (!differs) {
      EXPECT_EQ(c.at("verdict"), "PASS") << c.at("case") << ": " << reasons(c);
    }
    red += c.at("verdict") == "FAIL";
  }
  EXPECT_GT(red, 0);
  red = 0;
  for (const auto& c : kernel(r, "flash_attn3_cpu_bug_cu_seqlens_off_by_one").at("cases")) {
    EXPECT_NE(c.at("verdict"), "ERROR") << c.at("case") << ": " << reasons(c);
    red += c.at("verdict") == "FAIL";
  }
  EXPECT_GT(red, 0);
  red = 0;
  for (const auto& c : kernel(r, "flash_attn3_cpu_declared_plus_inf").at("cases")) {
    EXPECT_EQ(c.at("verdict"), empty_row(c) ? "FAIL" : "PASS") << c.at("case") << ": " << reasons(c);
    red += c.at("verdict") == "FAIL";
  }
  EXPECT_GT(red, 0);
  red = 0;
  for (const auto& c : kernel(r, "flashinfer_ragged_cpu_bug_natural_lse").at("cases")) {
    // A natural lse read as base 2 is wrong wherever it is finite, that is where a row attends a key.
    const bool attends = some(c, [](int64_t q, int64_t k) { return q >= 1 && k >= 1; });
    if (!attends) {
      EXPECT_EQ(c.at("verdict"), "PASS") << c.at("case") << ": " << reasons(c);
    }
    if (c.at("verdict") == "FAIL") {
      ++red;
      EXPECT_NE(reasons(c).find("lse"), std::string::npos) << c.at("case") << ": " << reasons(c);
    }
    EXPECT_NE(c.at("verdict"), "ERROR") << c.at("case") << ": " << reasons(c);
  }
  EXPECT_GT(red, 0);
}

// vLLM's merge_attn_states and FlashInfer's merge_state (mla_door.adapters.merge_states) over the
// CPU stand-ins: green through the host's lse conversions on every stored and drawn merge case they
// claim (FlashInfer's float32 states NOT_CLAIMED, with the reason), each a merge-only
// implementation in the door's children; each stand-in bug red somewhere and never an ERROR.
TEST_F(CertifyPython, MergesOfTheFieldCertifyThroughTheDoorAndTheirBugsAreRed) {
  const auto m = kExamples / "merge_cpu.py";
  std::string args = " --family merge --family fresh";
  for (const char* a : {"VLLM", "FLASHINFER", "BUG_BOTH_EMPTY_NAN", "BUG_POS_INF_AS_NUMBER", "BUG_NATURAL_EXP"}) {
    args += " --python " + quote(m.string() + ":" + a);
  }
  const auto r = certify(args, torch_path());
  ASSERT_EQ(r.status, 1) << r.output;
  ASSERT_EQ(r.cert.at("kernels").size(), 5u) << "merge-only kernels: one implementation each";
  for (const char* name : {"vllm_merge_cpu_standin", "flashinfer_merge_cpu_standin"}) {
    const auto& k = kernel(r, name);
    EXPECT_EQ(k.at("kinds"), json::array({"merge"})) << name;
    EXPECT_EQ(k.at("origin").at("entry"), "merge") << name;
    int pass = 0;
    for (const auto& c : k.at("cases")) {
      const bool f32 = c.at("shape").at("dtype") == "f32";
      if (f32 && std::string(name).starts_with("flashinfer")) {
        EXPECT_EQ(c.at("verdict"), "NOT_CLAIMED") << c.at("case") << ": " << reasons(c);
        continue;
      }
      EXPECT_EQ(c.at("verdict"), "PASS") << name << " " << c.at("case") << ": " << reasons(c);
      ++pass;
    }
    EXPECT_GT(pass, 0) << name;
  }
  const auto& conv = kernel(r, "flashinfer_merge_cpu_standin").at("declared").at("conventions");
  EXPECT_EQ(conv.at("lse_base"), "2");
  EXPECT_EQ(conv.at("lse_layout"), "[n,h]");
  for (const char* name : {"vllm_merge_cpu_bug_both_empty_nan", "vllm_merge_cpu_bug_pos_inf_as_number",
                           "flashinfer_merge_cpu_bug_natural_exp"}) {
    int red = 0;
    for (const auto& c : kernel(r, name).at("cases")) {
      EXPECT_NE(c.at("verdict"), "ERROR") << name << " " << c.at("case") << ": " << reasons(c);
      red += c.at("verdict") == "FAIL";
    }
    EXPECT_GT(red, 0) << name;
  }
}

// vLLM's top_k_per_row_prefill (mla_door.adapters.vllm_topk) over its CPU stand-in: green on every
// drawn top-k case it claims (k = 2048) once the host makes its relative indices absolute; the
// stand-in writing absolute columns under the relative convention, and padding with masked
// positions, red on every one of them, each for its reason.
TEST_F(CertifyPython, VllmTopkCertifiesThroughTheDoorAndItsBugsAreRed) {
  const auto t = kExamples / "vllm_topk_cpu.py";
  std::string args = " --family fresh";
  for (const char* a : {"KERNEL", "BUG_ABSOLUTE", "BUG_KEEPS_MASKED", "BUG_SECOND_CALL_DIFFERS"}) {
    args += " --python " + quote(t.string() + ":" + a);
  }
  const auto r = certify(args, torch_path());
  ASSERT_EQ(r.status, 1) << r.output;
  const auto& k = kernel(r, "vllm_topk_cpu_standin");
  EXPECT_EQ(k.at("kinds"), json::array({"topk"}));
  EXPECT_EQ(k.at("declared").at("conventions").at("index_base"), "relative");
  ASSERT_FALSE(k.at("cases").empty());
  // Its order changes from call to call (the stand-in rotates each row): an unsorted top-k's calls
  // are held to the same set per row, not to the same order.
  for (const auto& c : k.at("cases")) EXPECT_EQ(c.at("verdict"), "PASS") << c.at("case") << ": " << reasons(c);
  for (const auto& [name, words] : std::vector<std::pair<std::string, std::string>>{
           {"vllm_topk_cpu_bug_absolute_indices", "outside the "},  // the valid range, or the logits row
           {"vllm_topk_cpu_bug_keeps_masked", "a masked position"},
           {"vllm_topk_cpu_bug_second_call_differs", "differs between repeated calls (call 1 vs 2) in the values of row"}}) {
    const auto& b = kernel(r, name);
    ASSERT_EQ(b.at("cases").size(), k.at("cases").size()) << name;
    for (const auto& c : b.at("cases")) {
      EXPECT_EQ(c.at("verdict"), "FAIL") << name << " " << c.at("case") << ": " << reasons(c);
      EXPECT_NE(reasons(c).find(words), std::string::npos) << name << " " << c.at("case") << ": " << reasons(c);
    }
  }
}

// DeepGEMM's indexer logits (mla_door.adapters.deepgemm) over its CPU stand-in: green on the stored
// indexer case it claims (64 heads) and on every drawn call, paged and ragged; the same arithmetic
// called without clean_logits (as vLLM's decode path calls it) red by the -inf rule everywhere;
// each planted bug red exactly on the calls it changes.
TEST_F(CertifyPython, DeepGemmIndexerLogitsCertifyThroughTheDoorAndTheirBugsAreRed) {
  const auto t = kExamples / "deepgemm_cpu.py";
  std::string args = " --family indexer --family fresh";
  for (const char* a : {"KERNEL", "UNCLEAN", "BUG_NO_RELU", "BUG_SCALE_AFTER_EACH_TOKEN", "BUG_SEES_NEXT_TOKEN"}) {
    args += " --python " + quote(t.string() + ":" + a);
  }
  const auto r = certify(args, torch_path());
  ASSERT_EQ(r.status, 1) << r.output;
  ASSERT_EQ(r.cert.at("kernels").size(), 5u) << "indexer-logits-only kernels: one implementation each";
  const auto& k = kernel(r, "deepgemm_logits_cpu_standin");
  EXPECT_EQ(k.at("kinds"), json::array({"indexer_logits"}));
  EXPECT_EQ(k.at("origin").at("entry"), "indexer_logits");
  EXPECT_EQ(k.at("declared").at("heads"), json::array({32, 64}));
  const auto judged = [](const json& c) { return c.at("verdict") != "NOT_CLAIMED"; };
  int stored = 0, paged2 = 0, ragged = 0;
  for (const auto& c : k.at("cases")) {
    if (!judged(c)) continue;
    EXPECT_EQ(c.at("verdict"), "PASS") << c.at("case") << ": " << reasons(c);
    stored += c.at("family") == "indexer";
    paged2 += c.at("shape").at("layout") == "paged" && c.at("shape").at("next_n") == 2;
    ragged += c.at("shape").at("layout") == "ragged";
  }
  EXPECT_GT(stored, 0);
  EXPECT_GT(paged2, 0);
  EXPECT_GT(ragged, 0);
  const auto red_where = [&](const char* name, const std::function<bool(const json&)>& applies, const std::string& words) {
    const auto& b = kernel(r, name);
    int red = 0;
    for (const auto& c : b.at("cases")) {
      if (!judged(c)) continue;
      const bool expect_red = applies(c.at("shape"));
      EXPECT_EQ(c.at("verdict"), expect_red ? "FAIL" : "PASS") << name << " " << c.at("case") << ": " << reasons(c);
      if (expect_red) {
        ++red;
        EXPECT_NE(reasons(c).find(words), std::string::npos) << name << " " << c.at("case") << ": " << reasons(c);
      }
    }
    EXPECT_GT(red, 0) << name;
  };
  const auto everywhere = [](const json&) { return true; };
  red_where("deepgemm_logits_cpu_unclean", everywhere, "outside the row's valid range");
  red_where("deepgemm_logits_cpu_bug_no_relu", everywhere, "indexer.logits.f32");
  red_where("deepgemm_logits_cpu_bug_scale_after_each_token", [](const json& s) { return s.at("layout") == "paged"; },
            "logit");
  red_where("deepgemm_logits_cpu_bug_sees_next_token",
            [](const json& s) { return s.at("layout") == "paged" && s.at("next_n") == 2; },
            "outside the row's valid range");
}

// FlashMLA's flash_mla_sparse_fwd (mla_door.adapters.flashmla:sparse_prefill) over its CPU stand-in:
// green on every drawn call (its bf16 arithmetic under the decode entries and their ratio rule),
// each bug red on every one, for the comparison that shows it.
TEST_F(CertifyPython, FlashMlaSparsePrefillCertifiesThroughTheDoorAndItsBugsAreRed) {
  const auto t = kExamples / "flashmla_sparse_cpu.py";
  std::string args = " --family fresh";
  for (const char* a : {"KERNEL", "BUG_MINUS_ONE_AS_ZERO", "BUG_LSE_BASE2"}) {
    args += " --python " + quote(t.string() + ":" + a);
  }
  const auto r = certify(args, torch_path());
  ASSERT_EQ(r.status, 1) << r.output;
  const auto& k = kernel(r, "flashmla_sparse_prefill_cpu_standin");
  EXPECT_EQ(k.at("kinds"), json::array({"sparse_prefill"}));
  EXPECT_EQ(k.at("origin").at("capabilities").at("heads"), json::array({64, 128}));
  ASSERT_EQ(k.at("cases").size(), 5u) << "three calls, two chain cases";
  for (const auto& c : k.at("cases")) EXPECT_EQ(c.at("verdict"), "PASS") << c.at("case") << ": " << reasons(c);
  for (const auto& [name, words] : std::vector<std::pair<std::string, std::string>>{
           {"flashmla_sparse_prefill_cpu_bug_minus_one_as_zero", "out: "}, {"flashmla_sparse_prefill_cpu_bug_lse_base2", "lse: "}}) {
    const auto& b = kernel(r, name);
    ASSERT_EQ(b.at("cases").size(), 5u) << name;
    for (const auto& c : b.at("cases")) {
      // A chain's -1 entries pad rows that selected position 0 already (drawn_kinds' test).
      if (name == "flashmla_sparse_prefill_cpu_bug_minus_one_as_zero" &&
          c.at("case").get<std::string>().rfind("sparse_chain_", 0) == 0)
        continue;
      EXPECT_EQ(c.at("verdict"), "FAIL") << name << " " << c.at("case") << ": " << reasons(c);
      EXPECT_NE(reasons(c).find(words), std::string::npos) << name << " " << c.at("case") << ": " << reasons(c);
    }
  }
}

// V3.2's sparse path as one Python kernel (mla_door.stack: DeepGEMM's logits, FlashInfer's top-k,
// FlashMLA's sparse prefill, each adapter over its stand-in): every entry green as its own
// implementation and the chain green; a bug in the last link red on the chain too, a bug in the
// first link red on the chain naming that link (its logits are never judged as the attention's).
TEST_F(CertifyPython, AV32StackCertifiesEachLinkAndTheChainAndABadLinkIsNamed) {
  const auto t = kExamples / "v32_stack_cpu.py";
  std::string args = " --family fresh";
  for (const char* a : {"STACK", "BUG_ATTENTION_LSE_BASE2", "BUG_LOGITS_NO_RELU"}) args += " --python " + quote(t.string() + ":" + a);
  const auto r = certify(args, torch_path());
  ASSERT_EQ(r.status, 1) << r.output;
  for (const char* entry : {"indexer_logits", "topk", "sparse_prefill"}) {
    const auto& k = kernel(r, std::string("v32_stack_cpu_standin_") + entry);
    ASSERT_FALSE(k.at("cases").empty()) << entry;
    for (const auto& c : k.at("cases")) EXPECT_EQ(c.at("verdict"), "PASS") << entry << " " << c.at("case") << ": " << reasons(c);
  }
  const auto chain_rows = [&](const std::string& name) {
    std::vector<json> rows;
    for (const auto& c : kernel(r, name).at("cases"))
      if (c.at("case").get<std::string>().rfind("sparse_chain_", 0) == 0) rows.push_back(c);
    return rows;
  };
  const auto good = chain_rows("v32_stack_cpu_standin_sparse_prefill");
  ASSERT_EQ(good.size(), 2u);
  for (const auto& c : good) {
    EXPECT_NE(c.at("description").get<std::string>().find("by v32_stack_cpu_standin_indexer_logits, their top-64 by "
                                                         "v32_stack_cpu_standin_topk"),
              std::string::npos);
  }
  for (const auto& c : chain_rows("v32_stack_cpu_bug_attention_lse_base2_sparse_prefill")) {
    EXPECT_EQ(c.at("verdict"), "FAIL") << c.at("case");
    EXPECT_NE(reasons(c).find("lse: "), std::string::npos) << reasons(c);
  }
  const auto bad_first = chain_rows("v32_stack_cpu_bug_logits_no_relu_sparse_prefill");
  ASSERT_EQ(bad_first.size(), 2u);
  for (const auto& c : bad_first) {
    EXPECT_EQ(c.at("verdict"), "FAIL") << c.at("case");
    EXPECT_NE(reasons(c).find("indexer logits (v32_stack_cpu_bug_logits_no_relu_indexer_logits): "), std::string::npos)
        << reasons(c);
    EXPECT_FALSE(c.contains("out") && c.at("out").is_object()) << "the attention was never called on wrong logits";
  }
  // The first link's own rows are red too, where its kind judges it.
  bool indexer_red = false;
  for (const auto& c : kernel(r, "v32_stack_cpu_bug_logits_no_relu_indexer_logits").at("cases"))
    indexer_red |= c.at("verdict") == "FAIL";
  EXPECT_TRUE(indexer_red);
}

// vLLM's indexer_k_quant_and_cache (mla_door.adapters.vllm_indexer_cache) over its CPU stand-in:
// byte for byte the C++ oracle's cache on every drawn ue8m0 append (the format it claims), and each
// wrong write red on every one (each drawn append has skipped tokens, keys under the clamp and
// blocks of several tokens).
TEST_F(CertifyPython, VllmIndexerCacheAppendIsExactThroughTheDoorAndItsBugsAreRed) {
  const auto t = kExamples / "vllm_indexer_cache_cpu.py";
  std::string args = " --family fresh";
  for (const char* a : {"KERNEL", "BUG_SCALE_AFTER_EACH_TOKEN", "BUG_CLAMP_AFTER_DIVIDE", "BUG_WRITES_SKIPPED_SLOTS"}) {
    args += " --python " + quote(t.string() + ":" + a);
  }
  const auto r = certify(args, torch_path());
  ASSERT_EQ(r.status, 1) << r.output;
  const auto& k = kernel(r, "vllm_indexer_cache_cpu_standin");
  EXPECT_EQ(k.at("kinds"), json::array({"indexer_append"}));
  EXPECT_EQ(k.at("declared").at("scale_fmts"), json::array({"ue8m0"}));
  EXPECT_EQ(k.at("declared").at("conventions").at("fp32_scale_op"), "divide");
  ASSERT_FALSE(k.at("cases").empty());
  for (const auto& c : k.at("cases")) EXPECT_EQ(c.at("verdict"), "PASS") << c.at("case") << ": " << reasons(c);
  for (const char* name : {"vllm_indexer_cache_cpu_bug_scale_after_each_token", "vllm_indexer_cache_cpu_bug_clamp_after_divide",
                           "vllm_indexer_cache_cpu_bug_writes_skipped_slots"}) {
    const auto& b = kernel(r, name);
    ASSERT_EQ(b.at("cases").size(), k.at("cases").size()) << name;
    for (const auto& c : b.at("cases")) EXPECT_EQ(c.at("verdict"), "FAIL") << name << " " << c.at("case") << ": " << reasons(c);
  }
}

// FlashInfer's top_k_ragged_transform (mla_door.adapters.flashinfer_topk) over its CPU stand-in:
// it declares ranges of valid positions only (it returns a short row whole, masked positions
// included), so its drawn cases hold no -inf inside a range and it is green on every one; the same
// code without the declaration is given masked positions and red on them; the stand-in that ranks
// from column 0 whatever the row's start red where rows are longer than k.
TEST_F(CertifyPython, FlashInferTopkIsGreenOnTheValidRangesItDeclaresAndRedWithoutTheDeclaration) {
  const auto t = kExamples / "flashinfer_topk_cpu.py";
  std::string args = " --family fresh --seed 11";
  for (const char* a : {"KERNEL", "UNDECLARED_RANGES", "BUG_IGNORES_ROW_STARTS"}) {
    args += " --python " + quote(t.string() + ":" + a);
  }
  const auto r = certify(args, torch_path());
  ASSERT_EQ(r.status, 1) << r.output;
  const auto& k = kernel(r, "flashinfer_topk_cpu_standin");
  EXPECT_EQ(k.at("kinds"), json::array({"topk"}));
  EXPECT_EQ(k.at("declared").at("range_all_valid"), true);
  EXPECT_EQ(k.at("origin").at("capabilities").at("range_all_valid"), true);
  ASSERT_FALSE(k.at("cases").empty());
  for (const auto& c : k.at("cases")) {
    EXPECT_EQ(c.at("verdict"), "PASS") << c.at("case") << ": " << reasons(c);
    EXPECT_NE(c.at("description").get<std::string>().find("no masked position inside a range"), std::string::npos);
  }
  const auto& undeclared = kernel(r, "flashinfer_topk_cpu_undeclared_ranges");
  ASSERT_EQ(undeclared.at("cases").size(), k.at("cases").size());
  for (const auto& c : undeclared.at("cases")) {
    EXPECT_EQ(c.at("verdict"), "FAIL") << c.at("case") << ": " << reasons(c);
    EXPECT_NE(reasons(c).find("a masked position"), std::string::npos) << c.at("case") << ": " << reasons(c);
  }
  // Ranking from column 0 changes nothing where a row is no longer than k (it is returned whole,
  // from its start); where rows are longer, the ragged rows starting past 0 lose their top members.
  // Whether a drawn ragged row is longer than k is the draw's: the seed is fixed so that one is.
  int red = 0;
  for (const auto& c : kernel(r, "flashinfer_topk_cpu_bug_ignores_row_starts").at("cases")) {
    const bool longer = c.at("case").get<std::string>().find("rows_longer_than_k") != std::string::npos;
    if (!longer) {
      EXPECT_EQ(c.at("verdict"), "PASS") << c.at("case") << ": " << reasons(c);
    }
    EXPECT_NE(c.at("verdict"), "ERROR") << c.at("case") << ": " << reasons(c);
    if (c.at("verdict") == "FAIL") {
      ++red;
      EXPECT_NE(reasons(c).find("was dropped"), std::string::npos) << c.at("case") << ": " << reasons(c);
    }
  }
  EXPECT_GT(red, 0);
}

TEST_F(CertifyPython, EachBrokenKernelIsRedForTheFaultItCarries) {
  const auto r = certify(kOneCase + spec("WRITES_PAST_OUT") + spec("CHANGES_Q") + spec("DRIFTS") + spec("RAISES") +
                             spec("KILLED") + spec("REFUSES"),
                         torch_path());
  ASSERT_EQ(r.status, 1) << r.output;
  const auto expect = [&](const std::string& k, const char* verdict, const std::string& words) {
    const auto& c = row(r, k, "h3_sq2_short");
    EXPECT_EQ(c.at("verdict"), verdict) << k << ": " << reasons(c);
    EXPECT_NE(reasons(c).find(words), std::string::npos) << k << ": " << reasons(c);
  };
  // The parent's canaries, its byte comparison of the inputs and of every call's outputs.
  expect("door_writes_past_out", "FAIL", "wrote 64 bytes past out");
  expect("door_changes_q", "FAIL", "input q changed by call 1");
  expect("door_drifts", "FAIL", "out differs between repeated runs (call 1 vs call 2");
  // The child's record of the exception, and the signal the parent saw.
  expect("door_raises", "ERROR", "ValueError: the door's test kernel refuses to work \\\\x1B[2J, déjà vu (at door_kernels.py:");
  expect("door_killed", "ERROR", "killed by signal SIGKILL");
  // A refusal of a shape it claims is a broken claim, counted against it with its words.
  expect("door_refuses", "FAIL", "page size 16 not today");
  EXPECT_EQ(row(r, "door_refuses", "h3_sq2_short").at("cause"), "broken_claim");
}

TEST_F(CertifyPython, ABadSpecOrDeclarationIsRefusedNamingWhatIsWrong) {
  // Through the CLI, one of each kind (every rule of the declaration is below, without Python).
  const auto refused = [&](const std::string& args, const std::string& words) {
    const auto r = certify(kOneCase + args, torch_path());
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(words), std::string::npos) << args << "\n" << r.output;
    EXPECT_TRUE(r.cert.is_null()) << "a refused run writes no certificate";
  };
  refused(spec("BAD_HEADS"), "declaration field 'caps.heads' range [0, 128] is empty or below 1");
  refused(spec("NOT_A_KERNEL"), "is a int, not an mla_door.Kernel");
  refused(" --python no_such_module_of_the_door_tests:KERNEL",
          "ModuleNotFoundError: No module named 'no_such_module_of_the_door_tests'");
  refused(" --python " + quote(kKernels), "expected module.path:ATTR or path/to/file.py:ATTR");
  // The door itself: MLA_DOOR_PATH, when set, is the one place looked in.
  TempDir empty;
  const auto r = certify(kOneCase + spec("GOOD"), torch_path() + " MLA_DOOR_PATH=" + empty.path().string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("MLA_DOOR_PATH=" + empty.path().string() + " holds no mla_door/child.py"), std::string::npos)
      << r.output;
}

// mla_door.describe(kernel) of a plain kernel, as the child writes it.
json declaration() {
  return json::parse(R"({"name": "k", "version": "1", "description": "d", "backend": "cpu", "out_dtype": "f32",
    "caps": {"cache_formats": ["bf16"], "min_heads": 1, "max_heads": 128, "min_s_q": 1, "max_s_q": 64,
             "page_sizes": [], "dense": true, "sparse": false, "varlen": true},
    "conventions": {"lse_base": "e", "lse_layout": "[b,h,s_q]", "empty_row_lse": "+inf", "indices": "positions"},
    "precision": null, "can_implement": false})");
}

TEST(PythonDeclaration, EveryRuleOfACDescriptorNamesTheFieldItRefuses) {
  using mla::certify::validate_python_declaration;
  const auto d = validate_python_declaration(declaration());
  EXPECT_EQ(d.info.name, "k");
  EXPECT_FALSE(d.info.compute.has_value());
  auto with = [](const char* pointer, json v) {
    auto j = declaration();
    if (v.is_discarded()) j.erase(json::json_pointer(pointer).back());
    else j[json::json_pointer(pointer)] = std::move(v);
    return j;
  };
  auto p = declaration();
  p["out_dtype"] = "bf16";
  p["precision"] = {{"operands", "bf16"}, {"accumulate", "f32"}};
  p["conventions"] = {{"lse_base", "2"}, {"lse_layout", "[b,s_q,h]"}, {"empty_row_lse", "-inf"}, {"indices", "global_slots"}};
  const auto declared = validate_python_declaration(p);
  ASSERT_TRUE(declared.info.compute.has_value());
  EXPECT_EQ(declared.info.compute->operands, mla::OutDType::bf16);
  EXPECT_EQ(declared.info.conventions.indices, mla::IndexNumbering::global_slots);
  EXPECT_EQ(declared.info.conventions.lse_layout, mla::LseLayout::b_sq_h);

  const std::vector<std::pair<json, std::string>> bad = {
      {with("/name", "Bad-Name"), "declaration field 'name' is 'Bad-Name', not [a-z0-9_]+"},
      {with("/name", json::value_t::discarded), "declaration has no field 'name'"},
      {with("/name", 7), "declaration field 'name' is 7, expected a string"},
      {with("/version", ""), "declaration field 'version' is empty"},
      {with("/backend", "rocm"), "declaration field 'backend' is 'rocm', not one of cpu, cuda"},
      {with("/out_dtype", "f64"), "declaration field 'out_dtype' is 'f64', not one of f32, bf16"},
      {with("/caps/cache_formats", json::array()), "declaration field 'caps.cache_formats' is empty"},
      {with("/caps/cache_formats", {"int4"}), "declaration field 'caps.cache_formats' holds \"int4\""},
      {with("/caps/min_heads", 0), "declaration field 'caps.heads' range [0, 128] is empty or below 1"},
      {with("/caps/max_heads", "128"), "declaration field 'caps.max_heads' is \"128\", expected an integer"},
      {with("/caps/max_s_q", 0), "declaration field 'caps.s_q' range [1, 0] is empty or below 1"},
      {with("/caps/page_sizes", {64, 0}), "declaration field 'caps.page_sizes[1]' = 0 is not a positive page size"},
      {with("/caps/page_sizes", json(std::vector<int>(17, 64))), "declaration field 'caps.page_sizes' has 17 entries, at most 16"},
      {with("/caps/dense", false), "declaration fields 'caps.dense' and 'caps.sparse' are both false"},
      {with("/caps/varlen", 1), "declaration field 'caps.varlen' is 1, expected true or false"},
      {with("/conventions/lse_base", "10"), "declaration field 'conventions.lse_base' is '10', not one of e, 2"},
      {with("/conventions/lse_layout", "[h,b,s_q]"), "declaration field 'conventions.lse_layout' is '[h,b,s_q]'"},
      {with("/conventions/empty_row_lse", "nan"), "declaration field 'conventions.empty_row_lse' is 'nan'"},
      {with("/conventions/indices", "slots"), "declaration field 'conventions.indices' is 'slots', not one of positions, global_slots"},
      {with("/precision", json::value_t::discarded), "declaration has no field 'precision'"},
      {with("/precision", {{"operands", "bf16"}, {"accumulate", "bf16"}}), "declaration field 'precision': class"},
      {with("/precision", {{"operands", "fp8"}, {"accumulate", "f32"}}), "declaration field 'precision.operands' is 'fp8'"},
      {with("/can_implement", "yes"), "declaration field 'can_implement' is \"yes\", expected true or false"},
  };
  // The prefill entry (mla_door.Prefill): a prefill-only declaration, and one rule per field.
  json pre = {{"name", "k_prefill"},
              {"description", "a prefill"},
              {"out_dtype", "bf16"},
              {"caps", {{"min_heads", 1}, {"max_heads", 128}, {"causal", true}, {"non_causal", true}, {"varlen", true},
                        {"max_total_tokens", 1 << 20}}},
              {"conventions", {{"lse_base", "e"}, {"lse_layout", "[b,h,s_q]"}, {"empty_row_lse", "-inf"},
                               {"v_padded", true}, {"causal_alignment", "bottom_right"}}},
              {"precision", {{"operands", "bf16"}, {"accumulate", "f32"}}}};
  auto only_prefill = declaration();
  only_prefill["decode"] = false;
  only_prefill["prefill"] = pre;
  const auto po = validate_python_declaration(only_prefill);
  EXPECT_FALSE(po.decodes);
  ASSERT_TRUE(po.prefill.has_value());
  EXPECT_EQ(po.prefill->name, "k_prefill");
  EXPECT_TRUE(po.prefill->conventions.v_padded);
  EXPECT_EQ(po.prefill->conventions.empty_row_lse, mla::EmptyRowLse::neg_inf);
  EXPECT_EQ(po.prefill->out_dtype, mla::OutDType::bf16);
  const auto with_prefill = [&](const char* pointer, json v) {
    auto j = only_prefill;
    if (v.is_discarded()) j["prefill"].erase(json::json_pointer(pointer).back());
    else j["prefill"][json::json_pointer(pointer)] = std::move(v);
    return j;
  };
  auto no_entry = declaration();
  no_entry["decode"] = false;
  auto same_name = declaration();
  same_name["prefill"] = pre;
  same_name["prefill"]["name"] = "k";
  auto neither = with_prefill("/caps/causal", false);
  neither["prefill"]["caps"]["non_causal"] = false;
  std::vector<std::pair<json, std::string>> bad_prefill = {
      {no_entry, "declaration has no decode (\"decode\": false) and no prefill"},
      {same_name, "declaration field 'prefill.name' is 'k', another entry's"},
      {with_prefill("/name", "Bad-Name"), "prefill entry name 'Bad-Name' is not [a-z0-9_]+"},
      {with_prefill("/out_dtype", "f64"), "declaration field 'prefill.out_dtype' is 'f64', not one of f32, bf16"},
      {with_prefill("/caps/min_heads", 0), "prefill heads range [0, 128] is empty or below 1"},
      {neither, "prefill.calls 0x4 must be MLA_PLUGIN_PREFILL_* bits including CAUSAL or"},
      {with_prefill("/caps/max_total_tokens", 0), "prefill.max_total_tokens 0 is below 1"},
      {with_prefill("/conventions/lse_layout", "[h,total_q]"), "declaration field 'prefill.conventions.lse_layout' is '[h,total_q]'"},
      {with_prefill("/conventions/v_padded", "yes"), "declaration field 'prefill.conventions.v_padded' is \"yes\", expected true or false"},
      {with_prefill("/conventions/causal_alignment", "left"), "declaration field 'prefill.conventions.causal_alignment' is 'left'"},
      {with_prefill("/precision", json::value_t::discarded), "declaration has no field 'prefill.precision'"},
      {with_prefill("/precision", {{"operands", "bf16"}, {"accumulate", "bf16"}}), "prefill precision class"},
  };
  // The merge entry (mla_door.Merge).
  auto only_merge = declaration();
  only_merge["decode"] = false;
  only_merge["merge"] = {{"name", "k_merge"},
                         {"description", "a merge"},
                         {"dtypes", {"bf16", "f16"}},
                         {"head_dims", json::array()},
                         {"conventions", {{"lse_base", "2"}, {"lse_layout", "[n,h]"}, {"both_empty_lse", "-inf"}}}};
  const auto mo = validate_python_declaration(only_merge);
  ASSERT_TRUE(mo.merge.has_value());
  EXPECT_EQ(mo.merge->dtypes, (std::vector<mla::StateDType>{mla::StateDType::bf16, mla::StateDType::f16}));
  EXPECT_EQ(mo.merge->conventions.lse_layout, mla::LseLayout::b_sq_h);
  const auto with_merge = [&](const char* pointer, json v) {
    auto j = only_merge;
    j["merge"][json::json_pointer(pointer)] = std::move(v);
    return j;
  };
  bad_prefill.push_back({with_merge("/dtypes", {"f64"}), "declaration field 'merge.dtypes' holds \"f64\""});
  bad_prefill.push_back({with_merge("/dtypes", json::array()), "merge.dtypes 0x0 must be a non-empty set"});
  bad_prefill.push_back({with_merge("/head_dims", {128, 0}), "declaration field 'merge.head_dims[1]' = 0"});
  bad_prefill.push_back({with_merge("/conventions/lse_layout", "[b,h,s_q]"), "declaration field 'merge.conventions.lse_layout'"});
  bad_prefill.push_back({with_merge("/name", "Bad-Name"), "merge entry name 'Bad-Name' is not [a-z0-9_]+"});
  // The top-k entry (mla_door.Topk).
  auto only_topk = declaration();
  only_topk["decode"] = false;
  only_topk["topk"] = {{"name", "k_topk"}, {"description", "a top-k"}, {"ks", {2048}}, {"max_n", 0},
                       {"index_base", "relative"}, {"sorted", false}, {"precision", "f32"}, {"range_all_valid", true}};
  const auto to = validate_python_declaration(only_topk);
  ASSERT_TRUE(to.topk.has_value());
  EXPECT_EQ(to.topk->ks, std::vector<int>{2048});
  EXPECT_EQ(to.topk->conventions.index_base, mla::IndexBase::relative);
  EXPECT_TRUE(to.topk->range_all_valid);
  const auto with_topk = [&](const char* pointer, json v) {
    auto j = only_topk;
    j["topk"][json::json_pointer(pointer)] = std::move(v);
    return j;
  };
  bad_prefill.push_back({with_topk("/ks", {0}), "declaration field 'topk.ks[0]' = 0 is not a positive k"});
  bad_prefill.push_back({with_topk("/index_base", "rel"), "declaration field 'topk.index_base' is 'rel'"});
  bad_prefill.push_back({with_topk("/precision", "fp8"), "declaration field 'topk.precision' is 'fp8'"});
  bad_prefill.push_back({with_topk("/max_n", -1), "topk.max_n -1 is negative"});
  bad_prefill.push_back({with_topk("/range_all_valid", 1), "declaration field 'topk.range_all_valid' is 1, expected true or false"});
  // The indexer logits entry (mla_door.IndexerLogits).
  auto only_logits = declaration();
  only_logits["decode"] = false;
  only_logits["indexer_logits"] = {{"name", "k_logits"}, {"description", "indexer logits"},
                                   {"layouts", {"paged", "ragged"}}, {"next_ns", {1, 2}}, {"heads", {64}},
                                   {"block_sizes", {64}}, {"max_context", 0}};
  const auto lo = validate_python_declaration(only_logits);
  ASSERT_TRUE(lo.indexer_logits.has_value());
  EXPECT_EQ(lo.indexer_logits->layouts.size(), 2u);
  EXPECT_EQ(lo.indexer_logits->next_ns, (std::vector<int>{1, 2}));
  EXPECT_EQ(lo.indexer_logits->heads, std::vector<int64_t>{64});
  const auto with_logits = [&](const char* pointer, json v) {
    auto j = only_logits;
    j["indexer_logits"][json::json_pointer(pointer)] = std::move(v);
    return j;
  };
  bad_prefill.push_back({with_logits("/layouts", {"paged", "blocked"}), "'indexer_logits.layouts' holds \"blocked\""});
  bad_prefill.push_back({with_logits("/layouts", json::array()), "indexer_logits.layouts 0x0 must be a non-empty set"});
  bad_prefill.push_back({with_logits("/next_ns", {3}), "'indexer_logits.next_ns' holds 3, not 1 or 2"});
  bad_prefill.push_back({with_logits("/heads", {0}), "'indexer_logits.heads[0]' = 0 is not a positive integer"});
  bad_prefill.push_back({with_logits("/block_sizes", "64"), "'indexer_logits.block_sizes'"});
  bad_prefill.push_back({with_logits("/max_context", -2), "indexer_logits.max_context -2 is negative"});
  // The indexer append entry (mla_door.IndexerAppend).
  auto only_append = declaration();
  only_append["decode"] = false;
  only_append["indexer_append"] = {{"name", "k_append"}, {"description", "indexer append"}, {"scale_fmts", {"ue8m0"}},
                                   {"block_sizes", json::array()}, {"fp32_scale_op", "divide"}};
  const auto ao = validate_python_declaration(only_append);
  ASSERT_TRUE(ao.indexer_append.has_value());
  EXPECT_EQ(ao.indexer_append->scale_fmts, std::vector<mla::ScaleFmt>{mla::ScaleFmt::ue8m0});
  const auto with_append = [&](const char* pointer, json v) {
    auto j = only_append;
    j["indexer_append"][json::json_pointer(pointer)] = std::move(v);
    return j;
  };
  bad_prefill.push_back({with_append("/scale_fmts", {"e8m0"}), "'indexer_append.scale_fmts' holds \"e8m0\""});
  bad_prefill.push_back({with_append("/scale_fmts", json::array()), "indexer_append.scale_fmts 0x0"});
  bad_prefill.push_back({with_append("/fp32_scale_op", "multiply"), "'indexer_append.fp32_scale_op' is 'multiply'"});
  bad_prefill.push_back({with_append("/block_sizes", {-1}), "'indexer_append.block_sizes[0]' = -1"});
  // The sparse prefill entry (mla_door.SparsePrefill).
  auto only_sparse = declaration();
  only_sparse["decode"] = false;
  only_sparse["sparse_prefill"] = {{"name", "k_sparse"},    {"description", "sparse prefill"}, {"out_dtype", "bf16"},
                                   {"precision", nullptr},  {"heads", {64, 128}},             {"topk_multiple", 64},
                                   {"d_qks", {576}},        {"sink", true},                   {"topk_length", false}};
  const auto so = validate_python_declaration(only_sparse);
  ASSERT_TRUE(so.sparse_prefill.has_value());
  EXPECT_EQ(so.sparse_prefill->topk_multiple, 64);
  EXPECT_EQ(so.sparse_prefill->d_qks, std::vector<int>{576});
  EXPECT_FALSE(so.sparse_prefill->topk_length);
  const auto with_sparse = [&](const char* pointer, json v) {
    auto j = only_sparse;
    j["sparse_prefill"][json::json_pointer(pointer)] = std::move(v);
    return j;
  };
  bad_prefill.push_back({with_sparse("/d_qks", {192}), "'sparse_prefill.d_qks' holds 192, not 576 or 512"});
  bad_prefill.push_back({with_sparse("/topk_multiple", 0), "sparse_prefill.topk_multiple 0 is below 1"});
  bad_prefill.push_back({with_sparse("/out_dtype", "f16"), "'sparse_prefill.out_dtype' is 'f16'"});
  bad_prefill.push_back({with_sparse("/precision", json{{"operands", "bf16"}, {"accumulate", "bf16"}}), "precision class"});
  auto clash = only_logits;
  clash["decode"] = true;
  clash["indexer_logits"]["name"] = clash["name"];
  bad_prefill.push_back({clash, "declaration field 'indexer_logits.name' is"});
  for (const auto& [j, words] : bad_prefill) {
    try {
      (void)validate_python_declaration(j);
      ADD_FAILURE() << "accepted: " << j.dump();
    } catch (const mla::Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what() << "\n  expected: " << words;
    }
  }
  for (const auto& [j, words] : bad) {
    try {
      (void)validate_python_declaration(j);
      ADD_FAILURE() << "accepted: " << j.dump();
    } catch (const mla::Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what() << "\n  expected: " << words;
    }
  }
}

// A python3 that runs but cannot import torch: the project's Python with a stand-in `torch`
// package first on its path that fails to import, as a python3 without torch does.
fs::path python_without_torch(const fs::path& dir) {
  fs::create_directories(dir / "bin");
  fs::create_directories(dir / "shadow" / "torch");
  std::ofstream(dir / "shadow" / "torch" / "__init__.py")
      << "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n";
  const auto exe = dir / "bin" / "python3";
  std::ofstream(exe) << "#!/bin/sh\nPYTHONPATH=" << (dir / "shadow").string() << " exec " << kTorchPython << " \"$@\"\n";
  fs::permissions(exe, fs::perms::owner_all);
  return exe;
}

TEST_F(CertifyPython, PythonIsFoundAsUsersExpectAndAMissingTorchSkipsNamingWhatWasTried) {
  TempDir tmp;
  const auto no_torch = python_without_torch(tmp.path());
  const auto bin = no_torch.parent_path().string();
  // Only a python3 without torch on PATH: every case SKIPPED, the reason naming it.
  auto r = certify(kOneCase + spec("GOOD"), "PATH=" + bin);
  EXPECT_EQ(r.status, mla::reports::kExitCoverage) << "nothing judged is no pass: " << r.output;
  EXPECT_EQ(r.cert.at("verdict"), "NOT_JUDGED") << r.output;
  auto c = row(r, "python_door_kernels_good", "h3_sq2_short");
  EXPECT_EQ(c.at("verdict"), "SKIPPED");
  EXPECT_NE(reasons(c).find("no python3 that imports torch: tried " + no_torch.string()), std::string::npos) << reasons(c);
  EXPECT_NE(reasons(c).find("No module named 'torch'"), std::string::npos) << reasons(c);
  // --python-exe is the one tried, whatever PATH holds.
  r = certify(kOneCase + spec("GOOD") + " --python-exe " + quote(no_torch), torch_path());
  c = row(r, "python_door_kernels_good", "h3_sq2_short");
  EXPECT_EQ(c.at("verdict"), "SKIPPED");
  EXPECT_NE(reasons(c).find("tried " + no_torch.string() + " ("), std::string::npos) << reasons(c);
  // Two kernels named by the same ATTR in two modules stay two rows while nothing can be imported.
  r = certify(kOneCase + spec("GOOD") + " --python " + quote((kExamples / "torch_mla.py").string() + ":GOOD") +
                  " --python-exe " + quote(no_torch),
              torch_path());
  EXPECT_EQ(r.cert.at("kernels").size(), 2u) << r.output;
  EXPECT_EQ(row(r, "python_torch_mla_good", "h3_sq2_short").at("verdict"), "SKIPPED");
  // One that does not exist is a mistake of the command line, not a machine without torch.
  r = certify(kOneCase + spec("GOOD") + " --python-exe no_such_python_of_the_door_tests", torch_path());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--python-exe no_such_python_of_the_door_tests is not an executable file nor a command on PATH"),
            std::string::npos)
      << r.output;
  // PATH's first python3 lacks torch, a later one has it: that one runs the kernel. A "cuda"
  // kernel then needs a CUDA device: without one, SKIPPED saying so.
  r = certify(kOneCase + spec("CUDA"), "PATH=" + bin + ":" + fs::path(kTorchPython).parent_path().string());
  const auto& k = kernel(r, "door_cuda");
  EXPECT_EQ(fs::path(k.at("origin").at("python").get<std::string>()), fs::path(kTorchPython));
  c = row(r, "door_cuda", "h3_sq2_short");
  if (c.at("verdict") == "SKIPPED") {
    EXPECT_NE(reasons(c).find("backend cuda: torch"), std::string::npos) << reasons(c);
    EXPECT_NE(reasons(c).find("sees no CUDA device"), std::string::npos) << reasons(c);
  } else {
    EXPECT_EQ(c.at("verdict"), "PASS") << reasons(c);  // a machine with CUDA: the door's device path
  }
}

TEST_F(CertifyPython, ACudaKernelGetsCopiesAndTheAuditStillSeesWhatItDidToThem) {
  // MLA_DOOR_DEVICE=cpu: the door's copy-in / copy-out path of a "cuda" kernel into separate
  // tensors, as on a GPU machine, without one.
  const auto r = certify(kOneCase + spec("CUDA") + spec("CUDA_CHANGES_Q"), torch_path() + " MLA_DOOR_DEVICE=cpu");
  ASSERT_EQ(r.status, 1) << r.output;
  const auto& good = row(r, "door_cuda", "h3_sq2_short");
  EXPECT_EQ(good.at("verdict"), "PASS") << reasons(good);  // every element written back, bitwise repeatable
  EXPECT_EQ(kernel(r, "door_cuda").at("origin").at("cuda_device"), "none: copies on cpu (MLA_DOOR_DEVICE=cpu)");
  const auto& bad = row(r, "door_cuda_changes_q", "h3_sq2_short");
  EXPECT_EQ(bad.at("verdict"), "FAIL") << reasons(bad);
  EXPECT_NE(reasons(bad).find("input q changed by call 1"), std::string::npos) << reasons(bad);
}

TEST_F(CertifyPython, ResumeKeepsAResultOnlyWhileTheKernelsCodeIsTheSame) {
  TempDir tmp;
  const auto copy = tmp.path() / "door_kernels.py";
  fs::copy_file(kKernels, copy);
  const auto out = tmp.path() / "report";
  const std::string args = kOneCase + " --python " + quote(copy.string() + ":REFUSES");
  auto r = certify(args, torch_path(), out);
  ASSERT_EQ(row(r, "door_refuses", "h3_sq2_short").at("verdict"), "FAIL") << r.output;
  r = certify(args + " --resume", torch_path(), out);
  EXPECT_NE(r.output.find("resume: kept 2 of 2 results"), std::string::npos) << "the case and its twin: " << r.output;
  std::ofstream(copy, std::ios::app) << "\n# changed\n";
  r = certify(args + " --resume", torch_path(), out);
  EXPECT_NE(r.output.find("resume: kept 0 of 2 results"), std::string::npos) << r.output;
}

// The entries' own can_implement through the door. A prefill that claims exactly the stored
// shapes and returns their stored truth is green on what it finds, red on every twin (the same
// shape, so claimed) and never called on a drawn case. A merge and a sparse prefill whose
// predicates claim less than their declared ranges are green where they claim, and NOT_CLAIMED in
// their own words where they do not (the sparse one also checks that it is shown the lengths).
TEST_F(CertifyPython, EachEntrysCanImplementIsAskedAndRefusingTheUnknownGainsNothing) {
  const auto r = certify("--family prefill --family merge --family " + kFresh + spec("PREFILL_THIEF") +
                             spec("MERGE_128_ONLY") + spec("SPARSE_NO_SINK"),
                         torch_path());
  ASSERT_EQ(r.status, 1) << r.output;
  const auto twin = [](const json& c) { return mla::certify::testing::is_twin(c.at("case").get<std::string>()); };
  const auto says = [](const json& c, const std::string& words) { return reasons(c).find(words) != std::string::npos; };
  {
    const auto& k = kernel(r, "door_prefill_thief");
    EXPECT_EQ(k.at("origin").at("can_implement"), true);
    int stored_pass = 0, twins = 0, drawn_refused = 0;
    for (const auto& c : k.at("cases")) {
      SCOPED_TRACE(c.at("case").get<std::string>());
      if (c.at("family") == kFresh) {
        // Refused by its predicate; or, where the seed drew a stored case's exact shape (a varlen
        // batch of one head is one rotation away from one), claimed and then refused: a broken
        // claim. Never a pass.
        if (c.at("verdict") == "NOT_CLAIMED") {
          ++drawn_refused;
          EXPECT_TRUE(says(c, "only the shapes of the catalog's cases (the kernel's can_implement)")) << reasons(c);
        } else {
          EXPECT_EQ(c.at("verdict"), "FAIL") << reasons(c);
          EXPECT_EQ(c.at("cause"), "broken_claim") << reasons(c);
        }
      } else if (twin(c)) {
        ++twins;
        EXPECT_EQ(c.at("verdict"), "FAIL") << reasons(c);
      } else if (c.at("verdict") == "PASS") {
        ++stored_pass;
      }
    }
    EXPECT_GT(stored_pass, 0) << "it returns the stored truth where it finds it";
    EXPECT_GT(twins, 0);
    EXPECT_GT(drawn_refused, 0);
  }
  expect_predicate_claims(kernel(r, "door_merge_128_only"),
                          [](const json& c) { return c.at("shape").at("head_dim") == 128; }, "128-wide states only");
  expect_predicate_claims(kernel(r, "door_sparse_no_sink"),
                          [](const json& c) { return !c.at("shape").value("sink", false); }, "no attention sink");
}

// The top-k, indexer logits and indexer append entries' can_implement through the door: green
// where each claims (the stored indexer cases and their twins included), NOT_CLAIMED in its words
// elsewhere; each predicate raises if it is not shown its lengths.
TEST_F(CertifyPython, TheIndexerEntriesCanImplementAreAskedThroughTheDoor) {
  const auto r = certify("--family indexer --family " + kFresh + spec("TOPK_LONG_ROWS") + spec("LOGITS_NEXT_N_2") +
                             spec("APPEND_BLOCKS_OF_64"),
                         torch_path());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<std::tuple<std::string, std::function<bool(const json&)>, std::string>> expects = {
      {"door_topk_long_rows",
       [](const json& c) { return c.at("case").get<std::string>().find("rows_longer_than_k") != std::string::npos; },
       "needs a row of at least k"},
      {"door_logits_next_n_2",
       [](const json& c) { return !(c.at("shape").at("layout") == "paged" && c.at("shape").at("next_n") == 1); },
       "speculative step only"},
      {"door_append_blocks_of_64", [](const json& c) { return c.at("shape").at("block_size") == 64; },
       "blocks of 64 tokens only"},
  };
  for (const auto& [name, claimed, words] : expects) {
    SCOPED_TRACE(name);
    expect_predicate_claims(kernel(r, name), claimed, words);
  }
}

// The routes to a green certificate without computing, through the door: the stored q-std-100
// case, its fresh twin and the fresh large-q case for each. A thief that refuses what it cannot
// look up, one that hides an overflow bug behind the stored answers, a memo keyed on everything
// but q, and a kernel that changes q and then refuses: every one red, for its reason.
TEST_F(CertifyPython, AttacksOnTheVerdictAreRed) {
  const auto r = certify("--family attn_stress --family " + kFresh + " --case 'q_std100$|large_q'" + spec("THIEF_REFUSES") +
                             spec("THIEF_HIDES_OVERFLOW") + spec("MEMO_BY_SHAPE") + spec("CHANGES_Q_THEN_REFUSES"),
                         torch_path());
  ASSERT_EQ(r.status, 1) << r.output;
  auto rows = [&](const std::string& k) {
    std::map<std::string, const json*> m;  // "stored", "twin", "drawn" (the fresh family)
    for (const auto& c : kernel(r, k).at("cases")) {
      const std::string name = c.at("case");
      m[c.at("family") == kFresh ? "drawn" : mla::certify::testing::is_twin(name) ? "twin" : "stored"] = &c;
    }
    EXPECT_EQ(m.size(), 3u) << k << ": " << kernel(r, k).at("cases").dump();
    return m;
  };
  for (const char* thief : {"door_thief_refuses", "door_thief_hides_overflow"}) {
    SCOPED_TRACE(thief);
    auto m = rows(thief);
    if (m.size() != 3) continue;
    // Even the stored row: the case called between its calls (q negated) is judged, and its
    // answer is stored nowhere.
    EXPECT_EQ(m["stored"]->at("verdict"), "FAIL") << reasons(*m["stored"]);
    if (std::string(thief) == "door_thief_hides_overflow") {
      EXPECT_NE(reasons(*m["stored"]).find("the other case called between calls"), std::string::npos) << reasons(*m["stored"]);
    }
    EXPECT_EQ(m["twin"]->at("verdict"), "FAIL") << reasons(*m["twin"]);
    EXPECT_EQ(m["drawn"]->at("verdict"), "FAIL") << reasons(*m["drawn"]);
  }
  {
    auto m = rows("door_thief_refuses");
    if (m.size() == 3) {
      EXPECT_EQ(m["twin"]->at("cause"), "broken_claim");
      EXPECT_NE(reasons(*m["twin"]).find("refused a shape it claims"), std::string::npos) << reasons(*m["twin"]);
    }
  }
  for (const auto& [k, words] : {std::pair{"door_memo_by_shape", "the other case called between calls"},
                                 std::pair{"door_changes_q_then_refuses", "input q changed"}}) {
    SCOPED_TRACE(k);
    for (const auto& [which, c] : rows(k)) {
      EXPECT_EQ(c->at("verdict"), "FAIL") << which << ": " << reasons(*c);
      EXPECT_NE(reasons(*c).find(words), std::string::npos) << which << ": " << reasons(*c);
    }
  }
}

// The door's fork server: a child it forks is this process's child like one forked here (its
// exit, its signal, its stops, its deadline), in its own group; a server that dies costs only
// time: the next child starts the usual way.
TEST_F(CertifyPython, ChildrenOfTheDoorsForkServerAreWaitedOnStoppedAndKilledAsForkedOnes) {
  using mla::certify::ChildHooks;
  using mla::certify::ForkServer;
  using K = mla::certify::ChildOutcome::Kind;
  TempDir tmp;
  const auto child_py = (kSource / "kernels" / "python" / "mla_door" / "child.py").string();
  std::string why;
  auto server = ForkServer::start({kTorchPython, "-s", "-B", child_py, "serve"}, 120, tmp.path() / "server.log", why);
  ASSERT_TRUE(server) << why;
  // Each spec is a file whose import does one thing; `describe` imports it.
  auto spec_file = [&](const std::string& name, const std::string& body) {
    const auto f = tmp.path() / (name + ".py");
    std::ofstream(f) << "import os, signal, sys, time\n" << body << "\nKERNEL = None\n";
    return f.string() + ":KERNEL";
  };
  const auto probe = tmp.path() / "probe.txt";
  const auto probe_spec = spec_file(
      "probe", "open(" + quote(probe.string()) +
                   ", 'w').write(f\"{os.environ.get('MLA_DOOR_FORKED', '0')} {os.getppid()} {os.getpgid(0) == os.getpid()}\")");
  auto run = [&](const std::string& spec, double timeout_s, ChildHooks hooks = {}) {
    const std::vector<std::string> args{"describe", "--spec", spec, "--result", (tmp.path() / "result").string()};
    std::vector<std::string> argv{kTorchPython, "-s", "-B", child_py};
    argv.insert(argv.end(), args.begin(), args.end());
    hooks.server = server.get();
    hooks.server_args = args;
    return mla::certify::run_child(argv, timeout_s, tmp.path() / "child.log", hooks);
  };
  // Forked by the server, re-parented here, in its own group.
  auto o = run(probe_spec, 60);
  EXPECT_EQ(o.kind, K::exited) << o.describe() << " " << o.stderr_tail;
  EXPECT_EQ(slurp(probe), fmt::format("1 {} True", getpid()));
  // Its signal reaches this process.
  o = run(spec_file("segv", "os.kill(os.getpid(), signal.SIGSEGV)"), 60);
  EXPECT_EQ(o.kind, K::signaled) << o.describe();
  EXPECT_EQ(o.signal, SIGSEGV);
  // Its stops too: the parent looks, then continues it.
  int stops = 0;
  ChildHooks count;
  count.on_stop = [&] { ++stops; };
  o = run(spec_file("stops", "os.kill(os.getpid(), signal.SIGSTOP)\nos.kill(os.getpid(), signal.SIGSTOP)"), 60, count);
  EXPECT_EQ(o.kind, K::exited) << o.describe();
  EXPECT_EQ(stops, 2);
  // Its deadline kills it, promptly.
  const auto t0 = std::chrono::steady_clock::now();
  o = run(spec_file("hangs", "time.sleep(120)"), 1.0);
  EXPECT_EQ(o.kind, K::timed_out) << o.describe();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  EXPECT_TRUE(server->serving());
  // The server killed: the next child is started anew, and says so.
  ASSERT_EQ(kill(server->pid(), SIGKILL), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  o = run(probe_spec, 60);
  EXPECT_EQ(o.kind, K::exited) << o.describe() << " " << o.stderr_tail;
  EXPECT_EQ(slurp(probe), fmt::format("0 {} True", getpid()));
  EXPECT_FALSE(server->serving());
  EXPECT_FALSE(server->stop_reason().empty()) << "a server that stopped serving says why";
}

// A kernel that kills the door's fork server mid-run: its cases and the next kernel's are
// certified all the same (their children then start the usual way), and the run says so.
TEST_F(CertifyPython, AKernelThatKillsTheForkServerCostsOnlyTime) {
  const auto r = certify(kTwoCases + spec("KILLS_SERVER") + spec("GOOD"), torch_path());
  ASSERT_EQ(r.status, 0) << r.output;
  // The line names why the server stopped: "... stopped (<the failed request's error>); ...".
  const auto said = r.output.find("the fork server for");
  ASSERT_NE(said, std::string::npos) << r.output;
  const auto open = r.output.find(" stopped (", said), close = r.output.find("); each child", said);
  EXPECT_TRUE(open != std::string::npos && close != std::string::npos && close > open + 10) << r.output;
  for (const char* k : {"door_kills_server", "door_good"}) {
    for (const auto& c : kernel(r, k).at("cases")) EXPECT_EQ(c.at("verdict"), "PASS") << k << " " << c.dump();
  }
}

}  // namespace
