// The counter-based generator `splitmix64-uniform-v1` (fixtures/SCHEMA.md), implemented
// identically in reference/python/mla_ref so that cases too large to store are regenerated
// bit-for-bit and checked by sha256.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mla::gen {

uint64_t mix64(uint64_t z);
uint64_t key(uint64_t seed, uint64_t stream);
uint64_t bits(uint64_t seed, uint64_t stream, uint64_t i);
double uniform01(uint64_t seed, uint64_t stream, uint64_t i);
double value(uint64_t seed, uint64_t stream, uint64_t i, double mean, double std);

// Fills `out` with values i = 0..out.size()-1 (float64, or bf16 bits).
void fill_f64(uint64_t seed, uint64_t stream, double mean, double std, std::span<double> out);
void fill_bf16(uint64_t seed, uint64_t stream, double mean, double std, std::span<uint16_t> out);
// Stable argsort of bits(seed, stream, i), i < n.
std::vector<int64_t> permutation(uint64_t seed, uint64_t stream, int64_t n);

}  // namespace mla::gen
