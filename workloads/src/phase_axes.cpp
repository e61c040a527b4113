#include "mla/workloads/phase_axes.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/indexer_cache.hpp"
#include "mla/core/numeric.hpp"

namespace mla::axes {
namespace {


PrefillPoint prefill(std::string name, unsigned tiers, int heads, std::vector<PrefillSeq> seqs, uint64_t seed,
                     std::string why, std::string scaled_from = {}) {
  PrefillPoint p;
  p.name = std::move(name);
  p.tiers = tiers;
  p.heads = heads;
  p.seqs = std::move(seqs);
  p.seed = seed;
  p.why = std::move(why);
  p.scaled_from = std::move(scaled_from);
  return p;
}

// One sequence of `long_len` tokens among `n_short` of `short_len` (the long one in the middle,
// so neither end of the batch is the special one).
std::vector<PrefillSeq> skewed(int32_t long_len, int n_short, int32_t short_len) {
  std::vector<PrefillSeq> s(static_cast<std::size_t>(n_short), PrefillSeq{short_len, short_len});
  s.insert(s.begin() + n_short / 2, PrefillSeq{long_len, long_len});
  return s;
}

std::vector<PrefillPoint> build_prefill_catalog() {
  std::vector<PrefillPoint> t;
  // --- production (tier gpu): one causal sequence of 1K, 4K, 16K tokens at 16 and 128 heads ---
  uint64_t seed = 1001;
  for (const int32_t n : {1024, 4096, 16384})
    for (const int h : {16, 128})
      t.push_back(prefill(fmt::format("prefill_causal_t{}_h{}", n, h), kGpu, h, {{n, n}}, seed++,
                          "compute-bound causal prefill (MHA form), the prefill kernels' headline shape"));
  t.push_back(prefill("prefill_varlen_skew_h128", kGpu, 128, skewed(8192, 32, 256), 1011,
                      "skewed varlen prefill: one 8K sequence among 32 of 256 tokens (16K in all), the "
                      "load-balance hazard of a per-sequence split"));
  t.push_back(prefill("prefill_chunk_h128_sq1024_sk16384", kGpu, 128, {{1024, 16384}}, 1012,
                      "chunked prefill: 1K new tokens over a 15K cached prefix, bottom-right causal"));

  // --- CPU tiers: the fp64 oracle judges every kernel first, in about a second on 2 cores -----
  t.push_back(prefill("cpu_prefill_causal_t512_h16", kQuick, 16, {{512, 512}}, 1051, "causal prefill on the CPU",
                      "prefill_causal_t1024_h16: tokens halved so the fp64 oracle runs in about a second"));
  t.push_back(prefill("cpu_prefill_varlen_skew_h16", kQuick, 16, skewed(256, 7, 32), 1052,
                      "skewed varlen prefill on the CPU: one 256 among 7 of 32 tokens",
                      "prefill_varlen_skew_h128: heads 128 -> 16, sequences 8K/256 -> 256/32, 32 short -> 7"));
  t.push_back(prefill("cpu_prefill_chunk_h16_sq64_sk1024", kQuick, 16, {{64, 1024}}, 1053,
                      "chunked prefill on the CPU: 64 new tokens over a 960-token prefix",
                      "prefill_chunk_h128_sq1024_sk16384: heads 128 -> 16, tokens / 16"));
  t.push_back(prefill("cpu_prefill_causal_t1024_h16", kFull, 16, {{1024, 1024}}, 1054,
                      "causal prefill on the CPU, the longer sequence",
                      "prefill_causal_t4096_h16: tokens / 4 so the fp64 oracle fits a CI run"));
  t.push_back(prefill("cpu_prefill_causal_t256_h128", kFull, 128, {{256, 256}}, 1055,
                      "causal prefill on the CPU at 128 heads",
                      "prefill_causal_t4096_h128: tokens / 16 so the fp64 oracle fits a CI run"));
  return t;
}

MergePoint merge(std::string name, unsigned tiers, MergeShape shape, uint64_t seed, std::string why,
                 std::string scaled_from = {}, MergeRows rows = MergeRows::finite) {
  MergePoint p;
  p.name = std::move(name);
  p.tiers = tiers;
  p.shape = shape;
  p.seed = seed;
  p.why = std::move(why);
  p.scaled_from = std::move(scaled_from);
  p.rows = rows;
  return p;
}

std::vector<MergePoint> build_merge_catalog() {
  std::vector<MergePoint> t;
  const auto name = [](const char* prefix, const MergeShape& s) {
    return fmt::format("{}_{}_t{}_h{}_d{}", prefix, to_string(s.dtype), s.tokens, s.heads, s.head_dim);
  };
  // --- production (tier gpu): a 16K-token prefill's states (d 128) and MLA's latent V (d 512) --
  uint64_t seed = 1101;
  for (const auto dt : {StateDType::bf16, StateDType::f32}) {
    const MergeShape v{16384, 128, kMhaDv, dt}, latent{4096, 128, 512, dt};
    t.push_back(merge(name("merge", v), kGpu, v, seed++, "memory-bound merge of a 16K-token prefill's partial states"));
    t.push_back(merge(name("merge", latent), kGpu, latent, seed++, "memory-bound merge of latent (d 512) states"));
  }
  // --- CPU tiers ---------------------------------------------------------------------------------
  seed = 1151;
  for (const auto dt : {StateDType::bf16, StateDType::f32}) {
    const MergeShape v{2048, 16, kMhaDv, dt}, latent{512, 16, 512, dt};
    t.push_back(merge(name("cpu_merge", v), kQuick, v, seed++, "memory-bound merge on the CPU",
                      fmt::format("merge_{}_t16384_h128_d128: tokens and heads / 8 so the fp64 oracle fits a CI run",
                                  to_string(dt))));
    t.push_back(merge(name("cpu_merge", latent), kFull, latent, seed++, "memory-bound merge of latent states on the CPU",
                      fmt::format("merge_{}_t4096_h128_d512: tokens and heads / 8", to_string(dt))));
  }
  // --- edge: the empty sides (+inf, -inf, both), NaN in the out a merge must not read ----------
  const MergeShape e{64, 16, kMhaDv, StateDType::bf16};
  t.push_back(merge("merge_edge_empty_sides_bf16_t64_h16_d128", kQuick | kGpu, e, 1191,
                    "merge edge: rows cycle a empty (+inf), b empty (-inf), both empty, finite; NaN outs on empty sides",
                    {}, MergeRows::empty_sides));
  return t;
}

IndexerLogitsPoint logits_point(std::string name, unsigned tiers, IndexerLogitsLayout layout, int64_t batch, int next_n,
                                int64_t block_size, int64_t context, uint64_t seed, std::string why,
                                std::string scaled_from = {}) {
  IndexerLogitsPoint p;
  p.name = std::move(name);
  p.tiers = tiers;
  p.layout = layout;
  p.batch = batch;
  p.next_n = next_n;
  p.block_size = block_size;
  p.context = context;
  p.seed = seed;
  p.why = std::move(why);
  p.scaled_from = std::move(scaled_from);
  return p;
}

std::vector<IndexerLogitsPoint> build_indexer_logits_catalog() {
  constexpr auto paged = IndexerLogitsLayout::paged, ragged = IndexerLogitsLayout::ragged;
  std::vector<IndexerLogitsPoint> t;
  // --- production (tier gpu): a decode step of 64 sequences over 32K tokens (one and two query
  // tokens, the speculative step), and a 4K-token prefill chunk over 16K keys ----------------
  for (const int n : {1, 2})
    t.push_back(logits_point(fmt::format("indexer_logits_paged_b64_n{}_h64_ctx32768", n), kGpu, paged, 64, n, 64, 32768,
                             1200 + static_cast<uint64_t>(n),
                             "indexer decode step: each sequence's 132-byte keys read once per step"));
  t.push_back(logits_point("indexer_logits_ragged_q4096_k16384_h64", kGpu, ragged, 4096, 1, 0, 16384, 1203,
                           "indexer prefill: a 4K-token chunk over 16K keys, bottom-right causal (ragged)"));
  // --- CPU tiers: the fp64 oracle judges every kernel first --------------------------------------
  t.push_back(logits_point("cpu_indexer_logits_paged_b4_n1_h64_ctx4096", kQuick, paged, 4, 1, 64, 4096, 1251,
                           "indexer decode step on the CPU",
                           "indexer_logits_paged_b64_n1_h64_ctx32768: batch / 16, context / 8"));
  t.push_back(logits_point("cpu_indexer_logits_paged_b4_n2_h64_ctx4096", kFull, paged, 4, 2, 64, 4096, 1252,
                           "indexer speculative decode step (two query tokens) on the CPU",
                           "indexer_logits_paged_b64_n2_h64_ctx32768: batch / 16, context / 8"));
  t.push_back(logits_point("cpu_indexer_logits_ragged_q128_k1024_h64", kQuick, ragged, 128, 1, 0, 1024, 1253,
                           "indexer prefill chunk on the CPU",
                           "indexer_logits_ragged_q4096_k16384_h64: rows / 32, keys / 16"));
  // --- edge: a context that ends inside a block, on 16-token blocks, two query tokens ----------
  t.push_back(logits_point("indexer_logits_edge_paged_b3_n2_bs16_ctx67", kQuick | kGpu, paged, 3, 2, 16, 67, 1291,
                           "indexer edge: the last block partly filled (67 = 4 x 16 + 3), next_n 2's masked diagonal"));
  return t;
}

TopkPoint topk_point(std::string name, unsigned tiers, TopkRows rows, int64_t n_rows, int64_t n, uint64_t seed,
                     std::string why, std::string scaled_from = {}) {
  TopkPoint p;
  p.name = std::move(name);
  p.tiers = tiers;
  p.rows = rows;
  p.shape = TopkShape{n_rows, n, 2048};  // V3.2's index_topk
  p.seed = seed;
  p.why = std::move(why);
  p.scaled_from = std::move(scaled_from);
  return p;
}

std::vector<TopkPoint> build_topk_catalog() {
  std::vector<TopkPoint> t;
  // --- production (tier gpu): a decode step of 64 sequences at 32K and at 128K tokens, and a
  // 4K-token prefill chunk over 16K keys, 2048 selected per row -----------------------------
  t.push_back(topk_point("topk_decode_r64_n32768_k2048", kGpu, TopkRows::decode, 64, 32768, 1301,
                         "top-2048 of a decode step's indexer logits, contexts in [16K, 32K]"));
  t.push_back(topk_point("topk_decode_r64_n131072_k2048", kGpu, TopkRows::decode, 64, 131072, 1302,
                         "top-2048 at V3.2's longest context, contexts in [64K, 128K]"));
  t.push_back(topk_point("topk_prefill_r4096_n16384_k2048", kGpu, TopkRows::prefill, 4096, 16384, 1303,
                         "top-2048 of a prefill batch: two sequences of 2K tokens over 8K keys each, bottom-right causal"));
  // --- CPU tiers ---------------------------------------------------------------------------------
  t.push_back(topk_point("cpu_topk_decode_r8_n32768_k2048", kQuick, TopkRows::decode, 8, 32768, 1351,
                         "top-2048 of a decode step on the CPU", "topk_decode_r64_n32768_k2048: rows / 8"));
  t.push_back(topk_point("cpu_topk_decode_r8_n131072_k2048", kFull, TopkRows::decode, 8, 131072, 1352,
                         "top-2048 at 128K context on the CPU", "topk_decode_r64_n131072_k2048: rows / 8"));
  t.push_back(topk_point("cpu_topk_prefill_r256_n4096_k2048", kQuick, TopkRows::prefill, 256, 4096, 1353,
                         "top-2048 of a prefill chunk on the CPU",
                         "topk_prefill_r4096_n16384_k2048: rows / 16, keys / 4"));
  // --- edge: empty, one-position and k -/+ 1 ranges, masked positions, exact ties --------------
  t.push_back(topk_point("topk_edge_r12_n4096_k2048", kQuick | kGpu, TopkRows::edge, 12, 4096, 1391,
                         "top-k edges: ranges of 0, 1, k - 1, k, k + 1 and n positions, a third masked, exact ties"));
  return t;
}

SparsePrefillPoint sparse_point(std::string name, unsigned tiers, int heads, int64_t s_q, int64_t s_kv, int topk,
                                uint64_t seed, std::string why, std::string scaled_from = {}, bool edge = false) {
  SparsePrefillPoint p;
  p.name = std::move(name);
  p.tiers = tiers;
  p.heads = heads;
  p.s_q = s_q;
  p.s_kv = s_kv;
  p.topk = topk;
  p.edge = edge;
  p.seed = seed;
  p.why = std::move(why);
  p.scaled_from = std::move(scaled_from);
  return p;
}

std::vector<SparsePrefillPoint> build_sparse_prefill_catalog() {
  std::vector<SparsePrefillPoint> t;
  // --- production (tier gpu): V3.2's prefill of a 4K-token chunk over an 8K-token sequence, each
  // token attending its top 2048, at both head counts FlashMLA's sparse prefill takes ----------
  for (const int h : {128, 64})
    t.push_back(sparse_point(fmt::format("sparse_prefill_h{}_sq4096_skv8192_k2048", h), kGpu, h, 4096, 8192, 2048,
                             h == 128 ? 1401u : 1402u,
                             "V3.2 sparse prefill: a 4K-token chunk over an 8K-token sequence, top-2048 keys per token"));
  t.push_back(sparse_point("sparse_prefill_fresh_h128_sq4096_skv4096_k2048", kGpu, 128, 4096, 4096, 2048, 1403,
                           "V3.2 sparse prefill of a 4K-token sequence from its start: the first 2047 tokens see "
                           "fewer than 2048 keys (their indices padded with -1)"));
  // --- CPU tiers: the fp64 oracle judges every kernel first --------------------------------------
  t.push_back(sparse_point("cpu_sparse_prefill_h16_sq128_skv1024_k256", kQuick, 16, 128, 1024, 256, 1451,
                           "sparse prefill on the CPU",
                           "sparse_prefill_h128_sq4096_skv8192_k2048: heads / 8, rows / 32, keys / 8, top-k / 8"));
  t.push_back(sparse_point("cpu_sparse_prefill_h64_sq256_skv256_k128", kFull, 64, 256, 256, 128, 1452,
                           "sparse prefill of a sequence from its start on the CPU, at FlashMLA's 64 heads",
                           "sparse_prefill_fresh_h128_sq4096_skv4096_k2048: heads / 2, tokens / 16, top-k / 16"));
  // --- edge: every kind of entry that is no key, a row with none, rows with fewer than topk ----
  t.push_back(sparse_point("sparse_prefill_edge_h64_sq80_skv80_k64", kQuick | kGpu, 64, 80, 80, 64, 1491,
                           "sparse prefill edges: -1, -2, INT32_MIN, s_kv and INT32_MAX entries, a row with no key, "
                           "rows that see fewer keys than topk",
                           {}, true));
  return t;
}

// Checks a table's declarations: names unique (across the decode table and every phase table:
// --mla_points selects by name alone) and well formed, tiers set.
template <class P>
void check_names(const std::vector<P>& points, std::set<std::string>& seen) {
  for (const auto& p : points) {
    if (p.name.empty() || !std::all_of(p.name.begin(), p.name.end(), [](char c) {
          return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
        }))
      throw Error(fmt::format("axis point '{}': a name is [a-z0-9_]+", p.name));
    if (!seen.insert(p.name).second) throw Error(fmt::format("axis point '{}' is declared twice", p.name));
    if (p.tiers == 0) throw Error(fmt::format("axis point '{}' is in no tier", p.name));
  }
}

// Both tables, checked once against each other and the decode table.
struct Tables {
  std::vector<PrefillPoint> prefill = build_prefill_catalog();
  std::vector<MergePoint> merge = build_merge_catalog();
  std::vector<IndexerLogitsPoint> indexer_logits = build_indexer_logits_catalog();
  std::vector<TopkPoint> topk = build_topk_catalog();
  std::vector<SparsePrefillPoint> sparse_prefill = build_sparse_prefill_catalog();
  Tables() {
    std::set<std::string> seen;
    for (const auto& p : catalog()) seen.insert(p.name);
    check_names(prefill, seen);
    check_names(merge, seen);
    check_names(indexer_logits, seen);
    check_names(topk, seen);
    check_names(sparse_prefill, seen);
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

// The point of `table` named `name`, or nullptr; the points of tier `t` in table order.
template <class P>
const P* find_in(const std::vector<P>& table, std::string_view name) {
  for (const auto& p : table)
    if (p.name == name) return &p;
  return nullptr;
}

template <class P>
std::vector<const P*> select_in(const std::vector<P>& table, Tier t) {
  std::vector<const P*> out;
  for (const auto& p : table)
    if (p.in(t)) out.push_back(&p);
  return out;
}

}  // namespace

int64_t PrefillPoint::total_q() const {
  int64_t n = 0;
  for (const auto& s : seqs) n += s.s_q;
  return n;
}

int64_t PrefillPoint::total_k() const {
  int64_t n = 0;
  for (const auto& s : seqs) n += s.s_k;
  return n;
}

const std::vector<PrefillPoint>& prefill_catalog() { return tables().prefill; }
const std::vector<MergePoint>& merge_catalog() { return tables().merge; }
const std::vector<IndexerLogitsPoint>& indexer_logits_catalog() { return tables().indexer_logits; }
const std::vector<TopkPoint>& topk_catalog() { return tables().topk; }

const PrefillPoint* find_prefill(std::string_view name) { return find_in(prefill_catalog(), name); }
const MergePoint* find_merge(std::string_view name) { return find_in(merge_catalog(), name); }
const IndexerLogitsPoint* find_indexer_logits(std::string_view name) { return find_in(indexer_logits_catalog(), name); }
const TopkPoint* find_topk(std::string_view name) { return find_in(topk_catalog(), name); }
const std::vector<SparsePrefillPoint>& sparse_prefill_catalog() { return tables().sparse_prefill; }
const SparsePrefillPoint* find_sparse_prefill(std::string_view name) { return find_in(sparse_prefill_catalog(), name); }
std::vector<const SparsePrefillPoint*> select_sparse_prefill(Tier t) { return select_in(sparse_prefill_catalog(), t); }

std::vector<const PrefillPoint*> select_prefill(Tier t) { return select_in(prefill_catalog(), t); }
std::vector<const MergePoint*> select_merge(Tier t) { return select_in(merge_catalog(), t); }
std::vector<const IndexerLogitsPoint*> select_indexer_logits(Tier t) { return select_in(indexer_logits_catalog(), t); }
std::vector<const TopkPoint*> select_topk(Tier t) { return select_in(topk_catalog(), t); }

PrefillBuffers build_prefill(uint64_t seed, int heads, bool causal, const std::vector<PrefillSeq>& seqs, double q_std,
                             double softmax_scale) {
  PrefillBuffers b;
  b.cu_seqlens_q = {0};
  b.cu_seqlens_k = {0};
  for (const auto& s : seqs) {
    b.cu_seqlens_q.push_back(b.cu_seqlens_q.back() + s.s_q);
    b.cu_seqlens_k.push_back(b.cu_seqlens_k.back() + s.s_k);
  }
  b.shape.batch = static_cast<int>(seqs.size());
  b.shape.heads = heads;
  b.shape.total_q = b.cu_seqlens_q.back();
  b.shape.total_k = b.cu_seqlens_k.back();
  b.shape.causal = causal;
  b.softmax_scale = softmax_scale;
  const auto hq = static_cast<std::size_t>(heads);
  b.q.resize(static_cast<std::size_t>(b.shape.total_q) * hq * kMhaDqk);
  b.k.resize(static_cast<std::size_t>(b.shape.total_k) * hq * kMhaDqk);
  b.v.resize(static_cast<std::size_t>(b.shape.total_k) * hq * kMhaDv);
  std::vector<uint16_t> k_pe(static_cast<std::size_t>(b.shape.total_k) * kMhaRope);
  gen::fill_bf16(seed, 1, 0.0, q_std, b.q);
  gen::fill_bf16(seed, 2, 0.0, 1.0, b.k);
  gen::fill_bf16(seed, 3, 0.0, 1.0, b.v);
  gen::fill_bf16(seed, 4, 0.0, 1.0, k_pe);
  for (std::size_t t = 0; t < static_cast<std::size_t>(b.shape.total_k); ++t) {
    for (std::size_t h = 0; h < hq; ++h) {
      std::copy_n(k_pe.begin() + static_cast<std::ptrdiff_t>(t * kMhaRope), kMhaRope,
                  b.k.begin() + static_cast<std::ptrdiff_t>((t * hq + h) * kMhaDqk + kMhaNope));
    }
  }
  return b;
}

PrefillBuffers build_inputs(const PrefillPoint& p) {
  auto b = build_prefill(p.seed, p.heads, p.causal, p.seqs, p.q_std, deepseek_v3_softmax_scale());
  validate_prefill_inputs(b.view(), p.name);
  return b;
}

MergeBuffers build_inputs(const MergePoint& p) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  MergeBuffers b;
  b.shape = p.shape;
  const auto n = static_cast<std::size_t>(p.shape.tokens), h = static_cast<std::size_t>(p.shape.heads);
  const auto d = static_cast<std::size_t>(p.shape.head_dim);
  b.lse_a.resize(n * h);
  b.lse_b.resize(n * h);
  // Row t of an empty_sides point: t % 4 = 0 a empty (+inf, FA2's), 1 b empty (-inf, FA3's),
  // 2 both empty, 3 finite.
  for (std::size_t hh = 0; hh < h; ++hh)
    for (std::size_t t = 0; t < n; ++t) {
      const std::size_t i = hh * n + t;
      double a = -5 + 25 * gen::uniform01(p.seed, 1, 2 * i), bb = -5 + 25 * gen::uniform01(p.seed, 1, 2 * i + 1);
      if (p.rows == MergeRows::empty_sides) {
        if (t % 4 == 0 || t % 4 == 2) a = kInf;
        if (t % 4 == 1 || t % 4 == 2) bb = -kInf;
      }
      b.lse_a[i] = static_cast<float>(a);
      b.lse_b[i] = static_cast<float>(bb);
    }
  const std::size_t bpv = bytes_per_value(p.shape.dtype);
  b.out_a.reserve(n * h * d * bpv);
  b.out_b.reserve(n * h * d * bpv);
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t hh = 0; hh < h; ++hh) {
      const std::size_t li = hh * n + t;
      const bool ea = std::isinf(b.lse_a[li]), eb = std::isinf(b.lse_b[li]);
      for (std::size_t j = 0; j < d; ++j) {
        const uint64_t e = (t * h + hh) * d + j;
        append_state_value(p.shape.dtype, ea ? kNaN : gen::value(p.seed, 2, e, 0, 1), b.out_a);
        append_state_value(p.shape.dtype, eb ? kNaN : gen::value(p.seed, 3, e, 0, 1), b.out_b);
      }
    }
  validate_merge_inputs(b.view(), p.name);
  return b;
}

namespace {

uint8_t drawn_code(uint64_t seed, uint64_t stream, uint64_t i) {
  return e4m3_from_double(std::clamp(gen::value(seed, stream, i, 0, 100), -448.0, 448.0));
}

// Key `i`'s 128 codes and its scale, written where `codes` and `scale` point.
void drawn_key(uint64_t seed, uint64_t i, uint8_t* codes, uint8_t* scale) {
  for (int64_t d = 0; d < kIndexerHeadDim; ++d) codes[d] = drawn_code(seed, 3, i * kIndexerHeadDim + d);
  const float s = std::ldexp(1.0f, -4 - static_cast<int>(gen::bits(seed, 4, i) % 9));
  std::memcpy(scale, &s, sizeof s);
}

}  // namespace

IndexerLogitsBuffers build_inputs(const IndexerLogitsPoint& p) {
  IndexerLogitsBuffers b;
  IndexerLogitsShape& s = b.shape;
  s.layout = p.layout;
  s.batch = p.batch;
  s.next_n = p.layout == IndexerLogitsLayout::paged ? p.next_n : 1;
  s.heads = p.heads;
  const auto rows = static_cast<std::size_t>(s.rows()), heads = static_cast<std::size_t>(p.heads);
  b.q.resize(rows * heads * kIndexerHeadDim);
  for (std::size_t i = 0; i < b.q.size(); ++i) b.q[i] = drawn_code(p.seed, 1, i);
  b.weights.resize(rows * heads);
  for (std::size_t i = 0; i < b.weights.size(); ++i) b.weights[i] = static_cast<float>(gen::value(p.seed, 2, i, 0, 3.75e-4));
  if (p.layout == IndexerLogitsLayout::ragged) {
    s.num_keys = p.context;
    b.k_codes.resize(static_cast<std::size_t>(p.context) * kIndexerHeadDim);
    b.k_scales.resize(static_cast<std::size_t>(p.context));
    for (int64_t k = 0; k < p.context; ++k)
      drawn_key(p.seed, static_cast<uint64_t>(k), b.k_codes.data() + k * kIndexerHeadDim,
                reinterpret_cast<uint8_t*>(b.k_scales.data() + k));
    for (int64_t r = 0; r < p.batch; ++r) {
      b.ks.push_back(0);
      b.ke.push_back(static_cast<int32_t>(std::max<int64_t>(0, p.context - p.batch + r + 1)));
    }
  } else {
    const int64_t bs = p.block_size, per_seq = (p.context + bs - 1) / bs;
    s.block_size = bs;
    s.max_blocks = per_seq + 1;  // one entry past the last block: never read
    s.num_blocks = p.batch * per_seq + 1;
    s.max_context = p.context;
    b.context_lens.assign(static_cast<std::size_t>(p.batch), static_cast<int32_t>(p.context));
    b.cache.resize(static_cast<std::size_t>(s.num_blocks * bs * kIndexerTokenBytes));
    for (std::size_t i = 0; i < b.cache.size(); ++i) b.cache[i] = static_cast<uint8_t>(gen::bits(p.seed, 6, i));
    b.block_table.assign(static_cast<std::size_t>(p.batch * s.max_blocks), -7);
    place_paged_keys(b, gen::permutation(p.seed, 5, s.num_blocks), [&](int64_t q, int64_t pos, uint8_t* codes, float& scale) {
      drawn_key(p.seed, static_cast<uint64_t>(q * per_seq * bs + pos), codes, reinterpret_cast<uint8_t*>(&scale));
    });
  }
  validate_indexer_logits_inputs(b.view(), p.name);
  return b;
}

namespace {

// Each row's range [start, end), by the point's TopkRows (the header says how).
std::vector<std::pair<int32_t, int32_t>> topk_ranges(const TopkPoint& p) {
  const int64_t rows = p.shape.rows, n = p.shape.n, k = p.shape.k;
  const std::vector<int64_t> edge_lens{0, 1, k - 1, k, k + 1, n};
  std::vector<std::pair<int32_t, int32_t>> ranges;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t start = 0, len = n;
    if (p.rows == TopkRows::decode && r + 1 < rows) len = n / 2 + static_cast<int64_t>(gen::bits(p.seed, 2, r) % (n / 2 + 1));
    if (p.rows == TopkRows::prefill) {  // two sequences of rows / 2 query tokens over n / 2 keys each
      const int64_t half_rows = rows / 2;
      const bool first = r < half_rows;
      const int64_t seq_rows = first ? half_rows : rows - half_rows, i = first ? r : r - half_rows;
      const int64_t seq_keys = first ? n / 2 : n - n / 2;
      start = first ? 0 : n / 2;
      len = std::max<int64_t>(0, seq_keys - seq_rows + i + 1);
    }
    if (p.rows == TopkRows::edge) {
      start = r % 2 == 0 ? 0 : 5;
      len = std::min(n - start, edge_lens[static_cast<std::size_t>(r) % edge_lens.size()]);
    }
    ranges.emplace_back(static_cast<int32_t>(start), static_cast<int32_t>(start + len));
  }
  return ranges;
}

}  // namespace

