// libFuzzer target: arbitrary bytes as a catalog's MANIFEST.sha256 (open_catalog with and
// without file verification). The folder holds only the manifest, so every listed name is
// missing: the parser, the name checks (no path may leave the folder) and the lookups are what
// is exercised. A refusal (mla::Error) is expected; anything else is a finding.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "exercise.hpp"

namespace {

std::filesystem::path g_dir;

void remove_dir() {
  std::error_code ec;
  std::filesystem::remove_all(g_dir, ec);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_dir = mla::fuzz::scratch_dir() / ("mla_fuzz_catalog_" + std::to_string(::getpid()));
  std::filesystem::create_directories(g_dir);
  std::atexit(remove_dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mla::fuzz::write_bytes(g_dir / "MANIFEST.sha256", data, size);
  (void)mla::fuzz::exercise_catalog(g_dir);
  return 0;
}
