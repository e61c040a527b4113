// L0 unit tests of the float64 reference: RoPE/YaRN, the full layer in both forms, the cache
// capacity rule, and the attention core against an independent plain-loop oracle.
#include <cmath>
#include <complex>
#include <limits>
#include <numbers>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"
#include "mla/ref/attention.hpp"
#include "mla/ref/layer.hpp"
#include "mla/ref/rope.hpp"
#include "support/attn_builder.hpp"
#include "support/expect.hpp"

namespace mla {
namespace {

using testing::AttnSpec;
using testing::judged;
using testing::bitwise_equal;
using testing::Layout;

ModelConfig v3_config() {
  ModelConfig c;
  c.preset = "v3";
  c.dim = 7168;
  c.n_heads = 128;
  c.q_lora_rank = 1536;
  return c;  // every other field: upstream defaults (max_seq_len 16384 > 4096, so YaRN is on)
}

ModelConfig v2_lite_config() {
  ModelConfig c;
  c.preset = "v2-lite";
  c.dim = 2048;
  c.n_heads = 16;
  c.q_lora_rank = 0;
  c.mscale = 0.707;
  return c;
}

// Small dims, YaRN on (max_seq_len > original_seq_len), rope dims and theta chosen so that the
// ramp lies strictly inside the 4 frequencies.
ModelConfig tiny_config(int64_t q_lora_rank) {
  ModelConfig c;
  c.preset = "test-tiny";
  c.dim = 48;
  c.n_heads = 3;
  c.q_lora_rank = q_lora_rank;
  c.kv_lora_rank = 24;
  c.qk_nope_head_dim = 12;
  c.qk_rope_head_dim = 8;
  c.v_head_dim = 10;
  c.max_seq_len = 32;
  c.original_seq_len = 16;
  c.max_batch_size = 3;
  return c;
}

ref::LayerWeights random_weights(const ModelConfig& cfg, uint64_t seed) {
  ref::LayerWeights w;
  uint64_t stream = 0;
  for (const auto& name : ref::LayerWeights::names(cfg)) {
    const auto shape = ref::LayerWeights::expected_shape(cfg, name);
    std::vector<double> v(static_cast<std::size_t>(shape.size() == 1 ? shape[0] : shape[0] * shape[1]));
    // Norm weights near 1, projections with unit-variance outputs: activations stay O(1).
    if (shape.size() == 1) {
      gen::fill_f64(seed, stream++, 1.0, 0.2, v);
    } else {
      gen::fill_f64(seed, stream++, 0.0, 1.0 / std::sqrt(static_cast<double>(shape[1])), v);
    }
    w.set(cfg, name, shape, v);
  }
  return w;
}

ref::Tensor random_x(const ModelConfig& cfg, int64_t b, int64_t s, uint64_t seed, uint64_t stream) {
  ref::Tensor x({b, s, cfg.dim});
  gen::fill_f64(seed, stream, 0.0, 1.0, x.data);
  return x;
}

// ---------------------------------------------------------------------------- RoPE and YaRN

TEST(Yarn, V3RampRunsBetweenDims10And23) {
  const auto r = ref::yarn_correction_range(v3_config());
  EXPECT_EQ(r.low, 10);
  EXPECT_EQ(r.high, 23);
  const auto r2 = ref::yarn_correction_range(v2_lite_config());  // same rope fields
  EXPECT_EQ(r2.low, 10);
  EXPECT_EQ(r2.high, 23);
}

TEST(Yarn, InvFreqMatchesClosedForm) {
  const ModelConfig cfg = v3_config();
  const auto f = ref::rope_inv_freq(cfg);
  ASSERT_EQ(f.size(), 32u);
  const auto r = ref::yarn_correction_range(cfg);
  std::vector<double> closed(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    const double base = 1.0 / std::pow(cfg.rope_theta, static_cast<double>(2 * i) / 64.0);
    const double ramp =
        std::clamp((static_cast<double>(i) - r.low) / static_cast<double>(r.high - r.low), 0.0, 1.0);
    // Algebraically equal to f/factor·ramp + f·(1-ramp), rounded differently.
    closed[i] = base * (1.0 - ramp * (1.0 - 1.0 / cfg.rope_factor));
    // Outside the ramp the blend is exact: untouched below `low`, divided by the factor above `high`.
    if (static_cast<int64_t>(i) <= r.low) {
      EXPECT_EQ(f[i], base) << "dim " << i;
    }
    if (static_cast<int64_t>(i) >= r.high) {
      EXPECT_EQ(f[i], base / cfg.rope_factor) << "dim " << i;
    }
  }
  EXPECT_TRUE(judged("inv_freq", f, closed, {32}, "layer.intermediate.f64"));
  // The ramp really interpolates: strictly between the two regimes inside (low, high).
  for (int64_t i = r.low + 1; i < r.high; ++i) {
    const double base = 1.0 / std::pow(cfg.rope_theta, static_cast<double>(2 * i) / 64.0);
    EXPECT_LT(f[static_cast<std::size_t>(i)], base);
    EXPECT_GT(f[static_cast<std::size_t>(i)], base / cfg.rope_factor);
  }
}

TEST(Yarn, OffWhenMaxSeqLenDoesNotExceedOriginal) {
  ModelConfig cfg = v3_config();
  cfg.max_seq_len = cfg.original_seq_len;
  const auto f = ref::rope_inv_freq(cfg);
  for (std::size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(f[i], 1.0 / std::pow(cfg.rope_theta, static_cast<double>(2 * i) / 64.0)) << "dim " << i;
  }
  EXPECT_EQ(softmax_scale(cfg), std::pow(192.0, -0.5));
}

TEST(Yarn, RampGuardsEqualEnds) {
  // min == max: upstream adds 0.001 to max, so the ramp is a step at `min` instead of 0/0.
  const auto r = ref::yarn_linear_ramp(5, 5, 8);
  const std::vector<double> want{0, 0, 0, 0, 0, 0, 1, 1};
  EXPECT_EQ(r, want);
  const auto r2 = ref::yarn_linear_ramp(2, 6, 8);
  const std::vector<double> want2{0, 0, 0, 0.25, 0.5, 0.75, 1, 1};
  EXPECT_EQ(r2, want2);
}

TEST(Yarn, SoftmaxScaleMatchesDocsField) {
  // docs/field.md quotes 10 decimals; the check is exact at that precision.
  EXPECT_EQ(fmt::format("{:.10f}", softmax_scale(v3_config())), "0.1352337789");
  EXPECT_EQ(fmt::format("{:.10f}", softmax_scale(v2_lite_config())), "0.1147213868");
}

TEST(Rope, RotatesInterleavedPairs) {
  const std::vector<double> inv{0.5, 0.25};
  // A unit vector in pair 0 must turn within (0, 1); a half-split RoPE would pair 0 with 2.
  std::vector<double> v{1, 0, 0, 0};
  ref::apply_rope(v, 3, inv);
  EXPECT_EQ(v[0], std::cos(1.5));
  EXPECT_EQ(v[1], std::sin(1.5));
  EXPECT_EQ(v[2], 0.0);
  EXPECT_EQ(v[3], 0.0);
  // Against complex multiplication, for arbitrary values.
  std::vector<double> x{0.3, -1.2, 2.5, 0.7};
  std::vector<double> y = x;
  ref::apply_rope(y, 11, inv);
  std::vector<double> want;
  for (std::size_t i = 0; i < 2; ++i) {
    const std::complex<double> z = std::complex<double>(x[2 * i], x[2 * i + 1]) * std::polar(1.0, 11 * inv[i]);
    want.push_back(z.real());
    want.push_back(z.imag());
  }
  EXPECT_TRUE(judged("rope", y, want, {4}, "layer.intermediate.f64"));
  std::vector<double> z = x;
  ref::apply_rope(z, 0, inv);
  EXPECT_EQ(z, x);  // position 0 is the identity
}

TEST(Yarn, RejectsBadRopeFields) {
  ModelConfig cfg = tiny_config(0);
  cfg.qk_rope_head_dim = 7;
  EXPECT_THROW(ref::rope_inv_freq(cfg), Error);
  cfg = tiny_config(0);
  cfg.rope_factor = 0;
  EXPECT_THROW(ref::rope_inv_freq(cfg), Error);
}

// ---------------------------------------------------------------------------- full layer

class LayerForms : public ::testing::TestWithParam<int64_t> {};

TEST_P(LayerForms, NaiveEqualsAbsorbed) {
  const ModelConfig cfg = tiny_config(GetParam());
  const auto w = random_weights(cfg, 11);
  ref::MlaLayer naive(cfg, w, ref::Form::naive), absorbed(cfg, w, ref::Form::absorbed);
  const int64_t b = 2;
  testing::Worst worst;
  // Prefill 6 tokens, then 4 decode steps.
  std::vector<std::pair<int64_t, int64_t>> steps{{0, 6}, {6, 1}, {7, 1}, {8, 1}, {9, 1}};
  uint64_t stream = 100;
  for (auto [start, s] : steps) {
    const ref::Tensor x = random_x(cfg, b, s, 12, stream++);
    const auto rn = naive.forward(x, start);
    const auto ra = absorbed.forward(x, start);
    const std::string at = fmt::format(" (start_pos {})", start);
    EXPECT_TRUE(judged("out" + at, rn.out.data, ra.out.data, rn.out.shape, "naive_vs_absorbed.f64", &worst));
    for (const char* name : {"q_nope", "q_pe", "kv_normed", "k_pe", "scores", "probs"}) {
      const auto& a = rn.intermediates.at(name);
      EXPECT_TRUE(judged(name + at, a.data, ra.intermediates.at(name).data, a.shape, "naive_vs_absorbed.f64", &worst));
    }
    // The absorbed path's latent output, expanded by W_UV, is the naive attention output.
    const auto& lat = ra.intermediates.at("latent_out");
    const auto& att = rn.intermediates.at("attn_out");
    std::vector<double> expanded(att.data.size());
    for (int64_t bi = 0; bi < b; ++bi) {
      for (int64_t i = 0; i < s; ++i) {
        for (int64_t h = 0; h < cfg.n_heads; ++h) {
          for (int64_t v = 0; v < cfg.v_head_dim; ++v) {
            double acc = 0;
            for (int64_t c = 0; c < cfg.kv_lora_rank; ++c) {
              acc += lat.data[static_cast<std::size_t>(((bi * s + i) * cfg.n_heads + h) * cfg.kv_lora_rank + c)] *
                     w.wkv_b(h * (cfg.qk_nope_head_dim + cfg.v_head_dim) + cfg.qk_nope_head_dim + v, c);
            }
            expanded[static_cast<std::size_t>(((bi * s + i) * cfg.n_heads + h) * cfg.v_head_dim + v)] = acc;
          }
        }
      }
    }
    EXPECT_TRUE(judged("attn_out" + at, att.data, expanded, att.shape, "naive_vs_absorbed.f64", &worst));
  }
  // The caches hold the same keys: naive k_cache nope part = W_UK · kv_cache, rope part = pe_cache.
  const auto cn = naive.caches(b, 10), ca = absorbed.caches(b, 10);
  const auto& k = cn.at("k_cache");
  const auto& kv = ca.at("kv_cache");
  const auto& pe = ca.at("pe_cache");
  const int64_t H = cfg.n_heads, qk = cfg.qk_head_dim(), nope = cfg.qk_nope_head_dim, r = cfg.kv_lora_rank;
  std::vector<double> rebuilt(k.data.size());
  for (int64_t bt = 0; bt < b * 10; ++bt) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t j = 0; j < qk; ++j) {
        double val = 0;
        if (j < nope) {
          for (int64_t c = 0; c < r; ++c) {
            val += w.wkv_b(h * (nope + cfg.v_head_dim) + j, c) * kv.data[static_cast<std::size_t>(bt * r + c)];
          }
        } else {
          val = pe.data[static_cast<std::size_t>(bt * cfg.qk_rope_head_dim + (j - nope))];
        }
        rebuilt[static_cast<std::size_t>((bt * H + h) * qk + j)] = val;
      }
    }
  }
  EXPECT_TRUE(judged("k_cache", k.data, rebuilt, k.shape, "naive_vs_absorbed.f64", &worst));
  RecordProperty("naive_vs_absorbed", worst.str());
}

