#include "mla/ref/attention.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/threads.hpp"
#include "mla/ref/gemm.hpp"

namespace mla::ref {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Tokens per online-softmax step: big enough for efficient GEMMs, small enough that a
// 64-query × 128-head block of scores stays at 64 MB.
constexpr int64_t kChunk = 1024;
// Tokens per split-KV segment, at most: a sequence longer than its segment is cut into segments
// attended as separate tasks (each its own running max, sum and output) and merged in segment
// order, so one long sequence still uses every thread. The length is halved from kMaxSegment
// (down to kMinSegment) until a call has kMinTasks tasks, so a small batch is still cut finely
// enough for the workers to balance it: one worker that the machine slows down (another
// process on its core) then costs the others a task, not half the call. Chosen from the shape
// alone, never from the thread count: the tasks, their GEMM shapes and the merge order are the
// same on 1 thread or 64.
constexpr int64_t kMaxSegment = 4 * kChunk;
constexpr int64_t kMinSegment = 256;
constexpr std::size_t kMinTasks = 16;

// Per-worker scratch: one chunk of decoded tokens and its scores.
struct Workspace {
  std::vector<double> k;  // [kChunk, 576]
  std::vector<double> s;  // [rows, kChunk]
};

// A task's running state over its rows: O unnormalised [rows, 512], running max m, running sum l.
struct Acc {
  double* o;
  double* m;
  double* l;
};

// Online softmax of `ng` query groups (each group = the H rows of one query token; their bf16
// query in Q, [ng*H, 576]) against the tokens at logical positions `pos` (ascending); group g
// sees positions <= lim[g] (nondecreasing in g). Accumulates into `acc`.
void attend(const PagedCache& cache, int64_t b, const double* Q, int64_t ng, int64_t H, std::span<const int64_t> pos,
            std::span<const int64_t> lim, double scale, const Acc& acc, Workspace& ws) {
  const int64_t n = static_cast<int64_t>(pos.size());
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t cn = std::min(kChunk, n - c0);
    const int64_t first = pos[static_cast<std::size_t>(c0)];
    int64_t gs = 0;
    while (gs < ng && lim[static_cast<std::size_t>(gs)] < first) ++gs;
    if (gs == ng) break;  // positions only grow: no group sees anything from here on
    // Decoding is the first touch of the cache's bytes: the token kAhead places on is asked for
    // while this one is decoded (a sixth of the time at 16 heads was this wait).
    constexpr int64_t kAhead = 4;
    for (int64_t j = 0; j < std::min(kAhead, cn); ++j) cache.prefetch(b, pos[static_cast<std::size_t>(c0 + j)]);
    for (int64_t j = 0; j < cn; ++j) {
      if (j + kAhead < cn) cache.prefetch(b, pos[static_cast<std::size_t>(c0 + j + kAhead)]);
      cache.token(b, pos[static_cast<std::size_t>(c0 + j)], ws.k.data() + j * kDqk);
    }
    const int64_t r0 = gs * H, rn = (ng - gs) * H;
    gemm_abt(rn, cn, kDqk, Q + r0 * kDqk, kDqk, ws.k.data(), kDqk, ws.s.data(), kChunk, false);
    for (int64_t rr = 0; rr < rn; ++rr) {
      const int64_t r = r0 + rr;
      const int64_t limit = lim[static_cast<std::size_t>(gs + rr / H)];
      double* srow = ws.s.data() + rr * kChunk;
      double mx = -kInf;
      int64_t seen = 0;
      for (int64_t j = 0; j < cn; ++j) {
        if (pos[static_cast<std::size_t>(c0 + j)] > limit) {
          srow[j] = -kInf;
        } else {
          srow[j] *= scale;
          mx = std::max(mx, srow[j]);
          ++seen;
        }
      }
      // Decided by the mask, not by the values, so a NaN score propagates instead of
      // making the row look empty.
      if (seen == 0) {
        std::fill_n(srow, cn, 0.0);
        continue;
      }
      const double m_new = std::max(acc.m[r], mx);
      const double alpha = std::exp(acc.m[r] - m_new);  // 0 on the first visible chunk (m = -inf)
      exp_minus(srow, cn, m_new);  // masked: exp(-inf) = 0
      double sum = 0;
      for (int64_t j = 0; j < cn; ++j) sum += srow[j];
      acc.l[r] = acc.l[r] * alpha + sum;
      if (alpha != 1.0) {
        double* orow = acc.o + r * kDv;
        for (int64_t d = 0; d < kDv; ++d) orow[d] *= alpha;
      }
      acc.m[r] = m_new;
    }
    gemm_ab(rn, kDv, cn, ws.s.data(), kChunk, ws.k.data(), kDqk, acc.o + r0 * kDv, kDv, true);
  }
}

