// The counter-based generator `splitmix64-uniform-v1` (fixtures/SCHEMA.md), implemented
// identically in reference/python/mla_ref so that cases too large to store are regenerated
// bit-for-bit and checked by sha256.
//
// The fills are the fast path: every element is the schema's formula for its own counter, so a
// range can be cut anywhere and filled by vector code (AVX2 or AVX-512, chosen at run time for
// the CPU; binaries are built for the baseline x86-64 ISA) on several threads, and the bits are
// those of the scalar loop whatever the cut, the ISA or the thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "mla/core/threads.hpp"

namespace mla::gen {

uint64_t mix64(uint64_t z);
uint64_t key(uint64_t seed, uint64_t stream);
uint64_t bits(uint64_t seed, uint64_t stream, uint64_t i);
double uniform01(uint64_t seed, uint64_t stream, uint64_t i);
double value(uint64_t seed, uint64_t stream, uint64_t i, double mean, double std);

// Which code fills a range. `automatic` is the widest one this CPU runs.
enum class Isa { automatic, scalar, avx2, avx512 };
const char* to_string(Isa isa);
bool supported(Isa isa);  // scalar and automatic: always
Isa best_isa();           // avx512 (F+DQ+BW+VL), else avx2, else scalar

// Threads a fill uses when FillOptions::threads is 0: the process-wide setting of
// mla/core/threads.hpp (set_threads, else MLA_THREADS, else every hardware thread), the same one
// the oracle and the host kernels read.
using ::mla::parallel_for;
using ::mla::set_threads;
using ::mla::threads;

struct FillOptions {
  Isa isa = Isa::automatic;  // an unsupported one is an mla::Error
  int threads = 0;           // 0: threads(); small ranges use fewer (a thread gets >= 64K elements)
  uint64_t first = 0;        // counter of out[0]: out[j] is element i = first + j (mod 2^64)
};

// Fills `out` with values i = first .. first + out.size() - 1 (float64, or bf16 bits).
void fill_f64(uint64_t seed, uint64_t stream, double mean, double std, std::span<double> out,
              const FillOptions& opt = {});
void fill_bf16(uint64_t seed, uint64_t stream, double mean, double std, std::span<uint16_t> out,
               const FillOptions& opt = {});
// Stable argsort of bits(seed, stream, i), i < n.
std::vector<int64_t> permutation(uint64_t seed, uint64_t stream, int64_t n);

}  // namespace mla::gen
