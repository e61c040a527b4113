// L0 (CPU): the host-side behaviour of the CUDA kernels, which must hold on every machine,
// with or without a GPU: error macros, "no GPU" detection without crashing, registration,
// capability refusals naming the shape (docs/field.md, "Bugs", 9: never a silent fallback), input
// validation before any device work, the cost model, and cache-append argument checks.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "mla/core/error.hpp"
#include "mla/core/presets.hpp"
#include "mla/cuda/attention.hpp"
#include "mla/cuda/cache_append.hpp"
#include "mla/cuda/check.hpp"
#include "mla/cuda/device.hpp"
#include "mla/registry/registry.hpp"
#include "mla/registry/registry.hpp"

namespace mla::cuda {
namespace {

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

cudaError_t returns(cudaError_t e) { return e; }
cublasStatus_t returns_status(cublasStatus_t s) { return s; }

TEST(CudaCheck, ThrowsWithFileLineExpressionAndErrorText) {
  int line = 0;
  try {
    line = __LINE__ + 1;
    MLA_CUDA_CHECK(returns(cudaErrorInvalidValue));
    FAIL() << "no exception";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "test_cuda_host.cpp")) << m;
    EXPECT_TRUE(contains(m, ":" + std::to_string(line) + ":")) << m;
    EXPECT_TRUE(contains(m, "returns(cudaErrorInvalidValue)")) << m;
    EXPECT_TRUE(contains(m, "cudaErrorInvalidValue")) << m;
    EXPECT_TRUE(contains(m, cudaGetErrorString(cudaErrorInvalidValue))) << m;
  }
  // The recorded error is cleared, so an unrelated later check does not report it again.
  EXPECT_NO_THROW(MLA_CUDA_CHECK(returns(cudaSuccess)));
}

TEST(CudaCheck, CublasStatusIsNamed) {
  try {
    MLA_CUBLAS_CHECK(returns_status(CUBLAS_STATUS_INVALID_VALUE));
    FAIL() << "no exception";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "CUBLAS_STATUS_INVALID_VALUE")) << m;
    EXPECT_TRUE(contains(m, "returns_status(CUBLAS_STATUS_INVALID_VALUE)")) << m;
  }
  EXPECT_NO_THROW(MLA_CUBLAS_CHECK(returns_status(CUBLAS_STATUS_SUCCESS)));
}

TEST(CudaDevice, AnyRuntimeErrorMeansUnavailableNeverACrash) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  (void)cudaGetLastError();
  const auto reason = unavailable_reason();
  if (err != cudaSuccess || n == 0) {
    ASSERT_TRUE(reason.has_value()) << "cudaGetDeviceCount failed or found nothing, yet CUDA is available";
    EXPECT_FALSE(reason->empty());
    EXPECT_THROW((void)current_device(), Error);
  }
  // Asked twice, the same answer (decided once per process).
  EXPECT_EQ(unavailable_reason(), reason);
  for (const auto& k : {make_mla_decode(), make_naive_mha_cublas()}) {
    if (reason) {
      const auto why = k->unavailable();
      ASSERT_TRUE(why.has_value()) << k->info().name;
      EXPECT_FALSE(why->empty());
    }
  }
}

TEST(CudaRegistry, RegistersBothKernelsWithTheirClaimsAndRoles) {
  Registry r;
  add_builtin_kernels(r);
  for (const char* name : {"cuda_naive_mha_cublas", "cuda_mla_decode"}) {
    const AttentionImpl* k = r.find(name);
    ASSERT_NE(k, nullptr) << name;
    const KernelInfo& info = k->info();
    EXPECT_EQ(info.backend, "cuda");
    EXPECT_EQ(info.role, std::string(name) == "cuda_mla_decode" ? KernelRole::optimized : KernelRole::baseline) << name;
    EXPECT_EQ(info.out_dtype, OutDType::bf16) << name;
    EXPECT_FALSE(info.description.empty());
    // The decode kernel reads both cache formats and sparse index lists; the naive baseline
    // only the dense bf16 cache.
    const bool decode = std::string(name) == "cuda_mla_decode";
    if (decode) {
      EXPECT_EQ(info.caps.cache_formats, (std::vector<CacheFormat>{CacheFormat::bf16, CacheFormat::fp8}));
    } else {
      EXPECT_EQ(info.caps.cache_formats, std::vector<CacheFormat>{CacheFormat::bf16});
    }
    EXPECT_EQ(info.caps.min_heads, 1);
    EXPECT_EQ(info.caps.max_heads, 128);
    EXPECT_EQ(info.caps.max_s_q, kMaxSq);
    EXPECT_TRUE(info.caps.page_sizes.empty()) << "any page size";
    EXPECT_TRUE(info.caps.dense);
    EXPECT_EQ(info.caps.sparse, decode) << name;
    EXPECT_TRUE(info.caps.varlen);
  }
  // Registering twice is a duplicate, refused by the registry.
  EXPECT_THROW(add_builtin_kernels(r), Error);
  EXPECT_EQ(make_mla_decode(MlaDecodeOptions{.forced_splits = 3})->info().name, "cuda_mla_decode_splits3");
  EXPECT_THROW((void)make_mla_decode(MlaDecodeOptions{.forced_splits = -1}), Error);
}

