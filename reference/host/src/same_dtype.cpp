#include "mla/ref/same_dtype.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/threads.hpp"

namespace mla::ref {

namespace {
constexpr int kKeysAtOnce = 8;
}  // namespace

AttnResult attention_same_dtype(const AttnInputs& in, OutDType output) {
  if (output == OutDType::f64) throw Error("attention_same_dtype: the deployed-precision computation writes f32 or bf16");
  const PagedCache cache(in);
  const AttnShape& s = in.shape;
  const int64_t B = s.batch, SQ = s.s_q, H = s.heads;
  AttnResult r;
  r.out.assign(static_cast<std::size_t>(B * SQ * H * kDv), 0.0);
  r.lse.assign(static_cast<std::size_t>(B * H * SQ), std::numeric_limits<float>::infinity());
  const float scale = static_cast<float>(in.softmax_scale);
  const bool fp8 = s.cache_format == CacheFormat::fp8;
  // One task per (sequence, query token): each writes only its own rows of out and lse and sums
  // in the same order on any thread, so the bits do not depend on the thread count. Threaded
  // because every benchmark point a kernel is judged at before it is timed needs this reference
  // (a b=128, h=64, s_q=2, 4K-context point took 29 s of one core on a 16-core host).
  struct Scratch {
    std::vector<float> kv, q = std::vector<float>(kDqk), x, p, acc;
    std::vector<int64_t> pos;
  };
  const std::size_t rows = static_cast<std::size_t>(B * SQ);
  const int workers = task_workers(rows, 0);
  std::vector<Scratch> scratch(static_cast<std::size_t>(workers));
  parallel_tasks(rows, workers, [&](std::size_t row, int worker) {
    Scratch& w = scratch[static_cast<std::size_t>(worker)];
    std::vector<float>&kv = w.kv, &q = w.q, &x = w.x, &p = w.p, &acc = w.acc;
    std::vector<int64_t>& pos = w.pos;
    const int64_t b = static_cast<int64_t>(row) / SQ, sq = static_cast<int64_t>(row) % SQ;
    const int64_t L = cache.seqlen(b);
    // The keys of this query: dense, positions 0 .. last (causal-aware); sparse, the row's
    // valid indices (ascending: the order only moves fp32 rounding).
    if (s.topk > 0) {
      pos = sparse_row_positions(in, b, sq);
    } else {
      pos.resize(static_cast<std::size_t>(dense_last_position(s, L, sq) + 1));
      for (std::size_t j = 0; j < pos.size(); ++j) pos[j] = static_cast<int64_t>(j);
    }
    const int64_t n = static_cast<int64_t>(pos.size());
    if (n <= 0) return;
    kv.resize(static_cast<std::size_t>(n * kDqk));
    for (int64_t j = 0; j < n; ++j) {
      float* k = kv.data() + j * kDqk;
      cache.token(b, pos[static_cast<std::size_t>(j)], k);
      if (fp8) {
        for (int d = 0; d < kDqk; ++d) k[d] = bf16_to_float(bf16_from_float(k[d]));
      }
    }
    x.resize(static_cast<std::size_t>(n));
    p.resize(static_cast<std::size_t>(n));
    for (int64_t h = 0; h < H; ++h) {
      const uint16_t* qb = in.q.data() + ((b * SQ + sq) * H + h) * kDqk;
      for (int d = 0; d < kDqk; ++d) q[static_cast<std::size_t>(d)] = bf16_to_float(qb[d]);
      // Each score sums its 576 products in order, one float32 rounding each. Eight keys at a
      // time: eight independent sums, where one alone waits on its previous add at every step
      // (the same sums in the same order).
      int64_t j0 = 0;
      for (; j0 + kKeysAtOnce <= n; j0 += kKeysAtOnce) {
        float dots[kKeysAtOnce] = {};
        const float* k = kv.data() + j0 * kDqk;
        for (int d = 0; d < kDqk; ++d) {
          const float qd = q[static_cast<std::size_t>(d)];
          for (int i = 0; i < kKeysAtOnce; ++i) dots[i] += qd * k[i * kDqk + d];
        }
        for (int i = 0; i < kKeysAtOnce; ++i) x[static_cast<std::size_t>(j0 + i)] = dots[i] * scale;
      }
      for (; j0 < n; ++j0) {
        float dot = 0.f;
        const float* k = kv.data() + j0 * kDqk;
        for (int d = 0; d < kDqk; ++d) dot += q[static_cast<std::size_t>(d)] * k[d];
        x[static_cast<std::size_t>(j0)] = dot * scale;
      }
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) m = std::max(m, x[static_cast<std::size_t>(j)]);
      float sum = 0.f;
      for (int64_t j = 0; j < n; ++j) sum += (p[static_cast<std::size_t>(j)] = std::exp(x[static_cast<std::size_t>(j)] - m));
      for (int64_t j = 0; j < n; ++j) {
        p[static_cast<std::size_t>(j)] = bf16_to_float(bf16_from_float(p[static_cast<std::size_t>(j)] / sum));
      }
      // Each output column sums its n products in key order, one float32 rounding each, as
      // the deployed kernel is modelled. The loop over keys is the outer one so that the 512
      // columns advance together through one key's contiguous values (the same sums in the same
      // order as a column at a time, without a strided read per product).
      acc.assign(kDv, 0.f);
      for (int64_t j = 0; j < n; ++j) {
        const float pj = p[static_cast<std::size_t>(j)];
        const float* v = kv.data() + j * kDqk;
        for (int c = 0; c < kDv; ++c) acc[static_cast<std::size_t>(c)] += pj * v[c];
      }
      double* o = r.out.data() + ((b * SQ + sq) * H + h) * kDv;
      for (int c = 0; c < kDv; ++c) {
        const float a = acc[static_cast<std::size_t>(c)];
        o[c] = output == OutDType::bf16 ? bf16_to_float(bf16_from_float(a)) : a;
      }
      r.lse[static_cast<std::size_t>((b * H + h) * SQ + sq)] = static_cast<double>(m + std::log(sum));
    }
  });
  return r;
}

}  // namespace mla::ref