// One unit of independent output rows: query groups [g0, g0+ng) of sequence b against `pos`,
// cut into segments of kSegment positions.
struct Unit {
  int64_t b, g0, ng;
  std::vector<int64_t> pos, lim;
  int64_t segments(int64_t seg) const { return std::max<int64_t>(1, (static_cast<int64_t>(pos.size()) + seg - 1) / seg); }
};

// The partial state of segment >= 1 of a unit (segment 0 accumulates in the result itself).
struct Partial {
  std::vector<double> o, m, l;
};

// The segment length of a call (see kMaxSegment): a function of the units' lengths only.
int64_t segment_length(const std::vector<Unit>& units) {
  int64_t seg = kMaxSegment;
  auto tasks = [&](int64_t len) {
    std::size_t n = 0;
    for (const Unit& u : units) n += static_cast<std::size_t>(u.segments(len));
    return n;
  };
  while (seg > kMinSegment && tasks(seg) < kMinTasks) seg /= 2;
  return seg;
}

}  // namespace

// What one call needs besides its result, kept by a caller that runs the same shape again
// (cpu_mla_fp64's prepared state) so a repeated call maps and zeroes no fresh pages: the
// per-worker chunk and scores, the partial states of the segments, the running max and sum,
// and the query rows in float64.
struct AttentionScratch::Impl {
  std::vector<Workspace> ws;
  std::vector<std::vector<Partial>> partials;
  std::vector<double> m, l, q;
};

AttentionScratch::AttentionScratch() : impl_(std::make_unique<Impl>()) {}
AttentionScratch::~AttentionScratch() = default;
AttentionScratch::AttentionScratch(AttentionScratch&&) noexcept = default;
AttentionScratch& AttentionScratch::operator=(AttentionScratch&&) noexcept = default;

namespace {

// A bf16 token's 576 values, exactly (bf16 is the top half of a float32), for the float
// readers (the float64 ones use mla/ref/gemm.hpp's per-ISA decoder). Inline rather than
// bf16_to_float per value, which cost as much as the products at 16 heads. The cache is little
// endian, like every host we build for.
template <class T>
void decode_bf16(const uint8_t* p, T* out) {
  uint16_t bits[kQkDim];
  std::memcpy(bits, p, sizeof bits);
  for (std::size_t d = 0; d < kQkDim; ++d)
    out[d] = static_cast<T>(std::bit_cast<float>(static_cast<uint32_t>(bits[d]) << 16));
}

}  // namespace

PagedCache::PagedCache(const AttnInputs& in) : in_(&in) { validate_attention_inputs(in); }

const uint8_t* PagedCache::slot(int64_t b, int64_t t) const {
  const AttnShape& sh = in_->shape;
  const int64_t L = seqlen(b);
  if (t < 0 || t >= L) {
    throw Error(fmt::format("token {} of sequence {} outside [0, cache_seqlens={})", t, b, L));
  }
  const int64_t j = t / sh.page_size;
  const int64_t blk = in_->block_table[static_cast<std::size_t>(b * sh.max_blocks + j)];
  if (blk < 0 || blk >= sh.num_blocks) {
    throw Error(fmt::format("block_table[{}][{}]={} outside [0, num_blocks={}) (token {}, cache_seqlens={})", b, j,
                            blk, sh.num_blocks, t, L));
  }
  return in_->kv_cache.data() +
         (blk * sh.page_size + t % sh.page_size) * static_cast<int64_t>(cache_bytes_per_token(sh.cache_format));
}

