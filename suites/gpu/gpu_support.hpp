// Shared helpers of the GPU suite: skipping without a device, the deployed-precision CPU
// reference (the schema's `same_dtype` recipe) for the error-ratio rule, running an
// implementation once, and judging through the tolerance engine.
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mla/cuda/device.hpp"
#include "mla/cuda/device_buffer.hpp"
#include "mla/kernels/attention.hpp"
#include "support/attn_builder.hpp"

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

// fixtures/SCHEMA.md `same_dtype`: fp32 scores over the exact bf16 inputs, fp32 softmax, P
// rounded to bf16, fp32 P·V, output rounded to bf16, lse in fp32 (widened here). Empty rows:
// out 0, lse +inf. Reads only tokens < L through the validated paged-cache accessor.
Result same_dtype_attention(const AttnInputs& in);

// The fp64 truth (mla::ref::attention_fp64).
Result truth_attention(const AttnInputs& in);

// prepare, run, synchronize, results.
AttnOutputs run_once(const AttentionImpl& impl, const AttnInputs& in);

// out and lse judged against the truth with the table entries for the result's dtype; the
// same-dtype output (when given) arms the error-ratio rule. The failure message carries every
// failed rule and the worst element's index.
::testing::AssertionResult matches(const std::string& what, const AttnOutputs& got,
                                   const AttnShape& shape, std::span<const double> truth_out,
                                   std::span<const double> truth_lse,
                                   std::optional<std::span<const double>> same_out = std::nullopt);

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

std::vector<int64_t> out_shape(const AttnShape& s);  // {b, s_q, h, 512}
std::vector<int64_t> lse_shape(const AttnShape& s);  // {b, h, s_q}

}  // namespace mla::gputest
