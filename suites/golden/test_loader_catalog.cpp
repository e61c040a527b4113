// L1: the real golden catalog (fixtures/goldens, or $MLA_GOLDENS_DIR). The manifest is verified,
// every case of every file is loaded with all the loader's checks, and every generated tensor is
// regenerated here and checked against the sha256 the Python writer stored: the cross-language
// check of the generator. Skips (visibly) when the catalog has not been written.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <set>

#include <fmt/format.h>

#include "loader_test_util.hpp"
#include "mla/golden/families.hpp"
#include "mla/core/numeric.hpp"

namespace mla::golden {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

class RealCatalog : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = default_goldens_dir();
    if (!fs::exists(dir_ / "MANIFEST.sha256")) {
      GTEST_SKIP() << "no golden catalog at " << dir_
                   << " (write it with ./mla.sh goldens, or point MLA_GOLDENS_DIR at one)";
    }
  }
  fs::path dir_;
};

// Attention invariants a kernel relies on, beyond what the loader already refused.
void check_attn_case(const AttnCase& c) {
  SCOPED_TRACE(c.file + ":" + c.name);
  const auto& s = c.shape;
  const std::size_t b = s.batch, sq = s.s_q, h = s.heads;
  EXPECT_EQ(c.q.size(), b * sq * h * kQkDim);
  EXPECT_EQ(c.kv_cache.size(), static_cast<std::size_t>(s.num_blocks) * s.page_size *
                                   (s.cache_format == CacheFormat::fp8 ? kFp8TokenBytes : 2 * kQkDim));
  EXPECT_EQ(c.truth_out.size(), b * sq * h * kLatentDim);
  EXPECT_EQ(c.truth_lse.size(), b * h * sq);
  EXPECT_EQ(c.same_dtype_out.size(), c.truth_out.size());
  EXPECT_EQ(c.indices.size(), b * sq * static_cast<std::size_t>(s.topk));
  // Sentinel entries sit exactly past the used pages (SCHEMA: entries at or past ceil(L/ps)).
  for (std::size_t i = 0; i < b; ++i) {
    const int64_t pages = (c.cache_seqlens[i] + s.page_size - 1) / s.page_size;
    for (int64_t j = pages; j < s.max_blocks; ++j) {
      EXPECT_EQ(c.block_table[i * s.max_blocks + j], c.sentinel_block_id) << "seq " << i << " entry " << j;
    }
  }
  // The truth is a number wherever the query attends to something, and empty rows are 0/+inf.
  for (std::size_t i = 0; i < c.truth_lse.size(); ++i) {
    EXPECT_FALSE(std::isnan(c.truth_lse[i])) << "lse " << i;
    if (std::isinf(c.truth_lse[i])) {
      EXPECT_GT(c.truth_lse[i], 0) << "lse " << i;
      // lse [b, h, s_q] -> out row [b, s_q, h, :]
      const std::size_t bi = i / (h * sq), hi = (i / sq) % h, qi = i % sq;
      for (std::size_t d = 0; d < kLatentDim; ++d) {
        ASSERT_EQ(c.truth_out[((bi * sq + qi) * h + hi) * kLatentDim + d], 0.0) << "empty row, lse " << i;
      }
    }
  }
  for (double v : c.truth_out) ASSERT_TRUE(std::isfinite(v));
}

template <class Map>
std::set<std::string> keys(const Map& m) {
  std::set<std::string> k;
  for (const auto& [name, value] : m) k.insert(name);
  return k;
}

const std::set<std::string> kOutputs{"fp64/naive", "fp64/absorbed", "fp32/naive",
                                     "fp32/absorbed", "bf16/naive", "bf16/absorbed"};
const std::set<std::string> kIntermediates{
    "naive/q_nope",     "naive/q_pe",     "naive/kv_normed",     "naive/k_pe",     "naive/scores",
    "naive/probs",      "naive/attn_out", "absorbed/q_nope",     "absorbed/q_pe",  "absorbed/kv_normed",
    "absorbed/k_pe",    "absorbed/scores", "absorbed/probs",     "absorbed/q_absorbed",
    "absorbed/latent_out"};
const std::set<std::string> kFinalCaches{"naive/k_cache", "naive/v_cache", "absorbed/kv_cache",
                                         "absorbed/pe_cache"};

