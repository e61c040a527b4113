#include "mla/core/error.hpp"

#include <fmt/format.h>

namespace mla {

FixtureError::FixtureError(std::string file, std::string dataset, std::string expected,
                           std::string found)
    : Error(fmt::format("{}: {}: expected {}, found {}", file, dataset.empty() ? "/" : dataset,
                        expected, found)),
      file_(std::move(file)),
      dataset_(std::move(dataset)),
      expected_(std::move(expected)),
      found_(std::move(found)) {}

}  // namespace mla
