// A temporary folder that belongs to one test: created by mkdtemp under the system temp folder
// ($TMPDIR, else /tmp), removed with everything in it when the object dies.
//
// Why mkdtemp and nothing derived: ctest starts several test processes at once, and a name made
// from gtest's random seed (the time by default), a pid or an object's address can repeat
// between them, so one test would write into, or remove, another's files. mkdtemp's name is
// created atomically and cannot be taken by anyone else.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace mla::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "mla-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (!mkdtemp(tmpl.data())) {
      throw std::runtime_error("mkdtemp " + tmpl + " failed: " + std::strerror(errno));
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace mla::testing
