// The model presets (the C++ twin of reference/python/mla_ref/config.py PRESETS, plus the layer
// counts the Python side does not need) and the KV-cache byte model per token and layer.
//
// Why one table here: the memory model, the CLI and the tests all need the same numbers; a
// second table elsewhere would drift. suites/certify/test_mla_cli.cpp checks this table against
// the Python presets field by field, and the byte model against the Python kv_bytes_per_token.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mla/core/config.hpp"

namespace mla {

struct Preset {
  std::string name;
  std::string description;
  ModelConfig config;  // config.preset == name
  int64_t n_layers = 0;  // MLA layers of the model (every layer has its own KV cache)
};

// tiny, tiny-noyarn, tiny-noqlora, tiny-noqlora-noyarn, v2-lite, v3, v3-tp2, v3-tp4, v3-tp8.
const std::vector<Preset>& presets();
// Throws mla::Error naming the known presets when `name` is not one of them.
const Preset& preset(std::string_view name);

// Cache layouts whose bytes per token per layer the model gives.
enum class KvLayout {
  naive_bf16,   // upstream attn_impl="naive": per-head K (nope+rope) and V, bf16: 2·h·(nope+rope+v)
  mla_bf16,     // latent + shared rope key, bf16: 2·(kv_lora_rank + rope)
  latent_bf16,  // latent only, bf16: 2·kv_lora_rank
  fp8_v32,      // V3.2 FlashMLA layout: r e4m3 + 4 B per 128-block scale + 2 B per rope value
  indexer_v32,  // V3.2 lightning-indexer key cache: kIndexerHeadDim e4m3 + one float32 scale
};
const std::vector<KvLayout>& all_kv_layouts();
const char* to_string(KvLayout l);
// One line: what the layout stores.
const char* describe(KvLayout l);

// V3.2's indexer head dimension (index_head_dim in its ModelArgs): its key cache stores one
// e4m3 vector of this size and one float32 scale per token, 128 + 4 = 132 bytes.
inline constexpr int64_t kIndexerHeadDim = 128;
// The indexer cache's bytes per token, declared once (the byte model below and the indexer
// append's contract, mla/core/indexer_cache.hpp, both read it): one e4m3 byte per dimension and
// one float32 scale.
inline constexpr int64_t kIndexerScaleBytes = 4;
inline constexpr int64_t kIndexerTokenBytes = kIndexerHeadDim + kIndexerScaleBytes;

// Bytes one token occupies in one layer's cache, or nullopt with `why` set when the layout does
// not exist for this config (fp8_v32 needs kv_lora_rank % 128 == 0). Throws mla::Error on a
// config with a non-positive dimension.
std::optional<int64_t> kv_bytes_per_token(const ModelConfig& cfg, KvLayout layout, std::string* why = nullptr);

}  // namespace mla
