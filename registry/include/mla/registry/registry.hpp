// One registry of implementations, filled by one explicit function.
//
// Why explicit: a registry filled by static initializers inside a static library is dropped by
// the linker, so tests, benchmarks and the certifier all call `register_builtin_kernels`
// (idempotent) and then iterate. Adding a kernel = one source file in kernels/cpu or
// kernels/cuda (CMake picks it up) + one line in the list of registry/src/builtin.cpp.
//
// The registry sits above every kernel library (CPU and CUDA) and below the tools that iterate
// it, so no kernel library needs another.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "mla/core/indexer_cache.hpp"
#include "mla/core/indexer_logits.hpp"
#include "mla/core/kernel.hpp"
#include "mla/core/merge.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/core/sparse_prefill.hpp"
#include "mla/core/topk.hpp"

namespace mla {

// One list per case kind's interface: decode (AttentionImpl), prefill (PrefillImpl), the merge
// of attention states (MergeImpl), the top-k selection (TopkImpl), the indexer key cache
// append (IndexerAppendImpl), the indexer logits (IndexerLogitsImpl) and the sparse prefill
// (SparsePrefillImpl). A name is a kernel's
// identity in certificates and benchmark rows, so it is unique across all lists.
class Registry {
 public:
  static Registry& instance();
  // Throws mla::Error on a duplicate name or a name that is not [a-z0-9_]+.
  void add(std::unique_ptr<AttentionImpl> impl);
  void add(std::unique_ptr<PrefillImpl> impl);
  void add(std::unique_ptr<MergeImpl> impl);
  void add(std::unique_ptr<TopkImpl> impl);
  const std::vector<std::unique_ptr<AttentionImpl>>& attention() const { return attention_; }
  const std::vector<std::unique_ptr<PrefillImpl>>& prefill() const { return prefill_; }
  const std::vector<std::unique_ptr<MergeImpl>>& merge() const { return merge_; }
  const std::vector<std::unique_ptr<TopkImpl>>& topk() const { return topk_; }
  void add(std::unique_ptr<IndexerAppendImpl> impl);
  const std::vector<std::unique_ptr<IndexerAppendImpl>>& indexer_append() const { return indexer_append_; }
  void add(std::unique_ptr<IndexerLogitsImpl> impl);
  const std::vector<std::unique_ptr<IndexerLogitsImpl>>& indexer_logits() const { return indexer_logits_; }
  void add(std::unique_ptr<SparsePrefillImpl> impl);
  const std::vector<std::unique_ptr<SparsePrefillImpl>>& sparse_prefill() const { return sparse_prefill_; }
  // nullptr when absent.
  const AttentionImpl* find(std::string_view name) const;
  const PrefillImpl* find_prefill(std::string_view name) const;
  const MergeImpl* find_merge(std::string_view name) const;
  const TopkImpl* find_topk(std::string_view name) const;
  const IndexerAppendImpl* find_indexer_append(std::string_view name) const;
  const IndexerLogitsImpl* find_indexer_logits(std::string_view name) const;
  const SparsePrefillImpl* find_sparse_prefill(std::string_view name) const;

 private:
  void check_name(const std::string& name) const;
  // Checks `impl` (not null, a valid name unique across every list) and appends it to `list`.
  template <class Impl>
  void add_to(std::vector<std::unique_ptr<Impl>>& list, std::unique_ptr<Impl> impl);
  std::vector<std::unique_ptr<AttentionImpl>> attention_;
  std::vector<std::unique_ptr<PrefillImpl>> prefill_;
  std::vector<std::unique_ptr<MergeImpl>> merge_;
  std::vector<std::unique_ptr<TopkImpl>> topk_;
  std::vector<std::unique_ptr<IndexerAppendImpl>> indexer_append_;
  std::vector<std::unique_ptr<IndexerLogitsImpl>> indexer_logits_;
  std::vector<std::unique_ptr<SparsePrefillImpl>> sparse_prefill_;
};

// Adds every built-in implementation (the list in registry/src/builtin.cpp) to `registry`. The
// CUDA kernels are built in whenever a CUDA toolkit is; on a machine without a usable GPU their
// unavailable() says why and callers skip them.
void add_builtin_kernels(Registry& registry);
// add_builtin_kernels(Registry::instance()) once; later calls do nothing.
void register_builtin_kernels();

}  // namespace mla
