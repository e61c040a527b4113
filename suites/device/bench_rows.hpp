// Benchmark rows on disk as each benchmark completes, for runs that may be stopped by a timeout
// (the device check's bench step): a Google Benchmark reporter that keeps its file a complete
// JSON document after every benchmark, and a reporter that forwards to several.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

namespace mla::device {

// Rows on disk as each benchmark completes. After the context and after every benchmark the
// reporter rewrites `path` (to path.tmp, then rename: a reader never sees half a file) as a
// complete Google Benchmark JSON document of the rows so far, plus a top-level
//   "mla_run": {"complete": false|true, "rows": N, "last": "<last row>", "stopped": "<why>"}
// where complete turns true only in Finalize, i.e. when the run ended normally; a run killed
// by a timeout leaves every finished row and complete false. `stopped` comes from `note` (empty:
// no entry). Rows are Google Benchmark's own JSON rows (its JSONReporter writes them).
std::unique_ptr<benchmark::BenchmarkReporter> incremental_json_reporter(std::string path,
                                                                        std::function<std::string()> note = {});
// Forwards every call to each of `to` (not owned), e.g. the console and the incremental file.
std::unique_ptr<benchmark::BenchmarkReporter> tee_reporter(std::vector<benchmark::BenchmarkReporter*> to);

}  // namespace mla::device
