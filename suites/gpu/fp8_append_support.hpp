// The FP8 cache-append problems shared by the GPU test and the simulator test.
//
// Golden problems: every FP8 case of the catalog (of every attention family of
// fixtures/catalog.json) whose scale recipe is the one the CUDA append declares, turned into an append. Its tokens are the case's inputs/kv_cache_bf16 (already normalized and
// roped), one per slot some sequence uses, at that sequence and position, appended in an order
// unrelated to positions into a cache whose every slot holds the FP8 poison token. The whole
// cache afterwards must equal the case's inputs/kv_cache byte for byte: written slots because the
// encoding is deterministic, the others because nothing else may be touched.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"
#include "mla/cuda/cache_append.hpp"
#include "mla/cuda/cache_append_info.hpp"
#include "mla/golden/golden.hpp"
#include "support/goldens.hpp"

namespace mla::gputest {

inline constexpr std::size_t kFp8Tok = kFp8TokenBytes;

struct Fp8GoldenProblem {
  std::string id;  // "file:case"
  cuda::Fp8ScaleFmt scale_fmt = cuda::Fp8ScaleFmt::fp32;
  int batch = 0, page_size = 0, num_blocks = 0, max_blocks = 0;
  int64_t max_seq_len = 0;
  std::vector<int32_t> block_table, seq_ids, positions;
  std::vector<uint16_t> latent, k_pe;  // [n, 512], [n, 64] bf16 bits
  std::vector<uint8_t> want;           // the case's inputs/kv_cache, [nb, ps, 656]
  std::vector<char> used;              // [nb * ps]: slot written by some token

  int n() const { return static_cast<int>(seq_ids.size()); }
};

// The first differing byte of two FP8 caches, described, or "" when equal.
inline std::string first_difference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) return fmt::format("sizes {} and {}", got.size(), want.size());
  long n = 0;
  std::size_t first = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    if (got[k] != want[k] && n++ == 0) first = k;
  }
  if (n == 0) return "";
  const std::size_t slot = first / kFp8Tok, byte = first % kFp8Tok;
  const char* part = byte < 512 ? "code" : byte < 528 ? "scale" : "rope";
  return fmt::format("{} bytes differ; first: slot {} byte {} ({}): 0x{:02X}, expected 0x{:02X}", n, slot, byte,
                     part, got[first], want[first]);
}

inline ScaleFmt core_fmt(cuda::Fp8ScaleFmt f) { return f == cuda::Fp8ScaleFmt::ue8m0 ? ScaleFmt::ue8m0 : ScaleFmt::fp32; }
inline const char* fmt_name(cuda::Fp8ScaleFmt f) { return f == cuda::Fp8ScaleFmt::ue8m0 ? "ue8m0" : "fp32"; }

// One FP8 poison token (fixtures/SCHEMA.md): latent 0x7F, float32 NaN scales, bf16 NaN rope.
inline std::vector<uint8_t> fp8_poison_token() {
  std::vector<uint8_t> t(kFp8Tok, 0x7F);
  const uint32_t nan32 = 0x7FC00000u;
  for (int s = 0; s < 4; ++s) std::memcpy(t.data() + 512 + 4 * s, &nan32, 4);
  const uint16_t nan16 = 0x7FC0;
  for (int j = 0; j < 64; ++j) std::memcpy(t.data() + 528 + 2 * j, &nan16, 2);
  return t;
}

inline std::vector<uint8_t> fp8_poisoned_cache(std::size_t slots) {
  const std::vector<uint8_t> tok = fp8_poison_token();
  std::vector<uint8_t> c(slots * kFp8Tok);
  for (std::size_t s = 0; s < slots; ++s) std::memcpy(c.data() + s * kFp8Tok, tok.data(), kFp8Tok);
  return c;
}

