// Launchers of the absorbed MLA decode kernel and its combine pass; the device code is in
// detail/mla_decode_kernels.cuh.
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "detail/mla_decode_kernels.cuh"
#include "mla/core/error.hpp"
#include "mla/cuda/check.hpp"

namespace mla::cuda::detail {
namespace {

using decode::mla_combine_kernel;
using decode::mla_decode_kernel;
using decode::Tile;

template <int RG, bool FP8, bool SPARSE>
int configure_one(std::size_t smem_optin) {
  using T = Tile<RG, FP8>;
  if (T::kSmem > smem_optin) {
    throw UnsupportedError("cuda_mla_decode: the " + std::to_string(T::kRows) + "-row " +
                           (FP8 ? "fp8" : "bf16") + " tile needs " + std::to_string(T::kSmem) +
                           " bytes of shared memory per block; this device allows " +
                           std::to_string(smem_optin));
  }
  MLA_CUDA_CHECK(cudaFuncSetAttribute(mla_decode_kernel<RG, FP8, SPARSE>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(T::kSmem)));
  int blocks = 0;
  MLA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, mla_decode_kernel<RG, FP8, SPARSE>,
                                                               T::kThreads, T::kSmem));
  if (blocks < 1) {
    throw UnsupportedError("cuda_mla_decode: no block of the " + std::to_string(T::kRows) +
                           "-row kernel fits on an SM of this device");
  }
  return blocks;
}

template <int RG, bool FP8, bool SPARSE>
void launch_one(const DecodeParams& p, cudaStream_t stream) {
  using T = Tile<RG, FP8>;
  mla_decode_kernel<RG, FP8, SPARSE><<<static_cast<unsigned>(p.num_work), T::kThreads, T::kSmem, stream>>>(p);
  MLA_CUDA_CHECK(cudaGetLastError());
}

[[noreturn]] void no_instance(const DecodeVariant& v) {
  throw Error("cuda_mla_decode: no kernel instance for a " + std::to_string(v.tile_rows) + "-row tile");
}

// Calls f.template operator()<RG, FP8, SPARSE>() for the instance `v` names: the one place that
// maps run-time choices to the 12 compiled instances.
template <class F>
auto dispatch(const DecodeVariant& v, F&& f) {
  auto by_rows = [&](auto fp8, auto sparse) {
    constexpr bool kF = decltype(fp8)::value, kS = decltype(sparse)::value;
    switch (v.tile_rows) {
      case 16: return f.template operator()<1, kF, kS>();
      case 32: return f.template operator()<2, kF, kS>();
      case 64: return f.template operator()<4, kF, kS>();
    }
    no_instance(v);
  };
  using T = std::true_type;
  using N = std::false_type;
  if (v.fp8) return v.sparse ? by_rows(T{}, T{}) : by_rows(T{}, N{});
  return v.sparse ? by_rows(N{}, T{}) : by_rows(N{}, N{});
}

// The operations dispatch() applies to an instance (member templates cannot live in local
// classes).
struct SmemOf {
  template <int RG, bool FP8, bool SPARSE>
  std::size_t operator()() const { return Tile<RG, FP8>::kSmem; }
};
struct Configure {
  std::size_t optin;
  template <int RG, bool FP8, bool SPARSE>
  int operator()() const { return configure_one<RG, FP8, SPARSE>(optin); }
};
struct Launch {
  const DecodeParams& p;
  cudaStream_t stream;
  template <int RG, bool FP8, bool SPARSE>
  int operator()() const {
    launch_one<RG, FP8, SPARSE>(p, stream);
    return 0;
  }
};

}  // namespace

int decode_tile_rows(int64_t rows) { return rows <= 16 ? 16 : rows <= 32 ? 32 : 64; }

std::size_t decode_smem_bytes(const DecodeVariant& v) { return dispatch(v, SmemOf{}); }

int decode_configure(const DecodeVariant& v, std::size_t smem_optin) {
  return dispatch(v, Configure{smem_optin});
}

void decode_launch(const DecodeParams& p, const DecodeVariant& v, cudaStream_t stream) {
  if (p.num_work > 0) (void)dispatch(v, Launch{p, stream});
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
