// What a certificate covers, per implementation: how many of the selected cases it was judged
// on, what its declared claims leave out, and the ranges of the catalog's cases next to the
// claimed and the passed ones. Computed from the certificate alone (the case shapes and the
// capabilities recorded in each implementation's origin), so a resumed or merged certificate
// says exactly what a fresh one would.
#pragma once

#include <string>
#include <vector>

#include "mla/reports/certificate.hpp"

namespace mla::reports {

struct Coverage {
  int cases = 0;      // rows of the implementation (the selection)
  int judged = 0;     // PASS + FAIL (+ ERROR: run and found broken)
  int passed = 0;
  int not_claimed = 0, unsupported = 0, skipped = 0, host_error = 0;
  int size_filtered = 0;  // SKIPPED by --max-tokens: excluded by the user, not by the implementation
  // What the claims leave out, in the words of a headline: "fp8", "sparse", "heads > 16",
  // "page 16", "variable lengths"; a refusal the capabilities do not explain is counted as
  // "N by its own refusal".
  std::vector<std::string> claims_exclude;
  // One row per dimension: the selected cases' range, the claimed range, the passed range.
  struct Row {
    std::string dimension, catalog, claimed, passed;
  };
  std::vector<Row> table;
  // Every case that was not excluded by a size filter was claimed and judged (no NOT_CLAIMED,
  // UNSUPPORTED, SKIPPED or HOST_ERROR row).
  bool full() const { return not_claimed + unsupported + host_error + (skipped - size_filtered) == 0; }
};

Coverage coverage(const KernelReport& k);

// The verdict of one implementation: FAIL (a FAIL or ERROR row), INCOMPLETE (a HOST_ERROR row,
// or the run did not finish), PASS (something passed), else SKIPPED (nothing could run here)
// or NOT_CLAIMED (nothing selected is claimed).
std::string kernel_verdict(const KernelReport& k, bool run_complete);

// "PASS on 5 of 27 cases (claims exclude: fp8, sparse, heads > 16, page 16)".
std::string headline(const KernelReport& k, bool run_complete);

}  // namespace mla::reports
