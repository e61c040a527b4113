#include "mla/workloads/axes.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <fmt/format.h>

#include "mla/core/config.hpp"
#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/needles.hpp"
#include "mla/core/presets.hpp"

namespace mla::axes {

const char* to_string(Axis a) {
  switch (a) {
    case Axis::decode_memory: return "decode_memory";
    case Axis::decode_compute: return "decode_compute";
    case Axis::long_context: return "long_context";
    case Axis::varlen: return "varlen";
    case Axis::sparse: return "sparse";
    case Axis::fp8: return "fp8";
    case Axis::edge: return "edge";
  }
  return "?";
}

const char* to_string(Tier t) {
  switch (t) {
    case cpu_quick: return "cpu_quick";
    case cpu_full: return "cpu_full";
    case gpu: return "gpu";
  }
  return "?";
}

Tier tier_from_string(std::string_view s) {
  for (Tier t : {cpu_quick, cpu_full, gpu})
    if (s == to_string(t)) return t;
  throw Error(fmt::format("unknown tier '{}' (expected cpu_quick, cpu_full or gpu)", s));
}

int64_t AxisPoint::total_tokens() const {
  int64_t n = 0;
  for (int32_t l : seqlens) n += l;
  return n;
}

double deepseek_v3_softmax_scale() { return softmax_scale(preset("v3").config); }

void derive_paging(AxisPoint& p) {
  AttnShape& s = p.shape;
  if (s.page_size <= 0) s.page_size = kDefaultPageSize;
  if (static_cast<int>(p.seqlens.size()) != s.batch)
    throw Error(fmt::format("axis point {}: {} seqlens for batch {}", p.name, p.seqlens.size(), s.batch));
  int64_t used = 0, mb = 0;
  for (int32_t l : p.seqlens) {
    if (l < 0) throw Error(fmt::format("axis point {}: negative seqlen {}", p.name, l));
    used += (l + s.page_size - 1) / s.page_size;
    mb = std::max<int64_t>(mb, (l + s.page_size - 1) / s.page_size);
  }
  // One spare poisoned block (see build_inputs) and at least one table column, so that an
  // all-empty batch still has well-formed, non-empty buffers for a kernel to (not) read.
  s.num_blocks = static_cast<int>(used + 1);
  s.max_blocks = static_cast<int>(std::max<int64_t>(mb, 1));
  if (s.topk > 0 && p.invalid_per_row > s.topk)
    throw Error(fmt::format("axis point {}: invalid_per_row {} > topk {}", p.name, p.invalid_per_row, s.topk));
}

namespace {


int64_t pages(int64_t len, int ps) { return (len + ps - 1) / ps; }

AxisPoint finish(AxisPoint p) {
  derive_paging(p);
  return p;
}

AxisPoint dense(std::string name, Axis axis, unsigned tiers, int b, int s_q, int h,
                std::vector<int32_t> seqlens, uint64_t seed, std::string why,
                std::string scaled_from = {}) {
  AxisPoint p;
  p.name = std::move(name);
  p.axis = axis;
  p.tiers = tiers;
  p.shape.batch = b;
  p.shape.s_q = s_q;
  p.shape.heads = h;
  p.seqlens = std::move(seqlens);
  p.seed = seed;
  p.why = std::move(why);
  p.scaled_from = std::move(scaled_from);
  return p;
}

std::vector<int32_t> same(int b, int32_t len) { return std::vector<int32_t>(static_cast<size_t>(b), len); }

// Lengths uniform in [lo, hi], drawn from the point's own seed (so the table is data that any
// generator implementation reproduces).
std::vector<int32_t> drawn(int b, int32_t lo, int32_t hi, uint64_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(b));
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  for (int i = 0; i < b; ++i) v[static_cast<size_t>(i)] = lo + static_cast<int32_t>(gen::bits(seed, kStreamLengths, static_cast<uint64_t>(i)) % span);
  return v;
}

AxisPoint with_fp8(AxisPoint p, ScaleFmt f = ScaleFmt::fp32) {
  p.shape.cache_format = CacheFormat::fp8;
  p.scale_fmt = f;
  return p;
}

AxisPoint with_topk(AxisPoint p, int topk, int invalid = 0) {
  p.shape.topk = topk;
  p.invalid_per_row = invalid;
  return p;
}

std::vector<AxisPoint> build_catalog() {
  std::vector<AxisPoint> t;
  auto add = [&](AxisPoint p) { t.push_back(finish(std::move(p))); };
  using A = Axis;
  const std::string cpu_b = "batch reduced from 128 so the fp64 CPU reference fits a CI run";

  // --- memory-bound decode: FlashMLA's headline shape (b=128, s_q=1, h=16), 1K..64K ---------
  const int32_t ctx[] = {1024, 2048, 4096, 8192, 16384, 32768, 65536};
  for (size_t i = 0; i < std::size(ctx); ++i)
    add(dense(fmt::format("decode_b128_h16_sq1_sk{}", ctx[i]), A::decode_memory, kGpu, 128, 1, 16,
              same(128, ctx[i]), 101 + i, "memory-bound decode, the FlashMLA/H100 anchor shape family"));
  const int32_t cpu_ctx[] = {1024, 4096, 16384, 65536};
  for (size_t i = 0; i < std::size(cpu_ctx); ++i)
    add(dense(fmt::format("cpu_decode_b4_h16_sq1_sk{}", cpu_ctx[i]), A::decode_memory,
              cpu_ctx[i] <= 16384 ? kQuick : kFull, 4, 1, 16, same(4, cpu_ctx[i]), 151 + i,
              "memory-bound decode on the CPU", fmt::format("decode_b128_h16_sq1_sk{}: {}", cpu_ctx[i], cpu_b)));

  // --- compute-bound decode: h*s_q >= 128 (h=64/128, s_q 1..2) ---------------------------------
  uint64_t seed = 201;
  for (int h : {64, 128})
    for (int sq : {1, 2}) {
      add(dense(fmt::format("compute_b128_h{}_sq{}_sk4096", h, sq), A::decode_compute, kGpu, 128, sq, h,
                same(128, 4096), seed++, "compute-bound decode (h*s_q >= 128), MTP s_q=2 causal"));
      add(dense(fmt::format("cpu_compute_b2_h{}_sq{}_sk1024", h, sq), A::decode_compute, kQuick, 2, sq, h,
                same(2, 1024), seed++, "compute-bound decode on the CPU",
                fmt::format("compute_b128_h{}_sq{}_sk4096: batch 128->2 and context 4096->1024 for the fp64 CPU reference", h, sq)));
    }

  // --- long context: 128K tokens per sequence -------------------------------------------------
  add(dense("long_b32_h16_sq1_sk131072", A::long_context, kGpu, 32, 1, 16, same(32, 131072), 301,
            "long context (grid/split limits at 128K)"));
  add(dense("long_b32_h128_sq1_sk131072", A::long_context, kGpu, 32, 1, 128, same(32, 131072), 302,
            "long context, compute-bound head count"));
  add(dense("cpu_long_b1_h16_sq1_sk131072", A::long_context, kFull, 1, 1, 16, same(1, 131072), 351,
            "long context on the CPU", "long_b32_h16_sq1_sk131072: batch 32->1 for the fp64 CPU reference"));

  // --- varlen: uniform lengths, and one long sequence among short ones (split-KV imbalance) ----
  add(dense("varlen_b128_h16_sq1_sk1to8192", A::varlen, kGpu, 128, 1, 16, drawn(128, 1, 8192, 401), 401,
            "varlen decode, lengths uniform in [1, 8192]"));
  add(dense("varlen_b128_h128_sq2_sk1to8192", A::varlen, kGpu, 128, 2, 128, drawn(128, 1, 8192, 402), 402,
            "varlen compute-bound MTP decode, lengths uniform in [1, 8192]"));
  {
    std::vector<int32_t> skew = drawn(128, 64, 256, 403);
    skew[77] = 65536;
    add(dense("varlen_skew_b128_h16_sq1", A::varlen, kGpu, 128, 1, 16, std::move(skew), 403,
              "one 64K sequence among 127 short ones: split-KV load balance"));
  }
  add(dense("cpu_varlen_b8_h16_sq1_sk1to4096", A::varlen, kQuick, 8, 1, 16, drawn(8, 1, 4096, 451), 451,
            "varlen decode on the CPU", "varlen_b128_h16_sq1_sk1to8192: batch 128->8, lengths up to 4096"));
  {
    std::vector<int32_t> skew = drawn(8, 64, 256, 452);
    skew[5] = 16384;
    add(dense("cpu_varlen_skew_b8_h16_sq1", A::varlen, kQuick, 8, 1, 16, std::move(skew), 452,
              "one long sequence among short ones on the CPU", "varlen_skew_b128_h16_sq1: batch 128->8, long one 64K->16K"));
  }

  // --- sparse top-k 2048 (V3.2 DSA decode): 128 heads, FP8 cache as deployed, and bf16 ---------
  add(with_fp8(with_topk(dense("sparse_b64_h128_sq1_sk65536_top2048_fp8", A::sparse, kGpu, 64, 1, 128,
                               same(64, 65536), 501, "V3.2 sparse decode as deployed (FP8 cache)"), 2048)));
  add(with_topk(dense("sparse_b64_h128_sq1_sk65536_top2048_bf16", A::sparse, kGpu, 64, 1, 128,
                      same(64, 65536), 502, "sparse decode over the bf16 cache"), 2048));
  add(with_fp8(with_topk(dense("sparse_b64_h128_sq2_sk32768_top2048_fp8", A::sparse, kGpu, 64, 2, 128,
                               same(64, 32768), 503, "sparse MTP decode (s_q=2), FP8 cache"), 2048)));
  // A bf16/FP8 twin pair small enough for the device check's bench step (600 MiB of bf16
  // cache instead of 4.6 GiB); mla-bench reports their measured speed ratio.
  add(with_fp8(with_topk(dense("sparse_b64_h128_sq1_sk8192_top2048_fp8", A::sparse, kGpu, 64, 1, 128,
                               same(64, 8192), 504, "V3.2 sparse decode (FP8 cache), 8K context"), 2048)));
  add(with_topk(dense("sparse_b64_h128_sq1_sk8192_top2048_bf16", A::sparse, kGpu, 64, 1, 128,
                      same(64, 8192), 504, "sparse decode over the bf16 cache, twin of the FP8 point"), 2048));
  add(with_fp8(with_topk(dense("cpu_sparse_b2_h128_sq1_sk16384_top2048_fp8", A::sparse, kQuick, 2, 1, 128,
                               same(2, 16384), 551, "sparse decode on the CPU (FP8 cache)",
                               "sparse_b64_h128_sq1_sk65536_top2048_fp8: batch 64->2, context 64K->16K"), 2048)));
  add(with_topk(dense("cpu_sparse_b2_h128_sq1_sk16384_top2048_bf16", A::sparse, kFull, 2, 1, 128,
                      same(2, 16384), 552, "sparse decode on the CPU (bf16 cache)",
                      "sparse_b64_h128_sq1_sk65536_top2048_bf16: batch 64->2, context 64K->16K"), 2048));

  // --- FP8 cache (656 B/token) on the memory-bound family --------------------------------------
  {
    const int32_t fctx[] = {4096, 16384, 65536};
    for (size_t i = 0; i < std::size(fctx); ++i)
      add(with_fp8(dense(fmt::format("fp8_b128_h16_sq1_sk{}", fctx[i]), A::fp8, kGpu, 128, 1, 16,
                         same(128, fctx[i]), 601 + i, "memory-bound decode over the FP8 cache")));
    // The bf16-vs-FP8 comparison: the exact twin of decode_b128_h16_sq1_sk8192 (same seed,
    // so the two caches hold the same values up to quantization); mla-bench reports the
    // measured speed ratio of the pair (byte model 1152/656 = 1.76x fewer cache bytes).
    add(with_fp8(dense("fp8_b128_h16_sq1_sk8192", A::fp8, kGpu, 128, 1, 16, same(128, 8192), 101 + 3,
                       "memory-bound decode over the FP8 cache, twin of decode_b128_h16_sq1_sk8192")));
    add(with_fp8(dense("fp8_ue8m0_b128_h16_sq1_sk16384", A::fp8, kGpu, 128, 1, 16, same(128, 16384), 604,
                       "FP8 cache with power-of-two (ue8m0) scales"), ScaleFmt::ue8m0));
    add(with_fp8(dense("fp8_b128_h128_sq1_sk4096", A::fp8, kGpu, 128, 1, 128, same(128, 4096), 605,
                       "compute-bound decode over the FP8 cache")));
    const int32_t cfctx[] = {4096, 16384};
    for (size_t i = 0; i < std::size(cfctx); ++i)
      add(with_fp8(dense(fmt::format("cpu_fp8_b4_h16_sq1_sk{}", cfctx[i]), A::fp8, kQuick, 4, 1, 16,
                         same(4, cfctx[i]), 651 + i, "memory-bound decode over the FP8 cache on the CPU",
                         fmt::format("fp8_b128_h16_sq1_sk{}: {}", cfctx[i], cpu_b))));
    add(with_fp8(dense("cpu_fp8_ue8m0_b4_h16_sq1_sk4096", A::fp8, kFull, 4, 1, 16, same(4, 4096), 653,
                       "ue8m0 FP8 scales on the CPU", "fp8_ue8m0_b128_h16_sq1_sk16384: batch 128->4, context 16K->4K"),
                 ScaleFmt::ue8m0));
  }

  // --- edges: the shapes real users crashed on (docs/field.md, "Bugs", 1-8); small, every tier
  constexpr unsigned kEdge = cpu_full | gpu;
  add(dense("edge_len0_mixed", A::edge, kEdge, 4, 1, 16, {0, 5, 0, 64}, 701,
            "zero-length sequences among non-empty ones (0/0 in the split combine)"));
  add(dense("edge_len0_all", A::edge, kEdge, 2, 1, 16, {0, 0}, 702, "every sequence empty: out 0, lse +inf"));
  add(dense("edge_len1", A::edge, kEdge, 3, 1, 16, same(3, 1), 703, "one token per sequence"));
  add(dense("edge_page_boundaries", A::edge, kEdge, 7, 1, 16, {1, 63, 64, 65, 127, 128, 129}, 704,
            "lengths on both sides of page boundaries (ps 64): tail tiles over-reading pages"));
  add(dense("edge_heads1", A::edge, kEdge, 2, 1, 1, {100, 257}, 705, "a single head"));
  add(dense("edge_heads7", A::edge, kEdge, 2, 1, 7, {100, 257}, 706, "odd head count"));
  add(dense("edge_heads8", A::edge, kEdge, 2, 1, 8, {100, 257}, 707, "8 heads (a known crash upstream)"));
  add(dense("edge_mtp_sq4_short", A::edge, kEdge, 3, 4, 16, {3, 64, 65}, 708,
            "speculative s_q=4, causal, first sequence shorter than s_q (empty first row)"));
  {
    AxisPoint p = dense("edge_large_q_std100", A::edge, kEdge, 2, 1, 16, same(2, 8192), 709,
                        "q with std 100: split-KV LSE overflow");
    p.q_std = 100.0;
    add(std::move(p));
  }
  {
    AxisPoint p = dense("edge_page_size16", A::edge, kEdge, 2, 1, 16, {31, 33}, 710,
                        "page size 16: kernels that only support 64 must refuse, not misread");
    p.shape.page_size = 16;
    add(std::move(p));
  }
  add(with_topk(dense("edge_sparse_invalid", A::edge, kEdge, 4, 2, 16, {0, 10, 100, 300}, 711,
                      "sparse rows with every kind of invalid index mixed in (negative, L, beyond L) and empty rows"),
                64, 16));
  {
    AxisPoint p = with_fp8(dense("edge_fp8_tiny_values", A::edge, kEdge, 2, 1, 16, same(2, 300), 712,
                                 "FP8 blocks with amax below the 1e-4 clamp"));
    p.kv_std = 1e-6;
    add(std::move(p));
  }

  std::set<std::string> names;
  for (const AxisPoint& p : t)
    if (!names.insert(p.name).second) throw Error("duplicate axis point name " + p.name);
  return t;
}

}  // namespace

