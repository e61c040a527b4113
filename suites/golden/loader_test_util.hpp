// Helpers shared by the loader tests.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "mla/core/error.hpp"
#include "mla/golden/golden.hpp"

namespace mla::golden::testing {

// fixtures/bad of this source tree.
std::filesystem::path corpus_dir();

// A fresh temporary folder removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Reads the file header and loads every case through the family's loader; returns the count.
int load_every_case(const std::filesystem::path& file);

// Copies `src` to `dst` with byte `offset` xor-ed with 0x01.
void copy_with_flipped_byte(const std::filesystem::path& src, const std::filesystem::path& dst,
                            std::uintmax_t offset);

}  // namespace mla::golden::testing
