#include "mla/plugin/host.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "device_call.hpp"

namespace mla::plugin {
namespace {

// Longest string accepted from a descriptor: a pointer to garbage must not make the host read
// megabytes looking for a NUL.
constexpr std::size_t kMaxString = 4096;

std::string checked_string(const char* s, const char* field, bool allow_empty) {
  if (!s) throw PluginError(fmt::format("descriptor field '{}' is NULL", field));
  const std::size_t n = strnlen(s, kMaxString + 1);
  if (n > kMaxString) throw PluginError(fmt::format("descriptor field '{}' is longer than {} bytes", field, kMaxString));
  if (n == 0 && !allow_empty) throw PluginError(fmt::format("descriptor field '{}' is empty", field));
  return std::string(s, n);
}

}  // namespace

bool valid_kernel_name(const std::string& n) {
  return !n.empty() && n.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos;
}

std::string describe_rc(int32_t rc) {
  switch (rc) {
    case MLA_PLUGIN_OK: return "MLA_PLUGIN_OK";
    case MLA_PLUGIN_ERROR: return "MLA_PLUGIN_ERROR";
    case MLA_PLUGIN_UNSUPPORTED: return "MLA_PLUGIN_UNSUPPORTED";
    case MLA_PLUGIN_CAPACITY: return "MLA_PLUGIN_CAPACITY";
    default: return fmt::format("unknown code {}", rc);
  }
}

Capabilities capabilities_from(const mla_plugin_capabilities& c) {
  Capabilities caps;
  if (c.cache_formats & MLA_PLUGIN_CACHE_BF16) caps.cache_formats.push_back(CacheFormat::bf16);
  if (c.cache_formats & MLA_PLUGIN_CACHE_FP8) caps.cache_formats.push_back(CacheFormat::fp8);
  caps.min_heads = c.min_heads;
  caps.max_heads = c.max_heads;
  caps.min_s_q = c.min_s_q;
  caps.max_s_q = c.max_s_q;
  for (int32_t i = 0; i < c.num_page_sizes && i < MLA_PLUGIN_MAX_PAGE_SIZES; ++i) caps.page_sizes.push_back(c.page_sizes[i]);
  caps.dense = (c.features & MLA_PLUGIN_DENSE) != 0;
  caps.sparse = (c.features & MLA_PLUGIN_SPARSE) != 0;
  caps.varlen = (c.features & MLA_PLUGIN_VARLEN) != 0;
  return caps;
}

namespace {

// A 1.2 field holding one of two words, 0 or 1.
void check_choice(uint32_t v, const char* field, const char* zero, const char* one) {
  if (v > 1) throw PluginError(fmt::format("{} {} is neither {} (0) nor {} (1)", field, v, zero, one));
}

std::optional<OutDType> precision_from_abi(uint32_t v, const char* field) {
  switch (v) {
    case MLA_PLUGIN_PRECISION_UNDECLARED: return std::nullopt;
    case MLA_PLUGIN_PRECISION_FP64: return OutDType::f64;
    case MLA_PLUGIN_PRECISION_FP32: return OutDType::f32;
    case MLA_PLUGIN_PRECISION_BF16: return OutDType::bf16;
    default:
      throw PluginError(fmt::format("{} {} is not an MLA_PLUGIN_PRECISION_* value (0 undeclared, 1 fp64, 2 fp32, 3 bf16)",
                                    field, v));
  }
}

OutDType out_dtype_from_abi(int32_t v) { return v == MLA_PLUGIN_OUT_BF16 ? OutDType::bf16 : OutDType::f32; }

void validate_revision_1_2(const mla_plugin_descriptor& d) {
  check_choice(d.lse_base, "lse_base", "MLA_PLUGIN_LSE_BASE_E", "MLA_PLUGIN_LSE_BASE_2");
  check_choice(d.lse_layout, "lse_layout", "MLA_PLUGIN_LSE_B_H_SQ", "MLA_PLUGIN_LSE_B_SQ_H");
  check_choice(d.empty_row_lse, "empty_row_lse", "MLA_PLUGIN_EMPTY_LSE_POS_INF", "MLA_PLUGIN_EMPTY_LSE_NEG_INF");
  check_choice(d.index_numbering, "index_numbering", "MLA_PLUGIN_INDEX_POSITIONS", "MLA_PLUGIN_INDEX_GLOBAL_SLOTS");
  const auto ops = precision_from_abi(d.operand_precision, "operand_precision");
  const auto acc = precision_from_abi(d.accum_precision, "accum_precision");
  if (ops.has_value() != acc.has_value()) {
    throw PluginError(fmt::format("operand_precision {} and accum_precision {} must both be declared or both be "
                                  "MLA_PLUGIN_PRECISION_UNDECLARED",
                                  d.operand_precision, d.accum_precision));
  }
  if (ops) {
    const PrecisionClass c{*ops, *acc, out_dtype_from_abi(d.out_dtype)};
    if (auto why = unjudgeable(c)) throw PluginError(fmt::format("precision class {}", *why));
  }
  const uint32_t known_recipes = MLA_PLUGIN_RECIPE_DEEPSEEK_V32 | MLA_PLUGIN_RECIPE_FLASHMLA;
  if ((d.append_fp8_recipes & ~known_recipes) != 0 ||
      (d.append_fp8_recipes != 0 && (d.append_formats & MLA_PLUGIN_CACHE_FP8) == 0)) {
    throw PluginError(fmt::format("append_fp8_recipes 0x{:x} must be MLA_PLUGIN_RECIPE_* bits, and 0 unless "
                                  "append_formats includes MLA_PLUGIN_CACHE_FP8",
                                  d.append_fp8_recipes));
  }
  if (d.reserved_1_2 != 0) throw PluginError(fmt::format("reserved_1_2 is {}, must be 0", d.reserved_1_2));
}

}  // namespace

PrefillKernelInfo prefill_info_from(const mla_plugin_prefill_entry& e) {
  if (e.struct_size < MLA_PLUGIN_PREFILL_ENTRY_V1_4_SIZE) {
    throw PluginError(fmt::format("prefill entry struct_size {} is smaller than ABI 1.4's {} bytes", e.struct_size,
                                  MLA_PLUGIN_PREFILL_ENTRY_V1_4_SIZE));
  }
  PrefillKernelInfo i;
  i.name = checked_string(e.name, "prefill.name", false);
  if (!valid_kernel_name(i.name)) throw PluginError(fmt::format("prefill entry name '{}' is not [a-z0-9_]+", i.name));
  i.description = checked_string(e.description, "prefill.description", true);
  if (e.out_dtype != MLA_PLUGIN_OUT_F32 && e.out_dtype != MLA_PLUGIN_OUT_BF16) {
    throw PluginError(fmt::format("prefill.out_dtype {} is neither MLA_PLUGIN_OUT_F32 ({}) nor MLA_PLUGIN_OUT_BF16 ({})",
                                  e.out_dtype, MLA_PLUGIN_OUT_F32, MLA_PLUGIN_OUT_BF16));
  }
  i.out_dtype = out_dtype_from_abi(e.out_dtype);
  if (e.min_heads < 1 || e.max_heads < e.min_heads) {
    throw PluginError(fmt::format("prefill heads range [{}, {}] is empty or below 1", e.min_heads, e.max_heads));
  }
  const uint32_t known_calls = MLA_PLUGIN_PREFILL_CAUSAL | MLA_PLUGIN_PREFILL_NON_CAUSAL | MLA_PLUGIN_PREFILL_VARLEN;
  if ((e.calls & ~known_calls) != 0 || (e.calls & (MLA_PLUGIN_PREFILL_CAUSAL | MLA_PLUGIN_PREFILL_NON_CAUSAL)) == 0) {
    throw PluginError(fmt::format("prefill.calls 0x{:x} must be MLA_PLUGIN_PREFILL_* bits including CAUSAL or "
                                  "NON_CAUSAL",
                                  e.calls));
  }
  if (e.max_total_tokens < 1) throw PluginError(fmt::format("prefill.max_total_tokens {} is below 1", e.max_total_tokens));
  check_choice(e.lse_base, "prefill.lse_base", "MLA_PLUGIN_LSE_BASE_E", "MLA_PLUGIN_LSE_BASE_2");
  check_choice(e.lse_layout, "prefill.lse_layout", "MLA_PLUGIN_LSE_B_H_SQ", "MLA_PLUGIN_LSE_B_SQ_H");
  check_choice(e.empty_row_lse, "prefill.empty_row_lse", "MLA_PLUGIN_EMPTY_LSE_POS_INF", "MLA_PLUGIN_EMPTY_LSE_NEG_INF");
  check_choice(e.v_padded, "prefill.v_padded", "not padded", "padded to 192");
  check_choice(e.causal_alignment, "prefill.causal_alignment", "MLA_PLUGIN_CAUSAL_BOTTOM_RIGHT",
               "MLA_PLUGIN_CAUSAL_TOP_LEFT");
  const auto ops = precision_from_abi(e.operand_precision, "prefill.operand_precision");
  const auto acc = precision_from_abi(e.accum_precision, "prefill.accum_precision");
  if (ops.has_value() != acc.has_value()) {
    throw PluginError(fmt::format("prefill.operand_precision {} and prefill.accum_precision {} must both be declared "
                                  "or both be MLA_PLUGIN_PRECISION_UNDECLARED",
                                  e.operand_precision, e.accum_precision));
  }
  if (ops) {
    i.compute = ComputePrecision{*ops, *acc};
    if (auto why = unjudgeable(precision_class(i))) throw PluginError(fmt::format("prefill precision class {}", *why));
  }
  if (!e.prefill) throw PluginError("prefill entry has no prefill entry point");
  i.backend = "cpu";  // the descriptor's, set by the caller
  i.role = KernelRole::optimized;
  i.caps.min_heads = e.min_heads;
  i.caps.max_heads = e.max_heads;
  i.caps.causal = (e.calls & MLA_PLUGIN_PREFILL_CAUSAL) != 0;
  i.caps.non_causal = (e.calls & MLA_PLUGIN_PREFILL_NON_CAUSAL) != 0;
  i.caps.varlen = (e.calls & MLA_PLUGIN_PREFILL_VARLEN) != 0;
  i.caps.max_total_tokens = e.max_total_tokens;
  auto& c = i.conventions;
  c.lse_base = e.lse_base == MLA_PLUGIN_LSE_BASE_2 ? LseBase::two : LseBase::e;
  c.lse_layout = e.lse_layout == MLA_PLUGIN_LSE_B_SQ_H ? LseLayout::b_sq_h : LseLayout::b_h_sq;
  c.empty_row_lse = e.empty_row_lse == MLA_PLUGIN_EMPTY_LSE_NEG_INF ? EmptyRowLse::neg_inf : EmptyRowLse::pos_inf;
  c.v_padded = e.v_padded != 0;
  c.alignment = e.causal_alignment == MLA_PLUGIN_CAUSAL_TOP_LEFT ? CausalAlignment::top_left
                                                                 : CausalAlignment::bottom_right;
  return i;
}

MergeKernelInfo merge_info_from(const mla_plugin_merge_entry& e) {
  if (e.struct_size < MLA_PLUGIN_MERGE_ENTRY_V1_4_SIZE) {
    throw PluginError(fmt::format("merge entry struct_size {} is smaller than ABI 1.4's {} bytes", e.struct_size,
                                  MLA_PLUGIN_MERGE_ENTRY_V1_4_SIZE));
  }
  MergeKernelInfo i;
  i.name = checked_string(e.name, "merge.name", false);
  if (!valid_kernel_name(i.name)) throw PluginError(fmt::format("merge entry name '{}' is not [a-z0-9_]+", i.name));
  i.description = checked_string(e.description, "merge.description", true);
  const uint32_t known = MLA_PLUGIN_STATE_BF16 | MLA_PLUGIN_STATE_F16 | MLA_PLUGIN_STATE_F32;
  if (e.dtypes == 0 || (e.dtypes & ~known) != 0) {
    throw PluginError(fmt::format("merge.dtypes 0x{:x} must be a non-empty set of MLA_PLUGIN_STATE_* bits", e.dtypes));
  }
  if (e.dtypes & MLA_PLUGIN_STATE_BF16) i.dtypes.push_back(StateDType::bf16);
  if (e.dtypes & MLA_PLUGIN_STATE_F16) i.dtypes.push_back(StateDType::f16);
  if (e.dtypes & MLA_PLUGIN_STATE_F32) i.dtypes.push_back(StateDType::f32);
  if (e.num_head_dims < 0 || e.num_head_dims > MLA_PLUGIN_MAX_HEAD_DIMS) {
    throw PluginError(fmt::format("merge.num_head_dims {} is outside [0, {}]", e.num_head_dims, MLA_PLUGIN_MAX_HEAD_DIMS));
  }
  for (int32_t j = 0; j < e.num_head_dims; ++j) {
    if (e.head_dims[j] < 1) throw PluginError(fmt::format("merge.head_dims[{}] = {} is not positive", j, e.head_dims[j]));
    i.head_dims.push_back(e.head_dims[j]);
  }
  check_choice(e.lse_base, "merge.lse_base", "MLA_PLUGIN_LSE_BASE_E", "MLA_PLUGIN_LSE_BASE_2");
  check_choice(e.lse_layout, "merge.lse_layout", "MLA_PLUGIN_LSE_B_H_SQ", "MLA_PLUGIN_LSE_B_SQ_H");
  check_choice(e.both_empty_lse, "merge.both_empty_lse", "MLA_PLUGIN_MERGE_EMPTY_NEG_INF", "MLA_PLUGIN_MERGE_EMPTY_POS_INF");
  if (!e.merge) throw PluginError("merge entry has no merge entry point");
  i.backend = "cpu";  // the descriptor's, set by the caller
  i.role = KernelRole::optimized;
  i.conventions.lse_base = e.lse_base == MLA_PLUGIN_LSE_BASE_2 ? LseBase::two : LseBase::e;
  i.conventions.lse_layout = e.lse_layout == MLA_PLUGIN_LSE_B_SQ_H ? LseLayout::b_sq_h : LseLayout::b_h_sq;
  i.conventions.both_empty_lse =
      e.both_empty_lse == MLA_PLUGIN_MERGE_EMPTY_POS_INF ? EmptyRowLse::pos_inf : EmptyRowLse::neg_inf;
  return i;
}

TopkKernelInfo topk_info_from(const mla_plugin_topk_entry& e) {
  if (e.struct_size < MLA_PLUGIN_TOPK_ENTRY_V1_4_SIZE) {
    throw PluginError(fmt::format("top-k entry struct_size {} is smaller than ABI 1.4's {} bytes", e.struct_size,
                                  MLA_PLUGIN_TOPK_ENTRY_V1_4_SIZE));
  }
  TopkKernelInfo i;
  i.name = checked_string(e.name, "topk.name", false);
  if (!valid_kernel_name(i.name)) throw PluginError(fmt::format("top-k entry name '{}' is not [a-z0-9_]+", i.name));
  i.description = checked_string(e.description, "topk.description", true);
  if (e.num_ks < 0 || e.num_ks > MLA_PLUGIN_MAX_KS) {
    throw PluginError(fmt::format("topk.num_ks {} is outside [0, {}]", e.num_ks, MLA_PLUGIN_MAX_KS));
  }
  for (int32_t j = 0; j < e.num_ks; ++j) {
    if (e.ks[j] < 1) throw PluginError(fmt::format("topk.ks[{}] = {} is not positive", j, e.ks[j]));
    i.ks.push_back(e.ks[j]);
  }
  if (e.max_n < 0) throw PluginError(fmt::format("topk.max_n {} is negative (0: any)", e.max_n));
  i.max_n = e.max_n;
  check_choice(e.index_base, "topk.index_base", "MLA_PLUGIN_INDEX_ABSOLUTE", "MLA_PLUGIN_INDEX_RELATIVE");
  check_choice(e.sorted, "topk.sorted", "unordered", "sorted by descending logit");
  check_choice(e.logits_precision, "topk.logits_precision", "MLA_PLUGIN_LOGITS_F32", "MLA_PLUGIN_LOGITS_BF16");
  check_choice(e.range_all_valid, "topk.range_all_valid", "masked positions in range taken", "every position in range finite");
  if (!e.topk) throw PluginError("top-k entry has no top-k entry point");
  i.backend = "cpu";  // the descriptor's, set by the caller
  i.role = KernelRole::optimized;
  i.precision = e.logits_precision == MLA_PLUGIN_LOGITS_BF16 ? LogitsPrecision::bf16 : LogitsPrecision::f32;
  i.conventions.index_base = e.index_base == MLA_PLUGIN_INDEX_RELATIVE ? IndexBase::relative : IndexBase::absolute;
  i.conventions.sorted = e.sorted != 0;
  i.range_all_valid = e.range_all_valid != 0;
  return i;
}

IndexerLogitsKernelInfo indexer_logits_info_from(const mla_plugin_indexer_logits_entry& e) {
  if (e.struct_size < MLA_PLUGIN_INDEXER_LOGITS_ENTRY_V1_5_SIZE) {
    throw PluginError(fmt::format("indexer logits entry struct_size {} is smaller than ABI 1.5's {} bytes", e.struct_size,
                                  MLA_PLUGIN_INDEXER_LOGITS_ENTRY_V1_5_SIZE));
  }
  IndexerLogitsKernelInfo i;
  i.name = checked_string(e.name, "indexer_logits.name", false);
  if (!valid_kernel_name(i.name)) {
    throw PluginError(fmt::format("indexer logits entry name '{}' is not [a-z0-9_]+", i.name));
  }
  i.description = checked_string(e.description, "indexer_logits.description", true);
  const uint32_t known_layouts = MLA_PLUGIN_INDEXER_PAGED | MLA_PLUGIN_INDEXER_RAGGED;
  if (e.layouts == 0 || (e.layouts & ~known_layouts) != 0) {
    throw PluginError(fmt::format("indexer_logits.layouts 0x{:x} must be a non-empty set of MLA_PLUGIN_INDEXER_* bits",
                                  e.layouts));
  }
  if (e.layouts & MLA_PLUGIN_INDEXER_PAGED) i.layouts.push_back(IndexerLogitsLayout::paged);
  if (e.layouts & MLA_PLUGIN_INDEXER_RAGGED) i.layouts.push_back(IndexerLogitsLayout::ragged);
  if ((e.next_ns & ~(MLA_PLUGIN_NEXT_N_1 | MLA_PLUGIN_NEXT_N_2)) != 0) {
    throw PluginError(fmt::format("indexer_logits.next_ns 0x{:x} has bits that are not MLA_PLUGIN_NEXT_N_*", e.next_ns));
  }
  if (e.next_ns & MLA_PLUGIN_NEXT_N_1) i.next_ns.push_back(1);
  if (e.next_ns & MLA_PLUGIN_NEXT_N_2) i.next_ns.push_back(2);
  if (e.num_heads < 0 || e.num_heads > MLA_PLUGIN_MAX_HEAD_COUNTS) {
    throw PluginError(fmt::format("indexer_logits.num_heads {} is outside [0, {}]", e.num_heads, MLA_PLUGIN_MAX_HEAD_COUNTS));
  }
  for (int32_t j = 0; j < e.num_heads; ++j) {
    if (e.heads[j] < 1) throw PluginError(fmt::format("indexer_logits.heads[{}] = {} is not positive", j, e.heads[j]));
    i.heads.push_back(e.heads[j]);
  }
  if (e.num_block_sizes < 0 || e.num_block_sizes > MLA_PLUGIN_MAX_PAGE_SIZES) {
    throw PluginError(fmt::format("indexer_logits.num_block_sizes {} is outside [0, {}]", e.num_block_sizes,
                                  MLA_PLUGIN_MAX_PAGE_SIZES));
  }
  for (int32_t j = 0; j < e.num_block_sizes; ++j) {
    if (e.block_sizes[j] < 1) {
      throw PluginError(fmt::format("indexer_logits.block_sizes[{}] = {} is not positive", j, e.block_sizes[j]));
    }
    i.block_sizes.push_back(e.block_sizes[j]);
  }
  if (e.max_context < 0) throw PluginError(fmt::format("indexer_logits.max_context {} is negative (0: any)", e.max_context));
  i.max_context = e.max_context;
  if (!e.indexer_logits) throw PluginError("indexer logits entry has no indexer_logits entry point");
  i.backend = "cpu";  // the descriptor's, set by the caller
  i.role = KernelRole::optimized;
  return i;
}

IndexerAppendKernelInfo indexer_append_info_from(const mla_plugin_indexer_append_entry& e) {
  if (e.struct_size < MLA_PLUGIN_INDEXER_APPEND_ENTRY_V1_5_SIZE) {
    throw PluginError(fmt::format("indexer append entry struct_size {} is smaller than ABI 1.5's {} bytes", e.struct_size,
                                  MLA_PLUGIN_INDEXER_APPEND_ENTRY_V1_5_SIZE));
  }
  IndexerAppendKernelInfo i;
  i.name = checked_string(e.name, "indexer_append.name", false);
  if (!valid_kernel_name(i.name)) {
    throw PluginError(fmt::format("indexer append entry name '{}' is not [a-z0-9_]+", i.name));
  }
  i.description = checked_string(e.description, "indexer_append.description", true);
  const uint32_t known = MLA_PLUGIN_SCALE_FP32 | MLA_PLUGIN_SCALE_UE8M0;
  if (e.scale_fmts == 0 || (e.scale_fmts & ~known) != 0) {
    throw PluginError(fmt::format("indexer_append.scale_fmts 0x{:x} must be a non-empty set of MLA_PLUGIN_SCALE_* bits",
                                  e.scale_fmts));
  }
  if (e.scale_fmts & MLA_PLUGIN_SCALE_FP32) i.scale_fmts.push_back(ScaleFmt::fp32);
  if (e.scale_fmts & MLA_PLUGIN_SCALE_UE8M0) i.scale_fmts.push_back(ScaleFmt::ue8m0);
  check_choice(e.fp32_scale_op, "indexer_append.fp32_scale_op", "MLA_PLUGIN_INDEXER_SCALE_DIVIDE",
               "MLA_PLUGIN_INDEXER_SCALE_TIMES_RECIPROCAL");
  i.conventions.fp32_scale_op =
      e.fp32_scale_op == MLA_PLUGIN_INDEXER_SCALE_TIMES_RECIPROCAL ? IndexerScaleOp::times_reciprocal : IndexerScaleOp::divide;
  if (e.num_block_sizes < 0 || e.num_block_sizes > MLA_PLUGIN_MAX_PAGE_SIZES) {
    throw PluginError(fmt::format("indexer_append.num_block_sizes {} is outside [0, {}]", e.num_block_sizes,
                                  MLA_PLUGIN_MAX_PAGE_SIZES));
  }
  for (int32_t j = 0; j < e.num_block_sizes; ++j) {
    if (e.block_sizes[j] < 1) {
      throw PluginError(fmt::format("indexer_append.block_sizes[{}] = {} is not positive", j, e.block_sizes[j]));
    }
    i.block_sizes.push_back(e.block_sizes[j]);
  }
  if (!e.indexer_append) throw PluginError("indexer append entry has no indexer_append entry point");
  i.backend = "cpu";  // the descriptor's, set by the caller
  i.role = KernelRole::optimized;
  return i;
}

SparsePrefillKernelInfo sparse_prefill_info_from(const mla_plugin_sparse_prefill_entry& e) {
  if (e.struct_size < MLA_PLUGIN_SPARSE_PREFILL_ENTRY_V1_5_SIZE) {
    throw PluginError(fmt::format("sparse prefill entry struct_size {} is smaller than ABI 1.5's {} bytes", e.struct_size,
                                  MLA_PLUGIN_SPARSE_PREFILL_ENTRY_V1_5_SIZE));
  }
  SparsePrefillKernelInfo i;
  i.name = checked_string(e.name, "sparse_prefill.name", false);
  if (!valid_kernel_name(i.name)) {
    throw PluginError(fmt::format("sparse prefill entry name '{}' is not [a-z0-9_]+", i.name));
  }
  i.description = checked_string(e.description, "sparse_prefill.description", true);
  if (e.out_dtype != MLA_PLUGIN_OUT_F32 && e.out_dtype != MLA_PLUGIN_OUT_BF16) {
    throw PluginError(fmt::format("sparse_prefill.out_dtype {} is neither MLA_PLUGIN_OUT_F32 ({}) nor MLA_PLUGIN_OUT_BF16 "
                                  "({})",
                                  e.out_dtype, MLA_PLUGIN_OUT_F32, MLA_PLUGIN_OUT_BF16));
  }
  i.out_dtype = out_dtype_from_abi(e.out_dtype);
  const auto ops = precision_from_abi(e.operand_precision, "sparse_prefill.operand_precision");
  const auto acc = precision_from_abi(e.accum_precision, "sparse_prefill.accum_precision");
  if (ops.has_value() != acc.has_value()) {
    throw PluginError(fmt::format("sparse_prefill.operand_precision {} and sparse_prefill.accum_precision {} must both be "
                                  "declared or both be MLA_PLUGIN_PRECISION_UNDECLARED",
                                  e.operand_precision, e.accum_precision));
  }
  if (ops) {
    i.compute = ComputePrecision{*ops, *acc};
    if (auto why = unjudgeable(precision_class(i.compute, i.out_dtype))) {
      throw PluginError(fmt::format("sparse prefill precision class {}", *why));
    }
  }
  if (e.num_heads < 0 || e.num_heads > MLA_PLUGIN_MAX_HEAD_COUNTS) {
    throw PluginError(fmt::format("sparse_prefill.num_heads {} is outside [0, {}]", e.num_heads, MLA_PLUGIN_MAX_HEAD_COUNTS));
  }
  for (int32_t j = 0; j < e.num_heads; ++j) {
    if (e.heads[j] < 1) throw PluginError(fmt::format("sparse_prefill.heads[{}] = {} is not positive", j, e.heads[j]));
    i.heads.push_back(e.heads[j]);
  }
  if (e.topk_multiple < 1) throw PluginError(fmt::format("sparse_prefill.topk_multiple {} is below 1", e.topk_multiple));
  i.topk_multiple = e.topk_multiple;
  if ((e.d_qks & ~(MLA_PLUGIN_SPARSE_DQK_576 | MLA_PLUGIN_SPARSE_DQK_512)) != 0) {
    throw PluginError(fmt::format("sparse_prefill.d_qks 0x{:x} has bits that are not MLA_PLUGIN_SPARSE_DQK_*", e.d_qks));
  }
  if (e.d_qks & MLA_PLUGIN_SPARSE_DQK_576) i.d_qks.push_back(576);
  if (e.d_qks & MLA_PLUGIN_SPARSE_DQK_512) i.d_qks.push_back(512);
  check_choice(e.takes_sink, "sparse_prefill.takes_sink", "no attention sink", "an attention sink");
  check_choice(e.takes_topk_length, "sparse_prefill.takes_topk_length", "no topk_length", "topk_length");
  i.sink = e.takes_sink != 0;
  i.topk_length = e.takes_topk_length != 0;
  if (!e.sparse_prefill) throw PluginError("sparse prefill entry has no sparse_prefill entry point");
  i.backend = "cpu";  // the descriptor's, set by the caller
  i.role = KernelRole::optimized;
  return i;
}

namespace {
// The prefill and merge entries of a 1.4 descriptor, or NULL (an earlier revision's, or none given).
const mla_plugin_prefill_entry* prefill_entry(const mla_plugin_descriptor& d) {
  return MLA_PLUGIN_HAS_FIELD(mla_plugin_descriptor, prefill, d.struct_size) ? d.prefill : nullptr;
}
const mla_plugin_merge_entry* merge_entry(const mla_plugin_descriptor& d) {
  return MLA_PLUGIN_HAS_FIELD(mla_plugin_descriptor, merge, d.struct_size) ? d.merge : nullptr;
}
const mla_plugin_topk_entry* topk_entry(const mla_plugin_descriptor& d) {
  return MLA_PLUGIN_HAS_FIELD(mla_plugin_descriptor, topk, d.struct_size) ? d.topk : nullptr;
}
const mla_plugin_indexer_logits_entry* indexer_logits_entry(const mla_plugin_descriptor& d) {
  return MLA_PLUGIN_HAS_FIELD(mla_plugin_descriptor, indexer_logits, d.struct_size) ? d.indexer_logits : nullptr;
}
const mla_plugin_indexer_append_entry* indexer_append_entry(const mla_plugin_descriptor& d) {
  return MLA_PLUGIN_HAS_FIELD(mla_plugin_descriptor, indexer_append, d.struct_size) ? d.indexer_append : nullptr;
}
const mla_plugin_sparse_prefill_entry* sparse_prefill_entry(const mla_plugin_descriptor& d) {
  return MLA_PLUGIN_HAS_FIELD(mla_plugin_descriptor, sparse_prefill, d.struct_size) ? d.sparse_prefill : nullptr;
}
// An entry's own can_implement (1.6), or NULL for an entry written before it (its struct_size
// ends earlier: the bytes after it are not the entry's).
template <class Entry>
auto entry_can_implement(const Entry& e) -> decltype(e.can_implement) {
  return MLA_PLUGIN_HAS_FIELD(Entry, can_implement, e.struct_size) ? e.can_implement : nullptr;
}
}  // namespace

void validate_descriptor(const mla_plugin_descriptor& d) {
  if (d.abi_version != MLA_PLUGIN_ABI_VERSION) {
    throw PluginError(fmt::format("plug-in ABI version {} is not this host's {} (rebuild it against this "
                                  "mla_plugin.h)",
                                  d.abi_version, MLA_PLUGIN_ABI_VERSION));
  }
  // Revision 1.0's size is the floor: later fields are read only when struct_size covers them.
  if (d.struct_size < MLA_PLUGIN_DESCRIPTOR_V1_0_SIZE) {
    throw PluginError(fmt::format("descriptor struct_size {} is smaller than ABI {}.0's {} bytes", d.struct_size,
                                  MLA_PLUGIN_ABI_VERSION, MLA_PLUGIN_DESCRIPTOR_V1_0_SIZE));
  }
  const auto name = checked_string(d.name, "name", false);
  if (!valid_kernel_name(name)) throw PluginError(fmt::format("plug-in name '{}' is not [a-z0-9_]+", name));
  checked_string(d.version, "version", false);
  checked_string(d.description, "description", true);
  const auto backend = checked_string(d.backend, "backend", false);
  if (backend != "cpu" && backend != "cuda") {
    throw PluginError(fmt::format("backend '{}' is neither 'cpu' nor 'cuda'", backend));
  }
  if (d.out_dtype != MLA_PLUGIN_OUT_F32 && d.out_dtype != MLA_PLUGIN_OUT_BF16) {
    throw PluginError(fmt::format("out_dtype {} is neither MLA_PLUGIN_OUT_F32 ({}) nor MLA_PLUGIN_OUT_BF16 ({})",
                                  d.out_dtype, MLA_PLUGIN_OUT_F32, MLA_PLUGIN_OUT_BF16));
  }
  const uint32_t known_formats = MLA_PLUGIN_CACHE_BF16 | MLA_PLUGIN_CACHE_FP8;
  // The decode's claims; a prefill-only library (1.4, decode NULL) has none to check.
  if (d.decode) {
    const auto& c = d.caps;
    if (c.cache_formats == 0 || (c.cache_formats & ~known_formats) != 0) {
      throw PluginError(fmt::format("caps.cache_formats 0x{:x} must be a non-empty set of MLA_PLUGIN_CACHE_* bits",
                                    c.cache_formats));
    }
    const uint32_t known_features = MLA_PLUGIN_DENSE | MLA_PLUGIN_SPARSE | MLA_PLUGIN_VARLEN;
    if ((c.features & ~known_features) != 0 || (c.features & (MLA_PLUGIN_DENSE | MLA_PLUGIN_SPARSE)) == 0) {
      throw PluginError(fmt::format("caps.features 0x{:x} must be MLA_PLUGIN_* bits including DENSE or SPARSE",
                                    c.features));
    }
    if (c.min_heads < 1 || c.max_heads < c.min_heads) {
      throw PluginError(fmt::format("caps heads range [{}, {}] is empty or below 1", c.min_heads, c.max_heads));
    }
    if (c.min_s_q < 1 || c.max_s_q < c.min_s_q) {
      throw PluginError(fmt::format("caps s_q range [{}, {}] is empty or below 1", c.min_s_q, c.max_s_q));
    }
    if (c.num_page_sizes < 0 || c.num_page_sizes > MLA_PLUGIN_MAX_PAGE_SIZES) {
      throw PluginError(fmt::format("caps.num_page_sizes {} is outside [0, {}]", c.num_page_sizes,
                                    MLA_PLUGIN_MAX_PAGE_SIZES));
    }
    for (int32_t i = 0; i < c.num_page_sizes; ++i) {
      if (c.page_sizes[i] < 1) throw PluginError(fmt::format("caps.page_sizes[{}] = {} is not positive", i, c.page_sizes[i]));
    }
  }
  const auto* pre = prefill_entry(d);
  const auto* mer = merge_entry(d);
  const auto* top = topk_entry(d);
  const auto* idx = indexer_logits_entry(d);
  const auto* ida = indexer_append_entry(d);
  const auto* spf = sparse_prefill_entry(d);
  if (!d.decode && !pre && !mer && !top && !idx && !ida && !spf) {
    throw PluginError(
        "descriptor has no decode entry point (and no prefill, merge, top-k, indexer logits, indexer append or sparse "
        "prefill entry)");
  }
  if (MLA_PLUGIN_HAS_FIELD(mla_plugin_descriptor, append, d.struct_size)) {
    if ((d.flags & ~MLA_PLUGIN_FLAG_DEVICE_MEMORY) != 0) {
      throw PluginError(fmt::format("flags 0x{:x} has bits that are not MLA_PLUGIN_FLAG_*", d.flags));
    }
    if ((d.append_formats & ~known_formats) != 0 || (d.append_formats != 0) != (d.append != nullptr)) {
      throw PluginError(fmt::format("append_formats 0x{:x} must be a non-empty set of MLA_PLUGIN_CACHE_* bits exactly "
                                    "when append is set (append is {})",
                                    d.append_formats, d.append ? "set" : "NULL"));
    }
    const uint32_t known_scales = MLA_PLUGIN_SCALE_FP32 | MLA_PLUGIN_SCALE_UE8M0;
    const bool fp8 = (d.append_formats & MLA_PLUGIN_CACHE_FP8) != 0;
    if ((d.append_scale_fmts & ~known_scales) != 0 || (d.append_scale_fmts != 0) != fp8) {
      throw PluginError(fmt::format("append_scale_fmts 0x{:x} must be a non-empty set of MLA_PLUGIN_SCALE_* bits exactly "
                                    "when append_formats includes MLA_PLUGIN_CACHE_FP8",
                                    d.append_scale_fmts));
    }
  }
  if (MLA_PLUGIN_HAS_FIELD(mla_plugin_descriptor, can_implement, d.struct_size)) validate_revision_1_2(d);
  // Every implementation the library gives has its own name.
  std::vector<std::string> names;
  if (d.decode) names.push_back(name);
  const auto distinct = [&](const std::string& n, const char* entry) {
    if (std::find(names.begin(), names.end(), n) != names.end()) {
      throw PluginError(fmt::format("{} entry name '{}' is another entry's: each implementation has its own", entry, n));
    }
    names.push_back(n);
  };
  if (pre) distinct(prefill_info_from(*pre).name, "prefill");
  if (mer) distinct(merge_info_from(*mer).name, "merge");
  if (top) distinct(topk_info_from(*top).name, "top-k");
  if (idx) distinct(indexer_logits_info_from(*idx).name, "indexer logits");
  if (ida) distinct(indexer_append_info_from(*ida).name, "indexer append");
  if (spf) distinct(sparse_prefill_info_from(*spf).name, "sparse prefill");
}

// ---- Library --------------------------------------------------------------------------------

std::shared_ptr<Library> Library::open(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw PluginError(fmt::format("plug-in {} is not a readable file", path.string()));
  }
  std::shared_ptr<Library> lib(new Library());
  lib->path_ = std::filesystem::absolute(path, ec);
  // RTLD_LOCAL: the plug-in's symbols never satisfy another library's references, so two
  // plug-ins (or a plug-in and this host) may define the same internal names.
  lib->handle_ = dlopen(lib->path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle_) {
    const char* err = dlerror();
    throw PluginError(fmt::format("cannot load plug-in {}: {}", path.string(), err ? err : "unknown dlopen error"));
  }
  dlerror();
  void* sym = dlsym(lib->handle_, MLA_PLUGIN_ENTRY_SYMBOL);
  if (!sym) {
    throw PluginError(fmt::format("plug-in {} does not export {} (declare it extern \"C\" with MLA_PLUGIN_EXPORT)",
                                  path.string(), MLA_PLUGIN_ENTRY_SYMBOL));
  }
  mla_plugin_get_descriptor_fn get;
  static_assert(sizeof(get) == sizeof(sym));
  std::memcpy(&get, &sym, sizeof get);
  lib->desc_ = get(MLA_PLUGIN_ABI_VERSION);
  if (!lib->desc_) {
    throw PluginError(fmt::format("plug-in {} returned no descriptor for host ABI version {}", path.string(),
                                  MLA_PLUGIN_ABI_VERSION));
  }
  try {
    validate_descriptor(*lib->desc_);
  } catch (const PluginError& e) {
    throw PluginError(fmt::format("plug-in {}: {}", path.string(), e.what()));
  }
  const auto& d = *lib->desc_;
  lib->info_.name = d.name;
  lib->info_.backend = d.backend;
  lib->info_.description = d.description;
  lib->info_.out_dtype = out_dtype_from_abi(d.out_dtype);
  lib->info_.caps = capabilities_from(d.caps);
  lib->version_ = d.version;
  if (MLA_PLUGIN_HAS_FIELD(mla_plugin_descriptor, append, d.struct_size)) {
    lib->abi_minor_ = d.abi_minor;
    lib->flags_ = d.flags;
    lib->append_formats_ = d.append_formats;
    lib->append_scale_fmts_ = d.append_scale_fmts;
    lib->append_ = d.append;
  }
  // FP8 appends write DeepSeek's recipe unless the plug-in says which (1.2); 1.1 had only that one.
  if (lib->append_formats_ & MLA_PLUGIN_CACHE_FP8) lib->append_fp8_recipes_ = MLA_PLUGIN_RECIPE_DEEPSEEK_V32;
  if (MLA_PLUGIN_HAS_FIELD(mla_plugin_descriptor, can_implement, d.struct_size)) {
    auto& c = lib->info_.conventions;
    c.lse_base = d.lse_base == MLA_PLUGIN_LSE_BASE_2 ? LseBase::two : LseBase::e;
    c.lse_layout = d.lse_layout == MLA_PLUGIN_LSE_B_SQ_H ? LseLayout::b_sq_h : LseLayout::b_h_sq;
    c.empty_row_lse = d.empty_row_lse == MLA_PLUGIN_EMPTY_LSE_NEG_INF ? EmptyRowLse::neg_inf : EmptyRowLse::pos_inf;
    c.indices = d.index_numbering == MLA_PLUGIN_INDEX_GLOBAL_SLOTS ? IndexNumbering::global_slots : IndexNumbering::positions;
    const auto ops = precision_from_abi(d.operand_precision, "operand_precision");
    const auto acc = precision_from_abi(d.accum_precision, "accum_precision");
    if (ops && acc) lib->info_.compute = ComputePrecision{*ops, *acc};
    if (d.append_fp8_recipes != 0) lib->append_fp8_recipes_ = d.append_fp8_recipes;
    lib->can_implement_ = d.can_implement;
  }
  if (const auto* pre = prefill_entry(d)) {
    lib->prefill_info_ = prefill_info_from(*pre);
    lib->prefill_info_->backend = d.backend;
    lib->prefill_ = pre->prefill;
    lib->prefill_can_implement_ = entry_can_implement(*pre);
  }
  if (const auto* mer = merge_entry(d)) {
    lib->merge_info_ = merge_info_from(*mer);
    lib->merge_info_->backend = d.backend;
    lib->merge_ = mer->merge;
    lib->merge_can_implement_ = entry_can_implement(*mer);
  }
  if (const auto* top = topk_entry(d)) {
    lib->topk_info_ = topk_info_from(*top);
    lib->topk_info_->backend = d.backend;
    lib->topk_ = top->topk;
    lib->topk_can_implement_ = entry_can_implement(*top);
  }
  if (const auto* idx = indexer_logits_entry(d)) {
    lib->indexer_logits_info_ = indexer_logits_info_from(*idx);
    lib->indexer_logits_info_->backend = d.backend;
    lib->indexer_logits_ = idx->indexer_logits;
    lib->indexer_logits_can_implement_ = entry_can_implement(*idx);
  }
  if (const auto* ida = indexer_append_entry(d)) {
    lib->indexer_append_info_ = indexer_append_info_from(*ida);
    lib->indexer_append_info_->backend = d.backend;
    lib->indexer_append_ = ida->indexer_append;
    lib->indexer_append_can_implement_ = entry_can_implement(*ida);
  }
  if (const auto* spf = sparse_prefill_entry(d)) {
    lib->sparse_prefill_info_ = sparse_prefill_info_from(*spf);
    lib->sparse_prefill_info_->backend = d.backend;
    lib->sparse_prefill_ = spf->sparse_prefill;
    lib->sparse_prefill_can_implement_ = entry_can_implement(*spf);
  }
  return lib;
}

