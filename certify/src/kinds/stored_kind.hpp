// Private to mla_certify: what the kinds whose kernels are registered ones of one kind only
// (prefill, merge) share. Their stored cases are planned one by one (Session::kind_cases), each
// certified for the implementations with the kind's entry point; their kernels run in this
// process (no child transport exists for them yet), each call repeated and compared bitwise.
#pragma once

#include <chrono>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "mla/certify/case_kind.hpp"
#include "mla/certify/child.hpp"
#include "mla/core/error.hpp"
#include "mla/judge/attention.hpp"
#include "run/session.hpp"

namespace mla::certify {

class StoredCasesKind : public CaseKind {
 public:
  bool common() const override { return false; }
  void plan(Session& s, const golden::Family& fam, const std::vector<std::string>& files,
            std::vector<std::string>& unused) const override;
  bool has_cases(const Session& s) const override;
  std::string why_none(const Session& s) const override;
  void cut_to_shard(Session& s) const override;
  std::function<bool(const reports::CaseResult&)> reruns(const Session& s) const override;
  bool certify_stored(Session& s) const override;

 protected:
  // One stored case for the implementations of `pending` (those --resume did not keep), after
  // its golden file was verified again; records one row for each.
  virtual void certify_case(Session& s, const CaseRef& ref, const std::vector<const Implementation*>& pending) const = 0;
};

// One kernel's calls on one case in this process: its outputs (of the first call, in its declared
// conventions), the fastest call, and what went wrong around them.
template <class Outputs>
struct InProcessRun {
  enum class Status { ran, unsupported, error };
  Status status = Status::error;
  std::string message;                // unsupported / error: why
  Outputs outputs;
  double run_seconds = 0;
  std::vector<std::string> reasons;   // FAIL reasons: calls that differ, inputs changed by the kernel
};

// Calls `prepare()`'s result `calls` times (at least 2: a second call must repeat the first
// bitwise), timing each; `inputs_digest` is taken before and after, so a kernel that writes its
// const inputs is caught. Never throws: an exception is Status::error with its message; an
// UnsupportedError from prepare() or run() (after check() accepted the case) Status::unsupported.
template <class Prepared, class Outputs>
InProcessRun<Outputs> call_in_process(const std::function<std::unique_ptr<Prepared>()>& prepare, int calls,
                                      const std::function<std::string()>& inputs_digest) {
  using Clock = std::chrono::steady_clock;
  InProcessRun<Outputs> r;
  try {
    const auto before = inputs_digest();
    std::unique_ptr<Prepared> p;
    try {
      p = prepare();
    } catch (const UnsupportedError& e) {
      r.status = InProcessRun<Outputs>::Status::unsupported;
      r.message = fmt::format("prepare refused a case check() accepted: {}", e.what());
      return r;
    }
    double best = std::numeric_limits<double>::infinity();
    for (int call = 0; call < std::max(2, calls); ++call) {
      const auto t0 = Clock::now();
      try {
        p->run();
        p->synchronize();
      } catch (const UnsupportedError& e) {
        r.status = InProcessRun<Outputs>::Status::unsupported;
        r.message = fmt::format("refused at run time: {}", e.what());
        return r;
      }
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
      auto res = p->results();
      if (call == 0) {
        r.outputs = std::move(res);
      } else if (r.reasons.empty()) {
        if (auto d = first_difference(r.outputs.out, res.out, "out")) r.reasons.push_back(*d);
        if (auto d = first_difference(r.outputs.lse, res.lse, "lse")) r.reasons.push_back(*d);
      }
    }
    r.run_seconds = best;
    if (inputs_digest() != before) r.reasons.push_back("inputs changed by the kernel");
    r.status = InProcessRun<Outputs>::Status::ran;
  } catch (const std::exception& e) {
    r = {};
    r.status = InProcessRun<Outputs>::Status::error;
    r.message = fmt::format("exception: {}", e.what());
  } catch (...) {
    r = {};
    r.status = InProcessRun<Outputs>::Status::error;
    r.message = "exception of unknown type";
  }
  return r;
}

// The row of a run: a refusal after check() accepted is a broken claim (FAIL), an exception
// ERROR, else the run's own reasons and the judgement `judge()` makes of its canonical outputs.
template <class Outputs>
void judge_in_process(reports::CaseResult& r, const InProcessRun<Outputs>& run,
                      const std::function<AttentionJudgement()>& judge) {
  using Status = typename InProcessRun<Outputs>::Status;
  if (run.status == Status::unsupported) {
    r.verdict = tol::Verdict::fail;
    r.cause = reports::Cause::broken_claim;
    r.reasons.push_back(fmt::format("refused a case it claims (its check() accepted it): {}", run.message));
    return;
  }
  if (run.status == Status::error) {
    r.verdict = tol::Verdict::error;
    r.reasons.push_back(run.message);
    return;
  }
  r.run_seconds = run.run_seconds;
  r.reasons = run.reasons;
  try {
    auto j = judge();
    r.out = std::move(j.out);
    r.lse = std::move(j.lse);
    for (auto& why : j.reasons) r.reasons.push_back(std::move(why));
  } catch (const std::exception& e) {
    r.verdict = tol::Verdict::error;
    r.reasons.push_back(fmt::format("the results could not be judged: {}", e.what()));
    return;
  }
  r.verdict = r.reasons.empty() ? tol::Verdict::pass : tol::Verdict::fail;
}

// The calls of a case: --repeat, at least two (the second must repeat the first bitwise).
inline int in_process_calls(const Session& s) { return std::max(2, s.options.repeats); }

// What becomes of a drawn case of `name` (rows of `file`, family fresh) for `k`: not this run's
// (--case, --shard), its previous row kept by --resume (recorded here), or to be run.
enum class Drawn { not_selected, kept, run };
Drawn drawn_case(Session& s, const Implementation& k, const std::string& file, const std::string& name);

}  // namespace mla::certify