int64_t logits_read(const TopkPoint& p) {
  int64_t n = 0;
  for (const auto& [s, e] : topk_ranges(p)) n += e - s;
  return n;
}

TopkBuffers build_inputs(const TopkPoint& p) {
  TopkBuffers b;
  b.shape = p.shape;
  const int64_t rows = p.shape.rows, n = p.shape.n;
  b.logits.assign(static_cast<std::size_t>(rows * n), std::numeric_limits<float>::quiet_NaN());
  for (const auto& [s, e] : topk_ranges(p)) b.starts.push_back(s), b.ends.push_back(e);
  for (int64_t r = 0; r < rows; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    for (int64_t c = b.starts[ri]; c < b.ends[ri]; ++c) {
      const auto i = static_cast<uint64_t>(r * n + c);
      double v = gen::value(p.seed, 1, i, 0, 1);
      if (p.rows == TopkRows::edge) v = (c % 3 == 2) ? -std::numeric_limits<double>::infinity() : std::round(v * 4) / 4;
      b.logits[i] = static_cast<float>(v);
    }
    // A prefill row's later keys (its causal future, what the ragged logits hold unless cleaned):
    // finite and larger than anything in its range, so a selection that reads them takes them.
    if (p.rows == TopkRows::prefill)
      for (int64_t c = b.ends[ri]; c < n; ++c) b.logits[static_cast<std::size_t>(r * n + c)] = static_cast<float>(10 + c % 7);
  }
  validate_topk_inputs(b.view(), p.name);
  return b;
}

