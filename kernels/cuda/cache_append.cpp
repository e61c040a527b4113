#include "mla/cuda/cache_append.hpp"

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "detail/cache_append_launch.hpp"
#include "mla/core/error.hpp"
#include "mla/cuda/check.hpp"
#include "mla/cuda/device.hpp"
#include "mla/cuda/device_buffer.hpp"

namespace mla::cuda {
namespace {

void validate(const CacheAppendArgs& a) {
  auto fail = [](const std::string& what) { throw Error("cache_append: " + what); };
  if (a.num_tokens < 0) fail(fmt::format("num_tokens = {} is negative", a.num_tokens));
  // Enums arrive from callers that may have cast an int; an unknown value must not pick a path.
  if (a.dtype != ActivationDType::bf16 && a.dtype != ActivationDType::f32)
    fail(fmt::format("dtype = {} is not bf16 or f32", static_cast<int>(a.dtype)));
  if (a.input != AppendInput::raw && a.input != AppendInput::normed_roped)
    fail(fmt::format("input = {} is not raw or normed_roped", static_cast<int>(a.input)));
  if (a.format != AppendCacheFormat::bf16 && a.format != AppendCacheFormat::fp8)
    fail(fmt::format("format = {} is not bf16 or fp8", static_cast<int>(a.format)));
  if (a.scale_fmt != Fp8ScaleFmt::fp32 && a.scale_fmt != Fp8ScaleFmt::ue8m0)
    fail(fmt::format("scale_fmt = {} is not fp32 or ue8m0", static_cast<int>(a.scale_fmt)));
  const bool raw = a.input == AppendInput::raw;
  struct {
    const void* p;
    const char* name;
  } ptrs[] = {{a.latent, "latent"},       {a.k_pe, "k_pe"},
              {raw ? a.kv_norm_weight : a.latent, "kv_norm_weight"},
              {raw ? static_cast<const void*>(a.inv_freq) : a.latent, "inv_freq"},
              {a.seq_ids, "seq_ids"},     {a.positions, "positions"},
              {a.block_table, "block_table"}, {a.kv_cache, "kv_cache"}};
  for (const auto& p : ptrs)
    if (p.p == nullptr) fail(fmt::format("{} is null", p.name));
  // Both layouts store 32-bit words (rope pairs; fp8 scales) at 4-byte offsets within a token.
  if (reinterpret_cast<std::uintptr_t>(a.kv_cache) % 4 != 0)
    fail(fmt::format("kv_cache {} is not 4-byte aligned", a.kv_cache));
  if (a.batch <= 0) fail(fmt::format("batch = {} must be positive", a.batch));
  if (a.max_blocks <= 0) fail(fmt::format("max_blocks = {} must be positive", a.max_blocks));
  if (a.page_size <= 0) fail(fmt::format("page_size = {} must be positive", a.page_size));
  if (a.num_blocks <= 0) fail(fmt::format("num_blocks = {} must be positive", a.num_blocks));
  if (a.max_seq_len <= 0) fail(fmt::format("max_seq_len = {} must be positive", a.max_seq_len));
  if (!(a.eps > 0.f) || !std::isfinite(a.eps)) fail(fmt::format("eps = {} must be positive and finite", a.eps));
}

template <class T>
T read_one(const T* device_ptr, cudaStream_t stream) {
  T v{};
  MLA_CUDA_CHECK(cudaMemcpyAsync(&v, device_ptr, sizeof(T), cudaMemcpyDeviceToHost, stream));
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream));
  return v;
}

}  // namespace

void cache_append(const CacheAppendArgs& a, cudaStream_t stream) {
  validate(a);
  if (a.num_tokens == 0) return;
  if (auto why = unavailable_reason()) throw Error("cache_append: " + *why);

  // {codes, first bad-argument token, first past-capacity token}
  int host_flag[3] = {0, INT_MAX, INT_MAX};
  DeviceBuffer flag(sizeof(host_flag));
  MLA_CUDA_CHECK(cudaMemcpyAsync(flag.data(), host_flag, sizeof(host_flag), cudaMemcpyHostToDevice, stream));
  detail::cache_append_launch(a, flag.as<int>(), stream);
  MLA_CUDA_CHECK(cudaMemcpyAsync(host_flag, flag.data(), sizeof(host_flag), cudaMemcpyDeviceToHost, stream));
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host_flag[0] == 0) return;

  if (host_flag[0] & detail::kAppendBadArgument) {
    const int i = host_flag[1];
    const int seq = read_one(a.seq_ids + i, stream), pos = read_one(a.positions + i, stream);
    throw Error(fmt::format("cache_append: token {} has sequence id {} (batch {}) and position {}; "
                            "nothing was written",
                            i, seq, a.batch, pos));
  }
  const int i = host_flag[2];
  const int seq = read_one(a.seq_ids + i, stream), pos = read_one(a.positions + i, stream);
  std::string why;
  if (pos >= a.max_seq_len) {
    why = fmt::format("position {} >= max_seq_len {}", pos, a.max_seq_len);
  } else if (pos / a.page_size >= a.max_blocks) {
    why = fmt::format("page {} (position {} / page_size {}) is past the block table's {} entries",
                      pos / a.page_size, pos, a.page_size, a.max_blocks);
  } else {
    const int j = pos / a.page_size;
    const int32_t blk = read_one(a.block_table + int64_t{seq} * a.max_blocks + j, stream);
    why = fmt::format("block_table[{}][{}] = {} is not an allocated page (num_blocks {})", seq, j,
                      blk, a.num_blocks);
  }
  throw CapacityError(fmt::format("cache capacity exceeded: token {} of sequence {} at position {}: "
                                  "{}; nothing was written",
                                  i, seq, pos, why));
}

}  // namespace mla::cuda
