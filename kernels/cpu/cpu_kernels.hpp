// Factories of the host implementations (registered in kernels/src/registry.cpp) and what they
// share. Private to mla_kernels.
#pragma once

#include <memory>
#include <vector>

#include "mla/kernels/attention.hpp"

namespace mla::cpu {

// cpu_mla_fp64: the float64 reference attention core (reference/cpu) as a kernel.
std::unique_ptr<AttentionImpl> make_cpu_mla_fp64();
// cpu_naive_mha_fp64 / cpu_naive_mha_fp32: decompress the latent cache into per-sequence K/V and
// run an ordinary max-subtracted softmax(QKᵀ·scale)·V, the way a naive MHA kernel would.
std::unique_ptr<AttentionImpl> make_cpu_naive_mha_fp64();
std::unique_ptr<AttentionImpl> make_cpu_naive_mha_fp32();

// A private copy of the caller's inputs: a prepared call must not depend on the caller's
// buffers staying alive or unchanged between prepare() and run().
class OwnedInputs {
 public:
  explicit OwnedInputs(const AttnInputs& in)
      : view_(in),
        q_(in.q.begin(), in.q.end()),
        kv_cache_(in.kv_cache.begin(), in.kv_cache.end()),
        block_table_(in.block_table.begin(), in.block_table.end()),
        cache_seqlens_(in.cache_seqlens.begin(), in.cache_seqlens.end()),
        indices_(in.indices.begin(), in.indices.end()) {
    view_.q = q_;
    view_.kv_cache = kv_cache_;
    view_.block_table = block_table_;
    view_.cache_seqlens = cache_seqlens_;
    view_.indices = indices_;
  }
  OwnedInputs(const OwnedInputs&) = delete;
  OwnedInputs& operator=(const OwnedInputs&) = delete;
  const AttnInputs& view() const { return view_; }

 private:
  AttnInputs view_;
  std::vector<uint16_t> q_;
  std::vector<uint8_t> kv_cache_;
  std::vector<int32_t> block_table_;
  std::vector<int32_t> cache_seqlens_;
  std::vector<int32_t> indices_;
};

// Capabilities shared by the host kernels: both cache formats, 1..128 heads, s_q 1..64, any
// page size, dense and sparse, variable lengths.
Capabilities host_capabilities();

}  // namespace mla::cpu
