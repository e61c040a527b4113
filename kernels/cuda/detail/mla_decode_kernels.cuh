// The absorbed MLA decode kernel: q [b, s_q, h, 576] bf16 against a paged bf16 latent cache
// (576 per token: latent 512 | rope 64), out [b, s_q, h, 512] bf16 and lse [b, h, s_q] fp32.
//
// All heads and all s_q queries of a sequence share one key/value matrix (the latent cache), so
// a sequence's s_q·h query rows form the M dimension of two GEMMs: S = Q·Kᵀ over 576 dims and
// O = P·V over 512 (V = the first 512 dims of K). A thread block owns a tile of 16·RG rows and a
// token range of one sequence (a work item of the host-side split plan, split_plan.hpp), loops
// over the range 32 tokens at a time with an online softmax in fp32, and either writes the final
// bf16 output (one split) or an fp32 partial that the combine kernel merges.
//
// Warps come in pairs per 16-row slice: warp (rg, cs) computes the scores of its 16 rows for
// tokens [16cs, 16cs+16) of each tile and the output columns [256cs, 256cs+256); a 16×512 fp32
// accumulator in one warp would need 256 registers per thread, two warps hold 128 each. The two
// halves of a row's scores meet in shared memory (row maxima, then bf16 probabilities).
//
// Safety rules the code keeps (FIELD-NOTES bugs 1-6, 10):
//  * it reads the block table only at t / page_size for tokens t < L of the sequence, and cache
//    slots only of those tokens: entries past ceil(L/ps) (sentinels) and slots past L (NaN) are
//    never touched;
//  * query rows past s_q·h (a padded head tile) are neither read nor written;
//  * a row that attends nothing (L = 0, a causal row with L - s_q + i < 0, a split past the row's
//    last key) keeps max = -inf; exponentials use a finite reference so no 0/0 or inf-inf NaN
//    arises, its output is written as 0, its lse as +inf (final) or -inf (partial);
//  * scores are max-subtracted before exponentiation, so |logits| in the thousands (q std 100)
//    cannot overflow; the combine subtracts the largest split lse the same way.
//
// This header holds the device code only, written against a few portability macros so that the
// same source also runs on the host under a simulator of the warp-level primitives
// (suites/gpu/sim): there the PTX calls (cp.async, ldmatrix, mma.sync) are replaced by models
// of their documented semantics, and the kernel's indexing, masking, split and combine logic is
// tested on machines without a GPU. Production code includes it from mla_decode.cu only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "detail/device_compat.cuh"
#include "detail/mla_decode_launch.hpp"

namespace mla::cuda::detail::decode {

constexpr int kD = 576;                    // q/k dims (latent 512 | rope 64)
constexpr int kDv = 512;                   // v dims (the latent)
constexpr int kNT = kDecodeTileTokens;     // tokens per tile (32)
constexpr int kChunks = kD * 2 / 16;       // 16-byte chunks per token row (72)
// Shared-memory row strides in elements, padded by 16 bytes: 8 consecutive rows then start 4
// banks apart, so each 8-address phase of ldmatrix touches 32 distinct banks.
constexpr int kSRow = kD + 8;              // Q and K rows: 1168 bytes
constexpr int kPRow = kNT + 8;             // probability rows: 80 bytes
constexpr float kLn2 = 0.693147180559945309f;

template <int RG>
struct Tile {
  static constexpr int kRows = 16 * RG;
  static constexpr int kWarps = 2 * RG;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr std::size_t kQBytes = std::size_t(kRows) * kSRow * 2;
  static constexpr std::size_t kKBytes = std::size_t(2) * kNT * kSRow * 2;  // double buffer
  static constexpr std::size_t kPBytes = std::size_t(kRows) * kPRow * 2;
  static constexpr std::size_t kRedBytes = std::size_t(2) * kRows * sizeof(float);
  static constexpr std::size_t kSmem = kQBytes + kKBytes + kPBytes + kRedBytes;
  static_assert(kQBytes % 16 == 0 && kKBytes % 16 == 0 && kPBytes % 16 == 0,
                "every shared region must stay 16-byte aligned for cp.async and ldmatrix");
};

MLA_DEV float pos_inf() { return MLA_INT_AS_FLOAT(0x7f800000); }
MLA_DEV float neg_inf() { return MLA_INT_AS_FLOAT(static_cast<int>(0xff800000u)); }
MLA_DEV int imin(int a, int b) { return a < b ? a : b; }
MLA_DEV int imax(int a, int b) { return a > b ? a : b; }

#if defined(MLA_HOST_SIM)
// Host simulation (suites/gpu/sim): the same call sites, executed by a simulator of the warp.
MLA_DEV uint32_t smem_u32(const void* p) { return ::mla::sim::smem_offset(p); }
MLA_DEV void cp_async16(uint32_t dst, const void* src) { ::mla::sim::cp_async16(dst, src); }
MLA_DEV void cp_async_commit() { ::mla::sim::cp_async_commit(); }
MLA_DEV void cp_async_wait_all() { ::mla::sim::cp_async_wait_all(); }
MLA_DEV void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) { ::mla::sim::ldmatrix_x4(r, addr, false); }
MLA_DEV void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) { ::mla::sim::ldmatrix_x4(r, addr, true); }
MLA_DEV void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  ::mla::sim::mma_m16n8k16_bf16(c, a, b0, b1);
}
#else
MLA_DEV uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

