// The device half of the cache-append test problem (append_support.hpp): the setup's inputs
// copied to the GPU in an activation dtype, and the kernel's arguments over them. Shared by the GPU
// append test and the device check's smoke test.
#pragma once

#include <cstdint>
#include <vector>

#include "append_support.hpp"
#include "gpu_support.hpp"
#include "mla/core/numeric.hpp"
#include "mla/cuda/cache_append.hpp"
#include "mla/cuda/device_buffer.hpp"

namespace mla::gputest {

// The device-side copies of a setup's inputs, in the requested activation dtype.
struct DeviceInputs {
  cuda::DeviceBuffer latent, k_pe, weight, inv_freq, seq_ids, positions, block_table;
  DeviceInputs(const AppendSetup& s, cuda::ActivationDType dtype) {
    auto act = [&](const std::vector<double>& v) {
      if (dtype == cuda::ActivationDType::bf16) {
        std::vector<uint16_t> b(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) b[i] = bf16_from_double(v[i]);
        return to_device(b);
      }
      return to_device(std::vector<float>(v.begin(), v.end()));
    };
    latent = act(s.latent);
    k_pe = act(s.k_pe);
    weight = to_device(std::vector<float>(s.weight.begin(), s.weight.end()));
    inv_freq = to_device(s.inv_freq);
    seq_ids = to_device(s.seq_ids);
    positions = to_device(s.positions);
    block_table = to_device(s.block_table);
  }
};

// Raw inputs (kv_norm and RoPE on the device) into a bf16 `cache`; callers change what differs.
inline cuda::CacheAppendArgs args_for(const AppendSetup& s, const DeviceInputs& d, cuda::ActivationDType dtype,
                                      cuda::DeviceBuffer& cache) {
  cuda::CacheAppendArgs a;
  a.num_tokens = s.n();
  a.dtype = dtype;
  a.latent = d.latent.data();
  a.k_pe = d.k_pe.data();
  a.kv_norm_weight = d.weight.as<const float>();
  a.inv_freq = d.inv_freq.as<const double>();
  a.seq_ids = d.seq_ids.as<const int32_t>();
  a.positions = d.positions.as<const int32_t>();
  a.block_table = d.block_table.as<const int32_t>();
  a.batch = s.batch;
  a.max_blocks = s.max_blocks;
  a.page_size = s.page_size;
  a.num_blocks = s.num_blocks;
  a.max_seq_len = s.max_seq_len;
  a.kv_cache = cache.data();
  a.eps = static_cast<float>(kEps);
  return a;
}

}  // namespace mla::gputest
