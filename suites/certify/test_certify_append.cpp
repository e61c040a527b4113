// L0: the append entry point of plug-in ABI 1.1 — the fp64 CPU reference, the judgement of the
// append cases built from the cache_boundary goldens (including that the FP8 rule cannot be met
// by a wrong scale or code), the example plug-ins certified green/red through the CLI with the
// right reasons, ABI 1.0 compatibility, and the CUDA plug-in SKIPPED without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "mla/certify/append_case.hpp"
#include "mla/golden/families.hpp"
#include "mla/judge/append.hpp"
#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/golden/golden.hpp"
#include "mla/ref/append.hpp"
#include "mla/plugin/host.hpp"
#include "mla/reports/certificate.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::certify::AppendCase;
using mla::certify::AppendRun;
using mla::certify::testing::quote;
using mla::certify::testing::run_command;
using mla::certify::testing::slurp;
using mla::certify::testing::TempDir;
using mla::tol::Verdict;

const fs::path kGoldens = mla::golden::default_goldens_dir();

// The family the catalog description certifies as appends (cache_boundary, rows cache_append).
const mla::golden::Family& append_family() {
  return mla::golden::family(mla::golden::family_names_certified_by("append").at(0));
}

bool has_reason(const mla::reports::CaseResult& r, const std::string& words) {
  return std::any_of(r.reasons.begin(), r.reasons.end(), [&](const std::string& w) { return w.find(words) != std::string::npos; });
}
std::string reasons(const mla::reports::CaseResult& r) { return fmt::format("{}", fmt::join(r.reasons, " | ")); }

std::vector<mla::golden::LayerCase> boundary_goldens() {
  const auto catalog = mla::golden::open_catalog(kGoldens, /*verify_files=*/false);
  const auto path = catalog.file(append_family().file());
  std::vector<mla::golden::LayerCase> out;
  for (const auto& name : mla::golden::read_file_info(path).cases) out.push_back(mla::golden::load_layer_case(path, name));
  return out;
}

std::vector<AppendCase> all_cases() {
  std::vector<AppendCase> out;
  for (const auto& g : boundary_goldens()) {
    auto c = mla::certify::make_append_cases(g, MLA_PLUGIN_CACHE_BF16 | MLA_PLUGIN_CACHE_FP8,
                                             MLA_PLUGIN_SCALE_FP32 | MLA_PLUGIN_SCALE_UE8M0,
                                             MLA_PLUGIN_RECIPE_DEEPSEEK_V32 | MLA_PLUGIN_RECIPE_FLASHMLA, mla::Capabilities{});
    out.insert(out.end(), c.begin(), c.end());
  }
  return out;
}


// What the reference writes, as a child's result.
AppendRun reference_run(const AppendCase& c) {
  AppendRun r;
  r.ran = true;
  r.kv_cache = c.in.kv_cache;
  try {
    mla::ref::cache_append_reference(c.problem(), r.kv_cache);
    r.rc = MLA_PLUGIN_OK;
  } catch (const mla::CapacityError&) {
    r.rc = MLA_PLUGIN_CAPACITY;
  }
  return r;
}

mla::reports::CaseResult judged(const AppendCase& c, const AppendRun& run) {
  mla::reports::CaseResult r;
  mla::certify::judge_append_run(c, run, r);
  return r;
}

class AppendGoldens : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kGoldens / "MANIFEST.sha256")) GTEST_SKIP() << "no golden catalog at " << kGoldens;
  }
};

