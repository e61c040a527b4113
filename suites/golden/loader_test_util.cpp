#include "loader_test_util.hpp"

#include <fstream>
#include <iterator>
#include <vector>


#include <fmt/format.h>

#include "mla/golden/families.hpp"

namespace mla::golden::testing {

namespace fs = std::filesystem;

fs::path corpus_dir() { return fs::path(MLA_SOURCE_DIR) / "fixtures" / "bad"; }

int load_every_case(const fs::path& file) {
  const FileInfo info = read_file_info(file);
  for (const auto& name : info.cases) {
    validate_case(file, name);
  }
  return static_cast<int>(info.cases.size());
}

void copy_with_flipped_byte(const fs::path& src, const fs::path& dst, std::uintmax_t offset) {
  std::ifstream in(src, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (offset >= bytes.size()) throw Error(fmt::format("flip offset {} past the end of {}", offset, src.string()));
  bytes[offset] ^= 0x01;
  std::ofstream(dst, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace mla::golden::testing
