// The prefill contract (mla/core/prefill.hpp): what is a well-formed call, which keys a row
// attends and what that costs, and the conventions a kernel declares, converted by the host.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "mla/core/error.hpp"
#include "mla/core/prefill.hpp"
#include "support/refused.hpp"

namespace {

using namespace mla;

// A ragged batch of the given (s_q, s_k) per sequence, inputs zero (only shapes matter here).
PrefillBuffers batch_of(const std::vector<std::pair<int, int>>& lens, int heads = 2, bool causal = true) {
  PrefillBuffers b;
  b.shape.batch = static_cast<int>(lens.size());
  b.shape.heads = heads;
  b.shape.causal = causal;
  b.softmax_scale = 1.0 / std::sqrt(192.0);
  b.cu_seqlens_q = {0};
  b.cu_seqlens_k = {0};
  for (const auto& [sq, sk] : lens) {
    b.cu_seqlens_q.push_back(b.cu_seqlens_q.back() + sq);
    b.cu_seqlens_k.push_back(b.cu_seqlens_k.back() + sk);
  }
  b.shape.total_q = b.cu_seqlens_q.back();
  b.shape.total_k = b.cu_seqlens_k.back();
  b.q.assign(static_cast<std::size_t>(b.shape.total_q * heads * kMhaDqk), 0);
  b.k.assign(static_cast<std::size_t>(b.shape.total_k * heads * kMhaDqk), 0);
  b.v.assign(static_cast<std::size_t>(b.shape.total_k * heads * kMhaDv), 0);
  return b;
}

std::string refusal(const PrefillBuffers& b) {
  try {
    validate_prefill_inputs(b.view(), "k");
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

TEST(PrefillContract, AWellFormedCallIsAcceptedAndEachMalformedFieldNamed) {
  const auto good = batch_of({{0, 0}, {1, 1}, {63, 63}, {64, 128}, {65, 65}});
  EXPECT_EQ(refusal(good), "");
  auto b = good;
  b.cu_seqlens_q[0] = 1;
  EXPECT_NE(refusal(b).find("cu_seqlens_q[0] = 1"), std::string::npos) << refusal(b);
  b = good;
  std::swap(b.cu_seqlens_k[2], b.cu_seqlens_k[3]);
  EXPECT_NE(refusal(b).find("must not decrease"), std::string::npos) << refusal(b);
  b = good;
  b.cu_seqlens_q.back() -= 1;
  EXPECT_NE(refusal(b).find("the batch holds"), std::string::npos) << refusal(b);
  b = good;
  b.cu_seqlens_k.pop_back();
  EXPECT_NE(refusal(b).find("cu_seqlens_k has"), std::string::npos) << refusal(b);
  b = good;
  b.v.pop_back();
  EXPECT_NE(refusal(b).find("v has"), std::string::npos) << refusal(b);
  b = good;
  b.softmax_scale = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(refusal(b).find("softmax_scale"), std::string::npos);
  b = good;
  b.softmax_scale = 0;
  EXPECT_NE(refusal(b).find("softmax_scale"), std::string::npos);
  b = good;
  b.shape.heads = 0;
  EXPECT_NE(refusal(b).find("heads=0"), std::string::npos);
  b = good;
  b.shape.d_v = 512;
  EXPECT_THROW(validate_prefill_inputs(b.view()), UnsupportedError);
  EXPECT_EQ(refusal(b).rfind("k: ", 0), 0u) << "prefixed with who: " << refusal(b);
}

// The mask counted pair by pair, as its definition reads (query i of s_q, key j of s_k:
// j - s_k <= i - s_q), against the row-wise count the cost model uses and the closed form.
TEST(PrefillContract, AttendedPairsAreTheBottomRightMaskCountedPairByPair) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::pair<int, int>> lens;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < n; ++i) lens.emplace_back(static_cast<int>(rng() % 70), static_cast<int>(rng() % 70));
    for (const bool causal : {true, false}) {
      const auto b = batch_of(lens, 1, causal);
      int64_t brute = 0, closed = 0;
      for (const auto& [sq, sk] : lens) {
        for (int i = 0; i < sq; ++i) {
          for (int j = 0; j < sk; ++j) brute += !causal || (j - sk <= i - sq);
        }
        if (!causal || sq > sk) continue;
        closed += int64_t{sq} * (sk - sq) + int64_t{sq} * (sq + 1) / 2;
      }
      EXPECT_EQ(prefill_attended_pairs(b.view()), brute);
      const bool all_short = std::all_of(lens.begin(), lens.end(), [](auto l) { return l.first <= l.second; });
      if (causal && all_short) {
        EXPECT_EQ(closed, brute);
      }
    }
  }
  // The rows of a sequence with more queries than keys start empty.
  const auto b = batch_of({{5, 2}});
  const auto seq = prefill_sequences(b.view()).at(0);
  EXPECT_EQ(prefill_last_key(true, seq, 0), -1);
  EXPECT_EQ(prefill_last_key(true, seq, 2), -1);
  EXPECT_EQ(prefill_last_key(true, seq, 3), 0);
  EXPECT_EQ(prefill_last_key(true, seq, 4), 1);
  EXPECT_EQ(prefill_last_key(false, seq, 0), 1);
  EXPECT_EQ(prefill_last_key(true, prefill_sequences(batch_of({{3, 0}}).view()).at(0), 2), -1);
}