Library::~Library() {
  if (handle_) dlclose(handle_);
}

std::optional<std::string> Library::unavailable() const {
  if (desc_->unavailable) {
    if (const char* why = desc_->unavailable()) return checked_string(why, "unavailable()", false);
  }
  if (device_memory()) return detail::device_unavailable();
  return std::nullopt;
}

namespace {
// The shape's fields, which mla_plugin_shape (can_implement) and mla_plugin_decode_args (decode)
// both carry under the same names.
template <class Args>
void put_shape(Args& a, const AttnShape& shape) {
  a.batch = shape.batch;
  a.s_q = shape.s_q;
  a.heads = shape.heads;
  a.d_qk = shape.d_qk;
  a.d_v = shape.d_v;
  a.page_size = shape.page_size;
  a.num_blocks = shape.num_blocks;
  a.max_blocks = shape.max_blocks;
  a.topk = shape.topk;
  a.cache_format = shape.cache_format == CacheFormat::fp8 ? MLA_PLUGIN_CACHE_FP8 : MLA_PLUGIN_CACHE_BF16;
  a.causal = shape.causal ? 1 : 0;
}
}  // namespace

namespace {
// A predicate's return code and words as a Claim.
template <class Fn, class Args>
Library::Claim ask_predicate(Fn fn, const Args& a) {
  Library::Claim c;
  char reason[1024] = {};
  const int32_t rc = fn(&a, reason, sizeof reason);
  reason[sizeof reason - 1] = '\0';
  c.rc = rc;
  c.reason = reason;
  c.answer = rc == MLA_PLUGIN_OK            ? Library::Claim::Answer::ok
             : rc == MLA_PLUGIN_UNSUPPORTED ? Library::Claim::Answer::unsupported
                                            : Library::Claim::Answer::error;
  if (c.answer == Library::Claim::Answer::unsupported && c.reason.empty()) c.reason = "(no reason given)";
  return c;
}

// The scalars of each entry's call, as both the call and the entry's
// can_implement (which sees them before any data) get them.
void put_scalars(mla_plugin_prefill_args& a, const PrefillInputs& in) {
  const auto& s = in.shape;
  a.struct_size = sizeof a;
  a.batch = s.batch;
  a.heads = s.heads;
  a.total_q = s.total_q;
  a.total_k = s.total_k;
  a.d_qk = s.d_qk;
  a.d_v = s.d_v;
  a.causal = s.causal ? 1 : 0;
  a.softmax_scale = in.softmax_scale;
}
void put_scalars(mla_plugin_merge_args& a, const MergeShape& s) {
  a.struct_size = sizeof a;
  a.tokens = s.tokens;
  a.heads = s.heads;
  a.head_dim = s.head_dim;
  a.dtype = s.dtype == StateDType::bf16 ? MLA_PLUGIN_STATE_BF16 : s.dtype == StateDType::f16 ? MLA_PLUGIN_STATE_F16
                                                                                             : MLA_PLUGIN_STATE_F32;
}
void put_scalars(mla_plugin_topk_args& a, const TopkShape& s) {
  a.struct_size = sizeof a;
  a.rows = s.rows;
  a.n = s.n;
  a.k = s.k;
}
void put_scalars(mla_plugin_indexer_logits_args& a, const IndexerLogitsShape& sh) {
  a.struct_size = sizeof a;
  a.layout = sh.layout == IndexerLogitsLayout::paged ? MLA_PLUGIN_INDEXER_PAGED : MLA_PLUGIN_INDEXER_RAGGED;
  a.batch = sh.batch;
  a.next_n = sh.next_n;
  a.heads = static_cast<int32_t>(sh.heads);
  a.rows = sh.rows();
  a.cols = sh.cols();
  if (sh.layout == IndexerLogitsLayout::paged) {
    a.num_blocks = sh.num_blocks, a.block_size = sh.block_size, a.max_blocks = sh.max_blocks;
    a.max_context = sh.max_context;
  } else {
    a.num_keys = sh.num_keys;
  }
}
void put_scalars(mla_plugin_indexer_append_args& a, const IndexerAppendShape& shape) {
  a.struct_size = sizeof a;
  a.scale_fmt = shape.scale_fmt == ScaleFmt::ue8m0 ? MLA_PLUGIN_SCALE_UE8M0 : MLA_PLUGIN_SCALE_FP32;
  a.num_tokens = shape.num_tokens;
  a.num_blocks = shape.num_blocks;
  a.block_size = shape.block_size;
}
void put_scalars(mla_plugin_sparse_prefill_args& a, const SparsePrefillInputs& in) {
  const auto& s = in.shape;
  a.struct_size = sizeof a;
  a.s_q = s.s_q;
  a.s_kv = s.s_kv;
  a.heads = s.heads;
  a.d_qk = s.d_qk;
  a.d_v = static_cast<int32_t>(kSparsePrefillDv);
  a.topk = s.topk;
  a.softmax_scale = in.sm_scale;
}

// A predicate that reads the call's scalars alone (the merge's, the indexer append's); ok without one.
template <class Args, class Shape>
Library::Claim ask_on_scalars(int32_t (*fn)(const Args*, char*, size_t), const Shape& shape) {
  if (!fn) return {};
  Args a{};
  put_scalars(a, shape);
  return ask_predicate(fn, a);
}
}  // namespace

