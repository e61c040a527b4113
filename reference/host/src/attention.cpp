#include "mla/ref/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <Eigen/Dense>
#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"

namespace mla::ref {

namespace {

using MatrixRM = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
constexpr double kInf = std::numeric_limits<double>::infinity();
// Tokens per online-softmax step: big enough for efficient GEMMs, small enough that a
// 64-query × 128-head block of scores stays at 64 MB.
constexpr int64_t kChunk = 1024;

struct Workspace {
  MatrixRM k;  // [kChunk, 576] decoded tokens
  MatrixRM s;  // [rows, kChunk] scores, then probabilities
};

// Online softmax of query groups [g0, g0+ng) (each group = the H rows of one query token)
// against the tokens at logical positions `pos` (ascending); group g sees positions <= lim[g]
// (nondecreasing in g). Accumulates into O (unnormalised), running max m and running sum l.
void attend(const PagedCache& cache, int64_t b, const MatrixRM& Q, int64_t g0, int64_t ng, int64_t H,
            std::span<const int64_t> pos, std::span<const int64_t> lim, double scale, MatrixRM& O,
            Eigen::VectorXd& m, Eigen::VectorXd& l, Workspace& ws) {
  const int64_t n = static_cast<int64_t>(pos.size());
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t cn = std::min(kChunk, n - c0);
    const int64_t first = pos[static_cast<std::size_t>(c0)];
    int64_t gs = 0;
    while (gs < ng && lim[static_cast<std::size_t>(gs)] < first) ++gs;
    if (gs == ng) break;  // positions only grow: no group sees anything from here on
    for (int64_t j = 0; j < cn; ++j) cache.token(b, pos[static_cast<std::size_t>(c0 + j)], ws.k.row(j).data());
    const int64_t r0 = (g0 + gs) * H, rn = (ng - gs) * H;
    auto S = ws.s.topLeftCorner(rn, cn);
    const auto K = ws.k.topRows(cn);
    S.noalias() = Q.middleRows(r0, rn) * K.transpose();
    for (int64_t rr = 0; rr < rn; ++rr) {
      const int64_t r = r0 + rr;
      const int64_t limit = lim[static_cast<std::size_t>(gs + rr / H)];
      double* srow = ws.s.data() + rr * ws.s.cols();
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
      const double m_new = std::max(m[r], mx);
      const double alpha = std::exp(m[r] - m_new);  // 0 on the first visible chunk (m = -inf)
      double sum = 0;
      for (int64_t j = 0; j < cn; ++j) {
        const double p = std::exp(srow[j] - m_new);  // masked: exp(-inf) = 0
        srow[j] = p;
        sum += p;
      }
      l[r] = l[r] * alpha + sum;
      if (alpha != 1.0) O.row(r) *= alpha;
      m[r] = m_new;
    }
    O.middleRows(r0, rn).noalias() += S * K.leftCols(kDv);
  }
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

void PagedCache::token(int64_t b, int64_t t, double* out) const {
  const uint8_t* p = slot(b, t);
  if (in_->shape.cache_format == CacheFormat::fp8) {
    fp8_dequantize_token({p, kFp8TokenBytes}, {out, kQkDim});
    return;
  }
  uint16_t bits[kQkDim];
  std::memcpy(bits, p, sizeof bits);  // the cache is little endian, like every host we build for
  for (std::size_t d = 0; d < kQkDim; ++d) out[d] = bf16_to_float(bits[d]);
}

void PagedCache::token(int64_t b, int64_t t, float* out) const {
  const uint8_t* p = slot(b, t);
  if (in_->shape.cache_format == CacheFormat::fp8) {
    double tmp[kQkDim];
    fp8_dequantize_token({p, kFp8TokenBytes}, {tmp, kQkDim});
    for (std::size_t d = 0; d < kQkDim; ++d) out[d] = static_cast<float>(tmp[d]);
    return;
  }
  uint16_t bits[kQkDim];
  std::memcpy(bits, p, sizeof bits);
  for (std::size_t d = 0; d < kQkDim; ++d) out[d] = bf16_to_float(bits[d]);
}

AttnResult attention_fp64(const AttnInputs& in) {
  const PagedCache cache(in);
  const AttnShape& sh = in.shape;
  const int64_t B = sh.batch, SQ = sh.s_q, H = sh.heads, R = SQ * H;
  AttnResult res;
  res.out.assign(static_cast<std::size_t>(B * R * kDv), 0.0);
  res.lse.assign(static_cast<std::size_t>(B * H * SQ), kInf);

  MatrixRM Q(R, kDqk), O(R, kDv);
  Eigen::VectorXd m(R), l(R);
  Workspace ws{MatrixRM(kChunk, kDqk), MatrixRM(R, kChunk)};
  std::vector<int64_t> pos, lim;
  for (int64_t b = 0; b < B; ++b) {
    const uint16_t* qb = in.q.data() + b * R * kDqk;
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t d = 0; d < kDqk; ++d) Q(r, d) = bf16_to_float(qb[r * kDqk + d]);
    }
    O.setZero();
    m.setConstant(-kInf);
    l.setZero();
    const int64_t L = cache.seqlen(b);
    if (sh.topk == 0) {
      lim.resize(static_cast<std::size_t>(SQ));
      for (int64_t s = 0; s < SQ; ++s) lim[static_cast<std::size_t>(s)] = dense_last_position(sh, L, s);
      const int64_t n = std::max<int64_t>(lim.back() + 1, 0);  // limits grow with s
      pos.resize(static_cast<std::size_t>(n));
      for (int64_t t = 0; t < n; ++t) pos[static_cast<std::size_t>(t)] = t;
      attend(cache, b, Q, 0, SQ, H, pos, lim, in.softmax_scale, O, m, l, ws);
    } else {
      lim.assign(1, std::numeric_limits<int64_t>::max());
      for (int64_t s = 0; s < SQ; ++s) {
        pos = sparse_row_positions(in, b, s);
        attend(cache, b, Q, s, 1, H, pos, lim, in.softmax_scale, O, m, l, ws);
      }
    }
    for (int64_t s = 0; s < SQ; ++s) {
      for (int64_t hh = 0; hh < H; ++hh) {
        const int64_t r = s * H + hh;
        if (l[r] == 0.0) continue;  // nothing attended: out stays 0, lse stays +inf
        double* dst = res.out.data() + (b * R + r) * kDv;
        for (int64_t d = 0; d < kDv; ++d) dst[d] = O(r, d) / l[r];
        res.lse[static_cast<std::size_t>((b * H + hh) * SQ + s)] = m[r] + std::log(l[r]);
      }
    }
  }
  return res;
}

}  // namespace mla::ref
