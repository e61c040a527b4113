// L0: every registered top-k implementation (mla/core/topk.hpp), called as the host calls one
// (indices made canonical from its declared base) and judged by judge_topk against the logits it
// was given, on random rows, masked rows, rows with fewer valid positions than k, empty rows,
// k > n, all-equal rows and near-ties; the topk.dominance.* entries of the tolerance table
// against their witnesses (a selection through a float32 transform, a selection on bf16
// roundings, each breaking ties the other way: at most half of the bound); the planted bugs of
// the field (the top-k fault kernels of kernels/faults), each FAIL with its reason; and the
// contract's validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/threads.hpp"
#include "mla/faults/faults.hpp"
#include "mla/judge/topk.hpp"
#include "mla/registry/registry.hpp"

namespace mla {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Scenario {
  std::string name;
  TopkBuffers in;
};

TopkBuffers empty_case(int64_t rows, int64_t n, int k) {
  TopkBuffers b;
  b.shape = {rows, n, k};
  // Outside a row's range the logits are never read: NaN there must not matter.
  b.logits.assign(static_cast<std::size_t>(rows * n), std::numeric_limits<float>::quiet_NaN());
  b.starts.assign(static_cast<std::size_t>(rows), 0);
  b.ends.assign(static_cast<std::size_t>(rows), 0);
  return b;
}

float& at(TopkBuffers& b, int64_t r, int64_t j) { return b.logits[static_cast<std::size_t>(r * b.shape.n + j)]; }

// Random ranges (some empty, some shorter than k), normal logits of scale `scale`, a fraction
// `masked` of the in-range positions -inf.
TopkBuffers random_case(uint64_t seed, int64_t rows, int64_t n, int k, double masked, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  auto b = empty_case(rows, n, k);
  for (int64_t r = 0; r < rows; ++r) {
    const double kind = u(rng);
    int64_t start = static_cast<int64_t>(u(rng) * static_cast<double>(n) / 4), end = n;
    if (kind < 0.1) end = start;                                       // empty
    else if (kind < 0.15) end = start / 2;                             // end < start: empty too
    else if (kind < 0.35) end = std::min<int64_t>(n, start + k / 2);   // fewer than k
    else end = start + static_cast<int64_t>(u(rng) * static_cast<double>(n - start)) + 1;
    b.starts[static_cast<std::size_t>(r)] = static_cast<int32_t>(start);
    b.ends[static_cast<std::size_t>(r)] = static_cast<int32_t>(std::min(end, n));
    for (int64_t j = start; j < std::min(end, n); ++j) at(b, r, j) = u(rng) < masked ? kNegInf : normal(rng);
  }
  return b;
}

// Every valid logit equal (massive exact ties), the second half of the rows with a -inf in every
// third position and a range starting mid-row.
TopkBuffers all_equal_case(int64_t rows, int64_t n, int k) {
  auto b = empty_case(rows, n, k);
  for (int64_t r = 0; r < rows; ++r) {
    const bool second = r >= rows / 2;
    b.starts[static_cast<std::size_t>(r)] = second ? static_cast<int32_t>(n / 3) : 0;
    b.ends[static_cast<std::size_t>(r)] = static_cast<int32_t>(n);
    for (int64_t j = b.starts[static_cast<std::size_t>(r)]; j < n; ++j) {
      at(b, r, j) = (second && j % 3 == 0) ? kNegInf : 1.5f;
    }
  }
  return b;
}

// Near-ties: one logit at +M, the rest a cluster a few float32 ulps apart around -0.999·M, so the
// k-th boundary falls inside the cluster, where a transform through x - max (|x - max| ~ 2M)
// merges neighbours.
TopkBuffers near_tie_case(uint64_t seed, int64_t rows, int64_t n, int k, float magnitude) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> steps(-40, 40);
  auto b = empty_case(rows, n, k);
  for (int64_t r = 0; r < rows; ++r) {
    b.starts[static_cast<std::size_t>(r)] = static_cast<int32_t>(r % 5);
    b.ends[static_cast<std::size_t>(r)] = static_cast<int32_t>(n);
    for (int64_t j = r % 5; j < n; ++j) {
      float x = -0.999f * magnitude;
      for (int s = steps(rng); s != 0; s += s > 0 ? -1 : 1) x = std::nextafter(x, s > 0 ? 0.0f : -2.0f * magnitude);
      at(b, r, j) = x;
    }
    at(b, r, n - 1) = magnitude;
  }
  return b;
}

