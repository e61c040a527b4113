#include "mla/core/presets.hpp"

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla {
namespace {

ModelConfig tiny(bool qlora, bool yarn) {
  // reference/python/mla_ref/config.py _TINY: runs in milliseconds; max_seq_len 32 > original
  // 16 turns YaRN on, original 32 turns it off.
  ModelConfig c;
  c.dim = 64;
  c.n_heads = 4;
  c.q_lora_rank = qlora ? 24 : 0;
  c.kv_lora_rank = 32;
  c.qk_nope_head_dim = 16;
  c.qk_rope_head_dim = 8;
  c.v_head_dim = 16;
  c.max_seq_len = 32;
  c.original_seq_len = yarn ? 16 : 32;
  c.max_batch_size = 4;
  return c;
}

ModelConfig v3(int64_t heads) {
  // DeepSeek-V3/V3.1 671B (docs/field.md, "Upstream semantics": dim 7168, 128 heads, q_lora
  // 1536, kv_lora 512, rope 64, nope 128, v 128, mscale 1.0); tensor parallelism shards the heads.
  ModelConfig c;
  c.dim = 7168;
  c.n_heads = heads;
  c.q_lora_rank = 1536;
  c.mscale = 1.0;
  return c;
}

ModelConfig v2_lite() {
  // DeepSeek-V2-Lite 16B: dim 2048, 16 heads, no q-LoRA, mscale 0.707.
  ModelConfig c;
  c.dim = 2048;
  c.n_heads = 16;
  c.q_lora_rank = 0;
  c.mscale = 0.707;
  return c;
}

Preset make(std::string name, std::string description, ModelConfig cfg, int64_t layers) {
  cfg.preset = name;
  return {std::move(name), std::move(description), cfg, layers};
}

}  // namespace

const std::vector<Preset>& presets() {
  // Layer counts: V3 has 61 layers, V2-Lite 27 (docs/field.md, "Upstream semantics"); the tiny test
  // models are one layer (they exist to exercise a layer, not a model).
  static const std::vector<Preset> table{
      make("tiny", "test model: 4 heads, q-LoRA, YaRN on", tiny(true, true), 1),
      make("tiny-noyarn", "test model: 4 heads, q-LoRA, YaRN off", tiny(true, false), 1),
      make("tiny-noqlora", "test model: 4 heads, no q-LoRA, YaRN on", tiny(false, true), 1),
      make("tiny-noqlora-noyarn", "test model: 4 heads, no q-LoRA, YaRN off", tiny(false, false), 1),
      make("v2-lite", "DeepSeek-V2-Lite 16B: 16 heads, no q-LoRA", v2_lite(), 27),
      make("v3", "DeepSeek-V3/V3.1 671B: 128 heads", v3(128), 61),
      make("v3-tp2", "DeepSeek-V3 with tensor parallelism 2: 64 heads per GPU", v3(64), 61),
      make("v3-tp4", "DeepSeek-V3 with tensor parallelism 4: 32 heads per GPU", v3(32), 61),
      make("v3-tp8", "DeepSeek-V3 with tensor parallelism 8: 16 heads per GPU", v3(16), 61),
      // The indexer's own sizes (64 x 128, top-2048) live in the Python reference's ModelArgs;
      // the MLA part, which is what this table describes, is V3's.
      make("v32", "DeepSeek-V3.2 671B: V3's MLA (128 heads) and the lightning indexer", v3(128), 61),
      make("tiny-indexer", "test model: tiny (q-LoRA, YaRN on) with an indexer", tiny(true, true), 1),
      make("tiny-indexer-h64", "test model: tiny (q-LoRA, YaRN on) with V3.2's 64 index heads", tiny(true, true), 1),
  };
  return table;
}

const Preset& preset(std::string_view name) {
  std::vector<std::string> known;
  for (const auto& p : presets()) {
    if (p.name == name) return p;
    known.push_back(p.name);
  }
  throw Error(fmt::format("unknown preset '{}' (known: {})", name, fmt::join(known, ", ")));
}

const std::vector<KvLayout>& all_kv_layouts() {
  static const std::vector<KvLayout> l{KvLayout::naive_bf16, KvLayout::mla_bf16, KvLayout::latent_bf16,
                                       KvLayout::fp8_v32, KvLayout::indexer_v32};
  return l;
}

const char* to_string(KvLayout l) {
  switch (l) {
    case KvLayout::naive_bf16: return "naive_mha_bf16";
    case KvLayout::mla_bf16: return "mla_bf16";
    case KvLayout::latent_bf16: return "latent_bf16";
    case KvLayout::fp8_v32: return "mla_fp8_v32";
    case KvLayout::indexer_v32: return "indexer_v32";
  }
  return "unknown";
}

const char* describe(KvLayout l) {
  switch (l) {
    case KvLayout::naive_bf16: return "per-head K (nope+rope) and V in bf16, as upstream's naive attention caches them";
    case KvLayout::mla_bf16: return "compressed latent + shared rope key in bf16 (absorbed MLA)";
    case KvLayout::latent_bf16: return "compressed latent only in bf16 (rope key kept elsewhere)";
    case KvLayout::fp8_v32: return "V3.2 FP8: latent in e4m3, one float32 scale per 128 values, rope key in bf16";
    case KvLayout::indexer_v32: return "V3.2 lightning-indexer keys: 128 e4m3 + one float32 scale (extra, per token)";
  }
  return "unknown";
}

std::optional<int64_t> kv_bytes_per_token(const ModelConfig& cfg, KvLayout layout, std::string* why) {
  const int64_t h = cfg.n_heads, nope = cfg.qk_nope_head_dim, rope = cfg.qk_rope_head_dim, v = cfg.v_head_dim,
                r = cfg.kv_lora_rank;
  if (h <= 0 || nope < 0 || rope <= 0 || v <= 0 || r <= 0) {
    throw Error(fmt::format("config '{}' has a non-positive dimension (heads {}, nope {}, rope {}, v {}, kv_lora_rank {})",
                            cfg.preset, h, nope, rope, v, r));
  }
  constexpr int64_t kBf16 = 2, kFp32 = 4, kE4m3 = 1;
  switch (layout) {
    case KvLayout::naive_bf16: return kBf16 * h * (nope + rope + v);
    case KvLayout::mla_bf16: return kBf16 * (r + rope);
    case KvLayout::latent_bf16: return kBf16 * r;
    case KvLayout::fp8_v32: {
      constexpr int64_t kBlock = 128;  // one scale per 128 latent values (FlashMLA's V3.2 layout)
      if (r % kBlock != 0) {
        if (why) *why = fmt::format("kv_lora_rank {} is not a multiple of the 128-value scale block", r);
        return std::nullopt;
      }
      return kE4m3 * r + kFp32 * (r / kBlock) + kBf16 * rope;
    }
    case KvLayout::indexer_v32: return kIndexerTokenBytes;
  }
  throw Error(fmt::format("unknown cache layout {}", static_cast<int>(layout)));
}

}  // namespace mla
