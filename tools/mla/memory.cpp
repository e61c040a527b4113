#include "memory.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/indexer_cache.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/presets.hpp"
#include "mla/registry/registry.hpp"
#include "mla/ref/layer.hpp"

namespace mla::tools {
namespace {

std::string grouped(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v), out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ' ';
    out += s[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, units[u]);
}

// ---- the paged cache as a kernel's prepare() holds it ----------------------------------------

// Bounds of the measurement: pages of 64 slots, the smaller run 4 pages, the larger at most 64
// pages (4096 slots), whatever context the query names — the slope is what is compared.
constexpr int kPage = 64;
constexpr int kSmallBlocks = 4;
constexpr int kMaxBlocks = 64;

struct SyntheticCase {
  std::vector<uint16_t> q;
  std::vector<uint8_t> kv;
  std::vector<int32_t> block_table, seqlens;
  AttnInputs view;
};

// A case of `num_blocks` pages whose one sequence uses the first kSmallBlocks of them; the rest
// are allocated and never read, like a cache pool with free pages. Cache bytes come from the
// codecs, so they are a valid cache of the format.
SyntheticCase synthetic(CacheFormat f, int heads, int num_blocks) {
  SyntheticCase c;
  auto& s = c.view.shape;
  s.batch = 1;
  s.s_q = 1;
  s.heads = heads;
  s.page_size = kPage;
  s.num_blocks = num_blocks;
  s.max_blocks = kSmallBlocks;
  s.cache_format = f;
  c.view.softmax_scale = softmax_scale(preset("v3").config);  // V3's; any finite value works
  c.q.resize(static_cast<std::size_t>(heads) * kQkDim);
  gen::fill_bf16(11, 1, 0.0, 1.0, c.q);
  const std::size_t slots = static_cast<std::size_t>(num_blocks) * kPage;
  const std::size_t bpt = cache_bytes_per_token(f);
  c.kv.resize(slots * bpt);
  std::vector<double> token(kQkDim);
  for (std::size_t t = 0; t < slots; ++t) {
    gen::fill_f64(11, 2 + t, 0.0, 1.0, token);
    if (f == CacheFormat::bf16) {
      for (std::size_t d = 0; d < kQkDim; ++d) {
        const uint16_t b = bf16_from_double(token[d]);
        std::memcpy(c.kv.data() + t * bpt + 2 * d, &b, 2);
      }
    } else {
      fp8_quantize_token(std::span<const double>(token).first(kLatentDim), std::span<const double>(token).subspan(kLatentDim),
                         ScaleFmt::fp32, std::span<uint8_t>(c.kv.data() + t * bpt, bpt));
    }
  }
  c.block_table.resize(kSmallBlocks);
  for (int i = 0; i < kSmallBlocks; ++i) c.block_table[i] = i;
  c.seqlens = {kSmallBlocks * kPage};
  c.view.q = c.q;
  c.view.kv_cache = c.kv;
  c.view.block_table = c.block_table;
  c.view.cache_seqlens = c.seqlens;
  return c;
}

MemoryCheck paged_check(const MemoryQuery& q, CacheFormat f, const AttentionImpl& impl, const LiveBytes& live) {
  MemoryCheck m;
  const KvLayout layout = f == CacheFormat::bf16 ? KvLayout::mla_bf16 : KvLayout::fp8_v32;
  m.layout = to_string(layout);
  std::string why;
  m.model = kv_bytes_per_token(q.config, layout, &why);
  const auto& cfg = q.config;
  if (!m.model) {
    m.method = "paged cache";
    m.note = why;
    return m;
  }
  m.method = fmt::format("{} prepare(): paged {} cache", impl.info().name, to_string(f));
  if (cfg.kv_lora_rank != static_cast<int64_t>(kLatentDim) || cfg.qk_rope_head_dim != static_cast<int64_t>(kRopeDim)) {
    m.note = fmt::format("not checkable: the attention-core kernels hold {}+{}-wide tokens, this config {}+{}", kLatentDim,
                         kRopeDim, cfg.kv_lora_rank, cfg.qk_rope_head_dim);
    return m;
  }
  const int heads = static_cast<int>(std::clamp<int64_t>(cfg.n_heads, impl.info().caps.min_heads, impl.info().caps.max_heads));
  const int64_t wanted = std::max<int64_t>(q.context * q.batch, 1);
  const int large = static_cast<int>(std::clamp<int64_t>((wanted + kPage - 1) / kPage, kSmallBlocks + 1, kMaxBlocks));
  int64_t retained[2] = {0, 0};
  const int blocks[2] = {kSmallBlocks, large};
  for (int i = 0; i < 2; ++i) {
    const auto c = synthetic(f, heads, blocks[i]);
    if (auto no = impl.check(c.view.shape)) {
      m.note = fmt::format("not checkable: {} refuses the synthetic shape: {}", impl.info().name, *no);
      return m;
    }
    const int64_t before = live();
    auto prepared = impl.prepare(c.view);
    retained[i] = live() - before;
  }
  const int64_t extra_slots = int64_t{blocks[1] - blocks[0]} * kPage;
  const int64_t extra_bytes = retained[1] - retained[0];
  m.method += fmt::format(", {} more bytes held for {} more token slots", grouped(extra_bytes), grouped(extra_slots));
  if (extra_bytes % extra_slots != 0) {
    m.measured = extra_bytes / extra_slots;
    m.note = fmt::format("{} bytes for {} slots is not a whole number of bytes per token", extra_bytes, extra_slots);
    return m;
  }
  m.measured = extra_bytes / extra_slots;
  m.ok = *m.measured == *m.model;
  if (!m.ok) m.note = "the kernel holds a different number of bytes per cached token than the model";
  return m;
}

// ---- the indexer key cache as an append kernel's prepare() holds it ---------------------------

// Keys written by both measured calls: the same few tokens into the first slots, so the keys and
// slot mapping a kernel copies weigh the same in both and only the cache's size differs.
constexpr int64_t kIndexerTokens = 4;

// The first registered CPU indexer append that is available, or why there is none.
const IndexerAppendImpl* indexer_kernel(std::string* why) {
  std::vector<std::string> skipped;
  for (const auto& k : Registry::instance().indexer_append()) {
    if (k->info().backend != "cpu") continue;
    if (auto no = k->unavailable()) {
      skipped.push_back(fmt::format("{} ({})", k->info().name, *no));
      continue;
    }
    return k.get();
  }
  *why = skipped.empty() ? "no CPU indexer append is registered"
                         : fmt::format("no CPU indexer append is available: {}", fmt::join(skipped, "; "));
  return nullptr;
}

MemoryCheck indexer_check(const MemoryQuery& q, const IndexerAppendImpl* impl, const std::string& why_none,
                          const LiveBytes& live) {
  MemoryCheck m;
  m.layout = to_string(KvLayout::indexer_v32);
  std::string why;
  m.model = kv_bytes_per_token(q.config, KvLayout::indexer_v32, &why);
  if (!m.model || !impl) {
    m.method = "indexer key cache";
    m.note = !m.model ? why : fmt::format("not checkable: {}", why_none);
    return m;
  }
  const auto& info = impl->info();
  // A block size the kernel claims (the paged check's page when it takes any) and its first recipe:
  // neither changes the bytes a slot takes.
  const int64_t block_size = info.block_sizes.empty() ? kPage : info.block_sizes.front();
  IndexerAppendBuffers b;
  b.shape.num_tokens = kIndexerTokens;
  b.shape.block_size = block_size;
  b.shape.scale_fmt = info.scale_fmts.empty() ? ScaleFmt::ue8m0 : info.scale_fmts.front();
  b.keys.resize(static_cast<std::size_t>(kIndexerTokens * kIndexerHeadDim));
  gen::fill_bf16(13, 1, 0.0, 1.0, b.keys);
  for (int64_t t = 0; t < kIndexerTokens; ++t) b.slot_mapping.push_back(t);
  m.method = fmt::format("{} prepare(): indexer key cache of {}-token blocks", info.name, block_size);
  // The paged check's bounds in slots (kSmallBlocks pages, then the query's context up to
  // kMaxBlocks pages), as whole blocks of this size.
  const int64_t wanted = std::max<int64_t>(q.context * q.batch, 1);
  const int64_t large_slots = std::clamp<int64_t>((wanted + kPage - 1) / kPage, kSmallBlocks + 1, kMaxBlocks) * kPage;
  const int64_t small = (kSmallBlocks * kPage + block_size - 1) / block_size;
  const int64_t large = std::max((large_slots + block_size - 1) / block_size, small + 1);
  const int64_t blocks[2] = {small, large};
  int64_t retained[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    b.shape.num_blocks = blocks[i];
    b.cache.assign(static_cast<std::size_t>(indexer_cache_bytes(b.shape)), 0);
    if (auto no = impl->check(b.shape)) {
      m.note = fmt::format("not checkable: {} refuses the synthetic shape: {}", info.name, *no);
      return m;
    }
    const int64_t before = live();
    auto prepared = impl->prepare(b.view());
    retained[i] = live() - before;
  }
  const int64_t extra_slots = (blocks[1] - blocks[0]) * block_size;
  const int64_t extra_bytes = retained[1] - retained[0];
  m.method += fmt::format(", {} more bytes held for {} more token slots", grouped(extra_bytes), grouped(extra_slots));
  m.measured = extra_bytes / extra_slots;
  if (extra_bytes % extra_slots != 0) {
    m.note = fmt::format("{} bytes for {} slots is not a whole number of bytes per token", extra_bytes, extra_slots);
    return m;
  }
  m.ok = *m.measured == *m.model;
  if (!m.ok) m.note = "the kernel holds a different number of bytes per cached token than the model";
  return m;
}

// ---- the layer caches of the float64 reference ---------------------------------------------

// Tokens of the prefill whose caches are measured.
constexpr int64_t kLayerTokens = 4;

std::vector<MemoryCheck> layer_checks(const MemoryQuery& q) {
  // The cache shapes depend on heads, head dims and the latent rank only, so the layer is
  // built with a small model dimension and no q-LoRA: the weights that scale with `dim` stay
  // small while every cache-shaping dimension is the query's own.
  ModelConfig cfg = q.config;
  cfg.dim = 64;
  cfg.q_lora_rank = 0;
  cfg.max_batch_size = 1;
  cfg.max_seq_len = std::max<int64_t>(cfg.max_seq_len, kLayerTokens);
  cfg.original_seq_len = std::min(cfg.original_seq_len, cfg.max_seq_len);
  ref::LayerWeights w;
  uint64_t stream = 100;
  for (const auto& name : ref::LayerWeights::names(cfg)) {
    const auto shape = ref::LayerWeights::expected_shape(cfg, name);
    int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<double> data(static_cast<std::size_t>(n));
    const bool norm = name.find("norm") != std::string::npos;
    gen::fill_f64(23, stream++, norm ? 1.0 : 0.0, norm ? 0.1 : 1.0 / std::sqrt(static_cast<double>(shape.back())), data);
    w.set(cfg, name, shape, data);
  }
  ref::Tensor x({1, kLayerTokens, cfg.dim});
  gen::fill_f64(23, 1, 0.0, 1.0, x.data);

  auto per_token = [](const std::map<std::string, ref::Tensor>& caches, const std::string& name) -> int64_t {
    const auto it = caches.find(name);
    if (it == caches.end()) throw Error(fmt::format("the reference layer has no cache named '{}'", name));
    return it->second.numel() / kLayerTokens;
  };
  // The reference computes in float64; deployed caches hold bf16, 2 bytes per element: what
  // is measured here is the element count per token, in the layer's own cache tensors.
  constexpr int64_t kBf16 = 2;
  std::vector<MemoryCheck> out;
  {
    ref::MlaLayer layer(cfg, w, ref::Form::naive);
    layer.forward(x, 0, /*keep_intermediates=*/false);
    const auto caches = layer.caches(1, kLayerTokens);
    MemoryCheck m;
    m.layout = to_string(KvLayout::naive_bf16);
    m.model = kv_bytes_per_token(q.config, KvLayout::naive_bf16);
    const int64_t k = per_token(caches, "k_cache"), v = per_token(caches, "v_cache");
    m.method = fmt::format("reference MlaLayer (naive): k_cache {} + v_cache {} elements per token, x 2 B", k, v);
    m.measured = kBf16 * (k + v);
    m.ok = m.measured == m.model;
    out.push_back(m);
  }
  {
    ref::MlaLayer layer(cfg, std::move(w), ref::Form::absorbed);
    layer.forward(x, 0, /*keep_intermediates=*/false);
    const auto caches = layer.caches(1, kLayerTokens);
    const int64_t latent = per_token(caches, "kv_cache"), pe = per_token(caches, "pe_cache");
    MemoryCheck m;
    m.layout = to_string(KvLayout::mla_bf16);
    m.model = kv_bytes_per_token(q.config, KvLayout::mla_bf16);
    m.method = fmt::format("reference MlaLayer (absorbed): kv_cache {} + pe_cache {} elements per token, x 2 B", latent, pe);
    m.measured = kBf16 * (latent + pe);
    m.ok = m.measured == m.model;
    out.push_back(m);
    MemoryCheck l;
    l.layout = to_string(KvLayout::latent_bf16);
    l.model = kv_bytes_per_token(q.config, KvLayout::latent_bf16);
    l.method = fmt::format("reference MlaLayer (absorbed): kv_cache {} elements per token, x 2 B", latent);
    l.measured = kBf16 * latent;
    l.ok = l.measured == l.model;
    out.push_back(l);
  }
  return out;
}

}  // namespace