MLA_DEV void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
MLA_DEV void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
MLA_DEV void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Four 8x8 b16 matrices; lane l gives the row address of row l%8 of matrix l/8.
MLA_DEV void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
MLA_DEV void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// D = A·B + D, A 16x16 bf16 (row), B 16x8 bf16 (col), fp32 accumulate.
MLA_DEV void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

// Two floats to two round-to-nearest-even bf16, the first in the low half (lower column).
MLA_DEV uint32_t pack_bf16(float lo, float hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

template <int RG>
MLA_GLOBAL void MLA_BOUNDS(Tile<RG>::kThreads, 1) mla_decode_kernel(const DecodeParams p) {
  using T = Tile<RG>;
  MLA_DYNAMIC_SMEM(smem);
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sK = reinterpret_cast<uint16_t*>(smem + T::kQBytes);
  uint16_t* sP = reinterpret_cast<uint16_t*>(smem + T::kQBytes + T::kKBytes);
  float* sRed = reinterpret_cast<float*>(smem + T::kQBytes + T::kKBytes + T::kPBytes);

  const DecodeWork w = p.work[blockIdx.x];
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int rg = warp % RG;  // 16-row slice of the tile
  const int cs = warp / RG;  // half: score tokens [16cs, +16) of a tile, out columns [256cs, +256)
  const int g = lane >> 2, t4 = lane & 3;  // MMA fragment coordinates

  const int rows = p.s_q * p.heads;
  const int m0 = w.m_tile * T::kRows;
  const int64_t b64 = w.batch;
  const int L = p.seqlens[w.batch];

  // Exclusive end of the tokens row r attends inside this split; a padding row attends none.
  auto row_end = [&](int r) -> int {
    if (r >= rows) return w.tok_begin;
    int lim = L;
    if (p.causal) {
      const int s = r / p.heads;  // query i of s_q attends 0 .. L - s_q + i
      lim = imin(L, imax(0, L - p.s_q + s + 1));
    }
    return imin(lim, w.tok_end);
  };
  const int r_lo = m0 + rg * 16 + g;  // this thread's two rows (fragment rows g and g+8)
  const int r_hi = r_lo + 8;
  const int end_lo = row_end(r_lo);
  const int end_hi = row_end(r_hi);
  // Row limits grow with the row index (causal: with the query position), so the tile's last
  // real row bounds the tokens any row of the block needs.
  const int kv_end = imax(w.tok_begin, row_end(imin(m0 + T::kRows, rows) - 1));
  const int64_t n_tiles = (int64_t{kv_end} - w.tok_begin + kNT - 1) / kNT;

  auto load_q = [&]() {
    for (int i = tid; i < T::kRows * kChunks; i += T::kThreads) {
      const int r = i / kChunks, c = i - r * kChunks;
      uint16_t* dst = sQ + r * kSRow + c * 8;
      const int gr = m0 + r;
      if (gr < rows) {
        cp_async16(smem_u32(dst), p.q + ((b64 * rows + gr) * kD + c * 8));
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };
  // Tokens at or past kv_end are zero-filled, never fetched: their probabilities are 0 and a
  // zero V row keeps 0·V finite whatever the shared memory held before.
  auto load_k = [&](int64_t tile0, int buf) {
    uint16_t* base = sK + buf * (kNT * kSRow);
    for (int i = tid; i < kNT * kChunks; i += T::kThreads) {
      const int j = i / kChunks, c = i - j * kChunks;
      uint16_t* dst = base + j * kSRow + c * 8;
      const int64_t tok = tile0 + j;
      if (tok < kv_end) {
        const int t32 = static_cast<int>(tok);  // < kv_end <= INT_MAX
        const int32_t page = p.block_table[b64 * p.max_blocks + t32 / p.page_size];
        const int64_t slot = int64_t{page} * p.page_size + t32 % p.page_size;
        cp_async16(smem_u32(dst), p.cache + (slot * kD + c * 8));
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };

  float acc[32][4];
#pragma unroll
  for (int n = 0; n < 32; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.f;
  }
  float m_lo = neg_inf(), m_hi = neg_inf();  // running maxima, log2 domain
  float l_lo = 0.f, l_hi = 0.f;              // this thread's partial sums of probabilities

  // ldmatrix row addresses (bytes). A operands (Q, P): matrices (rows 0-7 | 8-15) x (k 0-7 |
  // 8-15) in the order a0..a3. B operand of S (K rows = tokens): (tokens 0-7, k 0-7), (0-7,
  // 8-15), (8-15, 0-7), (8-15, 8-15) = b0, b1 of two n-blocks. B operand of O (V, transposed):
  // (tokens 0-7, dims 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
  const int lrow = lane & 7;
  const int lsel1 = (lane >> 3) & 1;
  const int lsel2 = lane >> 4;
  const uint32_t q_addr = smem_u32(sQ) + ((rg * 16 + lrow + lsel1 * 8) * kSRow + lsel2 * 8) * 2;
  const uint32_t k_addr = smem_u32(sK) + ((cs * 16 + lrow + lsel2 * 8) * kSRow + lsel1 * 8) * 2;
  const uint32_t p_addr = smem_u32(sP) + ((rg * 16 + lrow + lsel1 * 8) * kPRow + lsel2 * 8) * 2;
  const uint32_t v_addr = smem_u32(sK) + ((lrow + lsel1 * 8) * kSRow + cs * 256 + lsel2 * 8) * 2;
  constexpr uint32_t kBufBytes = kNT * kSRow * 2;

  if (n_tiles > 0) {
    load_q();
    load_k(w.tok_begin, 0);
  }
  cp_async_commit();

  for (int64_t it = 0; it < n_tiles; ++it) {
    const int buf = static_cast<int>(it & 1);
    cp_async_wait_all();
    // Tile `it` has landed for every thread, and every warp has finished the previous tile's
    // P·V, so the other buffer (tile it-1) may be overwritten by the prefetch below.
    MLA_SYNC();
    if (it + 1 < n_tiles) load_k(w.tok_begin + (it + 1) * kNT, buf ^ 1);
    cp_async_commit();

    // ---- S = Q·Kᵀ for 16 rows x 16 tokens of this warp ----
    float s[2][4];
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nb][e] = 0.f;
    }
    const uint32_t kb = k_addr + buf * kBufBytes;
#pragma unroll 4
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t a[4], b[4];
      ldmatrix_x4(a, q_addr + kk * 32);
      ldmatrix_x4(b, kb + kk * 32);
      mma_bf16(s[0], a, b[0], b[1]);
      mma_bf16(s[1], a, b[2], b[3]);
    }

    // ---- mask, scale (log2 domain), row maxima across the warp pair ----
    const int64_t tile0 = w.tok_begin + it * kNT;
    float mx_lo = neg_inf(), mx_hi = neg_inf();
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t tok = tile0 + cs * 16 + nb * 8 + 2 * t4 + (e & 1);
        const bool hi = e >= 2;
        const bool keep = tok < (hi ? end_hi : end_lo);
        const float x = keep ? s[nb][e] * p.scale_log2 : neg_inf();
        s[nb][e] = x;
        if (hi) {
          mx_hi = fmaxf(mx_hi, x);
        } else {
          mx_lo = fmaxf(mx_lo, x);
        }
      }
    }
    mx_lo = fmaxf(mx_lo, MLA_SHFL_XOR(mx_lo, 1));
    mx_lo = fmaxf(mx_lo, MLA_SHFL_XOR(mx_lo, 2));
    mx_hi = fmaxf(mx_hi, MLA_SHFL_XOR(mx_hi, 1));
    mx_hi = fmaxf(mx_hi, MLA_SHFL_XOR(mx_hi, 2));
    const int sr_lo = rg * 16 + g, sr_hi = sr_lo + 8;
    if (t4 == 0) {
      sRed[cs * T::kRows + sr_lo] = mx_lo;
      sRed[cs * T::kRows + sr_hi] = mx_hi;
    }
    MLA_SYNC();
    const float mnew_lo = fmaxf(m_lo, fmaxf(sRed[sr_lo], sRed[T::kRows + sr_lo]));
    const float mnew_hi = fmaxf(m_hi, fmaxf(sRed[sr_hi], sRed[T::kRows + sr_hi]));
    // A row with no key so far keeps max -inf; subtracting 0 instead gives exp2(-inf) = 0 for
    // every masked score rather than exp2(-inf - -inf) = NaN.
    const float ref_lo = mnew_lo == neg_inf() ? 0.f : mnew_lo;
    const float ref_hi = mnew_hi == neg_inf() ? 0.f : mnew_hi;
    const float alpha_lo = exp2f(m_lo - ref_lo);  // 0 when m was -inf, else <= 1
    const float alpha_hi = exp2f(m_hi - ref_hi);
    m_lo = mnew_lo;
    m_hi = mnew_hi;

    float sum_lo = 0.f, sum_hi = 0.f;
    uint16_t* prow_lo = sP + sr_lo * kPRow + cs * 16 + 2 * t4;
    uint16_t* prow_hi = sP + sr_hi * kPRow + cs * 16 + 2 * t4;
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
      const float p0 = exp2f(s[nb][0] - ref_lo);
      const float p1 = exp2f(s[nb][1] - ref_lo);
      const float p2 = exp2f(s[nb][2] - ref_hi);
      const float p3 = exp2f(s[nb][3] - ref_hi);
      sum_lo += p0 + p1;
      sum_hi += p2 + p3;
      *reinterpret_cast<uint32_t*>(prow_lo + nb * 8) = pack_bf16(p0, p1);
      *reinterpret_cast<uint32_t*>(prow_hi + nb * 8) = pack_bf16(p2, p3);
    }
    l_lo = l_lo * alpha_lo + sum_lo;
    l_hi = l_hi * alpha_hi + sum_hi;
#pragma unroll
    for (int n = 0; n < 32; ++n) {
      acc[n][0] *= alpha_lo;
      acc[n][1] *= alpha_lo;
      acc[n][2] *= alpha_hi;
      acc[n][3] *= alpha_hi;
    }
    MLA_SYNC();  // both halves of every probability row are in sP

    // ---- O += P·V: 16 rows x 256 columns of this warp, 32 tokens ----
    const uint32_t vb = v_addr + buf * kBufBytes;
#pragma unroll
    for (int ks = 0; ks < kNT / 16; ++ks) {
      uint32_t a[4];
      ldmatrix_x4(a, p_addr + ks * 32);
#pragma unroll
      for (int np = 0; np < 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vb + ks * 16 * kSRow * 2 + np * 32);
        mma_bf16(acc[2 * np], a, b[0], b[1]);
        mma_bf16(acc[2 * np + 1], a, b[2], b[3]);
      }
    }
  }
  cp_async_wait_all();  // never leave the block with copies in flight

  // ---- row sums: the four threads of a quad, then the two warps of the pair ----
  l_lo += MLA_SHFL_XOR(l_lo, 1);
  l_lo += MLA_SHFL_XOR(l_lo, 2);
  l_hi += MLA_SHFL_XOR(l_hi, 1);
  l_hi += MLA_SHFL_XOR(l_hi, 2);
  const int sr_lo = rg * 16 + g, sr_hi = sr_lo + 8;
  MLA_SYNC();  // the last tile's reads of sRed are done
  if (t4 == 0) {
    sRed[cs * T::kRows + sr_lo] = l_lo;
    sRed[cs * T::kRows + sr_hi] = l_hi;
  }
  MLA_SYNC();
  // Fixed order, so both warps of a pair compute bit-identical sums.
  const float lt_lo = sRed[sr_lo] + sRed[T::kRows + sr_lo];
  const float lt_hi = sRed[sr_hi] + sRed[T::kRows + sr_hi];

  const bool direct = w.slot < 0;
  const float lse_empty = direct ? pos_inf() : neg_inf();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = half == 0 ? r_lo : r_hi;
    if (r >= rows) continue;
    const float m = half == 0 ? m_lo : m_hi;
    const float lt = half == 0 ? lt_lo : lt_hi;
    // A row with any key has max finite and l >= 1 (its largest term is exp2(0)).
    const bool empty = m == neg_inf();
    const float inv = empty ? 0.f : 1.f / lt;
    const float lse = empty ? lse_empty : (m + log2f(lt)) * kLn2;
    if (direct) {
      uint16_t* orow = p.out + (b64 * rows + r) * kDv + cs * 256 + 2 * t4;
#pragma unroll
      for (int n = 0; n < 32; ++n) {
        const float v0 = empty ? 0.f : acc[n][2 * half] * inv;
        const float v1 = empty ? 0.f : acc[n][2 * half + 1] * inv;
        *reinterpret_cast<uint32_t*>(orow + n * 8) = pack_bf16(v0, v1);
      }
      if (cs == 0 && t4 == 0)
        p.lse[(b64 * p.heads + r % p.heads) * p.s_q + r / p.heads] = lse;
    } else {
      float* orow = p.ws_out + (int64_t{w.slot} * rows + r) * kDv + cs * 256 + 2 * t4;
#pragma unroll
      for (int n = 0; n < 32; ++n) {
        const float v0 = empty ? 0.f : acc[n][2 * half] * inv;
        const float v1 = empty ? 0.f : acc[n][2 * half + 1] * inv;
        *reinterpret_cast<float2*>(orow + n * 8) = make_float2(v0, v1);
      }
      if (cs == 0 && t4 == 0) p.ws_lse[int64_t{w.slot} * rows + r] = lse;
    }
  }
}