TEST_F(RealCatalog, EveryCaseOfEveryFileLoads) {
  const auto t0 = Clock::now();
  const Catalog cat = open_catalog(dir_);
  const double t_manifest = seconds_since(t0);
  std::set<std::string> families;
  int n_cases = 0, n_generated = 0;
  std::string per_file;
  for (const auto& [name, digest] : cat.sha256) {
    const auto f0 = Clock::now();
    const auto path = cat.file(name);
    const FileInfo info = read_file_info(path);
    families.insert(info.family);
    EXPECT_EQ(info.schema_version, kSchemaVersion);
    EXPECT_FALSE(info.cases.empty()) << name;
    EXPECT_EQ(name, info.family + ".h5") << "one file per family, named after it";
    for (const char* p : {"generator_version", "command", "torch_version", "numpy_version", "h5py_version"}) {
      EXPECT_TRUE(info.provenance.count(p)) << name << " lacks " << p;
    }
    // Generated tensors are regenerated and their sha256 checked inside the loader; count them
    // so that a catalog without any cannot pass this cross-language check vacuously.
    for (const auto& summary : summarize_cases(path)) n_generated += !summary.inputs_stored;
    for (const auto& cname : info.cases) {
      ++n_cases;
      const FamilyKind kind = family(info.family).kind;
      if (kind == FamilyKind::attention) {
        check_attn_case(load_attn_case(path, cname));
      } else if (kind == FamilyKind::prefill) {
        const PrefillCase c = load_prefill_case(path, cname);
        EXPECT_EQ(c.truth_out.size(), static_cast<std::size_t>(c.shape.total_q * c.shape.heads * c.shape.d_v)) << cname;
      } else if (kind == FamilyKind::merge) {
        const MergeCase c = load_merge_case(path, cname);
        EXPECT_EQ(c.truth_lse.size(), static_cast<std::size_t>(c.tokens * c.heads)) << cname;
      } else if (kind == FamilyKind::indexer) {
        const IndexerCase c = load_indexer_case(path, cname);
        ASSERT_FALSE(c.steps.empty()) << cname;
        EXPECT_EQ(c.steps.back().logits_truth.size(),
                  static_cast<std::size_t>(c.batch * c.steps.back().seqlen * c.steps.back().end_pos())) << cname;
      } else {
        const LayerCase c = load_layer_case(path, cname);
        SCOPED_TRACE(name + ":" + cname);
        EXPECT_FALSE(c.steps.empty());
        EXPECT_FALSE(c.weights.empty());
        // The loader treats intermediates and final caches as optional, so a renamed dataset
        // would vanish silently; the real catalog must carry every one SCHEMA.md lists.
        for (const auto& st : c.steps) {
          EXPECT_EQ(keys(st.outputs), kOutputs);
          if (c.kind == "full_layer") {
            EXPECT_EQ(keys(st.intermediates), kIntermediates);
          }
        }
        if (c.kind == "full_layer") {
          EXPECT_EQ(keys(c.final_cache), kFinalCaches);
        }
        if (c.kind == "cache_boundary") {
          ASSERT_TRUE(c.accept.has_value());
          ASSERT_TRUE(c.reject.has_value());
          EXPECT_EQ(keys(c.accept->outputs), kOutputs);
          EXPECT_EQ(c.reject->start_pos, c.config.max_seq_len);
          EXPECT_FALSE(c.expected_error.empty());
        }
      }
    }
    per_file += fmt::format(" {} {:.2f}s;", name, seconds_since(f0));
  }
  const double total = seconds_since(t0);
  for (const auto& fam : family_names()) EXPECT_TRUE(families.count(fam)) << "the catalog lacks family " << fam;
  EXPECT_GT(n_generated, 0) << "no generated case: the cross-language generator check did not run";
  RecordProperty("cases", n_cases);
  RecordProperty("generated_cases", n_generated);
  RecordProperty("seconds", fmt::format("{:.2f}", total));
  // Progress for people reading the log; the suite's stdout stays gtest's.
  std::cerr << fmt::format("[catalog] {} cases in {} files: manifest {:.2f} s, total {:.2f} s;{}\n", n_cases,
                           cat.sha256.size(), t_manifest, total, per_file);
}

// One flipped byte in a copy of the smallest real golden fails the manifest check.
TEST_F(RealCatalog, FlippedByteInARealGoldenFailsTheManifest) {
  const Catalog cat = open_catalog(dir_, /*verify_files=*/false);
  std::string smallest;
  for (const auto& [name, digest] : cat.sha256) {
    if (smallest.empty() || fs::file_size(cat.file(name)) < fs::file_size(cat.file(smallest))) smallest = name;
  }
  testing::TempDir tmp;
  Catalog copy;
  copy.dir = tmp.path();
  copy.sha256[smallest] = cat.sha256.at(smallest);
  fs::copy_file(cat.file(smallest), tmp.path() / smallest);
  ASSERT_NO_THROW(verify_file(copy, smallest));
  const auto size = fs::file_size(tmp.path() / smallest);
  testing::copy_with_flipped_byte(cat.file(smallest), tmp.path() / smallest, size / 3);
  EXPECT_THROW(verify_file(copy, smallest), FixtureError);
}

}  // namespace
}  // namespace mla::golden
