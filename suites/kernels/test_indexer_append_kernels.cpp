// L0: the indexer key cache append (mla/core/indexer_cache.hpp). Every registered implementation
// writes exactly the oracle's bytes (mla/ref/indexer_append.hpp) for every recipe it claims, on
// random keys and the edge keys (all zero: the amax clamp; bf16's largest values; a quotient
// past 448: saturation; values under the clamp), with skipped tokens, a partial last block and
// block sizes 1, 16 and 64, judged by judge_indexer_append against a cache filled with a
// sentinel pattern; the field's bugs (the append fault kernels of kernels/faults) each FAIL with
// the reason that names them; malformed calls are refused naming the field; and the C++ oracle's
// quantization is the Python reference indexer's (indexer.quantize) byte for byte.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>

#include "mla/core/error.hpp"
#include "mla/core/indexer_cache.hpp"
#include "mla/faults/faults.hpp"
#include "mla/judge/indexer_append.hpp"
#include "mla/ref/indexer_append.hpp"
#include "mla/registry/registry.hpp"
#include "support/refused.hpp"

namespace mla {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kD = kIndexerHeadDim;

struct Problem {
  std::string name;
  IndexerAppendShape shape;
  std::vector<uint16_t> keys;
  std::vector<int64_t> slots;
  std::vector<uint8_t> cache;
  IndexerAppendInputs view() const { return {shape, keys, slots, cache}; }
};

// Random keys, each token its own magnitude 10^U(-3, 3), and the edge keys
// (indexer_edge_keys) on the first tokens.
std::vector<uint16_t> make_keys(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> decade(-3.0f, 3.0f);
  std::vector<uint16_t> k(static_cast<std::size_t>(n * kD));
  for (int64_t t = 0; t < n; ++t) {
    const float mag = std::pow(10.0f, decade(rng));
    for (int64_t d = 0; d < kD; ++d) k[static_cast<std::size_t>(t * kD + d)] = bf16_from_float(mag * normal(rng));
  }
  const auto edges = indexer_edge_keys();
  for (std::size_t t = 0; t < edges.size() && static_cast<int64_t>(t) < n; ++t) {
    std::copy(edges[t].begin(), edges[t].end(), k.begin() + static_cast<std::ptrdiff_t>(t) * kD);
  }
  return k;
}

// Every byte distinct from its neighbours, so a stray write of any value is visible.
std::vector<uint8_t> sentinel_cache(const IndexerAppendShape& s) {
  std::vector<uint8_t> c(static_cast<std::size_t>(indexer_cache_bytes(s)));
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = static_cast<uint8_t>((i * 167u + 0x5Au) ^ (i >> 8));
  return c;
}

Problem make(std::string name, int64_t n, int64_t block_size, int64_t num_blocks, ScaleFmt fmt,
             std::vector<int64_t> slots, uint64_t seed) {
  Problem p{std::move(name), {n, num_blocks, block_size, fmt}, make_keys(n, seed), std::move(slots), {}};
  p.cache = sentinel_cache(p.shape);
  return p;
}

// 150 tokens on a shuffled 3 x 64 cache that never uses its last slot, eleven of them skipped
// (slot -1; one -5), edge keys among the written ones.
Problem shuffled_64(ScaleFmt fmt) {
  const int64_t bs = 64, nb = 3, n = 150;
  std::vector<int64_t> order(static_cast<std::size_t>(nb * bs - 1));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  std::vector<int64_t> slots(order.begin(), order.begin() + n);
  for (int64_t t = 10; t < n; t += 14) slots[static_cast<std::size_t>(t)] = -1;
  slots[24] = -5;
  return make("shuffled_bs64", n, bs, nb, fmt, slots, 11);
}

// Slots in order, the last block only partly filled (50 of 64 slots).
Problem partial_16(ScaleFmt fmt) {
  std::vector<int64_t> slots(50);
  std::iota(slots.begin(), slots.end(), 0);
  return make("partial_last_block_bs16", 50, 16, 4, fmt, slots, 12);
}

// One token per block, every other block written backwards, two skipped.
Problem blocks_of_1(ScaleFmt fmt) {
  std::vector<int64_t> slots;
  for (int64_t t = 0; t < 20; ++t) slots.push_back(38 - 2 * t);
  slots[6] = -1;
  slots[13] = -2;
  return make("block_size_1", 20, 1, 40, fmt, slots, 13);
}

std::vector<Problem> problems(ScaleFmt fmt) { return {shuffled_64(fmt), partial_16(fmt), blocks_of_1(fmt)}; }

std::string all(const std::vector<std::string>& reasons) {
  std::string s;
  for (const auto& r : reasons) s += r + "\n";
  return s;
}

TEST(IndexerCache, TheTokenBytesAreThePresetModelsAndTheBlockLayoutCoversEveryByteOnce) {
  // The one declaration (presets.hpp) is what the memory model counts for V3.2.
  EXPECT_EQ(kIndexerTokenBytes, kv_bytes_per_token(preset("v32").config, KvLayout::indexer_v32).value());
  EXPECT_EQ(kIndexerTokenBytes, kIndexerHeadDim + static_cast<int64_t>(sizeof(float)));
  for (const int64_t bs : {1, 3, 64}) {
    const IndexerAppendShape s{0, 4, bs, ScaleFmt::ue8m0};
    std::vector<int> hits(static_cast<std::size_t>(indexer_cache_bytes(s)), 0);
    for (int64_t slot = 0; slot < s.num_blocks * bs; ++slot) {
      const int64_t c = indexer_code_offset(bs, slot), sc = indexer_scale_offset(bs, slot);
      // A block's codes come first, then its scales: a scale never sits right after its codes
      // unless the block has one token.
      EXPECT_EQ(sc / (bs * kIndexerTokenBytes), c / (bs * kIndexerTokenBytes));
      EXPECT_GE(sc % (bs * kIndexerTokenBytes), bs * kD);
      for (int64_t i = 0; i < kD; ++i) {
        ++hits[static_cast<std::size_t>(c + i)];
        const auto b = indexer_byte_at(bs, c + i);
        EXPECT_TRUE(b.slot == slot && !b.scale && b.dim == i) << "bs " << bs << " slot " << slot << " dim " << i;
      }
      for (int64_t i = 0; i < kIndexerScaleBytes; ++i) {
        ++hits[static_cast<std::size_t>(sc + i)];
        const auto b = indexer_byte_at(bs, sc + i);
        EXPECT_TRUE(b.slot == slot && b.scale && b.dim == i) << "bs " << bs << " slot " << slot << " scale byte " << i;
      }
    }
    EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; })) << "bs " << bs;
  }
}

