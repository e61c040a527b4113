// One attention case for every implementation of the plan: what can be decided from the case's
// attributes first (SKIPPED, UNSUPPORTED), then the case loaded once, every run in a child
// (unless --in-process), and every result judged here by judge_attention.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "run/claims.hpp"
#include "mla/certify/twin.hpp"
#include "mla/certify/host_error.hpp"
#include "mla/judge/golden.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {

namespace fs = std::filesystem;
using tol::Verdict;

nlohmann::json shape_json(const AttnShape& s, CacheFormat format, ScaleFmt scale_fmt,
                          const std::vector<int32_t>* seqlens) {
  nlohmann::json j = to_json(s);
  if (format == CacheFormat::fp8) j["scale_fmt"] = to_string(scale_fmt);
  if (seqlens) j["cache_seqlens"] = *seqlens;
  return j;
}
nlohmann::json shape_json(const golden::AttnHeader& h) { return shape_json(h.shape, h.shape.cache_format, h.scale_fmt, nullptr); }
nlohmann::json shape_json(const golden::AttnCase& c) {
  return shape_json(c.shape, c.shape.cache_format, c.scale_fmt, &c.cache_seqlens);
}

bool too_large_to_probe(const golden::AttnHeader& h) { return h.cache_tokens() > kProbeMaxCacheTokens; }


class AttentionCase {
 public:
  AttentionCase(Session& s, const CaseRef& ref, std::size_t index) : s_(s), ref_(ref), index_(index) {}

