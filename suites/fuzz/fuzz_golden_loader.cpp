// libFuzzer target: arbitrary bytes as a golden file (fixtures/SCHEMA.md) through every public
// entry point of the loader. A refusal (mla::Error) is the expected outcome; a crash, a
// sanitizer report, a leak, an escaping non-mla exception, an allocation over -malloc_limit_mb
// or an HDF5 object left open is a finding. Build: `cmake --preset fuzz`; run: suites/fuzz/run_ci.sh.
//
// The loader takes paths (each entry point opens the file afresh, as the tools do), so every
// input is written to one scratch file per process (exercise.hpp, scratch_dir); -jobs/-workers
// and -fork run separate processes, each with its own file.
#include <hdf5.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "exercise.hpp"

namespace {

std::filesystem::path g_scratch;

void remove_scratch() {
  std::error_code ec;
  std::filesystem::remove(g_scratch, ec);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_scratch = mla::fuzz::scratch_dir() / ("mla_fuzz_golden_" + std::to_string(::getpid()) + ".h5");
  std::atexit(remove_scratch);
  // Every entry point opens the file afresh, and each open callocs HDF5's metadata cache
  // (hundreds of KiB). With the default free-list limits that block goes back to ASan's
  // allocator, which maps fresh pages for it every time: four opens per input cost more than
  // the loading. No limit on the lists of fixed-size structures (a bounded set) lets HDF5
  // reuse them (5x faster opens); the variable-size lists keep HDF5's default limits, so
  // memory stays bounded. This changes where HDF5 gets its memory, nothing it does.
  H5set_free_list_limits(-1, -1, 4 << 20, 256 << 10, 16 << 20, 1 << 20);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mla::fuzz::write_bytes(g_scratch, data, size);
  (void)mla::fuzz::exercise_golden_file(g_scratch);
  if (const long open = mla::fuzz::open_hdf5_objects(); open != 0) {
    std::fprintf(stderr, "fuzz_golden_loader: %ld HDF5 object(s) left open after the input\n", open);
    std::abort();
  }
  return 0;
}
