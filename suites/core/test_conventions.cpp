// The conventions normalization (mla/core/conventions.hpp): pure functions, so each translation
// is checked on its own, on hand-built layouts whose answers are worked out here from the
// definitions (a position's slot through the block table, lse re-laid out element by element).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "mla/core/conventions.hpp"
#include "mla/core/error.hpp"

namespace {

using namespace mla;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Two sequences of a sparse problem: page size 4, three pages each, permuted blocks, lengths 10
// and 3, two queries each with topk 6 holding every kind of invalid value the goldens use.
struct Sparse {
  AttnShape shape;
  std::vector<int32_t> block_table{5, 0, 3, 2, 4, 1}, seqlens{10, 3}, indices;
  Sparse() {
    shape.batch = 2;
    shape.s_q = 1;
    shape.heads = 1;
    shape.page_size = 4;
    shape.num_blocks = 6;
    shape.max_blocks = 3;
    shape.topk = 6;
    shape.cache_format = CacheFormat::bf16;
    shape.causal = false;
    indices = {0, 9, 4, -1, 10, std::numeric_limits<int32_t>::max(),   // b0: valid 0, 9, 4
               2, -2, 3, std::numeric_limits<int32_t>::min(), 1, 0};  // b1: L = 3, so 3 is invalid
  }
  AttnInputs view() const {
    AttnInputs in;
    in.shape = shape;
    in.block_table = block_table;
    in.cache_seqlens = seqlens;
    in.indices = indices;
    return in;
  }
};

TEST(Conventions, GlobalSlotsAreTheBlockTablesSlotsAndEveryInvalidIndexIsMinusOne) {
  const Sparse p;
  const auto slots = indices_to_kernel(IndexNumbering::global_slots, p.view());
  // b0: 0 -> block 5 -> 20; 9 -> page 2 = block 3, offset 1 -> 13; 4 -> block 0 -> 0.
  // b1: 2 -> block 2 -> 10; 1 -> 9; 0 -> 8; -2, 3 (= L), INT_MIN -> -1.
  const std::vector<int32_t> want{20, 13, 0, -1, -1, -1, 10, -1, -1, -1, 9, 8};
  EXPECT_EQ(slots, want);
  // positions: a copy, invalid values untouched.
  EXPECT_EQ(indices_to_kernel(IndexNumbering::positions, p.view()), p.indices);
}

TEST(Conventions, GlobalSlotsReadBackAsTheValidPositions) {
  Sparse p;
  const auto slots = indices_to_kernel(IndexNumbering::global_slots, p.view());
  Sparse k = p;
  k.indices = slots;
  const auto back = indices_to_canonical(IndexNumbering::global_slots, k.view());
  for (std::size_t i = 0; i < p.indices.size(); ++i) {
    const int64_t b = static_cast<int64_t>(i) / p.shape.topk, L = p.seqlens[static_cast<std::size_t>(b)];
    const int32_t want = p.indices[i] >= 0 && p.indices[i] < L ? p.indices[i] : -1;
    EXPECT_EQ(back[i], want) << i;
  }
  // A slot the sequence does not hold (block 1 belongs to b1's third page, past its L = 3) and
  // one in a page b0 does not own are invalid, not some other sequence's token.
  k.indices = {4, 20, -1, -1, -1, -1, 4, 20, -1, -1, -1, -1};
  const auto odd = indices_to_canonical(IndexNumbering::global_slots, k.view());
  EXPECT_EQ(odd[0], -1);  // block 1 is b1's, not b0's
  EXPECT_EQ(odd[1], 0);   // block 5 offset 0 is b0's position 0
  EXPECT_EQ(odd[6], -1);  // block 1 is b1's page 2: position 8 >= L = 3
  EXPECT_EQ(odd[7], -1);  // block 5 is b0's
}

TEST(Conventions, DenseInputsAreNeverCopied) {
  Sparse p;
  p.shape.topk = 0;
  p.indices.clear();
  Conventions c;
  c.indices = IndexNumbering::global_slots;
  EXPECT_FALSE(inputs_to_kernel(c, p.view()).has_value());
  EXPECT_FALSE(inputs_to_kernel(Conventions{}, Sparse{}.view()).has_value()) << "canonical: the case's own inputs";
  const auto k = inputs_to_kernel(c, Sparse{}.view());
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->indices, indices_to_kernel(IndexNumbering::global_slots, Sparse{}.view()));
}