INSTANTIATE_TEST_SUITE_P(QLora, LayerForms, ::testing::Values(int64_t{0}, int64_t{16}),
                         [](const auto& info) { return info.param == 0 ? std::string("wq") : std::string("wq_a_wq_b"); });

TEST(Layer, StepwiseDecodeEqualsPrefill) {
  // Causal mask + RoPE positions: the last token of a 7-token prefill sees exactly what the same
  // token sees when decoded at start_pos 6 after a 6-token prefill.
  const ModelConfig cfg = tiny_config(16);
  const auto w = random_weights(cfg, 21);
  const ref::Tensor x = random_x(cfg, 1, 7, 22, 0);
  for (ref::Form form : {ref::Form::naive, ref::Form::absorbed}) {
    ref::MlaLayer whole(cfg, w, form), split(cfg, w, form);
    const auto all = whole.forward(x, 0);
    ref::Tensor head({1, 6, cfg.dim}), tail({1, 1, cfg.dim});
    std::copy_n(x.data.begin(), 6 * cfg.dim, head.data.begin());
    std::copy_n(x.data.begin() + 6 * cfg.dim, cfg.dim, tail.data.begin());
    const auto first = split.forward(head, 0);
    const auto last = split.forward(tail, 6);
    const std::vector<double> want(all.out.data.begin() + 6 * cfg.dim, all.out.data.end());
    EXPECT_TRUE(judged(fmt::format("{} last token", ref::to_string(form)), last.out.data, want, {1, 1, cfg.dim},
                       "layer.out.f64"));
    const std::vector<double> want_head(all.out.data.begin(), all.out.data.begin() + 6 * cfg.dim);
    EXPECT_TRUE(judged(fmt::format("{} first 6 tokens", ref::to_string(form)), first.out.data, want_head,
                       {1, 6, cfg.dim}, "layer.out.f64"));
    // Scores of the prefill are masked with -inf strictly above the diagonal, and only there.
    const auto& sc = all.intermediates.at("scores");
    for (int64_t i = 0; i < 7; ++i) {
      for (int64_t t = 0; t < 7; ++t) {
        const double v = sc.data[static_cast<std::size_t>((i * cfg.n_heads + 1) * 7 + t)];
        if (t > i) {
          EXPECT_EQ(v, -std::numeric_limits<double>::infinity());
        } else {
          EXPECT_TRUE(std::isfinite(v));
        }
      }
    }
  }
}