AttnShape good_shape() {
  AttnShape s;
  s.batch = 2;
  s.s_q = 1;
  s.heads = 16;
  s.page_size = 16;
  s.num_blocks = 8;
  s.max_blocks = 4;
  return s;
}

TEST(CudaCapabilities, UnsupportedShapesAreRefusedByName) {
  struct Case {
    std::string needle;
    AttnShape shape;
  };
  std::vector<Case> cases;
  AttnShape s = good_shape();
  s.heads = 129;
  cases.push_back({"heads=129", s});
  s = good_shape();
  s.heads = 0;
  cases.push_back({"heads=0", s});
  s = good_shape();
  s.s_q = kMaxSq + 1;
  cases.push_back({"s_q=" + std::to_string(kMaxSq + 1), s});
  s = good_shape();
  s.d_qk = 192;
  cases.push_back({"d_qk=192", s});
  s = good_shape();
  s.page_size = 0;
  cases.push_back({"page_size=0", s});

  // FP8 and sparse are the naive baseline's refusals only.
  std::vector<Case> naive_only;
  s = good_shape();
  s.cache_format = CacheFormat::fp8;
  naive_only.push_back({"fp8", s});
  s = good_shape();
  s.topk = 2048;
  naive_only.push_back({"sparse", s});
  for (const auto& k : {make_mla_decode(), make_naive_mha_cublas()}) {
    EXPECT_EQ(k->check(good_shape()), std::nullopt) << k->info().name;
    std::vector<Case> all = cases;
    if (k->info().name == "cuda_mla_decode") {
      for (const Case& c : naive_only) EXPECT_EQ(k->check(c.shape), std::nullopt) << c.needle;
      // Sparse on an FP8 cache, s_q 2, topk past 2048: no smaller limit than the dense one.
      s = good_shape();
      s.cache_format = CacheFormat::fp8;
      s.s_q = 2;
      s.topk = 8192;
      EXPECT_EQ(k->check(s), std::nullopt);
    } else {
      all.insert(all.end(), naive_only.begin(), naive_only.end());
    }
    for (const Case& c : all) {
      SCOPED_TRACE(k->info().name + " / " + c.needle);
      const auto why = k->check(c.shape);
      ASSERT_TRUE(why.has_value());
      EXPECT_TRUE(contains(*why, c.needle)) << *why;
      EXPECT_TRUE(contains(*why, k->info().name)) << *why;
      // prepare refuses with the typed error before looking at buffers or the device, so the
      // refusal is the same on machines with and without a GPU.
      AttnInputs in;
      in.shape = c.shape;
      in.softmax_scale = 0.1;
      try {
        (void)k->prepare(in);
        FAIL() << "prepare accepted an unsupported shape";
      } catch (const UnsupportedError& e) {
        EXPECT_TRUE(contains(e.what(), c.needle)) << e.what();
      }
    }
  }
}

// Inputs for good_shape(): two sequences of 20 and 0 tokens on pages 5 and 2.
struct HostInputs {
  AttnShape shape = good_shape();
  std::vector<uint16_t> q = std::vector<uint16_t>(2 * 1 * 16 * 576, 0x3F80);
  std::vector<uint8_t> cache = std::vector<uint8_t>(8 * 16 * 1152, 0);
  std::vector<int32_t> table = {5, 2, 2147483647, 2147483647, 2147483647, 2147483647, 2147483647, 2147483647};
  std::vector<int32_t> lens = {20, 0};
  AttnInputs view() const {
    AttnInputs in;
    in.shape = shape;
    in.softmax_scale = softmax_scale(preset("v3").config);
    in.q = q;
    in.kv_cache = cache;
    in.block_table = table;
    in.cache_seqlens = lens;
    return in;
  }
};