// A prefill's rows: row i sees [0, i + 1); the future positions hold finite scores (as a logits
// kernel that computes the whole matrix and leaves the range to the top-k writes them).
TopkBuffers causal_case(uint64_t seed, int64_t n, int k) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  auto b = empty_case(n, n, k);
  for (int64_t r = 0; r < n; ++r) {
    b.ends[static_cast<std::size_t>(r)] = static_cast<int32_t>(r + 1);
    for (int64_t j = 0; j < n; ++j) at(b, r, j) = normal(rng) + (j > r ? 10.0f : 0.0f);
  }
  return b;
}

const std::vector<Scenario>& scenarios() {
  static const std::vector<Scenario> s = [] {
    std::vector<Scenario> v;
    v.push_back({"random", random_case(1, 96, 300, 32, 0.0, 3.0f)});
    v.push_back({"random_masked", random_case(2, 96, 300, 32, 0.3, 3.0f)});
    v.push_back({"mostly_masked", random_case(3, 64, 200, 48, 0.9, 50.0f)});
    v.push_back({"large_logits", random_case(4, 64, 2500, 2048, 0.1, 1e4f)});
    v.push_back({"k_above_n", random_case(5, 32, 40, 64, 0.2, 1.0f)});
    v.push_back({"all_equal", all_equal_case(16, 120, 17)});
    v.push_back({"near_ties", near_tie_case(6, 32, 400, 100, 1000.0f)});
    v.push_back({"causal", causal_case(7, 80, 64)});
    auto empty = empty_case(8, 50, 4);
    for (int64_t r = 0; r < 8; ++r) empty.starts[static_cast<std::size_t>(r)] = static_cast<int32_t>(r * 5);
    v.push_back({"empty_rows", std::move(empty)});
    v.push_back({"no_rows", empty_case(0, 10, 3)});
    return v;
  }();
  return s;
}

const TopkBuffers& scenario(const std::string& name) {
  for (const auto& s : scenarios()) {
    if (s.name == name) return s.in;
  }
  throw Error("no scenario " + name);
}

TopkOutputs call(const TopkImpl& k, const TopkInputs& in) {
  auto p = k.prepare(in);
  p->run();
  auto o = p->results();
  topk_outputs_to_canonical(k.info().conventions, in, o);
  return o;
}

// The columns of row r inside its range whose logit is finite, ascending.
std::vector<int64_t> valid_positions(const TopkInputs& in, int64_t r) {
  std::vector<int64_t> v;
  for (int64_t j = in.starts[static_cast<std::size_t>(r)]; j < in.ends[static_cast<std::size_t>(r)]; ++j) {
    if (std::isfinite(in.logits[static_cast<std::size_t>(r * in.shape.n + j)])) v.push_back(j);
  }
  return v;
}

std::string first_reason(const TopkJudgement& j) { return j.reasons.empty() ? "" : j.reasons.front(); }

bool has_reason(const TopkJudgement& j, const std::string& needle) {
  const auto holds = [&](const std::string& r) { return r.find(needle) != std::string::npos; };
  return std::any_of(j.reasons.begin(), j.reasons.end(), holds);
}

TEST(TopkKernels, EveryRegisteredImplementationPassesEveryScenarioExactly) {
  register_builtin_kernels();
  const auto& kernels = Registry::instance().topk();
  ASSERT_GE(kernels.size(), 2u);
  for (const auto& k : kernels) {
    for (const auto& [name, in] : scenarios()) {
      SCOPED_TRACE(k->info().name + " on " + name);
      ASSERT_FALSE(k->check(in.shape)) << *k->check(in.shape);
      const auto j = judge_topk(in.view(), call(*k, in.view()), k->info().precision, k->info().conventions.sorted);
      EXPECT_TRUE(j.pass()) << first_reason(j);
      // Both compare the given float32 values exactly: nothing excluded beats anything selected.
      EXPECT_EQ(j.max_bound_use, 0.0);
    }
  }
}