void PagedCache::prefetch(int64_t b, int64_t t) const {
  const AttnShape& sh = in_->shape;
  if (t < 0 || t >= seqlen(b)) return;
  const int64_t blk = in_->block_table[static_cast<std::size_t>(b * sh.max_blocks + t / sh.page_size)];
  if (blk < 0 || blk >= sh.num_blocks) return;
  const std::size_t bytes = cache_bytes_per_token(sh.cache_format);
  const uint8_t* p = in_->kv_cache.data() + (blk * sh.page_size + t % sh.page_size) * static_cast<int64_t>(bytes);
  for (std::size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off);
}

void PagedCache::token(int64_t b, int64_t t, double* out) const {
  const uint8_t* p = slot(b, t);
  if (in_->shape.cache_format == CacheFormat::fp8) {
    decode_fp8_token(p, out);  // fp8_dequantize_token's values, vectorized (mla/ref/gemm.hpp)
    return;
  }
  decode_bf16_token(p, out);
}

void PagedCache::token(int64_t b, int64_t t, float* out) const {
  const uint8_t* p = slot(b, t);
  if (in_->shape.cache_format == CacheFormat::fp8) {
    double tmp[kQkDim];
    fp8_dequantize_token({p, kFp8TokenBytes}, {tmp, kQkDim});
    for (std::size_t d = 0; d < kQkDim; ++d) out[d] = static_cast<float>(tmp[d]);
    return;
  }
  decode_bf16(p, out);
}

AttnResult attention_fp64(const AttnInputs& in) {
  AttnResult res;
  AttentionScratch scratch;
  attention_fp64(in, res, scratch);
  return res;
}

