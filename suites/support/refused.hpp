// A refusal that names what was wrong, as a test assertion: for every test of bad input (a
// malformed call, a description, a file), header-only and needing nothing above mla_core.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "mla/core/error.hpp"

namespace mla::testing {

// Whether `call` is refused with an mla::Error whose message names `needle`: bad input must get an
// error that says what was wrong, so a refusal for another reason is a failure too.
template <class F>
::testing::AssertionResult refused_naming(F&& call, const std::string& needle) {
  try {
    call();
  } catch (const Error& e) {
    if (std::string(e.what()).find(needle) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "refused without naming '" << needle << "': " << e.what();
  }
  return ::testing::AssertionFailure() << "accepted; expected a refusal naming '" << needle << "'";
}

}  // namespace mla::testing