int64_t logits_read(const TopkInputs& in) {
  int64_t n = 0;
  for (std::size_t r = 0; r < in.starts.size(); ++r) n += std::max(0, in.ends[r] - in.starts[r]);
  return n;
}

SparsePrefillBuffers build_inputs(const SparsePrefillPoint& p) {
  SparsePrefillBuffers b;
  SparsePrefillShape& s = b.shape;
  s.s_q = p.s_q, s.s_kv = p.s_kv, s.heads = p.heads, s.d_qk = kMlaDqk, s.topk = p.topk;
  b.sm_scale = deepseek_v3_softmax_scale();
  b.q.resize(static_cast<std::size_t>(p.s_q * p.heads) * kMlaDqk);
  b.kv.resize(static_cast<std::size_t>(p.s_kv) * kMlaDqk);
  gen::fill_bf16(p.seed, 1, 0.0, 1.0, b.q);
  gen::fill_bf16(p.seed, 2, 0.0, 1.0, b.kv);
  const int32_t invalid[] = {-2, INT32_MIN, static_cast<int32_t>(p.s_kv), INT32_MAX};
  b.indices.assign(static_cast<std::size_t>(p.s_q * p.topk), -1);
  for (int64_t i = 0; i < p.s_q; ++i) {
    int32_t* row = b.indices.data() + i * p.topk;
    if (p.edge && i == p.s_q / 2) continue;  // no key at all
    const int64_t sees = p.s_kv - p.s_q + i + 1;
    // The first topk of a permutation of what the row sees: distinct, in no particular order (a
    // top-k's output order is its own), one row's permutation keyed by the row.
    const auto perm = gen::permutation(gen::mix64(p.seed ^ static_cast<uint64_t>(i + 1)), 3, sees);
    const int64_t n = std::min<int64_t>(sees, p.topk);
    for (int64_t j = 0; j < n; ++j) row[j] = static_cast<int32_t>(perm[static_cast<std::size_t>(j)]);
    if (p.edge && i % 2 == 1)
      for (int64_t j = n; j < p.topk; ++j) row[j] = invalid[static_cast<std::size_t>(j % 4)];
  }
  validate_sparse_prefill_inputs(b.view(), p.name);
  return b;
}

