// What a Python kernel declares (kernels/python/mla_door: mla_door.describe(kernel) as JSON), read
// in a child and validated here with the rules of a C plug-in's descriptor (kernels/plugin/host.cpp
// validate_descriptor): name [a-z0-9_]+, a version, backend cpu|cuda, out_dtype f32|bf16, a
// non-empty set of cache formats, non-empty head and s_q ranges from 1, positive page sizes,
// dense or sparse, the conventions' and precisions' words, a judgeable precision class.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "mla/core/indexer_cache.hpp"
#include "mla/core/indexer_logits.hpp"
#include "mla/core/sparse_prefill.hpp"
#include "mla/core/kernel.hpp"
#include "mla/core/merge.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/core/topk.hpp"

namespace mla::certify {

struct PythonDeclaration {
  KernelInfo info;  // role optimized
  std::string version;
  bool can_implement = false;
  bool decodes = true;  // has a decode (a prefill-only kernel has none: "decode": false)
  // Its prefill entry ("prefill": null or an object), an implementation of its own under its own
  // name, validated with the rules of a C plug-in's prefill entry (plugin::prefill_info_from):
  // name, out_dtype, heads, which calls, token limit, conventions and precision class.
  std::optional<PrefillKernelInfo> prefill;
  // Its merge entry ("merge": null or an object), the same way (plugin::merge_info_from).
  std::optional<MergeKernelInfo> merge;
  // Its top-k entry ("topk": null or an object), the same way (plugin::topk_info_from).
  std::optional<TopkKernelInfo> topk;
  // Its indexer logits entry ("indexer_logits": null or an object), the same way
  // (plugin::indexer_logits_info_from).
  std::optional<IndexerLogitsKernelInfo> indexer_logits;
  // Its indexer append entry ("indexer_append": null or an object), the same way
  // (plugin::indexer_append_info_from).
  std::optional<IndexerAppendKernelInfo> indexer_append;
  // Its sparse prefill entry ("sparse_prefill": null or an object), the same way
  // (plugin::sparse_prefill_info_from).
  std::optional<SparsePrefillKernelInfo> sparse_prefill;
  // The entries whose object says "can_implement": true (protocol.hpp's kEntry* names): their
  // calls are asked of the kernel's predicate before they are made.
  std::vector<std::string> entry_can_implement;
};

// Throws mla::Error naming the field and its value ("declaration field 'caps.heads' range [0, 128]
// is empty or below 1").
PythonDeclaration validate_python_declaration(const nlohmann::json& d);

}  // namespace mla::certify
