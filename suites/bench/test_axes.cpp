// The shared axes: the table holds the shapes docs/field.md names (FlashMLA's decode points, the
// bugs' edges), and build_inputs produces exactly the bytes its contract describes (checked
// against the generator and codecs element by element, not against numbers copied from a run).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <regex>
#include <set>

#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"
#include "mla/workloads/axes.hpp"
#include "mla/workloads/phase_axes.hpp"

namespace ax = mla::axes;

namespace {

const ax::AxisPoint& point(const char* name) {
  const ax::AxisPoint* p = ax::find(name);
  if (!p) throw mla::Error(std::string("missing axis point ") + name);
  return *p;
}

bool has(std::function<bool(const ax::AxisPoint&)> pred) {
  return std::any_of(ax::catalog().begin(), ax::catalog().end(), pred);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

TEST(AxesCatalog, NamesTiersAndDeclarationsAreConsistent) {
  const std::regex name_re("[a-z0-9_]+");
  std::set<std::string> names;
  for (const auto& p : ax::catalog()) {
    SCOPED_TRACE(p.name);
    EXPECT_TRUE(std::regex_match(p.name, name_re));
    EXPECT_TRUE(names.insert(p.name).second) << "duplicate";
    EXPECT_NE(p.tiers, 0u);
    ASSERT_EQ(static_cast<int>(p.seqlens.size()), p.shape.batch);
    int64_t pages = 0, mb = 1;
    for (int32_t l : p.seqlens) pages += ceil_div(l, p.shape.page_size), mb = std::max(mb, ceil_div(l, p.shape.page_size));
    EXPECT_EQ(p.shape.num_blocks, pages + 1);
    EXPECT_EQ(p.shape.max_blocks, mb);
    // A CPU-sized copy of a production shape must say what it was reduced from, and only those.
    EXPECT_EQ(p.name.rfind("cpu_", 0) == 0, !p.scaled_from.empty());
    if (p.in(ax::cpu_quick)) {
      EXPECT_TRUE(p.in(ax::cpu_full)) << "quick must be a subset of full";
    }
    if (p.shape.topk > 0) {
      EXPECT_LE(p.invalid_per_row, p.shape.topk);
    }
  }
}

TEST(AxesCatalog, CoversTheRequiredRegimes) {
  using A = ax::Axis;
  for (int32_t sk : {1024, 2048, 4096, 8192, 16384, 32768, 65536})
    EXPECT_TRUE(has([&](const ax::AxisPoint& p) {
      return p.axis == A::decode_memory && p.in(ax::gpu) && p.shape.batch == 128 && p.shape.s_q == 1 &&
             p.shape.heads == 16 && p.seqlens[0] == sk;
    })) << "memory-bound decode b=128 h=16 s_k=" << sk;
  for (int h : {64, 128})
    for (int sq : {1, 2})
      EXPECT_TRUE(has([&](const ax::AxisPoint& p) {
        return p.axis == A::decode_compute && p.in(ax::gpu) && p.shape.heads == h && p.shape.s_q == sq;
      })) << "compute-bound h=" << h << " s_q=" << sq;
  EXPECT_TRUE(has([](const ax::AxisPoint& p) { return p.axis == A::long_context && p.seqlens[0] == 131072; }));
  EXPECT_TRUE(has([](const ax::AxisPoint& p) {
    return p.axis == A::varlen && *std::min_element(p.seqlens.begin(), p.seqlens.end()) <
                                     *std::max_element(p.seqlens.begin(), p.seqlens.end());
  }));
  EXPECT_TRUE(has([](const ax::AxisPoint& p) { return p.shape.topk == 2048 && p.shape.cache_format == mla::CacheFormat::fp8; }));
  EXPECT_TRUE(has([](const ax::AxisPoint& p) { return p.shape.cache_format == mla::CacheFormat::fp8 && p.scale_fmt == mla::ScaleFmt::ue8m0; }));
  // Edges: zero length, length 1, both sides of a page boundary, odd heads, s_q > seqlen.
  EXPECT_TRUE(has([](const ax::AxisPoint& p) { return std::count(p.seqlens.begin(), p.seqlens.end(), 0) > 0; }));
  EXPECT_TRUE(has([](const ax::AxisPoint& p) { return std::count(p.seqlens.begin(), p.seqlens.end(), 1) > 0; }));
  EXPECT_TRUE(has([](const ax::AxisPoint& p) {
    const int ps = p.shape.page_size;
    auto in = [&](int32_t l) { return std::find(p.seqlens.begin(), p.seqlens.end(), l) != p.seqlens.end(); };
    return in(ps - 1) && in(ps) && in(ps + 1);
  }));
  EXPECT_TRUE(has([](const ax::AxisPoint& p) { return p.shape.heads % 2 == 1 && p.shape.heads > 1; }));
  EXPECT_TRUE(has([](const ax::AxisPoint& p) {
    return std::any_of(p.seqlens.begin(), p.seqlens.end(), [&](int32_t l) { return l < p.shape.s_q; });
  }));
  // The quick CPU tier must exist and hold more than one regime.
  std::set<A> quick;
  for (const auto* p : ax::select(ax::cpu_quick)) quick.insert(p->axis);
  EXPECT_GE(quick.size(), 4u);
}

TEST(AxesCatalog, TierParsingAndLookup) {
  EXPECT_EQ(ax::tier_from_string("cpu_full"), ax::cpu_full);
  EXPECT_THROW(ax::tier_from_string("cpu"), mla::Error);
  EXPECT_EQ(ax::find("no_such_point"), nullptr);
}

TEST(AxesCatalog, SoftmaxScaleIsTheV3One) {
  // docs/field.md, "Upstream semantics": mscale 1.0 gives 0.1352337789 (YaRN always on).
  EXPECT_NEAR(ax::deepseek_v3_softmax_scale(), 0.1352337789, 1e-10);
}

TEST(AxesCatalog, FootprintOfAProductionPointNeedsNoBuild) {
  const auto& p = point("decode_b128_h16_sq1_sk65536");
  const auto f = ax::footprint(p);
  EXPECT_EQ(f.kv_cache, (std::size_t{128} * 65536 / 64 + 1) * 64 * 1152);
  EXPECT_EQ(f.q, 128u * 16u * 576u * 2u);
  EXPECT_EQ(f.indices, 0u);
}

namespace {

// Checks every structural promise of build_inputs for one point.
void check_point(const ax::AxisPoint& p) {
  SCOPED_TRACE(p.name);
  const ax::SyntheticInputs in = ax::build_inputs(p);
  const mla::AttnShape& s = in.shape;
  const auto f = ax::footprint(p);
  EXPECT_EQ(in.q.size() * 2, f.q);
  EXPECT_EQ(in.kv_cache.size(), f.kv_cache);
  EXPECT_EQ(in.block_table.size() * 4, f.block_table);
  EXPECT_EQ(in.indices.size() * 4, f.indices);
  EXPECT_EQ(in.cache_seqlens, p.seqlens);
  EXPECT_DOUBLE_EQ(in.softmax_scale, ax::deepseek_v3_softmax_scale());

  // q is the generator's stream, rounded to bf16.
  for (std::size_t i = 0; i < in.q.size(); i += 997)
    ASSERT_EQ(in.q[i], mla::bf16_from_double(mla::gen::value(p.seed, ax::kStreamQ, i, 0.0, p.q_std))) << i;

  // Block table: used entries distinct and in range, the rest sentinel; slot usage from it.
  const int ps = s.page_size;
  std::vector<int> owner(static_cast<std::size_t>(s.num_blocks) * ps, -1);
  std::set<int32_t> seen;
  for (int b = 0; b < s.batch; ++b) {
    const int32_t len = p.seqlens[b];
    for (int j = 0; j < s.max_blocks; ++j) {
      const int32_t e = in.block_table[static_cast<std::size_t>(b) * s.max_blocks + j];
      if (j < ceil_div(len, ps)) {
        ASSERT_GE(e, 0);
        ASSERT_LT(e, s.num_blocks);
        ASSERT_TRUE(seen.insert(e).second) << "physical block " << e << " used twice";
        for (int t = 0; t < ps && j * ps + t < len; ++t) owner[static_cast<std::size_t>(e) * ps + t] = b;
      } else {
        ASSERT_EQ(e, ax::kSentinelBlock);
      }
    }
  }
  EXPECT_LT(static_cast<int>(seen.size()), s.num_blocks) << "the spare block must stay unused";

  const std::size_t bpt = mla::cache_bytes_per_token(s.cache_format);
  for (std::size_t slot = 0; slot < owner.size(); ++slot) {
    const uint8_t* tok = in.kv_cache.data() + slot * bpt;
    // The bf16 value the generator defines for this physical slot.
    auto gen_bf16 = [&](std::size_t d) {
      return mla::bf16_from_double(mla::gen::value(p.seed, ax::kStreamKv, slot * mla::kQkDim + d, 0.0, p.kv_std));
    };
    if (s.cache_format == mla::CacheFormat::bf16) {
      for (std::size_t d = 0; d < mla::kQkDim; d += (owner[slot] >= 0 ? 1 : 37)) {
        uint16_t v;
        std::memcpy(&v, tok + 2 * d, 2);
        if (owner[slot] >= 0) ASSERT_EQ(v, gen_bf16(d)) << "slot " << slot << " d " << d;
        else ASSERT_EQ(v, 0x7FC0) << "unused slot " << slot << " not poisoned";
      }
    } else {
      if (owner[slot] >= 0) {
        std::vector<double> lat(mla::kLatentDim), rope(mla::kRopeDim);
        for (std::size_t d = 0; d < mla::kLatentDim; ++d) lat[d] = mla::bf16_to_float(gen_bf16(d));
        for (std::size_t d = 0; d < mla::kRopeDim; ++d) rope[d] = mla::bf16_to_float(gen_bf16(mla::kLatentDim + d));
        std::vector<uint8_t> want(mla::kFp8TokenBytes);
        mla::fp8_quantize_token(lat, rope, p.scale_fmt, want);
        ASSERT_EQ(0, std::memcmp(want.data(), tok, want.size())) << "slot " << slot;
      } else {
        for (std::size_t d = 0; d < mla::kLatentDim; ++d) ASSERT_EQ(tok[d], 0x7F);
        float sc;
        std::memcpy(&sc, tok + mla::kLatentDim, 4);
        ASSERT_TRUE(std::isnan(sc));
        uint16_t r;
        std::memcpy(&r, tok + mla::kLatentDim + 16, 2);
        ASSERT_EQ(r, 0x7FC0);
      }
    }
  }

  if (s.topk > 0) {
    bool invalid_before_valid = false;
    for (int b = 0; b < s.batch; ++b)
      for (int i = 0; i < s.s_q; ++i) {
        const int32_t len = p.seqlens[b];
        const int32_t* r = in.indices.data() + (static_cast<std::size_t>(b) * s.s_q + i) * s.topk;
        std::set<int32_t> valid;
        bool saw_invalid = false;
        for (int j = 0; j < s.topk; ++j) {
          if (r[j] >= 0 && r[j] < len) {
            ASSERT_TRUE(valid.insert(r[j]).second) << "duplicate valid index";
            invalid_before_valid |= saw_invalid;
          } else {
            bool known = false;
            for (int kind = 0; kind < ax::kInvalidKinds; ++kind) known |= r[j] == ax::invalid_index(kind, len);
            ASSERT_TRUE(known) << r[j] << " is none of the catalog's kinds of invalid index";
            saw_invalid = true;
          }
        }
        EXPECT_EQ(static_cast<int64_t>(valid.size()), std::min<int64_t>(len, s.topk - p.invalid_per_row));
      }
    if (p.invalid_per_row > 0) {
      EXPECT_TRUE(invalid_before_valid) << "invalid entries are not mixed in";
    }
  }
}

}  // namespace

TEST(AxesBuild, EveryEdgePointHonoursTheContract) {
  int n = 0;
  for (const auto& p : ax::catalog())
    if (p.axis == ax::Axis::edge) check_point(p), ++n;
  EXPECT_GE(n, 8);
}

TEST(AxesBuild, SmallVariantsOfEachRegimeHonourTheContract) {
  // Scaled-down copies of production rows: same code paths (varlen, fp8 ue8m0, sparse 2048),
  // sizes a unit test can afford.
  ax::AxisPoint sparse = point("cpu_sparse_b2_h128_sq1_sk16384_top2048_fp8");
  sparse.seqlens = {3000, 1500};  // one row shorter than topk: tail of invalid entries
  sparse.shape.heads = 2;
  ax::derive_paging(sparse);
  check_point(sparse);

  ax::AxisPoint ue = point("cpu_fp8_ue8m0_b4_h16_sq1_sk4096");
  ue.seqlens = {70, 0, 128, 5};
  ax::derive_paging(ue);
  check_point(ue);
}

TEST(AxesBuild, DeterministicPerSeedAndDifferentAcrossSeeds) {
  const auto& p = point("edge_page_boundaries");
  const auto a = ax::build_inputs(p), b = ax::build_inputs(p);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.kv_cache, b.kv_cache);
  EXPECT_EQ(a.block_table, b.block_table);
  ax::AxisPoint other = p;
  other.seed += 1;
  const auto c = ax::build_inputs(other);
  EXPECT_NE(a.q, c.q);
  EXPECT_NE(a.block_table, c.block_table);
}

TEST(AxesBuild, ViewPointsIntoTheOwnerAndSurvivesAMove) {
  ax::SyntheticInputs a = ax::build_inputs(point("edge_len1"));
  const uint16_t* q = a.q.data();
  ax::SyntheticInputs b = std::move(a);
  const mla::AttnInputs v = b.view();
  EXPECT_EQ(v.q.data(), q);
  EXPECT_EQ(v.kv_cache.size(), b.kv_cache.size());
  EXPECT_EQ(v.shape.batch, 3);
}

TEST(AxesBuild, RejectsInconsistentPoints) {
  ax::AxisPoint p = point("edge_len1");
  p.seqlens.push_back(4);  // batch still 3
  EXPECT_THROW(ax::build_inputs(p), mla::Error);
  ax::AxisPoint q = point("edge_len1");
  q.seqlens[0] = 1000;  // needs more pages than max_blocks
  EXPECT_THROW(ax::build_inputs(q), mla::Error);
}

// ---- the prefill and merge axes (mla/workloads/phase_axes.hpp) ----------------------------------

namespace {

// The checks every point of any kind gets: a well-formed name unique across every table (a
// --mla_points name selects one point of one kind), a tier, quick inside full, and a CPU point
// names the production point of its kind that it was reduced from.
template <class P>
void check_declaration(const P& p, std::set<std::string>& names, std::set<uint64_t>& seeds,
                       const std::function<const P*(std::string_view)>& find) {
  SCOPED_TRACE(p.name);
  EXPECT_TRUE(std::regex_match(p.name, std::regex("[a-z0-9_]+")));
  EXPECT_TRUE(names.insert(p.name).second) << "duplicate name";
  EXPECT_TRUE(seeds.insert(p.seed).second) << "seed shared with another phase point";
  EXPECT_NE(p.tiers, 0u);
  if (p.in(ax::cpu_quick)) {
    EXPECT_TRUE(p.in(ax::cpu_full)) << "quick must be a subset of full";
  }
  const bool cpu = p.name.rfind("cpu_", 0) == 0;
  EXPECT_EQ(cpu, !p.scaled_from.empty());
  if (cpu) {
    EXPECT_FALSE(p.in(ax::gpu));
    const auto* from = find(p.scaled_from.substr(0, p.scaled_from.find(':')));
    ASSERT_NE(from, nullptr) << "scaled_from names no point: " << p.scaled_from;
    EXPECT_TRUE(from->in(ax::gpu)) << "scaled from a point that is not a production one";
  }
}

}  // namespace

TEST(PhaseAxes, NamesTiersSeedsAndScaledFromAreDeclared) {
  std::set<std::string> names;
  for (const auto& p : ax::catalog()) names.insert(p.name);
  std::set<uint64_t> seeds;
  for (const auto& p : ax::prefill_catalog())
    check_declaration<ax::PrefillPoint>(p, names, seeds, [](std::string_view n) { return ax::find_prefill(n); });
  for (const auto& p : ax::merge_catalog())
    check_declaration<ax::MergePoint>(p, names, seeds, [](std::string_view n) { return ax::find_merge(n); });
  for (const auto& p : ax::indexer_logits_catalog())
    check_declaration<ax::IndexerLogitsPoint>(p, names, seeds,
                                              [](std::string_view n) { return ax::find_indexer_logits(n); });
  EXPECT_EQ(ax::find_prefill("cpu_merge_f32_t2048_h16_d128"), nullptr);
  for (const auto& p : ax::topk_catalog())
    check_declaration<ax::TopkPoint>(p, names, seeds, [](std::string_view n) { return ax::find_topk(n); });
  for (const auto& p : ax::sparse_prefill_catalog())
    check_declaration<ax::SparsePrefillPoint>(p, names, seeds,
                                              [](std::string_view n) { return ax::find_sparse_prefill(n); });
  EXPECT_EQ(ax::find_indexer_logits("cpu_merge_f32_t2048_h16_d128"), nullptr);
  EXPECT_EQ(ax::find_sparse_prefill("topk_edge_r12_n4096_k2048"), nullptr);
  EXPECT_EQ(ax::find_topk("topk_no_such_point"), nullptr);
  EXPECT_EQ(ax::find_merge("no_such_point"), nullptr);
}

TEST(PhaseAxes, CoverTheProductionShapesAndTheQuickTierHoldsEachKindOfCall) {
  const auto& pc = ax::prefill_catalog();
  const auto prefill_has = [&](std::function<bool(const ax::PrefillPoint&)> pred) { return std::any_of(pc.begin(), pc.end(), pred); };
  const auto single_causal = [](const ax::PrefillPoint& p) { return p.causal && p.seqs.size() == 1 && p.seqs[0].s_q == p.seqs[0].s_k; };
  const auto skewed = [](const ax::PrefillPoint& p) {
    const auto [lo, hi] = std::minmax_element(p.seqs.begin(), p.seqs.end(), [](auto a, auto b) { return a.s_k < b.s_k; });
    return p.seqs.size() > 2 && hi->s_k >= 8 * lo->s_k;
  };
  const auto chunk = [](const ax::PrefillPoint& p) {
    return p.causal && std::any_of(p.seqs.begin(), p.seqs.end(), [](auto s) { return s.s_q > 0 && s.s_q < s.s_k; });
  };
  for (int32_t n : {1024, 4096, 16384})
    for (int h : {16, 128})
      EXPECT_TRUE(prefill_has([&](const auto& p) { return p.in(ax::gpu) && single_causal(p) && p.seqs[0].s_q == n && p.heads == h; }))
          << "causal prefill of " << n << " tokens at " << h << " heads";
  EXPECT_TRUE(prefill_has([&](const auto& p) { return p.in(ax::gpu) && skewed(p); }));
  EXPECT_TRUE(prefill_has([&](const auto& p) { return p.in(ax::gpu) && chunk(p); }));
  for (const auto& want : {std::function<bool(const ax::PrefillPoint&)>(single_causal), {skewed}, {chunk}})
    EXPECT_TRUE(prefill_has([&](const auto& p) { return p.in(ax::cpu_quick) && want(p); }));

  const auto& mc = ax::merge_catalog();
  for (const auto dt : {mla::StateDType::bf16, mla::StateDType::f32})
    for (int d : {128, 512})
      EXPECT_TRUE(std::any_of(mc.begin(), mc.end(), [&](const auto& p) {
        return p.in(ax::gpu) && p.shape.dtype == dt && p.shape.head_dim == d;
      })) << mla::to_string(dt) << " d" << d;
  EXPECT_TRUE(std::any_of(mc.begin(), mc.end(), [](const auto& p) {
    return p.rows == ax::MergeRows::empty_sides && p.in(ax::cpu_quick) && p.in(ax::gpu);
  }));
  EXPECT_FALSE(ax::select_merge(ax::cpu_quick).empty());
}

// The indexer logits points: the production decode step at next_n 1 and 2 and the ragged prefill
// on the gpu tier, each kind reduced on the quick tier (next_n 2 on the full one), and an edge
// point whose context ends inside a block on both.
TEST(PhaseAxes, IndexerLogitsCoverDecodeStepsPrefillAndAPartlyFilledBlock) {
  const auto& c = ax::indexer_logits_catalog();
  const auto has = [&](unsigned tier, mla::IndexerLogitsLayout l, int next_n) {
    return std::any_of(c.begin(), c.end(), [&](const auto& p) {
      return (p.tiers & tier) != 0 && p.layout == l && p.next_n == next_n && p.heads == 64;
    });
  };
  for (const int n : {1, 2}) EXPECT_TRUE(has(ax::gpu, mla::IndexerLogitsLayout::paged, n)) << n;
  EXPECT_TRUE(has(ax::gpu, mla::IndexerLogitsLayout::ragged, 1));
  EXPECT_TRUE(has(ax::cpu_quick, mla::IndexerLogitsLayout::paged, 1));
  EXPECT_TRUE(has(ax::cpu_quick, mla::IndexerLogitsLayout::ragged, 1));
  EXPECT_TRUE(has(ax::cpu_full, mla::IndexerLogitsLayout::paged, 2));
  EXPECT_TRUE(std::any_of(c.begin(), c.end(), [](const auto& p) {
    return p.in(ax::cpu_quick) && p.in(ax::gpu) && p.layout == mla::IndexerLogitsLayout::paged &&
           p.context % p.block_size != 0;
  }));
}

// The inputs are valid calls (validate_indexer_logits_inputs passed inside build_inputs), every
// sequence's blocks are distinct pool blocks, the entries past its last block are not blocks, and
// input_bytes counts q, weights, the keys read and the logits written.
TEST(PhaseAxes, IndexerLogitsInputsAreValidPagedAndRaggedCalls) {
  const auto* p = ax::find_indexer_logits("indexer_logits_edge_paged_b3_n2_bs16_ctx67");
  ASSERT_NE(p, nullptr);
  const auto b = ax::build_inputs(*p);
  const auto& s = b.shape;
  EXPECT_EQ(s.rows(), p->batch * 2);
  EXPECT_EQ(s.cols(), p->context);
  const int64_t used = (p->context + p->block_size - 1) / p->block_size;
  std::set<int32_t> blocks;
  for (int64_t q = 0; q < s.batch; ++q) {
    EXPECT_EQ(b.context_lens[static_cast<std::size_t>(q)], p->context);
    for (int64_t j = 0; j < s.max_blocks; ++j) {
      const int32_t e = b.block_table[static_cast<std::size_t>(q * s.max_blocks + j)];
      if (j < used) {
        EXPECT_TRUE(e >= 0 && e < s.num_blocks && blocks.insert(e).second) << "sequence " << q << " block " << j;
      } else {
        EXPECT_LT(e, 0) << "an entry past the last block must not be a block";
      }
    }
  }
  EXPECT_EQ(ax::input_bytes(*p), b.q.size() + b.weights.size() * 4 +
                                     static_cast<std::size_t>(p->batch * p->context * mla::kIndexerTokenBytes) +
                                     static_cast<std::size_t>(s.rows() * s.cols()) * 4);
  const auto* r = ax::find_indexer_logits("cpu_indexer_logits_ragged_q128_k1024_h64");
  ASSERT_NE(r, nullptr);
  const auto rb = ax::build_inputs(*r);
  ASSERT_EQ(rb.ke.size(), static_cast<std::size_t>(r->batch));
  // Bottom-right causal: the last row sees every key, each earlier one a key fewer.
  EXPECT_EQ(rb.ke.back(), r->context);
  EXPECT_EQ(rb.ke.front(), r->context - r->batch + 1);
  EXPECT_TRUE(std::all_of(rb.ks.begin(), rb.ks.end(), [](int32_t k) { return k == 0; }));
}

// The sparse prefill points: the production ones at V3.2's top-2048 and FlashMLA's two head counts
// (64, 128), whose topk multiple of 64 every point keeps (so FlashMLA can run each of them); the
// quick tier holds a chunk over a prefix and the edge point, which has rows with fewer keys than
// topk and a row with none.
TEST(PhaseAxes, SparsePrefillPointsAreV32sAndFlashMlasShapes) {
  std::set<int> gpu_heads;
  bool quick_chunk = false, quick_edge = false;
  for (const auto& p : ax::sparse_prefill_catalog()) {
    SCOPED_TRACE(p.name);
    EXPECT_EQ(p.topk % 64, 0);
    EXPECT_GE(p.s_kv, p.s_q);
    if (p.in(ax::gpu) && !p.edge) {
      EXPECT_EQ(p.topk, 2048);
      gpu_heads.insert(p.heads);
    }
    if (p.in(ax::cpu_quick)) {
      quick_chunk |= p.s_kv > p.s_q && !p.edge;
      quick_edge |= p.edge;
    }
  }
  EXPECT_EQ(gpu_heads, (std::set<int>{64, 128}));
  EXPECT_TRUE(quick_chunk);
  EXPECT_TRUE(quick_edge);
}

// The top-k points: V3.2's k = 2048 everywhere; the edge rows hold every range length the
// contract distinguishes (empty, one, k - 1, k, k + 1, the whole row), ranges that start past 0,
// masked positions and exact ties; outside a row's range the logits are NaN; the prefill rows are
// two causal sequences, the second's ranges starting at n / 2.
TEST(PhaseAxes, TopkInputsHoldEveryRangeEdgeAndNaNWhereNothingMayRead) {
  for (const auto& p : ax::topk_catalog()) EXPECT_EQ(p.shape.k, 2048) << p.name;
  const auto* e = ax::find_topk("topk_edge_r12_n4096_k2048");
  ASSERT_NE(e, nullptr);
  const auto b = ax::build_inputs(*e);
  const int64_t n = e->shape.n, k = e->shape.k;
  std::set<int64_t> lens;
  bool shifted = false, masked = false, tie = false;
  for (std::size_t r = 0; r < b.starts.size(); ++r) {
    const int64_t s = b.starts[r], en = b.ends[r];
    lens.insert(en - s);
    shifted |= s > 0;
    std::set<float> seen;
    for (int64_t c = 0; c < n; ++c) {
      const float v = b.logits[r * static_cast<std::size_t>(n) + static_cast<std::size_t>(c)];
      if (c < s || c >= en) {
        EXPECT_TRUE(std::isnan(v)) << "row " << r << " column " << c;
        continue;
      }
      masked |= std::isinf(v);
      if (std::isfinite(v)) tie |= !seen.insert(v).second;
    }
  }
  for (const int64_t want : {int64_t{0}, int64_t{1}, k - 1, k, k + 1}) EXPECT_TRUE(lens.count(want)) << want;
  EXPECT_TRUE(lens.count(n) || lens.count(n - 5));
  EXPECT_TRUE(shifted && masked && tie);
  const auto* pf = ax::find_topk("cpu_topk_prefill_r256_n4096_k2048");
  ASSERT_NE(pf, nullptr);
  const auto pb = ax::build_inputs(*pf);
  const auto half = static_cast<std::size_t>(pf->shape.rows / 2);
  EXPECT_EQ(pb.starts.front(), 0);
  EXPECT_EQ(pb.ends[half - 1], pf->shape.n / 2);  // the first sequence's last row sees all its keys
  EXPECT_EQ(pb.starts[half], pf->shape.n / 2);
  EXPECT_EQ(pb.ends.back(), pf->shape.n);
  EXPECT_EQ(ax::logits_read(*pf), ax::logits_read(pb.view()));
}

TEST(PhaseAxes, PrefillInputsAreTheGeneratorsWithTheRopePartSharedAcrossHeads) {
  const auto* p = ax::find_prefill("cpu_prefill_varlen_skew_h16");
  ASSERT_NE(p, nullptr);
  const auto b = ax::build_inputs(*p);
  EXPECT_EQ(b.shape.total_q, p->total_q());
  EXPECT_EQ(b.shape.total_k, p->total_k());
  EXPECT_EQ(b.softmax_scale, ax::deepseek_v3_softmax_scale());
  EXPECT_EQ(b.cu_seqlens_q.size(), p->seqs.size() + 1);
  EXPECT_EQ(ax::input_bytes(*p), (b.q.size() + b.k.size() + b.v.size()) * 2 +
                                     (b.cu_seqlens_q.size() + b.cu_seqlens_k.size()) * 4);
  std::vector<uint16_t> q(b.q.size()), v(b.v.size()), k_pe(static_cast<std::size_t>(b.shape.total_k) * mla::kMhaRope);
  mla::gen::fill_bf16(p->seed, 1, 0.0, p->q_std, q);
  mla::gen::fill_bf16(p->seed, 3, 0.0, 1.0, v);
  mla::gen::fill_bf16(p->seed, 4, 0.0, 1.0, k_pe);
  EXPECT_EQ(b.q, q);
  EXPECT_EQ(b.v, v);
  const auto h = static_cast<std::size_t>(p->heads);
  for (std::size_t t = 0; t < static_cast<std::size_t>(b.shape.total_k); t += 97)
    for (std::size_t hh = 0; hh < h; ++hh)
      ASSERT_EQ(0, std::memcmp(&b.k[(t * h + hh) * mla::kMhaDqk + mla::kMhaNope], &k_pe[t * mla::kMhaRope], mla::kMhaRope * 2))
          << "token " << t << " head " << hh;
}

TEST(PhaseAxes, MergeEdgeRowsHoldEveryEmptySideWithNaNOutsThere) {
  const auto* p = ax::find_merge("merge_edge_empty_sides_bf16_t64_h16_d128");
  ASSERT_NE(p, nullptr);
  const auto b = ax::build_inputs(*p);
  EXPECT_EQ(ax::input_bytes(*p), b.out_a.size() + b.out_b.size() + (b.lse_a.size() + b.lse_b.size()) * 4);
  const auto n = static_cast<std::size_t>(p->shape.tokens), d = static_cast<std::size_t>(p->shape.head_dim);
  for (std::size_t t = 0; t < n; ++t) {
    const std::size_t i = t;  // head 0
    const bool a_empty = t % 4 == 0 || t % 4 == 2, b_empty = t % 4 == 1 || t % 4 == 2;
    EXPECT_EQ(b.lse_a[i] == std::numeric_limits<float>::infinity(), a_empty) << t;
    EXPECT_EQ(b.lse_b[i] == -std::numeric_limits<float>::infinity(), b_empty) << t;
    EXPECT_EQ(std::isnan(mla::state_value(p->shape.dtype, b.out_a, t * p->shape.heads * d)), a_empty) << t;
    EXPECT_EQ(std::isnan(mla::state_value(p->shape.dtype, b.out_b, t * p->shape.heads * d)), b_empty) << t;
  }
}
