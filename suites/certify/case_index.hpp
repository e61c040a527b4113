// The attributes of an attention-core case, read without its arrays.
//
// Why: the certifier decides SKIPPED (a size filter, an unavailable implementation) and
// UNSUPPORTED (`check(shape)`) before it pays for loading a case, which for the generated
// long-context cases means regenerating and hashing 10^8 values. The full loader
// (mla::fixtures::load_attn_case) still validates every case that is run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "mla/kernels/attention.hpp"

namespace mla::certify {

struct CaseHeader {
  std::string name, description, scale_fmt;
  AttnShape shape;
  // Cache slots the case holds (num_blocks · page_size): what loading and a full scan cost.
  int64_t cache_tokens() const { return int64_t{shape.num_blocks} * shape.page_size; }
};

// Throws mla::FixtureError naming the file, case and attribute when one is missing or invalid.
CaseHeader read_case_header(const std::filesystem::path& file, const std::string& name);

}  // namespace mla::certify
