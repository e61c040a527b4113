// `mla goldens list | validate | inspect`: the golden catalog seen through the loader library
// (mla_golden: open_catalog, verify_file, read_file_info, summarize_cases, load_*_case), the
// same code every suite reads it with. Every file is first read through in a child process
// (mla/certify/golden_check.hpp): one that crashes or hangs the HDF5 library there is refused,
// never read by the command itself.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>

#include "mla/core/error.hpp"

namespace mla::tools {

// A golden file the child process could not read through (its death, a hang): main() exits 2.
class GoldenRefused : public Error {
 public:
  using Error::Error;
};

// Files (family, schema, digest, provenance) and their cases with shapes. Exit status.
int goldens_list(const std::filesystem::path& dir, bool verify, std::ostream& out);
// Every check the loader has, reporting every problem rather than the first: manifest syntax,
// each file's digest, unlisted files, schema version and family, and every case loaded through
// the full dtype/shape/paging/regenerated-sha256 checks, each file in a child process. 0 all
// good, 1 some problem, 2 some file crashed or hung the HDF5 library (every file is still
// checked and listed).
int goldens_validate(const std::filesystem::path& dir, std::ostream& out);
// One case in detail: attributes, then every array with its shape and value statistics.
int goldens_inspect(const std::filesystem::path& dir, const std::string& file, const std::string& case_name,
                    std::ostream& out);

}  // namespace mla::tools
