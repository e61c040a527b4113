// L1: the mutation score of the prefill and merge suites. Every planted bug of kernels/faults
// (mla::faults::make_prefill / make_merge) runs over every stored case of the prefill and merge
// families, called as the host calls a kernel and judged by the one judge against the case's
// truth. Whether a bug changes a case is decided here from the case's own metadata (its
// sequences and mask, its scale, which lse are infinite and how far apart), independently of the
// judge: the bug must FAIL on every case it changes and PASS on every case it leaves alone, and
// every bug must be caught by at least one stored case. The table is printed. Drawn batches
// supply what the catalog lacks (a batch each prefill bug leaves alone), and the fault kernels
// refuse malformed inputs as any kernel does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"
#include "mla/faults/faults.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/ref/prefill.hpp"
#include "mla/registry/registry.hpp"
#include "support/goldens.hpp"
#include "support/host_call.hpp"
#include "support/refused.hpp"

namespace mla {
namespace {

template <class Case>
std::vector<Case> stored_cases(golden::FamilyKind kind, Case (*load)(const std::filesystem::path&, const std::string&)) {
  std::vector<Case> out;
  std::string why;
  const auto cat = testing::open_goldens(why);
  if (!cat) return out;
  for (const auto& fam : golden::family_names(kind)) {
    const auto& file = golden::family(fam).file();
    if (!cat->sha256.count(file)) continue;
    for (const auto& name : golden::read_file_info(cat->file(file)).cases) out.push_back(load(cat->file(file), name));
  }
  return out;
}

const std::vector<golden::PrefillCase>& prefill_cases() {
  static const auto c = stored_cases(golden::FamilyKind::prefill, &golden::load_prefill_case);
  return c;
}
const std::vector<golden::MergeCase>& merge_cases() {
  static const auto c = stored_cases(golden::FamilyKind::merge, &golden::load_merge_case);
  return c;
}

// ---- which cases a prefill bug changes -------------------------------------------------------

// The key rows a query row attends: count rows from `first` (global). Two empty ranges are the
// same whatever their first.
struct Seen {
  int64_t first = 0, count = 0;
  bool same_as(const Seen& o) const { return count == o.count && (count == 0 || first == o.first); }
};
Seen contract_seen(bool causal, const PrefillSequence& seq, int64_t i) {
  return {seq.k_begin, prefill_last_key(causal, seq, i) + 1};
}
// What a bug shows row i of sequence j, from the bug's description.
using SeenByBug = std::function<Seen(const std::vector<PrefillSequence>&, std::size_t j, int64_t i)>;

bool some_row_sees_otherwise(const PrefillInputs& in, const SeenByBug& bug) {
  const auto seqs = prefill_sequences(in);
  for (std::size_t j = 0; j < seqs.size(); ++j) {
    for (int64_t i = 0; i < seqs[j].s_q; ++i) {
      if (!bug(seqs, j, i).same_as(contract_seen(in.shape.causal, seqs[j], i))) return true;
    }
  }
  return false;
}

// A key whose softmax weight in a row is at most this changes that row's out and lse by about as
// much, relative: a thousand times below what the fp64 entries the fault kernels (fp64 output)
// are judged by still see (1e-12 of max|truth|), so such a key changes nothing that matters.
constexpr double kNegligibleWeight = 1e-9;

// causal_off_by_one adds one key to a causal row: the one after its last (key 0 for a row that
// attended nothing). With random keys any added key matters, unless the row's softmax is so
// peaked (q of std 100) that the newcomer weighs nothing: its weight next to the row's true
// keys, 1 / (1 + e^(lse - s)), from its score s = scale·q·k and the case's truth lse. The
// largest such weight over rows and heads; 0 when no row gains a key.
double extra_key_weight(const golden::PrefillCase& c) {
  const PrefillInputs in = c.inputs();
  if (!in.shape.causal) return 0;
  const int64_t heads = in.shape.heads, dqk = in.shape.d_qk;
  double worst = 0;
  for (const auto& seq : prefill_sequences(in)) {
    for (int64_t i = 0; i < seq.s_q; ++i) {
      const int64_t extra = prefill_last_key(true, seq, i) + 1;  // the key after the last seen
      if (seq.s_k - seq.s_q + i + 1 < 0 || extra >= seq.s_k) continue;  // still nothing, or no next key
      const int64_t row = seq.q_begin + i, key = seq.k_begin + extra;
      for (int64_t h = 0; h < heads; ++h) {
        double dot = 0;
        for (int64_t d = 0; d < dqk; ++d) {
          dot += double{bf16_to_float(in.q[static_cast<std::size_t>((row * heads + h) * dqk + d)])} *
                 bf16_to_float(in.k[static_cast<std::size_t>((key * heads + h) * dqk + d)]);
        }
        const double lse = c.truth_lse[static_cast<std::size_t>(h * in.shape.total_q + row)];
        worst = std::max(worst, std::isinf(lse) ? 1.0 : 1.0 / (1.0 + std::exp(lse - in.softmax_scale * dot)));
      }
    }
  }
  return worst;
}

// The other bugs change a row's keys wholesale (another range, another mask edge), its scale or
// its V: with random inputs that moves out and lse far beyond the fp64 entries, so the attended
// set, the scale and what is read decide.
bool prefill_bug_changes(const std::string& bug, const golden::PrefillCase& c) {
  const PrefillInputs in = c.inputs();
  const bool causal = in.shape.causal;
  if (bug == "causal_off_by_one") return extra_key_weight(c) > kNegligibleWeight;
  if (bug == "top_left_mask") {
    return some_row_sees_otherwise(in, [&](const auto& seqs, std::size_t j, int64_t i) {
      const auto& s = seqs[j];
      return causal ? Seen{s.k_begin, std::min(i + 1, s.s_k)} : contract_seen(false, s, i);
    });
  }
  if (bug == "cu_seqlens_shifted") {
    return some_row_sees_otherwise(in, [&](const auto& seqs, std::size_t j, int64_t i) {
      PrefillSequence s = seqs[j];
      const auto& next = seqs[std::min(j + 1, seqs.size() - 1)];
      s.k_begin = next.k_begin;
      s.s_k = next.s_k;
      return contract_seen(causal, s, i);
    });
  }
  const bool attends = prefill_attended_pairs(in) > 0;
  if (bug == "no_mscale") {
    const double plain = 1.0 / std::sqrt(static_cast<double>(kMhaDqk));
    return attends && std::abs(in.softmax_scale - plain) > 1e-12 * plain;
  }
  if (bug == "v_unpadded_stride") {
    // Only key row 0 of head 0 is read where it lies: any other attended (key, head) is misread.
    if (!attends) return false;
    if (in.shape.heads > 1) return true;
    for (const auto& seq : prefill_sequences(in)) {
      for (int64_t i = 0; i < seq.s_q; ++i) {
        const Seen s = contract_seen(causal, seq, i);
        if (s.count > 0 && s.first + s.count > 1) return true;
      }
    }
    return false;
  }
  throw Error("no predicate for prefill fault " + bug);
}

// ---- which cases a merge bug changes ---------------------------------------------------------

// A weight or the merged lse moving by more than this is a change: a thousandth, far above the
// float32 roundings a correct merge makes (a few 2^-24) and far below what either bug does where
// it acts (the stored cases it changes move by 0.05 or more).
constexpr double kMaterial = 1e-3;

bool merge_bug_changes(const std::string& bug, const golden::MergeCase& c) {
  const double inf = std::numeric_limits<double>::infinity();
  for (std::size_t r = 0; r < c.lse_a.size(); ++r) {
    const double a = c.lse_a[r], b = c.lse_b[r];
    if (bug == "pos_inf_lse_as_number") {
      if (a == inf || b == inf) return true;
      continue;
    }
    if (bug != "lse_base2_as_natural") throw Error("no predicate for merge fault " + bug);
    if (!std::isfinite(a) || !std::isfinite(b)) continue;  // one side alone: weight 1 in any base
    // The smaller side's weight and the merged lse, from d = |a - b| nats, and the same read as
    // d / ln 2 nats (the base-2 values merged with e^x, the result scaled back by ln 2).
    const double d = std::abs(a - b), ln2 = std::log(2.0);
    const double w = 1 / (1 + std::exp(d)), w_bug = 1 / (1 + std::exp(d / ln2));
    const double l = std::log1p(std::exp(-d)), l_bug = ln2 * std::log1p(std::exp(-d / ln2));
    if (std::abs(w - w_bug) > kMaterial || std::abs(l - l_bug) > kMaterial) return true;
  }
  return false;
}

// ---- the score -------------------------------------------------------------------------------

struct Score {
  std::string bug, kernel;
  int cases = 0, affected = 0, affected_fail = 0, unaffected_pass = 0;
  std::vector<std::string> wrong;  // "case: why" where the verdict is not the predicted one
  void add(const std::string& name, bool changes, const AttentionJudgement& j) {
    ++cases;
    affected += changes;
    if (changes && !j.pass()) ++affected_fail;
    if (!changes && j.pass()) ++unaffected_pass;
    if (changes == j.pass()) {
      wrong.push_back(name + (changes ? ": PASS although the bug changes it" : ": FAIL although the bug leaves it alone: ") +
                      (j.reasons.empty() ? "" : j.reasons.front()));
    }
  }
};

void print_and_check(const char* family, const std::vector<Score>& scores) {
  std::printf("[mutation score] %-8s %-22s %5s %8s %15s %17s\n", family, "fault", "cases", "affected", "FAIL (affected)",
              "PASS (unaffected)");
  for (const auto& s : scores) {
    std::printf("[mutation score] %-8s %-22s %5d %8d %15d %17d\n", family, s.bug.c_str(), s.cases, s.affected,
                s.affected_fail, s.unaffected_pass);
  }
  for (const auto& s : scores) {
    SCOPED_TRACE(s.kernel);
    EXPECT_GT(s.affected, 0) << s.bug << " changes no stored case: the catalog cannot kill it";
    EXPECT_EQ(s.affected_fail, s.affected);
    EXPECT_EQ(s.unaffected_pass, s.cases - s.affected);
    for (const auto& w : s.wrong) ADD_FAILURE() << s.bug << " on " << w;
  }
}

TEST(PrefillMergeFaults, EachPrefillBugFailsEveryStoredCaseItChangesAndPassesTheOthers) {
  if (prefill_cases().empty()) GTEST_SKIP() << "no golden catalog with the prefill family";
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Score> scores;
  for (const auto& bug : faults::prefill_names()) {
    const auto k = faults::make_prefill(bug);
    Score s;
    s.bug = bug;
    s.kernel = k->info().name;
    for (const auto& c : prefill_cases()) {
      SCOPED_TRACE(k->info().name + " on " + c.name);
      ASSERT_FALSE(k->check(c.inputs())) << *k->check(c.inputs());
      s.add(c.name, prefill_bug_changes(bug, c),
            testing::judge_prefill_case(k->info(), c, testing::call_prefill(*k, c.inputs())));
    }
    scores.push_back(std::move(s));
  }
  print_and_check("prefill", scores);
  std::printf("[mutation score] prefill: %.2f s\n", testing::seconds_since(t0));
}

TEST(PrefillMergeFaults, EachMergeBugFailsEveryStoredCaseItChangesAndPassesTheOthers) {
  if (merge_cases().empty()) GTEST_SKIP() << "no golden catalog with the merge family";
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Score> scores;
  for (const auto& bug : faults::merge_names()) {
    const auto k = faults::make_merge(bug);
    Score s;
    s.bug = bug;
    s.kernel = k->info().name;
    for (const auto& c : merge_cases()) {
      SCOPED_TRACE(k->info().name + " on " + c.name);
      const MergeBuffers in = c.inputs();
      ASSERT_FALSE(k->check(in.shape)) << *k->check(in.shape);
      s.add(c.name, merge_bug_changes(bug, c),
            judge_merge(in.shape, testing::call_merge(*k, in.view()), {c.truth_out, c.truth_lse}));
    }
    scores.push_back(std::move(s));
  }
  print_and_check("merge", scores);
  std::printf("[mutation score] merge: %.2f s\n", testing::seconds_since(t0));
}

// Drawn inputs, made a case as the goldens are (fp64 truth and the bf16 pipeline from the
// oracles), for what the catalog lacks: a batch each bug leaves alone (v_unpadded_stride changes
// every stored case). The predicate must say so, and the bug must PASS there.
golden::PrefillCase drawn_case(const std::string& name, const std::vector<std::pair<int, int>>& lens, int heads,
                               bool causal, double scale) {
  golden::PrefillCase c;
  c.name = name;
  c.shape.batch = static_cast<int>(lens.size());
  c.shape.heads = heads;
  c.shape.causal = causal;
  c.softmax_scale = scale;
  c.cu_seqlens_q = {0};
  c.cu_seqlens_k = {0};
  for (const auto& [sq, sk] : lens) {
    c.cu_seqlens_q.push_back(c.cu_seqlens_q.back() + sq);
    c.cu_seqlens_k.push_back(c.cu_seqlens_k.back() + sk);
  }
  c.shape.total_q = c.cu_seqlens_q.back();
  c.shape.total_k = c.cu_seqlens_k.back();
  c.q.resize(static_cast<std::size_t>(c.shape.total_q * heads * kMhaDqk));
  c.k.resize(static_cast<std::size_t>(c.shape.total_k * heads * kMhaDqk));
  c.v.resize(static_cast<std::size_t>(c.shape.total_k * heads * kMhaDv));
  gen::fill_bf16(9100, 1, 0.0, 1.0, c.q);
  gen::fill_bf16(9100, 2, 0.0, 1.0, c.k);
  gen::fill_bf16(9100, 3, 0.0, 1.0, c.v);
  auto truth = ref::prefill_attention(c.inputs());
  c.truth_out = std::move(truth.out);
  c.truth_lse = std::move(truth.lse);
  const auto same = ref::prefill_same_dtype(c.inputs());
  for (const double x : same.out) c.same_dtype_out.push_back(bf16_from_double(x));
  c.same_dtype_lse.assign(same.lse.begin(), same.lse.end());
  return c;
}

TEST(PrefillMergeFaults, OnDrawnBatchesEachPrefillBugLeavesAloneItPasses) {
  const double plain = 1.0 / std::sqrt(static_cast<double>(kMhaDqk)), mscaled = 0.1352337788608801;
  const std::vector<std::pair<std::string, golden::PrefillCase>> alone{
      {"causal_off_by_one", drawn_case("context chunks", {{3, 5}, {2, 4}}, 2, false, mscaled)},
      {"top_left_mask", drawn_case("as many queries as keys", {{4, 4}, {3, 3}}, 2, true, mscaled)},
      {"cu_seqlens_shifted", drawn_case("a batch of one", {{3, 7}}, 2, true, mscaled)},
      {"no_mscale", drawn_case("the plain scale", {{3, 7}, {2, 2}}, 2, true, plain)},
      {"v_unpadded_stride", drawn_case("one head, key 0 alone", {{2, 1}}, 1, true, mscaled)},
  };
  for (const auto& [bug, c] : alone) {
    SCOPED_TRACE(bug + " on " + c.name);
    ASSERT_FALSE(prefill_bug_changes(bug, c)) << "the drawn batch was meant to be one the bug leaves alone";
    const auto k = faults::make_prefill(bug);
    const auto j = testing::judge_prefill_case(k->info(), c, testing::call_prefill(*k, c.inputs()));
    EXPECT_TRUE(j.pass()) << (j.reasons.empty() ? "" : j.reasons.front());
  }
}

// A fault kernel checks what it is handed as any kernel does: the padded V it declared, and
// well-formed inputs, refused with an error naming what is wrong.
TEST(PrefillMergeFaults, FaultKernelsRefuseMalformedInputsNamingThem) {
  const auto c = drawn_case("two sequences", {{3, 5}, {2, 4}}, 2, true, 0.1);
  const auto stride = faults::make_prefill("v_unpadded_stride");
  // The canonical 128-wide V, not the padded one it declared.
  EXPECT_TRUE(testing::refused_naming([&] { (void)stride->prepare(c.inputs()); }, "v_padded"));
  auto bad = c;
  bad.cu_seqlens_k[1] = 10;  // above the next offset, 9
  for (const auto& bug : faults::prefill_names()) {
    if (bug == "v_unpadded_stride") continue;
    try {
      (void)faults::make_prefill(bug)->prepare(bad.inputs());
      ADD_FAILURE() << bug << " accepted decreasing cu_seqlens_k";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cu_seqlens_k"), std::string::npos) << bug << ": " << e.what();
    }
  }
  MergeBuffers m;
  m.shape = {1, 1, 2, StateDType::f32};
  for (const double x : {1.0, 2.0}) append_state_value(StateDType::f32, x, m.out_a);
  m.out_b = m.out_a;
  m.lse_a = {std::numeric_limits<float>::quiet_NaN()};
  m.lse_b = {0.0f};
  for (const auto& bug : faults::merge_names()) EXPECT_THROW((void)faults::make_merge(bug)->prepare(m.view()), Error) << bug;
}

// A fault kernel is never one of the suite's: its name is none of the registered kernels' nor a
// decode fault's, it is not registered, never an oracle, and an unknown fault name is refused
// naming the known ones.
TEST(PrefillMergeFaults, FaultKernelsAreNamedApartAndNeverRegistered) {
  register_builtin_kernels();
  const auto& reg = Registry::instance();
  std::set<std::string> taken;
  for (const auto& n : faults::names()) taken.insert(n);
  for (const auto& n : faults::names()) taken.insert(faults::make(n)->info().name);
  std::set<std::string> fault_names;
  auto claim = [&](const std::string& fault, const std::string& kernel, KernelRole role) {
    SCOPED_TRACE(kernel);
    EXPECT_TRUE(fault_names.insert(fault).second && fault_names.insert(kernel).second) << "used twice";
    EXPECT_FALSE(taken.count(fault) || taken.count(kernel)) << "a decode fault has this name";
    EXPECT_EQ(reg.find(kernel), nullptr);
    EXPECT_EQ(reg.find_prefill(kernel), nullptr);
    EXPECT_EQ(reg.find_merge(kernel), nullptr);
    EXPECT_EQ(reg.find_topk(kernel), nullptr);
    EXPECT_EQ(reg.find_indexer_append(kernel), nullptr);
    EXPECT_EQ(reg.find_indexer_logits(kernel), nullptr);
    EXPECT_NE(role, KernelRole::oracle);
    EXPECT_EQ(kernel.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_"), std::string::npos);
  };
  for (const auto& n : faults::prefill_names()) claim(n, faults::make_prefill(n)->info().name, faults::make_prefill(n)->info().role);
  for (const auto& n : faults::merge_names()) claim(n, faults::make_merge(n)->info().name, faults::make_merge(n)->info().role);
  for (const auto& n : faults::topk_names()) claim(n, faults::make_topk(n)->info().name, faults::make_topk(n)->info().role);
  for (const auto& n : faults::indexer_append_names()) {
    claim(n, faults::make_indexer_append(n)->info().name, faults::make_indexer_append(n)->info().role);
  }
  for (const auto& n : faults::indexer_logits_names()) {
    claim(n, faults::make_indexer_logits(n)->info().name, faults::make_indexer_logits(n)->info().role);
  }
  // The two that declare a convention they then break, declare it.
  EXPECT_TRUE(faults::make_prefill("v_unpadded_stride")->info().conventions.v_padded);
  EXPECT_EQ(faults::make_merge("lse_base2_as_natural")->info().conventions.lse_base, LseBase::two);
  EXPECT_EQ(faults::make_prefill("top_left_mask")->info().conventions.alignment, CausalAlignment::bottom_right);
  for (const auto& make : std::vector<std::function<void()>>{[] { (void)faults::make_prefill("no_such"); },
                                                            [] { (void)faults::make_merge("no_such"); }}) {
    try {
      make();
      ADD_FAILURE() << "an unknown fault name was accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'no_such'"), std::string::npos) << what;
      EXPECT_TRUE(what.find("causal_off_by_one") != std::string::npos || what.find("lse_base2_as_natural") != std::string::npos)
          << what;
    }
  }
}

}  // namespace
}  // namespace mla
