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
  GoldenGate(std::filesystem::path self, double timeout_s = kDefaultTimeout);
  static constexpr double kDefaultTimeout = 600;

  // The check of `file` whose bytes have sha256 `digest` (already verified by the caller).
  const GoldenCheck& check(const std::filesystem::path& file, const std::string& digest, GoldenDepth depth);

  // "golden file F crashes the HDF5 library (crashed: killed by signal SIGSEGV ...) when it is
  // read; it is refused" — the words every tool uses.
  static std::string refusal(const std::filesystem::path& file, const GoldenCheck& c);

 private:
  std::filesystem::path self_;
  double timeout_s_;
  std::optional<WorkDir> work_;  // created on the first check
  std::map<std::pair<std::string, GoldenDepth>, GoldenCheck> cache_;
  int runs_ = 0;
};

// `mla __child golden`: reads `file` through and writes what it found to `result`. Exit 0
// whenever it could write a result (a refused file included).
int child_check_golden(const std::filesystem::path& file, const std::filesystem::path& result, GoldenDepth depth);

}  // namespace mla::certify