TEST(Layer, CapacityErrorAtMaxSeqLen) {
  const ModelConfig cfg = tiny_config(0);  // max_seq_len 32
  const auto w = random_weights(cfg, 31);
  for (ref::Form form : {ref::Form::naive, ref::Form::absorbed}) {
    ref::MlaLayer layer(cfg, w, form);
    layer.forward(random_x(cfg, 2, 31, 32, 0), 0);
    const auto before = layer.caches(2, 32);
    const auto ok = layer.forward(random_x(cfg, 2, 1, 32, 1), 31);  // the last slot: accepted
    EXPECT_EQ(ok.out.shape, (std::vector<int64_t>{2, 1, cfg.dim}));
    const auto filled = layer.caches(2, 32);
    try {
      layer.forward(random_x(cfg, 2, 1, 32, 2), 32);
      ADD_FAILURE() << "a write at start_pos == max_seq_len was accepted";
    } catch (const CapacityError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("start_pos=32"), std::string::npos) << msg;
      EXPECT_NE(msg.find("seqlen=1"), std::string::npos) << msg;
      EXPECT_NE(msg.find("max_seq_len=32"), std::string::npos) << msg;
      EXPECT_NE(msg.find("cache capacity exceeded"), std::string::npos) << msg;
    }
    // The refused step changed nothing.
    const auto after = layer.caches(2, 32);
    for (const auto& [name, t] : filled) EXPECT_TRUE(bitwise_equal(name, after.at(name).data, t.data));
    // The accepted step wrote only slot 31.
    for (const auto& [name, t] : before) {
      const auto& f = filled.at(name).data;
      const std::size_t row = t.data.size() / (2 * 32);
      for (int64_t bi = 0; bi < 2; ++bi) {
        const auto off = static_cast<std::ptrdiff_t>(bi * 32 * row);
        EXPECT_TRUE(std::equal(t.data.begin() + off, t.data.begin() + off + 31 * static_cast<std::ptrdiff_t>(row),
                               f.begin() + off)) << name;
      }
    }
    ref::MlaLayer fresh(cfg, w, form);
    EXPECT_THROW(fresh.forward(random_x(cfg, 1, 33, 32, 3), 0), CapacityError);
  }
}

