// A CUDA plug-in for the MLA plug-in C ABI: this suite's own CUDA kernels (mla::cuda's MLA decode
// and paged-cache append) behind the C interface, asking the host for DEVICE pointers and a
// stream (MLA_PLUGIN_FLAG_DEVICE_MEMORY, ABI 1.1). The template for wrapping a CUDA kernel.
//
// Decode: mla::cuda's decode is public only as an AttentionImpl taking host buffers (it plans
// its split-KV work on the host), so the device inputs are staged through the host on the
// host's stream, and the results are copied into the device outputs on that stream. Append:
// mla::cuda::cache_append takes device pointers and a stream directly; only the bf16 kv_norm
// weight is widened to the float32 the kernel reads.
//
// Links the CUDA runtime statically and never libcuda: on a machine without a driver the library
// still loads, and unavailable() says why it cannot run.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/cuda/attention.hpp"
#include "mla/cuda/cache_append.hpp"
#include "mla/cuda/cache_append_info.hpp"
#include "mla/plugin/mla_plugin.h"

namespace {

constexpr int kDqk = 576, kDv = 512, kLatent = 512;

const mla::AttentionImpl& decoder() {
  static const std::unique_ptr<mla::AttentionImpl> impl = mla::cuda::make_mla_decode();
  return *impl;
}

int32_t fail(char* error, size_t error_size, int32_t rc, const char* what) {
  std::snprintf(error, error_size, "%s", what);
  return rc;
}

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw mla::Error(std::string(what) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  }
}

