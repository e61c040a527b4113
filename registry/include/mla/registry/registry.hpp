// One registry of implementations, filled by one explicit function.
//
// Why explicit: a registry filled by static initializers inside a static library is dropped by
// the linker, so tests, benchmarks and the certifier all call `register_builtin_kernels` (idempotent)
// and then iterate. Adding a kernel = one source file + one line in kernels/registry.cpp.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "mla/kernels/attention.hpp"

namespace mla {

class Registry {
 public:
  static Registry& instance();
  // Throws mla::Error on a duplicate name.
  void add(std::unique_ptr<AttentionImpl> impl);
  const std::vector<std::unique_ptr<AttentionImpl>>& attention() const { return attention_; }
  // nullptr when absent.
  const AttentionImpl* find(std::string_view name) const;

 private:
  std::vector<std::unique_ptr<AttentionImpl>> attention_;
};

// Registers every built-in implementation once; later calls do nothing.
void register_builtin_kernels();

}  // namespace mla
