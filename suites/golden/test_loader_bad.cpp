// Every file of the bad corpus (fixtures/bad, written by make_corpus.py) must be refused with a
// FixtureError that names the file, the dataset and what was wrong; nothing may crash, print,
// or allocate what a lying header claims.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "loader_test_util.hpp"

namespace mla::golden {
namespace {

using testing::corpus_dir;

struct BadFile {
  const char* file;
  const char* dataset;  // FixtureError::dataset(); "" for the file as a whole
  const char* message;  // a substring of what()
};

const BadFile kBadFiles[] = {
    {"truncated.h5", "", "truncated"},
    {"not_hdf5.h5", "", "no HDF5 signature"},
    {"wrong_storage_dtype.h5", "/cases/dense_stored/inputs/q", "found storage type f32 LE"},
    {"wrong_dtype_attr.h5", "/cases/dense_stored/inputs/q", "expected dtype attribute 'bfloat16', found 'float16'"},
    {"missing_dataset.h5", "/cases/dense_stored/truth/lse", "found missing"},
    {"lying_shape.h5", "/cases/dense_stored/inputs/q", "expected shape [1, 2, 1, 576] (batch=1, s_q=2, heads=1 of the case attributes), found shape [2, 2, 2, 576]"},
    {"huge_elements.h5", "/cases/dense_stored/inputs/q", "at most 268435456 elements"},
    {"wrong_schema_version.h5", "/", "expected schema_version 1 to 2, found schema_version 3"},
    {"missing_attribute.h5", "/cases/dense_stored", "attribute 'page_size', found missing"},
    {"generated_sha256_mismatch.h5", "/cases/dense_generated/generated/q", "(regenerated)"},
    {"generated_huge_shape.h5", "/cases/dense_generated/generated/q", "found shape [1000000, 1, 1000000, 576]"},
    {"seqlen_out_of_range.h5", "/cases/dense_stored/inputs/cache_seqlens", "cache_seqlens[0] = 7"},
    {"block_out_of_range.h5", "/cases/dense_stored/inputs/block_table", "block_table[0][1] = 3"},
    {"fp8_dequant_mismatch.h5", "/cases/fp8_ue8m0/inputs/kv_cache_dequant", "exact dequantization"},
};

class BadFiles : public ::testing::TestWithParam<BadFile> {};

TEST_P(BadFiles, RefusedWithATypedErrorNamingFileAndDataset) {
  const BadFile& bad = GetParam();
  const auto path = corpus_dir() / bad.file;
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " (run fixtures/bad/make_corpus.py)";
  try {
    testing::load_every_case(path);
    FAIL() << bad.file << " was accepted";
  } catch (const FixtureError& e) {
    EXPECT_EQ(e.file(), path.string());
    EXPECT_EQ(e.dataset(), bad.dataset) << e.what();
    EXPECT_NE(std::string(e.what()).find(bad.message), std::string::npos)
        << "expected '" << bad.message << "' in: " << e.what();
    EXPECT_FALSE(e.expected().empty());
    EXPECT_FALSE(e.found().empty());
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, BadFiles, ::testing::ValuesIn(kBadFiles),
                         [](const ::testing::TestParamInfo<BadFile>& i) {
                           std::string n = i.param.file;
                           return n.substr(0, n.size() - 3);
                         });

// Every .h5 in the corpus folder has an entry above (a new bad file without an expectation
// would otherwise be silently untested).
TEST(BadFiles, EveryCorpusFileIsInTheTable) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus_dir())) {
    if (entry.path().extension() != ".h5") continue;
    ++n;
    bool listed = false;
    for (const auto& b : kBadFiles) listed |= entry.path().filename() == b.file;
    EXPECT_TRUE(listed) << entry.path();
  }
  EXPECT_EQ(n, static_cast<int>(std::size(kBadFiles)));
}

// HDF5 prints its error stack to stderr unless told not to; the loader reports through
// exceptions only, so refusing the whole corpus must leave stderr (and stdout) empty.
TEST(BadFiles, RefusalIsSilent) {
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  int refused = 0;
  for (const auto& bad : kBadFiles) {
    try {
      testing::load_every_case(corpus_dir() / bad.file);
    } catch (const FixtureError&) {
      ++refused;
    }
  }
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(refused, static_cast<int>(std::size(kBadFiles)));
  EXPECT_EQ(err, "");
  EXPECT_EQ(out, "");
}

struct BadManifest {
  const char* dir;
  const char* file;     // the path FixtureError::file() names, relative to the catalog folder
  const char* dataset;  // FixtureError::dataset()
  const char* message;
};

