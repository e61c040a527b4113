#include "point_judge.hpp"

#include <chrono>
#include <iostream>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/judge/attention.hpp"

namespace mla::bench {

std::optional<std::string> PointJudge::failure(const AttentionImpl& impl, PreparedAttention& prepared,
                                               const std::string& point, const AttnInputs& in) {
  const std::string key = impl.info().name + "/" + point;
  if (auto it = verdicts_.find(key); it != verdicts_.end()) return it->second;
  AttnOutputs got;
  try {
    prepared.run();
    prepared.synchronize();
    got = prepared.results();
  } catch (const UnsupportedError& e) {
    // check() took the shape and the kernel then refused it: not a result to time.
    return verdicts_[key] = fmt::format("not timed: refused at run time: {}", e.what());
  } catch (const std::exception& e) {
    return verdicts_[key] = fmt::format("not timed: ERROR in run(): {}", e.what());
  }
  if (point_ != point || !truth_) {
    truth_.reset();
    const auto t0 = std::chrono::steady_clock::now();
    truth_ = compute_truth(in);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    point_ = point;
    ++truths_;
    truth_seconds_ += dt;
    std::cerr << fmt::format("[mla-bench] truth of {} (fp64 oracle and deployed-precision reference) in {:.2f} s\n",
                             point, dt);
  }
  const Declaration declared{impl.info().out_dtype, impl.info().compute};
  return verdicts_[key] = not_timed_reason(judge_attention(in.shape, declared, got, truth_->view()));
}

std::optional<std::string> not_timed_reason(const AttentionJudgement& j) { return not_timed_reason(j.pass(), j.reasons); }

std::optional<std::string> not_timed_reason(bool pass, const std::vector<std::string>& reasons) {
  if (pass) return std::nullopt;
  std::string why;
  for (const auto& r : reasons) why += (why.empty() ? "" : "; ") + r;
  return fmt::format("not timed: FAIL ({})", why);
}

}  // namespace mla::bench