Library::Claim Library::can_implement(const PrefillInputs& call) const {
  if (!prefill_can_implement_) return {};
  mla_plugin_prefill_args a{};
  put_scalars(a, call);
  const auto n = static_cast<std::size_t>(call.shape.batch) + 1;
  if (call.cu_seqlens_q.size() != n || call.cu_seqlens_k.size() != n) {
    throw PluginError(fmt::format("prefill can_implement: cu_seqlens of {} and {} entries for a batch of {}",
                                  call.cu_seqlens_q.size(), call.cu_seqlens_k.size(), call.shape.batch));
  }
  a.cu_seqlens_q = call.cu_seqlens_q.data();
  a.cu_seqlens_k = call.cu_seqlens_k.data();
  return ask_predicate(prefill_can_implement_, a);
}

Library::Claim Library::can_implement(const MergeInputs& call) const {
  return ask_on_scalars(merge_can_implement_, call.shape);
}

Library::Claim Library::can_implement(const SparsePrefillInputs& call) const {
  if (!sparse_prefill_can_implement_) return {};
  mla_plugin_sparse_prefill_args a{};
  put_scalars(a, call);
  const std::vector<float> zero_sink(static_cast<std::size_t>(std::max(call.shape.heads, 1)), 0.0f);
  if (call.shape.sink) a.attn_sink = zero_sink.data();
  if (call.shape.topk_length) {
    if (static_cast<int64_t>(call.topk_length.size()) != call.shape.s_q) {
      throw PluginError(fmt::format("sparse prefill can_implement: {} topk_length entries for {} rows",
                                    call.topk_length.size(), call.shape.s_q));
    }
    a.topk_length = call.topk_length.data();
  }
  return ask_predicate(sparse_prefill_can_implement_, a);
}

