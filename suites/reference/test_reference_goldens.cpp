// L1: the float64 reference against every case of the golden catalog — the attention core
// against each attention case's fp64 truth, the full layer (both forms) against each full-layer
// case's fp64 outputs, intermediates and final caches, and the cache-boundary rule.
#include <cstdio>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "mla/core/error.hpp"
#include "mla/golden/families.hpp"
#include "mla/ref/attention.hpp"
#include "mla/ref/layer.hpp"
#include "mla/ref/rope.hpp"
#include "support/attn_builder.hpp"
#include "support/expect.hpp"
#include "support/goldens.hpp"

namespace mla {
namespace {

using testing::bitwise_equal;
using testing::judged;

class AttnFamily : public testing::GoldenFamilyTest {};

TEST_P(AttnFamily, ReferenceMatchesTruth) {
  testing::Worst out_err, lse_err;
  for (const auto& name : cases_) {
    SCOPED_TRACE(name_ + ":" + name);
    const auto c = golden::load_attn_case(file_, name);
    const AttnInputs in = c.inputs();
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = ref::attention_fp64(in);
    const double secs = testing::seconds_since(t0);
    RecordProperty(name + "_seconds", fmt::format("{:.3f}", secs));
    if (secs > 1.0) std::fprintf(stderr, "[reference] %s:%s %.2f s\n", name_.c_str(), name.c_str(), secs);
    AttnOutputs o;
    o.dtype = OutDType::f64;
    o.out = r.out;
    o.lse = r.lse;
    AttentionJudgement j;
    EXPECT_TRUE(testing::matches(name, o, in.shape, GoldenTruth(c).view(), std::nullopt, &j));
    out_err.add(j.out);
    lse_err.add(j.lse);
    if (in.shape.cache_format == CacheFormat::fp8 && !c.kv_cache_dequant.empty()) {
      // Our decode of every token a sequence owns is bit-identical to the writer's dequantization.
      const ref::PagedCache cache(in);
      std::vector<double> tok(576);
      for (int b = 0; b < in.shape.batch; ++b) {
        for (int64_t t = 0; t < cache.seqlen(b); ++t) {
          cache.token(b, t, tok.data());
          const int64_t blk = in.block_table[static_cast<std::size_t>(b * in.shape.max_blocks + t / in.shape.page_size)];
          const std::span<const double> want(
              c.kv_cache_dequant.data() + (blk * in.shape.page_size + t % in.shape.page_size) * 576, 576);
          ASSERT_TRUE(bitwise_equal(fmt::format("dequantized token {} of sequence {}", t, b), tok, want));
        }
      }
    }
  }
  RecordProperty("out_error", out_err.str());
  RecordProperty("lse_error", lse_err.str());
}

INSTANTIATE_TEST_SUITE_P(Catalog, AttnFamily, ::testing::ValuesIn(golden::family_names(golden::FamilyKind::attention)),
                         [](const auto& info) { return info.param; });

ref::LayerWeights weights_of(const golden::LayerCase& lc) {
  ref::LayerWeights w;
  for (const auto& [name, a] : lc.weights) w.set(lc.config, name, a.shape, a.data);
  return w;
}

// Runs one step and judges whatever fp64 results the golden holds for `form`.
void check_step(ref::MlaLayer& layer, const golden::LayerStep& st, const std::string& where, int& compared,
                testing::Worst& out_err, testing::Worst& im_err) {
  const std::string form = ref::to_string(layer.form());
  const auto r = layer.forward(st.x.shape, st.x.data, st.start_pos);
  if (auto it = st.outputs.find("fp64/" + form); it != st.outputs.end()) {
    EXPECT_TRUE(judged(where + " out", r.out.data, it->second.data, it->second.shape, "layer.out.f64", &out_err));
    ++compared;
  }
  for (const auto& [key, a] : st.intermediates) {
    if (key.rfind(form + "/", 0) != 0) continue;
    const std::string name = key.substr(form.size() + 1);
    const auto mine = r.intermediates.find(name);
    if (mine == r.intermediates.end()) {
      ADD_FAILURE() << where << ": the golden has intermediate '" << key << "' the reference does not produce";
      continue;
    }
    EXPECT_EQ(mine->second.shape, a.shape) << where << " " << key;
    EXPECT_TRUE(judged(where + " " + key, mine->second.data, a.data, a.shape, "layer.intermediate.f64", &im_err));
    ++compared;
  }
}

void check_config_constants(const golden::LayerCase& lc) {
  const auto inv = ref::rope_inv_freq(lc.config);
  EXPECT_TRUE(judged(lc.name + " rope/inv_freq", inv, lc.inv_freq.data, lc.inv_freq.shape, "layer.intermediate.f64"));
  const std::vector<double> mine{softmax_scale(lc.config)}, theirs{lc.softmax_scale};
  EXPECT_TRUE(judged(lc.name + " softmax_scale", mine, theirs, {1}, "layer.intermediate.f64"));
}

// The layer families of the catalog description whose cases are of `kind`.
std::vector<std::string> layer_families(const std::string& kind) {
  std::vector<std::string> out;
  for (const auto& f : golden::families()) {
    if (f.kind == golden::FamilyKind::layer && f.case_kind == kind) out.push_back(f.name);
  }
  return out;
}

class FullLayer : public testing::GoldenFamilyTest {};

TEST_P(FullLayer, BothFormsMatchFp64Golden) {
  testing::Worst out_err, im_err;
  for (const auto& name : cases_) {
    SCOPED_TRACE(name_ + ":" + name);
    const auto lc = golden::load_layer_case(file_, name);
    check_config_constants(lc);
    const auto w = weights_of(lc);
    const auto t0 = std::chrono::steady_clock::now();
    for (ref::Form form : {ref::Form::naive, ref::Form::absorbed}) {
      ref::MlaLayer layer(lc.config, w, form);
      int compared = 0;
      int64_t end_pos = 0;
      for (std::size_t k = 0; k < lc.steps.size(); ++k) {
        check_step(layer, lc.steps[k], fmt::format("{} {} step {}", name, ref::to_string(form), k), compared, out_err, im_err);
        end_pos = lc.steps[k].start_pos + lc.steps[k].x.shape[1];
      }
      EXPECT_GE(compared, static_cast<int>(lc.steps.size())) << "every step has at least its fp64 output";
      const auto caches = layer.caches(lc.batch, end_pos);
      int n_caches = 0;
      for (const auto& [key, a] : lc.final_cache) {
        const std::string prefix = std::string(ref::to_string(form)) + "/";
        if (key.rfind(prefix, 0) != 0) continue;
        const auto& mine = caches.at(key.substr(prefix.size()));
        EXPECT_EQ(mine.shape, a.shape) << key;
        EXPECT_TRUE(judged(name + " final " + key, mine.data, a.data, a.shape, "layer.intermediate.f64", &im_err));
        ++n_caches;
      }
      RecordProperty(fmt::format("{}_{}_caches_compared", name, ref::to_string(form)), n_caches);
    }
    RecordProperty(name + "_seconds", fmt::format("{:.3f}", testing::seconds_since(t0)));
  }
  RecordProperty("out_error", out_err.str());
  RecordProperty("intermediate_error", im_err.str());
}

INSTANTIATE_TEST_SUITE_P(Catalog, FullLayer, ::testing::ValuesIn(layer_families("full_layer")),
                         [](const auto& info) { return info.param; });

class CacheBoundary : public testing::GoldenFamilyTest {};

TEST_P(CacheBoundary, AcceptsLastSlotAndRejectsPastIt) {
  testing::Worst out_err, im_err;
  for (const auto& name : cases_) {
    SCOPED_TRACE(name_ + ":" + name);
    const auto lc = golden::load_layer_case(file_, name);
    ASSERT_TRUE(lc.accept.has_value() && lc.reject.has_value());
    check_config_constants(lc);
    const auto w = weights_of(lc);
    for (ref::Form form : {ref::Form::naive, ref::Form::absorbed}) {
      ref::MlaLayer layer(lc.config, w, form);
      int compared = 0;
      for (std::size_t k = 0; k < lc.steps.size(); ++k) {
        check_step(layer, lc.steps[k], fmt::format("{} {} step {}", name, ref::to_string(form), k), compared, out_err, im_err);
      }
      const int before = compared;
      check_step(layer, *lc.accept, fmt::format("{} {} accept", name, ref::to_string(form)), compared, out_err, im_err);
      if (form == ref::Form::absorbed) {
        EXPECT_GT(compared, before) << "accept/fp64/absorbed/out was compared";
      }
      try {
        layer.forward(lc.reject->x.shape, lc.reject->x.data, lc.reject->start_pos);
        ADD_FAILURE() << name << " " << ref::to_string(form) << ": the write at start_pos "
                      << lc.reject->start_pos << " (max_seq_len " << lc.config.max_seq_len << ") was accepted";
      } catch (const CapacityError& e) {
        EXPECT_NE(std::string(e.what()).find(lc.expected_error), std::string::npos)
            << "message '" << e.what() << "' lacks the golden's expected_error '" << lc.expected_error << "'";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Catalog, CacheBoundary, ::testing::ValuesIn(layer_families("cache_boundary")),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mla
