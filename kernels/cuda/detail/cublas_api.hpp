// cuBLAS, loaded the first time a kernel needs it instead of linked into every binary.
//
// Why: loading libcublas + libcublasLt (about 570 MiB) costs about 0.6 s of wall time per process
// start on a 2-core machine, and the certifier starts a child process per call of every kernel,
// CPU ones included, and CTest one process per test. Linked, every one of them paid it, on
// machines that never run a cuBLAS call. Loaded here, only a process that creates a cuBLAS handle
// does. The binaries' rpath (the build's, or the device bundle's $ORIGIN/../lib, where the
// device check links the image's cuBLAS) is searched as for a linked library; the toolkit's copy
// found at configure time is the fallback.
//
// C++17 and free of the C++20 interface headers, so .cu files can use it.
#pragma once

#include <cublas_v2.h>

namespace mla::cuda::detail {

// The exported GEMMs' signatures, spelled out: in C++ the header also declares inline overloads of
// both names (taking the legacy cudaDataType compute type), so decltype cannot pick one.
using CublasGemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                        const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                                        int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                                        cublasGemmAlgo_t);
using CublasGemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                                      int, int, const void*, const void*, cudaDataType, int,
                                                      long long int, const void*, cudaDataType, int, long long int,
                                                      const void*, void*, cudaDataType, int, long long int, int,
                                                      cublasComputeType_t, cublasGemmAlgo_t);

// The cuBLAS entry points this folder calls (cublas_v2.h maps cublasCreate to cublasCreate_v2,
// and so on; these are the symbols the library exports).
struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetMathMode) set_math_mode;
  CublasGemmEx gemm_ex;
  CublasGemmStridedBatchedEx gemm_strided_batched_ex;
  decltype(&cublasGetStatusName) status_name;
  decltype(&cublasGetStatusString) status_string;
};

// Loads the library on first use (thread-safe) and returns its entry points. Throws mla::Error
// naming each file it tried and the loader's reason when cuBLAS cannot be loaded or lacks a symbol.
const CublasApi& cublas();

struct StridedGemm;  // detail/naive_gemm_plan.hpp

// The naive baselines' one kind of cuBLAS call: the strided-batched GEMM `g` on `handle`'s stream,
// alpha 1 and beta 0, fp32 accumulation (CUBLAS_COMPUTE_32F), g's offsets applied to each base
// pointer in elements of its type (4 bytes for CUDA_R_32F, else 2). Throws mla::Error naming the
// cuBLAS status.
void strided_gemm(cublasHandle_t handle, const StridedGemm& g, const void* a, cudaDataType ta, const void* b,
                  cudaDataType tb, void* c, cudaDataType tc);

}  // namespace mla::cuda::detail
