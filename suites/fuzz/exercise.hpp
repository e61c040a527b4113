// What the fuzzers and their regression test do with one input: every public entry point of the
// golden loader, in the order a tool uses them, on bytes nobody vouches for.
//
// Contract under test: an mla::Error (a refusal naming what was wrong) is the only acceptable
// way to fail. Anything else that escapes (std::bad_alloc, std::length_error, an H5::Exception
// the loader forgot to translate) propagates out of these functions, so the fuzzer (uncaught
// exception -> abort) and the gtest (EXPECT_NO_THROW of anything but mla::Error) both see it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace mla::fuzz {

struct Outcome {
  int calls = 0;    // loader entry points called
  int refused = 0;  // of which ended in an mla::Error
  int loaded = 0;   // cases loaded in full
  std::string first_error;  // what() of the first refusal, for the regression table
};

// read_file_info, summarize_cases, then every case through the loader of its family (both
// loaders when the family could not be read). `file` must exist.
Outcome exercise_golden_file(const std::filesystem::path& file);

// open_catalog(dir) without and with file verification; `dir` holds the manifest under test.
Outcome exercise_catalog(const std::filesystem::path& dir);

// HDF5 files, groups, datasets and attributes still open. The loader
// closes everything it opens even when it refuses a file; a leaked id keeps the file open in
// the library, so the next open of the same path could see stale state. 0 between inputs.
long open_hdf5_objects();

// Where a fuzzer writes its per-process scratch file: $MLA_FUZZ_SCRATCH (run_ci.sh points it
// into its work folder, removed at the end even after a crash), else /dev/shm (a tmpfs), else
// the temporary folder.
std::filesystem::path scratch_dir();

// Writes `size` bytes to `path` (truncating); throws mla::Error on an I/O failure.
void write_bytes(const std::filesystem::path& path, const uint8_t* data, std::size_t size);

}  // namespace mla::fuzz
