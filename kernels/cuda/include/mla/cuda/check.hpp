// Error checks for the CUDA runtime and cuBLAS: every failing call becomes an mla::Error that
// names the file, the line, the expression and the library's own error text.
//
// Why the runtime's last error is cleared first: a failed call also records itself as the
// "last error", and the next unrelated cudaGetLastError() (the launch check after a kernel)
// would report it again and blame the wrong line. Sticky errors (an illegal address) cannot be
// cleared; they keep failing every later call, each of which throws here.
//
// C++17 and free of the C++20 interface headers, so .cu files can use it.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

namespace mla::cuda::detail {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file,
                                     int line);

}  // namespace mla::cuda::detail

#define MLA_CUDA_CHECK(expr)                                                          \
  do {                                                                                \
    const cudaError_t mla_cuda_check_err_ = (expr);                                   \
    if (mla_cuda_check_err_ != cudaSuccess)                                           \
      ::mla::cuda::detail::throw_cuda_error(mla_cuda_check_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define MLA_CUBLAS_CHECK(expr)                                                             \
  do {                                                                                     \
    const cublasStatus_t mla_cublas_check_status_ = (expr);                                \
    if (mla_cublas_check_status_ != CUBLAS_STATUS_SUCCESS)                                 \
      ::mla::cuda::detail::throw_cublas_error(mla_cublas_check_status_, #expr, __FILE__, __LINE__); \
  } while (0)
