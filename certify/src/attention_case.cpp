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
    const auto isolated = [&](const Implementation* k) { return s_.isolated(*k); };
    if (std::any_of(runnable.begin(), runnable.end(), isolated) || std::any_of(probes.begin(), probes.end(), isolated)) {
      inputs_ = s_.work.path() / fmt::format("case-{}.inputs", index_);
      try {
        wire::write(inputs_, encode(c.view()));
      } catch (const std::exception& e) {
        fail_all(runnable, fmt::format("cannot hand the case to a child process: {}", e.what()), &header,
                 failure_verdict(e));
        for (const auto* k : probes) s_.record(*k, not_claimed(header, refused[k]));
        return;
      }
    }

    // Claimed shapes first, then the informational runs, in the certificate's kernel order.
    std::map<const Implementation*, reports::CaseResult> results;
    for (const auto* k : runnable) results[k] = judged(*k, c, truth, run(*k, c, /*enforce_caps=*/true));
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
    std::error_code ec;
    if (!inputs_.empty()) fs::remove(inputs_, ec);
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

  // The call in the kernel's declared conventions (mla/core/conventions.hpp): its inputs
  // converted before, its outputs made canonical after, so everything that judges or records the
  // result sees the canonical ones. The two calls below are the whole boundary.
  RunResult run(const Implementation& k, const golden::AttnCase& c, bool enforce_caps) {
    const auto kernel_inputs = inputs_to_kernel(k.info.conventions, c.view());  // canonical -> kernel
    RunResult r = kernel_inputs ? call(k, kernel_inputs->view(), /*own_inputs=*/true, enforce_caps)
                                : call(k, c.view(), /*own_inputs=*/false, enforce_caps);
    outputs_to_canonical(k.info.conventions, c.shape, r.outputs);  // kernel -> canonical
    // The cost model reads indices as positions: with other numbering, count on the canonical ones.
    if (kernel_inputs && r.bytes) {
      const auto cost = mla_cost_model(c.view(), k.info.out_dtype);
      r.bytes = cost.bytes;
      r.flops = cost.flops;
    }
    return r;
  }

  // In this process for --in-process registered kernels, else in a child with a deadline. The
  // child reads the case's inputs file, or with `own_inputs` (another convention's) one of its own.
  RunResult call(const Implementation& k, const AttnInputs& in, bool own_inputs, bool enforce_caps) {
    // A plug-in is always called at least twice: repeatability is part of its contract.
    const int repeats = k.plugin ? std::max(2, s_.options.repeats) : s_.options.repeats;
    if (!s_.isolated(k)) return execute(*k.impl, in, repeats, enforce_caps);

    // Inputs in another convention than the case's travel in a file of their own.
    fs::path inputs = inputs_;
    if (own_inputs) {
      inputs = s_.work.path() / fmt::format("case-{}-{}.inputs", index_, k.report_index);
      try {
        wire::write(inputs, encode(in));
      } catch (const std::exception& e) {
        RunResult r;
        r.message = fmt::format("cannot hand the case to a child process: {}", e.what());
        return r;
      }
    }
    const auto result = s_.work.path() / fmt::format("case-{}-{}.result", index_, k.report_index);
    const auto log = s_.work.path() / fmt::format("case-{}-{}.log", index_, k.report_index);
    std::vector<std::string> argv{s_.self.string(), "__child", "run", "--inputs", inputs.string(), "--result",
                                  result.string(), "--repeats", std::to_string(repeats)};
    if (k.ref.plugin) argv.insert(argv.end(), {"--plugin", k.ref.plugin->string()});
    if (k.ref.fault) argv.insert(argv.end(), {"--extra", *k.ref.fault});
    if (k.ref.builtin) argv.insert(argv.end(), {"--kernel", *k.ref.builtin});
    if (!enforce_caps) argv.push_back("--unclaimed");
    const auto outcome = run_child(argv, s_.options.timeout_s, log);

    RunResult r;
    std::error_code ec;
    if (outcome.ok() && fs::exists(result, ec)) {
      try {
        r = decode_run_result(wire::read(result, kAttentionResult));
      } catch (const std::exception& e) {
        r.status = RunResult::Status::error;
        r.message = fmt::format("the child's result is unreadable: {}", e.what());
      }
    } else {
      r.status = RunResult::Status::error;
      r.message = outcome.describe();
      if (outcome.ok()) r.message = "the child exited without writing a result";
      if (auto why = host_cause(outcome)) {
        r.host_caused = true;
        r.message = *why + " (" + outcome.describe() + ")";
      } else if (!outcome.stderr_tail.empty()) {
        r.message += "; its last output: " + outcome.stderr_tail;
      }
    }
    fs::remove(result, ec);
    fs::remove(log, ec);
    if (inputs != inputs_) fs::remove(inputs, ec);
    return r;
  }

  reports::CaseResult judged(const Implementation& k, const golden::AttnCase& c, const GoldenTruth& truth,
                             const RunResult& run) const {
    auto r = s_.base_result(ref_);
    r.description = c.description;
    r.shape = shape_json(c);
    r.bytes = run.bytes;
    r.flops = run.flops;
    switch (run.status) {
      case RunResult::Status::unsupported:
        r.verdict = Verdict::unsupported;
        r.reasons.push_back(run.message);
        return r;
      case RunResult::Status::error:
        r.verdict = run.host_caused ? Verdict::host_error : Verdict::error;
        r.reasons.push_back(run.message);
        return r;
      case RunResult::Status::ran: break;
    }
    r.run_seconds = run.run_seconds;
    try {
      auto j = judge_attention(c.shape, Declaration{k.info.out_dtype, k.info.compute}, run.outputs, truth.view());
      r.out = std::move(j.out);
      r.lse = std::move(j.lse);
      r.out_vs_unquantized = std::move(j.out_vs_unquantized);
      r.lse_vs_unquantized = std::move(j.lse_vs_unquantized);
      r.reasons = std::move(j.reasons);
    } catch (const std::exception& e) {
      r.verdict = failure_verdict(e);
      r.reasons.push_back(fmt::format("the results could not be judged: {}", e.what()));
      return r;
    }
    for (const auto& why : run.reasons) r.reasons.push_back(why);
    r.verdict = r.reasons.empty() ? Verdict::pass : Verdict::fail;
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
  fs::path inputs_;
};

}  // namespace

void certify_attention_case(Session& s, const CaseRef& ref, std::size_t i) { AttentionCase(s, ref, i).certify(); }

}  // namespace mla::certify