std::size_t input_bytes(const SparsePrefillPoint& p) {
  return static_cast<std::size_t>(p.s_q * p.heads + p.s_kv) * kMlaDqk * 2 + static_cast<std::size_t>(p.s_q * p.topk) * 4;
}

std::size_t input_bytes(const TopkPoint& p) {
  const auto rows = static_cast<std::size_t>(p.shape.rows);
  return rows * static_cast<std::size_t>(p.shape.n) * 4 + rows * 8 + rows * static_cast<std::size_t>(p.shape.k) * 4;
}

std::size_t input_bytes(const IndexerLogitsPoint& p) {
  const auto rows = static_cast<std::size_t>(p.layout == IndexerLogitsLayout::paged ? p.batch * p.next_n : p.batch);
  const auto keys = static_cast<std::size_t>(p.layout == IndexerLogitsLayout::paged ? p.batch * p.context : p.context);
  const std::size_t cols = static_cast<std::size_t>(p.context);
  return rows * static_cast<std::size_t>(p.heads) * (kIndexerHeadDim + 4) + keys * kIndexerTokenBytes +
         rows * cols * 4;  // the logits the call writes, allocated with its inputs
}

std::size_t input_bytes(const PrefillPoint& p) {
  const auto h = static_cast<std::size_t>(p.heads);
  return static_cast<std::size_t>(p.total_q()) * h * kMhaDqk * 2 +
         static_cast<std::size_t>(p.total_k()) * h * (kMhaDqk + kMhaDv) * 2 + 2 * (p.seqs.size() + 1) * 4;
}

std::size_t input_bytes(const MergePoint& p) {
  const auto values = static_cast<std::size_t>(p.shape.tokens) * static_cast<std::size_t>(p.shape.heads);
  return 2 * values * static_cast<std::size_t>(p.shape.head_dim) * bytes_per_value(p.shape.dtype) + 2 * values * 4;
}

}  // namespace mla::axes
