#include "kernels_cmd.hpp"

#include <ostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/attention.hpp"
#include "mla/core/indexer_cache.hpp"
#include "mla/core/indexer_logits.hpp"
#include "mla/core/kernel.hpp"
#include "mla/core/merge.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/core/topk.hpp"
#include "mla/registry/registry.hpp"

namespace mla::tools {

namespace {

// One row of the listing: the facts every kind's KernelInfo has, then what the kind writes
// (`out_dtype`) and what it claims (`capabilities`).
template <class Info>
nlohmann::json entry(const Info& k, const char* kind, const std::string& out_dtype, nlohmann::json capabilities) {
  return {{"name", k.name},
          {"kind", kind},
          {"backend", k.backend},
          {"role", to_string(k.role)},
          {"out_dtype", out_dtype},
          {"description", k.description},
          {"capabilities", std::move(capabilities)}};
}

}  // namespace

nlohmann::json kernels_json() {
  register_builtin_kernels();
  const auto& r = Registry::instance();
  auto list = nlohmann::json::array();
  // Each entry says which case kind's interface it implements: a script that certifies decode
  // kernels (the device check) selects "decode" ones.
  for (const auto& impl : r.attention()) {
    const auto& k = impl->info();
    list.push_back(entry(k, "decode", to_string(k.out_dtype), to_json(k.caps)));
  }
  for (const auto& impl : r.prefill()) {
    const auto& k = impl->info();
    list.push_back(entry(k, "prefill", to_string(k.out_dtype), to_json(k.caps)));
  }
  for (const auto& impl : r.merge()) {
    const auto& k = impl->info();
    std::vector<std::string> dtypes;
    for (const auto d : k.dtypes) dtypes.emplace_back(to_string(d));
    list.push_back(entry(k, "merge", fmt::format("{}", fmt::join(dtypes, "|")),
                         {{"dtypes", dtypes}, {"head_dims", k.head_dims}}));
  }
  // A top-k kernel writes int32 indices; what it claims is k, the row length, its conventions
  // and the precision it compares logits in (the judge's tolerance follows from it).
  for (const auto& impl : r.topk()) {
    const auto& k = impl->info();
    list.push_back(entry(k, "topk", "int32",
                         {{"ks", k.ks},
                          {"max_n", k.max_n},
                          {"logits_precision", to_string(k.precision)},
                          {"conventions", to_json(k.conventions)}}));
  }
  // An indexer cache append writes e4m3 codes and float32 scales; what it claims is the scale
  // recipes, the block sizes and the float32 operation its fp32 scale uses (the judge is bitwise).
  for (const auto& impl : r.indexer_append()) {
    const auto& k = impl->info();
    std::vector<std::string> fmts;
    for (const auto f : k.scale_fmts) fmts.emplace_back(to_string(f));
    list.push_back(entry(k, "indexer_append", "e4m3",
                         {{"scale_fmts", fmts},
                          {"block_sizes", k.block_sizes},
                          {"fp32_scale_op", to_string(k.conventions.fp32_scale_op)}}));
  }
  // An indexer logits kernel writes float32 logits; what it claims is its layouts (paged decode,
  // ragged prefill), next_n, heads, block sizes and the widest logits row.
  for (const auto& impl : r.indexer_logits()) {
    const auto& k = impl->info();
    std::vector<std::string> layouts;
    for (const auto l : k.layouts) layouts.emplace_back(to_string(l));
    list.push_back(entry(k, "indexer_logits", "f32",
                         {{"layouts", layouts},
                          {"next_ns", k.next_ns},
                          {"heads", k.heads},
                          {"head_dim", kIndexerHeadDim},
                          {"block_sizes", k.block_sizes},
                          {"max_context", k.max_context}}));
  }
  // A sparse prefill writes out in its dtype (max_logits and lse float32); what it claims is the
  // head counts, the topk multiple, the widths and whether it takes a sink and topk_length.
  for (const auto& impl : r.sparse_prefill()) {
    const auto& k = impl->info();
    list.push_back(entry(k, "sparse_prefill", to_string(k.out_dtype),
                         {{"heads", k.heads},
                          {"topk_multiple", k.topk_multiple},
                          {"d_qks", k.d_qks},
                          {"sink", k.sink},
                          {"topk_length", k.topk_length}}));
  }
  return list;
}

int kernels_list(bool json, std::ostream& out) {
  const auto list = kernels_json();
  if (json) {
    out << list.dump(2) << "\n";
    return 0;
  }
  out << fmt::format("{:<24} {:<14} {:<7} {:<10} {:<5} {}\n", "name", "kind", "backend", "role", "out", "description");
  for (const auto& k : list) {
    out << fmt::format("{:<24} {:<14} {:<7} {:<10} {:<5} {}\n", k["name"].get<std::string>(), k["kind"].get<std::string>(),
                       k["backend"].get<std::string>(),
                       k["role"].get<std::string>(), k["out_dtype"].get<std::string>(),
                       k["description"].get<std::string>());
  }
  return 0;
}

}  // namespace mla::tools