const std::vector<AxisPoint>& catalog() {
  static const std::vector<AxisPoint> table = build_catalog();
  return table;
}

std::vector<const AxisPoint*> select(Tier t) {
  std::vector<const AxisPoint*> out;
  for (const AxisPoint& p : catalog())
    if (p.in(t)) out.push_back(&p);
  return out;
}

const AxisPoint* find(std::string_view name) {
  for (const AxisPoint& p : catalog())
    if (p.name == name) return &p;
  return nullptr;
}

Footprint footprint(const AxisPoint& p) {
  const AttnShape& s = p.shape;
  const auto tokens = static_cast<std::size_t>(s.num_blocks) * static_cast<std::size_t>(s.page_size);
  Footprint f;
  f.q = static_cast<std::size_t>(s.batch) * s.s_q * s.heads * s.d_qk * sizeof(uint16_t);
  f.kv_cache = tokens * cache_bytes_per_token(s.cache_format);
  f.block_table = static_cast<std::size_t>(s.batch) * s.max_blocks * sizeof(int32_t);
  f.seqlens = static_cast<std::size_t>(s.batch) * sizeof(int32_t);
  f.indices = s.topk > 0 ? static_cast<std::size_t>(s.batch) * s.s_q * s.topk * sizeof(int32_t) : 0;
  f.bf16_staging = s.cache_format == CacheFormat::fp8 ? tokens * kQkDim * sizeof(uint16_t) : 0;
  return f;
}

