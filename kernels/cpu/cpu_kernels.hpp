// What the host kernels share. Private to mla_kernels; each kernel's factory is declared by the
// registry's list (registry/src/builtin.cpp), not here.
#pragma once

#include "mla/core/kernel.hpp"

namespace mla::cpu {

// Capabilities shared by the host kernels: both cache formats, 1..128 heads, s_q 1..64, any
// page size, dense and sparse, variable lengths.
Capabilities host_capabilities();

}  // namespace mla::cpu
