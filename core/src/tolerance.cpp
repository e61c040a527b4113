// The tolerance engine (contract in mla/core/tolerance.hpp).
//
// One pass over the data gathers every metric, so judging a 4M-element output costs one read
// of each buffer plus one nth_element over the finite errors for the percentiles.
#include "mla/core/tolerance.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/error.hpp"

namespace mla::tol {
namespace {

enum class Cls : uint8_t { finite, nan, pos_inf, neg_inf };

Cls classify(double x) {
  if (std::isnan(x)) return Cls::nan;
  if (std::isinf(x)) return x > 0 ? Cls::pos_inf : Cls::neg_inf;
  return Cls::finite;
}

std::vector<int64_t> unravel(int64_t flat, std::span<const int64_t> shape) {
  std::vector<int64_t> idx(shape.size(), 0);
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (shape[d] > 0) {
      idx[d] = flat % shape[d];
      flat /= shape[d];
    }
  }
  return idx;
}

// Short numbers for reasons: 3 significant digits is enough to see by how much a bound was
// missed, and keeps a reason on one line.
std::string num(double x) { return fmt::format("{:.3g}", x); }

// Nearest-rank percentile: the smallest value with at least p·n values at or below it.
std::size_t nearest_rank_index(std::size_t n, double p) {
  const auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(n)));
  return std::clamp<std::size_t>(rank, 1, n) - 1;
}

nlohmann::json number_to_json(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

double number_from_json(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto s = j.get<std::string>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  }
  throw Error(fmt::format("comparison JSON: expected a number or \"inf\"/\"-inf\"/\"nan\", found {}",
                          j.dump()));
}

// The p50 and p99 of the finite elements' absolute errors; reorders `abs_errs`.
void record_percentiles(std::vector<double>& abs_errs, Comparison& c) {
  if (abs_errs.empty()) return;
  // Two partial selections instead of a sort: after the first, everything past the median
  // is already >= it, so the second only has to partition the upper part.
  const auto r50 = nearest_rank_index(abs_errs.size(), 0.50);
  const auto r99 = nearest_rank_index(abs_errs.size(), 0.99);
  std::nth_element(abs_errs.begin(), abs_errs.begin() + static_cast<std::ptrdiff_t>(r50), abs_errs.end());
  c.p50_abs_err = abs_errs[r50];
  std::nth_element(abs_errs.begin() + static_cast<std::ptrdiff_t>(r50),
                   abs_errs.begin() + static_cast<std::ptrdiff_t>(r99), abs_errs.end());
  c.p99_abs_err = abs_errs[r99];
}

// Rule 5 of judge(), after the element pass has set c.max_abs_err and c.max_abs_truth; `s` and
// `truth` hold c.numel elements each.
void judge_error_ratio(Comparison& c, const Tolerance& tol, std::span<const double> truth,
                       std::span<const double> s) {
  double ref_err = 0;
  for (int64_t i = 0; i < c.numel; ++i) {
    if (std::isfinite(s[i]) && std::isfinite(truth[i])) ref_err = std::max(ref_err, std::fabs(s[i] - truth[i]));
  }
  c.same_dtype_max_abs_err = ref_err;
  c.error_ratio = ref_err > 0 ? c.max_abs_err / ref_err
                              : (c.max_abs_err > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  if (tol.ratio_k > 0) {
    const double floor = tol.ratio_floor + tol.ratio_floor_rel * c.max_abs_truth;
    const double limit = tol.ratio_k * ref_err + floor;
    c.error_ratio_limit = limit;
    if (!(c.max_abs_err <= limit)) {
      c.reasons.push_back(fmt::format(
          "error ratio: max abs err {} > {} x same-dtype max abs err {} + floor {} = {} (ratio {})",
          num(c.max_abs_err), num(tol.ratio_k), num(ref_err), num(floor), num(limit),
          num(*c.error_ratio)));
    }
  }
}

}  // namespace

