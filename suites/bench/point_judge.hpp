// Speed only where correct: before a kernel is timed at a point, its output there is judged by
// the one judge (mla/judge/attention.hpp: the certifier's tolerance table, entry choice and
// rules) against the C++ oracles' truth for the point's inputs. A point a kernel does not pass is
// reported as "not timed: FAIL (reasons)", never as a number: a fast wrong kernel must not reach
// a roofline or a speed-up column.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mla/core/kernel.hpp"
#include "mla/judge/attention.hpp"
#include "mla/judge/computed.hpp"

namespace mla::bench {

// The row's reason for a judgement it did not pass ("not timed: FAIL (reason; reason)"), or
// nullopt for a PASS: the one wording of every kind's failed rows (decode, prefill, merge; the
// indexer logits and the top-k, whose judgements are their own types, through the second form).
std::optional<std::string> not_timed_reason(const AttentionJudgement& j);
std::optional<std::string> not_timed_reason(bool pass, const std::vector<std::string>& reasons);

class PointJudge {
 public:
  // The verdict of `impl` at `point` (the inputs' name), from one untimed call of `prepared`:
  // nullopt when it passes, else the reason the row carries instead of a time ("not timed: FAIL
  // (...)", "not timed: refused at run time: ...", "not timed: ERROR in run(): ..."). Asked once
  // per implementation and point (Google Benchmark calls a benchmark once per repetition); the
  // truth is computed once per point and dropped when the next point comes.
  std::optional<std::string> failure(const AttentionImpl& impl, PreparedAttention& prepared, const std::string& point,
                                     const AttnInputs& in);
  // How many truths were computed and the seconds they took (the run's context says so: the
  // judging is part of the run's cost, not of any timed call).
  int truths() const { return truths_; }
  double truth_seconds() const { return truth_seconds_; }

 private:
  std::string point_;
  std::optional<ComputedTruth> truth_;
  std::map<std::string, std::optional<std::string>> verdicts_;  // "kernel/point"
  int truths_ = 0;
  double truth_seconds_ = 0;
};

}  // namespace mla::bench
