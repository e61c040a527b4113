#include "mla/ref/prefill.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/prefill.hpp"
#include "mla/core/threads.hpp"
#include "mla/ref/gemm.hpp"

namespace mla::ref {

namespace {

constexpr double kPosInf = std::numeric_limits<double>::infinity();
// Query rows per task and keys per online-softmax step. A 256 x 256 block of scores (512 KB) and
// the block's output rows stay in a core's L2 while the next chunk of K and V streams through;
// 256 rows make the products' packing of each key chunk cheap beside its use (on this project's
// 2-core AVX-512 VM: ~31 GFLOP/s per core at s = 2048, against ~45 for a square 512 GEMM; 128 rows
// gave ~27), and a long sequence still yields a task per 256 rows and head for the workers.
constexpr int64_t kRowBlock = 256;
constexpr int64_t kKeyChunk = 256;

std::vector<double> widen(std::span<const uint16_t> bits) {
  std::vector<double> out(bits.size());
  parallel_for(bits.size(), std::size_t{1} << 16, [&](std::size_t i0, std::size_t i1) {
    for (std::size_t i = i0; i < i1; ++i) out[i] = bf16_to_float(bits[i]);
  });
  return out;
}

// One task: query rows [r0, r0 + rows) of sequence `seq` in head `head`.
struct Task {
  PrefillSequence seq;
  int64_t head, r0, rows;
};

struct PrefillWorkspace {
  std::vector<double> s, o, m, l;
};

// The last key query row j (0-based in its sequence) attends; -1: none.
int64_t last_key(const PrefillInputs& in, CausalAlignment alignment, const PrefillSequence& seq, int64_t j) {
  if (!in.shape.causal || alignment == CausalAlignment::bottom_right) return prefill_last_key(in.shape.causal, seq, j);
  return std::min(seq.s_k - 1, j);  // top-left: keys t <= j
}

// Scales the first min(cn, lim + 1) scores of a row, sets the rest to -inf (masked) and returns
// the largest visible one. Four running maxima so the loop vectorizes without -ffast-math (the
// maximum of the same values in any order is the same value).
double scale_mask_max(double* s, int64_t cn, int64_t lim, double scale) {
  const int64_t vis = std::min(cn, lim + 1);
  double m[4] = {-kPosInf, -kPosInf, -kPosInf, -kPosInf};
  int64_t j = 0;
  for (; j + 4 <= vis; j += 4) {
    for (int u = 0; u < 4; ++u) {
      s[j + u] *= scale;
      m[u] = s[j + u] > m[u] ? s[j + u] : m[u];
    }
  }
  for (; j < vis; ++j) {
    s[j] *= scale;
    m[0] = s[j] > m[0] ? s[j] : m[0];
  }
  for (; j < cn; ++j) s[j] = -kPosInf;
  return std::max(std::max(m[0], m[1]), std::max(m[2], m[3]));
}

struct Operands {
  const PrefillInputs& in;
  CausalAlignment alignment;
  const double *q, *k, *v;
};

// Online softmax over the task's keys in chunks of kKeyChunk, in key order: S = Q·Kᵀ (scaled,
// masked), running max and sum per row, O += P·V; then out = O / sum and lse = max + log(sum).
void run_task(const Operands& op, const Task& t, PrefillWorkspace& w, PrefillOutputs& res) {
  const PrefillInputs& in = op.in;
  const int64_t H = in.shape.heads, dqk = in.shape.d_qk, dv = in.shape.d_v;
  const PrefillSequence& sq = t.seq;
  auto last = [&](int64_t row) { return last_key(in, op.alignment, sq, t.r0 + row); };
  w.s.resize(static_cast<std::size_t>(kRowBlock * kKeyChunk));
  w.o.assign(static_cast<std::size_t>(t.rows * dv), 0.0);
  w.m.assign(static_cast<std::size_t>(t.rows), -kPosInf);
  w.l.assign(static_cast<std::size_t>(t.rows), 0.0);
  const double* Q = op.q + ((sq.q_begin + t.r0) * H + t.head) * dqk;
  // Limits never decrease with the row under every mask, so the last row's bounds the keys.
  const int64_t end = last(t.rows - 1) + 1;
  for (int64_t c0 = 0; c0 < end; c0 += kKeyChunk) {
    const int64_t cn = std::min(kKeyChunk, end - c0);
    int64_t rs = 0;  // rows before rs see no key of this chunk
    while (rs < t.rows && last(rs) < c0) ++rs;
    const int64_t rn = t.rows - rs;
    const double* K = op.k + ((sq.k_begin + c0) * H + t.head) * dqk;
    const double* V = op.v + ((sq.k_begin + c0) * H + t.head) * dv;
    gemm_abt(rn, cn, dqk, Q + rs * H * dqk, H * dqk, K, H * dqk, w.s.data(), kKeyChunk, false);
    for (int64_t rr = 0; rr < rn; ++rr) {
      const int64_t r = rs + rr;
      double* srow = w.s.data() + rr * kKeyChunk;
      const double mx = scale_mask_max(srow, cn, last(r) - c0, in.softmax_scale);  // row r sees key c0
      const double m_new = std::max(w.m[static_cast<std::size_t>(r)], mx);
      const double alpha = std::exp(w.m[static_cast<std::size_t>(r)] - m_new);  // 0 on the first chunk
      exp_minus(srow, cn, m_new);
      double sum = 0;
      for (int64_t j = 0; j < cn; ++j) sum += srow[j];
      w.l[static_cast<std::size_t>(r)] = w.l[static_cast<std::size_t>(r)] * alpha + sum;
      if (alpha != 1.0) {
        double* orow = w.o.data() + r * dv;
        for (int64_t d = 0; d < dv; ++d) orow[d] *= alpha;
      }
      w.m[static_cast<std::size_t>(r)] = m_new;
    }
    gemm_ab(rn, dv, cn, w.s.data(), kKeyChunk, V, H * dv, w.o.data() + rs * dv, dv, true);
  }
  for (int64_t r = 0; r < t.rows; ++r) {
    const int64_t row = sq.q_begin + t.r0 + r;
    double* out = res.out.data() + (row * H + t.head) * dv;
    const double l = w.l[static_cast<std::size_t>(r)];
    if (l == 0.0) continue;  // attended nothing: out stays 0, lse +inf
    for (int64_t d = 0; d < dv; ++d) out[d] = w.o[static_cast<std::size_t>(r * dv + d)] / l;
    res.lse[static_cast<std::size_t>(t.head * in.shape.total_q + row)] = w.m[static_cast<std::size_t>(r)] + std::log(l);
  }
}

}  // namespace

PrefillOutputs prefill_attention(const PrefillInputs& in, CausalAlignment alignment) {
  validate_prefill_inputs(in, "prefill_attention");
  const PrefillShape& sh = in.shape;
  const std::vector<double> q = widen(in.q), k = widen(in.k), v = widen(in.v);
  PrefillOutputs res;
  res.dtype = OutDType::f64;
  res.out.assign(static_cast<std::size_t>(sh.total_q * sh.heads * sh.d_v), 0.0);
  res.lse.assign(static_cast<std::size_t>(sh.heads * sh.total_q), kPosInf);
  std::vector<Task> tasks;
  for (const PrefillSequence& seq : prefill_sequences(in)) {
    for (int64_t h = 0; h < sh.heads; ++h) {
      for (int64_t r0 = 0; r0 < seq.s_q; r0 += kRowBlock) tasks.push_back({seq, h, r0, std::min(kRowBlock, seq.s_q - r0)});
    }
  }
  const Operands op{in, alignment, q.data(), k.data(), v.data()};
  const int workers = task_workers(tasks.size(), 0);
  std::vector<PrefillWorkspace> ws(static_cast<std::size_t>(workers));
  parallel_tasks(tasks.size(), workers, [&](std::size_t ti, int worker) {
    run_task(op, tasks[ti], ws[static_cast<std::size_t>(worker)], res);
  });
  return res;
}

MergeResult merge_states(int64_t tokens, int64_t heads, int64_t head_dim, std::span<const double> out_a,
                         std::span<const double> lse_a, std::span<const double> out_b, std::span<const double> lse_b) {
  const auto n_out = static_cast<std::size_t>(tokens * heads * head_dim), n_lse = static_cast<std::size_t>(tokens * heads);
  if (tokens < 0 || heads <= 0 || head_dim <= 0 || out_a.size() != n_out || out_b.size() != n_out ||
      lse_a.size() != n_lse || lse_b.size() != n_lse) {
    throw Error(fmt::format("merge_states: out {} / {} and lse {} / {} elements for tokens {}, heads {}, head_dim {}",
                            out_a.size(), out_b.size(), lse_a.size(), lse_b.size(), tokens, heads, head_dim));
  }
  MergeResult r;
  r.out.assign(n_out, 0.0);
  r.lse.assign(n_lse, -kPosInf);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < tokens; ++t) {
      const std::size_t li = static_cast<std::size_t>(h * tokens + t);
      const double la = lse_a[li], lb = lse_b[li];
      if (std::isnan(la) || std::isnan(lb)) throw Error(fmt::format("merge_states: lse of head {} token {} is NaN", h, t));
      const bool ea = std::isinf(la), eb = std::isinf(lb);
      if (ea && eb) continue;  // nothing on either side: out 0, lse -inf (log 0)
      // An empty side weighs exp(-inf) = 0 and its out (possibly NaN) is never read.
      const double m = ea ? lb : eb ? la : std::max(la, lb);
      const double wa = ea ? 0.0 : std::exp(la - m), wb = eb ? 0.0 : std::exp(lb - m);
      const double s = wa + wb;  // in [1, 2]
      const double fa = wa / s, fb = wb / s;
      const std::size_t o = static_cast<std::size_t>((t * heads + h) * head_dim);
      for (int64_t d = 0; d < head_dim; ++d) {
        const double xa = ea ? 0.0 : out_a[o + d] * fa, xb = eb ? 0.0 : out_b[o + d] * fb;
        r.out[o + d] = xa + xb;
      }
      r.lse[li] = m + std::log(s);
    }
  }
  return r;
}

MergeResult merge_states(const MergeInputs& in) {
  const auto& s = in.shape;
  const auto n = static_cast<std::size_t>(s.tokens) * static_cast<std::size_t>(s.heads) * static_cast<std::size_t>(s.head_dim);
  std::vector<double> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) a[i] = state_value(s.dtype, in.out_a, i), b[i] = state_value(s.dtype, in.out_b, i);
  const std::vector<double> la(in.lse_a.begin(), in.lse_a.end()), lb(in.lse_b.begin(), in.lse_b.end());
  return merge_states(s.tokens, s.heads, s.head_dim, a, la, b, lb);
}

}  // namespace mla::ref