std::vector<std::string> Library::entries_with_can_implement() const {
  std::vector<std::string> e;
  if (prefill_can_implement_) e.push_back("prefill");
  if (merge_can_implement_) e.push_back("merge");
  if (topk_can_implement_) e.push_back("topk");
  if (indexer_logits_can_implement_) e.push_back("indexer_logits");
  if (indexer_append_can_implement_) e.push_back("indexer_append");
  if (sparse_prefill_can_implement_) e.push_back("sparse_prefill");
  return e;
}

Library::Claim Library::can_implement(const TopkInputs& call) const {
  if (!topk_can_implement_) return {};
  mla_plugin_topk_args a{};
  put_scalars(a, call.shape);
  const auto rows = static_cast<std::size_t>(call.shape.rows);
  if (call.starts.size() != rows || call.ends.size() != rows) {
    throw PluginError(fmt::format("top-k can_implement: {} starts and {} ends for {} rows", call.starts.size(),
                                  call.ends.size(), rows));
  }
  a.starts = call.starts.data();
  a.ends = call.ends.data();
  return ask_predicate(topk_can_implement_, a);
}

Library::Claim Library::can_implement(const IndexerLogitsInputs& call) const {
  if (!indexer_logits_can_implement_) return {};
  mla_plugin_indexer_logits_args a{};
  put_scalars(a, call.shape);
  const auto& sh = call.shape;
  if (sh.layout == IndexerLogitsLayout::paged) {
    if (static_cast<int64_t>(call.context_lens.size()) != sh.batch) {
      throw PluginError(fmt::format("indexer logits can_implement: {} context lengths for a batch of {}",
                                    call.context_lens.size(), sh.batch));
    }
    a.context_lens = call.context_lens.data();
  } else {
    if (static_cast<int64_t>(call.ks.size()) != sh.batch || static_cast<int64_t>(call.ke.size()) != sh.batch) {
      throw PluginError(fmt::format("indexer logits can_implement: {} ks and {} ke for {} rows", call.ks.size(),
                                    call.ke.size(), sh.batch));
    }
    a.ks = call.ks.data();
    a.ke = call.ke.data();
  }
  return ask_predicate(indexer_logits_can_implement_, a);
}