int32_t invalid_index(int kind, int32_t length) {
  switch (kind % kInvalidKinds) {
    case 0: return -1;
    case 1: return -2;
    case 2: return -7;
    case 3: return std::numeric_limits<int32_t>::min();
    case 4: return length;
    case 5: return length <= std::numeric_limits<int32_t>::max() - 5 ? length + 5 : std::numeric_limits<int32_t>::max();
    default: return std::numeric_limits<int32_t>::max();
  }
}

namespace {

constexpr uint16_t kBf16NaN = 0x7FC0;

// Sparse rows: valid positions first (Floyd's algorithm: k distinct values of [0, L) with
// exactly k draws), then the invalid ones, then a Fisher-Yates shuffle so valid and invalid
// entries are interleaved the way an indexer's top-k output is unordered.
void fill_indices(const AxisPoint& p, std::vector<int32_t>& idx) {
  const AttnShape& s = p.shape;
  const auto k = static_cast<size_t>(s.topk);
  idx.assign(static_cast<size_t>(s.batch) * s.s_q * k, 0);
  std::vector<uint8_t> taken;
  for (int b = 0; b < s.batch; ++b) {
    const int32_t len = p.seqlens[static_cast<size_t>(b)];
    taken.assign(static_cast<size_t>(len), 0);
    for (int i = 0; i < s.s_q; ++i) {
      const uint64_t row = static_cast<uint64_t>(b) * s.s_q + i;
      // Each row owns 3k counters: k for sampling, k for the shuffle (k-1 used), k spare.
      const uint64_t base = row * 3 * k;
      int32_t* r = idx.data() + row * k;
      const int64_t n_valid = std::min<int64_t>(len, static_cast<int64_t>(k) - p.invalid_per_row);
      int64_t n = 0;
      for (int64_t j = len - n_valid; j < len; ++j) {
        const auto t = static_cast<int32_t>(gen::bits(p.seed, kStreamIndices, base + static_cast<uint64_t>(n)) %
                                            static_cast<uint64_t>(j + 1));
        const int32_t pick = taken[static_cast<size_t>(t)] ? static_cast<int32_t>(j) : t;
        taken[static_cast<size_t>(pick)] = 1;
        r[n++] = pick;
      }
      for (int64_t j = 0; j < n; ++j) taken[static_cast<size_t>(r[j])] = 0;
      for (int64_t j = n, m = 0; j < static_cast<int64_t>(k); ++j, ++m)
        r[j] = invalid_index(static_cast<int>(m % kInvalidKinds), len);  // every one must be skipped
      for (int64_t j = static_cast<int64_t>(k) - 1; j > 0; --j) {
        const uint64_t u = gen::bits(p.seed, kStreamIndices, base + k + static_cast<uint64_t>(j));
        std::swap(r[j], r[u % static_cast<uint64_t>(j + 1)]);
      }
    }
  }
}

// Sizes a vector of up to several GiB that is then written once, front to back. Its zero-fill
// would take every page fault in one thread, 4 KiB at a time: on the 2-core CI VM a fresh 2.4 GiB
// vector's zero-fill took 4.7 s (0.9 s once the VM had backed the memory before), and 1.0 s
// (0.1 s) when its range was first marked for transparent huge pages and populated. So on Linux
// the reserved range is marked and populated by every input thread (MADV_POPULATE_WRITE, Linux
// 5.14); both are advice, and where refused the vector is the same, only slower to make.
template <class T>
void resize_for_streaming(std::vector<T>& v, size_t n) {
  v.clear();
  v.reserve(n);
#if defined(__linux__)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE; Debian 12's headers predate it
  const auto a = reinterpret_cast<uintptr_t>(v.data());
  const uintptr_t b = (a + kHuge - 1) & ~(kHuge - 1), e = (a + n * sizeof(T)) & ~(kHuge - 1);
  if (e > b) {
    (void)madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE);
    gen::parallel_for((e - b) / kHuge, 32, [&](size_t h0, size_t h1) {
      (void)madvise(reinterpret_cast<void*>(b + h0 * kHuge), (h1 - h0) * kHuge, kPopulateWrite);
    });
  }
#endif
  v.resize(n);
}

