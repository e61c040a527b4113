// L0: the indexer logits (mla/core/indexer_logits.hpp). Every registered implementation matches
// the exact oracle (mla/ref/indexer_logits.hpp) under judge_indexer_logits on paged calls with
// next_n 1 and 2 (context lengths 0, 1 and around the block edges, a permuted block table whose
// unused entries and cache blocks hold garbage, NaN codes included) and on ragged calls (a causal
// prefill after a prefix, two packed sequences, empty rows); the tolerance entry against its
// witnesses; the field's bugs (the logits fault kernels of kernels/faults) each FAIL with their
// reason; malformed calls are refused naming the field; the cost model; and the C++ oracle
// computes the Python reference indexer's logits_truth on the same codes, scales and weights.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>

#include "mla/core/error.hpp"
#include "mla/core/indexer_cache.hpp"
#include "mla/core/indexer_logits.hpp"
#include "mla/faults/faults.hpp"
#include "mla/judge/indexer_logits.hpp"
#include "mla/ref/indexer_append.hpp"
#include "mla/ref/indexer_logits.hpp"
#include "mla/registry/registry.hpp"
#include "support/refused.hpp"

namespace mla {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kD = kIndexerHeadDim;
constexpr int64_t kHeads = 64;  // V3.2's index_n_heads
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Problem {
  std::string name;
  IndexerLogitsBuffers b;
  IndexerLogitsInputs view() const { return b.view(); }
};

// e4m3 codes of normal values at a random per-row magnitude (as act_quant leaves them: spread
// over the code range), never the NaN code.
std::vector<uint8_t> codes(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  std::vector<uint8_t> c(static_cast<std::size_t>(n));
  for (auto& x : c) x = e4m3_from_double(std::clamp(normal(rng) * 100.0, -448.0, 448.0));
  return c;
}

// Head weights of both signs (upstream's weights_proj is a signed linear layer) times a q scale.
std::vector<float> weights(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> w(static_cast<std::size_t>(n));
  for (auto& x : w) x = normal(rng) * 0.125f * 3e-3f;
  return w;
}

// bf16 keys at a random magnitude per token, quantized by the indexer append's oracle.
ref::IndexerKeyQuant random_key(std::mt19937_64& rng) {
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> decade(-2.0f, 2.0f);
  const float mag = std::pow(10.0f, decade(rng));
  std::vector<uint16_t> key(kD);
  for (auto& k : key) k = bf16_from_float(mag * normal(rng));
  return ref::indexer_quantize_key(key, ScaleFmt::ue8m0, IndexerScaleOp::divide);
}

// A paged call: each sequence's blocks drawn from a shuffled pool; every cache byte and every
// block-table entry no sequence reads is garbage (0x7F bytes are e4m3 NaN codes and, as a scale,
// a NaN), so a read outside the contract shows.
Problem paged(std::string name, int next_n, std::vector<int32_t> ctx, int64_t block_size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  IndexerLogitsShape s;
  s.layout = IndexerLogitsLayout::paged;
  s.batch = static_cast<int64_t>(ctx.size());
  s.next_n = next_n;
  s.heads = kHeads;
  s.block_size = block_size;
  const int64_t longest = ctx.empty() ? 0 : *std::max_element(ctx.begin(), ctx.end());
  s.max_blocks = (longest + block_size - 1) / block_size + 1;  // one entry past the longest: never read
  s.max_context = longest + 3;
  int64_t used = 0;
  for (const auto c : ctx) used += (c + block_size - 1) / block_size;
  s.num_blocks = used + 2;
  Problem p{std::move(name), {}};
  auto& b = p.b;
  b.shape = s;
  b.q = codes(s.rows() * kHeads * kD, rng);
  b.weights = weights(s.rows() * kHeads, rng);
  b.cache.resize(static_cast<std::size_t>(s.num_blocks * block_size * kIndexerTokenBytes));
  for (std::size_t i = 0; i < b.cache.size(); ++i) b.cache[i] = (i % 3 == 0) ? 0x7F : static_cast<uint8_t>(rng());
  b.context_lens = ctx;
  b.block_table.assign(static_cast<std::size_t>(s.batch * s.max_blocks), -7);
  std::vector<int64_t> pool(static_cast<std::size_t>(s.num_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  place_paged_keys(b, pool, [&](int64_t, int64_t, uint8_t* codes, float& scale) {
    const auto k = random_key(rng);
    std::memcpy(codes, k.codes.data(), kD);
    scale = k.scale;
  });
  return p;
}

// A ragged call over `keys` keys with the rows' [ks, ke).
Problem ragged(std::string name, int64_t keys, std::vector<int32_t> ks, std::vector<int32_t> ke, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Problem p{std::move(name), {}};
  auto& b = p.b;
  b.shape.layout = IndexerLogitsLayout::ragged;
  b.shape.batch = static_cast<int64_t>(ks.size());
  b.shape.heads = kHeads;
  b.shape.num_keys = keys;
  b.q = codes(b.shape.rows() * kHeads * kD, rng);
  b.weights = weights(b.shape.rows() * kHeads, rng);
  for (int64_t t = 0; t < keys; ++t) {
    const auto k = random_key(rng);
    b.k_codes.insert(b.k_codes.end(), k.codes.begin(), k.codes.end());
    b.k_scales.push_back(k.scale);
  }
  b.ks = std::move(ks);
  b.ke = std::move(ke);
  return p;
}

// A prefill of 12 tokens after a prefix of 40 (row i sees [0, 40 + i]), then two packed
// sequences of 5 and 7 keys whose rows see their own sequence causally, then two empty rows.
Problem ragged_mixed() {
  std::vector<int32_t> ks, ke;
  for (int32_t i = 0; i < 12; ++i) ks.push_back(0), ke.push_back(41 + i);
  for (int32_t i = 0; i < 5; ++i) ks.push_back(52), ke.push_back(53 + i);
  for (int32_t i = 0; i < 7; ++i) ks.push_back(57), ke.push_back(58 + i);
  ks.push_back(30), ke.push_back(30);
  ks.push_back(64), ke.push_back(12);
  return ragged("ragged_prefix_packed_empty", 64, ks, ke, 31);
}

std::vector<Problem> problems() {
  return {paged("paged_next_n1_block_edges", 1, {0, 1, 63, 64, 65, 130}, 64, 21),
          paged("paged_next_n2_block_edges", 2, {1, 2, 64, 65, 129}, 64, 22),
          paged("paged_next_n2_block_size_16", 2, {17, 33, 3}, 16, 23), ragged_mixed()};
}

std::string all(const std::vector<std::string>& reasons) {
  std::string s;
  for (const auto& r : reasons) s += r + "\n";
  return s;
}

TEST(IndexerLogitsKernels, EveryRegisteredImplementationMatchesTheOracle) {
  register_builtin_kernels();
  ASSERT_NE(Registry::instance().find_indexer_logits("cpu_indexer_logits"), nullptr);
  for (const auto& k : Registry::instance().indexer_logits()) {
    if (auto why = k->unavailable()) {
      std::printf("[indexer logits] %s skipped: %s\n", k->info().name.c_str(), why->c_str());
      continue;
    }
    for (const auto& p : problems()) {
      SCOPED_TRACE(k->info().name + " " + p.name);
      if (auto why = k->check(p.b.shape)) {
        std::printf("[indexer logits] %s does not claim %s: %s\n", k->info().name.c_str(), p.name.c_str(), why->c_str());
        continue;
      }
      auto prepared = k->prepare(p.view());
      prepared->run();
      const auto once = prepared->results();
      prepared->run();
      prepared->synchronize();
      EXPECT_EQ(prepared->results(), once) << "a second run gave other logits";
      const auto j = judge_indexer_logits(p.view(), once);
      EXPECT_EQ(j.verdict, tol::Verdict::pass) << all(j.reasons);
      EXPECT_LE(j.cos_diff, 1e-6);
      // Not vacuous: every row's range was computed and every other element is -inf.
      int64_t finite = 0, expected = 0;
      for (int64_t r = 0; r < p.b.shape.rows(); ++r) {
        const auto range = indexer_logits_range(p.view(), r);
        expected += range.end - range.begin;
        for (int64_t c = 0; c < p.b.shape.cols(); ++c) finite += std::isfinite(once[static_cast<std::size_t>(r * p.b.shape.cols() + c)]);
      }
      EXPECT_EQ(finite, expected);
      EXPECT_GT(expected, 0);
    }
  }
}

TEST(IndexerLogitsKernels, ANameIsUniqueAcrossTheRegistrysLists) {
  Registry fresh;
  add_builtin_kernels(fresh);
  ASSERT_NE(fresh.find_indexer_logits("cpu_indexer_logits"), nullptr);
  EXPECT_EQ(fresh.find_indexer_logits("cpu_indexer_append"), nullptr) << "another kind's list";
  struct Named final : IndexerLogitsImpl {
    IndexerLogitsKernelInfo i;
    explicit Named(std::string n) { i.name = std::move(n); }
    const IndexerLogitsKernelInfo& info() const override { return i; }
    std::unique_ptr<PreparedIndexerLogits> prepare(const IndexerLogitsInputs&) const override { return nullptr; }
  };
  EXPECT_THROW(fresh.add(std::make_unique<Named>("cpu_indexer_logits")), Error);
  EXPECT_THROW(fresh.add(std::make_unique<Named>("cpu_indexer_append")), Error);
  EXPECT_THROW(fresh.add(std::make_unique<Named>("Bad Name")), Error);
  EXPECT_NO_THROW(fresh.add(std::make_unique<Named>("another_indexer_logits")));
  EXPECT_NE(fresh.find_indexer_logits("another_indexer_logits"), nullptr);
}

TEST(IndexerLogitsKernels, ClaimsAreChecked) {
  struct Claims final : IndexerLogitsImpl {
    IndexerLogitsKernelInfo i;
    const IndexerLogitsKernelInfo& info() const override { return i; }
    std::unique_ptr<PreparedIndexerLogits> prepare(const IndexerLogitsInputs&) const override { return nullptr; }
  };
  Claims k;
  k.i.layouts = {IndexerLogitsLayout::paged};
  k.i.next_ns = {1};
  k.i.heads = {64};
  k.i.block_sizes = {64};
  k.i.max_context = 100;
  IndexerLogitsShape s;
  s.heads = 64;
  s.block_size = 64;
  s.max_context = 100;
  EXPECT_FALSE(k.check(s).has_value());
  auto t = s;
  t.next_n = 2;
  EXPECT_NE(k.check(t).value_or("").find("next_n=2"), std::string::npos);
  t = s;
  t.heads = 32;
  EXPECT_NE(k.check(t).value_or("").find("heads=32"), std::string::npos);
  t = s;
  t.block_size = 16;
  EXPECT_NE(k.check(t).value_or("").find("block_size=16"), std::string::npos);
  t = s;
  t.max_context = 101;
  EXPECT_NE(k.check(t).value_or("").find("101"), std::string::npos);
  t = s;
  t.layout = IndexerLogitsLayout::ragged;
  EXPECT_NE(k.check(t).value_or("").find("ragged"), std::string::npos);
}

// What a kernel returns on `in`: one call, as the host makes it.
std::vector<float> logits_of(const IndexerLogitsImpl& k, const IndexerLogitsInputs& in) {
  auto prepared = k.prepare(in);
  prepared->run();
  prepared->synchronize();
  return prepared->results();
}

TEST(IndexerLogitsKernels, TheWitnessesUseLittleOfTheEntry) {
  // The entry's witnesses: the registered float32 kernel and the plain serial float32 loop
  // reversed (the kernel adds forward), on every problem.
  register_builtin_kernels();
  const auto* k = Registry::instance().find_indexer_logits("cpu_indexer_logits");
  ASSERT_NE(k, nullptr);
  const auto reversed = faults::make_indexer_logits_reversed_witness();
  // Besides the problems, one without cancellation: every code and weight positive, so each
  // logit is its whole magnitude and float32's relative error shows at full size.
  auto cases = problems();
  auto positive = ragged_mixed();
  positive.name = "ragged_all_positive";
  for (auto& c : positive.b.q) c &= 0x7F;
  for (auto& c : positive.b.k_codes) c &= 0x7F;
  for (auto& w : positive.b.weights) w = std::fabs(w);
  cases.push_back(positive);
  double kernel = 0, serial = 0;
  for (const auto& p : cases) {
    auto prepared = k->prepare(p.view());
    prepared->run();
    const auto jk = judge_indexer_logits(p.view(), prepared->results());
    const auto js = judge_indexer_logits(p.view(), logits_of(*reversed, p.view()));
    EXPECT_EQ(jk.verdict, tol::Verdict::pass) << p.name << "\n" << all(jk.reasons);
    EXPECT_EQ(js.verdict, tol::Verdict::pass) << p.name << "\n" << all(js.reasons);
    kernel = std::max(kernel, jk.max_bound_use);
    serial = std::max(serial, js.max_bound_use);
  }
  std::printf("[indexer logits tolerance] cpu_indexer_logits: bound use %.3g of %s\n", kernel,
              indexer_logits_tolerance().name.c_str());
  std::printf("[indexer logits tolerance] plain serial float32 loop, reversed: bound use %.3g\n", serial);
  EXPECT_LE(kernel, 0.5);
  EXPECT_LE(serial, 0.5);
  // Not vacuous: float32 does round on the way.
  EXPECT_GT(serial, 0.0);
}

TEST(IndexerLogitsKernels, EachPlantedBugFailsWithItsReason) {
  struct Expect {
    const char* fault;  // faults::make_indexer_logits's name
    const char* reason;
  };
  const Expect expects[] = {
      {"no_relu", "the relu is not applied"},
      {"scale_twice", "k_scale is applied twice"},
      {"reads_scale_after_codes", "uses the 4 bytes right after its key's codes as its scale"},
      {"sees_later_token", "an earlier token sees a later one's position"},
      {"masked_as_zero", "outside the row's valid range are not -inf"},
      {"bf16_accumulation", "outside the bound of indexer.logits.f32"},
  };
  ASSERT_EQ(std::size(expects), faults::indexer_logits_names().size()) << "every planted logits bug has a line here";
  for (const auto& e : expects) {
    const auto k = faults::make_indexer_logits(e.fault);
    const std::string fault = e.fault;
    for (const auto& p : problems()) {
      // Only a paged call has a scale area and several query tokens per sequence.
      const bool paged = p.b.shape.layout == IndexerLogitsLayout::paged;
      if ((fault == "reads_scale_after_codes" && !paged) || (fault == "sees_later_token" && p.b.shape.next_n < 2)) continue;
      SCOPED_TRACE(p.name + " " + e.reason);
      const auto j = judge_indexer_logits(p.view(), logits_of(*k, p.view()));
      EXPECT_EQ(j.verdict, tol::Verdict::fail);
      const std::string r = all(j.reasons);
      std::printf("[indexer logits] planted bug on %s (bound use %.3g):\n%s", p.name.c_str(), j.max_bound_use, r.c_str());
      EXPECT_NE(r.find(e.reason), std::string::npos) << r;
      // No other bug's diagnosis: each names only the bug that explains every wrong element.
      for (const auto& other : expects) {
        const std::string o = other.fault;
        if (o != fault && o != "masked_as_zero" && o != "bf16_accumulation") {
          EXPECT_EQ(r.find(other.reason), std::string::npos) << r;
        }
      }
      // The first wrong element is named by row and position.
      EXPECT_NE(r.find("row "), std::string::npos) << r;
      EXPECT_NE(r.find("position "), std::string::npos) << r;
    }
  }
}

TEST(IndexerLogitsKernels, AWrongSizedResultFailsNamingTheSizes) {
  const auto p = ragged_mixed();
  register_builtin_kernels();
  auto got = logits_of(*Registry::instance().find_indexer_logits("cpu_indexer_logits"), p.view());
  got.pop_back();
  const auto j = judge_indexer_logits(p.view(), got);
  EXPECT_EQ(j.verdict, tol::Verdict::fail);
  EXPECT_NE(all(j.reasons).find(std::to_string(p.b.shape.rows() * p.b.shape.cols())), std::string::npos) << all(j.reasons);
}

TEST(IndexerLogitsOracle, TheSumIsCorrectlyRoundedAndOrderIndependent) {
  // Cancellation a plain sum loses entirely, and a half-way case that only the partials below
  // the rounding decide (1 + 2^-53 alone rounds to 1; the 2^-105 tips it up).
  EXPECT_EQ(ref::exact_sum({1e100, 1.0, -1e100}), 1.0);
  EXPECT_EQ(ref::exact_sum({1.0, std::ldexp(1.0, -53), std::ldexp(1.0, -105)}), 1.0 + std::ldexp(1.0, -52));
  EXPECT_EQ(ref::exact_sum({1.0, std::ldexp(1.0, -53)}), 1.0);
  EXPECT_EQ(ref::exact_sum({}), 0.0);
  // The heads of a call permuted (their weights with them): bit-identical logits.
  const auto p = paged("paged_next_n2_block_size_16", 2, {17, 33, 3}, 16, 23);
  auto q = p;
  std::vector<int64_t> perm(kHeads);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(5));
  for (int64_t r = 0; r < p.b.shape.rows(); ++r) {
    for (int64_t h = 0; h < kHeads; ++h) {
      const int64_t from = perm[static_cast<std::size_t>(h)];
      q.b.weights[static_cast<std::size_t>(r * kHeads + h)] = p.b.weights[static_cast<std::size_t>(r * kHeads + from)];
      std::memcpy(q.b.q.data() + (r * kHeads + h) * kD, p.b.q.data() + (r * kHeads + from) * kD, kD);
    }
  }
  EXPECT_EQ(ref::indexer_logits_reference(p.view()).logits, ref::indexer_logits_reference(q.view()).logits);
}

TEST(IndexerLogitsKernels, TheCostModelCountsTheKeysReadAndTheValidPairs) {
  const auto p = paged("one", 2, {65, 1}, 64, 3);
  const auto c = indexer_logits_cost_model(p.view());
  // Sequence 0: rows see 64 and 65 positions; sequence 1: 0 and 1.
  const double pairs = 64 + 65 + 0 + 1, per_pair = 2.0 * kHeads * kD + 3.0 * kHeads + 1.0;
  EXPECT_EQ(c.flops, pairs * per_pair);
  auto longer = p;
  longer.b.context_lens[1] = 2;
  // One more key read (132 bytes) and two more pairs; the block table entries used are the same.
  const auto d = indexer_logits_cost_model(longer.view());
  EXPECT_EQ(d.bytes - c.bytes, static_cast<double>(kIndexerTokenBytes));
  EXPECT_EQ(d.flops - c.flops, 2 * per_pair);
}

TEST(IndexerLogitsKernels, MalformedCallsAreRefusedNamingTheField) {
  register_builtin_kernels();
  const auto* k = Registry::instance().find_indexer_logits("cpu_indexer_logits");
  ASSERT_NE(k, nullptr);
  auto refused = [&](const Problem& p, const std::string& needle) {
    EXPECT_TRUE(testing::refused_naming([&] { (void)k->prepare(p.view()); }, needle));
  };
  const auto good = paged("good", 2, {1, 65, 64}, 64, 9);
  EXPECT_NO_THROW(k->prepare(good.view()));  // the garbage past each sequence is never read
  auto p = good;
  p.b.shape.next_n = 3;
  refused(p, "next_n=3");
  p = good;
  p.b.q[5 * kD + 3] = 0xFF;
  refused(p, "q[0, 5, 3] is the e4m3 NaN code");
  p = good;
  p.b.weights[7] = std::numeric_limits<float>::quiet_NaN();
  refused(p, "weights[0, 7] is nan");
  p = good;
  p.b.context_lens[2] = static_cast<int32_t>(p.b.shape.max_context + 1);
  refused(p, "context_lens[2] = ");
  p = good;
  p.b.block_table[static_cast<std::size_t>(1 * p.b.shape.max_blocks + 1)] = static_cast<int32_t>(p.b.shape.num_blocks);
  refused(p, "block_table[1, 1] = ");
  p = good;
  p.b.cache.pop_back();
  refused(p, "cache (bytes) has");
  p = good;
  p.b.k_scales.push_back(1.0f);
  refused(p, "k_scales has");
  p = good;  // a key some row reads with a zero scale
  const int64_t slot = p.b.block_table[0] * p.b.shape.block_size;
  const float zero = 0.0f;
  std::memcpy(p.b.cache.data() + indexer_scale_offset(p.b.shape.block_size, slot), &zero, sizeof zero);
  refused(p, "the key of sequence 0 position 0");
  auto r = ragged_mixed();
  r.b.ke[3] = static_cast<int32_t>(r.b.shape.num_keys + 1);
  refused(r, "ke[3] = ");
  r = ragged_mixed();
  r.b.k_codes[60 * kD + 2] = 0x7F;  // read by the first rows
  refused(r, "k_codes/k_scales[60] dim 2");
  r = ragged_mixed();
  // Key 13 holds a NaN code, but once every row is empty no row reads it.
  r.b.k_codes[13 * kD + 2] = 0x7F;
  r.b.ks.assign(r.b.ks.size(), 20);
  r.b.ke.assign(r.b.ke.size(), 20);
  EXPECT_NO_THROW(k->prepare(r.view())) << "no row reads key 13";
}

// The Python reference's logits_truth on the same codes, scales and weights, [rows, keys].
std::vector<double> python_logits(const Problem& p, std::string& why) {
  const fs::path dir = fs::temp_directory_path() / ("mla_indexer_logits_py_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "in.bin", std::ios::binary);
    const auto put = [&](const auto& v) {
      f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(v[0])));
    };
    put(p.b.q);
    put(p.b.weights);
    put(p.b.k_codes);
    put(p.b.k_scales);
  }
  const auto& s = p.b.shape;
  const std::string cmd = std::string("PYTHONPATH=") + MLA_SOURCE_DIR + "/reference/python /usr/bin/python3 " +
                          MLA_SOURCE_DIR + "/suites/kernels/indexer_logits_ref.py " + (dir / "in.bin").string() + " " +
                          std::to_string(s.rows()) + " " + std::to_string(s.heads) + " " + std::to_string(s.num_keys) +
                          " " + (dir / "out.bin").string() + " 2>&1";
  std::string out;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, f)) out += buf;
    if (::pclose(f) != 0) why = "the Python reference failed: " + out;
  } else {
    why = "cannot run " + cmd;
  }
  std::ifstream in(dir / "out.bin", std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove_all(dir);
  std::vector<double> v(bytes.size() / sizeof(double));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(double));
  return v;
}

