// The host side of the plug-in C ABI (mla/plugin/mla_plugin.h): loading a shared library,
// validating its descriptor, and calling its decode and append entry points on buffers the
// caller owns.
//
// The audit is not here: the certifier's parent process lays out every buffer a call reads and
// writes in shared memory between guard regions, its child calls the plug-in on them through
// this host, and the parent checks the raw bytes (certify/src/isolation/arena.hpp). A device-memory
// plug-in gets device copies with guard regions of their own (device_call.hpp), whose findings
// the host hands back.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/core/kernel.hpp"
#include "mla/core/merge.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/core/indexer_cache.hpp"
#include "mla/core/indexer_logits.hpp"
#include "mla/core/sparse_prefill.hpp"
#include "mla/core/topk.hpp"
#include "mla/plugin/mla_plugin.h"

namespace mla::plugin {

// A library that cannot be loaded, lacks the entry symbol, or returns an invalid descriptor.
class PluginError : public Error {
 public:
  using Error::Error;
};

// "MLA_PLUGIN_OK", "MLA_PLUGIN_CAPACITY", ... or "unknown code N": a status code in messages.
std::string describe_rc(int32_t rc);
// The rule of an external kernel's name, [a-z0-9_]+ (a plug-in's, a Python kernel's).
bool valid_kernel_name(const std::string& name);

// Capabilities in the C ABI's form <-> the kernel interface's.
Capabilities capabilities_from(const mla_plugin_capabilities& c);
// Throws PluginError naming the first invalid field.
void validate_descriptor(const mla_plugin_descriptor& d);

class Library {
 public:
  // dlopen (RTLD_NOW | RTLD_LOCAL) and validation. Running this executes the library's
  // initializers: call it only in a process that may crash.
  static std::shared_ptr<Library> open(const std::filesystem::path& path);
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const mla_plugin_descriptor& descriptor() const { return *desc_; }
  const KernelInfo& info() const { return info_; }
  const std::string& version() const { return version_; }
  // Why the plug-in cannot run here: its own unavailable() answer, else (for a plug-in asking
  // for device memory) why this host cannot give it any; nullopt when it can run.
  std::optional<std::string> unavailable() const;

  // Revision 1.1 and 1.2 fields, as zero when the plug-in's descriptor predates them. The
  // conventions and the precision class (1.2) are in info().
  uint32_t abi_minor() const { return abi_minor_; }
  bool device_memory() const { return (flags_ & MLA_PLUGIN_FLAG_DEVICE_MEMORY) != 0; }
  uint32_t append_formats() const { return append_formats_; }      // MLA_PLUGIN_CACHE_* bits
  uint32_t append_scale_fmts() const { return append_scale_fmts_; }  // MLA_PLUGIN_SCALE_* bits
  mla_plugin_append_fn append() const { return append_; }
  // MLA_PLUGIN_RECIPE_* bits the FP8 append writes: DeepSeek's when it declares none (the only
  // recipe before 1.2); 0 when it writes no FP8.
  uint32_t append_fp8_recipes() const { return append_fp8_recipes_; }
  bool has_can_implement() const { return can_implement_ != nullptr; }
  // Whether it has the decode entry point (a 1.4 prefill-only library has none).
  bool decodes() const { return desc_->decode != nullptr; }
  // The prefill entry (1.4) as the prefill kind's vocabulary says it (name, claims, conventions,
  // precision class; role optimized), and its entry point; nullopt / NULL without one.
  const std::optional<PrefillKernelInfo>& prefill_info() const { return prefill_info_; }
  mla_plugin_prefill_fn prefill() const { return prefill_; }
  // The merge entry (1.4), the same way.
  const std::optional<MergeKernelInfo>& merge_info() const { return merge_info_; }
  mla_plugin_merge_fn merge() const { return merge_; }
  // The top-k entry (1.4), the same way.
  const std::optional<TopkKernelInfo>& topk_info() const { return topk_info_; }
  mla_plugin_topk_fn topk() const { return topk_; }
  // The indexer logits entry (1.5), the same way.
  const std::optional<IndexerLogitsKernelInfo>& indexer_logits_info() const { return indexer_logits_info_; }
  mla_plugin_indexer_logits_fn indexer_logits() const { return indexer_logits_; }
  // The indexer append entry (1.5), the same way.
  const std::optional<IndexerAppendKernelInfo>& indexer_append_info() const { return indexer_append_info_; }
  mla_plugin_indexer_append_fn indexer_append() const { return indexer_append_; }
  // The sparse prefill entry (1.5), the same way.
  const std::optional<SparsePrefillKernelInfo>& sparse_prefill_info() const { return sparse_prefill_info_; }
  mla_plugin_sparse_prefill_fn sparse_prefill() const { return sparse_prefill_; }