Library::Claim Library::can_implement(const IndexerAppendShape& shape) const {
  return ask_on_scalars(indexer_append_can_implement_, shape);
}

Library::Claim Library::can_implement(const AttnShape& shape, std::optional<ScaleFmt> scale_fmt,
                                      std::span<const int32_t> cache_seqlens) const {
  Claim c;
  if (!can_implement_) return c;
  mla_plugin_shape a{};
  a.struct_size = sizeof a;
  put_shape(a, shape);
  if (static_cast<int64_t>(cache_seqlens.size()) != shape.batch) {
    throw PluginError(fmt::format("can_implement: {} lengths for a batch of {}", cache_seqlens.size(), shape.batch));
  }
  a.cache_seqlens = cache_seqlens.data();
  if (shape.cache_format == CacheFormat::fp8) {
    a.scale_fmt = scale_fmt.value_or(ScaleFmt::fp32) == ScaleFmt::ue8m0 ? MLA_PLUGIN_SCALE_UE8M0 : MLA_PLUGIN_SCALE_FP32;
  }
  return ask_predicate(can_implement_, a);
}

uint8_t canary_byte(std::size_t i) {
  // A byte of a 64-bit mix of the offset: no period a plug-in's write pattern could share.
  uint64_t z = i + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint8_t>(z ^ (z >> 31));
}

