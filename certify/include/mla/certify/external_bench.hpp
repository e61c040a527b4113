// Kernels from outside the suite, opened for timing (`mla-bench --mla_plugin=LIB.so`,
// `--mla_python=SPEC`), not for certification. Certification runs an external kernel in fresh
// child processes with a drawn number of calls and audits every buffer; a benchmark needs the
// opposite: the same prepared inputs called thousands of times with nothing else on the timed
// path. So here a C plug-in runs in the benchmark's own process through the C ABI, and a Python
// kernel in one long-lived child of the Python door that keeps its inputs mapped and makes one
// call per request. Neither is trusted for anything a verdict rests on: the benchmark judges each
// kernel's output at each point with the one judge before it times that point, from the outputs
// alone, exactly as `results()` returns them in the canonical layout.
//
// Every external kernel comes with its calling path's own cost: the same path with a kernel that
// does nothing (`overhead`), timed in the same run, so a report can show how much of a short
// call is the door rather than the kernel.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "mla/core/indexer_logits.hpp"
#include "mla/core/kernel.hpp"
#include "mla/core/merge.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/core/sparse_prefill.hpp"
#include "mla/core/topk.hpp"

namespace mla::certify {

struct ExternalBenchKernel {
  // The kernel as an implementation: info() is its declaration (validated with the rules
  // `mla certify` applies), check() asks its own can_implement as well as its capabilities, and
  // results() returns out/lse already normalized to the suite's conventions (lse base e,
  // [b, h, s_q], the empty-row value), widened to double.
  // Null for a library without a decode (a plug-in of other entries only).
  std::unique_ptr<AttentionImpl> impl;
  // The calling path with an empty kernel (returns at once, writes nothing): its run() costs
  // what the path costs. Its outputs are meaningless and never judged. Named "<name>~overhead".
  std::unique_ptr<AttentionImpl> overhead;
  // The kernel's own answer on a shape with the FP8 scale format of the inputs (a shape alone
  // does not carry it): nullopt when it takes the shape, else its reason. Empty for a kernel that
  // answers nothing beyond its capabilities (check() covers them).
  std::function<std::optional<std::string>(const AttnShape&, std::optional<ScaleFmt>)> claim;
  // The kernel's other entries (a C plug-in's, ABI 1.4 and 1.5, called in this process; a Python
  // kernel's, each in a long-lived bench child of its own over the certifier's layout of that
  // entry's call) as implementations of their kinds, each with its calling path's overhead row
  // beside it (the entry replaced by one that returns at once, or no call at all); null where it
  // has none. Their results() are in the entry's declared conventions, as a registered kernel's:
  // the benchmark makes them canonical before judging. A Python entry's prepared call clocks its
  // own calls in its child (mla::SelfTimed), as a Python decode does. prepare() asks the entry's
  // own can_implement first (ABI 1.6, or the Python kernel's, in the door's claims child): a call
  // it does not claim throws UnsupportedError in its words and is never made.
  std::unique_ptr<PrefillImpl> prefill, prefill_overhead;
  std::unique_ptr<MergeImpl> merge, merge_overhead;
  std::unique_ptr<TopkImpl> topk, topk_overhead;
  std::unique_ptr<IndexerLogitsImpl> indexer_logits, indexer_logits_overhead;
  std::unique_ptr<SparsePrefillImpl> sparse_prefill, sparse_prefill_overhead;
  // Where it came from, for the report: {"kind": "plugin", "path", "sha256", "version", "abi"}
  // or {"kind": "python", "spec", "module_digest", "python", "torch", "executable"}.
  nlohmann::json origin;
};

// The row name of kernel `name`'s calling path with an empty kernel (ExternalBenchKernel::overhead).
inline std::string overhead_name(const std::string& name) { return name + "~overhead"; }

// dlopen()s the plug-in in this process (its initializers run here: benchmark only what you would
// load into your own server). Throws mla::UsageError naming the path and what was wrong (not a
// file, not a plug-in, a descriptor that breaks a rule).
ExternalBenchKernel open_plugin_for_bench(const std::filesystem::path& library);

// Describes the kernel in a child of the door (this process never imports the user's code) and
// returns implementations (its decode, and each other entry it has) whose prepare() starts a
// long-lived child over the point's inputs.
// `self` is this executable's path (the door is found beside it or in the source tree, as for
// `mla certify --python`); `python_exe` empty: python3 on PATH. Throws mla::UsageError for a
// malformed SPEC or a module that does not import; no Python with torch, or a "cuda" kernel
// without a device: impl->unavailable(). Then run() throws mla::UnsupportedError for a call the
// kernel refused (mla_door.Unsupported), mla::Error with the kernel's message for one that
// raised, and mla::Error naming the signal or exit status and the child's last output for a
// child that died or ran past MLA_BENCH_CALL_TIMEOUT seconds (default 120; it is killed). The
// child is killed and reaped when the PreparedAttention is destroyed.
ExternalBenchKernel open_python_for_bench(const std::string& spec, const std::filesystem::path& self,
                                          const std::filesystem::path& python_exe = {});

}  // namespace mla::certify