  void certify() {
    // Results that --resume may keep; the order of the certificate stays the order of the run.
    std::vector<const Implementation*> pending;
    for (const auto& k : s_.implementations) {
      if (!k.decodes()) continue;
      if (auto kept = s_.kept(k, ref_)) {
        s_.record(k, std::move(*kept));
        if (has_twin(k)) {
          if (auto twin = s_.kept(k, twin_ref())) s_.record(k, std::move(*twin));
        }
      } else {
        pending.push_back(&k);
      }
    }
    if (pending.empty()) return;

    // The manifest was checked at the start; the file is checked again right before it is
    // read, so a golden deleted or changed since (by a plug-in, by anyone) is never believed.
    try {
      golden::verify_file(s_.catalog, ref_.file);
    } catch (const std::exception& e) {
      fail_all(pending, fmt::format("golden file {} failed re-verification before loading: {}", ref_.file, e.what()),
               nullptr);
      return;
    }
    const auto path = s_.catalog.file(ref_.file);
    golden::AttnHeader header;
    try {
      header = golden::read_attn_header(path, ref_.name);
    } catch (const std::exception& e) {
      // Its attributes, or its datasets checked against them (a case that lies), before any
      // SKIPPED or NOT_CLAIMED is decided from them.
      fail_all(pending, fmt::format("case refused: {}", e.what()), nullptr, failure_verdict(e));
      return;
    }

    // The twin rows --resume keeps (a twin is decided with its case, from the same claim).
    std::vector<const Implementation*> twin_pending;
    for (const auto* k : pending) {
      if (!has_twin(*k)) continue;
      if (auto kept = s_.kept(*k, twin_ref())) kept_twins_[k] = std::move(*kept);
      else twin_pending.push_back(k);
    }

    // Decide everything that does not need the arrays first, so a case no implementation can
    // run is never loaded.
    std::vector<const Implementation*> runnable, probes;
    std::map<const Implementation*, std::string> refused;
    for (const auto* k : pending) {
      auto r = s_.base_result(ref_);
      r.description = header.description;
      r.shape = shape_json(header);
      try {
        if (k->unavailable) {
          r.verdict = Verdict::skipped;
          r.reasons.push_back(*k->unavailable);
        } else if (s_.options.max_tokens && header.cache_tokens() > *s_.options.max_tokens) {
          r.verdict = Verdict::skipped;
          r.cause = reports::Cause::over_max_tokens;
          r.reasons.push_back(fmt::format("cache of {} tokens > --max-tokens {}", header.cache_tokens(), *s_.options.max_tokens));
          if (has_twin(*k)) {
            // Its twin is left out with it, and counted so (the headline's "over --max-tokens").
            auto t = s_.base_result(twin_ref());
            t.description = "fresh twin of " + ref_.key();
            t.shape = r.shape;
            t.verdict = Verdict::skipped;
            t.cause = r.cause;
            t.reasons = r.reasons;
            kept_twins_[k] = std::move(t);
          }
        } else if (const auto cl = claim(s_, *k, header.shape, header.scale_fmt, header.cache_seqlens); !cl.claimed) {
          // Outside the declared capabilities: run for information when that is worth it. A
          // shape the kernel itself refused is not: it said it cannot.
          if (!cl.by_kernel && probe_worthwhile(header, *k)) {
            refused[k] = cl.reason;
            probes.push_back(k);
            continue;
          }
          r.verdict = Verdict::not_claimed;
          r.reasons.push_back(cl.reason);
        } else {
          runnable.push_back(k);
          continue;
        }
      } catch (const std::exception& e) {
        // A capability query that throws is a defect of the implementation, not of the run.
        r.verdict = Verdict::error;
        r.reasons.push_back(fmt::format("the claim could not be decided (unavailable(), check() or can_implement): {}",
                                        e.what()));
      }
      s_.record(*k, std::move(r));
      if (const auto t = kept_twins_.find(k); t != kept_twins_.end()) {
        s_.record(*k, std::move(t->second));
        kept_twins_.erase(t);
      }
    }
    if (runnable.empty() && probes.empty()) return;

    golden::AttnCase c;
    try {
      c = golden::load_attn_case(path, ref_.name);
      scale_fmt_ = c.scale_fmt;
    } catch (const std::exception& e) {
      fail_all(runnable, fmt::format("case failed to load: {}", e.what()), &header, failure_verdict(e));
      for (const auto* k : probes) s_.record(*k, not_claimed(header, refused[k]));
      return;
    }
    std::map<const Implementation*, reports::CaseResult> results;
    const GoldenTruth truth(c);
    // Claimed shapes first, then the informational runs, in the certificate's kernel order.
    std::map<const Implementation*, reports::CaseResult> twins;
    for (const auto* k : runnable) {
      results[k] = judged(*k, c, c.view(), truth.view(), run(*k, c.view(), /*enforce_caps=*/true));
      if (has_twin(*k) && std::find(twin_pending.begin(), twin_pending.end(), k) != twin_pending.end()) {
        twins[k] = twin_row(*k, c);
      }
    }
    for (const auto* k : probes) {
      auto r = not_claimed(header, refused[k]);
      r.shape = shape_json(c);
      if (probe_worthwhile(header, *k)) probe_into(r, *k, c, truth, run(*k, c.view(), /*enforce_caps=*/false));
      results[k] = std::move(r);
    }
    for (const auto& k : s_.implementations) {
      const auto it = results.find(&k);
      if (it != results.end()) s_.record(k, std::move(it->second));
      // The twin right after its case; a kernel that did not run the case gets no twin row (its
      // case row says why), one that did gets one, kept or run.
      if (const auto t = twins.find(&k); t != twins.end()) s_.record(k, std::move(t->second));
      else if (const auto kt = kept_twins_.find(&k); kt != kept_twins_.end()) s_.record(k, std::move(kt->second));
    }
  }

 private:
  void fail_all(const std::vector<const Implementation*>& ks, const std::string& why, const golden::AttnHeader* h,
                Verdict verdict = Verdict::error) {
    for (const auto* k : ks) {
      auto r = s_.base_result(ref_);
      if (h) {
        r.description = h->description;
        r.shape = shape_json(*h);
      }
      r.verdict = verdict;
      r.reasons.push_back(why);
      s_.record(*k, std::move(r));
    }
  }