// ---- calls on the caller's buffers --------------------------------------------------------

int32_t call_decode(const Library& lib, const AttnInputs& in, void* out, std::size_t out_bytes, void* lse,
                    std::size_t lse_bytes, char* error, std::size_t error_size, std::vector<std::string>* device_findings,
                    mla_plugin_decode_fn decode) {
  const AttnShape& shape = in.shape;
  // Device-memory plug-ins get device copies of everything; `dev` holds them, and the host
  // buffers receive the outputs afterwards, so whoever audits them audits host memory.
  std::unique_ptr<detail::DeviceCall> dev;
  if (lib.device_memory()) dev = std::make_unique<detail::DeviceCall>();
  auto bytes_of = [](const auto& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(v[0]));
  };
  mla_plugin_decode_args a{};
  a.struct_size = sizeof a;
  put_shape(a, shape);
  a.softmax_scale = in.softmax_scale;
  a.q = in.q.data();
  a.kv_cache = in.kv_cache.data();
  a.block_table = in.block_table.data();
  a.cache_seqlens = in.cache_seqlens.data();
  a.indices = shape.topk > 0 ? in.indices.data() : nullptr;
  a.out = out;
  a.lse = static_cast<float*>(lse);
  a.stream = nullptr;  // host memory: the plug-in finishes before it returns
  if (dev) {
    using Role = detail::DeviceCall::Role;
    a.q = static_cast<const uint16_t*>(dev->add("q", bytes_of(in.q), Role::input));
    a.kv_cache = static_cast<const uint8_t*>(dev->add("kv_cache", bytes_of(in.kv_cache), Role::input));
    a.block_table = static_cast<const int32_t*>(dev->add("block_table", bytes_of(in.block_table), Role::input));
    a.cache_seqlens = static_cast<const int32_t*>(dev->add("cache_seqlens", bytes_of(in.cache_seqlens), Role::input));
    const auto* idx = static_cast<const int32_t*>(dev->add("indices", bytes_of(in.indices), Role::input));
    a.indices = shape.topk > 0 ? idx : nullptr;
    a.out = dev->add("out", {static_cast<const uint8_t*>(out), out_bytes}, Role::output);
    a.lse = static_cast<float*>(dev->add("lse", {static_cast<const uint8_t*>(lse), lse_bytes}, Role::output));
    a.stream = dev->stream();
  }
  if (error_size > 0) error[0] = '\0';
  const int32_t rc = (decode ? decode : lib.descriptor().decode)(&a, error, error_size);
  if (error_size > 0) error[error_size - 1] = '\0';
  if (dev) {
    auto findings = dev->finish();
    if (device_findings) {
      for (auto& f : findings) device_findings->push_back(std::move(f));
    }
    std::memcpy(out, dev->result(5).data(), out_bytes);
    std::memcpy(lse, dev->result(6).data(), lse_bytes);
  }
  return rc;
}

