// Where a certificate was produced. Read from /proc, /etc and .git directly: no subprocess, so
// detection behaves the same in a bare container and never hangs on a missing tool.
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "mla/reports/certificate.hpp"

namespace mla::reports {
namespace {

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::optional<std::string> read_first_line(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return trim(line);
}

// Value of the first "key<sep>value" line of a text file.
std::optional<std::string> field(const std::filesystem::path& p, std::string_view key, char sep) {
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    const auto pos = line.find(sep);
    if (pos == std::string::npos) continue;
    if (trim(line.substr(0, pos)) == key) return trim(line.substr(pos + 1));
  }
  return std::nullopt;
}

bool is_hex40(const std::string& s) {
  return s.size() == 40 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// Resolves a ref ("refs/heads/main") in a git dir: loose file first, then packed-refs.
std::optional<std::string> resolve_ref(const std::filesystem::path& gitdir, const std::string& ref) {
  if (auto loose = read_first_line(gitdir / ref); loose && is_hex40(*loose)) return loose;
  std::ifstream packed(gitdir / "packed-refs");
  std::string line;
  while (std::getline(packed, line)) {
    if (line.size() > 41 && line[40] == ' ' && trim(line.substr(41)) == ref) {
      auto sha = line.substr(0, 40);
      if (is_hex40(sha)) return sha;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> git_commit_of(const std::filesystem::path& inside) {
  std::error_code ec;
  auto dir = std::filesystem::weakly_canonical(std::filesystem::absolute(inside, ec), ec);
  if (ec) return std::nullopt;
  for (; !dir.empty(); dir = dir.parent_path()) {
    const auto dotgit = dir / ".git";
    std::filesystem::path gitdir;
    if (std::filesystem::is_directory(dotgit, ec)) {
      gitdir = dotgit;
    } else if (std::filesystem::is_regular_file(dotgit, ec)) {
      // A worktree or submodule: ".git" is a file "gitdir: <path>".
      auto line = read_first_line(dotgit);
      if (!line || line->rfind("gitdir:", 0) != 0) return std::nullopt;
      gitdir = trim(line->substr(7));
      if (gitdir.is_relative()) gitdir = dir / gitdir;
    }
    if (!gitdir.empty()) {
      auto head = read_first_line(gitdir / "HEAD");
      if (!head) return std::nullopt;
      if (is_hex40(*head)) return head;  // detached
      if (head->rfind("ref:", 0) != 0) return std::nullopt;
      const auto ref = trim(head->substr(4));
      if (auto sha = resolve_ref(gitdir, ref)) return sha;
      // Worktrees keep shared refs in the common dir.
      if (auto common = read_first_line(gitdir / "commondir")) {
        std::filesystem::path cd = *common;
        if (cd.is_relative()) cd = gitdir / cd;
        return resolve_ref(cd, ref);
      }
      return std::nullopt;
    }
    if (dir == dir.root_path()) break;
  }
  return std::nullopt;
}

MachineInfo detect_machine(const std::filesystem::path& inside) {
  MachineInfo m;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) m.hostname = host;
  m.cpu_model = field("/proc/cpuinfo", "model name", ':').value_or("");
  m.threads = static_cast<int>(std::thread::hardware_concurrency());
  if (auto os = field("/etc/os-release", "PRETTY_NAME", '=')) {
    auto v = *os;
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    m.os = v;
  }
  std::error_code ec;
  const std::filesystem::path gpus = "/proc/driver/nvidia/gpus";
  if (std::filesystem::is_directory(gpus, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(gpus, ec)) {
      if (auto model = field(e.path() / "information", "Model", ':')) {
        m.gpus.push_back(*model + " (" + e.path().filename().string() + ")");
      }
    }
    std::sort(m.gpus.begin(), m.gpus.end());
  }
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..." -> "550.54.15"
  if (auto line = read_first_line("/proc/driver/nvidia/version")) {
    const auto at = line->find("Kernel Module");
    if (at != std::string::npos) {
      std::istringstream ss(line->substr(at + std::string_view("Kernel Module").size()));
      std::string version;
      if (ss >> version) m.driver = version;
    }
    if (!m.driver) m.driver = *line;
  }
  m.git_commit = git_commit_of(inside);
  return m;
}

}  // namespace mla::reports