TEST(AppendReference, CapacityIsCheckedBeforeAnyWrite) {
  mla::ref::AppendProblem p;
  p.num_tokens = 2;
  p.latent.assign(2 * 512, 1.0);
  p.k_pe.assign(2 * 64, 0.5);
  p.kv_norm_weight.assign(512, 1.0);
  p.inv_freq.assign(32, 0.1);
  p.seq_ids = {0, 0};
  p.positions = {3, 8};
  p.block_table = {0, 1};
  p.batch = 1;
  p.max_blocks = 2;
  p.page_size = 4;
  p.num_blocks = 2;
  p.max_seq_len = 8;  // position 8 is one past the end, although its page exists
  std::vector<uint8_t> cache(2 * 4 * 1152, 0xA5);
  const auto before = cache;
  EXPECT_THROW(mla::ref::cache_append_reference(p, cache), mla::CapacityError);
  EXPECT_EQ(cache, before) << "a rejected append wrote the cache";
  EXPECT_EQ(mla::ref::first_token_past_capacity(p), 1);
  p.positions[1] = 7;
  EXPECT_EQ(mla::ref::first_token_past_capacity(p), std::nullopt);
  mla::ref::cache_append_reference(p, cache);
  EXPECT_NE(cache, before);
  p.positions[1] = -1;
  EXPECT_THROW(mla::ref::append_slots(p), mla::Error);
}

TEST_F(AppendGoldens, CasesCoverPageEdgesTheLastValidPositionAndARejection) {
  const auto cases = all_cases();
  ASSERT_FALSE(cases.empty());
  int rejected = 0, last_valid = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto& pos = c.in.positions;
    const auto msl = c.in.max_seq_len;
    if (c.expect_capacity) {
      ++rejected;
      EXPECT_EQ(pos.back(), msl);
    } else {
      EXPECT_TRUE(std::all_of(pos.begin(), pos.end(), [&](int32_t p) { return p < msl; }));
      if (std::find(pos.begin(), pos.end(), msl - 1) != pos.end()) ++last_valid;
      EXPECT_TRUE(std::any_of(pos.begin(), pos.end(), [&](int32_t p) { return p % c.in.page_size == 0 && p > 0; }))
          << "no token on the first slot of a later page";
    }
  }
  EXPECT_EQ(rejected, static_cast<int>(cases.size() / 3));
  EXPECT_EQ(last_valid, rejected);
}

TEST_F(AppendGoldens, TheReferencePassesEveryCase) {
  for (const auto& c : all_cases()) {
    SCOPED_TRACE(c.name);
    const auto r = judged(c, reference_run(c));
    EXPECT_EQ(r.verdict, Verdict::pass) << reasons(r);
  }
}

TEST_F(AppendGoldens, Fp8RuleRefusesAWrongScaleOrCode) {
  for (const auto& c : all_cases()) {
    if (c.format != mla::CacheFormat::fp8 || c.expect_capacity) continue;
    SCOPED_TRACE(c.name);
    const auto good = reference_run(c);
    const auto slots = mla::ref::append_slots(c.problem());
    const std::size_t token = static_cast<std::size_t>(slots[0]) * mla::kFp8TokenBytes;
    {
      // Scale doubled and codes halved: the dequantized values barely move (a "fooling" kernel),
      // but the scale is not the recipe's.
      auto bad = good;
      float s;
      std::memcpy(&s, bad.kv_cache.data() + token + 512, 4);
      s *= 2;
      std::memcpy(bad.kv_cache.data() + token + 512, &s, 4);
      for (int j = 0; j < 128; ++j) {
        uint8_t& code = bad.kv_cache[token + static_cast<std::size_t>(j)];
        code = mla::e4m3_from_double(mla::e4m3_to_double(code) / 2);
      }
      const auto r = judged(c, bad);
      EXPECT_EQ(r.verdict, Verdict::fail);
      EXPECT_TRUE(has_reason(r, "fp8 scales")) << reasons(r);
    }
    {
      // One code two steps off (one step may still be the nearest encoding of a value within
      // the bf16 band, near a rounding boundary; two never is), anywhere in the call.
      auto bad = good;
      std::size_t at = 0;
      for (std::size_t i = 0; i < slots.size() && !at; ++i) {
        const std::size_t base = static_cast<std::size_t>(slots[i]) * mla::kFp8TokenBytes;
        for (std::size_t j = 0; j < 512 && !at; ++j) {
          const int mag = bad.kv_cache[base + j] & 0x7F;
          if (mag >= 0x10 && mag < 0x70) at = base + j;
        }
      }
      ASSERT_NE(at, 0u);
      bad.kv_cache[at] = static_cast<uint8_t>(bad.kv_cache[at] + 2);
      const auto r = judged(c, bad);
      EXPECT_TRUE(has_reason(r, "fp8 codes")) << reasons(r);
    }
  }
}

