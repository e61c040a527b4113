// What the host kernels share. Private to mla_kernels; each kernel's factory is declared by the
// registry's list (registry/src/builtin.cpp), not here.
#pragma once

#include <cstdint>

#include "mla/core/kernel.hpp"

namespace mla::cpu {

// Capabilities shared by the host kernels: both cache formats, 1..128 heads, s_q 1..64, any
// page size, dense and sparse, variable lengths.
Capabilities host_capabilities();

// Pairwise (tree) summation, as a GPU block reduction or a vectorised softmax sums: its error
// grows with log n, where a running sum over 128K fp32 terms drifts by ~1e-4 relative — an
// artefact of the loop, not of a float32 kernel, which would hide the precision the naive
// baselines (MHA decode, prefill) measure.
template <class T>
T pairwise_sum(const T* x, int64_t n) {
  if (n <= 32) {
    T s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i];
    return s;
  }
  const int64_t h = n / 2;
  return pairwise_sum(x, h) + pairwise_sum(x + h, n - h);
}

}  // namespace mla::cpu
