// What the certifier and its child processes say to each other, as messages of the one wire
// format (wire.hpp): the plan of a case's calls on the shared buffers (arena.hpp), a plug-in's
// description, the shapes its can_implement is asked about and its answers. The child only runs
// code; every verdict is decided in the parent, from the raw shared buffers for a kernel's calls.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mla/certify/wire.hpp"
#include "mla/core/kernel.hpp"
#include "mla/core/merge.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/core/indexer_cache.hpp"
#include "mla/core/indexer_logits.hpp"
#include "mla/core/sparse_prefill.hpp"
#include "mla/core/topk.hpp"
#include "mla/plugin/host.hpp"

namespace mla::certify {

// One kernel's runs of one case, as the parent read them from the shared buffers (or an
// in-process run returned them).
struct RunResult {
  enum class Status { ran, unsupported, error };
  Status status = Status::error;
  std::string message;  // unsupported / error: why
  AttnOutputs outputs;  // ran: the first run's results
  double run_seconds = 0;  // fastest run() + synchronize()
  std::optional<double> bytes, flops;
  // Faults found while running, each a FAIL reason: results differing between repeated runs,
  // inputs changed by the kernel, writes outside its output (plug-ins).
  std::vector<std::string> reasons;
  // Set by the parent, never read from a child: the failure was the machine's (host_error.hpp).
  bool host_caused = false;
  // The outputs of each call of the other case made between the case's calls (isolated kernels),
  // in call order, in canonical conventions: judged against that case's own truth, so an answer
  // kept from an earlier call (a memo keyed on anything but the whole input) is seen.
  std::vector<AttnOutputs> between;
  // Elements of those outputs never written, as reasons ("... never written"), per call.
  std::vector<std::vector<std::string>> between_unwritten;
};

// The message kinds.
inline constexpr const char* kAttentionCalls = "attention-calls";  // the layout of a shared-memory case
// The layout of a plug-in's calls of another entry point (the append, the prefill) on shared
// memory, and the entries it names.
inline constexpr const char* kEntryCalls = "entry-calls";
inline constexpr const char* kEntryAppend = "append";
inline constexpr const char* kEntryPrefill = "prefill";
inline constexpr const char* kEntryMerge = "merge";
inline constexpr const char* kEntryTopk = "topk";
inline constexpr const char* kEntryIndexerLogits = "indexer_logits";
inline constexpr const char* kEntryIndexerAppend = "indexer_append";
inline constexpr const char* kEntrySparsePrefill = "sparse_prefill";
inline constexpr const char* kPluginDescription = "plugin-description";
inline constexpr const char* kClaimQuery = "claim-query";
inline constexpr const char* kClaimAnswers = "claim-answers";

// A plug-in's descriptor as the certifier records it: what the host validated and read from the
// library, in the certificate's words.
struct PluginDescription {
  KernelInfo info;  // with its declared precision and conventions (1.2)
  std::string version;
  std::optional<std::string> unavailable;
  uint32_t abi_version = 0, abi_minor = 0;
  bool device_memory = false;
  uint32_t append_formats = 0, append_scale_fmts = 0;  // MLA_PLUGIN_CACHE_* / MLA_PLUGIN_SCALE_* bits
  uint32_t append_fp8_recipes = 0;                     // MLA_PLUGIN_RECIPE_* bits
  bool can_implement = false;                          // has the 1.2 predicate
  bool decodes = true;                                 // has the decode entry point (1.4: may not)
  std::optional<PrefillKernelInfo> prefill;            // the 1.4 prefill entry, as validated
  std::optional<MergeKernelInfo> merge;                // the 1.4 merge entry, as validated
  std::optional<TopkKernelInfo> topk;                  // the 1.4 top-k entry, as validated
  std::optional<IndexerLogitsKernelInfo> indexer_logits;  // the 1.5 indexer logits entry, as validated
  std::optional<IndexerAppendKernelInfo> indexer_append;  // the 1.5 indexer append entry, as validated
  std::optional<SparsePrefillKernelInfo> sparse_prefill;  // the 1.5 sparse prefill entry, as validated
  // The entries (kEntry* names) with a can_implement of their own (1.6; a Python kernel's
  // declarations likewise).
  std::vector<std::string> entry_can_implement;
};
wire::Message encode(const PluginDescription& d);
PluginDescription decode_plugin_description(const wire::Message& m);

// The shapes a plug-in's can_implement is asked about (in the child, never in the certifying
// process), and its answers, one per shape in the same order.
struct ClaimQuestion {
  AttnShape shape;
  std::optional<ScaleFmt> scale_fmt;  // FP8 shapes
  std::vector<int32_t> cache_seqlens;  // [batch]: the lengths the call would have
  // Empty: the decode's question above. Else the entry asked (a kEntry* name but kEntryAppend)
  // and `call`, the call as its entry plan's scalars say it (the `args` of
  // kinds/entry_plans.hpp) with the lengths the call would have (`lengths`); the fields above are
  // then unused.
  std::string entry;
  nlohmann::json call;
};
struct ClaimAnswer {
  enum class Kind { ok, unsupported, error };
  Kind kind = Kind::error;
  std::string reason;  // unsupported: the kernel's words; error: what went wrong
};
wire::Message encode(const std::vector<ClaimQuestion>& q);
std::vector<ClaimQuestion> decode_claim_query(const wire::Message& m);
wire::Message encode(const std::vector<ClaimAnswer>& a);
std::vector<ClaimAnswer> decode_claim_answers(const wire::Message& m);

}  // namespace mla::certify
