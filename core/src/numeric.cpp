#include "mla/core/numeric.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "mla/core/error.hpp"

// The byte layouts in fixtures/SCHEMA.md are little endian; memcpy of host values is only right
// on a little-endian host, which is every target this suite builds for.
static_assert(std::endian::native == std::endian::little, "the golden byte layouts are little endian");

namespace mla {

uint16_t f16_from_float(float x) {
  const uint32_t f = std::bit_cast<uint32_t>(x);
  const auto sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  const uint32_t a = f & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;   // NaN: quiet, sign kept
  if (a >= 0x47800000u) return sign | 0x7C00u;  // >= 2^16 (and inf): infinity
  if (a < 0x38800000u) {
    // Below 2^-14, a float16 subnormal: x·2^24 (exact, a power of two) rounded to an integer,
    // nearest even; 1024 is the smallest normal's code, which is right.
    const float scaled = std::bit_cast<float>(a) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // Normal: rebias the exponent, keep 10 of the 23 mantissa bits, round the other 13 to nearest
  // even; a carry runs into the exponent (65520 and above become infinity, as they must).
  const uint32_t exp = (a >> 23) - 127 + 15, man = a & 0x7FFFFFu;
  uint32_t h = (exp << 10) | (man >> 13);
  const uint32_t rest = man & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

double f16_to_double(uint16_t bits) {
  const int exp = (bits >> 10) & 0x1F, man = bits & 0x3FF;
  double v = 0;
  if (exp == 0x1F) v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0) v = std::ldexp(man, -24);  // subnormal: man · 2^-14 · 2^-10
  else v = std::ldexp(1024 + man, exp - 25);    // (1 + man/1024) · 2^(exp-15)
  return (bits >> 15) ? -v : v;
}

namespace {

constexpr uint8_t kE4m3MaxCode = 0x7E;  // 1.75 * 2^8 = 448
constexpr double kE4m3Max = 448.0;
constexpr uint8_t kE4m3NaN = 0x7F;
constexpr int kE4m3Bias = 7;

}  // namespace

uint8_t e4m3_from_double(double x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<uint8_t>(kE4m3NaN | sign);
  const double a = std::fabs(x);
  // e4m3fn has no infinity: overflow, infinities included, saturates (the schema's rule and
  // reference/python's), where a plain torch cast would give NaN.
  if (a > kE4m3Max) return static_cast<uint8_t>(kE4m3MaxCode | sign);

  constexpr double kMinNormal = 0x1p-6;
  if (a < kMinNormal) {
    // Subnormal grid: multiples of 2^-9. Scaling by a power of two is exact, and nearbyint in
    // the default rounding mode is round-half-to-even. q == 8 lands exactly on the smallest
    // normal, whose code is also 8.
    const double q = std::nearbyint(a * 0x1p9);
    return static_cast<uint8_t>(static_cast<uint8_t>(q) | sign);
  }
  int e2 = 0;
  const double m = std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1)
  int exponent = e2 - 1;                // a = (2m) * 2^exponent, 2m in [1, 2)
  // (2m - 1) * 8 is exact in double; rounding it picks the 3-bit mantissa.
  double q = std::nearbyint((2.0 * m - 1.0) * 8.0);
  if (q == 8.0) {
    q = 0.0;
    ++exponent;
  }
  // a <= 448 guarantees exponent <= 8 and, at exponent 8, q <= 6: never the NaN code.
  const int code = ((exponent + kE4m3Bias) << 3) | static_cast<int>(q);
  return static_cast<uint8_t>(code | sign);
}

double e4m3_to_double(uint8_t bits) {
  const bool negative = (bits & 0x80) != 0;
  const int exp_field = (bits >> 3) & 0xF;
  const int mant = bits & 0x7;
  double v;
  if (exp_field == 0xF && mant == 0x7) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (exp_field == 0) {
    v = std::ldexp(static_cast<double>(mant), -9);
  } else {
    v = std::ldexp(1.0 + mant / 8.0, exp_field - kE4m3Bias);
  }
  return negative ? -v : v;
}

// Built from e4m3_to_double, so the table cannot disagree with it (suites/core checks all 256
// entries through fp8_dequantize_token too).
const std::array<double, 256>& e4m3_table() {
  static const std::array<double, 256> t = [] {
    std::array<double, 256> v{};
    for (int c = 0; c < 256; ++c) v[static_cast<std::size_t>(c)] = e4m3_to_double(static_cast<uint8_t>(c));
    return v;
  }();
  return t;
}

const char* to_string(ScaleFmt f) { return f == ScaleFmt::ue8m0 ? "ue8m0" : "fp32"; }

ScaleFmt scale_fmt_from_string(std::string_view s) {
  if (s == "fp32") return ScaleFmt::fp32;
  if (s == "ue8m0") return ScaleFmt::ue8m0;
  throw Error(fmt::format("unknown FP8 scale format '{}' (known: fp32, ue8m0)", s));
}

const char* to_string(Fp8Recipe r) { return r == Fp8Recipe::flashmla ? "flashmla" : "deepseek_v32"; }

Fp8Recipe fp8_recipe_from_string(std::string_view s) {
  if (s == "deepseek_v32") return Fp8Recipe::deepseek_v32;
  if (s == "flashmla") return Fp8Recipe::flashmla;
  throw Error(fmt::format("unknown FP8 scale recipe '{}' (known: deepseek_v32, flashmla)", s));
}

float fp8_block_scale(double amax, ScaleFmt fmt, Fp8Recipe recipe) {
  if (std::isnan(amax)) return std::numeric_limits<float>::quiet_NaN();
  // The schema does this in float32: the cast is exact for bf16 inputs and, max being
  // monotone, equal to the max of the float32-rounded values otherwise.
  const float a = static_cast<float>(amax);
  const float scale = recipe == Fp8Recipe::flashmla ? std::max(a / 448.0f, 1e-4f)
                                                    : std::max(a, 1e-4f) / 448.0f;
  if (fmt == ScaleFmt::fp32 || std::isinf(scale)) return scale;
  // ue8m0: the smallest power of two >= scale, exactly (no log2/pow rounding): scale is a
  // positive normal float32 here (>= 1e-4/448).
  int e2 = 0;
  const float m = std::frexp(scale, &e2);  // scale = m * 2^e2, m in [0.5, 1)
  return m == 0.5f ? scale : std::ldexp(1.0f, e2);
}

namespace {

float block_scale(std::span<const double> block, ScaleFmt fmt, Fp8Recipe recipe) {
  double amax = 0.0;
  bool any_nan = false;
  for (double v : block) {
    if (std::isnan(v)) any_nan = true;
    amax = std::max(amax, std::fabs(v));
  }
  return fp8_block_scale(any_nan ? std::numeric_limits<double>::quiet_NaN() : amax, fmt, recipe);
}

}  // namespace

void fp8_quantize_token(std::span<const double> latent, std::span<const double> rope, ScaleFmt fmt,
                        std::span<uint8_t> out, Fp8Recipe recipe) {
  if (latent.size() != kLatentDim || rope.size() != kRopeDim || out.size() != kFp8TokenBytes) {
    throw Error(fmt::format(
        "fp8_quantize_token: expected latent {} / rope {} / out {} elements, got {} / {} / {}",
        kLatentDim, kRopeDim, kFp8TokenBytes, latent.size(), rope.size(), out.size()));
  }
  constexpr std::size_t kBlocks = kLatentDim / kFp8BlockSize;
  for (std::size_t t = 0; t < kBlocks; ++t) {
    const auto block = latent.subspan(t * kFp8BlockSize, kFp8BlockSize);
    const float scale = block_scale(block, fmt, recipe);
    for (std::size_t j = 0; j < kFp8BlockSize; ++j) {
      // As deployed (and in reference/python): the value is a float32 and the quotient is a
      // correctly rounded float32 division, then encoded. Dividing in float64 instead would
      // differ whenever float32 rounding lands the quotient exactly on an e4m3 tie. A NaN
      // quotient is stored as the positive NaN code so the bytes do not depend on the sign of
      // the host's default NaN.
      const float v = static_cast<float>(block[j]) / scale;
      out[t * kFp8BlockSize + j] = std::isnan(v) ? kE4m3NaN : e4m3_from_double(v);
    }
    std::memcpy(out.data() + kLatentDim + 4 * t, &scale, sizeof(float));
  }
  for (std::size_t j = 0; j < kRopeDim; ++j) {
    const uint16_t b = bf16_from_double(rope[j]);
    std::memcpy(out.data() + kLatentDim + 4 * kBlocks + 2 * j, &b, sizeof(uint16_t));
  }
}

void fp8_dequantize_token(std::span<const uint8_t> token, std::span<double> out) {
  if (token.size() != kFp8TokenBytes || out.size() != kQkDim) {
    throw Error(fmt::format("fp8_dequantize_token: expected {} bytes -> {} values, got {} -> {}",
                            kFp8TokenBytes, kQkDim, token.size(), out.size()));
  }
  constexpr std::size_t kBlocks = kLatentDim / kFp8BlockSize;
  const auto& table = e4m3_table();
  for (std::size_t t = 0; t < kBlocks; ++t) {
    float scale = 0;
    std::memcpy(&scale, token.data() + kLatentDim + 4 * t, sizeof(float));
    // e4m3 (4 significant bits) times a float32 (24 bits) is exact in float64. The decode is a
    // lookup: the oracle decodes every attended token once per call, and e4m3_to_double's
    // ldexp per value made the FP8 path several times slower than the bf16 one.
    const double s = static_cast<double>(scale);
    const uint8_t* codes = token.data() + t * kFp8BlockSize;
    double* dst = out.data() + t * kFp8BlockSize;
    for (std::size_t j = 0; j < kFp8BlockSize; ++j) dst[j] = table[codes[j]] * s;
  }
  for (std::size_t j = 0; j < kRopeDim; ++j) {
    uint16_t b = 0;
    std::memcpy(&b, token.data() + kLatentDim + 4 * kBlocks + 2 * j, sizeof(uint16_t));
    out[kLatentDim + j] = bf16_to_float(b);
  }
}

}  // namespace mla