TEST(Layer, RejectsBadSteps) {
  const ModelConfig cfg = tiny_config(16);
  const auto w = random_weights(cfg, 41);
  ref::MlaLayer layer(cfg, w, ref::Form::absorbed);
  layer.forward(random_x(cfg, 1, 4, 42, 0), 0);
  // A multi-token step needs start_pos 0 (upstream's mask is seqlen×seqlen) — not a capacity error.
  try {
    layer.forward(random_x(cfg, 1, 2, 42, 1), 4);
    ADD_FAILURE() << "multi-token step at start_pos 4 accepted";
  } catch (const CapacityError&) {
    ADD_FAILURE() << "wrong error type";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("start_pos"), std::string::npos);
  }
  EXPECT_THROW(layer.forward(random_x(cfg, 4, 1, 42, 2), 4), Error);  // batch 4 > max_batch_size 3
  ref::Tensor wrong({1, 1, cfg.dim + 1});
  EXPECT_THROW(layer.forward(wrong, 4), Error);
  EXPECT_THROW(layer.forward(random_x(cfg, 1, 1, 42, 3), -1), Error);
}

TEST(Layer, RejectsMissingOrMisshapenWeights) {
  const ModelConfig cfg = tiny_config(16);
  auto w = random_weights(cfg, 51);
  ref::LayerWeights missing = w;
  missing.wkv_b.resize(0, 0);
  try {
    ref::MlaLayer layer(cfg, missing, ref::Form::naive);
    ADD_FAILURE() << "missing wkv_b accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wkv_b"), std::string::npos) << e.what();
  }
  const std::vector<int64_t> bad{3, 3};
  const std::vector<double> nine(9, 0.0);
  EXPECT_THROW(w.set(cfg, "wo", bad, nine), Error);
  EXPECT_THROW(w.set(cfg, "wq", ref::LayerWeights::expected_shape(cfg, "wq_a"), {}), Error);  // unused with q-LoRA
  EXPECT_THROW(w.set(cfg, "bogus", bad, nine), Error);
}

