// Running one kernel on one case, in whichever process: the certifier's parent calls execute()
// directly (--in-process) or starts a child (`mla __child run ...`) that reads the case inputs
// from a file, calls execute() and writes a RunResult file back. Judging against the truth
// always happens in the parent: a child only runs code, it never decides a verdict.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mla/kernels/attention.hpp"

namespace mla::certify {

struct RunResult {
  enum class Status { ran, unsupported, error };
  Status status = Status::error;
  std::string message;  // unsupported / error: why
  AttnOutputs outputs;  // ran: the first run's results
  double run_seconds = 0;  // fastest run() + synchronize()
  std::optional<double> bytes, flops;
  // Faults found while running, each a FAIL reason: results differing between repeated runs,
  // inputs changed by the kernel, writes outside its output (plug-ins).
  std::vector<std::string> reasons;
};

// Runs `impl` on `in` `repeats` times (at least 1). `enforce_caps` false skips the capability
// check, for informational runs of shapes the kernel does not claim. Never throws: a kernel's
// exception becomes Status::error.
RunResult execute(const AttentionImpl& impl, const AttnInputs& in, int repeats, bool enforce_caps);

// Owned copies of a case's inputs, as written to and read from an inputs file.
using CaseInputs = AttnBuffers;

// Binary files with a JSON header line; every size is checked on reading (mla::Error).
void write_inputs(const std::filesystem::path& file, const AttnInputs& in);
CaseInputs read_inputs(const std::filesystem::path& file);
void write_result(const std::filesystem::path& file, const RunResult& r);
RunResult read_result(const std::filesystem::path& file);

// What a child needs to build the kernel it runs.
struct KernelRef {
  std::optional<std::string> builtin;          // registry name
  std::optional<std::string> extra;            // certifier self-test kernel (make_extra_kernel)
  std::optional<std::filesystem::path> plugin; // shared library (C ABI)
};

// `mla __child run`: exit 0 after writing the result file (whatever the kernel did, short of
// killing the process); non-zero only when the child itself could not work.
int child_run(const KernelRef& kernel, const std::filesystem::path& inputs, const std::filesystem::path& result,
              int repeats, bool enforce_caps);
// `mla __child describe --plugin`: loads the plug-in and writes its descriptor as JSON.
int child_describe(const std::filesystem::path& plugin, const std::filesystem::path& result);

nlohmann::json capabilities_json(const Capabilities& c);
Capabilities capabilities_from_json(const nlohmann::json& j);

}  // namespace mla::certify