TEST(IndexerCache, TheEdgeKeysQuantizeAsTheRecipeSays) {
  const auto keys = make_keys(5, 1);
  auto key = [&](int64_t t) { return std::span<const uint16_t>(keys).subspan(static_cast<std::size_t>(t * kD), kD); };
  ASSERT_TRUE(key(2)[7] >= 0x3F80 && key(2)[7] < 0x4000) << "no bf16 amax in [1, 2) whose float32 quotient passes 448";
  for (const ScaleFmt fmt : {ScaleFmt::fp32, ScaleFmt::ue8m0}) {
    SCOPED_TRACE(to_string(fmt));
    // All zero: the clamp, before dividing (2^-22 rounded up; the MLA writer's clamp after
    // dividing would give 1e-4 / 2^-13), every code +0.
    const auto zero = ref::indexer_quantize_key(key(0), fmt, IndexerScaleOp::divide);
    EXPECT_EQ(zero.scale, fmt == ScaleFmt::fp32 ? 1e-4f / 448.0f : std::ldexp(1.0f, -22));
    EXPECT_TRUE(std::all_of(zero.codes.begin(), zero.codes.end(), [](uint8_t c) { return c == 0; }));
    // The largest bf16 value: a finite scale, its code the largest the recipe reaches.
    const auto huge = ref::indexer_quantize_key(key(1), fmt, IndexerScaleOp::divide);
    EXPECT_TRUE(std::isfinite(huge.scale));
    EXPECT_EQ(huge.codes[0], e4m3_from_double(bf16_to_float(0x7F7F) / huge.scale));
    EXPECT_EQ(huge.codes[1], huge.codes[0] | 0x80);
    EXPECT_EQ(huge.codes[3] & 0x7F, 0) << "an O(1) value beside 3e38 underflows to zero";
  }
  // fp32, divide: the quotient of the amax passes 448 and saturates to 448 (0x7E), never NaN.
  const auto sat = ref::indexer_quantize_key(key(2), ScaleFmt::fp32, IndexerScaleOp::divide);
  EXPECT_GT(bf16_to_float(key(2)[7]) / sat.scale, 448.0f);
  EXPECT_EQ(e4m3_to_double(sat.codes[7]), 448.0);
}