// run() is repeatable and its result does not depend on the thread count (rows are split over
// threads, each row's selection is the same wherever it runs).
TEST(TopkKernels, ResultsAreRepeatableAndThreadCountIndependent) {
  register_builtin_kernels();
  const auto& in = scenario("large_logits");
  for (const auto& k : Registry::instance().topk()) {
    SCOPED_TRACE(k->info().name);
    auto p = k->prepare(in.view());
    set_threads(1);
    p->run();
    const auto one = p->results();
    set_threads(4);
    p->run();
    const auto four = p->results();
    p->run();
    EXPECT_EQ(one.indices, four.indices);
    EXPECT_EQ(four.indices, p->results().indices);
    set_threads(0);
  }
}

// The two built-in kernels differ in base, order and tie-break; made canonical, they select the
// same set wherever the k-th and (k+1)-th largest valid logits differ (the set is unique there).
TEST(TopkKernels, TheTwoAlgorithmsSelectTheSameSetWhereItIsUnique) {
  register_builtin_kernels();
  const auto* exact = Registry::instance().find_topk("cpu_topk_exact");
  const auto* radix = Registry::instance().find_topk("cpu_topk_radix_f32");
  ASSERT_TRUE(exact && radix);
  EXPECT_NE(exact->info().conventions, radix->info().conventions);
  int unique_rows = 0, differing_tied_rows = 0;
  for (const auto& [name, in] : scenarios()) {
    const auto a = call(*exact, in.view()), b = call(*radix, in.view());
    const auto& s = in.shape;
    for (int64_t r = 0; r < s.rows; ++r) {
      std::vector<int64_t> ra(a.indices.begin() + r * s.k, a.indices.begin() + (r + 1) * s.k);
      std::vector<int64_t> rb(b.indices.begin() + r * s.k, b.indices.begin() + (r + 1) * s.k);
      std::vector<float> v;
      for (const auto j : valid_positions(in.view(), r)) v.push_back(in.logits[static_cast<std::size_t>(r * s.n + j)]);
      std::sort(v.begin(), v.end(), std::greater<>());
      const auto k = static_cast<std::size_t>(s.k);
      const bool unique = v.size() <= k || v[k - 1] != v[k];
      std::sort(ra.begin(), ra.end());
      std::sort(rb.begin(), rb.end());
      if (unique) {
        ++unique_rows;
        EXPECT_EQ(ra, rb) << name << " row " << r;
      } else {
        differing_tied_rows += ra != rb;
      }
    }
  }
  EXPECT_GT(unique_rows, 0);
  // The tie rows are where the two legitimately disagree: the judge's tie rule is exercised.
  EXPECT_GT(differing_tied_rows, 0);
}

// A selection by `score` (descending; ties by DESCENDING position, the opposite of the oracle),
// absolute, unsorted: the witnesses of the topk.dominance.* entries.
TopkOutputs select_by(const TopkInputs& in, const std::function<float(float row_max, float x)>& score) {
  const auto& s = in.shape;
  TopkOutputs o;
  o.indices.assign(static_cast<std::size_t>(s.rows * s.k), -1);
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* row = in.logits.data() + r * s.n;
    auto valid = valid_positions(in, r);
    float m = kNegInf;
    for (const auto j : valid) m = std::max(m, row[j]);
    std::vector<float> key(static_cast<std::size_t>(s.n));
    for (const auto j : valid) key[static_cast<std::size_t>(j)] = score(m, row[j]);
    const auto key_of = [&](int64_t j) { return key[static_cast<std::size_t>(j)]; };
    std::sort(valid.begin(), valid.end(), [&](int64_t x, int64_t y) {
      return key_of(x) != key_of(y) ? key_of(x) > key_of(y) : x > y;
    });
    for (std::size_t i = 0; i < std::min<std::size_t>(valid.size(), static_cast<std::size_t>(s.k)); ++i) {
      o.indices[static_cast<std::size_t>(r * s.k) + i] = valid[i];
    }
  }
  return o;
}

float f32_transform(float m, float x) { return (x - m) * 0.7f; }  // two float32 roundings
float bf16_rounding(float, float x) { return bf16_to_float(bf16_from_float(x)); }

double witness_use(const char* who, const std::function<float(float, float)>& score, LogitsPrecision p) {
  double worst = 0;
  std::string where;
  for (const auto& [name, in] : scenarios()) {
    const auto j = judge_topk(in.view(), select_by(in.view(), score), p, false);
    EXPECT_TRUE(j.pass()) << who << " on " << name << ": " << first_reason(j);
    if (j.max_bound_use > worst) worst = j.max_bound_use, where = name;
  }
  std::printf("[topk tolerance] %s: bound use %.3g of topk.dominance.%s (%s)\n", who, worst, to_string(p), where.c_str());
  return worst;
}