// The verdict words, once: a new verdict is one enumerator and one row here.
constexpr std::pair<Verdict, const char*> kVerdictWords[] = {
    {Verdict::pass, "PASS"},   {Verdict::fail, "FAIL"},        {Verdict::unsupported, "UNSUPPORTED"},
    {Verdict::error, "ERROR"}, {Verdict::skipped, "SKIPPED"},   {Verdict::not_claimed, "NOT_CLAIMED"},
    {Verdict::host_error, "HOST_ERROR"},
};

const char* to_string(Verdict v) {
  for (const auto& [verdict, word] : kVerdictWords) {
    if (verdict == v) return word;
  }
  return "?";
}

Verdict verdict_from_string(std::string_view s) {
  std::vector<std::string_view> words;
  for (const auto& [verdict, word] : kVerdictWords) {
    if (s == word) return verdict;
    words.push_back(word);
  }
  throw Error(fmt::format("unknown verdict '{}' (expected {})", s, fmt::join(words, ", ")));
}

std::string format_index(std::span<const int64_t> index) {
  return fmt::format("[{}]", fmt::join(index, ","));
}

Comparison judge(std::string what, std::span<const double> impl, std::span<const double> truth,
                 std::span<const int64_t> shape, const Tolerance& tol,
                 std::optional<std::span<const double>> same_dtype) {
  Comparison c;
  c.what = std::move(what);
  c.tolerance = tol.name;

  int64_t numel = 1;
  for (auto s : shape) {
    if (s < 0) throw Error(fmt::format("judge({}): negative extent in shape {}", c.what, format_index(shape)));
    numel *= s;
  }
  c.numel = numel;
  // The truth and the reference come from the catalog: a size mismatch there is a caller bug,
  // not a property of the implementation under test.
  if (static_cast<int64_t>(truth.size()) != numel) {
    throw Error(fmt::format("judge({}): truth has {} elements, shape {} needs {}", c.what,
                            truth.size(), format_index(shape), numel));
  }
  if (same_dtype && static_cast<int64_t>(same_dtype->size()) != numel) {
    throw Error(fmt::format("judge({}): same-dtype reference has {} elements, shape {} needs {}",
                            c.what, same_dtype->size(), format_index(shape), numel));
  }
  if (static_cast<int64_t>(impl.size()) != numel) {
    c.verdict = Verdict::fail;
    c.elements_failed = numel;
    c.reasons.push_back(fmt::format("shape mismatch: result has {} elements, shape {} needs {}",
                                    impl.size(), format_index(shape), numel));
    return c;
  }

  // The absolute bound depends on the tensor's magnitude, so it is known before the element
  // pass; this extra read of the truth is the price.
  for (int64_t i = 0; i < numel; ++i) {
    if (std::isfinite(truth[i])) c.max_abs_truth = std::max(c.max_abs_truth, std::fabs(truth[i]));
  }
  const double atol = effective_atol(tol, c.max_abs_truth);
  c.atol_used = atol;

  int64_t first_nan = -1, first_inf = -1;
  int64_t finite_failed = 0, passed = 0;
  int64_t max_abs_at = -1, max_rel_at = -1, worst_fail_at = -1;
  double worst_violation = 0;  // bound use of the worst failing element
  double sum_sq_diff = 0, sum_sq = 0;
  std::vector<double> abs_errs;
  abs_errs.reserve(static_cast<std::size_t>(numel));

  for (int64_t i = 0; i < numel; ++i) {
    const double a = impl[i], t = truth[i];
    const Cls ca = classify(a), ct = classify(t);
    if (ca != Cls::finite || ct != Cls::finite) {
      if (ca == ct) {
        ++passed;
      } else if (ca == Cls::nan || ct == Cls::nan) {
        if (c.nan_mismatch++ == 0) first_nan = i;
      } else {
        if (c.inf_mismatch++ == 0) first_inf = i;
      }
      continue;
    }
    const double d = std::fabs(a - t), at = std::fabs(t);
    abs_errs.push_back(d);
    if (max_abs_at < 0 || d > c.max_abs_err) c.max_abs_err = d, max_abs_at = i;
    const double rel = at > 0 ? d / at : (d > 0 ? std::numeric_limits<double>::infinity() : 0.0);
    if (max_rel_at < 0 || rel > c.max_rel_err) c.max_rel_err = rel, max_rel_at = i;
    const double bound = std::max(atol, tol.rtol * at);
    const double use = bound > 0 ? d / bound : (d > 0 ? std::numeric_limits<double>::infinity() : 0.0);
    c.max_bound_use = std::max(c.max_bound_use, use);
    if (d <= atol || d <= tol.rtol * at) {
      ++passed;
    } else {
      ++finite_failed;
      if (worst_fail_at < 0 || use > worst_violation) worst_violation = use, worst_fail_at = i;
    }
    // Σ(x−y)²/Σ(x²+y²) equals 1 − 2Σxy/Σ(x²+y²) exactly but does not cancel, so an fp64
    // implementation's 1e-30 difference stays visible instead of drowning in 1e-16 noise.
    sum_sq_diff += (a - t) * (a - t);
    sum_sq += a * a + t * t;
  }

  c.elements_failed = finite_failed + c.nan_mismatch + c.inf_mismatch;
  c.pass_fraction = numel == 0 ? 1.0 : static_cast<double>(passed) / static_cast<double>(numel);
  c.cos_diff = sum_sq > 0 ? sum_sq_diff / sum_sq : 0.0;
  if (max_abs_at >= 0) c.max_abs_index = unravel(max_abs_at, shape);
  if (max_rel_at >= 0) c.max_rel_index = unravel(max_rel_at, shape);
  record_percentiles(abs_errs, c);

  // Rule 2: masks.
  if (c.nan_mismatch > 0) {
    c.reasons.push_back(fmt::format("NaN mask differs at {} elements, first {} (result {}, truth {})",
                                    c.nan_mismatch, format_index(unravel(first_nan, shape)),
                                    num(impl[first_nan]), num(truth[first_nan])));
  }
  if (c.inf_mismatch > 0) {
    c.reasons.push_back(fmt::format("Inf mask differs at {} elements, first {} (result {}, truth {})",
                                    c.inf_mismatch, format_index(unravel(first_inf, shape)),
                                    num(impl[first_inf]), num(truth[first_inf])));
  }
  // Rule 3: every element within atol or rtol (or the allowed fraction of them).
  if (finite_failed > 0 && c.pass_fraction < tol.min_pass_fraction) {
    const double a = impl[worst_fail_at], t = truth[worst_fail_at];
    const double d = std::fabs(a - t);
    const double rel = t != 0 ? d / std::fabs(t) : std::numeric_limits<double>::infinity();
    c.reasons.push_back(fmt::format(
        "{} of {} elements outside atol {} / rtol {} (pass {:.6g}% < {:.6g}%); worst at {}: "
        "result {}, truth {}: abs err {} > atol {} and rel err {} > rtol {}",
        finite_failed, numel, num(atol), num(tol.rtol), 100.0 * c.pass_fraction,
        100.0 * tol.min_pass_fraction, format_index(unravel(worst_fail_at, shape)), num(a), num(t),
        num(d), num(atol), num(rel), num(tol.rtol)));
  }
  // Rule 4: global cosine difference.
  if (!(c.cos_diff <= tol.cos_diff)) {
    c.reasons.push_back(fmt::format("cos diff {} > {}", num(c.cos_diff), num(tol.cos_diff)));
  }
  // Rule 5: error ratio against the deployed-precision reference. Its metrics are recorded
  // whenever a reference is given (information), but it gates only when ratio_k > 0.
  if (same_dtype) judge_error_ratio(c, tol, truth, *same_dtype);

  c.verdict = c.reasons.empty() ? Verdict::pass : Verdict::fail;
  return c;
}