TEST(PrefillContract, TheCostModelCountsBothProductsAndEveryByteOnce) {
  const auto b = batch_of({{128, 128}, {16, 1024}}, 16);
  const auto in = b.view();
  const double pairs = static_cast<double>(prefill_attended_pairs(in));
  const auto c = prefill_cost_model(in, OutDType::bf16);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * pairs * 16 * (192 + 128));
  EXPECT_DOUBLE_EQ(c.bytes, 2.0 * (in.q.size() + in.k.size() + in.v.size()) + 2.0 * 144 * 16 * 128 + 4.0 * 144 * 16);
  EXPECT_DOUBLE_EQ(prefill_cost_model(in, OutDType::f32).bytes - c.bytes, 2.0 * 144 * 16 * 128);
}

TEST(PrefillContract, DeclaredConventionsAreConvertedBackToCanonical) {
  const auto b = batch_of({{2, 3}, {0, 4}, {3, 0}}, 3);
  const auto& s = b.shape;  // total_q 5, heads 3
  // Canonical lse [h, total_q]: the rows of the key-less sequence are empty (+inf).
  std::vector<double> canon(static_cast<std::size_t>(s.heads * s.total_q));
  for (int h = 0; h < s.heads; ++h) {
    for (int64_t t = 0; t < s.total_q; ++t) {
      canon[h * s.total_q + t] = t >= 2 ? std::numeric_limits<double>::infinity() : 0.25 * h - 0.5 * t + 1.0;
    }
  }
  // FlashInfer's: base 2, [total_q, h], -inf for an empty row; V padded to 192.
  PrefillConventions fi;
  fi.lse_base = LseBase::two;
  fi.lse_layout = LseLayout::b_sq_h;
  fi.empty_row_lse = EmptyRowLse::neg_inf;
  fi.v_padded = true;
  PrefillOutputs o;
  o.lse.resize(canon.size());
  for (int h = 0; h < s.heads; ++h) {
    for (int64_t t = 0; t < s.total_q; ++t) {
      const double v = canon[h * s.total_q + t];
      o.lse[t * s.heads + h] = std::isinf(v) ? -v : v / std::log(2.0);
    }
  }
  o.out.assign(static_cast<std::size_t>(s.total_q * s.heads * 192), 7.0);
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.total_q * s.heads); ++r) {
    for (int d = 0; d < 128; ++d) o.out[r * 192 + d] = static_cast<double>(r * 1000 + d);
  }
  outputs_to_canonical(fi, s, o);
  ASSERT_EQ(o.lse.size(), canon.size());
  for (std::size_t i = 0; i < canon.size(); ++i) {
    if (std::isinf(canon[i])) EXPECT_EQ(o.lse[i], canon[i]) << i;
    else EXPECT_NEAR(o.lse[i], canon[i], 1e-15 * std::abs(canon[i]) + 1e-15) << i;
  }
  ASSERT_EQ(o.out.size(), static_cast<std::size_t>(s.total_q * s.heads * 128));
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.total_q * s.heads); ++r) {
    EXPECT_EQ(o.out[r * 128 + 127], static_cast<double>(r * 1000 + 127)) << "row " << r << " cut at 128";
  }
  // A kernel that writes +inf for an empty row after declaring -inf is not silently accepted.
  PrefillOutputs wrong;
  wrong.lse.assign(canon.size(), std::numeric_limits<double>::infinity());
  outputs_to_canonical(fi, s, wrong);
  EXPECT_EQ(wrong.lse[0], -std::numeric_limits<double>::infinity());
  // V goes over padded with zeros.
  auto vb = b;
  for (std::size_t i = 0; i < vb.v.size(); ++i) vb.v[i] = static_cast<uint16_t>(1 + i % 1000);
  const auto padded = v_to_kernel(fi, vb.view());
  ASSERT_TRUE(padded);
  ASSERT_EQ(padded->size(), vb.v.size() / 128 * 192);
  EXPECT_EQ((*padded)[127], vb.v[127]);
  EXPECT_EQ((*padded)[128], 0);
  EXPECT_EQ((*padded)[192], vb.v[128]);
  EXPECT_FALSE(v_to_kernel(PrefillConventions{}, vb.view()));
  EXPECT_EQ(kernel_v_width(fi, s), 192);
  EXPECT_EQ(kernel_v_width(PrefillConventions{}, s), 128);
  // The words round-trip; a bad one is named.
  EXPECT_EQ(prefill_conventions_from_json(to_json(fi)), fi);
  auto j = to_json(fi);
  j["causal_alignment"] = "middle";
  EXPECT_TRUE(mla::testing::refused_naming([&] { (void)prefill_conventions_from_json(j); }, "causal_alignment"));
}

