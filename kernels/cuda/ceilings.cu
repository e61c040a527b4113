// GPU ceiling probes (mla/cuda/ceilings.hpp): the read-only streaming kernel, the device copy,
// the cuBLAS bf16 GEMM, and their measurement with CUDA events.
#include "detail/cublas_api.hpp"
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/cuda/ceilings.hpp"
#include "mla/cuda/check.hpp"
#include "mla/cuda/timing.hpp"

namespace mla::cuda {
namespace {

constexpr uint32_t kPatternMul = 2654435761u;  // Knuth's multiplicative hash: distinct, non-zero words
constexpr int kReadThreads = 512;

// ---- kernels -------------------------------------------------------------------------------

__global__ void fill_pattern_kernel(uint32_t* __restrict__ p, std::size_t n) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = static_cast<uint32_t>(i) * kPatternMul;
}

// Deterministic bf16 values in [-1, 1): the top 24 bits of a hash of (seed, i) scaled.
__global__ void fill_bf16_kernel(__nv_bfloat16* __restrict__ p, std::size_t n, uint32_t seed) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    uint32_t h = static_cast<uint32_t>(i) * kPatternMul ^ seed;
    h ^= h >> 15;
    h *= 0x2c1b3c6dU;
    h ^= h >> 12;
    h *= 0x297a2d39U;
    h ^= h >> 15;
    p[i] = __float2bfloat16_rn(static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
}

__device__ __forceinline__ unsigned long long add_words(unsigned long long acc, const uint4& v) {
  return acc + v.x + v.y + v.z + v.w;
}

// Grid-stride read of n16 16-byte vectors: four independent loads are issued before any is used,
// so each thread keeps 64 bytes in flight (the latency-hiding a streaming read needs).
__global__ void __launch_bounds__(kReadThreads) read_kernel(const uint4* __restrict__ p, std::size_t n16,
                                                            unsigned long long* __restrict__ partial) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  unsigned long long acc = 0;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    acc = add_words(add_words(add_words(add_words(acc, a), b), c), d);
  }
  for (; i < n16; i += stride) acc = add_words(acc, p[i]);
  // Block sum: shuffle tree in each warp, then warp 0 over the warps (fixed order).
  __shared__ unsigned long long warp_sum[kReadThreads / 32];
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) warp_sum[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long s = 0;
    for (int w = 0; w < kReadThreads / 32; ++w) s += warp_sum[w];
    partial[blockIdx.x] = s;
  }
}

// ---- helpers -------------------------------------------------------------------------------

void require_multiple(const char* what, const char* name, std::size_t v, std::size_t of) {
  if (v == 0 || v % of != 0)
    throw Error(std::string(what) + ": " + name + " must be a positive multiple of " + std::to_string(of) +
                ", got " + std::to_string(v));
}

void require_dim(const char* what, const char* name, int v) {
  if (v <= 0 || v % 8 != 0)
    throw Error(std::string(what) + ": " + name + " must be a positive multiple of 8, got " + std::to_string(v));
}

int fill_blocks(std::size_t n) {
  const std::size_t b = (n + 255) / 256;
  return static_cast<int>(std::min<std::size_t>(std::max<std::size_t>(b, 1), 65535));
}

void fill_pattern(DeviceBuffer& buf) {
  const std::size_t words = buf.size() / 4;
  fill_pattern_kernel<<<fill_blocks(words), 256>>>(buf.as<uint32_t>(), words);
  MLA_CUDA_CHECK(cudaGetLastError());
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
}

void fill_bf16(DeviceBuffer& buf, uint32_t seed) {
  const std::size_t n = buf.size() / 2;
  fill_bf16_kernel<<<fill_blocks(n), 256>>>(buf.as<__nv_bfloat16>(), n, seed);
  MLA_CUDA_CHECK(cudaGetLastError());
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
}

std::vector<uint16_t> download_u16(const DeviceBuffer& buf) {
  std::vector<uint16_t> v(buf.size() / 2);
  buf.download(v.data(), buf.size());
  return v;
}

}  // namespace

// ---- ReadProbe -----------------------------------------------------------------------------

