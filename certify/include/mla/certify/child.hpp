// The child side of process isolation: `mla __child run | append | describe | claims` builds the
// implementation it was named, calls it on the case it was handed and writes back what happened
// (protocol.hpp). It never judges: verdicts are the parent's. The parent calls execute()
// directly for --in-process runs of registered kernels.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "mla/certify/protocol.hpp"
#include "mla/core/kernel.hpp"

namespace mla::certify {

// Runs `impl` on `in` `repeats` times (at least 1): the capability check (unless
// `enforce_caps` is false, for informational runs of shapes the kernel does not claim), the cost
// model, prepare, and every run timed and compared bitwise with the first; inputs checksummed
// before and after. Never throws: a kernel's exception becomes Status::error.
RunResult execute(const AttentionImpl& impl, const AttnInputs& in, int repeats, bool enforce_caps);

// What a child needs to build the implementation it runs: exactly one is set.
struct KernelRef {
  std::optional<std::string> builtin;           // registry name
  std::optional<std::string> fault;             // a fault kernel (mla/faults/faults.hpp) by name
  std::optional<std::filesystem::path> plugin;  // shared library (C ABI)
};

// `mla __child run`: exit 0 after writing the result (whatever the kernel did, short of killing
// the process); non-zero only when the child itself could not work.
int child_run(const KernelRef& kernel, const std::filesystem::path& inputs, const std::filesystem::path& result,
              int repeats, bool enforce_caps);
// `mla __child append`: calls the plug-in's append `repeats` (>= 2) times, each on a fresh copy
// of the cache, and writes the first call's outcome plus any difference between the calls.
int child_append(const std::filesystem::path& plugin, const std::filesystem::path& inputs,
                 const std::filesystem::path& result, int repeats);
// `mla __child describe`: loads the plug-in and writes its validated descriptor.
int child_describe(const std::filesystem::path& plugin, const std::filesystem::path& result);
// `mla __child claims`: asks the plug-in's can_implement (ABI 1.2) about every shape of the query
// and writes its answers, in order; a plug-in without one answers ok to everything.
int child_claims(const std::filesystem::path& plugin, const std::filesystem::path& query,
                 const std::filesystem::path& result);

}  // namespace mla::certify