TEST(PrefillContract, ATopLeftKernelIsCalledOnlyWhereBothMasksAgree) {
  PrefillConventions tl;
  tl.alignment = CausalAlignment::top_left;
  EXPECT_FALSE(prefill_alignment_refusal(tl, batch_of({{4, 4}, {1, 1}}).view()));
  const auto why = prefill_alignment_refusal(tl, batch_of({{4, 4}, {2, 9}}).view());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("sequence 1 has 2 queries and 9 keys"), std::string::npos) << *why;
  EXPECT_FALSE(prefill_alignment_refusal(tl, batch_of({{2, 9}}, 1, false).view())) << "no mask, nothing to align";
  EXPECT_FALSE(prefill_alignment_refusal(PrefillConventions{}, batch_of({{2, 9}}).view()));
}

TEST(PrefillContract, AShapeIsWrittenDownAndReadBack) {
  const auto b = batch_of({{3, 5}}, 4, false);
  const auto j = to_json(b.shape);
  const auto back = prefill_shape_from_json(j);
  EXPECT_EQ(back.total_q, 3);
  EXPECT_EQ(back.total_k, 5);
  EXPECT_EQ(back.heads, 4);
  EXPECT_FALSE(back.causal);
  EXPECT_FALSE(j.contains("d_qk")) << "MLA's widths are implied";
  auto bad = j;
  bad.erase("total_k");
  EXPECT_TRUE(mla::testing::refused_naming([&] { (void)prefill_shape_from_json(bad); }, "total_k"));
}

}  // namespace
