// Deliberately broken implementations, run in this process: the certifier's tests run them
// (`mla certify --fault NAME`) to prove that the suite catches the bug each one carries
// and that every path of the certifier (FAIL, ERROR, a repeatability FAIL, UNSUPPORTED) is taken
// when it should be. Never registered. Each wraps the registered oracle (cpu_mla_fp64) and
// applies its fault outside it, so no oracle has a fault switch.
//
// This folder is the one home of broken implementations: these, the variants of the plug-in
// template with one real-world bug or attack each (plugins/), and plug-ins whose descriptor
// breaks one rule (kernels/faults/CMakeLists.txt lists them all).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mla/core/kernel.hpp"

namespace mla::faults {

// The names make() accepts, each with the kernel it builds:
//   dropped_last  cpu_mla_fp64_dropped_last_token: never attends the last cache token of a
//                 sequence (dense queries stop one token early, sparse indices pointing at L-1
//                 are skipped): the classic off-by-one of a tail tile. A sequence of length 1
//                 becomes an empty row (out 0, lse +inf).
//   throws        selftest_throws: run() throws.
//   leaky         selftest_leaky: from the second run on, one output element is NaN (state
//                 carried from one call into the next, docs/field.md, "Bugs", 12).
//   bf16_only     selftest_bf16_only: correct, but claims the bf16 cache only.
//   untuned_heads selftest_untuned_heads: for 17 to 47 heads (between tile sizes 16 and 64) the
//                 last head's output stays zero. No catalog case has such a head count, so only
//                 the fresh family catches it: what a resume must never lose.
const std::vector<std::string>& names();
// Throws mla::Error naming the known faults on an unknown name.
std::unique_ptr<AttentionImpl> make(const std::string& name);

}  // namespace mla::faults
