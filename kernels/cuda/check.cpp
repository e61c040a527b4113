#include "mla/cuda/check.hpp"

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla::cuda::detail {

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();  // see check.hpp: do not let this error resurface at another line
  throw Error(fmt::format("{}:{}: CUDA error in `{}`: {} ({})", file, line, expr,
                          cudaGetErrorName(err), cudaGetErrorString(err)));
}

void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();  // a cuBLAS failure may come from a failed kernel launch inside it
  throw Error(fmt::format("{}:{}: cuBLAS error in `{}`: {} ({})", file, line, expr,
                          cublasGetStatusName(status), cublasGetStatusString(status)));
}

}  // namespace mla::cuda::detail