nlohmann::json to_json(const Comparison& c) {
  nlohmann::json j;
  j["what"] = c.what;
  j["tolerance"] = c.tolerance;
  j["verdict"] = to_string(c.verdict);
  j["reasons"] = c.reasons;
  j["numel"] = c.numel;
  j["max_abs_err"] = number_to_json(c.max_abs_err);
  j["max_abs_index"] = c.max_abs_index;
  j["max_rel_err"] = number_to_json(c.max_rel_err);
  j["max_rel_index"] = c.max_rel_index;
  j["p50_abs_err"] = number_to_json(c.p50_abs_err);
  j["p99_abs_err"] = number_to_json(c.p99_abs_err);
  j["pass_fraction"] = number_to_json(c.pass_fraction);
  j["cos_diff"] = number_to_json(c.cos_diff);
  j["nan_mismatch"] = c.nan_mismatch;
  j["inf_mismatch"] = c.inf_mismatch;
  j["elements_failed"] = c.elements_failed;
  j["max_bound_use"] = number_to_json(c.max_bound_use);
  j["max_abs_truth"] = number_to_json(c.max_abs_truth);
  j["atol_used"] = number_to_json(c.atol_used);
  j["same_dtype_max_abs_err"] =
      c.same_dtype_max_abs_err ? number_to_json(*c.same_dtype_max_abs_err) : nlohmann::json();
  j["error_ratio"] = c.error_ratio ? number_to_json(*c.error_ratio) : nlohmann::json();
  j["error_ratio_limit"] = c.error_ratio_limit ? number_to_json(*c.error_ratio_limit) : nlohmann::json();
  return j;
}