TEST(CudaValidation, MalformedInputsAreErrorsBeforeAnyDeviceWork) {
  struct Case {
    const char* needle;
    void (*mutate)(HostInputs&);
  };
  const Case cases[] = {
      {"q has", [](HostInputs& h) { h.q.pop_back(); }},
      {"kv_cache", [](HostInputs& h) { h.cache.resize(h.cache.size() - 2); }},
      {"block_table has", [](HostInputs& h) { h.table.pop_back(); }},
      {"cache_seqlens has", [](HostInputs& h) { h.lens.push_back(1); }},
      {"cache_seqlens[1] = 65", [](HostInputs& h) { h.lens[1] = 65; }},
      {"cache_seqlens[0] = -1", [](HostInputs& h) { h.lens[0] = -1; }},
      // A used page whose id is outside the cache (e.g. the sentinel) would be an out-of-bounds
      // read on the device: refused on the host.
      {"block_table[0][1] = 2147483647", [](HostInputs& h) { h.table[1] = 2147483647; }},
      {"block_table[0][0] = -3", [](HostInputs& h) { h.table[0] = -3; }},
      {"block_table[0][1] = 8", [](HostInputs& h) { h.table[1] = 8; }},
  };
  for (const auto& k : {make_mla_decode(), make_naive_mha_cublas()}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(k->info().name) + " / " + c.needle);
      HostInputs h;
      c.mutate(h);
      try {
        (void)k->prepare(h.view());
        FAIL() << "accepted";
      } catch (const UnsupportedError& e) {
        FAIL() << "malformed input reported as unsupported: " << e.what();
      } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), c.needle)) << e.what();
      }
    }
    // A non-finite scale.
    HostInputs h;
    AttnInputs in = h.view();
    in.softmax_scale = std::numeric_limits<double>::quiet_NaN();
    EXPECT_THROW((void)k->prepare(in), Error);
    // Entries past ceil(L/ps) are never looked at: sentinels there are fine. Without a GPU the
    // valid inputs fail only for the reason unavailable() gives.
    if (const auto why = k->unavailable()) {
      try {
        (void)k->prepare(h.view());
        FAIL() << "prepared without a GPU";
      } catch (const UnsupportedError& e) {
        FAIL() << "valid inputs reported as unsupported: " << e.what();
      } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), *why)) << e.what();
      }
    }
  }
}

TEST(CudaValidation, Fp8AndSparseInputsOfTheDecodeKernelAreCheckedBeforeAnyDeviceWork) {
  const auto k = make_mla_decode();
  // Sparse, topk 4 on an FP8 cache: the base case is valid (invalid entries are the kernel's
  // to skip); each mutation is a malformed input named in the error.
  auto base = [] {
    HostInputs h;
    h.shape.cache_format = CacheFormat::fp8;
    h.shape.topk = 4;
    h.cache.assign(8 * 16 * 656, 0);
    return h;
  };
  std::vector<int32_t> idx = {3, -1, 19, 2147483647, 0, 0, -5, 7};  // row 1: sequence 1 is empty
  auto expect_error = [&](HostInputs& h, std::vector<int32_t> indices, const std::string& needle) {
    AttnInputs in = h.view();
    in.indices = indices;
    try {
      (void)k->prepare(in);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const UnsupportedError& e) {
      ADD_FAILURE() << "malformed input reported as unsupported: " << e.what();
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), needle)) << e.what();
    }
  };
  {
    HostInputs h = base();
    h.cache.assign(8 * 16 * 1152, 0);  // a bf16-sized cache for an FP8 shape
    expect_error(h, idx, "kv_cache (bytes) has 147456 elements, the shape needs 83968");
  }
  {
    HostInputs h = base();
    expect_error(h, std::vector<int32_t>(idx.begin(), idx.end() - 1), "indices has 7 elements");
  }
  {
    HostInputs h = base();
    std::vector<int32_t> dup = idx;
    dup[1] = 3;  // 3 twice in row (0, 0); sequence 0 has 20 tokens
    expect_error(h, dup, "indices[0][0] holds valid position 3 more than once");
  }
  {
    // Repeated *invalid* entries are fine; repeated valid ones are not, in every row.
    HostInputs h = base();
    h.lens = {20, 10};
    h.table[4] = 3;
    expect_error(h, idx, "indices[1][0] holds valid position 0 more than once");
  }
  {
    HostInputs h = base();
    expect_error(h, {}, "indices has 0 elements");
  }
  {
    HostInputs h = base();
    h.shape.topk = 0;
    expect_error(h, idx, "indices given (8 elements) for dense attention");
  }
  // The valid base case fails without a GPU only for the reason unavailable() gives.
  if (const auto why = k->unavailable()) {
    HostInputs h = base();
    AttnInputs in = h.view();
    in.indices = idx;
    try {
      (void)k->prepare(in);
      FAIL() << "prepared without a GPU";
    } catch (const UnsupportedError& e) {
      FAIL() << "valid inputs reported as unsupported: " << e.what();
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), *why)) << e.what();
    }
  }
}

