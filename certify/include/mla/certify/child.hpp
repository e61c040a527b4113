// The child side of process isolation: `mla __child call | describe | claims` builds the
// implementation it was named; `call` calls it on the buffers its parent laid out in shared
// memory, `describe` and `claims` write back what the plug-in said (protocol.hpp). It never
// judges: verdicts are the parent's. The parent calls execute()
// directly for --in-process runs of registered kernels.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "mla/certify/protocol.hpp"
#include "mla/core/kernel.hpp"

namespace mla::certify {

// Runs `impl` on `in` `repeats` times (at least 1): the capability check (unless
// `enforce_caps` is false, for informational runs of shapes the kernel does not claim), the cost
// model, prepare, and every run timed and compared bitwise with the first; inputs checksummed
// before and after. Never throws: a kernel's exception becomes Status::error.
RunResult execute(const AttentionImpl& impl, const AttnInputs& in, int repeats, bool enforce_caps);

// Where `b` (a repeated run's `what`: "out", "lse") differs from `a`, bitwise, so that NaN
// payloads and signed zeros count too (run() must be repeatable exactly); nullopt when equal.
std::optional<std::string> first_difference(const std::vector<double>& a, const std::vector<double>& b,
                                            const char* what);

// A Python kernel (`mla certify --python SPEC`): its children are the user's Python running the
// door's child (kernels/python/mla_door/child.py), never this executable.
struct PythonRef {
  std::string spec;               // module.path:ATTR or /abs/path/file.py:ATTR
  std::filesystem::path exe;      // the python that imports torch
  std::filesystem::path child;    // <door>/mla_door/child.py
};

// What a child needs to build the implementation it runs: exactly one is set.
struct KernelRef {
  std::optional<std::string> builtin;           // registry name
  std::optional<std::string> fault;             // a fault kernel (mla/faults/faults.hpp) by name
  std::optional<std::filesystem::path> plugin;  // shared library (C ABI)
  std::optional<PythonRef> python;              // a Python callable through the door
};

// The rehearsal's stand-in for a CUDA context's start-up. On a machine without a GPU no process
// creates one, so a time plan measured there would not see what the GPU machine pays once in
// every process that runs a CUDA kernel (driver, context, cuBLAS handles: a second or more).
// With MLA_SIMULATED_CONTEXT_SECONDS set (0 to 60; unset or empty: off), every process that runs
// a kernel or describes a plug-in sleeps that long once, where it would create its context: each
// child of a case, a plug-in's describe child (its unavailable() asks the driver), and the
// certifier itself the first time it calls a kernel in-process. The claims children are not
// charged: can_implement answers from the shape, with no reason to touch the device. MLA_SIMULATED_CONTEXT_LOG names a file that gets one line per
// charged process ("<pid> <what> <seconds>"). Both throw Error naming the variable and its value
// when the value is not such a number.
inline constexpr const char* kSimulatedContextEnv = "MLA_SIMULATED_CONTEXT_SECONDS";
inline constexpr const char* kSimulatedContextLogEnv = "MLA_SIMULATED_CONTEXT_LOG";
inline constexpr double kSimulatedContextMax = 60;
std::optional<double> simulated_context_seconds();
void charge_simulated_context(const char* what);

// The child side of one (kernel, case): maps the parent's shared buffers (memfd inherited on
// the descriptor the `plan` message names, with the layout), makes the guard pages inaccessible, and makes
// the planned calls, stopping itself (SIGSTOP) after each call of the case so the parent can
// audit it. It writes only the outputs and the bounded control block; every verdict is the
// parent's. A plan of kind kEntryCalls makes the plug-in's append or prefill calls instead,
// each on buffers of its own the parent laid out (isolation/entry_calls.hpp).
int child_call(const KernelRef& kernel, const std::filesystem::path& plan, bool enforce_caps);
// `mla __child describe`: loads the plug-in and writes its validated descriptor.
int child_describe(const std::filesystem::path& plugin, const std::filesystem::path& result);
// `mla __child claims`: asks the plug-in's can_implement (ABI 1.2) about every shape of the query
// and writes its answers, in order; a plug-in without one answers ok to everything.
int child_claims(const std::filesystem::path& plugin, const std::filesystem::path& query,
                 const std::filesystem::path& result);

}  // namespace mla::certify