  bool probe_worthwhile(const golden::AttnHeader& h, const Implementation& k) const {
    return s_.options.probe_unclaimed && !too_large_to_probe(h) && (!k.ref.python || s_.options.probe_python);
  }

  reports::CaseResult not_claimed(const golden::AttnHeader& h, const std::string& why) const {
    auto r = s_.base_result(ref_);
    r.description = h.description;
    r.shape = shape_json(h);
    r.verdict = Verdict::not_claimed;
    r.reasons.push_back(why);
    return r;
  }

  // In this process for --in-process registered kernels, else in children with a deadline, on
  // buffers this process created and audits; in the kernel's declared conventions either way
  // (run_declared).
  // The inputs `in` (the stored case, or its twin) with the other case called in between: the
  // same inputs with q negated, whose truth the C++ oracles compute once per inputs.
  // (The truth only when a result is judged: an informational run needs the inputs alone.)
  struct Between {
    AttnBuffers inputs;
    std::optional<ComputedTruth> truth;
  };
  Between& between_of(const AttnInputs& in) {
    auto& slot = in.q.data() == twin_inputs_q_ ? twin_between_ : case_between_;
    if (!slot) slot = Between{negated_q(in), std::nullopt};
    return *slot;
  }
  AttentionTruth between_truth(const AttnInputs& in) {
    auto& b = between_of(in);
    if (!b.truth) b.truth = compute_truth(b.inputs.view());
    return b.truth->view();
  }

  RunResult run(const Implementation& k, const AttnInputs& in, bool enforce_caps, const std::string& tag_suffix = "") {
    CallSchedule plan;
    plan.enforce_caps = enforce_caps;
    if (in.shape.cache_format == CacheFormat::fp8) plan.scale_fmt = scale_fmt_;
    if (k.external) {
      // An untrusted kernel: a drawn number of calls, another case called between them, and a
      // second fresh process (docs/field.md, "Bugs", 12: state that leaks between calls).
      plan.calls = calls_per_case(s_.seed, k.info.name, ref_.key() + tag_suffix);
      plan.second_process = true;
      if (!tag_suffix.empty()) {
        // The twin is there for its values: two calls with the other case between them judge
        // every call and still see a second call differ; the drawn count, and a second process,
        // are the stored row's (which runs the same code on the same shape).
        plan.calls = 2;
        plan.second_process = false;
      }
      // The other case is this one with its query negated: other inputs of a shape the kernel
      // claims, chosen from the case alone, so a resumed run calls exactly what a whole run does;
      // its outputs are judged against its own truth.
      plan.between = between_of(in).inputs.view();
    } else {
      plan.calls = std::max(1, s_.options.repeats);
    }
    return run_declared(s_, k, in, plan, fmt::format("case-{}-{}{}", index_, k.report_index, tag_suffix));
  }

  reports::CaseResult judged(const Implementation& k, const golden::AttnCase& c, const AttnInputs& in,
                             const AttentionTruth& truth, const RunResult& run, bool claimed = true) {
    auto r = s_.base_result(ref_);
    r.description = c.description;
    r.shape = shape_json(c);
    if (claimed) judge_run_into(r, k, in, truth, run);
    else judge_run(r, k, c.shape, run, truth, nullptr, /*claimed=*/false);
    return r;
  }

  // Kernels whose stored cases get a fresh twin: every kernel from outside the suite (plug-ins,
  // Python kernels), the ones a stored answer could tempt. The registered kernels are the suite's
  // own oracles and its CUDA kernels, reviewed with it.
  static bool has_twin(const Implementation& k) { return k.external; }
  CaseRef twin_ref() const { return {ref_.family, ref_.file, ref_.name + kTwinSuffix}; }

