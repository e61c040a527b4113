// The certification run behind mla-certify: every selected implementation on every selected
// attention-core case of the golden catalog, judged by the tolerance engine, recorded in a
// certificate that is rewritten after every case.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/kernels/attention.hpp"
#include "mla/reports/certificate.hpp"

namespace mla::certify {

// The attention-core families, in certification order.
const std::vector<std::string>& attention_families();

// Implementations that are not in the registry, added by name for tests of the certifier
// itself (a kernel known to be wrong must certify red). Throws mla::Error on an unknown name.
std::unique_ptr<AttentionImpl> make_extra_kernel(const std::string& name);
std::vector<std::string> extra_kernel_names();

struct Options {
  std::filesystem::path goldens, out;
  std::vector<std::string> kernels;   // empty: all (registered + extras)
  std::vector<std::string> families;  // empty: all attention families in the catalog
  std::vector<std::string> extras;    // make_extra_kernel names
  std::optional<std::string> case_regex;  // ECMAScript, searched in "<family>/<case>"
  std::optional<int64_t> max_tokens;      // skip cases whose cache holds more tokens
  int repeats = 2;  // runs per case; results must be bitwise identical across them
};

// Bad options (unknown kernel or family, a selection with no case, an invalid regex) and an
// unreadable catalog are UsageError; everything that goes wrong inside a case is recorded in
// the certificate instead.
class UsageError : public Error {
 public:
  using Error::Error;
};

// Runs the whole certification, writing <out>/certificate.{json,md} after every case. Progress
// goes to `progress`. Returns the final certificate.
reports::Certificate run(const Options& options, std::ostream& progress);

}  // namespace mla::certify
