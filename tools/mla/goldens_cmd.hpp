// `mla goldens list | validate | inspect`: the golden catalog seen through the loader library
// (mla_golden: open_catalog, verify_file, read_file_info, summarize_cases, load_*_case), the
// same code every suite reads it with.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>

namespace mla::tools {

// Files (family, schema, digest, provenance) and their cases with shapes. Exit status.
int goldens_list(const std::filesystem::path& dir, bool verify, std::ostream& out);
// Every check the loader has, reporting every problem rather than the first: manifest syntax,
// each file's digest, unlisted files, schema version and family, and every case loaded through
// the full dtype/shape/paging/regenerated-sha256 checks. 0 all good, 1 otherwise.
int goldens_validate(const std::filesystem::path& dir, std::ostream& out);
// One case in detail: attributes, then every array with its shape and value statistics.
int goldens_inspect(const std::filesystem::path& dir, const std::string& file, const std::string& case_name,
                    std::ostream& out);

}  // namespace mla::tools