TEST(CudaCost, NaiveReadsPerHeadKeysAndValues) {
  HostInputs h;
  h.lens = {20, 7};
  h.table[4] = 3;  // sequence 1's page
  const AttnInputs in = h.view();
  const auto naive = make_naive_mha_cublas();
  const auto mla = make_mla_decode();
  const CostModel cn = naive->cost(in), cm = mla->cost(in);
  // Same arithmetic, different bytes: per-head 576 + 512 bf16 values per token and head
  // against one shared 576-wide latent row, and the scores passing through device memory
  // (s_q 1, every token attended: S written and read as fp32, P written and read as bf16).
  EXPECT_EQ(cn.flops, cm.flops);
  const double rows = 2.0 * 1 * 16;
  const double expected = rows * 576 * 2 + (20 + 7) * 16.0 * (576 + 512) * 2 + (20 + 7) * 16.0 * (4 + 4 + 2 + 2) +
                          rows * 512 * 2 + rows * 4;
  EXPECT_DOUBLE_EQ(cn.bytes, expected);
  EXPECT_GT(cn.bytes, cm.bytes * 5) << "16 heads of per-head K/V against one latent row";
}

TEST(CudaCacheAppend, MalformedArgumentsAreErrorsNotCapacityErrors) {
  // Validation happens before any device access, so this runs everywhere. Dummy non-null
  // pointers are never dereferenced.
  static float dummy[4];
  CacheAppendArgs a;
  a.num_tokens = 1;
  a.latent = dummy;
  a.k_pe = dummy;
  a.kv_norm_weight = dummy;
  a.inv_freq = reinterpret_cast<const double*>(dummy);
  a.seq_ids = reinterpret_cast<const int32_t*>(dummy);
  a.positions = reinterpret_cast<const int32_t*>(dummy);
  a.block_table = reinterpret_cast<const int32_t*>(dummy);
  a.kv_cache = reinterpret_cast<uint16_t*>(dummy);
  a.batch = 1;
  a.max_blocks = 1;
  a.page_size = 16;
  a.num_blocks = 1;
  a.max_seq_len = 16;
  auto expect_error = [](CacheAppendArgs x, const char* needle) {
    try {
      cache_append(x);
      ADD_FAILURE() << "accepted bad " << needle;
    } catch (const CapacityError& e) {
      ADD_FAILURE() << "argument error reported as capacity: " << e.what();
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), needle)) << e.what();
    }
  };
  CacheAppendArgs b = a;
  b.latent = nullptr;
  expect_error(b, "latent is null");
  b = a;
  b.kv_cache = nullptr;
  expect_error(b, "kv_cache is null");
  b = a;
  b.page_size = 0;
  expect_error(b, "page_size");
  b = a;
  b.max_seq_len = 0;
  expect_error(b, "max_seq_len");
  b = a;
  b.num_tokens = -1;
  expect_error(b, "num_tokens");
  b = a;
  b.eps = 0.f;
  expect_error(b, "eps");
  // Nothing to append is a no-op, even without a GPU.
  b = a;
  b.num_tokens = 0;
  EXPECT_NO_THROW(cache_append(b));

  // The FP8 / stage-only fields: unknown enum values never pick a path, a misaligned cache is
  // refused, and the norm weight and frequencies are needed only for raw inputs.
  b = a;
  b.format = static_cast<AppendCacheFormat>(7);
  expect_error(b, "format = 7");
  b = a;
  b.scale_fmt = static_cast<Fp8ScaleFmt>(-1);
  expect_error(b, "scale_fmt = -1");
  b = a;
  b.input = static_cast<AppendInput>(2);
  expect_error(b, "input = 2");
  b = a;
  b.format = AppendCacheFormat::fp8;
  b.kv_cache = reinterpret_cast<unsigned char*>(dummy) + 2;
  expect_error(b, "not 4-byte aligned");
  b = a;
  b.kv_norm_weight = nullptr;
  expect_error(b, "kv_norm_weight is null");
  b.input = AppendInput::normed_roped;
  b.inv_freq = nullptr;
  b.num_tokens = 0;
  EXPECT_NO_THROW(cache_append(b));
}

}  // namespace
}  // namespace mla::cuda
