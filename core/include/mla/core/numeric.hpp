// Exact codecs for the storage formats of the goldens and caches (fixtures/SCHEMA.md).
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace mla {

// bfloat16 <-> float. Rounding is round-to-nearest-even from float32; NaN stays a quiet NaN
// with its sign. A double is rounded to float32 first, then to bf16 (the schema's definition).
// Defined here, inline: the oracles and the certifier convert every element of every case
// through them, and an out-of-line call per element cost 7 % of a plug-in certification under
// the sanitizers (the 2-core VM).
inline uint16_t bf16_from_float(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) {
    // NaN: keep sign and the top payload bits, force the quiet bit: a signalling NaN truncated
    // to 16 bits could otherwise become an infinity.
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  // Round to nearest even on the 16 discarded bits; a carry into the exponent is the correct
  // result (including overflow to infinity).
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}
// The schema rounds twice on purpose (double -> float32 -> bf16, each nearest-even), as torch
// does when a float64 tensor is cast through float32; a direct double -> bf16 rounding differs
// on rare double-rounding ties. A NaN goes through float32 too, keeping its sign and top payload
// bits as numpy's astype does, so the Python reference and this agree bit for bit.
inline uint16_t bf16_from_double(double x) { return bf16_from_float(static_cast<float>(x)); }
inline float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// IEEE binary16 (float16) <-> float, written out rather than through a compiler's _Float16 (not
// every supported compiler has it on x86): round to nearest even from float32, subnormals down to
// 2^-24, overflow to infinity, NaN stays a quiet NaN with its sign. Decoding is exact.
uint16_t f16_from_float(float x);
double f16_to_double(uint16_t bits);

// float8 e4m3fn (OCP): bias 7, no infinities, 0x7F/0xFF NaN, max finite ±448, subnormals down
// to 2^-9. Encoding rounds to nearest even and saturates finite overflow to ±448 (NaN -> 0x7F).
uint8_t e4m3_from_double(double x);
double e4m3_to_double(uint8_t bits);
// Every e4m3 code's value (e4m3_to_double of each), built once: for decoders that read a table.
const std::array<double, 256>& e4m3_table();

// The 656-byte FP8 cache token (V3.2 layout): [512 e4m3 | 4 float32 scales | 64 bf16 rope].
inline constexpr std::size_t kFp8TokenBytes = 656;
inline constexpr std::size_t kLatentDim = 512;
inline constexpr std::size_t kRopeDim = 64;
inline constexpr std::size_t kQkDim = 576;
inline constexpr std::size_t kFp8BlockSize = 128;

enum class ScaleFmt { fp32, ue8m0 };
// "fp32" / "ue8m0", the schema's `scale_fmt` words; the parser throws mla::Error naming the
// known ones on another word.
const char* to_string(ScaleFmt f);
ScaleFmt scale_fmt_from_string(std::string_view s);

// How a block's float32 scale is derived from its amax (fixtures/SCHEMA.md, "FP8 scale
// recipes"). Both are in deployed use and differ only for blocks with amax below 448·1e-4:
//   deepseek_v32  DeepSeek V3.2 inference: max(amax, 1e-4) / 448 (clamp, then divide)
//   flashmla      FlashMLA's quantizer, vLLM's fp8_ds_mla writer: max(amax / 448, 1e-4)
//                 (divide, then clamp: an all-zero block gets 1e-4, ue8m0 2^-13, not 2^-22)
// docs/field.md, "The peers' conventions" (FP8 scale) and "Two FP8 scale recipes".
enum class Fp8Recipe { deepseek_v32, flashmla };
const char* to_string(Fp8Recipe r);                    // "deepseek_v32", "flashmla"
Fp8Recipe fp8_recipe_from_string(std::string_view s);  // throws mla::Error naming the known ones

// The float32 scale of a block whose largest |value| is `amax` (rounded to float32 first):
// the recipe's formula in float32, then for ue8m0 the smallest power of two >= it (exact, no
// log2). NaN for a NaN amax, +inf for an infinite one.
float fp8_block_scale(double amax, ScaleFmt fmt, Fp8Recipe recipe = Fp8Recipe::deepseek_v32);

// Quantizes one token: latent (512 values) and rope (64 values, rounded to bf16) into `out`
// (656 bytes): per 128-value block the scale above, each value e4m3(float32(x) / scale) with a
// float32 division. The default recipe is DeepSeek's, the one every FP8 golden used before
// recipes were named.
void fp8_quantize_token(std::span<const double> latent, std::span<const double> rope, ScaleFmt fmt,
                        std::span<uint8_t> out, Fp8Recipe recipe = Fp8Recipe::deepseek_v32);
// Dequantizes one 656-byte token into 576 doubles (exact: e4m3 value * float32 scale).
void fp8_dequantize_token(std::span<const uint8_t> token, std::span<double> out);

}  // namespace mla
