// The CUDA attention implementations, for callers that want one outside the registry (tests
// that force a split count, benchmarks of one kernel).
#pragma once

#include <memory>

#include "mla/core/kernel.hpp"

namespace mla::cuda {

// Largest s_q the CUDA kernels claim: the decode kernel has no structural limit (its grid is
// one-dimensional and checked), this is the range the GPU suite exercises.
inline constexpr int kMaxSq = 1024;

struct MlaDecodeOptions {
  // > 0: every sequence is cut into exactly this many splits at token granularity (splits may
  // be empty), for the metamorphic "different split counts agree" test. 0: automatic.
  int forced_splits = 0;
};

// `cuda_mla_decode` (forced splits: `cuda_mla_decode_splits<N>`): bf16 output, tensor cores,
// split-KV with a combine pass.
std::unique_ptr<AttentionImpl> make_mla_decode(MlaDecodeOptions opt = {});

// `cuda_naive_mha_cublas`: per-head K (576) and V (512) of every sequence materialised in
// prepare(); the timed call runs cuBLAS GEMMs around an fp32 softmax; bf16 output. The baseline
// that shows MLA's byte advantage.
std::unique_ptr<AttentionImpl> make_naive_mha_cublas();

}  // namespace mla::cuda