TEST_F(AppendGoldens, AWriteToASlotNoTokenMapsToFails) {
  for (const auto& c : all_cases()) {
    if (c.expect_capacity) continue;
    auto run = reference_run(c);
    const auto slots = mla::ref::append_slots(c.problem());
    int64_t slot = 0;
    while (std::find(slots.begin(), slots.end(), slot) != slots.end()) ++slot;
    run.kv_cache[static_cast<std::size_t>(slot) * mla::cache_bytes_per_token(c.format) + 7] ^= 1;
    const auto r = judged(c, run);
    EXPECT_TRUE(has_reason(r, "untouched slots")) << c.name << ": " << reasons(r);
  }
}

// ---- through the CLI ------------------------------------------------------------------------

struct Certified {
  int status = -1;
  std::string out;
  mla::reports::Certificate cert;
};

Certified certify(const std::string& args) {
  TempDir dir;
  Certified c;
  const auto p = run_command(std::string(MLA_CLI_EXE) + " certify --goldens " + quote(kGoldens) + " --out " +
                             quote(dir.path()) + " " + args + " 2>&1");
  c.status = p.status;
  c.out = p.out;
  if (fs::exists(dir.path() / "certificate.json")) {
    c.cert = mla::reports::certificate_from_json(nlohmann::json::parse(slurp(dir.path() / "certificate.json")));
  }
  return c;
}

std::vector<mla::reports::CaseResult> append_rows(const Certified& c, const std::string& kernel) {
  std::vector<mla::reports::CaseResult> rows;
  for (const auto& k : c.cert.kernels) {
    if (k.name != kernel) continue;
    for (const auto& r : k.cases) {
      if (r.family == append_family().certified_as) rows.push_back(r);
    }
  }
  return rows;
}

bool is_rejection(const mla::reports::CaseResult& r) { return r.name.find("/rejected") != std::string::npos; }

TEST_F(AppendGoldens, CorrectAppendPluginCertifiesGreen) {
  const auto c = certify(std::string("--family cache_append --plugin ") + MLA_PLUGIN_GOOD_APPEND);
  EXPECT_EQ(c.status, 0) << c.out;
  const auto rows = append_rows(c, "good_append");
  EXPECT_EQ(rows.size(), boundary_goldens().size() * 9) << "bf16, fp8/fp32, fp8/ue8m0 x prefill, last_valid, rejected";
  for (const auto& r : rows) {
    EXPECT_EQ(r.verdict, Verdict::pass) << r.name << ": " << reasons(r);
    if (!is_rejection(r)) {
      ASSERT_TRUE(r.latent.has_value() && r.k_pe.has_value()) << r.name;
      EXPECT_FALSE(r.out || r.lse) << r.name << ": an append has no attention output";
      EXPECT_EQ(r.latent->what, "latent");
      EXPECT_EQ(r.k_pe->what, "k_pe");
      EXPECT_EQ(r.latent->tolerance, r.shape.at("cache_format") == "fp8" ? "cache.append.fp8.dequant" : "cache.append.bf16");
    }
  }
}

