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
// halves of a row's scores meet in shared memory (row maxima, then bf16 probabilities). The FP8
// 16-row instance adds two helper warps that only load and dequantize (Tile::kWarps).
//
// FP8 cache (template FP8): a token is 656 raw bytes (512 e4m3fn | 4 fp32 scales | 64 bf16 rope,
// fixtures/SCHEMA.md). The raw tokens are what travels from global memory (656 instead of 1152
// bytes: the point of the format), cp.async'd into a double-buffered staging area; once a tile
// has landed, the block dequantizes it into the same bf16 K tile the bf16 path uses (value ·
// scale in fp32, rounded to bf16 - the deployed-precision reference's definition), so the MMA
// code is shared. The next tile's raw bytes are in flight meanwhile; the bf16 tile itself needs
// only one buffer because it is rebuilt after the barrier that ends the previous tile's P·V.
//
// Sparse attention (template SPARSE): the heads of one query token (b, s) share one index list,
// so the host plans "virtual sequences" vb = b·s_q + s with s_q' = 1: the M dimension is the
// heads, and a work item's token range is a range of positions in the index list (split and
// combine reused unchanged). Position j names logical token t = indices[vb][j] of sequence
// b = vb / s_q; an invalid t (t < 0 or t >= L_b) is never resolved through the block table, its
// row of the tile is zero-filled and its score masked to -inf, exactly as a token past the end.
//
// Safety rules the code keeps (docs/field.md, "Bugs", 1-6, 8, 10):
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
MLA_SIM_NAMESPACE_BEGIN

constexpr int kD = 576;                    // q/k dims (latent 512 | rope 64)
constexpr int kDv = 512;                   // v dims (the latent)
constexpr int kNT = kDecodeTileTokens;     // tokens per tile (32)
constexpr int kChunks = kD * 2 / 16;       // 16-byte chunks per token row (72)
// Shared-memory row strides in elements, padded by 16 bytes: 8 consecutive rows then start 4
// banks apart, so each 8-address phase of ldmatrix touches 32 distinct banks.
constexpr int kSRow = kD + 8;              // Q and K rows: 1168 bytes
constexpr int kPRow = kNT + 8;             // probability rows: 80 bytes
constexpr float kLn2 = 0.693147180559945309f;

constexpr int kFp8Token = 656;           // bytes of one FP8 token
constexpr int kFp8Chunks = kFp8Token / 16; // 16-byte cp.async chunks per FP8 token (41)
constexpr int kFp8ScaleOff = 512;          // four fp32 scales, one per 128 latent values
constexpr int kFp8RopeOff = 528;           // 64 bf16 rope values
static_assert(kFp8Token % 16 == 0 && kFp8RopeOff % 16 == 0,
              "FP8 tokens and their rope part must stay 16-byte aligned for cp.async and uint4");

template <int RG, bool FP8 = false>
struct Tile {
  static constexpr int kRows = 16 * RG;
  static constexpr int kMmaWarps = 2 * RG;
  // FP8 makes every K tile cost integer/fp32 dequantization work proportional to its 32·512
  // values, whatever the row count: the 16-row tile's two MMA warps get two helper warps that
  // only load and dequantize (and keep the block's barriers), so the per-tile dequantization is
  // shared by 128 threads instead of 64.
  static constexpr int kWarps = FP8 && kMmaWarps < 4 ? 4 : kMmaWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr std::size_t kQBytes = std::size_t(kRows) * kSRow * 2;
  // bf16: double buffer filled by cp.async; FP8: one buffer rebuilt from the staged raw tile.
  static constexpr std::size_t kKBufs = FP8 ? 1 : 2;
  static constexpr std::size_t kKBytes = kKBufs * kNT * kSRow * 2;
  static constexpr std::size_t kRawBytes = FP8 ? std::size_t(2) * kNT * kFp8Token : 0;
  static constexpr std::size_t kPBytes = std::size_t(kRows) * kPRow * 2;
  static constexpr std::size_t kRedBytes = std::size_t(2) * kRows * sizeof(float);
  // Per buffered tile, whether each token was loaded (in range and, sparse, a valid index).
  static constexpr std::size_t kOkBytes = std::size_t(2) * kNT * sizeof(int32_t);
  // The cache slot of each token of the tile being loaded, resolved once per token.
  static constexpr std::size_t kSlotBytes = std::size_t(kNT) * sizeof(int64_t);
  static constexpr std::size_t kSmem =
      kQBytes + kKBytes + kRawBytes + kPBytes + kRedBytes + kSlotBytes + kOkBytes;
  static_assert(kQBytes % 16 == 0 && kKBytes % 16 == 0 && kRawBytes % 16 == 0 && kPBytes % 16 == 0 &&
                    kRedBytes % 16 == 0 && kSlotBytes % 16 == 0,
                "every shared region must stay 16-byte aligned for cp.async and ldmatrix");
  static_assert(kThreads >= kNT, "load_k resolves one token per thread");
};