void poison_fp8_token(uint8_t* tok) {
  std::memset(tok, 0x7F, kLatentDim);  // e4m3fn NaN
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t t = 0; t < kLatentDim / kFp8BlockSize; ++t)
    std::memcpy(tok + kLatentDim + t * sizeof(float), &nan, sizeof(float));
  uint8_t* rope = tok + kLatentDim + (kLatentDim / kFp8BlockSize) * sizeof(float);
  for (size_t d = 0; d < kRopeDim; ++d) std::memcpy(rope + d * sizeof(uint16_t), &kBf16NaN, sizeof(uint16_t));
}

}  // namespace

SyntheticInputs build_inputs(const AxisPoint& p) {
  const AttnShape& s = p.shape;
  if (s.batch < 0 || s.s_q <= 0 || s.heads <= 0 || s.page_size <= 0 || s.d_qk != static_cast<int>(kQkDim) ||
      s.d_v != static_cast<int>(kLatentDim))
    throw Error(fmt::format("axis point {}: malformed shape", p.name));
  if (static_cast<int>(p.seqlens.size()) != s.batch)
    throw Error(fmt::format("axis point {}: {} seqlens for batch {}", p.name, p.seqlens.size(), s.batch));

  SyntheticInputs in;
  in.shape = s;
  in.softmax_scale = deepseek_v3_softmax_scale();
  in.cache_seqlens = p.seqlens;

  resize_for_streaming(in.q, static_cast<size_t>(s.batch) * s.s_q * s.heads * kQkDim);
  gen::fill_bf16(p.seed, kStreamQ, 0.0, p.q_std, in.q);

  // Block table over a random permutation of the physical blocks.
  const auto mb = static_cast<size_t>(s.max_blocks);
  in.block_table.assign(static_cast<size_t>(s.batch) * mb, kSentinelBlock);
  const std::vector<int64_t> perm = gen::permutation(p.seed, kStreamBlocks, s.num_blocks);
  std::vector<uint8_t> used_slot(static_cast<size_t>(s.num_blocks) * s.page_size, 0);
  size_t next = 0;
  for (int b = 0; b < s.batch; ++b) {
    const int32_t len = p.seqlens[static_cast<size_t>(b)];
    const auto np = static_cast<size_t>(pages(len, s.page_size));
    if (np > mb) throw Error(fmt::format("axis point {}: sequence {} needs {} pages > max_blocks {}", p.name, b, np, mb));
    for (size_t j = 0; j < np; ++j) {
      if (next + 1 >= perm.size()) throw Error(fmt::format("axis point {}: num_blocks too small", p.name));
      const auto phys = static_cast<int32_t>(perm[next++]);
      in.block_table[static_cast<size_t>(b) * mb + j] = phys;
      const int64_t filled = std::min<int64_t>(s.page_size, len - static_cast<int64_t>(j) * s.page_size);
      std::fill_n(used_slot.begin() + static_cast<std::ptrdiff_t>(phys) * s.page_size, filled, uint8_t{1});
    }
  }

  // The cache as bf16, generated in physical order, unused slots poisoned; an FP8 point then
  // quantizes the bf16 values, as a deployed model quantizes its bf16 latent when it writes the
  // cache, so an fp8 point and its bf16 twin differ only by the quantization. Token ranges are
  // independent (the generator is counter-based: slot t is elements t·576 .. t·576 + 575 of the
  // kStreamKv tensor), so each thread generates and converts its own range through a small
  // buffer: no cache-sized bf16 temporary, and the FP8 quantization runs on every core.
  const size_t slots = used_slot.size();
  const bool fp8 = s.cache_format == CacheFormat::fp8;
  const size_t token_bytes = fp8 ? kFp8TokenBytes : kQkDim * sizeof(uint16_t);
  resize_for_streaming(in.kv_cache, slots * token_bytes);
  constexpr size_t kChunkTokens = 512;  // 576 KiB of bf16: stays in L2 between generation and use
  gen::parallel_for(slots, 4 * kChunkTokens, [&](size_t t_begin, size_t t_end) {
    std::vector<uint16_t> bf16(kChunkTokens * kQkDim);
    std::vector<double> latent(kLatentDim), rope(kRopeDim);
    for (size_t t0 = t_begin; t0 < t_end; t0 += kChunkTokens) {
      const size_t nt = std::min(kChunkTokens, t_end - t0);
      const std::span<uint16_t> chunk(bf16.data(), nt * kQkDim);
      gen::fill_bf16(p.seed, kStreamKv, 0.0, p.kv_std, chunk, {.threads = 1, .first = t0 * kQkDim});
      for (size_t j = 0; j < nt; ++j) {
        const size_t t = t0 + j;
        uint16_t* src = chunk.data() + j * kQkDim;
        uint8_t* tok = in.kv_cache.data() + t * token_bytes;
        if (!used_slot[t]) {
          if (fp8) {
            poison_fp8_token(tok);
          } else {
            std::fill_n(src, kQkDim, kBf16NaN);
          }
        } else if (fp8) {
          for (size_t d = 0; d < kLatentDim; ++d) latent[d] = bf16_to_float(src[d]);
          for (size_t d = 0; d < kRopeDim; ++d) rope[d] = bf16_to_float(src[kLatentDim + d]);
          fp8_quantize_token(latent, rope, p.scale_fmt, std::span<uint8_t>(tok, kFp8TokenBytes));
        }
      }
      if (!fp8) std::memcpy(in.kv_cache.data() + t0 * token_bytes, chunk.data(), nt * token_bytes);
    }
  });
  if (s.topk > 0) fill_indices(p, in.indices);
  if (p.needles) {
    if (fp8) throw Error(fmt::format("axis point {}: needles are defined over bf16 caches only", p.name));
    const needles::Overlay o = needles::make_overlay(in.view());
    needles::apply(o, in);
  }
  return in;
}

}  // namespace mla::axes
