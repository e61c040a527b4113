// Launchers of the absorbed MLA decode kernel and its combine pass; the device code is in
// detail/mla_decode_kernels.cuh.
#include <cuda_runtime.h>

#include <string>

#include "detail/mla_decode_kernels.cuh"
#include "mla/core/error.hpp"
#include "mla/cuda/check.hpp"

namespace mla::cuda::detail {
namespace {

using decode::mla_combine_kernel;
using decode::mla_decode_kernel;
using decode::Tile;

template <int RG>
int configure_rg(std::size_t smem_optin) {
  using T = Tile<RG>;
  if (T::kSmem > smem_optin) {
    throw UnsupportedError("cuda_mla_decode: the " + std::to_string(T::kRows) +
                           "-row tile needs " + std::to_string(T::kSmem) +
                           " bytes of shared memory per block; this device allows " +
                           std::to_string(smem_optin));
  }
  MLA_CUDA_CHECK(cudaFuncSetAttribute(mla_decode_kernel<RG>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(T::kSmem)));
  int blocks = 0;
  MLA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, mla_decode_kernel<RG>,
                                                               T::kThreads, T::kSmem));
  if (blocks < 1) {
    throw UnsupportedError("cuda_mla_decode: no block of the " + std::to_string(T::kRows) +
                           "-row kernel fits on an SM of this device");
  }
  return blocks;
}

template <int RG>
void launch_rg(const DecodeParams& p, cudaStream_t stream) {
  using T = Tile<RG>;
  mla_decode_kernel<RG><<<static_cast<unsigned>(p.num_work), T::kThreads, T::kSmem, stream>>>(p);
  MLA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

int decode_tile_rows(int64_t rows) { return rows <= 16 ? 16 : rows <= 32 ? 32 : 64; }

std::size_t decode_smem_bytes(int tile_rows) {
  switch (tile_rows) {
    case 16: return Tile<1>::kSmem;
    case 32: return Tile<2>::kSmem;
    case 64: return Tile<4>::kSmem;
  }
  throw Error("cuda_mla_decode: no kernel instance for a " + std::to_string(tile_rows) + "-row tile");
}

int decode_configure(int tile_rows, std::size_t smem_optin) {
  switch (tile_rows) {
    case 16: return configure_rg<1>(smem_optin);
    case 32: return configure_rg<2>(smem_optin);
    case 64: return configure_rg<4>(smem_optin);
  }
  throw Error("cuda_mla_decode: no kernel instance for a " + std::to_string(tile_rows) + "-row tile");
}

void decode_launch(const DecodeParams& p, int tile_rows, cudaStream_t stream) {
  if (p.num_work > 0) {
    switch (tile_rows) {
      case 16: launch_rg<1>(p, stream); break;
      case 32: launch_rg<2>(p, stream); break;
      case 64: launch_rg<4>(p, stream); break;
      default:
        throw Error("cuda_mla_decode: no kernel instance for a " + std::to_string(tile_rows) +
                    "-row tile");
    }
  }
  if (p.combine_blocks > 0) {
    if (p.combine_rows_per_block != 4)  // __launch_bounds__(128): one warp per row, 4 rows
      throw Error("cuda_mla_decode: the combine kernel runs 4 rows per block, the plan asked for " +
                  std::to_string(p.combine_rows_per_block));
    mla_combine_kernel<<<static_cast<unsigned>(p.combine_blocks), 32 * p.combine_rows_per_block, 0,
                         stream>>>(p);
    MLA_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace mla::cuda::detail