TEST(IndexerAppendKernels, EveryRegisteredImplementationWritesTheOraclesBytes) {
  register_builtin_kernels();
  const auto& impls = Registry::instance().indexer_append();
  ASSERT_NE(Registry::instance().find_indexer_append("cpu_indexer_append"), nullptr);
  for (const auto& k : impls) {
    if (auto why = k->unavailable()) {
      std::printf("[indexer append] %s skipped: %s\n", k->info().name.c_str(), why->c_str());
      continue;
    }
    for (const ScaleFmt fmt : k->info().scale_fmts) {
      for (const auto& p : problems(fmt)) {
        SCOPED_TRACE(k->info().name + " " + p.name + " " + to_string(fmt));
        if (auto why = k->check(p.shape)) {
          std::printf("[indexer append] %s does not claim %s: %s\n", k->info().name.c_str(), p.name.c_str(), why->c_str());
          continue;
        }
        auto prepared = k->prepare(p.view());
        prepared->run();
        const auto once = prepared->results();
        prepared->run();
        prepared->synchronize();
        EXPECT_EQ(prepared->results(), once) << "a second run left other bytes";
        const auto j = judge_indexer_append(p.view(), k->info().conventions.fp32_scale_op, once);
        EXPECT_EQ(j.verdict, tol::Verdict::pass) << all(j.reasons);
        ASSERT_TRUE(j.codes && j.scales);
        EXPECT_EQ(j.codes->max_abs_err, 0);
        EXPECT_EQ(j.scales->max_abs_err, 0);
        // The cache really changed where tokens were written and nowhere else.
        EXPECT_NE(once, p.cache);
      }
    }
  }
}

TEST(IndexerAppendKernels, ANameIsUniqueAcrossTheRegistrysLists) {
  register_builtin_kernels();
  Registry fresh;
  add_builtin_kernels(fresh);
  ASSERT_NE(fresh.find_indexer_append("cpu_indexer_append"), nullptr);
  struct Named final : IndexerAppendImpl {
    IndexerAppendKernelInfo i;
    explicit Named(std::string n) { i.name = std::move(n); }
    const IndexerAppendKernelInfo& info() const override { return i; }
    std::unique_ptr<PreparedIndexerAppend> prepare(const IndexerAppendInputs&) const override { return nullptr; }
  };
  EXPECT_THROW(fresh.add(std::make_unique<Named>(Registry::instance().merge().front()->info().name)), Error);
  EXPECT_THROW(fresh.add(std::make_unique<Named>("cpu_indexer_append")), Error);
  EXPECT_THROW(fresh.add(std::make_unique<Named>("Bad Name")), Error);
  // Nor may another list take its name.
  struct NamedMerge final : MergeImpl {
    MergeKernelInfo i;
    explicit NamedMerge(std::string n) { i.name = std::move(n); }
    const MergeKernelInfo& info() const override { return i; }
    std::unique_ptr<PreparedMerge> prepare(const MergeInputs&) const override { return nullptr; }
  };
  EXPECT_THROW(fresh.add(std::make_unique<NamedMerge>("cpu_indexer_append")), Error);
}

// What a kernel leaves in the cache on `p`: one call, as the host makes it.
std::vector<uint8_t> written(const IndexerAppendImpl& k, const Problem& p) {
  auto prepared = k.prepare(p.view());
  prepared->run();
  prepared->synchronize();
  return prepared->results();
}

// The registered float32 writer (divide): the right bytes the tests below start from.
std::vector<uint8_t> right(const Problem& p) {
  register_builtin_kernels();
  return written(*Registry::instance().find_indexer_append("cpu_indexer_append"), p);
}

