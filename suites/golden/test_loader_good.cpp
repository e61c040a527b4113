// The tiny good catalog (fixtures/bad/good) loads, and the loader returns exactly the arrays
// make_corpus.py wrote (sha256 of every dataset in expected.json). The Python side has its own
// generator, bf16 and e4m3 code, so regenerating and re-quantizing here is a cross-language
// check of mla_core.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "loader_test_util.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/sha256.hpp"

namespace mla::golden {
namespace {

namespace fs = std::filesystem;
using testing::corpus_dir;

fs::path good_dir() { return corpus_dir() / "good"; }

nlohmann::json expected() {
  std::ifstream in(good_dir() / "expected.json");
  return nlohmann::json::parse(in);
}

template <class T>
std::string digest(const std::vector<T>& v) {
  return sha256_hex({reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)});
}

// Checks one array against expected.json: its digest and its element count.
template <class T>
void expect_written(const nlohmann::json& file_rec, const std::string& dataset, const std::vector<T>& v,
                    std::size_t element_bytes = sizeof(T)) {
  SCOPED_TRACE(dataset);
  ASSERT_TRUE(file_rec.contains(dataset));
  const auto& rec = file_rec.at(dataset);
  int64_t n = 1;
  for (int64_t d : rec.at("shape")) n *= d;
  EXPECT_EQ(static_cast<int64_t>(v.size() * sizeof(T) / element_bytes), n);
  EXPECT_EQ(digest(v), rec.at("sha256").get<std::string>());
}

std::vector<uint16_t> cache_bits(const AttnCase& c) {
  std::vector<uint16_t> bits(c.kv_cache.size() / 2);
  std::memcpy(bits.data(), c.kv_cache.data(), c.kv_cache.size());
  return bits;
}

TEST(GoodCatalog, ManifestVerifiesAndFilesDescribeThemselves) {
  const Catalog cat = open_catalog(good_dir());
  ASSERT_EQ(cat.sha256.size(), 2u);
  EXPECT_EQ(cat.file("attn_core.h5"), good_dir() / "attn_core.h5");
  EXPECT_THROW(cat.file("attn_sparse.h5"), FixtureError);
  const FileInfo info = read_file_info(cat.file("attn_core.h5"));
  EXPECT_EQ(info.family, "attn_core");
  EXPECT_EQ(info.schema_version, 1);
  EXPECT_EQ(info.cases, (std::vector<std::string>{"dense_generated", "dense_stored"}));
  EXPECT_NE(info.provenance.at("command").find("make_corpus.py"), std::string::npos);
  EXPECT_EQ(info.provenance.count("schema_version"), 0u);  // an integer, not provenance text

  const auto summaries = summarize_cases(cat.file("attn_core.h5"));
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_EQ(summaries[1].name, "dense_stored");
  EXPECT_TRUE(summaries[1].inputs_stored);
  EXPECT_FALSE(summaries[0].inputs_stored);
  EXPECT_NE(summaries[1].shape.find("b=1 s_q=2 h=1 page=2 blocks=3 max_blocks=3 bf16 dense causal"),
            std::string::npos)
      << summaries[1].shape;
}

TEST(GoodCatalog, StoredCaseIsWhatTheScriptWrote) {
  const auto file = good_dir() / "attn_core.h5";
  const AttnCase c = load_attn_case(file, "dense_stored");
  const auto rec = expected().at("attn_core.h5");
  const std::string p = "/cases/dense_stored/";
  EXPECT_EQ(c.name, "dense_stored");
  EXPECT_EQ(c.family, "attn_core");
  EXPECT_EQ(c.shape.batch, 1);
  EXPECT_EQ(c.shape.s_q, 2);
  EXPECT_EQ(c.shape.heads, 1);
  EXPECT_EQ(c.shape.page_size, 2);
  EXPECT_EQ(c.shape.num_blocks, 3);
  EXPECT_EQ(c.shape.max_blocks, 3);
  EXPECT_EQ(c.shape.topk, 0);
  EXPECT_TRUE(c.shape.causal);
  EXPECT_EQ(c.shape.cache_format, CacheFormat::bf16);
  EXPECT_EQ(c.softmax_scale, 1.0 / 24.0);
  EXPECT_TRUE(c.inputs_stored);
  expect_written(rec, p + "inputs/q", c.q);
  expect_written(rec, p + "inputs/kv_cache", c.kv_cache, 2);
  expect_written(rec, p + "inputs/block_table", c.block_table);
  expect_written(rec, p + "inputs/cache_seqlens", c.cache_seqlens);
  expect_written(rec, p + "truth/out", c.truth_out);
  expect_written(rec, p + "truth/lse", c.truth_lse);
  expect_written(rec, p + "same_dtype/out", c.same_dtype_out);
  expect_written(rec, p + "same_dtype/lse", c.same_dtype_lse);
  EXPECT_TRUE(c.indices.empty());
  EXPECT_TRUE(c.kv_cache_dequant.empty());
  EXPECT_TRUE(c.unquantized_out.empty());

  // The script drew q and the cache from the generator (seed 11, streams 0 and 1, std 1).
  std::vector<uint16_t> q(c.q.size());
  gen::fill_bf16(11, 0, 0.0, 1.0, q);
  EXPECT_EQ(c.q, q);
  std::vector<uint16_t> cache(c.kv_cache.size() / 2);
  gen::fill_bf16(11, 1, 0.0, 1.0, cache);
  const auto stored = cache_bits(c);
  // Length 3 at page size 2: page 0 full, page 1 half; the third block and the rest are NaN.
  const int32_t b0 = c.block_table[0], b1 = c.block_table[1];
  EXPECT_EQ(c.block_table[2], c.sentinel_block_id);
  EXPECT_EQ(c.sentinel_block_id, 2147483647);
  for (int blk = 0; blk < 3; ++blk) {
    for (int off = 0; off < 2; ++off) {
      const bool used = blk == b0 || (blk == b1 && off == 0);
      for (int d = 0; d < 576; ++d) {
        const std::size_t i = (static_cast<std::size_t>(blk) * 2 + off) * 576 + d;
        ASSERT_EQ(stored[i], used ? cache[i] : uint16_t{0x7FC0}) << blk << " " << off << " " << d;
      }
    }
  }
  // Both causal rows attend to something: finite lse everywhere.
  for (double l : c.truth_lse) EXPECT_TRUE(std::isfinite(l));

  const AttnInputs in = c.inputs();
  EXPECT_EQ(in.q.data(), c.q.data());
  EXPECT_EQ(in.kv_cache.size(), c.kv_cache.size());
  EXPECT_EQ(in.block_table.size(), 3u);
  EXPECT_EQ(in.cache_seqlens.size(), 1u);
  EXPECT_EQ(in.softmax_scale, c.softmax_scale);
  EXPECT_EQ(in.shape.num_blocks, 3);
}

TEST(GoodCatalog, GeneratedCaseIsRegeneratedAndChecked) {
  const AttnCase c = load_attn_case(good_dir() / "attn_core.h5", "dense_generated");
  const auto rec = expected().at("attn_core.h5");
  EXPECT_FALSE(c.inputs_stored);
  std::vector<uint16_t> q(1 * 1 * 1 * 576);
  gen::fill_bf16(12, 0, 0.0, 2.0, q);
  EXPECT_EQ(c.q, q);
  std::vector<uint16_t> cache(2 * 2 * 576);
  gen::fill_bf16(12, 1, 0.0, 1.0, cache);
  EXPECT_EQ(cache_bits(c), cache);  // length 4 fills both pages: nothing to poison
  expect_written(rec, "/cases/dense_generated/truth/out", c.truth_out);
  expect_written(rec, "/cases/dense_generated/same_dtype/out", c.same_dtype_out);
}

// The FP8 case: the bytes written by the script's own quantizer equal mla_core's quantization
// of the same source values, and the stored dequantized cache equals mla_core's decoding.
TEST(GoodCatalog, Fp8CaseMatchesTheCppCodec) {
  const AttnCase c = load_attn_case(good_dir() / "attn_fp8.h5", "fp8_ue8m0");
  const auto rec = expected().at("attn_fp8.h5");
  const std::string p = "/cases/fp8_ue8m0/";
  ASSERT_EQ(c.shape.cache_format, CacheFormat::fp8);
  EXPECT_EQ(c.scale_fmt, ScaleFmt::ue8m0);
  expect_written(rec, p + "inputs/kv_cache", c.kv_cache);
  expect_written(rec, p + "inputs/kv_cache_dequant", c.kv_cache_dequant);
  expect_written(rec, p + "unquantized/out", c.unquantized_out);
  expect_written(rec, p + "unquantized/lse", c.unquantized_lse);

  // Source: seed 13 stream 1, std 3, rounded to bf16; token 0's block 1 scaled by 2^-16.
  const int nb = c.shape.num_blocks, ps = c.shape.page_size;
  std::vector<uint16_t> src_bits(static_cast<std::size_t>(nb) * ps * 576);
  gen::fill_bf16(13, 1, 0.0, 3.0, src_bits);
  std::vector<double> src(src_bits.size());
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = bf16_to_float(src_bits[i]);
  const int32_t first = c.block_table[0];
  for (int j = 128; j < 256; ++j) src[static_cast<std::size_t>(first) * ps * 576 + j] *= 0x1p-16;

  int checked = 0;
  for (int t = 0; t < c.cache_seqlens[0]; ++t) {
    const std::size_t slot = static_cast<std::size_t>(c.block_table[t / ps]) * ps + t % ps;
    std::vector<uint8_t> tok(kFp8TokenBytes);
    fp8_quantize_token(std::span(src).subspan(slot * 576, 512), std::span(src).subspan(slot * 576 + 512, 64),
                       ScaleFmt::ue8m0, tok);
    const std::vector<uint8_t> stored(c.kv_cache.begin() + slot * kFp8TokenBytes,
                                      c.kv_cache.begin() + (slot + 1) * kFp8TokenBytes);
    ASSERT_EQ(tok, stored) << "token " << t;
    std::vector<double> deq(576);
    fp8_dequantize_token(stored, deq);
    for (int d = 0; d < 576; ++d) ASSERT_EQ(deq[d], c.kv_cache_dequant[slot * 576 + d]) << t << " " << d;
    ++checked;
  }
  EXPECT_EQ(checked, 3);
  // Token 0's block 1 has amax < 1e-4: its scale is the clamp's, 1e-4f/448 rounded up to 2^-22.
  float s1;
  std::memcpy(&s1, c.kv_cache.data() + static_cast<std::size_t>(first) * ps * kFp8TokenBytes + 516, 4);
  EXPECT_EQ(s1, 0x1p-22f);
}

TEST(GoodCatalog, WrongLoaderOrCaseIsRefused) {
  const auto file = good_dir() / "attn_core.h5";
  try {
    load_layer_case(file, "dense_stored");
    FAIL() << "a layer load of an attention file was accepted";
  } catch (const FixtureError& e) {
    EXPECT_EQ(e.dataset(), "/");
    EXPECT_NE(std::string(e.what()).find("layer family"), std::string::npos) << e.what();
  }
  try {
    load_attn_case(file, "nope");
    FAIL() << "a missing case was accepted";
  } catch (const FixtureError& e) {
    EXPECT_EQ(e.dataset(), "/cases/nope");
    EXPECT_EQ(e.found(), "missing");
  }
  EXPECT_THROW(load_attn_case(file, "../dense_stored"), FixtureError);
  EXPECT_THROW(load_attn_case(good_dir() / "absent.h5", "dense_stored"), FixtureError);
}

// One flipped byte in a copy of a verified catalog makes the manifest check fail.
TEST(GoodCatalog, FlippedByteFailsTheManifest) {
  testing::TempDir tmp;
  for (const char* f : {"attn_core.h5", "attn_fp8.h5", "MANIFEST.sha256"}) {
    fs::copy_file(good_dir() / f, tmp.path() / f);
  }
  ASSERT_NO_THROW(open_catalog(tmp.path()));
  const auto victim = tmp.path() / "attn_fp8.h5";
  testing::copy_with_flipped_byte(good_dir() / "attn_fp8.h5", victim, fs::file_size(victim) / 2);
  try {
    open_catalog(tmp.path());
    FAIL() << "a corrupted file passed the manifest";
  } catch (const FixtureError& e) {
    EXPECT_EQ(e.file(), victim.string());
    EXPECT_NE(std::string(e.what()).find("sha256"), std::string::npos) << e.what();
  }
  const Catalog unverified = open_catalog(tmp.path(), false);
  EXPECT_NO_THROW(verify_file(unverified, "attn_core.h5"));
  EXPECT_THROW(verify_file(unverified, "attn_fp8.h5"), FixtureError);
}

TEST(GoodCatalog, DefaultDirFollowsTheEnvironment) {
  const char* old = std::getenv("MLA_GOLDENS_DIR");
  const std::string saved = old ? old : "";
  ::setenv("MLA_GOLDENS_DIR", "/somewhere/else", 1);
  EXPECT_EQ(default_goldens_dir(), fs::path("/somewhere/else"));
  ::unsetenv("MLA_GOLDENS_DIR");
  EXPECT_EQ(default_goldens_dir(), fs::path(MLA_GOLDENS_DIR));
  if (old) ::setenv("MLA_GOLDENS_DIR", saved.c_str(), 1);
}

}  // namespace
}  // namespace mla::golden
