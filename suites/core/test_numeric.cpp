#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"

namespace {

using mla::e4m3_from_double;
using mla::e4m3_to_double;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------- bf16

uint16_t bf16_of_bits(uint32_t f32_bits) { return mla::bf16_from_float(std::bit_cast<float>(f32_bits)); }

TEST(Bf16, KnownBits) {
  EXPECT_EQ(mla::bf16_from_float(1.0f), 0x3F80);
  EXPECT_EQ(mla::bf16_from_float(-2.0f), 0xC000);
  EXPECT_EQ(mla::bf16_from_float(0.0f), 0x0000);
  EXPECT_EQ(mla::bf16_from_float(-0.0f), 0x8000);
  EXPECT_EQ(mla::bf16_from_float(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(mla::bf16_from_float(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(mla::bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(mla::bf16_to_float(0x4049), 3.140625f);
}

TEST(Bf16, RoundToNearestEven) {
  // 0x3F80'8000 lies exactly between 0x3F80 (even) and 0x3F81: ties go to even.
  EXPECT_EQ(bf16_of_bits(0x3F808000u), 0x3F80);
  EXPECT_EQ(bf16_of_bits(0x3F818000u), 0x3F82);  // between 0x3F81 (odd) and 0x3F82
  EXPECT_EQ(bf16_of_bits(0x3F808001u), 0x3F81);  // just above the tie
  EXPECT_EQ(bf16_of_bits(0x3F807FFFu), 0x3F80);  // just below it
  EXPECT_EQ(bf16_of_bits(0xBF808000u), 0xBF80);  // sign-symmetric
  // The largest finite float rounds up into the exponent: infinity, as RNE demands.
  EXPECT_EQ(mla::bf16_from_float(std::numeric_limits<float>::max()), 0x7F80);
  // Subnormals round like everything else.
  EXPECT_EQ(bf16_of_bits(0x00008000u), 0x0000);
  EXPECT_EQ(bf16_of_bits(0x00018000u), 0x0002);
}

TEST(Bf16, NaNStaysQuietWithSign) {
  EXPECT_EQ(bf16_of_bits(0x7FC00000u), 0x7FC0);
  EXPECT_EQ(bf16_of_bits(0xFFC00000u), 0xFFC0);
  // A signalling NaN whose payload sits only in the low bits would truncate to infinity.
  EXPECT_EQ(bf16_of_bits(0x7F800001u), 0x7FC0);
  EXPECT_EQ(bf16_of_bits(0xFF800001u), 0xFFC0);
  EXPECT_EQ(mla::bf16_from_double(kNaN), 0x7FC0);
  EXPECT_EQ(mla::bf16_from_double(-kNaN), 0xFFC0);
  EXPECT_TRUE(std::isnan(mla::bf16_to_float(0x7FC0)));
}

TEST(Bf16, DoubleRoundsThroughFloat32) {
  // 1 + 2^-8 + 2^-30: float32 drops the 2^-30, leaving an exact bf16 tie that goes to even
  // (0x3F80); rounding the double directly would give 0x3F81. The schema mandates the former.
  EXPECT_EQ(mla::bf16_from_double(1.0 + 0x1p-8 + 0x1p-30), 0x3F80);
  EXPECT_EQ(mla::bf16_from_double(1.0 + 0x1p-8 + 0x1p-22), 0x3F81);
}

TEST(Bf16, EveryBf16ValueRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = mla::bf16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(mla::bf16_to_float(mla::bf16_from_float(f))));
      continue;
    }
    ASSERT_EQ(mla::bf16_from_float(f), b) << std::hex << b;
    ASSERT_EQ(mla::bf16_from_double(f), b) << std::hex << b;
  }
}

// ---------------------------------------------------------------------------------- e4m3fn

struct Known {
  double x;
  uint8_t code;
};

TEST(E4m3, KnownEncodings) {
  const Known table[] = {
      {448.0, 0x7E},        {-448.0, 0xFE},        {0x1p-9, 0x01},        {0x1p-6, 0x08},
      {1.0, 0x38},          {0.5, 0x30},           {1.125, 0x39},         {240.0, 0x77},
      {1.0625, 0x38},       // tie between 1.0 (mantissa 0, even) and 1.125: even
      {1.1875, 0x3A},       // tie between 1.125 (odd) and 1.25: even
      {464.0, 0x7E},        // tie between 448 and 480 (not representable): saturates
      {1e9, 0x7E},          {-1e9, 0xFE},          {kInf, 0x7E},          {-kInf, 0xFE},
      {0x1p-10, 0x00},      // half the smallest subnormal: tie to even (zero)
      {3 * 0x1p-11, 0x01},  // 0.75 of the smallest subnormal
      {3 * 0x1p-10, 0x02},  // 1.5 subnormal quanta: tie to even (2)
      {7.5 * 0x1p-9, 0x08}, // between the largest subnormal (7, odd) and 2^-6: even, the normal
      {-0x1p-11, 0x80},     // rounds to zero, keeps its sign
      {0.0, 0x00},          {-0.0, 0x80},          {kNaN, 0x7F},          {-kNaN, 0xFF},
  };
  for (const auto& k : table) {
    EXPECT_EQ(e4m3_from_double(k.x), k.code) << "x = " << k.x;
  }
}

TEST(E4m3, DecodeKnownCodes) {
  EXPECT_EQ(e4m3_to_double(0x7E), 448.0);
  EXPECT_EQ(e4m3_to_double(0xFE), -448.0);
  EXPECT_EQ(e4m3_to_double(0x01), 0x1p-9);
  EXPECT_EQ(e4m3_to_double(0x07), 7 * 0x1p-9);
  EXPECT_EQ(e4m3_to_double(0x08), 0x1p-6);
  EXPECT_EQ(e4m3_to_double(0x38), 1.0);
  EXPECT_EQ(e4m3_to_double(0x00), 0.0);
  EXPECT_TRUE(std::signbit(e4m3_to_double(0x80)));
  EXPECT_TRUE(std::isnan(e4m3_to_double(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_double(0xFF)));
}

TEST(E4m3, AllCodesRoundTripAndAreOrdered) {
  for (int c = 0; c < 256; ++c) {
    const double v = e4m3_to_double(static_cast<uint8_t>(c));
    EXPECT_EQ(e4m3_from_double(v), c) << "code " << c;
  }
  for (int c = 1; c <= 0x7E; ++c) {
    EXPECT_LT(e4m3_to_double(static_cast<uint8_t>(c - 1)), e4m3_to_double(static_cast<uint8_t>(c)));
  }
}

// Every midpoint between neighbouring finite codes (and one ulp either side of it) against a
// brute-force nearest search: round-to-nearest-even over the whole format, both signs.
TEST(E4m3, EveryMidpointRoundsToNearestEven) {
  for (int c = 0; c < 0x7E; ++c) {
    const double lo = e4m3_to_double(static_cast<uint8_t>(c));
    const double hi = e4m3_to_double(static_cast<uint8_t>(c + 1));
    const double mid = (lo + hi) / 2;  // exact: both are short binary fractions
    const int even = (c % 2 == 0) ? c : c + 1;
    for (double sign : {1.0, -1.0}) {
      const uint8_t s = sign < 0 ? 0x80 : 0x00;
      EXPECT_EQ(e4m3_from_double(sign * mid), even | s) << "mid " << sign * mid;
      EXPECT_EQ(e4m3_from_double(sign * std::nextafter(mid, 0.0)), c | s) << sign * mid;
      EXPECT_EQ(e4m3_from_double(sign * std::nextafter(mid, kInf)), (c + 1) | s) << sign * mid;
    }
  }
  // Above the largest finite value everything saturates (no rounding to NaN).
  EXPECT_EQ(e4m3_from_double(std::nextafter(448.0, kInf)), 0x7E);
  EXPECT_EQ(e4m3_from_double(479.9), 0x7E);
  EXPECT_EQ(e4m3_from_double(480.0), 0x7E);
}

// ---------------------------------------------------------------------------------- FP8 token

float scale_of(const std::vector<uint8_t>& tok, int t) {
  float s;
  std::memcpy(&s, tok.data() + mla::kLatentDim + 4 * t, sizeof s);
  return s;
}

std::vector<double> generated(uint64_t seed, uint64_t stream, std::size_t n, double std) {
  std::vector<double> v(n);
  mla::gen::fill_f64(seed, stream, 0.0, std, v);
  return v;
}

TEST(Fp8Token, ScalesFollowTheSchema) {
  std::vector<double> lat = generated(5, 0, mla::kLatentDim, 2.0);
  const std::vector<double> rope = generated(5, 1, mla::kRopeDim, 1.0);
  for (int i = 128; i < 256; ++i) lat[i] *= 1e-6;  // amax below the 1e-4 clamp
  for (int i = 256; i < 384; ++i) lat[i] = 0.0;    // all zero
  for (auto fmt : {mla::ScaleFmt::fp32, mla::ScaleFmt::ue8m0}) {
    std::vector<uint8_t> tok(mla::kFp8TokenBytes);
    mla::fp8_quantize_token(lat, rope, fmt, tok);
    for (int t = 0; t < 4; ++t) {
      double amax = 0;
      for (int j = 0; j < 128; ++j) amax = std::max(amax, std::fabs(lat[128 * t + j]));
      const float fp32_scale = std::max(static_cast<float>(amax), 1e-4f) / 448.0f;
      const float s = scale_of(tok, t);
      if (fmt == mla::ScaleFmt::fp32) {
        EXPECT_EQ(s, fp32_scale) << "block " << t;
      } else {
        int e = 0;
        EXPECT_EQ(std::frexp(s, &e), 0.5f) << "ue8m0 scale is a power of two, block " << t;
        EXPECT_GE(s, fp32_scale);
        EXPECT_LT(s, 2 * fp32_scale);
      }
    }
    for (int j = 256; j < 384; ++j) EXPECT_EQ(tok[j], 0x00);
    // Rope: bf16 little endian after the scales.
    for (std::size_t j = 0; j < mla::kRopeDim; ++j) {
      uint16_t b;
      std::memcpy(&b, tok.data() + 528 + 2 * j, 2);
      EXPECT_EQ(b, mla::bf16_from_double(rope[j]));
    }
  }
}

// Values placed exactly on the e4m3 grid of a power-of-two scale come back bit-exact, and the
// codes are the ones they were built from: quantize and dequantize are inverse on the grid.
TEST(Fp8Token, GridValuesRoundTripExactly) {
  constexpr double kScale = 0x1p-8;  // amax 1.75 -> 1.75 / 448 = 2^-8 exactly, in both formats
  std::vector<double> lat(mla::kLatentDim);
  std::vector<uint8_t> want(mla::kLatentDim);
  for (std::size_t i = 0; i < lat.size(); ++i) {
    // Every block holds the code 0x7E (448) so its amax is 1.75; the rest cycle over all codes.
    const uint8_t code = (i % 128 == 0) ? 0x7E : static_cast<uint8_t>((i * 37) % 256);
    const uint8_t c = (code & 0x7F) == 0x7F ? 0x00 : code;  // skip the NaN codes
    want[i] = c;
    lat[i] = e4m3_to_double(c) * kScale;
  }
  const std::vector<double> rope(mla::kRopeDim, 0.25);
  for (auto fmt : {mla::ScaleFmt::fp32, mla::ScaleFmt::ue8m0}) {
    std::vector<uint8_t> tok(mla::kFp8TokenBytes);
    mla::fp8_quantize_token(lat, rope, fmt, tok);
    std::vector<double> back(mla::kQkDim);
    mla::fp8_dequantize_token(tok, back);
    for (std::size_t i = 0; i < lat.size(); ++i) {
      ASSERT_EQ(tok[i], want[i]) << i;
      ASSERT_EQ(back[i], lat[i]) << i;
      ASSERT_EQ(std::signbit(back[i]), std::signbit(lat[i])) << i;
    }
    for (std::size_t j = 0; j < mla::kRopeDim; ++j) EXPECT_EQ(back[mla::kLatentDim + j], 0.25);
  }
}

// x is rounded to float32 and divided in float32 (schema, reference/python): a value whose
// float64 quotient lies just above an e4m3 tie but whose float32 one is the tie rounds to even.
TEST(Fp8Token, QuotientIsFloat32) {
  std::vector<double> lat(mla::kLatentDim, 0.0);
  const std::vector<double> rope(mla::kRopeDim, 0.0);
  for (int t = 0; t < 4; ++t) lat[128 * t] = 1.75;  // scale 2^-8 in every block
  // x / 2^-8 = 1.0625 + 2^-40: float64 keeps the excess (-> 1.125, code 0x39), float32 does
  // not (-> tie -> 1.0, code 0x38).
  lat[1] = (1.0625 + 0x1p-40) * 0x1p-8;
  std::vector<uint8_t> tok(mla::kFp8TokenBytes);
  mla::fp8_quantize_token(lat, rope, mla::ScaleFmt::fp32, tok);
  EXPECT_EQ(tok[1], 0x38);
  EXPECT_EQ(e4m3_from_double(1.0625 + 0x1p-40), 0x39);
}

// The dequantizer decodes through a table: every one of the 256 codes, in every block, under a
// scale that is not a power of two, must give e4m3_to_double(code) * scale exactly (NaN codes NaN).
TEST(Fp8Token, TableDecodeMatchesFormulaForEveryCode) {
  std::vector<uint8_t> tok(mla::kFp8TokenBytes);
  const float scales[4] = {0.0123f, 1.0f, 3.0f, 1e-4f / 448.0f};
  for (std::size_t i = 0; i < mla::kLatentDim; ++i) tok[i] = static_cast<uint8_t>((i * 37 + i / 128) % 256);
  for (int t = 0; t < 4; ++t) std::memcpy(tok.data() + mla::kLatentDim + 4 * t, &scales[t], sizeof(float));
  std::vector<double> back(mla::kQkDim);
  mla::fp8_dequantize_token(tok, back);
  for (std::size_t i = 0; i < mla::kLatentDim; ++i) {
    const double want = mla::e4m3_to_double(tok[i]) * static_cast<double>(scales[i / 128]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(back[i])) << i;
    } else {
      EXPECT_EQ(back[i], want) << "code " << int{tok[i]} << " at " << i;
    }
  }
  std::vector<bool> seen(256);
  for (std::size_t i = 0; i < mla::kLatentDim; ++i) seen[tok[i]] = true;
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 256);  // the pattern covers every code
}

TEST(Fp8Token, NaNBlockAndBadSizes) {
  std::vector<double> lat(mla::kLatentDim, 1.0);
  lat[130] = kNaN;
  const std::vector<double> rope(mla::kRopeDim, 0.0);
  std::vector<uint8_t> tok(mla::kFp8TokenBytes);
  mla::fp8_quantize_token(lat, rope, mla::ScaleFmt::ue8m0, tok);
  EXPECT_TRUE(std::isnan(scale_of(tok, 1)));
  for (int j = 128; j < 256; ++j) EXPECT_EQ(tok[j], 0x7F) << j;
  std::vector<double> back(mla::kQkDim);
  mla::fp8_dequantize_token(tok, back);
  EXPECT_TRUE(std::isnan(back[200]));
  EXPECT_EQ(back[0], 1.0);  // other blocks unaffected (1.0 is on the grid of a power-of-two scale)
  EXPECT_EQ(back[300], 1.0);

  std::vector<uint8_t> short_tok(mla::kFp8TokenBytes - 1);
  EXPECT_THROW(mla::fp8_quantize_token(lat, rope, mla::ScaleFmt::fp32, short_tok), mla::Error);
  EXPECT_THROW(mla::fp8_quantize_token(std::span(lat).first(511), rope, mla::ScaleFmt::fp32, tok), mla::Error);
  EXPECT_THROW(mla::fp8_dequantize_token(short_tok, back), mla::Error);
  std::vector<double> short_out(mla::kQkDim - 1);
  EXPECT_THROW(mla::fp8_dequantize_token(tok, short_out), mla::Error);
}


// ---------------------------------------------------------------------------------- FP8 recipes

TEST(Fp8Recipe, NamesRoundTripAndUnknownOnesAreRefused) {
  for (auto r : {mla::Fp8Recipe::deepseek_v32, mla::Fp8Recipe::flashmla}) {
    EXPECT_EQ(mla::fp8_recipe_from_string(mla::to_string(r)), r);
  }
  for (auto f : {mla::ScaleFmt::fp32, mla::ScaleFmt::ue8m0}) {
    EXPECT_EQ(mla::scale_fmt_from_string(mla::to_string(f)), f);
  }
  EXPECT_STREQ(mla::to_string(mla::Fp8Recipe::deepseek_v32), "deepseek_v32");
  EXPECT_STREQ(mla::to_string(mla::Fp8Recipe::flashmla), "flashmla");
  try {
    (void)mla::fp8_recipe_from_string("vllm");
    ADD_FAILURE() << "an unknown recipe was accepted";
  } catch (const mla::Error& e) {
    EXPECT_NE(std::string(e.what()).find("deepseek_v32, flashmla"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)mla::scale_fmt_from_string("e8m0"), mla::Error);
}

TEST(Fp8Recipe, ZeroBlockScales) {
  // docs/field.md: an all-zero block gets 1e-4/448 (ue8m0 2^-22) from DeepSeek's rule and 1e-4
  // (ue8m0 2^-13) from FlashMLA's.
  using mla::Fp8Recipe;
  using mla::ScaleFmt;
  EXPECT_EQ(mla::fp8_block_scale(0.0, ScaleFmt::fp32, Fp8Recipe::deepseek_v32), 1e-4f / 448.0f);
  EXPECT_EQ(mla::fp8_block_scale(0.0, ScaleFmt::fp32, Fp8Recipe::flashmla), 1e-4f);
  EXPECT_EQ(mla::fp8_block_scale(0.0, ScaleFmt::ue8m0, Fp8Recipe::deepseek_v32), 0x1p-22f);
  EXPECT_EQ(mla::fp8_block_scale(0.0, ScaleFmt::ue8m0, Fp8Recipe::flashmla), 0x1p-13f);
  // The default is DeepSeek's: callers from before recipes had names are unchanged.
  EXPECT_EQ(mla::fp8_block_scale(0.0, ScaleFmt::fp32), 1e-4f / 448.0f);
  EXPECT_TRUE(std::isnan(mla::fp8_block_scale(kNaN, ScaleFmt::ue8m0, Fp8Recipe::flashmla)));
  EXPECT_TRUE(std::isinf(mla::fp8_block_scale(kInf, ScaleFmt::ue8m0, Fp8Recipe::flashmla)));
}

// The two recipes give different scales exactly below their crossover and the same scale
// everywhere else. The crossovers are found here by walking float32 values, not taken from the
// formulas: fp32 scales part where amax/448 falls under 1e-4 (amax ~ 0.0448); ue8m0 scales only
// where DeepSeek's scale rounds up to less than FlashMLA's 2^-13, i.e. amax <= 448·2^-14.
TEST(Fp8Recipe, TheRecipesDifferExactlyBelowTheCrossover) {
  using mla::Fp8Recipe;
  using mla::ScaleFmt;
  auto differ = [](float a, ScaleFmt f) {
    return mla::fp8_block_scale(a, f, Fp8Recipe::deepseek_v32) != mla::fp8_block_scale(a, f, Fp8Recipe::flashmla);
  };
  // Walk every float32 in [0.02, 0.05] and a log-spaced sweep over [2^-30, 2^20].
  std::vector<float> amax{0.0f};
  for (float a = 0.02f; a <= 0.05f; a = std::nextafter(a, 1.0f)) amax.push_back(a);
  for (double e = -30; e <= 20; e += 1.0 / 64) amax.push_back(static_cast<float>(std::exp2(e)));
  float last_fp32 = -1, first_same_fp32 = 0, last_ue = -1, first_same_ue = 0;
  for (float a : amax) {
    if (differ(a, ScaleFmt::fp32)) {
      last_fp32 = std::max(last_fp32, a);
    } else if (first_same_fp32 == 0 || a < first_same_fp32) {
      first_same_fp32 = a;
    }
    if (differ(a, ScaleFmt::ue8m0)) {
      last_ue = std::max(last_ue, a);
    } else if (first_same_ue == 0 || a < first_same_ue) {
      first_same_ue = a;
    }
  }
  // One threshold each: everything below differs, everything at or above agrees.
  EXPECT_EQ(std::nextafter(last_fp32, 1.0f), first_same_fp32);
  EXPECT_EQ(std::nextafter(last_ue, 1.0f), first_same_ue);
  EXPECT_GT(first_same_fp32, 0.04479f);
  EXPECT_LT(first_same_fp32, 0.04481f);
  EXPECT_EQ(last_ue, 448.0f * 0x1p-14f);  // 0.02734375: DeepSeek's scale is exactly 2^-14 there
  // Where they agree, both are amax/448 (fp32) or its power-of-two ceiling.
  for (float a : {first_same_fp32, 0.1f, 1.75f, 448.0f, 1e3f}) {
    EXPECT_EQ(mla::fp8_block_scale(a, ScaleFmt::fp32, Fp8Recipe::flashmla), a / 448.0f) << a;
  }
}

// Whole tokens: blocks whose amax is under the crossover are encoded differently (scale bytes,
// and the codes unless the block is all zero); every other byte is identical.
TEST(Fp8Recipe, TokensDifferOnlyInTheTinyBlocks) {
  std::vector<double> lat = generated(9, 0, mla::kLatentDim, 1.0);
  const std::vector<double> rope = generated(9, 1, mla::kRopeDim, 1.0);
  for (int i = 0; i < 128; ++i) lat[i] = mla::bf16_to_float(mla::bf16_from_double(lat[i] * 0.01));  // amax ~0.017
  for (int i = 128; i < 256; ++i) lat[i] = 0.0;                                                  // all zero
  // block 2 keeps amax ~1.7; block 3 sits just above the fp32 crossover
  for (int i = 384; i < 512; ++i) lat[i] = mla::bf16_to_float(mla::bf16_from_double(lat[i] * 0.0265));
  lat[384] = 0.046875;  // bf16-exact, > 0.0448
  for (auto fmt : {mla::ScaleFmt::fp32, mla::ScaleFmt::ue8m0}) {
    SCOPED_TRACE(mla::to_string(fmt));
    std::vector<uint8_t> a(mla::kFp8TokenBytes), b(mla::kFp8TokenBytes), d(mla::kFp8TokenBytes);
    mla::fp8_quantize_token(lat, rope, fmt, a, mla::Fp8Recipe::deepseek_v32);
    mla::fp8_quantize_token(lat, rope, fmt, b, mla::Fp8Recipe::flashmla);
    mla::fp8_quantize_token(lat, rope, fmt, d);  // the default recipe
    EXPECT_EQ(a, d);
    auto block_differs = [&](int t) {
      bool any = std::memcmp(a.data() + 512 + 4 * t, b.data() + 512 + 4 * t, 4) != 0;
      for (int j = 0; j < 128; ++j) any = any || a[128 * t + j] != b[128 * t + j];
      return any;
    };
    EXPECT_TRUE(block_differs(0));
    EXPECT_TRUE(block_differs(1));
    EXPECT_FALSE(block_differs(2));
    EXPECT_FALSE(block_differs(3));
    EXPECT_EQ(std::memcmp(a.data() + 528, b.data() + 528, 128), 0) << "rope bytes";
    for (int j = 128; j < 256; ++j) ASSERT_EQ(a[j], 0x00) << j;  // zero codes either way
    for (int j = 128; j < 256; ++j) ASSERT_EQ(b[j], 0x00) << j;
    EXPECT_EQ(scale_of(b, 1), fmt == mla::ScaleFmt::ue8m0 ? 0x1p-13f : 1e-4f);
    // FlashMLA's floor keeps the tiny block's codes small (amax 0.017 / 1e-4 = 170 < 448):
    // less precision than DeepSeek's full-range codes, but the same values within e4m3 rounding.
    std::vector<double> va(mla::kQkDim), vb(mla::kQkDim);
    mla::fp8_dequantize_token(a, va);
    mla::fp8_dequantize_token(b, vb);
    for (int j = 0; j < 128; ++j) {
      // half an e4m3 ulp (2^-4 relative) or half a subnormal step (2^-10 of the scale)
      EXPECT_LE(std::fabs(va[j] - lat[j]), 0x1p-4 * std::fabs(lat[j]) + 0x1p-10 * scale_of(a, 0)) << j;
      EXPECT_LE(std::fabs(vb[j] - lat[j]), 0x1p-4 * std::fabs(lat[j]) + 0x1p-10 * scale_of(b, 0)) << j;
    }
  }
}

}  // namespace

// float16: decoding against values known from the format, every code round-tripping, and
// encoding picking the nearest code (ties to the even one) for random floats of every scale.
TEST(Float16, DecodesEncodesAndRoundsToNearestEven) {
  EXPECT_EQ(mla::f16_to_double(0x3C00), 1.0);
  EXPECT_EQ(mla::f16_to_double(0xC000), -2.0);
  EXPECT_EQ(mla::f16_to_double(0x7BFF), 65504.0);
  EXPECT_EQ(mla::f16_to_double(0x0400), std::ldexp(1.0, -14));
  EXPECT_EQ(mla::f16_to_double(0x0001), std::ldexp(1.0, -24));
  EXPECT_TRUE(std::isinf(mla::f16_to_double(0x7C00)));
  EXPECT_TRUE(std::isnan(mla::f16_to_double(0x7E00)));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const double v = mla::f16_to_double(bits);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(mla::f16_to_double(mla::f16_from_float(static_cast<float>(v)))));
      continue;
    }
    ASSERT_EQ(mla::f16_from_float(static_cast<float>(v)), bits) << std::hex << b;
  }
  // Ties go to the even code; 65520 (halfway to 2^16) overflows; half of 2^-24 is 0.
  EXPECT_EQ(mla::f16_from_float(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(mla::f16_from_float(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(mla::f16_from_float(65519.0f), 0x7BFF);
  EXPECT_EQ(mla::f16_from_float(65520.0f), 0x7C00);
  EXPECT_EQ(mla::f16_from_float(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(mla::f16_from_float(3 * std::ldexp(1.0f, -25)), 0x0002);
  EXPECT_EQ(mla::f16_from_float(-0.0f), 0x8000);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(mant(rng), static_cast<int>(rng() % 44) - 28) * ((rng() & 1) ? -1.0f : 1.0f);
    const uint16_t c = mla::f16_from_float(x);
    const double got = mla::f16_to_double(c);
    if (std::isinf(got)) {
      EXPECT_GE(std::abs(x), 65520.0f) << x;
      continue;
    }
    const double err = std::abs(got - x);
    // No neighbouring code is nearer.
    for (const int step : {-1, 1}) {
      const auto n = static_cast<uint16_t>(c + step);
      const double other = mla::f16_to_double(n);
      if (std::isnan(other) || ((n ^ c) & 0x8000)) continue;
      EXPECT_LE(err, std::abs(other - x)) << x << " coded " << std::hex << c;
    }
  }
}
