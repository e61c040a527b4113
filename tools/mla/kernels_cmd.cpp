#include "kernels_cmd.hpp"

#include <ostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/attention.hpp"
#include "mla/core/indexer_cache.hpp"
#include "mla/core/kernel.hpp"
#include "mla/core/merge.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/core/topk.hpp"
#include "mla/registry/registry.hpp"

namespace mla::tools {

nlohmann::json kernels_json() {
  register_builtin_kernels();
  auto list = nlohmann::json::array();
  // Each entry says which case kind's interface it implements: a script that certifies decode
  // kernels (the device check) selects "decode" ones.
  for (const auto& impl : Registry::instance().attention()) {
    const auto& k = impl->info();
    list.push_back({{"name", k.name},
                    {"kind", "decode"},
                    {"backend", k.backend},
                    {"role", to_string(k.role)},
                    {"out_dtype", to_string(k.out_dtype)},
                    {"description", k.description},
                    {"capabilities", to_json(k.caps)}});
  }
  for (const auto& impl : Registry::instance().prefill()) {
    const auto& k = impl->info();
    list.push_back({{"name", k.name},
                    {"kind", "prefill"},
                    {"backend", k.backend},
                    {"role", to_string(k.role)},
                    {"out_dtype", to_string(k.out_dtype)},
                    {"description", k.description},
                    {"capabilities", to_json(k.caps)}});
  }
  for (const auto& impl : Registry::instance().merge()) {
    const auto& k = impl->info();
    std::vector<std::string> dtypes;
    for (const auto d : k.dtypes) dtypes.emplace_back(to_string(d));
    list.push_back({{"name", k.name},
                    {"kind", "merge"},
                    {"backend", k.backend},
                    {"role", to_string(k.role)},
                    {"out_dtype", fmt::format("{}", fmt::join(dtypes, "|"))},
                    {"description", k.description},
                    {"capabilities", {{"dtypes", dtypes}, {"head_dims", k.head_dims}}}});
  }
  // A top-k kernel writes int32 indices; what it claims is k, the row length, its conventions
  // and the precision it compares logits in (the judge's tolerance follows from it).
  for (const auto& impl : Registry::instance().topk()) {
    const auto& k = impl->info();
    list.push_back({{"name", k.name},
                    {"kind", "topk"},
                    {"backend", k.backend},
                    {"role", to_string(k.role)},
                    {"out_dtype", "int32"},
                    {"description", k.description},
                    {"capabilities", {{"ks", k.ks},
                                      {"max_n", k.max_n},
                                      {"logits_precision", to_string(k.precision)},
                                      {"conventions", to_json(k.conventions)}}}});
  }
  // An indexer cache append writes e4m3 codes and float32 scales; what it claims is the scale
  // recipes, the block sizes and the float32 operation its fp32 scale uses (the judge is bitwise).
  for (const auto& impl : Registry::instance().indexer_append()) {
    const auto& k = impl->info();
    std::vector<std::string> fmts;
    for (const auto f : k.scale_fmts) fmts.emplace_back(to_string(f));
    list.push_back({{"name", k.name},
                    {"kind", "indexer_append"},
                    {"backend", k.backend},
                    {"role", to_string(k.role)},
                    {"out_dtype", "e4m3"},
                    {"description", k.description},
                    {"capabilities",
                     {{"scale_fmts", fmts},
                      {"block_sizes", k.block_sizes},
                      {"fp32_scale_op", to_string(k.conventions.fp32_scale_op)}}}});
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
