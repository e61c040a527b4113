// L0: the loader-level truth under the FP8 cache-append tests. Every FP8 case of the real catalog
// carries inputs/kv_cache_bf16, and core's fp8_quantize_token on each used slot of it gives the
// stored kv_cache bytes exactly (recomputed here, not taken from the loader's own check), with
// the encoder's edges present in those bytes. A file whose kv_cache_bf16 does not encode to its
// kv_cache is refused with a FixtureError naming the dataset and the slot.
#include <gtest/gtest.h>

#include <H5Cpp.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/golden/golden.hpp"
#include "support/goldens.hpp"
#include "support/temp_dir.hpp"

namespace mla::golden {
namespace {

namespace fs = std::filesystem;

std::vector<mla::testing::GoldenCaseRef> fp8_cases(const Catalog& cat) {
  return mla::testing::attention_cases(cat, [](const AttnHeader& h) { return h.shape.cache_format == CacheFormat::fp8; });
}

class Fp8Source : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path dir = default_goldens_dir();
    if (!fs::exists(dir / "MANIFEST.sha256")) {
      GTEST_SKIP() << "no golden catalog at " << dir << " (write it with ./mla.sh goldens)";
    }
    cat_ = open_catalog(dir);
  }
  Catalog cat_;
};

TEST_F(Fp8Source, CoreEncodingOfTheBf16CacheIsTheStoredBytes) {
  const auto cases = fp8_cases(cat_);
  ASSERT_GE(cases.size(), 14u) << "attn_fp8 has 8 FP8 cases and attn_sparse 6";
  long saturated = 0, subnormal = 0, floored = 0, tokens = 0;
  bool fmts[2] = {false, false};
  bool recipes[2][2] = {{false, false}, {false, false}};  // [recipe][scale format]
  std::vector<double> lat(kLatentDim), rope(kRopeDim);
  std::vector<uint8_t> tok(kFp8TokenBytes);
  for (const auto& fc : cases) {
    SCOPED_TRACE(fc.file + ":" + fc.name);
    const AttnCase c = load_attn_case(cat_.file(fc.file), fc.name);
    ASSERT_EQ(c.shape.cache_format, CacheFormat::fp8);
    const std::size_t slots = static_cast<std::size_t>(c.shape.num_blocks) * c.shape.page_size;
    ASSERT_EQ(c.kv_cache_bf16.size(), slots * kQkDim) << "inputs/kv_cache_bf16 missing or mis-sized";
    const ScaleFmt fmt = c.scale_fmt;
    const Fp8Recipe recipe = c.fp8_recipe;
    fmts[fmt == ScaleFmt::ue8m0] = true;
    recipes[recipe == Fp8Recipe::flashmla][fmt == ScaleFmt::ue8m0] = true;
    // The scale of a block with amax below 1e-4 (the floor of both recipes).
    const float floor_scale = fp8_block_scale(0.0, fmt, recipe);
    std::vector<char> used(slots, 0);
    for (int i = 0; i < c.shape.batch; ++i)
      for (int t = 0; t < c.cache_seqlens[static_cast<std::size_t>(i)]; ++t)
        used[static_cast<std::size_t>(
            int64_t{c.block_table[static_cast<std::size_t>(i) * c.shape.max_blocks + t / c.shape.page_size]} *
                c.shape.page_size +
            t % c.shape.page_size)] = 1;
    for (std::size_t slot = 0; slot < slots; ++slot) {
      const uint16_t* bits = c.kv_cache_bf16.data() + slot * kQkDim;
      if (!used[slot]) {
        for (std::size_t d = 0; d < kQkDim; ++d) ASSERT_EQ(bits[d], 0x7FC0) << "unused slot " << slot << " not NaN";
        continue;
      }
      ++tokens;
      for (std::size_t d = 0; d < kLatentDim; ++d) lat[d] = bf16_to_float(bits[d]);
      for (std::size_t d = 0; d < kRopeDim; ++d) rope[d] = bf16_to_float(bits[kLatentDim + d]);
      for (double v : lat) ASSERT_FALSE(std::isnan(v)) << "NaN in used slot " << slot;
      fp8_quantize_token(lat, rope, fmt, tok, recipe);
      const uint8_t* want = c.kv_cache.data() + slot * kFp8TokenBytes;
      ASSERT_EQ(std::memcmp(tok.data(), want, kFp8TokenBytes), 0) << "slot " << slot;
      for (std::size_t j = 0; j < kLatentDim; ++j) {
        saturated += (want[j] & 0x7F) == 0x7E;
        subnormal += (want[j] & 0x78) == 0 && (want[j] & 0x07) != 0;
      }
      for (int s = 0; s < 4; ++s) {
        float sc = 0;
        std::memcpy(&sc, want + kLatentDim + 4 * s, 4);
        floored += sc == floor_scale;
      }
    }
  }
  EXPECT_TRUE(fmts[0] && fmts[1]) << "FP8 cases of both scale formats";
  for (int r = 0; r < 2; ++r)
    for (int f = 0; f < 2; ++f) EXPECT_TRUE(recipes[r][f]) << "FP8 cases of every recipe and scale format: " << r << f;
  EXPECT_GT(saturated, 0) << "no ±448 code";
  EXPECT_GT(subnormal, 0) << "no subnormal code";
  EXPECT_GT(floored, 0) << "no block with amax < 1e-4";
  RecordProperty("tokens", static_cast<int>(tokens));
}

