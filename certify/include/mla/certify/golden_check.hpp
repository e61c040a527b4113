// The HDF5 library never runs on golden bytes for the first time in a process whose death
// loses anything. A corrupt golden can crash or hang libhdf5 itself (suites/fuzz/README.md,
// "Findings": SEGV in H5HG_read and others), and refusing such files shape by shape before the
// library reads them cannot keep up with a fuzzer. So every golden file a tool is about to read
// is first opened and read through in a child process (golden::read_through, then the
// loader's own entry points); only a file the child survived is read by the tool itself. A file
// that kills or hangs the child is refused, naming the file and the signal.
//
// Verdicts are cached by the file's sha256 for the life of the GoldenGate (one run): a file
// re-verified before each case is not read through again, and changed bytes are new bytes.
//
// Across runs, with MLA_GOLDEN_GATE_MEMORY=DIR (CTest sets it, one folder per build), the gate
// also remembers which bytes survived a read-through: one file in DIR per survivor, named by
// the sha256 of the file's sha256, the depth, this executable (path, inode, size, modification
// time) and the HDF5 library (golden::hdf5_identity). A remembered file is not read through
// again, which was most of a small run's time (0.7 of 1.0 s for one case on the 2-core VM). The
// memory holds only that fact: the family, the case list and every problem are read from the
// file by the tool itself, as after any read-through, so nothing a verdict rests on comes from
// DIR. Whoever can write to DIR can at most make the tool read, in its own process, bytes that
// no child survived: if those crash the tool the run does not finish, and a run that did not
// finish never reads as a pass. Only `ok` is remembered; a refusal is found again each run.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mla/certify/isolation.hpp"

namespace mla::certify {

// How much the child does besides the read-through.
enum class GoldenDepth {
  read_through,  // + the file's header, case list and every attention case's attributes checked
                 //   against its datasets (what a tool reads before deciding anything)
  full,          // + every case loaded through its family's loader (`mla goldens validate`)
};

struct GoldenCheck {
  enum class Kind {
    ok,       // the child read it through; `case_problems` may still refuse some cases
    invalid,  // the loader refuses the file as a whole (`problem` says why); libhdf5 survived
    crashed,  // the child died (a signal), hung past its deadline, or could not be run
  };
  Kind kind = Kind::crashed;
  // ok from the memory across runs: nothing was read, so family, schema_version, cases and
  // case_problems are empty; a caller that needs them uses a gate without the memory.
  bool remembered = false;
  std::string problem;  // invalid, crashed: why ("killed by signal SIGSEGV (Segmentation fault)")
  std::string family;
  int64_t schema_version = 0;
  std::vector<std::string> cases;
  std::map<std::string, std::string> case_problems;  // case -> the loader's refusal
  // crashed, but for the machine's reason (no process or descriptor for the child, a file-size
  // limit: host_error.hpp): the file is not to blame.
  bool host = false;
};

class GoldenGate {
 public:
  // `self`: the executable to run as the child (`mla __child golden`); `timeout_s` bounds one
  // file's check.
  // `memory`: the folder of the memory across runs (above), none when empty.
  GoldenGate(std::filesystem::path self, double timeout_s = kDefaultTimeout,
             std::filesystem::path memory = memory_from_environment());
  static constexpr double kDefaultTimeout = 600;
  static std::filesystem::path memory_from_environment();  // MLA_GOLDEN_GATE_MEMORY, or empty

  // The check of `file` whose bytes have sha256 `digest` (already verified by the caller).
  const GoldenCheck& check(const std::filesystem::path& file, const std::string& digest, GoldenDepth depth);

  // "golden file F crashes the HDF5 library (crashed: killed by signal SIGSEGV ...) when it is
  // read; it is refused" — the words every tool uses.
  static std::string refusal(const std::filesystem::path& file, const GoldenCheck& c);

 private:
  std::filesystem::path self_;
  double timeout_s_;
  std::optional<WorkDir> work_;  // created on the first check
  std::filesystem::path memory_;  // empty: no memory across runs
  std::string identity_;          // this executable and its HDF5 library (computed on first use)
  std::filesystem::path remembered(const std::string& digest);
  std::map<std::pair<std::string, GoldenDepth>, GoldenCheck> cache_;
  int runs_ = 0;
};

// `mla __child golden`: reads `file` through and writes what it found to `result`. Exit 0
// whenever it could write a result (a refused file included).
int child_check_golden(const std::filesystem::path& file, const std::filesystem::path& result, GoldenDepth depth);

}  // namespace mla::certify