  // The plug-in's own answer on a shape and its lengths (can_implement; a 1.2 plug-in does not
  // read the lengths): ok, or unsupported with its reason,
  // or error (another return code). A plug-in without can_implement answers ok. Runs the
  // plug-in's code: call it only in a process that may crash.
  struct Claim {
    enum class Answer { ok, unsupported, error };
    Answer answer = Answer::ok;
    int32_t rc = MLA_PLUGIN_OK;
    std::string reason;
  };
  Claim can_implement(const AttnShape& shape, std::optional<ScaleFmt> scale_fmt,
                      std::span<const int32_t> cache_seqlens) const;
  // The same for the prefill, merge and sparse prefill entries (1.6): each entry's own predicate
  // on the call's scalars and lengths, its data arrays never read (a PrefillInputs with only
  // cu_seqlens_q/_k, a MergeInputs with only its shape, a SparsePrefillInputs with only
  // topk_length when the call has one). Ok for an entry without one.
  Claim can_implement(const PrefillInputs& call) const;
  Claim can_implement(const MergeInputs& call) const;
  Claim can_implement(const SparsePrefillInputs& call) const;
  // The top-k's (starts and ends given), the indexer logits' (context_lens, or ks and ke) and the
  // indexer append's (no array) the same way.
  Claim can_implement(const TopkInputs& call) const;
  Claim can_implement(const IndexerLogitsInputs& call) const;
  Claim can_implement(const IndexerAppendShape& shape) const;
  // The entries (protocol.hpp's kEntry* names: "prefill", "merge", ...) with a predicate of their own.
  std::vector<std::string> entries_with_can_implement() const;

