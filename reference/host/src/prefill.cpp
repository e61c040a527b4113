#include "mla/ref/prefill.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/threads.hpp"
#include "mla/ref/gemm.hpp"

namespace mla::ref {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Query rows per task and keys per online-softmax step. A 256 x 256 block of scores (512 KB) and
// the block's output rows stay in a core's L2 while the next chunk of K and V streams through;
// 256 rows make the products' packing of each key chunk cheap beside its use (on this project's
// 2-core AVX-512 VM: ~31 GFLOP/s per core at s = 2048, against ~45 for a square 512 GEMM; 128 rows
// gave ~27), and a long sequence still yields a task per 256 rows and head for the workers.
constexpr int64_t kRowBlock = 256;
constexpr int64_t kChunk = 256;

void check_cu(std::span<const int32_t> cu, std::size_t total, const char* name) {
  if (cu.empty() || cu.front() != 0) throw Error(fmt::format("prefill_attention: {} must start at 0", name));
  for (std::size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1]) {
      throw Error(fmt::format("prefill_attention: {} decreases at entry {} ({} after {})", name, i, cu[i], cu[i - 1]));
    }
  }
  if (static_cast<std::size_t>(cu.back()) != total) {
    throw Error(fmt::format("prefill_attention: {} ends at {}, the inputs hold {} tokens", name, cu.back(), total));
  }
}

void validate(const PrefillInputs& in) {
  if (in.heads <= 0 || in.d_qk <= 0 || in.d_v <= 0) {
    throw Error(fmt::format("prefill_attention: heads {}, d_qk {}, d_v {} must be positive", in.heads, in.d_qk, in.d_v));
  }
  if (!std::isfinite(in.softmax_scale) || in.softmax_scale <= 0) {
    throw Error(fmt::format("prefill_attention: softmax_scale {} is not finite and positive", in.softmax_scale));
  }
  const auto qrow = static_cast<std::size_t>(in.heads * in.d_qk), vrow = static_cast<std::size_t>(in.heads * in.d_v);
  if (in.q.size() % qrow || in.k.size() % qrow || in.v.size() % vrow || in.k.size() / qrow != in.v.size() / vrow) {
    throw Error(fmt::format("prefill_attention: q ({}), k ({}), v ({}) elements are not whole tokens of {} heads x "
                            "{} / {} with as many keys as values",
                            in.q.size(), in.k.size(), in.v.size(), in.heads, in.d_qk, in.d_v));
  }
  if (in.cu_seqlens_q.size() != in.cu_seqlens_k.size()) {
    throw Error(fmt::format("prefill_attention: cu_seqlens_q has {} entries, cu_seqlens_k {}", in.cu_seqlens_q.size(),
                            in.cu_seqlens_k.size()));
  }
  check_cu(in.cu_seqlens_q, in.q.size() / qrow, "cu_seqlens_q");
  check_cu(in.cu_seqlens_k, in.k.size() / qrow, "cu_seqlens_k");
}

std::vector<double> widen(std::span<const uint16_t> bits) {
  std::vector<double> out(bits.size());
  parallel_for(bits.size(), std::size_t{1} << 16, [&](std::size_t i0, std::size_t i1) {
    for (std::size_t i = i0; i < i1; ++i) out[i] = bf16_to_float(bits[i]);
  });
  return out;
}

// One task: query rows [r0, r0 + rows) of sequence `seq` in head `head`.
struct Task {
  int64_t seq, head, r0, rows;
};

struct Workspace {
  std::vector<double> s, o, m, l;
};

// The last key query row j attends (< 0: none), for a sequence of s_q queries and s_k keys.
int64_t last_key(PrefillMask mask, int64_t s_q, int64_t s_k, int64_t j) {
  switch (mask) {
    case PrefillMask::none: return s_k - 1;
    case PrefillMask::causal_bottom_right: return std::min(s_k - 1, s_k - s_q + j);
    case PrefillMask::causal_top_left: return std::min(s_k - 1, j);
  }
  return -1;
}

// Scales the first min(cn, lim + 1) scores of a row, sets the rest to -inf (masked) and returns
// the largest visible one. Four running maxima so the loop vectorizes without -ffast-math (the
// maximum of the same values in any order is the same value).
double scale_mask_max(double* s, int64_t cn, int64_t lim, double scale) {
  const int64_t vis = std::min(cn, lim + 1);
  double m[4] = {-kInf, -kInf, -kInf, -kInf};
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
  for (; j < cn; ++j) s[j] = -kInf;
  return std::max(std::max(m[0], m[1]), std::max(m[2], m[3]));
}

