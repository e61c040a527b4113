// A host simulator of the CUDA execution model, just wide enough to run the decode kernel's
// own source (kernels/cuda/detail/mla_decode_kernels.cuh, compiled with MLA_HOST_SIM) on a
// machine without a GPU.
//
// Every thread of a block is a cooperative fiber; __syncthreads and the warp-wide primitives
// (shuffle, ldmatrix, mma.sync) are rendezvous points at which the last arriving lane computes
// the result for all 32 from models of their documented PTX semantics (fragment layouts of
// m16n8k16 and of ldmatrix with and without .trans). A cp.async may land on the hardware at any
// moment between its issue and the issuing thread's wait; a kernel is right only if it is right
// for every such moment, and the simulator runs the two extremes (CpAsyncLanding):
//  * deferred: each copy lands when the issuing thread waits, the latest moment, so a read of the
//    destination before the wait and the barrier after it sees stale bytes (read-after-write);
//  * eager: each copy lands when it is issued, the earliest, so a copy into bytes that some
//    thread has still to read (the next tile's prefetch into the buffer being consumed)
//    overwrites them first (write-after-read). The deferred mode cannot see that race.
// Misuse the hardware would punish (a barrier some
// threads never reach, a collective with a lane missing, a misaligned or out-of-range shared
// address, a global read the test did not allow) is recorded and reported after the launch.
//
// What it does not model: timing, memory-ordering races between threads outside barriers (each
// thread runs until it blocks at a barrier or a collective, in thread order, so a race on plain
// shared memory shows only where that order exposes it), and the tensor cores' exact internal
// rounding (the products are summed in double and the sum rounded to float once).
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

enum class CpAsyncLanding { deferred, eager };
const char* to_string(CpAsyncLanding m);
// The landing mode of every launch() that follows (default deferred), process-wide.
void set_cp_async_landing(CpAsyncLanding m);
CpAsyncLanding cp_async_landing();

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