TEST(IndexerLogitsPython, TheCppOracleComputesThePythonIndexersLogitsTruth) {
  if (std::system("/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch and numpy (mla.sh installs them)";
  }
  // Every row sees every key: logits_truth is unmasked.
  const int64_t rows = 6, keys = 50;
  const auto p = ragged("ragged_full", keys, std::vector<int32_t>(rows, 0), std::vector<int32_t>(rows, keys), 41);
  std::string why;
  const auto py = python_logits(p, why);
  ASSERT_TRUE(why.empty()) << why;
  ASSERT_EQ(py.size(), static_cast<std::size_t>(rows * keys));
  const auto cpp = ref::indexer_logits_reference(p.view());
  // Both sum the exact dots in an order-independent way; the Python reference's head sum is
  // within float64 ulps of the real one (exact.matmul), the C++ one correctly rounded. So they
  // agree to a few float64 ulps of the terms' magnitude.
  int64_t equal = 0;
  double worst = 0;
  for (std::size_t i = 0; i < py.size(); ++i) {
    equal += cpp.logits[i] == py[i];
    worst = std::max(worst, std::fabs(cpp.logits[i] - py[i]) / (cpp.magnitude[i] * std::ldexp(1.0, -52)));
  }
  std::printf("[indexer logits] C++ oracle vs Python logits_truth: %lld of %zu bit-equal, worst %.3g ulps of the "
              "magnitude\n",
              static_cast<long long>(equal), py.size(), worst);
  EXPECT_LE(worst, 4.0);
  EXPECT_GT(equal, 0);
}

}  // namespace
}  // namespace mla
