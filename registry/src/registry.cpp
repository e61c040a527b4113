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
      find_topk(name) != nullptr || find_indexer_append(name) != nullptr) {
    throw Error(fmt::format("Registry::add: kernel '{}' is already registered", name));
  }
}

void Registry::add(std::unique_ptr<AttentionImpl> impl) {
  if (!impl) throw Error("Registry::add: null implementation");
  check_name(impl->info().name);
  attention_.push_back(std::move(impl));
}

void Registry::add(std::unique_ptr<PrefillImpl> impl) {
  if (!impl) throw Error("Registry::add: null implementation");
  check_name(impl->info().name);
  prefill_.push_back(std::move(impl));
}

void Registry::add(std::unique_ptr<MergeImpl> impl) {
  if (!impl) throw Error("Registry::add: null implementation");
  check_name(impl->info().name);
  merge_.push_back(std::move(impl));
}

void Registry::add(std::unique_ptr<TopkImpl> impl) {
  if (!impl) throw Error("Registry::add: null implementation");
  check_name(impl->info().name);
  topk_.push_back(std::move(impl));
}

void Registry::add(std::unique_ptr<IndexerAppendImpl> impl) {
  if (!impl) throw Error("Registry::add: null implementation");
  check_name(impl->info().name);
  indexer_append_.push_back(std::move(impl));
}

const IndexerAppendImpl* Registry::find_indexer_append(std::string_view name) const {
  for (const auto& a : indexer_append_) {
    if (a->info().name == name) return a.get();
  }
  return nullptr;
}

const TopkImpl* Registry::find_topk(std::string_view name) const {
  for (const auto& a : topk_) {
    if (a->info().name == name) return a.get();
  }
  return nullptr;
}

const MergeImpl* Registry::find_merge(std::string_view name) const {
  for (const auto& a : merge_) {
    if (a->info().name == name) return a.get();
  }
  return nullptr;
}

const AttentionImpl* Registry::find(std::string_view name) const {
  for (const auto& a : attention_) {
    if (a->info().name == name) return a.get();
  }
  return nullptr;
}

const PrefillImpl* Registry::find_prefill(std::string_view name) const {
  for (const auto& a : prefill_) {
    if (a->info().name == name) return a.get();
  }
  return nullptr;
}

void register_builtin_kernels() {
  static std::once_flag once;
  std::call_once(once, [] { add_builtin_kernels(Registry::instance()); });
}

}  // namespace mla
