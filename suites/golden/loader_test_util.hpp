// Helpers shared by the loader tests.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "mla/core/error.hpp"
#include "mla/golden/golden.hpp"
#include "support/temp_dir.hpp"

namespace mla::golden::testing {

// fixtures/bad of this source tree.
std::filesystem::path corpus_dir();

// A fresh temporary folder of the test's own (mkdtemp), removed when the object dies.
using TempDir = mla::testing::TempDir;

// Reads the file header and loads every case through the family's loader; returns the count.
int load_every_case(const std::filesystem::path& file);

// Copies `src` to `dst` with byte `offset` xor-ed with 0x01.
void copy_with_flipped_byte(const std::filesystem::path& src, const std::filesystem::path& dst,
                            std::uintmax_t offset);

}  // namespace mla::golden::testing
