#include "mla/cuda/check.hpp"

#include <string>

#include <fmt/format.h>

#include "detail/cublas_api.hpp"
#include "mla/core/error.hpp"

namespace mla::cuda::detail {

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();  // see check.hpp: do not let this error resurface at another line
  throw Error(fmt::format("{}:{}: CUDA error in `{}`: {} ({})", file, line, expr,
                          cudaGetErrorName(err), cudaGetErrorString(err)));
}

void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();  // a cuBLAS failure may come from a failed kernel launch inside it
  std::string words;
  try {
    words = fmt::format("{} ({})", cublas().status_name(status), cublas().status_string(status));
  } catch (const Error& e) {
    // Only a status that did not come from cuBLAS gets here (a status from a call means the
    // library is loaded); its number still says which it is.
    words = fmt::format("status {} (names unavailable: {})", static_cast<int>(status), e.what());
  }
  throw Error(fmt::format("{}:{}: cuBLAS error in `{}`: {}", file, line, expr, words));
}

}  // namespace mla::cuda::detail
