#include "mla/registry/registry.hpp"

#include <mutex>

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla {

Registry& Registry::instance() {
  static Registry r;
  return r;
}

void Registry::check_name(const std::string& name) const {
  const bool valid = !name.empty() && name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") ==
                                          std::string::npos;
  if (!valid) throw Error(fmt::format("Registry::add: kernel name '{}' is not [a-z0-9_]+", name));
  if (find(name) != nullptr || find_prefill(name) != nullptr || find_merge(name) != nullptr ||
      find_topk(name) != nullptr || find_indexer_append(name) != nullptr ||
      find_indexer_logits(name) != nullptr) {
    throw Error(fmt::format("Registry::add: kernel '{}' is already registered", name));
  }
}

namespace {

// Every kind's list is held and searched the same way: one piece of code for all of them.
template <class Impl>
const Impl* find_in(const std::vector<std::unique_ptr<Impl>>& list, std::string_view name) {
  for (const auto& a : list) {
    if (a->info().name == name) return a.get();
  }
  return nullptr;
}

}  // namespace

template <class Impl>
void Registry::add_to(std::vector<std::unique_ptr<Impl>>& list, std::unique_ptr<Impl> impl) {
  if (!impl) throw Error("Registry::add: null implementation");
  check_name(impl->info().name);
  list.push_back(std::move(impl));
}

void Registry::add(std::unique_ptr<AttentionImpl> impl) { add_to(attention_, std::move(impl)); }
void Registry::add(std::unique_ptr<PrefillImpl> impl) { add_to(prefill_, std::move(impl)); }
void Registry::add(std::unique_ptr<MergeImpl> impl) { add_to(merge_, std::move(impl)); }
void Registry::add(std::unique_ptr<TopkImpl> impl) { add_to(topk_, std::move(impl)); }
void Registry::add(std::unique_ptr<IndexerAppendImpl> impl) { add_to(indexer_append_, std::move(impl)); }
void Registry::add(std::unique_ptr<IndexerLogitsImpl> impl) { add_to(indexer_logits_, std::move(impl)); }
void Registry::add(std::unique_ptr<SparsePrefillImpl> impl) { add_to(sparse_prefill_, std::move(impl)); }

const AttentionImpl* Registry::find(std::string_view name) const { return find_in(attention_, name); }
const PrefillImpl* Registry::find_prefill(std::string_view name) const { return find_in(prefill_, name); }
const MergeImpl* Registry::find_merge(std::string_view name) const { return find_in(merge_, name); }
const TopkImpl* Registry::find_topk(std::string_view name) const { return find_in(topk_, name); }
const IndexerAppendImpl* Registry::find_indexer_append(std::string_view name) const {
  return find_in(indexer_append_, name);
}
const IndexerLogitsImpl* Registry::find_indexer_logits(std::string_view name) const {
  return find_in(indexer_logits_, name);
}
const SparsePrefillImpl* Registry::find_sparse_prefill(std::string_view name) const {
  return find_in(sparse_prefill_, name);
}

void register_builtin_kernels() {
  static std::once_flag once;
  std::call_once(once, [] { add_builtin_kernels(Registry::instance()); });
}

}  // namespace mla
