// Helpers shared by the certifier's tests: temporary folders and running mla-certify.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace mla::certify::testing {

// A fresh folder under the system temp dir, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mla-certify-test-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
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

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Proc {
  int status = -1;  // exit code, -1 when killed or not started
  std::string out;  // stdout
};

// Runs a shell command, capturing stdout (stderr goes wherever the command sends it).
inline Proc run_command(const std::string& cmd) {
  Proc p;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return p;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) p.out.append(buf, n);
  const int st = pclose(f);
  p.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return p;
}

// Single-quoted for the shell (appended piecewise: GCC 12 misreports `"'" + string` under
// -Wrestrict).
inline std::string quote(const std::filesystem::path& p) {
  std::string s(1, '\'');
  s += p.string();
  s += '\'';
  return s;
}

}  // namespace mla::certify::testing