ReadProbe::ReadProbe(std::size_t bytes) : bytes_(bytes) {
  require_multiple("ReadProbe", "bytes", bytes, 16);
  require_device("ReadProbe");
  int dev = 0, sms = 0, threads_per_sm = 0;
  MLA_CUDA_CHECK(cudaGetDevice(&dev));
  MLA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  MLA_CUDA_CHECK(cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, dev));
  // A persistent grid: as many resident blocks as the device holds, no more (more blocks only add
  // scheduling work), and no more than there are vectors to read.
  const std::size_t n16 = bytes / 16;
  const std::size_t resident = static_cast<std::size_t>(sms) * std::max(1, threads_per_sm / kReadThreads);
  blocks_ = static_cast<int>(std::max<std::size_t>(1, std::min(resident, (n16 + kReadThreads - 1) / kReadThreads)));
  buf_ = DeviceBuffer(bytes);
  partial_ = DeviceBuffer(static_cast<std::size_t>(blocks_) * sizeof(unsigned long long));
  fill_pattern(buf_);
}

void ReadProbe::run(cudaStream_t stream) {
  read_kernel<<<blocks_, kReadThreads, 0, stream>>>(buf_.as<const uint4>(), bytes_ / 16,
                                                    partial_.as<unsigned long long>());
  MLA_CUDA_CHECK(cudaGetLastError());
}

uint64_t ReadProbe::result() const {
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned long long> p(static_cast<std::size_t>(blocks_));
  partial_.download(p.data(), p.size() * sizeof(unsigned long long));
  uint64_t s = 0;
  for (auto v : p) s += v;
  return s;
}

uint64_t ReadProbe::expected() const {
  uint64_t s = 0;
  const std::size_t words = bytes_ / 4;
  for (std::size_t i = 0; i < words; ++i) s += static_cast<uint32_t>(static_cast<uint32_t>(i) * kPatternMul);
  return s;
}

// ---- CopyProbe -----------------------------------------------------------------------------

CopyProbe::CopyProbe(std::size_t bytes) : bytes_(bytes) {
  require_multiple("CopyProbe", "bytes", bytes, 16);
  require_device("CopyProbe");
  src_ = DeviceBuffer(bytes);
  dst_ = DeviceBuffer(bytes);
  fill_pattern(src_);
  dst_.fill_bytes(0);
}

void CopyProbe::run(cudaStream_t stream) {
  MLA_CUDA_CHECK(cudaMemcpyAsync(dst_.data(), src_.data(), bytes_, cudaMemcpyDeviceToDevice, stream));
}

bool CopyProbe::verify() const {
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned char> a(bytes_), b(bytes_);
  src_.download(a.data(), bytes_);
  dst_.download(b.data(), bytes_);
  return a == b;
}

// ---- GemmProbe -----------------------------------------------------------------------------

GemmProbe::GemmProbe(int m, int n, int k) : m_(m), n_(n), k_(k) {
  require_dim("GemmProbe", "m", m);
  require_dim("GemmProbe", "n", n);
  require_dim("GemmProbe", "k", k);
  require_device("GemmProbe");
  a_ = DeviceBuffer(static_cast<std::size_t>(m) * k * 2);
  b_ = DeviceBuffer(static_cast<std::size_t>(k) * n * 2);
  c_ = DeviceBuffer(static_cast<std::size_t>(m) * n * 2);
  fill_bf16(a_, 0x1234567u);
  fill_bf16(b_, 0x89abcdeu);
  c_.fill_bytes(0xFF);  // NaN until the first run writes it
  cublasHandle_t h = nullptr;
  MLA_CUBLAS_CHECK(detail::cublas().create(&h));
  handle_ = h;
  // Plain bf16 tensor-core math with fp32 accumulation, as the naive MHA baseline uses.
  MLA_CUBLAS_CHECK(detail::cublas().set_math_mode(h, CUBLAS_DEFAULT_MATH));
}

GemmProbe::~GemmProbe() {
  if (handle_ != nullptr) {
    (void)cudaDeviceSynchronize();  // the buffers are freed next; never under a running GEMM
    (void)detail::cublas().destroy(static_cast<cublasHandle_t>(handle_));
    (void)cudaGetLastError();
  }
}

