// A reference column-major strided-batched GEMM in double, for executing the cuBLAS calls the
// naive baselines plan (kernels/cuda/detail/naive_gemm_plan.hpp, naive_prefill_plan.hpp) on the
// CPU: a wrong leading dimension, stride, transpose flag or offset shows here as a wrong result
// or an index outside its buffer, instead of on a GPU.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "detail/naive_gemm_plan.hpp"

namespace mla::cuda::detail {

// BLAS semantics: column-major, element (r, c) of a matrix with leading dimension ld at r + c·ld;
// op T reads the stored matrix transposed. Checks every index against the buffer sizes.
inline void gemm_ref(const StridedGemm& g, const std::vector<double>& A, const std::vector<double>& B,
                     std::vector<double>& C) {
  auto at = [](const std::vector<double>& v, int64_t i, const char* what) {
    if (i < 0 || i >= static_cast<int64_t>(v.size()))
      throw std::out_of_range(fmt::format("{} index {} outside [0, {})", what, i, v.size()));
    return v[static_cast<std::size_t>(i)];
  };
  for (int e = 0; e < g.batch; ++e) {
    const int64_t a0 = g.a_offset + e * g.stride_a, b0 = g.b_offset + e * g.stride_b, c0 = g.c_offset + e * g.stride_c;
    for (int j = 0; j < g.n; ++j) {
      for (int r = 0; r < g.m; ++r) {
        double sum = 0;
        for (int p = 0; p < g.k; ++p) {
          const double a = g.trans_a ? at(A, a0 + p + int64_t{r} * g.lda, "A") : at(A, a0 + r + int64_t{p} * g.lda, "A");
          const double b = g.trans_b ? at(B, b0 + j + int64_t{p} * g.ldb, "B") : at(B, b0 + p + int64_t{j} * g.ldb, "B");
          sum += a * b;
        }
        const int64_t ci = c0 + r + int64_t{j} * g.ldc;
        (void)at(C, ci, "C");
        C[static_cast<std::size_t>(ci)] = sum;
      }
    }
  }
}

}  // namespace mla::cuda::detail