const BadManifest kBadManifests[] = {
    {"manifest_wrong_sha256", "attn_core.h5", "", "(MANIFEST.sha256), found sha256"},
    {"manifest_missing_file", "attn_fp8.h5", "", "found missing"},
    {"manifest_unlisted_file", "attn_fp8.h5", "", "found not listed"},
    {"manifest_malformed", "MANIFEST.sha256", "line 1", "<64 lowercase hex>"},
};

class BadManifests : public ::testing::TestWithParam<BadManifest> {};

TEST_P(BadManifests, CatalogIsRefused) {
  const BadManifest& bad = GetParam();
  const auto dir = corpus_dir() / bad.dir;
  try {
    open_catalog(dir);
    FAIL() << bad.dir << " was accepted";
  } catch (const FixtureError& e) {
    EXPECT_EQ(e.file(), (dir / bad.file).string()) << e.what();
    EXPECT_EQ(e.dataset(), bad.dataset) << e.what();
    EXPECT_NE(std::string(e.what()).find(bad.message), std::string::npos)
        << "expected '" << bad.message << "' in: " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, BadManifests, ::testing::ValuesIn(kBadManifests),
                         [](const ::testing::TestParamInfo<BadManifest>& i) { return std::string(i.param.dir); });

TEST(BadManifests, ParsingAloneDoesNotReadFilesButVerifyFileDoes) {
  const auto dir = corpus_dir() / "manifest_wrong_sha256";
  const Catalog c = open_catalog(dir, /*verify_files=*/false);
  ASSERT_EQ(c.sha256.size(), 1u);
  EXPECT_THROW(verify_file(c, "attn_core.h5"), FixtureError);
  EXPECT_THROW(verify_file(c, "attn_fp8.h5"), FixtureError);  // not listed at all
}

TEST(BadManifests, MissingManifest) {
  testing::TempDir tmp;
  try {
    open_catalog(tmp.path());
    FAIL() << "accepted a folder without a manifest";
  } catch (const FixtureError& e) {
    EXPECT_EQ(e.file(), (tmp.path() / "MANIFEST.sha256").string());
    EXPECT_EQ(e.found(), "missing");
  }
}

TEST(BadManifests, PathsInTheManifestAreRefused) {
  testing::TempDir tmp;
  std::ofstream(tmp.path() / "MANIFEST.sha256")
      << "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  ../escape.h5\n";
  EXPECT_THROW(open_catalog(tmp.path(), false), FixtureError);
}

TEST(BadManifests, DuplicateEntriesAreRefused) {
  testing::TempDir tmp;
  const std::string line = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  a.h5\n";
  std::ofstream(tmp.path() / "MANIFEST.sha256") << line << line;
  try {
    open_catalog(tmp.path(), false);
    FAIL() << "accepted a duplicate entry";
  } catch (const FixtureError& e) {
    EXPECT_EQ(e.dataset(), "line 2");
  }
}

// The loader remembers, per process, a file whose global heap collections it walked (h5io.cpp),
// by its identity: device, inode, size, modification and status-change times. A file rewritten
// in place with the same size and its modification time set back is the same inode and size:
// only the status-change time moves, and the loader must walk it again and refuse what is now
// there (a collection claiming more bytes than the file has: libhdf5 would read past them).
TEST(BadFiles, AFileRewrittenInPlaceAfterItWasReadIsWalkedAgain) {
  testing::TempDir tmp;
  const auto file = tmp.path() / "attn_core.h5";
  std::filesystem::copy_file(corpus_dir() / "good" / "attn_core.h5", file);
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const auto at = bytes.find("GCOL");
  ASSERT_NE(at, std::string::npos) << "the good file holds a global heap collection";
  // A status change younger than 2 s is never remembered (the kernel's clock for it is coarse):
  // wait that out, so that the first read below is remembered.
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  EXPECT_NO_THROW(read_file_info(file));
  EXPECT_NO_THROW(read_file_info(file)) << "remembered: the same file reads as before";
  struct stat before {};
  ASSERT_EQ(::stat(file.c_str(), &before), 0);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at + 8));
    const char huge[8] = {0, 0, 0, 0, 0, 0, 0, 0x40};
    f.write(huge, sizeof huge);
  }
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0);
  struct stat after {};
  ASSERT_EQ(::stat(file.c_str(), &after), 0);
  ASSERT_EQ(after.st_ino, before.st_ino);
  ASSERT_EQ(after.st_size, before.st_size);
  // Read when the rewrite is old enough to be remembered itself: only the status-change time
  // tells the two files apart.
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  try {
    read_file_info(file);
    FAIL() << "the rewritten file was taken for the one read before";
  } catch (const FixtureError& e) {
    EXPECT_NE(std::string(e.what()).find("well-formed global heap collections"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mla::golden