// FlashMLA's quantizer and vLLM's fp8_ds_mla writer use max(amax / 448, 1e-4): a correct append
// of that recipe, declared as such, is judged by it.
TEST_F(AppendGoldens, FlashMlaRecipeAppendDeclaredAsSuchCertifiesGreen) {
  const auto c = certify(std::string("--family cache_append --plugin ") + MLA_PLUGIN_FLASHMLA_APPEND);
  EXPECT_EQ(c.status, 0) << c.out;
  const auto rows = append_rows(c, "flashmla_append");
  EXPECT_EQ(rows.size(), boundary_goldens().size() * 9) << "bf16, fp8/fp32, fp8/ue8m0 x prefill, last_valid, rejected";
  int fp8 = 0;
  for (const auto& r : rows) {
    EXPECT_EQ(r.verdict, Verdict::pass) << r.name << ": " << reasons(r);
    if (r.shape.at("cache_format") != "fp8") continue;
    ++fp8;
    EXPECT_EQ(r.shape.at("fp8_recipe"), "flashmla") << r.name;
    EXPECT_NE(r.name.find("_flashmla/"), std::string::npos) << r.name;
  }
  EXPECT_GT(fp8, 0);
  // The certificate records what the plug-in declared.
  ASSERT_EQ(c.cert.kernels.size(), 1u);
  EXPECT_EQ(c.cert.kernels[0].declared.at("append_fp8_recipes"), nlohmann::json::array({"flashmla"}));
}

// The same code declaring DeepSeek's recipe fails exactly the calls where the two recipes write
// different bytes (a block of amax < 448 * 1e-4: the all-zero latent), and says which recipe it
// really writes.
TEST_F(AppendGoldens, AFlashMlaRecipeAppendDeclaredAsDeepSeeksFailsNamingTheRecipeItWrites) {
  const auto c = certify(std::string("--family cache_append --plugin ") + MLA_PLUGIN_FLASHMLA_APPEND_DECLARED_V32);
  EXPECT_EQ(c.status, 1) << c.out;
  std::map<std::string, const AppendCase*> by_name;
  const auto cases = all_cases();
  for (const auto& x : cases) by_name[x.name] = &x;
  int red = 0;
  for (const auto& r : append_rows(c, "flashmla_append_declared_v32")) {
    SCOPED_TRACE(r.name);
    const auto it = by_name.find(r.name);
    ASSERT_NE(it, by_name.end());
    bool differ = false;
    if (it->second->format == mla::CacheFormat::fp8 && !it->second->expect_capacity) {
      auto as_flashmla = *it->second;
      as_flashmla.fp8_recipe = mla::Fp8Recipe::flashmla;
      differ = reference_run(*it->second).kv_cache != reference_run(as_flashmla).kv_cache;
    }
    if (!differ) {
      EXPECT_EQ(r.verdict, Verdict::pass) << reasons(r);
      continue;
    }
    ++red;
    EXPECT_EQ(r.verdict, Verdict::fail);
    EXPECT_TRUE(has_reason(r, "not the declared deepseek_v32 recipe's max(amax, 1e-4) / 448")) << reasons(r);
    EXPECT_TRUE(has_reason(r, "the kernel writes flashmla, not the deepseek_v32 it declares")) << reasons(r);
  }
  EXPECT_GT(red, 0);
}

TEST_F(AppendGoldens, HalfSplitRopeFailsNamingTheRope) {
  const auto c = certify(std::string("--family cache_append --plugin ") + MLA_PLUGIN_APPEND_HALF_SPLIT_ROPE);
  EXPECT_EQ(c.status, 1) << c.out;
  for (const auto& r : append_rows(c, "append_half_split_rope")) {
    SCOPED_TRACE(r.name);
    if (is_rejection(r)) {
      EXPECT_EQ(r.verdict, Verdict::pass) << reasons(r);
      continue;
    }
    EXPECT_EQ(r.verdict, Verdict::fail);
    EXPECT_TRUE(has_reason(r, "half-split RoPE")) << reasons(r);
    EXPECT_FALSE(has_reason(r, "latent")) << "only the rope is wrong: " << reasons(r);
  }
}