TEST(IndexerAppendKernels, EachPlantedBugFailsWithTheReasonThatNamesIt) {
  struct Expect {
    const char* fault;  // faults::make_indexer_append's name
    ScaleFmt fmt;
    const char* reason;  // the diagnosis
    const char* detail;  // the byte-level reason that names token, slot and byte offset
  };
  const Expect expects[] = {
      {"scale_after_each_token", ScaleFmt::ue8m0, "layout: each token's scale is stored right after its 128 codes", "codes: "},
      {"truncating_codes", ScaleFmt::fp32, "is the other e4m3 neighbour of k / scale: the kernel does not round to nearest even",
       "codes: "},
      {"fp32_scale_for_ue8m0", ScaleFmt::ue8m0, "every wrong scale is fp32 scales, divide", "scales: "},
      {"writes_skipped_token", ScaleFmt::ue8m0, "holds the codes of skipped token", "untouched: "},
      {"writes_past_codes", ScaleFmt::fp32, "is next to token", "untouched: "},
  };
  ASSERT_EQ(std::size(expects), faults::indexer_append_names().size()) << "every planted append bug has a line here";
  for (const auto& e : expects) {
    const auto k = faults::make_indexer_append(e.fault);
    // block_size 1 has no interleaving to see (a block of one token is both layouts); the other
    // problems must all show each bug.
    for (const auto& p : {shuffled_64(e.fmt), partial_16(e.fmt)}) {
      if (std::string(e.fault) == "writes_skipped_token" && p.name != "shuffled_bs64") continue;  // the one with skipped tokens
      SCOPED_TRACE(p.name + " " + e.reason);
      const auto j = judge_indexer_append(p.view(), k->info().conventions.fp32_scale_op, written(*k, p));
      EXPECT_EQ(j.verdict, tol::Verdict::fail);
      const std::string r = all(j.reasons);
      std::printf("[indexer append] planted bug on %s:\n%s", p.name.c_str(), r.c_str());
      EXPECT_NE(r.find(e.reason), std::string::npos) << r;
      // The layout explains every wrong byte: no second diagnosis.
      if (std::string(e.fault) == "scale_after_each_token") {
        EXPECT_EQ(r.find("next to token"), std::string::npos) << r;
      }
      const auto at = r.find(e.detail);
      ASSERT_NE(at, std::string::npos) << r;
      const std::string line = r.substr(at, r.find('\n', at) - at);
      EXPECT_NE(line.find("byte offset"), std::string::npos) << line;
      EXPECT_NE(line.find("slot "), std::string::npos) << line;
      // A written token's bytes are named by token and against the oracle; an untouched slot's
      // against its prior bytes.
      const bool untouched = std::string(e.detail) == "untouched: ";
      EXPECT_NE(line.find(untouched ? "prior" : "token "), std::string::npos) << line;
      EXPECT_NE(line.find(untouched ? "got" : "expected"), std::string::npos) << line;
    }
  }
}

TEST(IndexerAppendKernels, TheDeclaredFloat32OperationDecidesTheScales) {
  // The float32 reciprocal of 448 moves some fp32 scales by an ulp: a divide kernel judged as
  // times_reciprocal FAILs, and the diagnosis names the operation it uses.
  const auto p = shuffled_64(ScaleFmt::fp32);
  const auto divide = right(p);
  const auto j = judge_indexer_append(p.view(), IndexerScaleOp::times_reciprocal, divide);
  EXPECT_EQ(j.verdict, tol::Verdict::fail);
  EXPECT_NE(all(j.reasons).find("every wrong scale is fp32 scales, divide"), std::string::npos) << all(j.reasons);
  // ue8m0 scales do not depend on it.
  const auto q = shuffled_64(ScaleFmt::ue8m0);
  EXPECT_EQ(ref::indexer_append_reference(q.view(), IndexerScaleOp::divide),
            ref::indexer_append_reference(q.view(), IndexerScaleOp::times_reciprocal));
}

TEST(IndexerAppendKernels, CodesAreJudgedByTheirBytesNotOnlyTheirValues) {
  // +0 and -0 decode to the same value; the cache must still hold the oracle's byte.
  const auto p = partial_16(ScaleFmt::ue8m0);
  auto after = right(p);
  const int64_t at = indexer_code_offset(p.shape.block_size, p.slots[0]);  // token 0: the all-zero key
  ASSERT_EQ(after[static_cast<std::size_t>(at)], 0x00);
  after[static_cast<std::size_t>(at)] = 0x80;
  const auto j = judge_indexer_append(p.view(), IndexerScaleOp::divide, after);
  EXPECT_EQ(j.verdict, tol::Verdict::fail);
  EXPECT_EQ(j.wrong_code_bytes, 1);
  EXPECT_NE(all(j.reasons).find("expected 0x00 (0), got 0x80 (-0)"), std::string::npos) << all(j.reasons);
}

TEST(IndexerAppendKernels, TheCostModelCountsTheTokensWritten) {
  // A skipped token is read (its key and slot) but writes nothing.
  auto p = partial_16(ScaleFmt::fp32);
  const auto all_written = indexer_append_cost_model(p.view());
  p.slots[7] = -1;
  const auto one_skipped = indexer_append_cost_model(p.view());
  EXPECT_EQ(all_written.bytes - one_skipped.bytes, static_cast<double>(kIndexerTokenBytes));
  EXPECT_GT(one_skipped.flops, 0);
  EXPECT_LT(one_skipped.flops, all_written.flops);
}

TEST(IndexerAppendKernels, AWrongSizedCacheFailsNamingTheSizes) {
  const auto p = partial_16(ScaleFmt::ue8m0);
  auto after = right(p);
  after.pop_back();
  const auto j = judge_indexer_append(p.view(), IndexerScaleOp::divide, after);
  EXPECT_EQ(j.verdict, tol::Verdict::fail);
  EXPECT_NE(all(j.reasons).find(std::to_string(p.cache.size())), std::string::npos) << all(j.reasons);
}