// Merges the splits of one row per warp: out = Σ_i w_i·o_i with w_i = exp(lse_i - m)/Σ_j
// exp(lse_j - m), m = max_i lse_i (empty splits have lse -inf, weight 0); lse = m + log Σ.
// A row whose every split is empty gets out 0 and lse +inf.
MLA_GLOBAL void MLA_BOUNDS(128, 1) mla_combine_kernel(const DecodeParams p) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rows = p.s_q * p.heads;
  const int64_t row_g = int64_t{blockIdx.x} * p.combine_rows_per_block + warp;
  if (row_g >= int64_t{p.batch} * rows) return;
  const int b = static_cast<int>(row_g / rows);
  const int r = static_cast<int>(row_g - int64_t{b} * rows);
  const int n = p.num_splits[b];
  if (n <= 1) return;  // written directly by the decode kernel
  const int64_t base = p.split_base[b];

  float m = neg_inf();
  for (int i = 0; i < n; ++i) m = fmaxf(m, p.ws_lse[(base + i) * rows + r]);
  uint16_t* orow = p.out + (int64_t{b} * rows + r) * kDv;
  float* lse_dst = p.lse + (int64_t{b} * p.heads + r % p.heads) * p.s_q + r / p.heads;
  if (m == neg_inf()) {
#pragma unroll
    for (int j = 0; j < 4; ++j) *reinterpret_cast<uint2*>(orow + j * 128 + lane * 4) = make_uint2(0u, 0u);
    if (lane == 0) *lse_dst = pos_inf();
    return;
  }
  float sum = 0.f;
  for (int i = 0; i < n; ++i) sum += expf(p.ws_lse[(base + i) * rows + r] - m);
  const float inv = 1.f / sum;  // sum >= 1: the largest split contributes exp(0)
  float4 o[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) o[j] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int i = 0; i < n; ++i) {
    const float wgt = expf(p.ws_lse[(base + i) * rows + r] - m) * inv;
    if (wgt == 0.f) continue;  // an empty split, or one negligible in fp32
    const float* src = p.ws_out + ((base + i) * rows + r) * kDv;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 v = *reinterpret_cast<const float4*>(src + j * 128 + lane * 4);
      o[j].x += wgt * v.x;
      o[j].y += wgt * v.y;
      o[j].z += wgt * v.z;
      o[j].w += wgt * v.w;
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    *reinterpret_cast<uint2*>(orow + j * 128 + lane * 4) =
        make_uint2(pack_bf16(o[j].x, o[j].y), pack_bf16(o[j].z, o[j].w));
  }
  if (lane == 0) *lse_dst = m + logf(sum);
}

}  // namespace mla::cuda::detail::decode