struct Operands {
  const PrefillInputs& in;
  const double *q, *k, *v;
  int64_t total_q;
};

// Online softmax over the task's keys in chunks of kChunk, in key order: S = Q·Kᵀ (scaled,
// masked), running max and sum per row, O += P·V; then out = O / sum and lse = max + log(sum).
void run_task(const Operands& op, const Task& t, Workspace& w, PrefillResult& res) {
  const PrefillInputs& in = op.in;
  const int64_t H = in.heads, dqk = in.d_qk, dv = in.d_v;
  const int64_t q0 = in.cu_seqlens_q[static_cast<std::size_t>(t.seq)], k0 = in.cu_seqlens_k[static_cast<std::size_t>(t.seq)];
  const int64_t s_q = in.cu_seqlens_q[static_cast<std::size_t>(t.seq + 1)] - q0;
  const int64_t s_k = in.cu_seqlens_k[static_cast<std::size_t>(t.seq + 1)] - k0;
  w.s.resize(static_cast<std::size_t>(kRowBlock * kChunk));
  w.o.assign(static_cast<std::size_t>(t.rows * dv), 0.0);
  w.m.assign(static_cast<std::size_t>(t.rows), -kInf);
  w.l.assign(static_cast<std::size_t>(t.rows), 0.0);
  const double* Q = op.q + ((q0 + t.r0) * H + t.head) * dqk;
  // Limits never decrease with the row under every mask, so the last row's bounds the keys.
  const int64_t end = last_key(in.mask, s_q, s_k, t.r0 + t.rows - 1) + 1;
  for (int64_t c0 = 0; c0 < end; c0 += kChunk) {
    const int64_t cn = std::min(kChunk, end - c0);
    int64_t rs = 0;  // rows before rs see no key of this chunk
    while (rs < t.rows && last_key(in.mask, s_q, s_k, t.r0 + rs) < c0) ++rs;
    const int64_t rn = t.rows - rs;
    const double* K = op.k + ((k0 + c0) * H + t.head) * dqk;
    const double* V = op.v + ((k0 + c0) * H + t.head) * dv;
    gemm_abt(rn, cn, dqk, Q + rs * H * dqk, H * dqk, K, H * dqk, w.s.data(), kChunk, false);
    for (int64_t rr = 0; rr < rn; ++rr) {
      const int64_t r = rs + rr;
      const int64_t lim = last_key(in.mask, s_q, s_k, t.r0 + r) - c0;  // >= 0: row r sees key c0
      double* srow = w.s.data() + rr * kChunk;
      const double mx = scale_mask_max(srow, cn, lim, in.softmax_scale);
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
    gemm_ab(rn, dv, cn, w.s.data(), kChunk, V, H * dv, w.o.data() + rs * dv, dv, true);
  }
  for (int64_t r = 0; r < t.rows; ++r) {
    const int64_t row = q0 + t.r0 + r;
    double* out = res.out.data() + (row * H + t.head) * dv;
    const double l = w.l[static_cast<std::size_t>(r)];
    if (l == 0.0) continue;  // attended nothing: out stays 0, lse +inf
    for (int64_t d = 0; d < dv; ++d) out[d] = w.o[static_cast<std::size_t>(r * dv + d)] / l;
    res.lse[static_cast<std::size_t>(t.head * op.total_q + row)] = w.m[static_cast<std::size_t>(r)] + std::log(l);
  }
}

}  // namespace

PrefillResult prefill_attention(const PrefillInputs& in) {
  validate(in);
  const int64_t H = in.heads;
  const int64_t total_q = static_cast<int64_t>(in.q.size()) / (H * in.d_qk);
  const std::vector<double> q = widen(in.q), k = widen(in.k), v = widen(in.v);
  PrefillResult res;
  res.out.assign(static_cast<std::size_t>(total_q * H * in.d_v), 0.0);
  res.lse.assign(static_cast<std::size_t>(H * total_q), kInf);
  std::vector<Task> tasks;
  for (std::size_t i = 0; i + 1 < in.cu_seqlens_q.size(); ++i) {
    const int64_t s_q = in.cu_seqlens_q[i + 1] - in.cu_seqlens_q[i];
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t r0 = 0; r0 < s_q; r0 += kRowBlock) {
        tasks.push_back({static_cast<int64_t>(i), h, r0, std::min(kRowBlock, s_q - r0)});
      }
    }
  }
  const Operands op{in, q.data(), k.data(), v.data(), total_q};
  const int workers = task_workers(tasks.size(), 0);
  std::vector<Workspace> ws(static_cast<std::size_t>(workers));
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
  r.lse.assign(n_lse, -kInf);
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

}  // namespace mla::ref