TEST_F(AppendGoldens, MissingCapacityCheckFailsTheRejectedCalls) {
  const auto c = certify(std::string("--family cache_append --plugin ") + MLA_PLUGIN_APPEND_NO_CAPACITY_CHECK);
  EXPECT_EQ(c.status, 1) << c.out;
  int failed = 0;
  for (const auto& r : append_rows(c, "append_no_capacity_check")) {
    SCOPED_TRACE(r.name);
    if (!is_rejection(r)) {
      EXPECT_EQ(r.verdict, Verdict::pass) << reasons(r);
      continue;
    }
    ++failed;
    EXPECT_EQ(r.verdict, Verdict::fail);
    EXPECT_TRUE(has_reason(r, "must return MLA_PLUGIN_CAPACITY")) << reasons(r);
    EXPECT_TRUE(has_reason(r, "written although")) << reasons(r);
  }
  EXPECT_GT(failed, 0);
}

TEST_F(AppendGoldens, WritingANeighbourSlotFailsTheUntouchedSlotCheck) {
  const auto c = certify(std::string("--family cache_append --plugin ") + MLA_PLUGIN_APPEND_WRITES_NEIGHBOUR);
  EXPECT_EQ(c.status, 1) << c.out;
  for (const auto& r : append_rows(c, "append_writes_neighbour")) {
    SCOPED_TRACE(r.name);
    if (is_rejection(r)) continue;
    EXPECT_EQ(r.verdict, Verdict::fail);
    EXPECT_TRUE(has_reason(r, "untouched slots")) << reasons(r);
  }
}

TEST_F(AppendGoldens, PluginsWithoutAppendHaveNoAppendCases) {
  EXPECT_EQ(mla::plugin::Library::open(MLA_PLUGIN_GOOD_PLUGIN)->append(), nullptr);
  // Selecting only the append family for such a plug-in selects nothing: a usage error, named.
  const auto c = certify(std::string("--family cache_append --plugin ") + MLA_PLUGIN_GOOD_PLUGIN);
  EXPECT_EQ(c.status, 2) << c.out;
  EXPECT_NE(c.out.find("no selected plug-in has an append entry point"), std::string::npos) << c.out;
}

TEST(PluginAbi, ADescriptorOfRevision10StillLoadsAndItsTailIsNeverRead) {
  const auto lib = mla::plugin::Library::open(MLA_PLUGIN_ABI_1_0_PLUGIN);
  EXPECT_EQ(lib->descriptor().struct_size, MLA_PLUGIN_DESCRIPTOR_V1_0_SIZE);
  EXPECT_EQ(lib->abi_minor(), 0u);
  EXPECT_FALSE(lib->device_memory());
  EXPECT_EQ(lib->append_formats(), 0u);
  EXPECT_EQ(lib->append(), nullptr);
  EXPECT_FALSE(lib->unavailable().has_value());
}

TEST(PluginAbi, ADescriptorOfRevision11StillLoadsAndItsTailIsNeverRead) {
  // Its 1.2 fields hold garbage past struct_size: a host reading them would refuse it.
  const auto lib = mla::plugin::Library::open(MLA_PLUGIN_ABI_1_1_PLUGIN);
  EXPECT_EQ(lib->descriptor().struct_size, MLA_PLUGIN_DESCRIPTOR_V1_1_SIZE);
  EXPECT_EQ(lib->abi_minor(), 1u);
  EXPECT_EQ(lib->append_formats(), MLA_PLUGIN_CACHE_BF16 | MLA_PLUGIN_CACHE_FP8);
  EXPECT_EQ(lib->append_fp8_recipes(), MLA_PLUGIN_RECIPE_DEEPSEEK_V32) << "1.1 knew one recipe: DeepSeek's";
  EXPECT_FALSE(lib->has_can_implement());
  EXPECT_TRUE(lib->info().conventions.canonical());
  EXPECT_FALSE(lib->info().compute.has_value());
}

TEST_F(AppendGoldens, ARevision11AppendCertifiesGreenUnderDeepSeeksRecipe) {
  const auto c = certify(std::string("--family cache_append --plugin ") + MLA_PLUGIN_ABI_1_1_PLUGIN);
  EXPECT_EQ(c.status, 0) << c.out;
  const auto rows = append_rows(c, "abi_1_1_plugin");
  EXPECT_EQ(rows.size(), boundary_goldens().size() * 9);
  for (const auto& r : rows) {
    EXPECT_EQ(r.verdict, Verdict::pass) << r.name << ": " << reasons(r);
    if (r.shape.at("cache_format") == "fp8") {
      EXPECT_EQ(r.shape.at("fp8_recipe"), "deepseek_v32");
    }
  }
}

