#include "mla/kernels/registry.hpp"

#include <mutex>

#include <fmt/format.h>

#include "../cpu/cpu_kernels.hpp"
#include "mla/core/error.hpp"

namespace mla {

#if defined(MLA_HAVE_CUDA_KERNELS)
// kernels/cuda (mla/cuda/register.hpp); mla_kernels is built with MLA_HAVE_CUDA_KERNELS and
// linked with mla_kernels_cuda only when a CUDA toolkit is present.
void register_cuda_kernels(Registry& registry);
#endif

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
  std::call_once(once, [] {
    Registry& r = Registry::instance();
    r.add(cpu::make_cpu_mla_fp64());
    r.add(cpu::make_cpu_naive_mha_fp64());
    r.add(cpu::make_cpu_naive_mha_fp32());
#if defined(MLA_HAVE_CUDA_KERNELS)
    register_cuda_kernels(r);
#endif
  });
}

}  // namespace mla