// Every FP8 case of the catalog as an append problem; nullopt with `why` when the catalog is
// absent. A case without inputs/kv_cache_bf16 (a catalog older than the dataset) is an error:
// this generator writes it for every FP8 case.
inline std::optional<std::vector<Fp8GoldenProblem>> load_fp8_golden_problems(std::string& why) {
  const auto cat = testing::open_goldens(why);
  if (!cat) return std::nullopt;
  std::vector<Fp8GoldenProblem> out;
  // The cases of the recipe the CUDA FP8 append declares it writes (mla/cuda/cache_append_info.hpp);
  // another recipe's cases are for kernels that declare that one.
  const auto fp8 = testing::attention_cases(*cat, [](const golden::AttnHeader& h) {
    return h.shape.cache_format == CacheFormat::fp8 && h.fp8_recipe == cuda::kCacheAppendFp8Recipe;
  });
  for (const auto& ref : fp8) {
    {
      const auto c = golden::load_attn_case(cat->file(ref.file), ref.name);
      Fp8GoldenProblem p;
      p.id = fmt::format("{}:{}", ref.file, ref.name);
      if (c.kv_cache_bf16.empty()) throw Error(p.id + " has no inputs/kv_cache_bf16 (regenerate: ./mla.sh goldens)");
      p.scale_fmt = c.scale_fmt == ScaleFmt::ue8m0 ? cuda::Fp8ScaleFmt::ue8m0 : cuda::Fp8ScaleFmt::fp32;
      p.batch = c.shape.batch;
      p.page_size = c.shape.page_size;
      p.num_blocks = c.shape.num_blocks;
      p.max_blocks = c.shape.max_blocks;
      p.max_seq_len = int64_t{p.max_blocks} * p.page_size;
      p.block_table = c.block_table;
      p.want = c.kv_cache;
      p.used.assign(static_cast<std::size_t>(p.num_blocks) * p.page_size, 0);
      std::vector<std::pair<int32_t, int32_t>> toks;
      for (int i = 0; i < p.batch; ++i)
        for (int32_t t = 0; t < c.cache_seqlens[static_cast<std::size_t>(i)]; ++t) toks.emplace_back(i, t);
      // Launch order unrelated to positions (a kernel that wrote slot = token index would fail).
      for (int64_t k : gen::permutation(static_cast<uint64_t>(c.seed), 77, static_cast<int64_t>(toks.size()))) {
        const auto [seq, pos] = toks[static_cast<std::size_t>(k)];
        const std::size_t slot = static_cast<std::size_t>(
            int64_t{p.block_table[static_cast<std::size_t>(seq) * p.max_blocks + pos / p.page_size]} * p.page_size +
            pos % p.page_size);
        p.used[slot] = 1;
        p.seq_ids.push_back(seq);
        p.positions.push_back(pos);
        const uint16_t* src = c.kv_cache_bf16.data() + slot * kQkDim;
        p.latent.insert(p.latent.end(), src, src + kLatentDim);
        p.k_pe.insert(p.k_pe.end(), src + kLatentDim, src + kQkDim);
      }
      out.push_back(std::move(p));
    }
  }
  if (out.empty()) {
    why = "the catalog at " + cat->dir.string() + " has no FP8 case";
    return std::nullopt;
  }
  return out;
}

// The golden bytes must exercise the encoder's edges, or exact equality proves little.
struct Fp8Coverage {
  long saturated = 0;        // codes ±448 (0x7E / 0xFE)
  long subnormal = 0;        // exponent field 0, mantissa != 0
  long negative_zero = 0;    // 0x80
  long floored_scales = 0;   // blocks with amax < 1e-4 (scale = the floor's)
  long nan_codes = 0;        // 0x7F / 0xFF in used slots (must be 0)
};

inline Fp8Coverage fp8_coverage(const Fp8GoldenProblem& p) {
  Fp8Coverage c;
  float floor_scale = 1e-4f / 448.f;
  if (p.scale_fmt == cuda::Fp8ScaleFmt::ue8m0) {
    int e = 0;
    (void)std::frexp(floor_scale, &e);
    floor_scale = std::ldexp(1.f, e);
  }
  for (std::size_t slot = 0; slot < p.used.size(); ++slot) {
    if (!p.used[slot]) continue;
    const uint8_t* t = p.want.data() + slot * kFp8Tok;
    for (int j = 0; j < 512; ++j) {
      const uint8_t b = t[j];
      c.saturated += (b & 0x7F) == 0x7E;
      c.subnormal += (b & 0x78) == 0 && (b & 0x07) != 0;
      c.negative_zero += b == 0x80;
      c.nan_codes += (b & 0x7F) == 0x7F;
    }
    for (int s = 0; s < 4; ++s) {
      float sc = 0;
      std::memcpy(&sc, t + 512 + 4 * s, 4);
      c.floored_scales += sc == floor_scale;
    }
  }
  return c;
}

}  // namespace mla::gputest