// ---------------------------------------------------------------------------- attention core

struct CoreCase {
  const char* name;
  AttnSpec spec;
  int page_size;
};

std::vector<CoreCase> core_cases() {
  std::vector<CoreCase> c;
  AttnSpec dense;  // varlen with an empty sequence, decode
  c.push_back({"dense_bf16_varlen", dense, 16});
  AttnSpec mtp = dense;  // speculative decode: s_q 4 causal, one sequence shorter than s_q
  mtp.s_q = 4;
  mtp.seqlens = {37, 2, 130, 0};
  c.push_back({"dense_bf16_causal_sq4", mtp, 64});
  AttnSpec noncausal = mtp;
  noncausal.causal = false;
  c.push_back({"dense_bf16_noncausal_sq4", noncausal, 5});
  AttnSpec sparse = dense;
  sparse.topk = 24;
  sparse.s_q = 2;
  c.push_back({"sparse_bf16", sparse, 16});
  AttnSpec fp8 = mtp;
  fp8.format = CacheFormat::fp8;
  c.push_back({"dense_fp8_fp32scale", fp8, 16});
  AttnSpec fp8s = sparse;
  fp8s.format = CacheFormat::fp8;
  fp8s.scale_fmt = ScaleFmt::ue8m0;
  c.push_back({"sparse_fp8_ue8m0", fp8s, 1});
  AttnSpec big = dense;  // large logits (std 4 q, std 3 kv): exercises max subtraction
  big.q_std = 4;
  big.kv_std = 3;
  big.heads = 128;
  big.seqlens = {1500};  // more than one 1024-token online-softmax chunk
  c.push_back({"dense_bf16_large_logits_two_chunks", big, 64});
  return c;
}

void PrintTo(const CoreCase& c, std::ostream* os) { *os << c.name; }

class CoreVsOracle : public ::testing::TestWithParam<CoreCase> {};