void GemmProbe::run(cudaStream_t stream) {
  auto h = static_cast<cublasHandle_t>(handle_);
  MLA_CUBLAS_CHECK(detail::cublas().set_stream(h, stream));
  const float one = 1.f, zero = 0.f;
  MLA_CUBLAS_CHECK(detail::cublas().gemm_ex(h, CUBLAS_OP_N, CUBLAS_OP_N, m_, n_, k_, &one, a_.data(), CUDA_R_16BF, m_,
                                b_.data(), CUDA_R_16BF, k_, &zero, c_.data(), CUDA_R_16BF, m_, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
}

std::vector<uint16_t> GemmProbe::a() const { return download_u16(a_); }
std::vector<uint16_t> GemmProbe::b() const { return download_u16(b_); }
std::vector<uint16_t> GemmProbe::c() const {
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
  return download_u16(c_);
}

// ---- measurement ---------------------------------------------------------------------------

void validate(const GpuCeilingOptions& o) {
  require_multiple("GpuCeilingOptions", "stream_bytes", o.stream_bytes, 32);
  require_dim("GpuCeilingOptions", "gemm_n", o.gemm_n);
  if (o.warmup < 0) throw Error("GpuCeilingOptions: warmup must be >= 0, got " + std::to_string(o.warmup));
  if (o.reps < 1) throw Error("GpuCeilingOptions: reps must be >= 1, got " + std::to_string(o.reps));
}

namespace {

// A stream that is destroyed even when a probe throws.
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { MLA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() {
    (void)cudaStreamSynchronize(s);
    (void)cudaStreamDestroy(s);
    (void)cudaGetLastError();
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

template <class Probe>
std::vector<float> time_probe(Probe& p, cudaStream_t s, const GpuCeilingOptions& o) {
  for (int i = 0; i < o.warmup; ++i) p.run(s);
  MLA_CUDA_CHECK(cudaStreamSynchronize(s));
  EventTimer t;
  std::vector<float> ms;
  for (int i = 0; i < o.reps; ++i) {
    t.start(s);
    p.run(s);
    t.stop(s);
    ms.push_back(t.elapsed_ms());
  }
  return ms;
}

GpuCeiling summarize(std::string key, std::string unit, double amount, std::vector<float> ms, std::string method) {
  std::sort(ms.begin(), ms.end());
  GpuCeiling c;
  c.key = std::move(key);
  c.unit = std::move(unit);
  c.reps = static_cast<int>(ms.size());
  c.best_ms = ms.front();
  const double med = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  if (c.best_ms <= 0) throw Error("measure_gpu_ceilings: " + c.key + ": a repetition took 0 ms (events broken?)");
  c.value = amount / (c.best_ms * 1e-3);
  c.median = amount / (med * 1e-3);
  c.method = std::move(method);
  return c;
}

std::string mib(std::size_t b) { return std::to_string(b >> 20) + " MiB"; }

}  // namespace

std::vector<GpuCeiling> measure_gpu_ceilings(const GpuCeilingOptions& o) {
  validate(o);
  require_device("measure_gpu_ceilings");
  Stream st;
  const std::string timing = "; best of " + std::to_string(o.reps) + " after " + std::to_string(o.warmup) +
                             " warm-ups, CUDA events around each call, no L2 flush (the data is many times the L2)";
  std::vector<GpuCeiling> out;
  {
    ReadProbe p(o.stream_bytes);
    out.push_back(summarize("gpu_read_bw", "B/s", p.bytes_moved(), time_probe(p, st.s, o),
                            "read-only kernel over " + mib(o.stream_bytes) +
                                ", 16-byte loads, 4 in flight per thread, grid-stride, persistent grid; bytes read" +
                                timing));
  }
  {
    CopyProbe p(o.stream_bytes / 2);
    out.push_back(summarize("gpu_copy_bw", "B/s", p.bytes_moved(), time_probe(p, st.s, o),
                            "cudaMemcpyAsync device-to-device of " + mib(o.stream_bytes / 2) +
                                "; bytes read + bytes written" + timing));
  }
  {
    GemmProbe p(o.gemm_n, o.gemm_n, o.gemm_n);
    const std::string n = std::to_string(o.gemm_n);
    out.push_back(summarize("gpu_gemm_bf16", "FLOP/s", p.flops(), time_probe(p, st.s, o),
                            "cublasGemmEx " + n + "x" + n + "x" + n +
                                " bf16 in/out, CUBLAS_COMPUTE_32F, random values in [-1,1); 2mnk FLOP" + timing));
  }
  return out;
}

}  // namespace mla::cuda
