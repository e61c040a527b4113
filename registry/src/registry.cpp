#include "mla/registry/registry.hpp"

#include <mutex>

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla {

Registry& Registry::instance() {
  static Registry r;
  return r;
}

void Registry::add(std::unique_ptr<AttentionImpl> impl) {
  if (!impl) throw Error("Registry::add: null implementation");
  const std::string& name = impl->info().name;
  const bool valid = !name.empty() && name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") ==
                                          std::string::npos;
  if (!valid) throw Error(fmt::format("Registry::add: kernel name '{}' is not [a-z0-9_]+", name));
  if (find(name) != nullptr) throw Error(fmt::format("Registry::add: kernel '{}' is already registered", name));
  attention_.push_back(std::move(impl));
}

const AttentionImpl* Registry::find(std::string_view name) const {
  for (const auto& a : attention_) {
    if (a->info().name == name) return a.get();
  }
  return nullptr;
}

void register_builtin_kernels() {
  static std::once_flag once;
  std::call_once(once, [] { add_builtin_kernels(Registry::instance()); });
}

}  // namespace mla