Comparison comparison_from_json(const nlohmann::json& j) {
  try {
    Comparison c;
    c.what = j.at("what").get<std::string>();
    c.tolerance = j.at("tolerance").get<std::string>();
    c.verdict = verdict_from_string(j.at("verdict").get<std::string>());
    c.reasons = j.at("reasons").get<std::vector<std::string>>();
    c.numel = j.at("numel").get<int64_t>();
    c.max_abs_err = number_from_json(j.at("max_abs_err"));
    c.max_abs_index = j.at("max_abs_index").get<std::vector<int64_t>>();
    c.max_rel_err = number_from_json(j.at("max_rel_err"));
    c.max_rel_index = j.at("max_rel_index").get<std::vector<int64_t>>();
    c.p50_abs_err = number_from_json(j.at("p50_abs_err"));
    c.p99_abs_err = number_from_json(j.at("p99_abs_err"));
    c.pass_fraction = number_from_json(j.at("pass_fraction"));
    c.cos_diff = number_from_json(j.at("cos_diff"));
    c.nan_mismatch = j.at("nan_mismatch").get<int64_t>();
    c.inf_mismatch = j.at("inf_mismatch").get<int64_t>();
    c.elements_failed = j.at("elements_failed").get<int64_t>();
    c.max_bound_use = number_from_json(j.at("max_bound_use"));
    c.max_abs_truth = number_from_json(j.at("max_abs_truth"));
    c.atol_used = number_from_json(j.at("atol_used"));
    if (!j.at("same_dtype_max_abs_err").is_null()) c.same_dtype_max_abs_err = number_from_json(j["same_dtype_max_abs_err"]);
    if (!j.at("error_ratio").is_null()) c.error_ratio = number_from_json(j["error_ratio"]);
    if (!j.at("error_ratio_limit").is_null()) c.error_ratio_limit = number_from_json(j["error_ratio_limit"]);
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("comparison JSON is malformed: {}", e.what()));
  }
}

nlohmann::json to_json(const Tolerance& t) {
  return {{"name", t.name},         {"why", t.why},
          {"atol", t.atol},         {"rtol", t.rtol},
          {"cos_diff", t.cos_diff}, {"ratio_k", t.ratio_k},
          {"ratio_floor", t.ratio_floor}, {"ratio_floor_rel", t.ratio_floor_rel},
          {"min_pass_fraction", t.min_pass_fraction}, {"atol_rel_max", t.atol_rel_max}};
}

double effective_atol(const Tolerance& t, double max_abs_truth) {
  return std::max(t.atol, t.atol_rel_max * max_abs_truth);
}

}  // namespace mla::tol