 private:
  Library() = default;
  std::filesystem::path path_;
  void* handle_ = nullptr;
  const mla_plugin_descriptor* desc_ = nullptr;
  KernelInfo info_;
  std::string version_;
  uint32_t abi_minor_ = 0, flags_ = 0, append_formats_ = 0, append_scale_fmts_ = 0, append_fp8_recipes_ = 0;
  mla_plugin_append_fn append_ = nullptr;
  mla_plugin_can_implement_fn can_implement_ = nullptr;
  mla_plugin_prefill_can_implement_fn prefill_can_implement_ = nullptr;
  mla_plugin_merge_can_implement_fn merge_can_implement_ = nullptr;
  mla_plugin_sparse_prefill_can_implement_fn sparse_prefill_can_implement_ = nullptr;
  mla_plugin_topk_can_implement_fn topk_can_implement_ = nullptr;
  mla_plugin_indexer_logits_can_implement_fn indexer_logits_can_implement_ = nullptr;
  mla_plugin_indexer_append_can_implement_fn indexer_append_can_implement_ = nullptr;
  std::optional<PrefillKernelInfo> prefill_info_;
  mla_plugin_prefill_fn prefill_ = nullptr;
  std::optional<MergeKernelInfo> merge_info_;
  mla_plugin_merge_fn merge_ = nullptr;
  std::optional<TopkKernelInfo> topk_info_;
  mla_plugin_topk_fn topk_ = nullptr;
  std::optional<IndexerLogitsKernelInfo> indexer_logits_info_;
  mla_plugin_indexer_logits_fn indexer_logits_ = nullptr;
  std::optional<IndexerAppendKernelInfo> indexer_append_info_;
  mla_plugin_indexer_append_fn indexer_append_ = nullptr;
  std::optional<SparsePrefillKernelInfo> sparse_prefill_info_;
  mla_plugin_sparse_prefill_fn sparse_prefill_ = nullptr;
};

// The prefill entry's claims, conventions and precision class in the prefill kind's terms.
// Throws PluginError naming the first invalid field (validate_descriptor calls it).
PrefillKernelInfo prefill_info_from(const mla_plugin_prefill_entry& e);
// The merge entry's claims and conventions in the merge kind's terms; the same.
MergeKernelInfo merge_info_from(const mla_plugin_merge_entry& e);
// The top-k entry's claims and conventions in the top-k kind's terms; the same.
TopkKernelInfo topk_info_from(const mla_plugin_topk_entry& e);
// The indexer logits entry's claims in the indexer_logits kind's terms; the same.
IndexerLogitsKernelInfo indexer_logits_info_from(const mla_plugin_indexer_logits_entry& e);
// The indexer append entry's claims and declared scale operation in the indexer_append kind's
// terms; the same.
IndexerAppendKernelInfo indexer_append_info_from(const mla_plugin_indexer_append_entry& e);
// The sparse prefill entry's claims and precision class in the sparse_prefill kind's terms; the same.
SparsePrefillKernelInfo sparse_prefill_info_from(const mla_plugin_sparse_prefill_entry& e);

// One append call's scalars, in the C ABI's terms.
struct AppendCallShape {
  int32_t num_tokens = 0, batch = 0, max_blocks = 0, page_size = 0, num_blocks = 0;
  int64_t max_seq_len = 0;
  uint32_t cache_format = MLA_PLUGIN_CACHE_BF16;
  uint32_t scale_fmt = 0;
  uint32_t fp8_recipe = MLA_PLUGIN_RECIPE_DEEPSEEK_V32;  // MLA_PLUGIN_RECIPE_*: the one to write (fp8)
  double eps = 1e-6;
};

// One append call's inputs (owned), in the C ABI's terms.
struct AppendCallInputs : AppendCallShape {
  std::vector<uint16_t> latent, k_pe, kv_norm_weight;
  std::vector<double> inv_freq;
  std::vector<int32_t> seq_ids, positions, block_table;
  std::vector<uint8_t> kv_cache;  // the cache before the call
};

// One append call's arrays, in memory the caller owns and audits.
struct AppendCallBuffers {
  std::span<const uint16_t> latent, k_pe, kv_norm_weight;
  std::span<const double> inv_freq;
  std::span<const int32_t> seq_ids, positions, block_table;
  std::span<uint8_t> kv_cache;  // written in place
};

// One append call on buffers the caller owns and audits (the certifier's child passes the
// memory its parent created and checks): no copies, no audit here. A device-memory plug-in gets
// device copies and the cache is copied back into `b.kv_cache`; what the device-side guard
// checks found goes to `device_findings`. Returns the plug-in's code; its message is in `error`
// (always NUL-terminated). Throws PluginError when the plug-in has no append, mla::Error when the
// host cannot make the call (a CUDA failure).
int32_t call_append(const Library& lib, const AppendCallShape& shape, const AppendCallBuffers& b, char* error,
                    std::size_t error_size, std::vector<std::string>* device_findings);

// One decode call on buffers the caller owns and audits (the certifier's child passes the
// memory its parent created and checks): no copies, no audit here. A device-memory plug-in gets
// device copies and its outputs are copied back into `out` / `lse`; what the device-side guard
// checks found goes to `device_findings`. Returns the plug-in's code; its message is in `error`
// (always NUL-terminated). `decode`: the entry point to call instead of the plug-in's own, with the
// same arguments and copies; a benchmark passes one that does nothing to time the path alone.
int32_t call_decode(const Library& lib, const AttnInputs& in, void* out, std::size_t out_bytes, void* lse,
                    std::size_t lse_bytes, char* error, std::size_t error_size,
                    std::vector<std::string>* device_findings, mla_plugin_decode_fn decode = nullptr);

// One prefill call (1.4) on buffers the caller owns and audits, `in` already in the entry's
// conventions (V padded when it declares so): no copies, no audit here, as call_decode. A
// device-memory plug-in gets device copies, and its outputs are copied back into `out` / `lse`.
// Throws PluginError when the plug-in has no prefill entry. `prefill`: the entry point to call
// instead of the plug-in's own (a benchmark times the path alone with one that does nothing).
int32_t call_prefill(const Library& lib, const PrefillInputs& in, void* out, std::size_t out_bytes, void* lse,
                     std::size_t lse_bytes, char* error, std::size_t error_size,
                     std::vector<std::string>* device_findings, mla_plugin_prefill_fn prefill = nullptr);

// One merge call (1.4) on buffers the caller owns and audits, `in` already in the entry's
// conventions (its lse base and layout), as call_prefill.
int32_t call_merge(const Library& lib, const MergeInputs& in, void* out, std::size_t out_bytes, void* lse,
                   std::size_t lse_bytes, char* error, std::size_t error_size,
                   std::vector<std::string>* device_findings, mla_plugin_merge_fn merge = nullptr);

// One top-k call (1.4) on buffers the caller owns and audits, as call_prefill.
int32_t call_topk(const Library& lib, const TopkInputs& in, int32_t* indices, std::size_t indices_bytes, char* error,
                  std::size_t error_size, std::vector<std::string>* device_findings, mla_plugin_topk_fn topk = nullptr);

// One indexer logits call (1.5) on buffers the caller owns and audits, as call_prefill; `logits`
// [rows, cols] float32.
int32_t call_indexer_logits(const Library& lib, const IndexerLogitsInputs& in, float* logits, std::size_t logits_bytes,
                            char* error, std::size_t error_size, std::vector<std::string>* device_findings,
                            mla_plugin_indexer_logits_fn fn = nullptr);

// One indexer append call (1.5) on buffers the caller owns and audits, as call_prefill; `cache`
// (the cache before the call) written in place.
int32_t call_indexer_append(const Library& lib, const IndexerAppendShape& shape, std::span<const uint16_t> keys,
                            std::span<const int64_t> slot_mapping, std::span<uint8_t> cache, char* error,
                            std::size_t error_size, std::vector<std::string>* device_findings,
                            mla_plugin_indexer_append_fn fn = nullptr);

// One sparse prefill call (1.5) on buffers the caller owns and audits, as call_prefill; `out` in
// the entry's out_dtype, `max_logits` and `lse` float32 [s_q, heads].
int32_t call_sparse_prefill(const Library& lib, const SparsePrefillInputs& in, void* out, std::size_t out_bytes,
                            float* max_logits, std::size_t max_logits_bytes, float* lse, std::size_t lse_bytes,
                            char* error, std::size_t error_size, std::vector<std::string>* device_findings,
                            mla_plugin_sparse_prefill_fn fn = nullptr);

// The canary byte at offset `i` of a device buffer's guard region: varied, so that no single
// written value (0, a NaN pattern, 0xFF) can match a run of it by accident.
uint8_t canary_byte(std::size_t i);

}  // namespace mla::plugin
