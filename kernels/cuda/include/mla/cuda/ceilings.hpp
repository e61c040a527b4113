// Measured GPU ceilings for the device roofline: read bandwidth (a read-only streaming kernel),
// copy bandwidth (device-to-device cudaMemcpyAsync) and bf16 tensor-core throughput (a cuBLAS
// GEMM with fp32 accumulation).
//
// Why measured and not the datasheet: bandwidth is reported as a % of a bandwidth measured on the
// same GPU (docs/field.md, "Measurement practice"). A copy or a GEMM reaches a fraction of the
// datasheet's figure that depends on the part, its clocks and its power limit, so only a ceiling
// measured in the same run says how close a kernel is.
//
// Byte accounting: the read probe counts the bytes it reads; the copy probe counts bytes read plus
// bytes written (2x the buffer), the convention most bandwidth tools use.
//
// C++17, no Eigen: included by .cu files. Every probe validates its arguments before any CUDA
// call (so the validation is testable on machines without a GPU), then requires a usable device
// (mla::Error naming the reason otherwise); CUDA and cuBLAS failures throw via MLA_CUDA_CHECK /
// MLA_CUBLAS_CHECK.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "mla/cuda/device_buffer.hpp"

namespace mla::cuda {

// Reads `bytes` once with 16-byte loads in a grid-stride loop (four loads in flight per thread
// before their first use), adding the 32-bit words of each load into a 64-bit per-thread sum;
// each block writes its partial sum, so the loads cannot be optimized away.
class ReadProbe {
 public:
  // bytes: > 0 and a multiple of 16. The buffer is filled with word i = i * 2654435761 (mod 2^32)
  // so it is neither zero nor constant.
  explicit ReadProbe(std::size_t bytes);
  void run(cudaStream_t stream);
  std::size_t bytes() const { return bytes_; }
  double bytes_moved() const { return static_cast<double>(bytes_); }
  // Sum of the block partials of the last run (synchronous), and what it must be.
  uint64_t result() const;
  uint64_t expected() const;

 private:
  std::size_t bytes_;
  int blocks_ = 0;
  DeviceBuffer buf_, partial_;
};

// Copies `bytes` from one device buffer to another (cudaMemcpyAsync device-to-device).
class CopyProbe {
 public:
  // bytes: > 0 and a multiple of 16; the source holds the same pattern as ReadProbe's.
  explicit CopyProbe(std::size_t bytes);
  void run(cudaStream_t stream);
  std::size_t bytes() const { return bytes_; }
  double bytes_moved() const { return 2.0 * static_cast<double>(bytes_); }
  // Whether the destination equals the source byte for byte (synchronous, downloads both).
  bool verify() const;

 private:
  std::size_t bytes_;
  DeviceBuffer src_, dst_;
};

// C[m,n] = A[m,k] B[k,n] in bf16 with fp32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F), all
// column-major, alpha 1, beta 0. A and B hold deterministic values in [-1, 1) (never zeros: a
// matrix unit can run faster on zeros than on real data, which would inflate the ceiling).
class GemmProbe {
 public:
  // m, n, k: > 0 and multiples of 8 (16-byte aligned columns, the tensor-core path).
  GemmProbe(int m, int n, int k);
  ~GemmProbe();
  GemmProbe(const GemmProbe&) = delete;
  GemmProbe& operator=(const GemmProbe&) = delete;
  void run(cudaStream_t stream);
  double flops() const { return 2.0 * m_ * static_cast<double>(n_) * k_; }
  int m() const { return m_; }
  int n() const { return n_; }
  int k() const { return k_; }
  // The inputs and the result of the last run as bf16 bits, column-major (synchronous).
  std::vector<uint16_t> a() const;
  std::vector<uint16_t> b() const;
  std::vector<uint16_t> c() const;

 private:
  int m_, n_, k_;
  DeviceBuffer a_, b_, c_;
  void* handle_ = nullptr;  // cublasHandle_t, kept opaque so this header needs no cuBLAS include
};

// What the ceilings measure and how often.
struct GpuCeilingOptions {
  std::size_t stream_bytes = std::size_t{2} << 30;  // read buffer, and each copy buffer / 2
  int gemm_n = 8192;                                // m = n = k; 1.1e12 FLOP, >= 1 ms on an H200
  int warmup = 3;
  int reps = 10;
};
// Throws mla::Error on a value the probes would refuse (stream_bytes not a positive multiple of
// 32, gemm_n not a positive multiple of 8, warmup < 0, reps < 1). Needs no GPU.
void validate(const GpuCeilingOptions& o);

struct GpuCeiling {
  std::string key;     // gpu_read_bw, gpu_copy_bw, gpu_gemm_bf16
  std::string unit;    // "B/s" or "FLOP/s"
  double value = 0;    // best repetition (the ceiling is what the device can reach)
  double median = 0;   // median repetition, same unit
  double best_ms = 0;  // time of the best repetition
  int reps = 0;
  std::string method;  // one line: what was run
};

// Runs each probe `warmup` times untimed, then `reps` times between CUDA events on one stream.
// Progress is not printed. Throws mla::Error (validation, no device, CUDA/cuBLAS failures).
std::vector<GpuCeiling> measure_gpu_ceilings(const GpuCeilingOptions& o);

}  // namespace mla::cuda