TEST(TopkKernels, TheWitnessesUseAtMostHalfOfTheirEntries) {
  const double f32 = witness_use("float32 (x - max)·0.7, reverse ties", f32_transform, LogitsPrecision::f32);
  const double bf16 = witness_use("bf16-rounded logits, reverse ties", bf16_rounding, LogitsPrecision::bf16);
  EXPECT_LE(f32, 0.5);
  EXPECT_LE(bf16, 0.5);
  // Not vacuous: each witness does misorder near-ties, which the judge accepts.
  EXPECT_GT(f32, 0.0);
  EXPECT_GT(bf16, 0.0);
}

// The precision a kernel declares matters: comparing bf16 roundings while declaring float32
// misorders near-ties by far more than float32's tolerance.
TEST(TopkKernels, ABf16SelectionDeclaredFloat32Fails) {
  const auto& in = scenario("near_ties");
  const auto j = judge_topk(in.view(), select_by(in.view(), bf16_rounding), LogitsPrecision::f32, false);
  EXPECT_FALSE(j.pass());
  EXPECT_TRUE(has_reason(j, "a clear top-100 member was dropped")) << first_reason(j);
}

// ---- planted bugs: the top-k fault kernels (kernels/faults), called and judged as the host does --

struct Planted {
  const char* fault;     // faults::make_topk's name
  const char* scenario;
  const char* reason;    // a fragment every judgement of it must contain
};

const Planted kPlanted[] = {
    {"last_valid_dropped", "last_is_max", "a clear top-32 member was dropped"},
    {"masked_filler", "mostly_masked", "a masked position"},
    {"range_end_ignored", "causal", "outside the row's valid range"},
    {"duplicate", "random", "appears twice"},
    {"absolute_declared_relative", "random", "outside the row's valid range"},
    {"relative_declared_absolute", "random", "outside the row's valid range"},
    {"one_short", "random", "valid distinct indices, expected min(k = 32"},
    {"padding_first", "random_masked", "after the -1 padding"},
    {"unsorted_declared_sorted", "random", "declared sorted"},
    {"index_past_row", "random_masked", "outside the logits row"},
};

// The random case with every non-empty row's last position holding a clear maximum.
TopkBuffers last_is_max_case() {
  auto b = random_case(8, 64, 300, 32, 0.0, 3.0f);
  for (int64_t r = 0; r < b.shape.rows; ++r) {
    const auto e = b.ends[static_cast<std::size_t>(r)];
    if (e > b.starts[static_cast<std::size_t>(r)]) at(b, r, e - 1) = 100.0f;
  }
  return b;
}

TEST(TopkKernels, EachPlantedBugFailsWithItsReason) {
  const auto last_is_max = last_is_max_case();
  ASSERT_EQ(std::size(kPlanted), faults::topk_names().size()) << "every planted top-k bug has a scenario here";
  for (const auto& p : kPlanted) {
    SCOPED_TRACE(p.fault);
    const auto k = faults::make_topk(p.fault);
    const auto& in = std::string(p.scenario) == "last_is_max" ? last_is_max : scenario(p.scenario);
    const auto v = in.view();
    const auto j = judge_topk(v, call(*k, v), k->info().precision, k->info().conventions.sorted);
    EXPECT_FALSE(j.pass());
    EXPECT_GT(j.rows_failed, 0);
    EXPECT_TRUE(has_reason(j, p.reason)) << "first reason: " << first_reason(j);
    EXPECT_EQ(first_reason(j).rfind("row ", 0), 0u) << "a reason names its row: " << first_reason(j);
    std::printf("[topk bug] %s on %s: %lld rows fail; %s\n", k->info().name.c_str(), p.scenario,
                static_cast<long long>(j.rows_failed), first_reason(j).c_str());
  }
}

