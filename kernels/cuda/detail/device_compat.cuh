// Portability macros for device code that also runs on the host under the warp simulator
// (suites/gpu/sim). Under MLA_HOST_SIM the including test has declared ::mla::sim (and the
// threadIdx/blockIdx macros) before this header; otherwise these are the CUDA keywords and
// intrinsics themselves.
#pragma once

#include <cuda_bf16.h>
#include <vector_functions.h>
#include <vector_types.h>

#if defined(MLA_HOST_SIM)
// The float math functions (exp2f, log2f, expf, logf, fmaxf, sqrtf, sincos) come from the host
// C library; the simulator runs threads as cooperative fibers, so plain read-modify-writes are
// atomic.
#include <math.h>
#define MLA_DEV inline
#define MLA_GLOBAL inline
#define MLA_BOUNDS(threads, blocks)
#define MLA_DYNAMIC_SMEM(name) unsigned char* name = ::mla::sim::dynamic_smem()
#define MLA_SYNC() ::mla::sim::syncthreads()
#define MLA_SHFL_XOR(v, lane_mask) ::mla::sim::shfl_xor(v, lane_mask)
#define MLA_INT_AS_FLOAT(i) ::mla::sim::int_as_float(i)
#define MLA_ATOMIC_OR(p, v) (*(p) |= (v))
#define MLA_ATOMIC_MIN(p, v) (*(p) = *(p) < (v) ? *(p) : (v))
// The simulated copies of the kernels get names of their own. A test that runs them also links
// the CUDA kernel library, whose __global__ functions have host-side launch stubs with the very
// same names; a simulated copy is an inline (weak) definition, so wherever the compiler did not
// inline it (-O1, -fno-inline) the call resolved to the strong stub, which launches on a GPU and,
// without one, writes nothing: every output stayed unwritten.
#define MLA_SIM_NAMESPACE_BEGIN inline namespace host_sim {
#define MLA_SIM_NAMESPACE_END }
#else
#define MLA_SIM_NAMESPACE_BEGIN
#define MLA_SIM_NAMESPACE_END
#define MLA_DEV __device__ __forceinline__
#define MLA_GLOBAL __global__
#define MLA_BOUNDS(threads, blocks) __launch_bounds__(threads, blocks)
#define MLA_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#define MLA_SYNC() __syncthreads()
#define MLA_SHFL_XOR(v, lane_mask) __shfl_xor_sync(0xffffffffu, v, lane_mask)
#define MLA_INT_AS_FLOAT(i) __int_as_float(i)
#define MLA_ATOMIC_OR(p, v) atomicOr(p, v)
#define MLA_ATOMIC_MIN(p, v) atomicMin(p, v)
#endif
