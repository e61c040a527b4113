// One registry of implementations, filled by one explicit function.
//
// Why explicit: a registry filled by static initializers inside a static library is dropped by
// the linker, so tests, benchmarks and the certifier all call `register_builtin_kernels`
// (idempotent) and then iterate. Adding a kernel = one source file in kernels/cpu or
// kernels/cuda (CMake picks it up) + one line in the list of registry/src/builtin.cpp.
//
// The registry sits above every kernel library (CPU and CUDA) and below the tools that iterate
// it, so no kernel library needs another.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "mla/core/kernel.hpp"

namespace mla {

class Registry {
 public:
  static Registry& instance();
  // Throws mla::Error on a duplicate name or a name that is not [a-z0-9_]+.
  void add(std::unique_ptr<AttentionImpl> impl);
  const std::vector<std::unique_ptr<AttentionImpl>>& attention() const { return attention_; }
  // nullptr when absent.
  const AttentionImpl* find(std::string_view name) const;

 private:
  std::vector<std::unique_ptr<AttentionImpl>> attention_;
};

// Adds every built-in implementation (the list in registry/src/builtin.cpp) to `registry`. The
// CUDA kernels are built in whenever a CUDA toolkit is; on a machine without a usable GPU their
// unavailable() says why and callers skip them.
void add_builtin_kernels(Registry& registry);
// add_builtin_kernels(Registry::instance()) once; later calls do nothing.
void register_builtin_kernels();

}  // namespace mla