TEST(IndexerAppendKernels, MalformedCallsAreRefusedNamingTheField) {
  register_builtin_kernels();
  const auto* k = Registry::instance().find_indexer_append("cpu_indexer_append");
  ASSERT_NE(k, nullptr);
  auto refused = [&](const Problem& p, const std::string& needle) {
    EXPECT_TRUE(testing::refused_naming([&] { (void)k->prepare(p.view()); }, needle));
  };
  const auto good = partial_16(ScaleFmt::ue8m0);
  auto p = good;
  p.slots[3] = 64;
  refused(p, "slot_mapping[3] = 64 is past the cache's 64 slots");
  p = good;
  p.slots[9] = p.slots[4];
  refused(p, "slot_mapping[4] and slot_mapping[9] are both slot 4: duplicate slots");
  p = good;
  p.shape.block_size = 0;
  refused(p, "block_size=0");
  p = good;
  p.keys.pop_back();
  refused(p, "keys has");
  p = good;
  p.slots.pop_back();
  refused(p, "slot_mapping has");
  p = good;
  p.cache.push_back(0);
  refused(p, "cache (bytes) has");
  p = good;
  p.keys[2 * kD + 5] = 0x7FC0;  // NaN
  refused(p, "keys[2, 5] is nan");
  // A skipped token's key is never read: a NaN there is no error.
  p.slots[2] = -1;
  EXPECT_NO_THROW(k->prepare(p.view()));
}

// The Python reference's quantization (indexer.quantize, DeepSeek's act_quant: float32 scales
// times the float32 reciprocal of 448) on the same keys, as codes [n, 128] then scales [n].
std::vector<uint8_t> python_quantize(const std::vector<uint16_t>& keys, ScaleFmt fmt, std::string& why) {
  const fs::path dir = fs::temp_directory_path() / ("mla_indexer_py_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "keys.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(keys.data()), static_cast<std::streamsize>(keys.size() * 2));
  const std::string cmd = std::string("PYTHONPATH=") + MLA_SOURCE_DIR + "/reference/python /usr/bin/python3 " +
                          MLA_SOURCE_DIR + "/suites/kernels/indexer_quantize_ref.py " + (dir / "keys.bin").string() +
                          " " + to_string(fmt) + " " + (dir / "out.bin").string() + " 2>&1";
  std::string out;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, f)) out += buf;
    if (::pclose(f) != 0) why = "the Python reference failed: " + out;
  } else {
    why = "cannot run " + cmd;
  }
  std::ifstream in(dir / "out.bin", std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove_all(dir);
  return bytes;
}

TEST(IndexerAppendPython, TheCppOracleQuantizesAsThePythonIndexerByteForByte) {
  if (std::system("/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch and numpy (mla.sh installs them)";
  }
  const int64_t n = 64;
  const auto keys = make_keys(n, 21);
  for (const ScaleFmt fmt : {ScaleFmt::fp32, ScaleFmt::ue8m0}) {
    SCOPED_TRACE(to_string(fmt));
    std::string why;
    const auto py = python_quantize(keys, fmt, why);
    ASSERT_TRUE(why.empty()) << why;
    ASSERT_EQ(py.size(), static_cast<std::size_t>(n * kIndexerTokenBytes));
    int64_t differ = 0;
    for (int64_t t = 0; t < n; ++t) {
      const auto key = std::span<const uint16_t>(keys).subspan(static_cast<std::size_t>(t * kD), kD);
      const auto q = ref::indexer_quantize_key(key, fmt, IndexerScaleOp::times_reciprocal);
      float py_scale;
      std::memcpy(&py_scale, py.data() + n * kD + 4 * t, 4);
      EXPECT_EQ(std::bit_cast<uint32_t>(q.scale), std::bit_cast<uint32_t>(py_scale)) << "token " << t;
      EXPECT_EQ(std::memcmp(q.codes.data(), py.data() + t * kD, kD), 0) << "token " << t << " codes";
      const auto d = ref::indexer_quantize_key(key, fmt, IndexerScaleOp::divide);
      if (d.scale != q.scale) ++differ;
    }
    // The two float32 operations part on some keys with fp32 scales, never with ue8m0 ones.
    if (fmt == ScaleFmt::ue8m0) {
      EXPECT_EQ(differ, 0);
    } else {
      EXPECT_GT(differ, 0);
    }
  }
}

}  // namespace
}  // namespace mla