TEST(PluginAbi, AppendPluginDeclaresItsFormats) {
  const auto lib = mla::plugin::Library::open(MLA_PLUGIN_GOOD_APPEND);
  EXPECT_EQ(lib->abi_minor(), MLA_PLUGIN_ABI_MINOR);
  EXPECT_EQ(lib->append_formats(), MLA_PLUGIN_CACHE_BF16 | MLA_PLUGIN_CACHE_FP8);
  EXPECT_EQ(lib->append_scale_fmts(), MLA_PLUGIN_SCALE_FP32 | MLA_PLUGIN_SCALE_UE8M0);
  EXPECT_NE(lib->append(), nullptr);
}

TEST(PluginAbi, ADeviceMemoryPluginIsSkippedWithTheHostsReasonWhenItCannotHaveDeviceMemory) {
  const auto lib = mla::plugin::Library::open(MLA_ASKS_DEVICE_MEMORY);
  EXPECT_TRUE(lib->device_memory());
  const auto why = lib->unavailable();
  if (!why) GTEST_SKIP() << "this host can give device memory here (CUDA build with a device)";
#ifdef MLA_HOST_HAS_CUDA
  EXPECT_NE(why->find("no CUDA device to give the plug-in device memory"), std::string::npos) << *why;
#else
  EXPECT_NE(why->find("built without CUDA"), std::string::npos) << *why;
#endif
}

#ifdef MLA_PLUGIN_CUDA_PLUGIN
// The CUDA example asks for device memory. Here it must load (no libcuda needed) and, without a
// device, every case of it is SKIPPED with the reason; on a GPU machine suites/device/check.sh
// certifies it for real.
TEST_F(AppendGoldens, CudaPluginLoadsAndIsSkippedWithoutAGpu) {
  const auto lib = mla::plugin::Library::open(MLA_PLUGIN_CUDA_PLUGIN);
  EXPECT_TRUE(lib->device_memory());
  EXPECT_EQ(lib->append_formats(), MLA_PLUGIN_CACHE_BF16 | MLA_PLUGIN_CACHE_FP8);
  EXPECT_EQ(lib->append_scale_fmts(), MLA_PLUGIN_SCALE_FP32 | MLA_PLUGIN_SCALE_UE8M0);
  const auto why = lib->unavailable();
  if (!why) GTEST_SKIP() << "a CUDA device is present: the device check certifies this plug-in";
  EXPECT_NE(why->find("CUDA"), std::string::npos) << *why;
  const auto c = certify(std::string("--family attn_core --family cache_append --plugin ") + MLA_PLUGIN_CUDA_PLUGIN);
  // Skipped is not red, and nothing judged is no pass: NOT_JUDGED, naming why it could not run.
  EXPECT_EQ(c.status, mla::reports::kExitCoverage) << c.out;
  EXPECT_NE(c.out.find("NOT_JUDGED: no case was judged: cuda_plugin cannot run here"), std::string::npos) << c.out;
  int appends = 0, total = 0;
  for (const auto& k : c.cert.kernels) {
    ASSERT_EQ(k.name, "cuda_plugin");
    for (const auto& r : k.cases) {
      ++total;
      appends += r.family == append_family().certified_as;
      EXPECT_EQ(r.verdict, Verdict::skipped) << r.name;
      EXPECT_TRUE(has_reason(r, *why)) << reasons(r);
    }
  }
  EXPECT_GT(total, 0);
  EXPECT_EQ(appends, static_cast<int>(boundary_goldens().size() * 9))
      << "bf16, fp8/fp32, fp8/ue8m0 x prefill, last_valid, rejected";
}
#endif

}  // namespace
