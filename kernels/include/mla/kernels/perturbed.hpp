// Deliberately wrong implementations. Never registered in the builtin registry: the certifier's
// own tests run them to prove that the suite catches the bug each one carries.
#pragma once

#include <memory>

#include "mla/kernels/attention.hpp"

namespace mla {

// Like cpu_mla_fp64 in every respect (name `cpu_mla_fp64_dropped_last_token`) except that it
// never attends the last cache token of a sequence: dense queries stop one token early and
// sparse indices pointing at position L-1 are skipped — the classic off-by-one in a kernel's
// tail-tile handling. A sequence of length 1 becomes an empty row (out 0, lse +inf).
std::unique_ptr<AttentionImpl> make_dropped_last_token_kernel();

}  // namespace mla
