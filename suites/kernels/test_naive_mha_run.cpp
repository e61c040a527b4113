// The host naive MHA baselines' timed call is attention and nothing else: run() decodes no cache
// token (the decompression is prepare()'s, untimed) and allocates nothing (every buffer it
// touches was sized in prepare()), and the byte model counts what it reads: q, the rows
// prepare() decoded (as T), out and lse (as T). This binary replaces the global allocation
// functions to count them (counting_new.cpp), which is why it is a program of its own.
#include <cstdint>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "mla/core/error.hpp"
#include "mla/core/threads.hpp"
#include "mla/registry/registry.hpp"
#include "naive_mha_probe.hpp"
#include "support/attn_builder.hpp"

// Counted by the replacements of the global allocation functions (counting_new.cpp).
int64_t counted_allocations();

namespace mla {
namespace {

int64_t allocations() { return counted_allocations(); }

struct Case {
  const char* name;
  testing::AttnSpec spec;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  testing::AttnSpec dense;
  dense.seqlens = {37, 0, 130, 5};
  dense.s_q = 2;
  v.push_back({"dense_sq2_varlen", dense});
  testing::AttnSpec sparse;
  sparse.topk = 16;
  sparse.s_q = 3;
  v.push_back({"sparse_sq3", sparse});
  testing::AttnSpec fp8 = dense;
  fp8.format = CacheFormat::fp8;
  v.push_back({"dense_fp8", fp8});
  return v;
}

const AttentionImpl& kernel(const char* name) {
  register_builtin_kernels();
  const AttentionImpl* k = Registry::instance().find(name);
  if (!k) throw Error(fmt::format("builtin kernel '{}' is not registered", name));
  return *k;
}

struct RestoreThreads {
  ~RestoreThreads() { set_threads(0); }
};

TEST(NaiveMhaRun, DecodesOnlyInPrepareAndAllocatesNothing) {
  RestoreThreads restore;
  set_threads(1);  // more workers would count the threads parallel_tasks starts, not the kernel
  for (const char* name : {"cpu_naive_mha_fp64", "cpu_naive_mha_fp32"}) {
    for (const Case& c : cases()) {
      SCOPED_TRACE(std::string(name) + " / " + c.name);
      const auto p = testing::lay_out(testing::make_logical(c.spec), {});
      const int64_t before = cpu::naive_mha_tokens_decoded();
      auto prepared = kernel(name).prepare(p.inputs());
      const int64_t decoded = cpu::naive_mha_tokens_decoded() - before;
      EXPECT_GT(decoded, 0) << "prepare() decompresses the cache";
      for (int rep = 0; rep < 2; ++rep) {
        const int64_t a0 = allocations();
        prepared->run();
        EXPECT_EQ(allocations() - a0, 0) << "run() allocated, repetition " << rep;
      }
      EXPECT_EQ(cpu::naive_mha_tokens_decoded() - before, decoded) << "run() decoded cache tokens";
    }
  }
}

// With several workers the decoded count still does not move during run().
TEST(NaiveMhaRun, DecodesNothingOnSeveralThreads) {
  RestoreThreads restore;
  set_threads(3);
  const auto p = testing::lay_out(testing::make_logical(cases()[0].spec), {});
  auto prepared = kernel("cpu_naive_mha_fp32").prepare(p.inputs());
  const int64_t decoded = cpu::naive_mha_tokens_decoded();
  prepared->run();
  EXPECT_EQ(cpu::naive_mha_tokens_decoded(), decoded);
}

// The byte model is q (bf16) + the rows prepare() decoded, each read once as K (576) and V (512)
// in T, + out (512) and lse in T: the decoded count is what the model's K/V term must equal.
TEST(NaiveMhaRun, ByteModelCountsWhatRunReads) {
  for (const char* name : {"cpu_naive_mha_fp64", "cpu_naive_mha_fp32"}) {
    const std::size_t t_bytes = std::string(name) == "cpu_naive_mha_fp64" ? 8 : 4;
    for (const Case& c : cases()) {
      SCOPED_TRACE(std::string(name) + " / " + c.name);
      const auto p = testing::lay_out(testing::make_logical(c.spec), {});
      const AttnInputs in = p.inputs();
      const int64_t before = cpu::naive_mha_tokens_decoded();
      (void)kernel(name).prepare(in);
      const double decoded = static_cast<double>(cpu::naive_mha_tokens_decoded() - before);
      const double rows = static_cast<double>(in.shape.batch) * in.shape.s_q * in.shape.heads;
      const double want = static_cast<double>(in.q.size_bytes()) + decoded * (576 + 512) * t_bytes +
                          rows * (512 + 1) * t_bytes;
      EXPECT_EQ(kernel(name).cost(in).bytes, want);
    }
  }
}

}  // namespace
}  // namespace mla