TEST_P(CoreVsOracle, MatchesPlainLoops) {
  const CoreCase& cc = GetParam();
  const auto lg = testing::make_logical(cc.spec);
  Layout layout;
  layout.page_size = cc.page_size;
  const auto paged = testing::lay_out(lg, layout);
  const auto got = ref::attention_fp64(paged.inputs());
  const auto want = testing::oracle(lg);
  EXPECT_TRUE(testing::matches("attention_fp64 vs plain loops", got, paged.shape, want));
  // Rows that attend nothing: exactly 0 and +inf, and only those.
  for (std::size_t i = 0; i < want.lse.size(); ++i) EXPECT_EQ(std::isinf(got.lse[i]), std::isinf(want.lse[i])) << i;
}

INSTANTIATE_TEST_SUITE_P(Cases, CoreVsOracle, ::testing::ValuesIn(core_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Core, EmptyRowsAreZeroAndInfinite) {
  AttnSpec spec;
  spec.seqlens = {0, 3, 0};
  spec.s_q = 5;  // sequence 1 (L=3) has empty rows for queries 0 and 1 under the causal rule
  const auto lg = testing::make_logical(spec);
  const auto p = testing::lay_out(lg, {});
  const auto r = ref::attention_fp64(p.inputs());
  const int64_t H = spec.heads, SQ = spec.s_q;
  for (int64_t b = 0; b < 3; ++b) {
    for (int64_t s = 0; s < SQ; ++s) {
      const bool empty = b != 1 || s < 2;
      for (int64_t h = 0; h < H; ++h) {
        const double lse = r.lse[static_cast<std::size_t>((b * H + h) * SQ + s)];
        const double* o = r.out.data() + ((b * SQ + s) * H + h) * 512;
        if (empty) {
          EXPECT_EQ(lse, std::numeric_limits<double>::infinity()) << b << "," << s << "," << h;
          EXPECT_TRUE(std::all_of(o, o + 512, [](double v) { return v == 0.0 && !std::signbit(v); }));
        } else {
          EXPECT_TRUE(std::isfinite(lse));
        }
      }
    }
  }
}

TEST(Core, InvalidSparseIndicesAreSkippedNotClamped) {
  AttnSpec spec;
  spec.topk = 16;
  spec.s_q = 2;
  const auto lg = testing::make_logical(spec);
  const auto p = testing::lay_out(lg, {});
  const auto r = ref::attention_fp64(p.inputs());
  // The same rows with every invalid entry replaced by -1: the result must not change at all.
  auto q = p;
  for (std::size_t b = 0; b < spec.seqlens.size(); ++b) {
    for (int64_t k = 0; k < spec.s_q * spec.topk; ++k) {
      int32_t& idx = q.indices[b * static_cast<std::size_t>(spec.s_q * spec.topk) + static_cast<std::size_t>(k)];
      if (idx < 0 || idx >= spec.seqlens[b]) idx = -1;
    }
  }
  const auto r2 = ref::attention_fp64(q.inputs());
  EXPECT_TRUE(bitwise_equal("out", r.out, r2.out));
  EXPECT_TRUE(bitwise_equal("lse", r.lse, r2.lse));
  // ... and equal to the oracle, which never looks at an invalid entry.
  const auto want = testing::oracle(lg);
  EXPECT_TRUE(testing::matches("attention_fp64 vs plain loops", r, p.shape, want));
}

TEST(Core, DuplicateValidIndicesAreRefused) {
  AttnSpec spec;
  spec.topk = 4;
  spec.seqlens = {10};
  auto lg = testing::make_logical(spec);
  lg.indices[0] = {3, 7, 3, -1};
  const auto p = testing::lay_out(lg, {});
  try {
    ref::attention_fp64(p.inputs());
    ADD_FAILURE() << "duplicate accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("position 3"), std::string::npos) << e.what();
  }
}

TEST(Core, Fp8TokenLayoutKnownAnswer) {
  // One token, so softmax weight 1: out is the dequantized latent exactly, lse = scale·q·k.
  // Bytes by hand from the e4m3fn table: 0x38 = 1.0, 0xB8 = -1.0, 0x7E = 448, 0x01 = 2^-9,
  // 0x30 = 0.5; scales 0.25, 2, 1/448, 8 (exact in float32); rope bf16 0x3F80 = 1.0.
  AttnSpec spec;
  spec.seqlens = {1};
  spec.heads = 2;
  spec.format = CacheFormat::fp8;
  auto lg = testing::make_logical(spec);
  std::vector<uint8_t> tok(656);
  const uint8_t codes[] = {0x38, 0xB8, 0x7E, 0x01, 0x30};
  const double code_values[] = {1.0, -1.0, 448.0, 1.0 / 512, 0.5};
  const float scales[] = {0.25f, 2.0f, 1.0f / 448.0f, 8.0f};
  std::vector<double> expect_c(512);
  for (int i = 0; i < 512; ++i) {
    tok[static_cast<std::size_t>(i)] = codes[i % 5];
    expect_c[static_cast<std::size_t>(i)] = code_values[i % 5] * static_cast<double>(scales[i / 128]);
  }
  std::memcpy(tok.data() + 512, scales, 16);
  for (int j = 0; j < 64; ++j) {
    const uint16_t one = 0x3F80;
    std::memcpy(tok.data() + 528 + 2 * j, &one, 2);
  }
  lg.tokens[0] = tok;
  const auto p = testing::lay_out(lg, {});
  const auto r = ref::attention_fp64(p.inputs());
  for (int h = 0; h < 2; ++h) {
    const std::vector<double> got(r.out.begin() + h * 512, r.out.begin() + (h + 1) * 512);
    EXPECT_TRUE(bitwise_equal(fmt::format("head {} out", h), got, expect_c));
    double dot = 0;
    for (int d = 0; d < 576; ++d) {
      const double k = d < 512 ? expect_c[static_cast<std::size_t>(d)] : 1.0;
      dot += static_cast<double>(bf16_to_float(lg.q[0][static_cast<std::size_t>(h * 576 + d)])) * k;
    }
    const std::vector<double> want_lse{dot * spec.softmax_scale};
    EXPECT_TRUE(judged("lse", std::vector<double>{r.lse[static_cast<std::size_t>(h)]}, want_lse, {1}, "attn.lse.f64"));
  }
}

TEST(Core, NeverReadsPastTheSequence) {
  // The builder poisons every unused slot with NaN and unused table entries with a sentinel:
  // a finite result over a long-tail layout (page 7, partial last pages) shows none was read.
  AttnSpec spec;
  spec.seqlens = {1, 8, 13, 50};
  spec.s_q = 3;
  const auto lg = testing::make_logical(spec);
  Layout layout;
  layout.page_size = 7;
  layout.spare_blocks = 9;
  layout.spare_table = 5;
  const auto r = ref::attention_fp64(testing::lay_out(lg, layout).inputs());
  for (double v : r.out) ASSERT_FALSE(std::isnan(v));
  for (double v : r.lse) ASSERT_FALSE(std::isnan(v));
  // ... and a used entry that is out of range is an error naming it.
  auto p = testing::lay_out(lg, layout);
  p.block_table[static_cast<std::size_t>(3 * p.shape.max_blocks + 1)] = p.shape.num_blocks;
  try {
    ref::attention_fp64(p.inputs());
    ADD_FAILURE() << "out-of-range block id accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block_table[3][1]"), std::string::npos) << e.what();
  }
}

TEST(Core, RejectsMalformedInputs) {
  AttnSpec spec;
  const auto lg = testing::make_logical(spec);
  const auto good = testing::lay_out(lg, {});
  {
    auto p = good;
    p.q.pop_back();
    EXPECT_THROW(ref::attention_fp64(p.inputs()), Error);
  }
  {
    auto p = good;
    p.cache_seqlens[0] = p.shape.max_blocks * p.shape.page_size + 1;
    try {
      ref::attention_fp64(p.inputs());
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cache_seqlens[0]"), std::string::npos) << e.what();
    }
  }
  {
    auto p = good;
    p.shape.d_qk = 192;
    EXPECT_THROW(ref::attention_fp64(p.inputs()), UnsupportedError);
  }
  {
    auto p = good;
    p.softmax_scale = std::numeric_limits<double>::quiet_NaN();
    EXPECT_THROW(ref::attention_fp64(p.inputs()), Error);
  }
}

}  // namespace
}  // namespace mla