#if defined(MLA_HOST_SIM)
// Mutation seams, host simulation only: the simulator's self-tests switch one of these known
// bugs on and require the checks to catch it (a check that cannot fail proves nothing). On the
// device MLA_DECODE_MUTANT is the constant false and the branches vanish.
enum Mutant : int {
  kNoMutant = 0,
  kWrongScaleBlock = 1,      // FP8: a latent chunk uses the neighbouring block's scale
  kInvalidIndexToZero = 2,   // sparse: an invalid index loads token 0 (docs/field.md, "Bugs", 8)
  kInvalidNotMasked = 3,     // sparse: an invalid index is zero-filled but its score kept (0)
  kDequantKeepsStale = 4,    // FP8: an unloaded token's row dequantizes whatever smem held
  kSlowDequantOnly = 5,      // not a bug: the general e4m3 decode everywhere (fast path's twin)
  // Planted races (suites/gpu/sim: each must be caught by the cp.async landing mode it names).
  kSingleStagingBuffer = 6,  // FP8: the next tile's raw bytes are copied into the buffer being dequantized
  kNoLoopTopBarrier = 7,     // the loop-top barrier dropped: sSlot rewritten while read, tiles read early
};
inline int& decode_mutant() {
  static int m = kNoMutant;
  return m;
}
#define MLA_DECODE_MUTANT(id) (::mla::cuda::detail::decode::decode_mutant() == (id))
#else
#define MLA_DECODE_MUTANT(id) false
#endif

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
MLA_DEV float mul_keep_subnormals(float a, float b) { return a * b; }
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

