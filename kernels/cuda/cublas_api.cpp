// The run-time loading of cuBLAS (detail/cublas_api.hpp says why it is not linked).
#include "detail/cublas_api.hpp"

#include <dlfcn.h>

#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "detail/naive_gemm_plan.hpp"
#include "mla/core/error.hpp"
#include "mla/cuda/check.hpp"

namespace mla::cuda::detail {
namespace {

// The library's major version is the one whose headers this was compiled against: a cuBLAS of
// another major version would not match these declarations.
#define MLA_STR2(x) #x
#define MLA_STR(x) MLA_STR2(x)
constexpr const char* kSoname = "libcublas.so." MLA_STR(CUBLAS_VER_MAJOR);

// The spelled-out GEMM signatures must be the header's (unevaluated: no symbol is referenced).
static_assert(std::is_same_v<decltype(static_cast<CublasGemmEx>(&cublasGemmEx)), CublasGemmEx>);
static_assert(std::is_same_v<decltype(static_cast<CublasGemmStridedBatchedEx>(&cublasGemmStridedBatchedEx)),
                             CublasGemmStridedBatchedEx>);

CublasApi load() {
  std::vector<std::string> tried;
  void* lib = nullptr;
  std::vector<std::string> names{kSoname};
#ifdef MLA_CUBLAS_FALLBACK
  names.emplace_back(MLA_CUBLAS_FALLBACK);
#endif
  for (const auto& name : names) {
    lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
    const char* e = dlerror();
    tried.push_back(fmt::format("{} ({})", name, e != nullptr ? e : "not loadable"));
  }
  if (lib == nullptr) throw Error(fmt::format("cannot load cuBLAS: tried {}", fmt::join(tried, "; ")));
  // The handle stays open for the life of the process: handles created from it may outlive any
  // one kernel object.
  auto resolve = [&](auto& fn, const char* symbol) {
    void* p = dlsym(lib, symbol);
    if (p == nullptr) throw Error(fmt::format("cuBLAS ({}) has no symbol {}", kSoname, symbol));
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  CublasApi api{};
  resolve(api.create, "cublasCreate_v2");
  resolve(api.destroy, "cublasDestroy_v2");
  resolve(api.set_stream, "cublasSetStream_v2");
  resolve(api.set_math_mode, "cublasSetMathMode");
  resolve(api.gemm_ex, "cublasGemmEx");
  resolve(api.gemm_strided_batched_ex, "cublasGemmStridedBatchedEx");
  resolve(api.status_name, "cublasGetStatusName");
  resolve(api.status_string, "cublasGetStatusString");
  return api;
}

}  // namespace

const CublasApi& cublas() {
  static const CublasApi api = load();
  return api;
}

void strided_gemm(cublasHandle_t handle, const StridedGemm& g, const void* a, cudaDataType ta, const void* b,
                  cudaDataType tb, void* c, cudaDataType tc) {
  const float one = 1.f, zero = 0.f;
  const auto at = [](const void* p, cudaDataType t, int64_t off) {
    return static_cast<const char*>(p) + off * (t == CUDA_R_32F ? 4 : 2);
  };
  MLA_CUBLAS_CHECK(cublas().gemm_strided_batched_ex(
      handle, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n, g.k, &one,
      at(a, ta, g.a_offset), ta, g.lda, g.stride_a, at(b, tb, g.b_offset), tb, g.ldb, g.stride_b, &zero,
      const_cast<char*>(at(c, tc, g.c_offset)), tc, g.ldc, g.stride_c, g.batch, CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

}  // namespace mla::cuda::detail