TEST(Conventions, WrongSizedIndicesAreRefusedByName) {
  Sparse p;
  p.indices.pop_back();
  try {
    indices_to_kernel(IndexNumbering::global_slots, p.view());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("indices has 11 elements, the shape needs 12"), std::string::npos) << e.what();
  }
}

// lse of a [b=2, h=3, s_q=2] problem as FlashInfer writes it: [b, s_q, h], base 2, -inf empty.
TEST(Conventions, FlashInferLseBecomesCanonical) {
  AttnShape s;
  s.batch = 2;
  s.heads = 3;
  s.s_q = 2;
  std::vector<double> canonical(12);
  for (std::size_t i = 0; i < canonical.size(); ++i) canonical[i] = 0.5 + static_cast<double>(i);
  canonical[7] = kInf;  // (b=1, h=0, q=1): an empty row
  canonical[2] = std::numeric_limits<double>::quiet_NaN();
  Conventions fi{LseBase::two, LseLayout::b_sq_h, EmptyRowLse::neg_inf, IndexNumbering::global_slots};
  const auto kernel = lse_to_kernel(fi, s, canonical);
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 3; ++h)
      for (int q = 0; q < 2; ++q) {
        const double c = canonical[static_cast<std::size_t>((b * 3 + h) * 2 + q)];
        const double k = kernel[static_cast<std::size_t>((b * 2 + q) * 3 + h)];
        if (std::isnan(c)) EXPECT_TRUE(std::isnan(k));
        else if (std::isinf(c)) EXPECT_EQ(k, -kInf);
        else EXPECT_DOUBLE_EQ(k, c / std::numbers::ln2);
      }
  const auto back = lse_to_canonical(fi, s, kernel);
  for (std::size_t i = 0; i < canonical.size(); ++i) {
    if (std::isnan(canonical[i])) EXPECT_TRUE(std::isnan(back[i]));
    else EXPECT_DOUBLE_EQ(back[i], canonical[i]) << i;
  }
  // A kernel declaring -inf that writes +inf has not written the declared empty value: it stays
  // wrong (-inf) for the judge to see, instead of being waved through.
  auto wrong = kernel;
  wrong[static_cast<std::size_t>((1 * 2 + 1) * 3 + 0)] = kInf;
  EXPECT_EQ(lse_to_canonical(fi, s, wrong)[7], -kInf);
}

TEST(Conventions, OutputsOfTheCanonicalConventionAreUntouchedAndWrongSizesLeftForTheJudge) {
  AttnShape s;
  s.batch = 1;
  s.heads = 2;
  s.s_q = 1;
  AttnOutputs o;
  o.lse = {1.0, 2.0};
  outputs_to_canonical(Conventions{}, s, o);
  EXPECT_EQ(o.lse, (std::vector<double>{1.0, 2.0}));
  Conventions two;
  two.lse_base = LseBase::two;
  o.lse = {1.0, 2.0, 3.0};  // wrong size: the judge reports the shape mismatch
  outputs_to_canonical(two, s, o);
  EXPECT_EQ(o.lse.size(), 3u);
  o.lse = {1.0, 2.0};
  outputs_to_canonical(two, s, o);
  EXPECT_DOUBLE_EQ(o.lse[1], 2.0 * std::numbers::ln2);
}

TEST(Conventions, WordsRoundTripAndUnknownWordsAreNamed) {
  const Conventions fi{LseBase::two, LseLayout::b_sq_h, EmptyRowLse::neg_inf, IndexNumbering::global_slots};
  EXPECT_EQ(conventions_from_json(to_json(fi)), fi);
  EXPECT_EQ(conventions_from_json(to_json(Conventions{})), Conventions{});
  EXPECT_TRUE(Conventions{}.canonical());
  EXPECT_FALSE(fi.canonical());
  auto j = to_json(fi);
  j["lse_base"] = "10";
  try {
    conventions_from_json(j);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown lse base '10' (known: e, 2)"), std::string::npos) << e.what();
  }
  j.erase("lse_base");
  EXPECT_THROW(conventions_from_json(j), Error);
}

}  // namespace