// The rule written out pair by pair, O(k·n), independently of judge_topk's one-pass form: on small
// random rows (integer logits, so ties are exact and near-ties absent), random mutations of a
// correct selection must be judged alike by both.
bool rule_by_pairs(const TopkInputs& in, const std::vector<int64_t>& got, bool sorted) {
  const auto& s = in.shape;
  const auto valid = valid_positions(in, 0);
  const auto is_valid = [&](int64_t x) { return std::find(valid.begin(), valid.end(), x) != valid.end(); };
  const auto L = [&](int64_t x) { return static_cast<double>(in.logits[static_cast<std::size_t>(x)]); };
  std::vector<int64_t> sel;
  bool padded = false;
  for (const auto x : got) {
    if (x == -1) {
      padded = true;
      continue;
    }
    if (padded || !is_valid(x) || std::count(sel.begin(), sel.end(), x)) return false;
    if (sorted && !sel.empty() && L(x) > L(sel.back())) return false;
    sel.push_back(x);
  }
  if (static_cast<int64_t>(sel.size()) != std::min<int64_t>(s.k, static_cast<int64_t>(valid.size()))) return false;
  for (const auto a : sel) {
    for (const auto x : valid) {
      if (!std::count(sel.begin(), sel.end(), x) && L(x) > L(a)) return false;
    }
  }
  return true;
}

TEST(TopkKernels, TheJudgeAgreesWithThePairByPairRuleOnMutatedSelections) {
  register_builtin_kernels();
  const auto* exact = Registry::instance().find_topk("cpu_topk_exact");
  ASSERT_TRUE(exact);
  std::mt19937_64 rng(11);
  const auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int passed = 0, failed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t n = pick(1, 12);
    auto b = empty_case(1, n, static_cast<int>(pick(1, 8)));
    b.starts[0] = static_cast<int32_t>(pick(0, n));
    b.ends[0] = static_cast<int32_t>(pick(0, n));
    for (int64_t j = b.starts[0]; j < b.ends[0]; ++j) {
      at(b, 0, j) = pick(0, 5) == 0 ? kNegInf : static_cast<float>(pick(-3, 3));
    }
    auto got = call(*exact, b.view()).indices;
    const auto slot = [&] { return static_cast<std::size_t>(pick(0, b.shape.k - 1)); };
    switch (pick(0, 6)) {  // a mutation, or none
      case 0: break;
      case 1: got[slot()] = pick(-2, n); break;
      case 2: got[slot()] = got[slot()]; break;
      case 3: std::shuffle(got.begin(), got.end(), rng); break;
      case 4: std::reverse(got.begin(), got.end()); break;
      case 5:
        for (auto& x : got) x += x >= 0 ? 1 : 0;
        break;
      default: got[slot()] = -1; break;
    }
    const bool sorted = pick(0, 1) == 1;
    const bool by_pairs = rule_by_pairs(b.view(), got, sorted);
    const auto j = judge_topk(b.view(), TopkOutputs{got}, LogitsPrecision::f32, sorted);
    ASSERT_EQ(j.pass(), by_pairs) << "trial " << trial << ": " << first_reason(j);
    (by_pairs ? passed : failed) += 1;
  }
  // Both verdicts occur often: the comparison is not one-sided.
  EXPECT_GT(passed, 300);
  EXPECT_GT(failed, 300);
}

// ---- the contract ------------------------------------------------------------------------------
TopkBuffers small_case() {
  auto b = empty_case(2, 6, 3);
  b.starts = {0, 2};
  b.ends = {4, 6};
  for (int64_t j = 0; j < 4; ++j) at(b, 0, j) = static_cast<float>(j);
  for (int64_t j = 2; j < 6; ++j) at(b, 1, j) = j == 3 ? kNegInf : static_cast<float>(-j);
  return b;
}

