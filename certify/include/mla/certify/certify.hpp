// The certification run behind `mla certify`: every selected implementation (registered
// kernels, fault kernels for the certifier's own tests, external plug-ins) on every selected case
// of the golden catalog, each call in a child process with a deadline, judged in this process by
// the one judge (mla/judge), recorded in a certificate (JSON, Markdown, JUnit XML) that is
// rewritten after every case.
//
// Along its seams (certify/src): plan (which implementations, which cases), resume (which
// results of a previous certificate still hold), attention case (one case for every
// implementation), append case (plug-ins' appends), isolation (child processes) and the one wire
// format of the messages exchanged with them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/reports/certificate.hpp"

namespace mla::certify {

// Cases holding more cache slots than this are never run for information on a shape the
// kernel does not claim: the probe is a courtesy, and must stay cheap next to the claimed work.
inline constexpr int64_t kProbeMaxCacheTokens = 1 << 16;

// Files the certificate is written to, inside Options::out.
inline constexpr const char* kJsonName = "certificate.json";
inline constexpr const char* kMarkdownName = "certificate.md";
inline constexpr const char* kJunitName = "certificate.junit.xml";

struct Options {
  std::filesystem::path goldens, out;
  std::vector<std::string> kernels;   // registry (or fault kernel) names; empty and no plug-ins: all
  std::vector<std::filesystem::path> plugins;  // shared libraries exposing the C ABI
  // Python kernels (module.path:ATTR or path/to/file.py:ATTR), run by `python_exe` (empty: the
  // first python3 on PATH that imports torch) through the door (kernels/python/mla_door).
  std::vector<std::string> pythons;
  std::filesystem::path python_exe;
  std::vector<std::string> families;  // certified families (as the certificate names them); empty: all
  std::vector<std::string> faults;    // fault kernels (mla/faults/faults.hpp) by name (--fault)
  std::optional<std::string> case_regex;  // ECMAScript, searched in "<family>/<case>"
  std::optional<int64_t> max_tokens;      // skip cases whose cache holds more tokens
  // --long: the drawn cases include the long prefill cases (a varlen batch of 16K+ tokens, a chunk
  // over 32K+ keys; prefill/fresh.cpp): seconds per prefill implementation at one head, the
  // oracles' cost growing with the heads a kernel claims at least.
  bool long_cases = false;
  int repeats = 2;  // runs per case of a registered kernel; bitwise identical across them (plug-ins: drawn, >= 3)
  std::optional<uint64_t> seed;  // the run's seed; drawn at run time when absent (recorded either way)
  double timeout_s = 600;  // per (kernel, case) child process
  bool isolate = true;     // false: registered kernels run in this process (plug-ins never do)
  bool resume = false;     // reuse results of <out>/certificate.json where still valid
  bool probe_unclaimed = true;  // run unclaimed shapes for information (cheap cases only)
  // Python kernels too: off by default, since each informational run costs two Python child
  // processes that import torch (about 1.5 s here), more than a note on an unclaimed shape is worth.
  bool probe_python = false;
  // Exit kExitCoverage unless every selected case is claimed and judged (reports/coverage.hpp);
  // the certificate is the same either way.
  bool require_full_coverage = false;
  std::filesystem::path self_exe;  // executable re-run as the child; empty: this one
  // --shard I/N: only the selected cases whose identity falls in shard I (shard_of); 1-based.
  int shard_index = 0, shard_count = 0;  // 0: no shard
};

// The shard (1..count) a case belongs to: from the sha256 of its identity "<family>/<case>"
// alone, so every machine of a fleet computes the same split whatever its file order, timing or
// selection, and every case is in exactly one shard (a stored case's twin, "<case>~twin", in its
// case's).
int shard_of(const std::string& family, const std::string& name, int count);

// Parses "I/N" (1 <= I <= N); UsageError naming the text otherwise.
std::pair<int, int> parse_shard(const std::string& text);

// `mla merge DIR... --out OUT`: the certificates of the shards of one certification combined
// into one (JSON, Markdown, JUnit in OUT), judged by the same rules as a single run. Refused
// (UsageError naming the field and both values) when the shards differ in catalog, tool version,
// options, tolerance table or implementation builds, when one is not a shard's certificate, or
// when two hold the same shard or the same case. A missing shard is not refused: the merged
// certificate is INCOMPLETE and names it.
reports::Certificate merge(const std::vector<std::filesystem::path>& shard_dirs, const std::filesystem::path& out,
                           std::ostream& progress);

// Bad options (unknown kernel or family, a selection with no case, an invalid regex, a
// plug-in that cannot be loaded), an unreadable catalog and an unwritable report folder are
// UsageError; everything that goes wrong inside a case is recorded in the certificate instead.
class UsageError : public Error {
 public:
  using Error::Error;
};

// The machine, not an implementation, kept the run from recording what it did (a full disk or
// file system, a file-size limit, no file descriptors or memory left for the certifier itself).
// `mla certify` exits kExitIncomplete: nothing was judged wrong, and --resume finishes the run.
class HostFailure : public Error {
 public:
  using Error::Error;
};

// The handlers of SIGINT, SIGTERM and SIGHUP that ask a run to stop (and of SIGXFSZ, which
// must not kill the certifier): `mla certify` installs them as its first step, so a signal at
// any point of a run, before run() is even called, is honoured by it.
void install_stop_handlers();

// Runs the whole certification, writing the certificate after every case. Progress goes to
// `progress`. Before anything slow, a certificate already in the report folder is rewritten
// as superseded (INCOMPLETE, naming this run), so no older verdict stays readable as the
// current one while this run goes. Returns the final certificate; one that SIGINT, SIGTERM or
// SIGHUP stopped (within the step in progress, in any phase; a second signal ends the process
// at once) is returned and written with `complete` false, and reads INCOMPLETE. HostFailure
// when the certificate cannot be written.
reports::Certificate run(const Options& options, std::ostream& progress);

// The three files of certificate `c` (kJsonName, kMarkdownName, kJunitName) in `dir`. Throws
// reports::WriteError with the system's reason.
void write_outputs(const reports::Certificate& c, const std::filesystem::path& dir);

// Throws UsageError naming `dir` when a certificate cannot be written there (checked before any
// work is done).
void check_writable_folder(const std::filesystem::path& dir);

// sha256 of the tolerance table as the certificate records it: results judged under another
// table are never reused by --resume.
std::string tolerance_table_digest();

}  // namespace mla::certify
