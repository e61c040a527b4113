// Private to mla_certify: what the kinds whose kernels are registered ones of one kind only
// share (prefill, merge, the indexer logits, and the kinds drawn at run time only: top-k and the
// indexer append, drawn_kind.hpp). Registered kernels run in this process, each call repeated
// and compared bitwise; an external kernel's entry in child processes (isolation/entry_calls.hpp). The stored cases of prefill, merge and
// the indexer logits are planned one by one (Session::kind_cases), each certified for the
// implementations with the kind's entry point.
#pragma once

#include <chrono>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "mla/certify/case_kind.hpp"
#include "mla/certify/child.hpp"
#include "mla/core/error.hpp"
#include "mla/core/sha256.hpp"
#include "isolation/entry_calls.hpp"
#include "mla/judge/attention.hpp"
#include "mla/plugin/host.hpp"
#include "run/session.hpp"

namespace mla::certify {

// The row of a stored case's fresh twin.
CaseRef twin_ref(const CaseRef& ref);
// The seed of a stored case's twin in this run: from the run's seed, the kind and the case.
uint64_t twin_seed(const Session& s, std::string_view kind, const CaseRef& ref);

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
  // its golden file was verified again; records one row for each, and for a kind with twins()
  // the twin's row right after it for each kernel from outside.
  virtual void certify_case(Session& s, const CaseRef& ref, const std::vector<const Implementation*>& pending) const = 0;
  // Whether a kernel from outside the suite is also certified on each stored case's fresh twin
  // (mla/certify/twin.hpp), the row `<case>~twin` (twin_ref): what makes refusing, through its
  // can_implement, every shape but the stored ones gain nothing.
  virtual bool twins() const { return false; }
  // An ERROR row of `k` saying `why` for the stored case `ref`, and for its twin when `k` gets one.
  void record_error(Session& s, const Implementation& k, const CaseRef& ref, const std::string& why) const;
};

// A stored case's twin for the kernels from outside: built once, by the first that needs it, and
// each one's row on it recorded right after its row on the case. A twin that cannot be built is
// an ERROR row saying why, never a missing row.
template <class Twin>
class CaseTwin {
 public:
  void record(Session& s, const Implementation& k, const CaseRef& ref, const std::string& description,
              const std::function<std::unique_ptr<Twin>()>& build,
              const std::function<reports::CaseResult(const Twin&, const std::string&)>& row) {
    if (!tried_) {
      tried_ = true;
      try {
        twin_ = build();
      } catch (const std::exception& e) {
        failed_ = e.what();
      }
    }
    if (twin_) {
      s.record(k, row(*twin_, description));
      return;
    }
    auto r = s.base_result(twin_ref(ref));
    r.description = description;
    r.verdict = tol::Verdict::error;
    r.reasons.push_back(fmt::format("the twin could not be built: {}", failed_));
    s.record(k, std::move(r));
  }

 private:
  bool tried_ = false;
  std::unique_ptr<Twin> twin_;
  std::string failed_;
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

// Appends the sha256 of `v`'s bytes to `d`: the digest of a kernel's inputs, before and after.
template <class T>
void add_digest(std::string& d, std::span<const T> v) {
  d += sha256_hex({reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()});
}

// Where a repeated call's `what` (`b`) differs from the first call's (`a`); nullopt when equal.
template <class T>
std::optional<std::string> first_value_difference(const std::vector<T>& a, const std::vector<T>& b, const char* what) {
  if (a.size() != b.size()) return fmt::format("{}: a repeated call returned {} values, the first {}", what, b.size(), a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return fmt::format("{}: a repeated call differs at [{}]: {} after {}", what, i, b[i], a[i]);
  }
  return std::nullopt;
}
inline std::optional<std::string> first_index_difference(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  return first_value_difference(a, b, "indices");
}
inline std::optional<std::string> first_byte_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  return first_value_difference(a, b, "cache bytes");
}

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
        if constexpr (std::is_same_v<Outputs, std::vector<uint8_t>>) {
          // A cache: the same bytes.
          if (auto d = first_byte_difference(r.outputs, res)) r.reasons.push_back(*d);
        } else if constexpr (std::is_same_v<Outputs, std::vector<float>>) {
          // Scores: the same values, bit for bit (NaN payloads and signed zeros too).
          const std::vector<double> a(r.outputs.begin(), r.outputs.end()), b(res.begin(), res.end());
          if (auto d = first_difference(a, b, "logits")) r.reasons.push_back(*d);
        } else if constexpr (requires { res.indices; }) {
          // A selection: the same indices in the same slots.
          if (auto d = first_index_difference(r.outputs.indices, res.indices)) r.reasons.push_back(*d);
        } else {
          if (auto d = first_difference(r.outputs.out, res.out, "out")) r.reasons.push_back(*d);
          if (auto d = first_difference(r.outputs.lse, res.lse, "lse")) r.reasons.push_back(*d);
        }
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