std::string validation_error(const TopkBuffers& b) {
  try {
    validate_topk_inputs(b.view(), "k");
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

TEST(TopkContract, MalformedInputsAreRefusedNamingTheField) {
  const auto good = small_case();
  EXPECT_EQ(validation_error(good), "accepted") << "NaN outside a row's range is never read";
  const auto refused = [&](const std::function<void(TopkBuffers&)>& change, const std::string& needle) {
    auto b = good;
    change(b);
    const auto why = validation_error(b);
    EXPECT_NE(why.find(needle), std::string::npos) << "expected '" << needle << "' in: " << why;
    EXPECT_EQ(why.rfind("k: ", 0), 0u) << why;
  };
  refused([](TopkBuffers& b) { at(b, 1, 4) = std::nanf(""); }, "logits[1, 4] is nan");
  refused([](TopkBuffers& b) { at(b, 0, 0) = std::numeric_limits<float>::infinity(); }, "logits[0, 0] is inf");
  refused([](TopkBuffers& b) { b.starts[1] = 7; }, "starts[1] = 7 is outside [0, n = 6]");
  refused([](TopkBuffers& b) { b.ends[0] = -1; }, "ends[0] = -1");
  refused([](TopkBuffers& b) { b.logits.pop_back(); }, "logits has 11 elements, the shape needs 12");
  refused([](TopkBuffers& b) { b.ends.pop_back(); }, "ends has 1 elements");
  refused([](TopkBuffers& b) { b.shape.k = 0; }, "k=0");
  refused([](TopkBuffers& b) { b.shape.rows = -1; }, "rows=-1");
  // A row with end < start is empty, not malformed.
  auto backwards = good;
  backwards.ends[1] = 1;
  EXPECT_EQ(validation_error(backwards), "accepted");
}

TEST(TopkContract, ConventionsRoundTripAndBadFieldsAreNamed) {
  const TopkConventions c{IndexBase::relative, false};
  EXPECT_EQ(topk_conventions_from_json(to_json(c)), c);
  const auto error_of = [](const nlohmann::json& j) {
    try {
      topk_conventions_from_json(j);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error_of({{"index_base", "absolute"}}).find("'sorted'"), std::string::npos);
  const auto bad = error_of({{"index_base", "rel"}, {"sorted", true}});
  EXPECT_NE(bad.find("'index_base'"), std::string::npos) << bad;
  EXPECT_NE(bad.find("'rel'"), std::string::npos) << bad;
  EXPECT_THROW(logits_precision_from_string("fp8"), Error);
  EXPECT_EQ(logits_precision_from_string("float32"), LogitsPrecision::f32);
}

TEST(TopkContract, RelativeIndicesBecomeColumnsAndBadOnesStayBad) {
  auto b = small_case();
  TopkOutputs o{{0, 1, -1, 0, -1, -2}};
  topk_outputs_to_canonical({IndexBase::relative, false}, b.view(), o);
  EXPECT_EQ(o.indices, (std::vector<int64_t>{0, 1, -1, 2, -1, -2}));
  TopkOutputs same{{0, 1, -1, 0, -1, -2}};
  topk_outputs_to_canonical({IndexBase::absolute, false}, b.view(), same);
  EXPECT_EQ(same.indices, (std::vector<int64_t>{0, 1, -1, 0, -1, -2}));
  // -2 in a row starting at 2 would land on column 0 by the shift: it stays -2, and fails.
  const auto j = judge_topk(b.view(), o, LogitsPrecision::f32, false);
  EXPECT_TRUE(has_reason(j, "row 1: slot 2 holds index -2, outside the logits row")) << first_reason(j);
}

TEST(TopkContract, TheJudgeRefusesMalformedInputsAndReportsAWrongSize) {
  auto b = small_case();
  const auto j = judge_topk(b.view(), TopkOutputs{{3, 2, 1}}, LogitsPrecision::f32, false);
  EXPECT_FALSE(j.pass());
  EXPECT_NE(first_reason(j).find("indices has 3 elements, the shape [rows = 2, k = 3] needs 6"), std::string::npos)
      << first_reason(j);
  b.starts[0] = -3;
  EXPECT_THROW(judge_topk(b.view(), TopkOutputs{}, LogitsPrecision::f32, false), Error);
}

class Claims final : public TopkImpl {
 public:
  Claims() {
    info_.name = "claims";
    info_.ks = {2048};
    info_.max_n = 4096;
  }
  const TopkKernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedTopk> prepare(const TopkInputs&) const override { return nullptr; }

 private:
  TopkKernelInfo info_;
};

TEST(TopkContract, ClaimsRefuseWithAReasonAndTheCostModelCountsTheRanges) {
  const Claims c;
  EXPECT_FALSE(c.check({4, 4096, 2048}));
  EXPECT_NE(c.check({4, 4096, 32}).value_or("").find("k=32"), std::string::npos);
  EXPECT_NE(c.check({4, 8192, 2048}).value_or("").find("n=8192"), std::string::npos);
  const auto b = small_case();
  int64_t in_range = 0;
  for (std::size_t r = 0; r < b.starts.size(); ++r) in_range += std::max(0, b.ends[r] - b.starts[r]);
  const auto cost = topk_cost_model(b.view());
  EXPECT_EQ(cost.bytes, 4.0 * static_cast<double>(in_range) + 8.0 * 2 + 4.0 * 2 * 3);
  EXPECT_EQ(cost.flops, 0.0);
}

}  // namespace
}  // namespace mla
