// The CUDA built-in variables for code compiled under the warp simulator. Include after every
// CUDA header (they declare these names themselves) and right before the simulated source.
#pragma once

#include <cuda_bf16.h>
#include <vector_functions.h>
#include <vector_types.h>

#include "warp_sim.hpp"

#define threadIdx (::mla::sim::thread_idx())
#define blockIdx (::mla::sim::block_idx())
#define blockDim (::mla::sim::block_dim())