std::vector<MemoryRow> memory_model(const MemoryQuery& q) {
  if (q.layers < 1 || q.context < 0 || q.batch < 1) {
    throw Error(fmt::format("layers ({}) and batch ({}) must be >= 1, context ({}) >= 0", q.layers, q.batch, q.context));
  }
  std::vector<MemoryRow> rows;
  for (auto l : all_kv_layouts()) {
    MemoryRow r;
    r.layout = l;
    r.bytes_per_token = kv_bytes_per_token(q.config, l, &r.not_applicable);
    if (r.bytes_per_token) {
      r.total_bytes = static_cast<double>(*r.bytes_per_token) * static_cast<double>(q.context) *
                      static_cast<double>(q.batch) * static_cast<double>(q.layers);
    }
    rows.push_back(r);
  }
  return rows;
}

std::string render_memory(const MemoryQuery& q, const std::vector<MemoryRow>& rows) {
  const auto& c = q.config;
  std::string s;
  s += fmt::format("KV cache of {}: {} layers, context {} tokens, batch {}\n", c.preset, q.layers, grouped(q.context),
                   q.batch);
  s += fmt::format("heads {}, qk_nope {}, qk_rope {}, v {}, kv_lora_rank {}\n\n", c.n_heads, c.qk_nope_head_dim,
                   c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank);
  std::optional<int64_t> naive;
  for (const auto& r : rows) {
    if (r.layout == KvLayout::naive_bf16) naive = r.bytes_per_token;
  }
  s += fmt::format("{:<16} {:>14} {:>16} {:>14} {:>10}\n", "layout", "B/token/layer", "B/token (model)", "total",
                   "vs naive");
  for (const auto& r : rows) {
    if (!r.bytes_per_token) {
      s += fmt::format("{:<16} {:>14}   {}\n", to_string(r.layout), "n/a", r.not_applicable);
      continue;
    }
    const int64_t per_model_token = *r.bytes_per_token * q.layers;
    const std::string ratio = naive && r.layout != KvLayout::naive_bf16 && r.layout != KvLayout::indexer_v32
                                  ? fmt::format("1/{:.1f}", static_cast<double>(*naive) / static_cast<double>(*r.bytes_per_token))
                                  : "";
    s += fmt::format("{:<16} {:>14} {:>16} {:>14} {:>10}\n", to_string(r.layout), grouped(*r.bytes_per_token),
                     grouped(per_model_token), human(r.total_bytes), ratio);
  }
  s += "\n";
  for (const auto& r : rows) s += fmt::format("  {:<16} {}\n", to_string(r.layout), describe(r.layout));
  s += "  (indexer_v32 is held in addition to mla_fp8_v32 by V3.2's sparse attention)\n";
  return s;
}

