// One attention case for every implementation of the plan: what can be decided from the case's
// attributes first (SKIPPED, UNSUPPORTED), then the case loaded once, every run in a child
// (unless --in-process), and every result judged here by judge_attention.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "claims.hpp"
#include "mla/certify/host_error.hpp"
#include "mla/judge/golden.hpp"
#include "session.hpp"

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
      if (auto kept = s_.kept(k, ref_)) s_.record(k, std::move(*kept));
      else pending.push_back(&k);
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
          r.reasons.push_back(fmt::format("cache of {} tokens > --max-tokens {}", header.cache_tokens(), *s_.options.max_tokens));
        } else if (const auto cl = claim(s_, *k, header.shape, header.scale_fmt); !cl.claimed) {
          // A shape the kernel itself refused is not run for information: it said it cannot.
          if (!cl.by_kernel && probe_worthwhile(header)) {
            refused[k] = cl.reason;
            probes.push_back(k);
            continue;
          }
          r.verdict = not_claimed_verdict(cl);
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
    }
    if (runnable.empty() && probes.empty()) return;

    golden::AttnCase c;
    try {
      c = golden::load_attn_case(path, ref_.name);
    } catch (const std::exception& e) {
      fail_all(runnable, fmt::format("case failed to load: {}", e.what()), &header, failure_verdict(e));
      for (const auto* k : probes) s_.record(*k, not_claimed(header, refused[k]));
      return;
    }
    // Varlen is a property of the lengths, known only now.
    for (auto it = runnable.begin(); it != runnable.end();) {
      if (auto no = claim_refusal(**it, c.shape, &c.cache_seqlens)) {
        refused[*it] = *no;
        probes.push_back(*it);
        it = runnable.erase(it);
      } else {
        ++it;
      }
    }

    const GoldenTruth truth(c);
    // Claimed shapes first, then the informational runs, in the certificate's kernel order.
    std::map<const Implementation*, reports::CaseResult> results;
    for (const auto* k : runnable) {
      results[k] = judged(*k, c, truth, run(*k, c, /*enforce_caps=*/true));
    }
    for (const auto* k : probes) {
      auto r = not_claimed(header, refused[k]);
      r.shape = shape_json(c);
      if (probe_worthwhile(header)) r.reasons.push_back(probe_reason(*k, c, truth, run(*k, c, /*enforce_caps=*/false)));
      results[k] = std::move(r);
    }
    for (const auto& k : s_.implementations) {
      const auto it = results.find(&k);
      if (it != results.end()) s_.record(k, std::move(it->second));
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

  bool probe_worthwhile(const golden::AttnHeader& h) const { return s_.options.probe_unclaimed && !too_large_to_probe(h); }

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
  RunResult run(const Implementation& k, const golden::AttnCase& c, bool enforce_caps) {
    CallSchedule plan;
    plan.enforce_caps = enforce_caps;
    if (c.shape.cache_format == CacheFormat::fp8) plan.scale_fmt = c.scale_fmt;
    AttnBuffers flipped;
    if (k.plugin) {
      // An untrusted kernel: a drawn number of calls, another case called between them, and a
      // second fresh process (docs/field.md, "Bugs", 12: state that leaks between calls).
      plan.calls = calls_per_case(s_.seed, k.info.name, ref_.key());
      plan.second_process = true;
      // The other case is this one with its query negated: other inputs of a shape the kernel
      // claims, chosen from the case alone, so a resumed run calls exactly what a whole run does.
      flipped.q.assign(c.q.begin(), c.q.end());
      for (auto& b : flipped.q) b ^= 0x8000u;
      plan.between = c.view();
      plan.between->q = flipped.q;
    } else {
      plan.calls = std::max(1, s_.options.repeats);
    }
    return run_declared(s_, k, c.view(), plan, fmt::format("case-{}-{}", index_, k.report_index));
  }

  reports::CaseResult judged(const Implementation& k, const golden::AttnCase& c, const GoldenTruth& truth,
                             const RunResult& run) const {
    auto r = s_.base_result(ref_);
    r.description = c.description;
    r.shape = shape_json(c);
    judge_run(r, k, c.shape, run, truth.view());
    return r;
  }

  std::string probe_reason(const Implementation& k, const golden::AttnCase& c, const GoldenTruth& truth,
                           const RunResult& run) const {
    const auto r = judged(k, c, truth, run);
    switch (r.verdict) {
      case Verdict::pass: return kProbePass;
      case Verdict::fail: return fmt::format("{}would FAIL ({})", kProbePrefix, r.reasons.front());
      case Verdict::unsupported: return fmt::format("{}refused ({})", kProbePrefix, r.reasons.front());
      default: return fmt::format("{}ERROR ({})", kProbePrefix, r.reasons.empty() ? "" : r.reasons.front());
    }
  }

  Session& s_;
  const CaseRef& ref_;
  std::size_t index_;
};

}  // namespace

void certify_attention_case(Session& s, const CaseRef& ref, std::size_t i) { AttentionCase(s, ref, i).certify(); }

}  // namespace mla::certify