namespace {

// The host side of one call of a 1.4 entry point: for a device-memory plug-in, device copies of
// every buffer (each output copied back into the caller's after the call) and the device-side
// audit's findings handed on; for a host-memory one the caller's buffers as they are. The error
// buffer is cleared before and NUL-terminated after the call.
class EntryCall {
 public:
  explicit EntryCall(const Library& lib) {
    if (lib.device_memory()) dev_ = std::make_unique<detail::DeviceCall>();
  }
  void* stream() const { return dev_ ? dev_->stream() : nullptr; }  // NULL: host memory, finished on return
  template <class T>
  const T* input(const char* name, std::span<const T> host) {
    if (!dev_) return host.data();
    ++added_;
    return static_cast<const T*>(
        dev_->add(name, {reinterpret_cast<const uint8_t*>(host.data()), host.size_bytes()}, detail::DeviceCall::Role::input));
  }
  void* output(const char* name, void* host, std::size_t bytes) {
    if (!dev_) return host;
    outputs_.push_back({added_++, host, bytes});
    return dev_->add(name, {static_cast<const uint8_t*>(host), bytes}, detail::DeviceCall::Role::output);
  }
  // Written in place: the device copy starts as `host` holds it and comes back into it.
  void* inout(const char* name, void* host, std::size_t bytes) {
    if (!dev_) return host;
    outputs_.push_back({added_++, host, bytes});
    return dev_->add(name, {static_cast<const uint8_t*>(host), bytes}, detail::DeviceCall::Role::inout);
  }
  template <class Args>
  int32_t call(int32_t (*fn)(const Args*, char*, size_t), const Args& a, char* error, std::size_t error_size,
               std::vector<std::string>* device_findings) {
    if (error_size > 0) error[0] = '\0';
    const int32_t rc = fn(&a, error, error_size);
    if (error_size > 0) error[error_size - 1] = '\0';
    if (dev_) {
      auto findings = dev_->finish();
      if (device_findings) {
        for (auto& f : findings) device_findings->push_back(std::move(f));
      }
      for (const auto& o : outputs_) std::memcpy(o.host, dev_->result(o.index).data(), o.bytes);
    }
    return rc;
  }

 private:
  struct Output {
    std::size_t index;
    void* host;
    std::size_t bytes;
  };
  std::unique_ptr<detail::DeviceCall> dev_;
  std::vector<Output> outputs_;
  std::size_t added_ = 0;  // the DeviceCall's buffer index of the next add
};

}  // namespace

int32_t call_prefill(const Library& lib, const PrefillInputs& in, void* out, std::size_t out_bytes, void* lse,
                     std::size_t lse_bytes, char* error, std::size_t error_size, std::vector<std::string>* device_findings,
                     mla_plugin_prefill_fn prefill) {
  if (!lib.prefill()) throw PluginError(fmt::format("plug-in {} has no prefill entry point", lib.info().name));
  EntryCall c(lib);
  mla_plugin_prefill_args a{};
  put_scalars(a, in);
  a.q = c.input("q", in.q);
  a.k = c.input("k", in.k);
  a.v = c.input("v", in.v);
  a.cu_seqlens_q = c.input("cu_seqlens_q", in.cu_seqlens_q);
  a.cu_seqlens_k = c.input("cu_seqlens_k", in.cu_seqlens_k);
  a.out = c.output("out", out, out_bytes);
  a.lse = static_cast<float*>(c.output("lse", lse, lse_bytes));
  a.stream = c.stream();
  return c.call(prefill ? prefill : lib.prefill(), a, error, error_size, device_findings);
}

