// A host simulator of the CUDA execution model, just wide enough to run the decode kernel's
// own source (kernels/cuda/detail/mla_decode_kernels.cuh, compiled with MLA_HOST_SIM) on a
// machine without a GPU.
//
// Every thread of a block is a cooperative fiber; __syncthreads and the warp-wide primitives
// (shuffle, ldmatrix, mma.sync) are rendezvous points at which the last arriving lane computes
// the result for all 32 from models of their documented PTX semantics (fragment layouts of
// m16n8k16 and of ldmatrix with and without .trans). cp.async copies are deferred until the
// issuing thread waits for them, the latest moment the hardware allows, so a read of shared
// memory before its wait sees stale bytes. Misuse the hardware would punish (a barrier some
// threads never reach, a collective with a lane missing, a misaligned or out-of-range shared
// address, a global read the test did not allow) is recorded and reported after the launch.
//
// What it does not model: timing, memory-ordering races between threads outside barriers,
// and the tensor cores' exact internal rounding (the products are summed in double and the
// sum rounded to float once).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mla::sim {

struct Idx {
  unsigned x = 0, y = 0, z = 0;
};
Idx thread_idx();
Idx block_idx();
Idx block_dim();

unsigned char* dynamic_smem();
uint32_t smem_offset(const void* p);
void syncthreads();
float shfl_xor(float v, int lane_mask);
void cp_async16(uint32_t dst, const void* src);
void cp_async_commit();
void cp_async_wait_all();
void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr, bool trans);
void mma_m16n8k16_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
float int_as_float(int i);

struct Launch {
  unsigned grid = 1;
  unsigned threads = 32;     // a multiple of 32
  std::size_t smem_bytes = 0;
  // Called for every cp.async source; false records an error naming the address.
  std::function<bool(const void*)> global_read_allowed;
};

// Runs `body` (typically a call of the kernel with its parameters) for every block of the grid,
// blocks one after another, and returns every recorded misuse (empty: clean run). The shared
// memory of each block starts filled with 0xFF bytes (NaN as bf16 and as fp32), as a previous
// kernel may have left it, so data the kernel uses without loading or zeroing it (even only
// multiplied by a zero probability) poisons the results.
std::vector<std::string> launch(const Launch& cfg, const std::function<void()>& body);

}  // namespace mla::sim
