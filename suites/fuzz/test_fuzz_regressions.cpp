// Replays, through the ordinary build (and under ASan/UBSan in the `asan` preset), every input
// the fuzzers taught us something with:
//   regressions/  one reproducer per past finding, each with the refusal it must now produce;
//   corpus/       the committed, minimized fuzzing corpus (valid goldens and broken ones).
// Each input must end in a typed mla::Error or load; anything else escaping (std::bad_alloc,
// an untranslated H5::Exception), a crash, or an HDF5 object left open fails the test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "exercise.hpp"
#include "mla/core/error.hpp"
#include "support/temp_dir.hpp"

namespace mla::fuzz {
namespace {

namespace fs = std::filesystem;

fs::path fuzz_dir() { return fs::path(MLA_SOURCE_DIR) / "suites" / "fuzz"; }

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file()) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string describe_escape(const fs::path& input) {
  try {
    throw;
  } catch (const std::exception& e) {
    return input.filename().string() + ": non-mla exception escaped: " + e.what();
  } catch (...) {
    return input.filename().string() + ": non-std exception escaped";
  }
}

// One reproducer per finding (suites/fuzz/README.md, "Findings"): the file under
// regressions/golden_loader/ and a substring of the first refusal it must produce now.
struct Regression {
  const char* file;
  const char* refusal;
};

const std::vector<Regression> kRegressions = {
    // libhdf5 1.10.8 looped forever in H5HG deserialize (a free-space object of size 0).
    {"gheap_free_space_size0.h5", "collection at byte 2048: object 0 at byte 2448 of size 0"},
    // ... copied an object larger than its collection (ASan: memcpy-param-overlap in H5HG_read).
    {"gheap_object_overruns_collection.h5", "collection at byte 2048: object 15 at byte 2496 of size 7955890216726691845"},
    // ... ran past the collection while deserializing it (SEGV in H5HG deserialize).
    {"gheap_object_size_segv.h5", "collection at byte 2048: object 55 at byte 3488 of size 18446744039349813255"},
    // The loader committed memory for datasets HDF5 had no data for (read as fill values):
    // fuzz_golden_schema made it allocate 3 GiB from a file of kilobytes. This one is
    // make_corpus.py's dense_stored case with heads = 65536 and inputs/q, truth/out chunked and
    // never written (150 MiB + 512 MiB claimed in 37 KiB).
    {"unwritten_dataset_claims_gigabytes.h5", "/cases/dense_stored/inputs/q: expected all 131072 chunks stored, found 0 stored"},
};

TEST(FuzzRegressions, EveryReproducerIsRefusedAsExpected) {
  for (const auto& r : kRegressions) {
    const fs::path input = fuzz_dir() / "regressions" / "golden_loader" / r.file;
    SCOPED_TRACE(input.string());
    ASSERT_TRUE(fs::is_regular_file(input));
    Outcome o;
    try {
      o = exercise_golden_file(input);
    } catch (...) {
      FAIL() << describe_escape(input);
    }
    EXPECT_GT(o.refused, 0);
    EXPECT_NE(o.first_error.find(r.refusal), std::string::npos)
        << "expected '" << r.refusal << "' in: " << o.first_error;
    EXPECT_EQ(open_hdf5_objects(), 0);
  }
}

// A reproducer without an expectation above would be replayed by nobody.
TEST(FuzzRegressions, EveryReproducerIsInTheTable) {
  const auto files = files_in(fuzz_dir() / "regressions" / "golden_loader");
  for (const auto& f : files) {
    const bool listed = std::any_of(kRegressions.begin(), kRegressions.end(),
                                    [&](const Regression& r) { return f.filename() == r.file; });
    EXPECT_TRUE(listed) << f;
  }
  EXPECT_EQ(files.size(), kRegressions.size());
}

TEST(FuzzCorpus, EveryGoldenLoaderInputIsLoadedOrRefused) {
  const auto files = files_in(fuzz_dir() / "corpus" / "golden_loader");
  ASSERT_FALSE(files.empty()) << "no committed corpus under suites/fuzz/corpus/golden_loader";
  int loaded = 0, refused = 0;
  for (const auto& f : files) {
    try {
      const Outcome o = exercise_golden_file(f);
      loaded += o.loaded;
      refused += o.refused;
    } catch (...) {
      ADD_FAILURE() << describe_escape(f);
    }
    ASSERT_EQ(open_hdf5_objects(), 0) << f;
  }
  // The corpus is only useful if it reaches both ends: whole cases loaded and refusals.
  EXPECT_GT(loaded, 0);
  EXPECT_GT(refused, 0);
}

TEST(FuzzCorpus, EveryManifestInputIsAcceptedOrRefused) {
  const auto files = files_in(fuzz_dir() / "corpus" / "catalog_manifest");
  ASSERT_FALSE(files.empty()) << "no committed corpus under suites/fuzz/corpus/catalog_manifest";
  const mla::testing::TempDir tmp("mla-fuzz-replay");
  const fs::path& dir = tmp.path();
  int refused = 0;
  for (const auto& f : files) {
    fs::copy_file(f, dir / "MANIFEST.sha256", fs::copy_options::overwrite_existing);
    try {
      refused += exercise_catalog(dir).refused;
    } catch (...) {
      ADD_FAILURE() << describe_escape(f);
    }
  }
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace mla::fuzz