// An external kernel's entry of a kind (a plug-in's, ABI 1.4, or a Python kernel's) as that kind
// sees it: its declared info, and the kind's default check() and cost() on it. Its calls are made
// in child processes (run_entry_in_child), never through prepare(), which throws.
template <class Impl, class Info, class Prepared, class Inputs>
class ExternalEntry final : public Impl {
 public:
  explicit ExternalEntry(Info info) : info_(std::move(info)) {}
  const Info& info() const override { return info_; }
  std::unique_ptr<Prepared> prepare(const Inputs&) const override {
    throw Error(fmt::format("{} is a kernel from outside: it runs in a child process, never in the certifier",
                            info_.name));
  }

 private:
  Info info_;
};

// The bytes of a span: an input laid out for an entry call.
template <class T>
std::span<const uint8_t> raw_bytes(std::span<const T> v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()};
}

// An external kernel's calls in a child (isolation/entry_calls.hpp) as an in-process run: its
// return code made a status (UNSUPPORTED: a refusal; another code: an error with its words), the
// audit's findings as reasons, `outputs` making call 1's buffers the kind's outputs. A failure the
// machine caused sets `host_caused` (the row is then HOST_ERROR, never the kernel's).
template <class Outputs>
InProcessRun<Outputs> external_run(EntryRun e, bool& host_caused,
                                   const std::function<Outputs(const std::vector<std::vector<uint8_t>>&)>& outputs) {
  using Status = typename InProcessRun<Outputs>::Status;
  InProcessRun<Outputs> r;
  host_caused = e.host_caused;
  if (!e.ran) {
    r.status = Status::error;
    r.message = std::move(e.message);
  } else if (e.rc == MLA_PLUGIN_UNSUPPORTED) {
    r.status = Status::unsupported;
    r.message = e.message.empty() ? "(no reason given)" : std::move(e.message);
  } else if (e.rc != MLA_PLUGIN_OK) {
    r.status = Status::error;
    r.message = fmt::format("{} returned {}: {}", e.entry, plugin::describe_rc(e.rc), e.message);
  } else {
    r.status = Status::ran;
    r.run_seconds = e.run_seconds;
    r.reasons = std::move(e.reasons);
    r.outputs = outputs(e.buffers);
  }
  return r;
}

// The row of a run: a refusal after check() accepted is a broken claim (FAIL), an exception
// ERROR, else the run's own reasons and the judgement `judge(r)` makes of its canonical outputs:
// it adds its comparisons to the row and returns its failed rules.
template <class Outputs>
void judge_in_process(reports::CaseResult& r, const InProcessRun<Outputs>& run,
                      const std::function<std::vector<std::string>(reports::CaseResult&)>& judge) {
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
    for (auto& why : judge(r)) r.reasons.push_back(std::move(why));
  } catch (const std::exception& e) {
    r.verdict = tol::Verdict::error;
    r.reasons.push_back(fmt::format("the results could not be judged: {}", e.what()));
    return;
  }
  r.verdict = r.reasons.empty() ? tol::Verdict::pass : tol::Verdict::fail;
}

// The same for an attention-shaped judgement (out and lse against the truth).
template <class Outputs>
void judge_in_process(reports::CaseResult& r, const InProcessRun<Outputs>& run,
                      const std::function<AttentionJudgement()>& judge) {
  judge_in_process<Outputs>(r, run, [&](reports::CaseResult& row) {
    auto j = judge();
    row.out = std::move(j.out);
    row.lse = std::move(j.lse);
    return std::move(j.reasons);
  });
}

// Whether `impl` claims the case (its check() on `shape`), its cost model (cost() on `in`)
// recorded in the row; false when that decides the row: NOT_CLAIMED with check()'s reason, or
// ERROR when either throws (a capability query that throws is a defect of the implementation,
// not of the run).
template <class Impl, class Shape, class In>
bool claimed_with_cost(reports::CaseResult& r, const Impl& impl, const Shape& shape, const In& in) {
  try {
    if (auto no = impl.check(shape)) {
      r.verdict = tol::Verdict::not_claimed;
      r.reasons.push_back(*no);
      return false;
    }
    const auto cost = impl.cost(in);
    r.bytes = cost.bytes;
    r.flops = cost.flops;
  } catch (const std::exception& e) {
    r.verdict = tol::Verdict::error;
    r.reasons.push_back(fmt::format("the claim could not be decided (check() or cost()): {}", e.what()));
    return false;
  }
  return true;
}

// For a kernel from outside whose entry has its own can_implement (ABI 1.6, or a Python kernel's):
// whether it claims the call `question()` describes (asked in a child, run/claims.hpp); false when
// that decides the row: NOT_CLAIMED with the kernel's words, or ERROR when the predicate failed.
// True, asking nothing, for every other implementation.
bool entry_claimed(Session& s, reports::CaseResult& r, const Implementation& k,
                   const std::function<ClaimQuestion()>& question);

// The calls of a case: --repeat, at least two (the second must repeat the first bitwise).
inline int in_process_calls(const Session& s) { return std::max(2, s.options.repeats); }

// Whether some implementation of the run has `kind`'s entry point.
bool any_served(const Session& s, const CaseKind& kind);

// What becomes of a drawn case of `name` (rows of `file`, family fresh) for `k`: not this run's
// (--case, --shard), its previous row kept by --resume (recorded here), or to be run.
enum class Drawn { not_selected, kept, run };
Drawn drawn_case(Session& s, const Implementation& k, const std::string& file, const std::string& name);

}  // namespace mla::certify
