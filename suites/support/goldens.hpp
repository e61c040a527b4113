// Access to the verified golden catalog for the L1 tests. An absent catalog is a visible skip
// with the reason (never a silent pass); a present but corrupt one is a failure (the loader's
// FixtureError propagates).
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include "mla/fixtures/golden.hpp"

namespace mla::testing {

// The catalog, or nullopt with `why_absent` set when there is no MANIFEST.sha256 at all.
inline std::optional<fixtures::Catalog> open_goldens(std::string& why_absent) {
  const std::filesystem::path dir = fixtures::default_goldens_dir();
  if (!std::filesystem::exists(dir / "MANIFEST.sha256")) {
    why_absent = "no golden catalog at " + dir.string() + " (write it with ./mla.sh goldens)";
    return std::nullopt;
  }
  return fixtures::open_catalog(dir);
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace mla::testing