// A copy of an FP8 golden file with one used bf16 value changed must be refused.
TEST_F(Fp8Source, ABf16SourceThatDoesNotEncodeToTheBytesIsRefused) {
  const auto cases = fp8_cases(cat_);
  ASSERT_FALSE(cases.empty());
  const auto& fc = cases.front();
  const AttnCase c = load_attn_case(cat_.file(fc.file), fc.name);
  // The first used slot: the sequence with a token, its position 0.
  int seq = 0;
  while (c.cache_seqlens[static_cast<std::size_t>(seq)] == 0) ++seq;
  const int64_t slot = int64_t{c.block_table[static_cast<std::size_t>(seq) * c.shape.max_blocks]} * c.shape.page_size;
  std::vector<uint16_t> bits = c.kv_cache_bf16;
  // Far above every golden value (all below 50): it becomes its block's amax, so the scale bytes
  // must change.
  const std::size_t at = static_cast<std::size_t>(slot) * kQkDim;
  bits[at] = bf16_from_float(1000.f);

  const mla::testing::TempDir dir("mla-fp8-source");
  const fs::path tmp = dir.path() / "fp8_source.h5";
  fs::copy_file(cat_.file(fc.file), tmp, fs::copy_options::overwrite_existing);
  {
    H5::H5File f(tmp.string(), H5F_ACC_RDWR);
    H5::DataSet ds = f.openDataSet("/cases/" + fc.name + "/inputs/kv_cache_bf16");
    ds.write(bits.data(), H5::PredType::NATIVE_UINT16);
  }
  try {
    (void)load_attn_case(tmp, fc.name);
    ADD_FAILURE() << "a kv_cache_bf16 that does not encode to kv_cache was accepted";
  } catch (const FixtureError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("kv_cache_bf16"), std::string::npos) << m;
    EXPECT_NE(m.find(fmt::format("slot {}", slot)), std::string::npos) << m;
  }
  fs::remove(tmp);
}


// A case's bytes are those of its recipe: a copy of a FlashMLA-recipe case that claims DeepSeek's
// recipe is refused (its tiny blocks encode differently), naming the recipe; an unknown recipe
// name is refused as such.
TEST_F(Fp8Source, TheRecipeAttributeIsTheOneTheBytesWereWrittenWith) {
  std::string name;
  for (const auto& fc : fp8_cases(cat_)) {
    if (fc.file == "attn_fp8.h5" && load_attn_case(cat_.file(fc.file), fc.name).fp8_recipe == Fp8Recipe::flashmla) {
      name = fc.name;
      break;
    }
  }
  ASSERT_FALSE(name.empty()) << "no flashmla-recipe case in attn_fp8.h5";
  const mla::testing::TempDir dir("mla-fp8-source");
  const fs::path tmp = dir.path() / "fp8_recipe.h5";
  for (const std::string claim : {"deepseek_v32", "vllm"}) {
    SCOPED_TRACE(claim);
    fs::copy_file(cat_.file("attn_fp8.h5"), tmp, fs::copy_options::overwrite_existing);
    {
      H5::H5File f(tmp.string(), H5F_ACC_RDWR);
      H5::Group g = f.openGroup("/cases/" + name);
      g.removeAttr("fp8_recipe");
      H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
      t.setCset(H5T_CSET_UTF8);
      g.createAttribute("fp8_recipe", t, H5::DataSpace(H5S_SCALAR)).write(t, claim);
    }
    try {
      (void)load_attn_case(tmp, name);
      ADD_FAILURE() << "a case whose bytes are not its recipe's was accepted";
    } catch (const FixtureError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(claim == "vllm" ? "fp8_recipe 'deepseek_v32' or 'flashmla'" : "fp8_recipe deepseek_v32"),
                std::string::npos) << m;
    }
  }
  fs::remove(tmp);
}

}  // namespace
}  // namespace mla::golden
