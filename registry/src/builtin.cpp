// THE list of built-in implementations, in registration order (the order of the certificate
// and the benchmark tables). One line per kernel: X(name) registers what
// mla::builtin::make_<name>() returns, a function the kernel's own source file defines (it is
// declared here, so adding a kernel touches no header).
#include <memory>

#include "mla/registry/registry.hpp"

// Host kernels (kernels/cpu, always built). Every line ends in a backslash, so adding a kernel
// is adding one line.
#define MLA_BUILTIN_CPU_KERNELS(X) \
  X(cpu_mla_fp64)                  \
  X(cpu_naive_mha_fp64)            \
  X(cpu_naive_mha_fp32)            \
  /* end of the host kernels */

// Host prefill kernels (mla/core/prefill_kernel.hpp), one line each as above.
#define MLA_BUILTIN_CPU_PREFILL_KERNELS(X) \
  X(cpu_prefill_fp64)                      \
  X(cpu_prefill_naive_fp32)                \
  /* end of the host prefill kernels */

// Host merge-of-states kernels (mla/core/merge.hpp).
#define MLA_BUILTIN_CPU_MERGE_KERNELS(X) \
  X(cpu_merge_f32)                       \
  /* end of the host merge kernels */

// Host top-k kernels (mla/core/topk.hpp).
#define MLA_BUILTIN_CPU_TOPK_KERNELS(X) \
  X(cpu_topk_exact)                     \
  X(cpu_topk_radix_f32)                 \
  /* end of the host top-k kernels */
// Host indexer key cache appends (mla/core/indexer_cache.hpp).
#define MLA_BUILTIN_CPU_INDEXER_APPEND_KERNELS(X) \
  X(cpu_indexer_append)                           \
  /* end of the host indexer appends */
// Host indexer logits kernels (mla/core/indexer_logits.hpp).
#define MLA_BUILTIN_CPU_INDEXER_LOGITS_KERNELS(X) \
  X(cpu_indexer_logits)                           \
  /* end of the host indexer logits kernels */
// Host sparse prefill kernels (mla/core/sparse_prefill.hpp).
#define MLA_BUILTIN_CPU_SPARSE_PREFILL_KERNELS(X) \
  X(cpu_sparse_prefill_f32)                       \
  /* end of the host sparse prefill kernels */

// CUDA kernels (kernels/cuda, built whenever a CUDA toolkit is present).
#define MLA_BUILTIN_CUDA_KERNELS(X) \
  X(cuda_naive_mha_cublas)          \
  X(cuda_mla_decode)                \
  /* end of the CUDA kernels */

// CUDA prefill kernels (mla/core/prefill_kernel.hpp).
#define MLA_BUILTIN_CUDA_PREFILL_KERNELS(X) \
  X(cuda_naive_prefill_cublas)              \
  /* end of the CUDA prefill kernels */

// CUDA merge-of-states kernels (mla/core/merge.hpp).
#define MLA_BUILTIN_CUDA_MERGE_KERNELS(X) \
  X(cuda_merge)                           \
  /* end of the CUDA merge kernels */

namespace mla::builtin {
#define MLA_DECLARE_FACTORY(name) std::unique_ptr<AttentionImpl> make_##name();
MLA_BUILTIN_CPU_KERNELS(MLA_DECLARE_FACTORY)
#define MLA_DECLARE_PREFILL_FACTORY(name) std::unique_ptr<PrefillImpl> make_##name();
MLA_BUILTIN_CPU_PREFILL_KERNELS(MLA_DECLARE_PREFILL_FACTORY)
#undef MLA_DECLARE_PREFILL_FACTORY
#define MLA_DECLARE_MERGE_FACTORY(name) std::unique_ptr<MergeImpl> make_##name();
MLA_BUILTIN_CPU_MERGE_KERNELS(MLA_DECLARE_MERGE_FACTORY)
#undef MLA_DECLARE_MERGE_FACTORY
#define MLA_DECLARE_TOPK_FACTORY(name) std::unique_ptr<TopkImpl> make_##name();
MLA_BUILTIN_CPU_TOPK_KERNELS(MLA_DECLARE_TOPK_FACTORY)
#undef MLA_DECLARE_TOPK_FACTORY
#define MLA_DECLARE_INDEXER_APPEND_FACTORY(name) std::unique_ptr<IndexerAppendImpl> make_##name();
MLA_BUILTIN_CPU_INDEXER_APPEND_KERNELS(MLA_DECLARE_INDEXER_APPEND_FACTORY)
#undef MLA_DECLARE_INDEXER_APPEND_FACTORY
#define MLA_DECLARE_INDEXER_LOGITS_FACTORY(name) std::unique_ptr<IndexerLogitsImpl> make_##name();
MLA_BUILTIN_CPU_INDEXER_LOGITS_KERNELS(MLA_DECLARE_INDEXER_LOGITS_FACTORY)
#undef MLA_DECLARE_INDEXER_LOGITS_FACTORY
#define MLA_DECLARE_SPARSE_PREFILL_FACTORY(name) std::unique_ptr<SparsePrefillImpl> make_##name();
MLA_BUILTIN_CPU_SPARSE_PREFILL_KERNELS(MLA_DECLARE_SPARSE_PREFILL_FACTORY)
#undef MLA_DECLARE_SPARSE_PREFILL_FACTORY
#if defined(MLA_HAVE_CUDA_KERNELS)
MLA_BUILTIN_CUDA_KERNELS(MLA_DECLARE_FACTORY)
#define MLA_DECLARE_PREFILL_FACTORY(name) std::unique_ptr<PrefillImpl> make_##name();
MLA_BUILTIN_CUDA_PREFILL_KERNELS(MLA_DECLARE_PREFILL_FACTORY)
#undef MLA_DECLARE_PREFILL_FACTORY
#define MLA_DECLARE_MERGE_FACTORY(name) std::unique_ptr<MergeImpl> make_##name();
MLA_BUILTIN_CUDA_MERGE_KERNELS(MLA_DECLARE_MERGE_FACTORY)
#undef MLA_DECLARE_MERGE_FACTORY
#endif
#undef MLA_DECLARE_FACTORY
}  // namespace mla::builtin

namespace mla {

void add_builtin_kernels(Registry& registry) {
#define MLA_ADD(name) registry.add(builtin::make_##name());
  MLA_BUILTIN_CPU_KERNELS(MLA_ADD)
  MLA_BUILTIN_CPU_PREFILL_KERNELS(MLA_ADD)
  MLA_BUILTIN_CPU_MERGE_KERNELS(MLA_ADD)
  MLA_BUILTIN_CPU_TOPK_KERNELS(MLA_ADD)
  MLA_BUILTIN_CPU_INDEXER_APPEND_KERNELS(MLA_ADD)
  MLA_BUILTIN_CPU_INDEXER_LOGITS_KERNELS(MLA_ADD)
  MLA_BUILTIN_CPU_SPARSE_PREFILL_KERNELS(MLA_ADD)
#if defined(MLA_HAVE_CUDA_KERNELS)
  MLA_BUILTIN_CUDA_KERNELS(MLA_ADD)
  MLA_BUILTIN_CUDA_PREFILL_KERNELS(MLA_ADD)
  MLA_BUILTIN_CUDA_MERGE_KERNELS(MLA_ADD)
#endif
#undef MLA_ADD
}

}  // namespace mla