template <class T>
std::vector<T> to_host(const T* device, std::size_t n, cudaStream_t s) {
  std::vector<T> v(n);
  if (n) cuda_check(cudaMemcpyAsync(v.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
  return v;
}

// Owns one device allocation for the length of a call.
struct DeviceScratch {
  void* p = nullptr;
  explicit DeviceScratch(std::size_t bytes) { cuda_check(cudaMalloc(&p, bytes), "cudaMalloc"); }
  ~DeviceScratch() { (void)cudaFree(p); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
};

int32_t decode(const mla_plugin_decode_args* args, char* error, size_t error_size) {
  if (!args || args->struct_size < sizeof(mla_plugin_decode_args)) {
    return fail(error, error_size, MLA_PLUGIN_ERROR, "decode arguments from an older host ABI");
  }
  const mla_plugin_decode_args& a = *args;
  try {
    if (a.d_qk != kDqk || a.d_v != kDv) return fail(error, error_size, MLA_PLUGIN_UNSUPPORTED, "only d_qk 576 / d_v 512");
    auto stream = static_cast<cudaStream_t>(a.stream);
    mla::AttnShape s;
    s.batch = a.batch;
    s.s_q = a.s_q;
    s.heads = a.heads;
    s.d_qk = a.d_qk;
    s.d_v = a.d_v;
    s.page_size = a.page_size;
    s.num_blocks = a.num_blocks;
    s.max_blocks = a.max_blocks;
    s.topk = a.topk;
    s.cache_format = a.cache_format == MLA_PLUGIN_CACHE_FP8 ? mla::CacheFormat::fp8 : mla::CacheFormat::bf16;
    s.causal = a.causal != 0;
    if (auto no = decoder().check(s)) return fail(error, error_size, MLA_PLUGIN_UNSUPPORTED, no->c_str());
    const std::size_t n_q = static_cast<std::size_t>(s.batch) * s.s_q * s.heads * s.d_qk;
    const std::size_t n_kv = static_cast<std::size_t>(s.num_blocks) * s.page_size * mla::cache_bytes_per_token(s.cache_format);
    const std::size_t n_bt = static_cast<std::size_t>(s.batch) * s.max_blocks;
    const std::size_t n_idx = s.topk > 0 ? static_cast<std::size_t>(s.batch) * s.s_q * s.topk : 0;
    const auto q = to_host(a.q, n_q, stream);
    const auto kv = to_host(a.kv_cache, n_kv, stream);
    const auto bt = to_host(a.block_table, n_bt, stream);
    const auto sl = to_host(a.cache_seqlens, static_cast<std::size_t>(s.batch), stream);
    const auto idx = to_host(a.indices, n_idx, stream);
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");

    mla::AttnInputs in;
    in.shape = s;
    in.softmax_scale = a.softmax_scale;
    in.q = q;
    in.kv_cache = kv;
    in.block_table = bt;
    in.cache_seqlens = sl;
    in.indices = idx;
    auto prepared = decoder().prepare(in);
    prepared->run();
    prepared->synchronize();
    const auto r = prepared->results();
    // cuda_mla_decode writes bf16: its results widen bf16 values exactly, so this is lossless.
    std::vector<uint16_t> out(r.out.size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = mla::bf16_from_double(r.out[i]);
    std::vector<float> lse(r.lse.begin(), r.lse.end());
    cuda_check(cudaMemcpyAsync(a.out, out.data(), out.size() * sizeof(uint16_t), cudaMemcpyHostToDevice, stream),
               "cudaMemcpyAsync");
    cuda_check(cudaMemcpyAsync(a.lse, lse.data(), lse.size() * sizeof(float), cudaMemcpyHostToDevice, stream),
               "cudaMemcpyAsync");
    // The staging vectors die with this call: the copies must be done before it returns.
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return MLA_PLUGIN_OK;
  } catch (const mla::UnsupportedError& e) {
    return fail(error, error_size, MLA_PLUGIN_UNSUPPORTED, e.what());
  } catch (const std::exception& e) {
    return fail(error, error_size, MLA_PLUGIN_ERROR, e.what());
  }
}

int32_t append(const mla_plugin_append_args* args, char* error, size_t error_size) {
  if (!args || !MLA_PLUGIN_HAS_FIELD(mla_plugin_append_args, stream, args->struct_size)) {
    return fail(error, error_size, MLA_PLUGIN_ERROR, "append arguments from an older host ABI");
  }
  const mla_plugin_append_args& a = *args;
  try {
    if (a.cache_format != MLA_PLUGIN_CACHE_BF16 && a.cache_format != MLA_PLUGIN_CACHE_FP8) {
      return fail(error, error_size, MLA_PLUGIN_UNSUPPORTED, "cache format is neither bf16 nor fp8");
    }
    if (a.cache_format == MLA_PLUGIN_CACHE_FP8 && a.scale_fmt != MLA_PLUGIN_SCALE_FP32 &&
        a.scale_fmt != MLA_PLUGIN_SCALE_UE8M0) {
      return fail(error, error_size, MLA_PLUGIN_UNSUPPORTED, "fp8 scale format is neither fp32 nor ue8m0");
    }
    const uint32_t writes = mla::cuda::kCacheAppendFp8Recipe == mla::Fp8Recipe::flashmla ? MLA_PLUGIN_RECIPE_FLASHMLA
                                                                                         : MLA_PLUGIN_RECIPE_DEEPSEEK_V32;
    if (a.cache_format == MLA_PLUGIN_CACHE_FP8 && MLA_PLUGIN_HAS_FIELD(mla_plugin_append_args, fp8_recipe, a.struct_size) &&
        a.fp8_recipe != 0 && a.fp8_recipe != writes) {
      return fail(error, error_size, MLA_PLUGIN_UNSUPPORTED, "the fp8 append writes only the recipe it declares");
    }
    auto stream = static_cast<cudaStream_t>(a.stream);
    const auto w16 = to_host(a.kv_norm_weight, kLatent, stream);
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    std::vector<float> w(kLatent);
    for (int j = 0; j < kLatent; ++j) w[j] = mla::bf16_to_float(w16[j]);
    DeviceScratch weight(w.size() * sizeof(float));
    cuda_check(cudaMemcpyAsync(weight.p, w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice, stream),
               "cudaMemcpyAsync");

    mla::cuda::CacheAppendArgs c;
    c.num_tokens = a.num_tokens;
    c.dtype = mla::cuda::ActivationDType::bf16;
    c.latent = a.latent;
    c.k_pe = a.k_pe;
    c.kv_norm_weight = static_cast<const float*>(weight.p);
    c.inv_freq = a.inv_freq;
    c.seq_ids = a.seq_ids;
    c.positions = a.positions;
    c.block_table = a.block_table;
    c.batch = a.batch;
    c.max_blocks = a.max_blocks;
    c.page_size = a.page_size;
    c.num_blocks = a.num_blocks;
    c.max_seq_len = a.max_seq_len;
    c.format = a.cache_format == MLA_PLUGIN_CACHE_FP8 ? mla::cuda::AppendCacheFormat::fp8
                                                      : mla::cuda::AppendCacheFormat::bf16;
    c.scale_fmt = a.scale_fmt == MLA_PLUGIN_SCALE_UE8M0 ? mla::cuda::Fp8ScaleFmt::ue8m0
                                                        : mla::cuda::Fp8ScaleFmt::fp32;
    c.kv_cache = a.kv_cache;
    c.eps = static_cast<float>(a.eps);
    mla::cuda::cache_append(c, stream);  // waits for the stream before it returns
    return MLA_PLUGIN_OK;
  } catch (const mla::CapacityError& e) {
    return fail(error, error_size, MLA_PLUGIN_CAPACITY, e.what());
  } catch (const mla::UnsupportedError& e) {
    return fail(error, error_size, MLA_PLUGIN_UNSUPPORTED, e.what());
  } catch (const std::exception& e) {
    return fail(error, error_size, MLA_PLUGIN_ERROR, e.what());
  }
}

const char* unavailable() {
  static const std::string why = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      return std::string("no CUDA device (cudaGetDeviceCount: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + ")";
    }
    if (n == 0) return std::string("no CUDA device (cudaGetDeviceCount found 0)");
    try {
      if (auto no = decoder().unavailable()) return *no;
    } catch (const std::exception& ex) {
      return std::string("cuda_mla_decode cannot tell whether it runs here: ") + ex.what();
    }
    return std::string();
  }();
  return why.empty() ? nullptr : why.c_str();
}

mla_plugin_descriptor make_descriptor() {
  mla_plugin_descriptor d{};
  d.abi_version = MLA_PLUGIN_ABI_VERSION;
  d.struct_size = sizeof d;
  d.name = "cuda_plugin";
  d.version = "1.0.0";
  d.description = "this suite's CUDA MLA decode (bf16 out) and bf16/fp8 cache append, on device pointers";
  d.backend = "cuda";
  d.out_dtype = MLA_PLUGIN_OUT_BF16;
  // The claims are the wrapped kernel's own.
  const mla::Capabilities& c = decoder().info().caps;
  for (auto f : c.cache_formats) d.caps.cache_formats |= f == mla::CacheFormat::fp8 ? MLA_PLUGIN_CACHE_FP8 : MLA_PLUGIN_CACHE_BF16;
  d.caps.features = (c.dense ? MLA_PLUGIN_DENSE : 0u) | (c.sparse ? MLA_PLUGIN_SPARSE : 0u) | (c.varlen ? MLA_PLUGIN_VARLEN : 0u);
  d.caps.min_heads = c.min_heads;
  d.caps.max_heads = c.max_heads;
  d.caps.min_s_q = c.min_s_q;
  d.caps.max_s_q = c.max_s_q;
  d.caps.num_page_sizes = 0;
  for (int p : c.page_sizes) {
    if (d.caps.num_page_sizes < MLA_PLUGIN_MAX_PAGE_SIZES) d.caps.page_sizes[d.caps.num_page_sizes++] = p;
  }
  d.decode = decode;
  d.unavailable = unavailable;
  d.abi_minor = MLA_PLUGIN_ABI_MINOR;
  d.flags = MLA_PLUGIN_FLAG_DEVICE_MEMORY;
  d.append_formats = MLA_PLUGIN_CACHE_BF16 | MLA_PLUGIN_CACHE_FP8;
  d.append_scale_fmts = MLA_PLUGIN_SCALE_FP32 | MLA_PLUGIN_SCALE_UE8M0;
  d.append = append;
  // 1.2: what the wrapped kernels declare: the decode's precision class, the append's recipe.
  const auto& compute = decoder().info().compute;
  if (compute && compute->operands == mla::OutDType::bf16 && compute->accumulate == mla::OutDType::f32) {
    d.operand_precision = MLA_PLUGIN_PRECISION_BF16;
    d.accum_precision = MLA_PLUGIN_PRECISION_FP32;
  }
  d.append_fp8_recipes = mla::cuda::kCacheAppendFp8Recipe == mla::Fp8Recipe::flashmla ? MLA_PLUGIN_RECIPE_FLASHMLA
                                                                                       : MLA_PLUGIN_RECIPE_DEEPSEEK_V32;
  return d;
}

}  // namespace

extern "C" MLA_PLUGIN_EXPORT const mla_plugin_descriptor* mla_plugin_get_descriptor(uint32_t host_abi_version) {
  if (host_abi_version != MLA_PLUGIN_ABI_VERSION) return nullptr;
  static const mla_plugin_descriptor d = make_descriptor();
  return &d;
}
