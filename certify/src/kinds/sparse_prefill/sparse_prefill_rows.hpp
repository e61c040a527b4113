// Private to the sparse_prefill kind: what the rest of the certifier needs of it.
#pragma once

#include <memory>

#include "mla/core/sparse_prefill.hpp"

namespace mla::certify {

// The rows of drawn sparse prefill calls (family fresh) carry this file.
inline constexpr const char* kFreshSparsePrefillFile = "fresh_sparse_prefill";

// An external kernel's sparse prefill entry (a plug-in's, ABI 1.5, or a Python kernel's) as the
// kind sees it: its declared info and the default check() and cost(). Its calls are made in child
// processes, never through prepare() (which throws).
std::shared_ptr<const SparsePrefillImpl> external_sparse_prefill(SparsePrefillKernelInfo info);

}  // namespace mla::certify