  // The twin of this case run and judged for `k`, as its own row.
  reports::CaseResult twin_row(const Implementation& k, const golden::AttnCase& c) {
    auto r = s_.base_result(twin_ref());
    r.description = fmt::format("fresh twin of {} (drawn from seed {}: heads, pages, latent and rope dimensions "
                                "permuted and sign-flipped, q with fresh noise; truth from the C++ oracles): {}",
                                ref_.key(), s_.seed, c.description);
    r.shape = shape_json(c);
    try {
      if (!twin_) {
        twin_ = make_twin(c.view(), hash_text(hash_text(s_.seed ^ 0x7317ull, "twin"), ref_.key()));
        twin_truth_ = compute_truth(twin_->view());
        twin_inputs_q_ = twin_->q.data();
      }
      const auto in = twin_->view();
      judge_run_into(r, k, in, twin_truth_->view(), run(k, in, /*enforce_caps=*/true, kTwinSuffix));
    } catch (const std::exception& e) {
      r.verdict = failure_verdict(e);
      r.reasons.push_back(fmt::format("the twin could not be built or judged: {}", e.what()));
    }
    return r;
  }

  void judge_run_into(reports::CaseResult& r, const Implementation& k, const AttnInputs& in, const AttentionTruth& truth,
                      const RunResult& run) {
    const AttentionTruth* between = nullptr;
    AttentionTruth between_view;
    if (k.external && run.status == RunResult::Status::ran) {
      between_view = between_truth(in);
      between = &between_view;
    }
    judge_run(r, k, in.shape, run, truth, between, /*claimed=*/true);
  }

  // The informational run's verdict on the NOT_CLAIMED row `row` (typed, for the notes) and its
  // words (the row's last reason, for a reader).
  void probe_into(reports::CaseResult& row, const Implementation& k, const golden::AttnCase& c, const GoldenTruth& truth,
                  const RunResult& run) {
    const auto r = judged(k, c, c.view(), truth.view(), run, /*claimed=*/false);
    row.probe = r.verdict;
    const std::string first = r.reasons.empty() ? "" : r.reasons.front();
    switch (r.verdict) {
      case Verdict::pass: row.reasons.push_back(kProbePass); return;
      case Verdict::fail: row.reasons.push_back(fmt::format("{}would FAIL ({})", kProbePrefix, first)); return;
      case Verdict::unsupported: row.reasons.push_back(fmt::format("{}refused ({})", kProbePrefix, first)); return;
      default: row.reasons.push_back(fmt::format("{}ERROR ({})", kProbePrefix, first)); return;
    }
  }

  Session& s_;
  const CaseRef& ref_;
  std::size_t index_;
  ScaleFmt scale_fmt_ = ScaleFmt::fp32;
  std::optional<Between> case_between_, twin_between_;
  std::optional<AttnBuffers> twin_;
  std::optional<ComputedTruth> twin_truth_;
  const uint16_t* twin_inputs_q_ = nullptr;
  std::map<const Implementation*, reports::CaseResult> kept_twins_;
};

}  // namespace

void certify_attention_case(Session& s, const CaseRef& ref, std::size_t i) { AttentionCase(s, ref, i).certify(); }

void ask_catalog_claims(Session& s) {
  std::vector<const Implementation*> asking;
  for (const auto& k : s.implementations) {
    if (k.decodes() && k.can_implement && !k.unavailable) asking.push_back(&k);
  }
  if (asking.empty()) return;
  std::map<const Implementation*, std::vector<ClaimQuestion>> questions;
  for (const auto& ref : s.attention_cases) {
    golden::AttnHeader h;
    try {
      h = golden::read_attn_header(s.catalog.file(ref.file), ref.name);
    } catch (const std::exception&) {
      continue;  // the case itself reports it, with the file re-verified first
    }
    if (s.options.max_tokens && h.cache_tokens() > *s.options.max_tokens) continue;
    for (const auto* k : asking) {
      if (claim_refusal(*k, h.shape, &h.cache_seqlens)) continue;
      questions[k].push_back({h.shape, h.scale_fmt, h.cache_seqlens});
    }
  }
  for (const auto& [k, qs] : questions) ask_claims(s, *k, qs);
}

}  // namespace mla::certify
