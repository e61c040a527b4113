// Typed errors. Nothing in this suite aborts on bad input: every failure is an exception that
// names what was wrong, so a caller (test, certifier) can record it and carry on.
#pragma once

#include <stdexcept>
#include <string>

namespace mla {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A golden file that is missing, corrupt, lying about its shape, or of another schema version.
// `file` and `dataset` name where; `expected`/`found` say what.
class FixtureError : public Error {
 public:
  FixtureError(std::string file, std::string dataset, std::string expected, std::string found);
  const std::string& file() const { return file_; }
  const std::string& dataset() const { return dataset_; }
  const std::string& expected() const { return expected_; }
  const std::string& found() const { return found_; }

 private:
  std::string file_, dataset_, expected_, found_;
};

// A shape or option an implementation does not support (reported as UNSUPPORTED, not FAIL).
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

// A cache write at or past capacity (upstream has no sliding window).
class CapacityError : public Error {
 public:
  using Error::Error;
};

}  // namespace mla