int32_t call_merge(const Library& lib, const MergeInputs& in, void* out, std::size_t out_bytes, void* lse,
                   std::size_t lse_bytes, char* error, std::size_t error_size, std::vector<std::string>* device_findings,
                   mla_plugin_merge_fn merge) {
  if (!lib.merge()) throw PluginError(fmt::format("plug-in {} has no merge entry point", lib.info().name));
  EntryCall c(lib);
  mla_plugin_merge_args a{};
  put_scalars(a, in.shape);
  a.out_a = c.input("out_a", in.out_a);
  a.lse_a = c.input("lse_a", in.lse_a);
  a.out_b = c.input("out_b", in.out_b);
  a.lse_b = c.input("lse_b", in.lse_b);
  a.out = c.output("out", out, out_bytes);
  a.lse = static_cast<float*>(c.output("lse", lse, lse_bytes));
  a.stream = c.stream();
  return c.call(merge ? merge : lib.merge(), a, error, error_size, device_findings);
}

int32_t call_topk(const Library& lib, const TopkInputs& in, int32_t* indices, std::size_t indices_bytes, char* error,
                  std::size_t error_size, std::vector<std::string>* device_findings, mla_plugin_topk_fn topk) {
  if (!lib.topk()) throw PluginError(fmt::format("plug-in {} has no top-k entry point", lib.info().name));
  EntryCall c(lib);
  mla_plugin_topk_args a{};
  put_scalars(a, in.shape);
  a.logits = c.input("logits", in.logits);
  a.starts = c.input("starts", in.starts);
  a.ends = c.input("ends", in.ends);
  a.indices = static_cast<int32_t*>(c.output("indices", indices, indices_bytes));
  a.stream = c.stream();
  return c.call(topk ? topk : lib.topk(), a, error, error_size, device_findings);
}

int32_t call_indexer_logits(const Library& lib, const IndexerLogitsInputs& in, float* logits, std::size_t logits_bytes,
                            char* error, std::size_t error_size, std::vector<std::string>* device_findings,
                            mla_plugin_indexer_logits_fn fn) {
  if (!lib.indexer_logits()) {
    throw PluginError(fmt::format("plug-in {} has no indexer logits entry point", lib.info().name));
  }
  EntryCall c(lib);
  // The other layout's arrays are NULL, as the header promises.
  const auto given = [&]<class T>(const char* name, std::span<const T> host) -> const T* {
    return host.empty() ? nullptr : c.input(name, host);
  };
  mla_plugin_indexer_logits_args a{};
  put_scalars(a, in.shape);
  a.q = given("q", in.q);
  a.weights = given("weights", in.weights);
  a.kv_cache = given("kv_cache", in.cache);
  a.context_lens = given("context_lens", in.context_lens);
  a.block_table = given("block_table", in.block_table);
  a.k_codes = given("k_codes", in.k_codes);
  a.k_scales = given("k_scales", in.k_scales);
  a.ks = given("ks", in.ks);
  a.ke = given("ke", in.ke);
  a.logits = static_cast<float*>(c.output("logits", logits, logits_bytes));
  a.stream = c.stream();
  return c.call(fn ? fn : lib.indexer_logits(), a, error, error_size, device_findings);
}

int32_t call_indexer_append(const Library& lib, const IndexerAppendShape& shape, std::span<const uint16_t> keys,
                            std::span<const int64_t> slot_mapping, std::span<uint8_t> cache, char* error,
                            std::size_t error_size, std::vector<std::string>* device_findings,
                            mla_plugin_indexer_append_fn fn) {
  if (!lib.indexer_append()) {
    throw PluginError(fmt::format("plug-in {} has no indexer append entry point", lib.info().name));
  }
  EntryCall c(lib);
  mla_plugin_indexer_append_args a{};
  put_scalars(a, shape);
  a.keys = keys.empty() ? nullptr : c.input("keys", keys);
  a.slot_mapping = slot_mapping.empty() ? nullptr : c.input("slot_mapping", slot_mapping);
  // In place: a device-memory plug-in gets a device copy of the cache as it was, copied back after.
  a.kv_cache = static_cast<uint8_t*>(c.inout("kv_cache", cache.data(), cache.size()));
  a.stream = c.stream();
  return c.call(fn ? fn : lib.indexer_append(), a, error, error_size, device_findings);
}

int32_t call_sparse_prefill(const Library& lib, const SparsePrefillInputs& in, void* out, std::size_t out_bytes,
                            float* max_logits, std::size_t max_logits_bytes, float* lse, std::size_t lse_bytes,
                            char* error, std::size_t error_size, std::vector<std::string>* device_findings,
                            mla_plugin_sparse_prefill_fn fn) {
  if (!lib.sparse_prefill()) {
    throw PluginError(fmt::format("plug-in {} has no sparse prefill entry point", lib.info().name));
  }
  EntryCall c(lib);
  const auto given = [&]<class T>(const char* name, std::span<const T> host) -> const T* {
    return host.empty() ? nullptr : c.input(name, host);
  };
  mla_plugin_sparse_prefill_args a{};
  put_scalars(a, in);
  a.q = given("q", in.q);
  a.kv = given("kv", in.kv);
  a.indices = given("indices", in.indices);
  a.attn_sink = given("attn_sink", in.attn_sink);
  a.topk_length = given("topk_length", in.topk_length);
  a.out = c.output("out", out, out_bytes);
  a.max_logits = static_cast<float*>(c.output("max_logits", max_logits, max_logits_bytes));
  a.lse = static_cast<float*>(c.output("lse", lse, lse_bytes));
  a.stream = c.stream();
  return c.call(fn ? fn : lib.sparse_prefill(), a, error, error_size, device_findings);
}

int32_t call_append(const Library& lib, const AppendCallShape& in, const AppendCallBuffers& b, char* error,
                    std::size_t error_size, std::vector<std::string>* device_findings) {
  if (!lib.append()) throw PluginError(fmt::format("plug-in {} has no append entry point", lib.info().name));
  mla_plugin_append_args a{};
  a.struct_size = sizeof a;
  a.num_tokens = in.num_tokens;
  a.batch = in.batch;
  a.max_blocks = in.max_blocks;
  a.page_size = in.page_size;
  a.num_blocks = in.num_blocks;
  a.max_seq_len = in.max_seq_len;
  a.cache_format = in.cache_format;
  a.scale_fmt = in.scale_fmt;
  a.eps = in.eps;
  a.latent = b.latent.data();
  a.k_pe = b.k_pe.data();
  a.kv_norm_weight = b.kv_norm_weight.data();
  a.inv_freq = b.inv_freq.data();
  a.seq_ids = b.seq_ids.data();
  a.positions = b.positions.data();
  a.block_table = b.block_table.data();
  a.kv_cache = b.kv_cache.data();
  a.stream = nullptr;  // host memory: the plug-in finishes before it returns
  a.fp8_recipe = in.cache_format == MLA_PLUGIN_CACHE_FP8 ? in.fp8_recipe : 0;
  // Device-memory plug-ins get device copies of everything, and the cache comes back into the
  // caller's buffer afterwards, so whoever audits it audits host memory.
  std::unique_ptr<detail::DeviceCall> dev;
  if (lib.device_memory()) {
    using Role = detail::DeviceCall::Role;
    dev = std::make_unique<detail::DeviceCall>();
    auto add = [&](const char* name, auto v) {
      return dev->add(name, {reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()}, Role::input);
    };
    a.latent = static_cast<const uint16_t*>(add("latent", b.latent));
    a.k_pe = static_cast<const uint16_t*>(add("k_pe", b.k_pe));
    a.kv_norm_weight = static_cast<const uint16_t*>(add("kv_norm_weight", b.kv_norm_weight));
    a.inv_freq = static_cast<const double*>(add("inv_freq", b.inv_freq));
    a.seq_ids = static_cast<const int32_t*>(add("seq_ids", b.seq_ids));
    a.positions = static_cast<const int32_t*>(add("positions", b.positions));
    a.block_table = static_cast<const int32_t*>(add("block_table", b.block_table));
    a.kv_cache = static_cast<uint8_t*>(dev->add("kv_cache", {b.kv_cache.data(), b.kv_cache.size()}, Role::inout));
    a.stream = dev->stream();
  }
  if (error_size > 0) error[0] = '\0';
  const int32_t rc = lib.append()(&a, error, error_size);
  if (error_size > 0) error[error_size - 1] = '\0';
  if (dev) {
    auto findings = dev->finish();
    if (device_findings) {
      for (auto& f : findings) device_findings->push_back(std::move(f));
    }
    if (!b.kv_cache.empty()) std::memcpy(b.kv_cache.data(), dev->result(7).data(), b.kv_cache.size());
  }
  return rc;
}

}  // namespace mla::plugin