// a·b rounded to nearest even, subnormal operands and results kept whatever the build's flags
// (-ftz=true or -use_fast_math would flush them: the FP8 fast path's operands are subnormal).
MLA_DEV float mul_keep_subnormals(float a, float b) {
  float r;
  asm("mul.rn.f32 %0, %1, %2;\n" : "=f"(r) : "f"(a), "f"(b));
  return r;
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

// float8 e4m3fn (bias 7, no infinities, S.1111.111 NaN) to float, exactly. A normal number's
// exponent and mantissa fields are a float's shifted right by 20 with the bias 127 - 7 = 120
// added; subnormals are m·2^-9. Integer ops only, so it is the same on every architecture and
// under the host simulator.
MLA_DEV float e4m3_to_float(uint32_t b) {
  const uint32_t mag = b & 0x7Fu;
  float v = mag >= 8u ? MLA_INT_AS_FLOAT(static_cast<int>((mag << 20) + (120u << 23)))
                      : static_cast<float>(mag) * 0.001953125f;
  if (mag == 0x7Fu) v = MLA_INT_AS_FLOAT(0x7FC00000);
  return (b & 0x80u) ? -v : v;
}

// The e4m3 byte in the top byte of `x` as a float equal to its value · 2^-120: e4m3's sign,
// exponent and mantissa fields moved to a float's positions. Both formats put the exponent field
// right above the mantissa, so a normal e4m3 becomes a normal float and a subnormal one a
// subnormal float, exactly, with no case distinction (NaN bytes excepted: see dequant4).
MLA_DEV float e4m3_top_scaled(uint32_t x) {
  return MLA_INT_AS_FLOAT(static_cast<int>((x & 0x80000000u) | ((x >> 4) & 0x07F00000u)));
}

// Four e4m3 bytes (little endian) times their block's scale, as two packed bf16 pairs. The fp32
// product is the exact product rounded once, so bf16(fp32(e·s)) is the schema's "dequantized
// value rounded to bf16" bit for bit. Fast path (the dequantization is the FP8 kernel's main
// integer cost: ~4 instructions a value instead of ~12): (e·2^-120)·(s·2^120) is the same exact
// product, valid while s·2^120 is finite and exact (|s| < 2^7; any cache quantized from values
// below 57344 in magnitude) and no byte is NaN; otherwise the general decode.
MLA_DEV uint2 dequant4(uint32_t w, float scale, float scale_up, bool fast) {
  const bool has_nan = (((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u) != 0u;
  if (fast && !has_nan) {
    return make_uint2(pack_bf16(mul_keep_subnormals(e4m3_top_scaled(w << 24), scale_up),
                                mul_keep_subnormals(e4m3_top_scaled(w << 16), scale_up)),
                      pack_bf16(mul_keep_subnormals(e4m3_top_scaled(w << 8), scale_up),
                                mul_keep_subnormals(e4m3_top_scaled(w), scale_up)));
  }
  return make_uint2(pack_bf16(e4m3_to_float(w & 0xFFu) * scale, e4m3_to_float((w >> 8) & 0xFFu) * scale),
                    pack_bf16(e4m3_to_float((w >> 16) & 0xFFu) * scale, e4m3_to_float(w >> 24) * scale));
}

// Index of row (b, s, h) of the caller's batch in lse [b, h, s_q]. `flat_row` = (b·s_q + s)·h_n +
// h, which is also what the kernel's (sequence, row) pairs flatten to in dense (rows = s_q·h_n)
// and in sparse (virtual sequence b·s_q + s, rows = h_n) mode alike.
MLA_DEV int64_t lse_index(const DecodeParams& p, int64_t flat_row) {
  const int64_t h = flat_row % p.heads, bs = flat_row / p.heads;
  return (bs / p.seq_q * p.heads + h) * p.seq_q + bs % p.seq_q;
}

template <int RG, bool FP8 = false, bool SPARSE = false>
MLA_GLOBAL void MLA_BOUNDS((Tile<RG, FP8>::kThreads), 1) mla_decode_kernel(const DecodeParams p) {
  using T = Tile<RG, FP8>;
  MLA_DYNAMIC_SMEM(smem);
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sK = reinterpret_cast<uint16_t*>(smem + T::kQBytes);
  unsigned char* sRaw = smem + T::kQBytes + T::kKBytes;
  uint16_t* sP = reinterpret_cast<uint16_t*>(smem + T::kQBytes + T::kKBytes + T::kRawBytes);
  float* sRed = reinterpret_cast<float*>(smem + T::kQBytes + T::kKBytes + T::kRawBytes + T::kPBytes);
  int64_t* sSlot =
      reinterpret_cast<int64_t*>(smem + T::kQBytes + T::kKBytes + T::kRawBytes + T::kPBytes + T::kRedBytes);
  int32_t* sOk = reinterpret_cast<int32_t*>(smem + T::kQBytes + T::kKBytes + T::kRawBytes + T::kPBytes +
                                            T::kRedBytes + T::kSlotBytes);

  const DecodeWork w = p.work[blockIdx.x];
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int rg = warp % RG;  // 16-row slice of the tile
  const int cs = warp / RG;  // half: score tokens [16cs, +16) of a tile, out columns [256cs, +256)
  const int g = lane >> 2, t4 = lane & 3;  // MMA fragment coordinates
  // Helper warps (FP8, 16-row tile) skip every MMA, softmax and output region below but reach
  // the same barrier statements, so each barrier is one instruction for the whole block.
  const bool mma = T::kWarps == T::kMmaWarps || warp < T::kMmaWarps;
  const int sr_lo = rg * 16 + g, sr_hi = sr_lo + 8;  // this thread's rows within the tile

  const int rows = p.s_q * p.heads;
  const int m0 = w.m_tile * T::kRows;
  const int64_t b64 = w.batch;  // sparse: the virtual sequence b·s_q + s
  // Sparse: the work item ranges over positions of the index list; the cache sequence is b.
  const int64_t seq = SPARSE ? b64 / p.seq_q : b64;
  const int L_seq = p.seqlens[seq];
  const int L = SPARSE ? p.topk : L_seq;

  // Exclusive end of the tokens row r attends inside this split; a padding row attends none.
  auto row_end = [&](int r) -> int {
    if (r >= rows) return w.tok_begin;
    int lim = L;
    if (!SPARSE && p.causal) {
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
  // The cache slot of position `tok` of the range, or -1 when nothing is to be loaded for it
  // (past kv_end, or an invalid sparse index): the block table is consulted only for a token
  // t < L of the sequence, so neither a sentinel entry nor a poisoned slot is ever read.
  auto slot_of = [&](int64_t tok) -> int64_t {
    if (tok >= kv_end) return -1;
    int t = static_cast<int>(tok);  // < kv_end <= INT_MAX
    if (SPARSE) {
      t = p.indices[b64 * p.topk + tok];
      if (t < 0 || t >= L_seq) {
        if (!MLA_DECODE_MUTANT(kInvalidIndexToZero) || L_seq == 0) return -1;
        t = 0;
      }
    }
    const int32_t page = p.block_table[seq * p.max_blocks + t / p.page_size];
    return int64_t{page} * p.page_size + t % p.page_size;
  };
  // Tokens not loaded are zero-filled, never fetched: their probabilities are 0 and a zero V row
  // keeps 0·V finite whatever the shared memory held before. FP8: only the raw bytes of loaded
  // tokens are fetched; dequant() writes the zeros, guided by sOk.
  // The slots are resolved by one thread per token (the index read, the block-table read and a
  // division by the run-time page size) and shared through sSlot, instead of once per 16-byte
  // chunk (41 or 72 per token). The barrier orders those writes before the copies, and every
  // reader of the previous tile's sSlot has passed it. Callers are block-uniform.
  auto load_k = [&](int64_t tile0, int buf) {
    if (tid < kNT) {
      const int64_t slot = slot_of(tile0 + tid);
      sSlot[tid] = slot;
      sOk[buf * kNT + tid] = slot >= 0 ? 1 : 0;
    }
    MLA_SYNC();
    if (FP8) {
      unsigned char* base = sRaw + (MLA_DECODE_MUTANT(kSingleStagingBuffer) ? 0 : buf) * (kNT * kFp8Token);
      for (int i = tid; i < kNT * kFp8Chunks; i += T::kThreads) {
        const int j = i / kFp8Chunks, c = i - j * kFp8Chunks;
        const int64_t slot = sSlot[j];
        if (slot >= 0) cp_async16(smem_u32(base + j * kFp8Token + c * 16), p.cache8 + (slot * kFp8Token + c * 16));
      }
      return;
    }
    uint16_t* base = sK + buf * (kNT * kSRow);
    for (int i = tid; i < kNT * kChunks; i += T::kThreads) {
      const int j = i / kChunks, c = i - j * kChunks;
      uint16_t* dst = base + j * kSRow + c * 8;
      const int64_t slot = sSlot[j];
      if (slot >= 0) {
        cp_async16(smem_u32(dst), p.cache + (slot * kD + c * 8));
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };
  // FP8: the landed raw tile `buf` into the bf16 K tile. One thread makes one 16-byte chunk of
  // a bf16 row (8 latent values from an 8-byte read, or 8 rope values copied), consecutive
  // threads consecutive chunks of a token, so the shared reads and writes are conflict-free
  // and the block's 72 chunks per token keep every thread busy with the same few instructions.
  auto dequant = [&](int buf) {
    const unsigned char* base = sRaw + (MLA_DECODE_MUTANT(kSingleStagingBuffer) ? 0 : buf) * (kNT * kFp8Token);
    for (int i = tid; i < kNT * kChunks; i += T::kThreads) {
      const int j = i / kChunks, c = i - j * kChunks;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (sOk[buf * kNT + j] || MLA_DECODE_MUTANT(kDequantKeepsStale)) {
        const unsigned char* tok = base + j * kFp8Token;
        if (c < kDv / 8) {
          const uint2 e = *reinterpret_cast<const uint2*>(tok + c * 8);
          // 16 chunks of 8 values per 128-value scale block.
          const int blk = MLA_DECODE_MUTANT(kWrongScaleBlock) ? (c >> 4) ^ 1 : c >> 4;
          const float sc = *reinterpret_cast<const float*>(tok + kFp8ScaleOff + blk * 4);
          const bool fast = fabsf(sc) < 128.f && !MLA_DECODE_MUTANT(kSlowDequantOnly);
          const float sc_up = sc * 0x1p120f;  // exact when fast
          const uint2 lo = dequant4(e.x, sc, sc_up, fast), hi = dequant4(e.y, sc, sc_up, fast);
          v = make_uint4(lo.x, lo.y, hi.x, hi.y);
        } else {
          v = *reinterpret_cast<const uint4*>(tok + kFp8RopeOff + (c - kDv / 8) * 16);
        }
      }
      *reinterpret_cast<uint4*>(sK + j * kSRow + c * 8) = v;
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
  // FP8 keeps one bf16 K tile; its buffer stride is 0.
  constexpr uint32_t kBufBytes = FP8 ? 0u : kNT * kSRow * 2;

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
    if (!MLA_DECODE_MUTANT(kNoLoopTopBarrier)) MLA_SYNC();
    if (it + 1 < n_tiles) load_k(w.tok_begin + (it + 1) * kNT, buf ^ 1);
    cp_async_commit();
    if (FP8) {
      // The barrier above also ended every warp's reads of the bf16 tile (previous P·V).
      dequant(buf);
      MLA_SYNC();
    }

    // ---- S = Q·Kᵀ for 16 rows x 16 tokens of this warp ----
    float s[2][4];
    if (mma) {
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
          const int jt = cs * 16 + nb * 8 + 2 * t4 + (e & 1);
          const int64_t tok = tile0 + jt;
          const bool hi = e >= 2;
          // Sparse: an invalid index is masked like a token past the end (its K row is zero, so
          // its raw score is 0, not -inf).
          const bool keep = tok < (hi ? end_hi : end_lo) &&
                            (!SPARSE || sOk[buf * kNT + jt] != 0 || MLA_DECODE_MUTANT(kInvalidNotMasked));
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
      if (t4 == 0) {
        sRed[cs * T::kRows + sr_lo] = mx_lo;
        sRed[cs * T::kRows + sr_hi] = mx_hi;
      }
    }  // mma
    MLA_SYNC();
    if (mma) {
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
    }  // mma
    MLA_SYNC();  // both halves of every probability row are in sP

    // ---- O += P·V: 16 rows x 256 columns of this warp, 32 tokens ----
    if (mma) {
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
    }  // mma
  }
  cp_async_wait_all();  // never leave the block with copies in flight

  // ---- row sums: the four threads of a quad, then the two warps of the pair ----
  if (mma) {
    l_lo += MLA_SHFL_XOR(l_lo, 1);
    l_lo += MLA_SHFL_XOR(l_lo, 2);
    l_hi += MLA_SHFL_XOR(l_hi, 1);
    l_hi += MLA_SHFL_XOR(l_hi, 2);
  }
  MLA_SYNC();  // the last tile's reads of sRed are done
  if (mma && t4 == 0) {
    sRed[cs * T::kRows + sr_lo] = l_lo;
    sRed[cs * T::kRows + sr_hi] = l_hi;
  }
  MLA_SYNC();
  if (!mma) return;  // no barrier follows
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
      if (cs == 0 && t4 == 0) p.lse[lse_index(p, b64 * rows + r)] = lse;
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
  float* lse_dst = p.lse + lse_index(p, row_g);
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

MLA_SIM_NAMESPACE_END
}  // namespace mla::cuda::detail::decode