void attention_fp64(const AttnInputs& in, AttnResult& res, AttentionScratch& scratch) {
  const PagedCache cache(in);
  AttentionScratch::Impl& sc = *scratch.impl_;
  const AttnShape& sh = in.shape;
  const int64_t B = sh.batch, SQ = sh.s_q, H = sh.heads, R = SQ * H;
  // assign() keeps a vector's storage when the size is unchanged: a repeated call writes into
  // pages it already has.
  res.out.assign(static_cast<std::size_t>(B * R * kDv), 0.0);
  res.lse.assign(static_cast<std::size_t>(B * H * SQ), kInf);
  std::vector<double>& m = sc.m;
  std::vector<double>& l = sc.l;
  m.assign(static_cast<std::size_t>(B * R), -kInf);
  l.assign(static_cast<std::size_t>(B * R), 0.0);

  // The units: a sequence's query groups together (dense, so its tokens are decoded once for all
  // of them), or one query token (sparse: each has its own positions).
  std::vector<Unit> units;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t L = cache.seqlen(b);
    if (sh.topk == 0) {
      Unit u{b, 0, SQ, {}, std::vector<int64_t>(static_cast<std::size_t>(SQ))};
      for (int64_t s = 0; s < SQ; ++s) u.lim[static_cast<std::size_t>(s)] = dense_last_position(sh, L, s);
      u.pos.resize(static_cast<std::size_t>(std::max<int64_t>(u.lim.back() + 1, 0)));  // limits grow with s
      for (std::size_t t = 0; t < u.pos.size(); ++t) u.pos[t] = static_cast<int64_t>(t);
      units.push_back(std::move(u));
    } else {
      for (int64_t s = 0; s < SQ; ++s)
        units.push_back(Unit{b, s, 1, sparse_row_positions(in, b, s), {std::numeric_limits<int64_t>::max()}});
    }
  }
  const int64_t seg = segment_length(units);
  struct Task {
    std::size_t unit;
    int64_t segment;
  };
  std::vector<Task> tasks;
  std::vector<std::vector<Partial>>& partials = sc.partials;
  partials.resize(units.size());
  for (std::size_t u = 0; u < units.size(); ++u) {
    const int64_t segs = units[u].segments(seg);
    partials[u].resize(static_cast<std::size_t>(segs - 1));
    for (int64_t k = 0; k < segs; ++k) tasks.push_back({u, k});
  }

  // The query rows in float64, once for every segment of their unit (exact: bf16 -> double).
  sc.q.resize(static_cast<std::size_t>(B * R * kDqk));
  parallel_for(static_cast<std::size_t>(B * R * kDqk), std::size_t{1} << 16, [&](std::size_t i0, std::size_t i1) {
    for (std::size_t i = i0; i < i1; ++i) sc.q[i] = bf16_to_float(in.q[i]);
  });

  const int workers = task_workers(tasks.size(), 0);
  std::vector<Workspace>& ws = sc.ws;
  if (ws.size() < static_cast<std::size_t>(workers)) ws.resize(static_cast<std::size_t>(workers));
  parallel_tasks(tasks.size(), workers, [&](std::size_t ti, int worker) {
    const Task& t = tasks[ti];
    const Unit& u = units[t.unit];
    const int64_t rows = u.ng * H, row0 = u.b * R + u.g0 * H;
    Workspace& w = ws[static_cast<std::size_t>(worker)];
    if (w.k.size() < static_cast<std::size_t>(kChunk * kDqk)) w.k.resize(static_cast<std::size_t>(kChunk * kDqk));
    if (w.s.size() < static_cast<std::size_t>(rows * kChunk)) w.s.resize(static_cast<std::size_t>(rows * kChunk));
    Acc acc{res.out.data() + row0 * kDv, m.data() + row0, l.data() + row0};
    if (t.segment > 0) {
      Partial& p = partials[t.unit][static_cast<std::size_t>(t.segment - 1)];
      p.o.assign(static_cast<std::size_t>(rows * kDv), 0.0);
      p.m.assign(static_cast<std::size_t>(rows), -kInf);
      p.l.assign(static_cast<std::size_t>(rows), 0.0);
      acc = Acc{p.o.data(), p.m.data(), p.l.data()};
    }
    const std::size_t begin = static_cast<std::size_t>(t.segment * seg);
    const std::size_t end = std::min(u.pos.size(), begin + static_cast<std::size_t>(seg));
    attend(cache, u.b, sc.q.data() + row0 * kDqk, u.ng, H, std::span(u.pos).subspan(begin, end - begin), u.lim,
           in.softmax_scale, acc, w);
  });

  // Merge each unit's segments into segment 0 in segment order, then normalise. Row by row, so
  // the order of the sums is fixed whatever ran where.
  for (std::size_t ui = 0; ui < units.size(); ++ui) {
    const Unit& u = units[ui];
    const int64_t rows = u.ng * H, row0 = u.b * R + u.g0 * H;
    for (int64_t rr = 0; rr < rows; ++rr) {
      const std::size_t r = static_cast<std::size_t>(row0 + rr);
      double* o = res.out.data() + row0 * kDv + rr * kDv;
      for (const Partial& p : partials[ui]) {
        const double pm = p.m[static_cast<std::size_t>(rr)];
        if (pm == -kInf) continue;  // the segment held nothing this row sees
        const double m_new = std::max(m[r], pm);
        const double a0 = std::exp(m[r] - m_new), a1 = std::exp(pm - m_new);
        const double* po = p.o.data() + rr * kDv;
        for (int64_t d = 0; d < kDv; ++d) o[d] = o[d] * a0 + po[d] * a1;
        l[r] = l[r] * a0 + p.l[static_cast<std::size_t>(rr)] * a1;
        m[r] = m_new;
      }
      const int64_t s = u.g0 + rr / H, hh = rr % H;
      if (l[r] == 0.0) {  // nothing attended: out 0, lse stays +inf
        std::fill_n(o, kDv, 0.0);
        continue;
      }
      for (int64_t d = 0; d < kDv; ++d) o[d] /= l[r];
      res.lse[static_cast<std::size_t>((u.b * H + hh) * SQ + s)] = m[r] + std::log(l[r]);
    }
  }
}

}  // namespace mla::ref
