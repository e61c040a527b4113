// The split-KV plan of the MLA decode kernel, computed on the host (plain C++, no CUDA).
//
// The decode kernel gives each thread block one work item: one sequence, one tile of query rows
// (a row is one (query position, head) pair; a sequence has s_q·heads of them) and one range
// of cache tokens. When there are too few (sequence, row tile) pairs to fill the GPU, a
// sequence's tokens are cut into several splits whose partial results a combine kernel merges
// (FlashMLA's split-KV: docs/field.md, "How the fastest Hopper MLA decode is built").
// Everything the kernel needs is decided here, so it can be tested without a GPU:
//  * every token [0, L) of every sequence is covered exactly once for every row tile, and a
//    sequence with L = 0 still gets one (empty) work item, so its rows are written (out 0,
//    lse +inf) rather than left as whatever memory held (docs/field.md, "Bugs", 1, 2);
//  * the grid is one-dimensional, with its size checked against the limit, so long sequences
//    or large s_q never run into the 65535 limit of grid.y/z (bug 10);
//  * a sequence's split count and token ranges depend only on its own length and on
//    permutation-invariant totals of the batch, so permuting the batch permutes the work and
//    gives bitwise-equal per-sequence results.
//
// C++17 (no std::span): the .cu file includes it for `DecodeWork`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mla::cuda {

// One thread block of the decode kernel. Layout shared with the device code.
struct DecodeWork {
  int32_t batch;      // sequence index
  int32_t m_tile;     // tile of query rows: rows [m_tile·m_tile_rows, ...) of this sequence
  int32_t split;      // index of the split within the sequence
  int32_t tok_begin;  // cache tokens [tok_begin, tok_end) of the sequence
  int32_t tok_end;
  int32_t slot;       // partial-result slot when the sequence has > 1 split, else -1
};
static_assert(sizeof(DecodeWork) == 24, "DecodeWork is copied to the device as is");

struct SplitPlanRequest {
  int batch = 0;
  int s_q = 0;
  int heads = 0;
  int m_tile_rows = 64;    // query rows per thread block (the kernel's row tile)
  int n_tile_tokens = 32;  // tokens per step of the kernel's loop; automatic splits align to it
  int num_sms = 0;         // streaming multiprocessors of the device
  int blocks_per_sm = 1;   // resident decode blocks per SM (occupancy)
  // > 0: exactly this many splits per sequence, the token range cut evenly at token
  // granularity (so split edges also fall inside a tile, and splits are empty when L < this);
  // for tests that check that different split counts agree. 0: chosen automatically.
  int forced_splits = 0;
  int max_splits = 128;                  // cap of the automatic choice
  int64_t max_grid_x = 2147483647;       // CUDA's limit of gridDim.x
};

struct SplitPlan {
  int rows = 0;     // query rows per sequence: s_q·heads
  int m_tiles = 0;  // row tiles per sequence
  std::vector<int32_t> num_splits;  // [batch]
  std::vector<int32_t> split_base;  // [batch] first partial slot, -1 when num_splits == 1
  std::vector<DecodeWork> work;     // the decode grid, in launch order
  int64_t partial_slots = 0;        // slots of the partial-result workspace
  int64_t combine_rows = 0;         // batch·rows: rows the combine kernel walks (one warp each)
  int combine_rows_per_block = 4;
  int64_t combine_blocks = 0;       // 0 when no sequence is split

  // Bytes of the partial-result workspace: per slot and row 512 fp32 outputs and one fp32 lse.
  int64_t workspace_bytes() const;
  // One line: "b=.. rows=.. m_tiles=.. splits=[..] grid=.. slots=.."
  std::string describe() const;
};

// Throws mla::Error on a malformed request (non-positive dims, negative lengths, lengths.size()
// != batch), mla::UnsupportedError when the grid would exceed `max_grid_x`.
SplitPlan plan_decode(const SplitPlanRequest& req, const std::vector<int32_t>& seqlens);

}  // namespace mla::cuda