nlohmann::json memory_json(const MemoryQuery& q, const std::vector<MemoryRow>& rows) {
  const auto& c = q.config;
  nlohmann::json j = {{"preset", c.preset},
                      {"config",
                       {{"n_heads", c.n_heads}, {"qk_nope_head_dim", c.qk_nope_head_dim},
                        {"qk_rope_head_dim", c.qk_rope_head_dim}, {"v_head_dim", c.v_head_dim},
                        {"kv_lora_rank", c.kv_lora_rank}}},
                      {"layers", q.layers},
                      {"context", q.context},
                      {"batch", q.batch}};
  nlohmann::json layouts = nlohmann::json::object();
  for (const auto& r : rows) {
    layouts[to_string(r.layout)] =
        r.bytes_per_token
            ? nlohmann::json{{"bytes_per_token_per_layer", *r.bytes_per_token}, {"total_bytes", r.total_bytes},
                             {"description", describe(r.layout)}}
            : nlohmann::json{{"not_applicable", r.not_applicable}, {"description", describe(r.layout)}};
  }
  j["layouts"] = layouts;
  return j;
}

std::vector<MemoryCheck> memory_check(const MemoryQuery& q, const LiveBytes& live, const std::string& kernel) {
  register_builtin_kernels();
  const AttentionImpl* impl = Registry::instance().find(kernel);
  if (!impl) throw Error(fmt::format("no registered kernel '{}'", kernel));
  if (impl->info().backend != "cpu") {
    throw Error(fmt::format("kernel '{}' runs on {}: its device allocations are invisible to the host allocation probe",
                            kernel, impl->info().backend));
  }
  if (auto why = impl->unavailable()) throw Error(fmt::format("kernel '{}' is unavailable: {}", kernel, *why));
  std::vector<MemoryCheck> out = layer_checks(q);
  out.push_back(paged_check(q, CacheFormat::bf16, *impl, live));
  out.push_back(paged_check(q, CacheFormat::fp8, *impl, live));
  std::string why_none;
  const IndexerAppendImpl* indexer = indexer_kernel(&why_none);
  out.push_back(indexer_check(q, indexer, why_none, live));
  return out;
}

std::string render_checks(const std::vector<MemoryCheck>& checks) {
  std::string s = fmt::format("\n{:<16} {:>8} {:>9}  {:<6} {}\n", "check", "model", "measured", "result", "how");
  for (const auto& c : checks) {
    const std::string result = !c.checked() ? "-" : c.ok ? "OK" : "DIFFERS";
    s += fmt::format("{:<16} {:>8} {:>9}  {:<6} {}\n", c.layout, c.model ? grouped(*c.model) : "n/a",
                     c.measured ? grouped(*c.measured) : "-", result, c.method);
    if (!c.note.empty()) s += fmt::format("{:<16} {}\n", "", c.note);
  }
  return s;
}

}  // namespace mla::tools
