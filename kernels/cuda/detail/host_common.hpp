// Internal host-side helpers shared by the CUDA AttentionImpls (C++20, never included by .cu).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mla/core/kernel.hpp"

namespace mla::cuda::detail {

// The capabilities of the naive baseline (dense, bf16 cache, heads 1..128, s_q 1..kMaxSq, any
// page size, varlen); cuda_mla_decode adds the FP8 cache and sparse attention to them.
Capabilities dense_bf16_caps();

// check_capabilities plus what the interface leaves open: d_qk 576, d_v 512, positive
// batch/page_size/num_blocks/max_blocks. The reason names the kernel and the field.
std::optional<std::string> check_dense_bf16_shape(std::string_view kernel, const Capabilities& caps,
                                                  const AttnShape& shape);

// Inputs are checked by mla::validate_attention_inputs (mla/core/attention.hpp) before anything
// reaches the device: span sizes, lengths, every used block-table entry inside the cache, and
// distinct valid sparse indices, so no kernel can be made to read outside its buffers.

// Exact widening of bf16 bits / fp32 to double.
std::vector<double> widen_bf16(const std::vector<uint16_t>& bits);
std::vector<double> widen_f32(const std::vector<float>& v);

}  // namespace mla::cuda::detail
