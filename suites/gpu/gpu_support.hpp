// Shared helpers of the GPU suite: skipping without a device, the oracles on the host (the fp64
// truth and the deployed-precision reference of reference/host) for the judge, running an
// implementation once, and judging through THE judge (judge_attention, as the certifier does).
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mla/core/kernel.hpp"
#include "mla/cuda/device.hpp"
#include "mla/cuda/device_buffer.hpp"
#include "support/attn_builder.hpp"
#include "support/expect.hpp"
#include "support/goldens.hpp"

// Skips the current test, with the reason, when `impl` cannot run on this machine.
#define MLA_SKIP_IF_UNAVAILABLE(impl)                                 \
  do {                                                                \
    if (const auto mla_why_ = (impl).unavailable()) GTEST_SKIP() << *mla_why_; \
  } while (0)
#define MLA_SKIP_WITHOUT_CUDA()                                                  \
  do {                                                                           \
    if (const auto mla_why_ = ::mla::cuda::unavailable_reason()) GTEST_SKIP() << *mla_why_; \
  } while (0)

namespace mla::gputest {

struct Result {
  std::vector<double> out;  // [b, s_q, h, 512]
  std::vector<double> lse;  // [b, h, s_q]
};

// The deployed-precision reference (mla::ref::attention_same_dtype, fixtures/SCHEMA.md's
// `same_dtype` recipe) and the fp64 truth (mla::ref::attention_fp64).
Result same_dtype_attention(const AttnInputs& in);
Result truth_attention(const AttnInputs& in);

// prepare, run, synchronize, results.
AttnOutputs run_once(const AttentionImpl& impl, const AttnInputs& in);

// `got` against `truth` through judge_attention (testing::matches): the table entries of the
// result's dtype and cache format; `same` (the deployed-precision reference, out and lse) arms
// the error-ratio rule, as the certificate's judgement does.
::testing::AssertionResult matches(const std::string& what, const AttnOutputs& got, const AttnShape& shape,
                                   const Result& truth, const Result* same = nullptr);
// A golden case's truth, deployed-precision reference and (FP8) unquantized result.
::testing::AssertionResult matches(const std::string& what, const AttnOutputs& got, const AttnShape& shape,
                                   const golden::AttnCase& c);

// Bit-for-bit equality of two result vectors (NaN equal to NaN only with the same bits).
::testing::AssertionResult bitwise_equal(const std::string& what, std::span<const double> a,
                                         std::span<const double> b);

// A synthetic problem laid out (pages, poison, sentinels) with its fp64 truth and same-dtype
// reference; `in` views `paged`, so the problem stays where it was made.
struct Problem {
  testing::Logical logical;
  testing::Paged paged;
  AttnInputs in;
  Result truth, same;
};
std::unique_ptr<Problem> make_problem(const testing::AttnSpec& spec, const testing::Layout& layout);

// A named synthetic attention problem (built with mla_test_support's make_logical/lay_out).
struct NamedSpec {
  std::string name;
  testing::AttnSpec spec;
  int page_size = 16;
};
// gtest prints parameters with this (instead of their bytes).
void PrintTo(const NamedSpec& c, std::ostream* os);

// The synthetic cases the GPU suite runs every kernel on, each aimed at a hazard.
std::vector<NamedSpec> synthetic_cases();
// The FP8-cache and sparse problems cuda_mla_decode runs (the naive baseline refuses both); the
// deployed-precision reference is held to the same bounds on each of them on the CPU.
std::vector<NamedSpec> fp8_sparse_cases();

// A device copy of `v`, and a whole device buffer read back as T (both synchronous).
template <class T>
cuda::DeviceBuffer to_device(const std::vector<T>& v) {
  cuda::DeviceBuffer b(v.size() * sizeof(T));
  b.upload(v.data(), v.size() * sizeof(T));
  return b;
}
template <class T>
std::vector<T> download(const cuda::DeviceBuffer& b) {
  std::vector<T> v(b.size() / sizeof(T));
  b.download(v.data(), b.size());
  return v;
}

}  // namespace mla::gputest
