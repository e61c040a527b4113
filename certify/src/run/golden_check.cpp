#include "mla/certify/golden_check.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <new>

#include <fmt/format.h>

#include "mla/certify/host_error.hpp"
#include "mla/certify/wire.hpp"
#include "mla/core/error.hpp"
#include "mla/core/sha256.hpp"
#include "mla/core/text.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"

namespace mla::certify {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kGoldenCheck = "golden-check";

// The last thing a tool would do with a file it lists: its summaries (failures there are the
// tool's to report in its own words, later; here only libhdf5's survival matters).
void exercise_listing(const fs::path& file) {
  try {
    (void)golden::summarize_cases(file);
  } catch (const std::exception&) {
  }
}

}  // namespace

GoldenGate::GoldenGate(fs::path self, double timeout_s, fs::path memory)
    : self_(std::move(self)), timeout_s_(timeout_s), memory_(std::move(memory)) {}

fs::path GoldenGate::memory_from_environment() {
  const char* dir = std::getenv("MLA_GOLDEN_GATE_MEMORY");
  return dir && *dir ? fs::path(dir) : fs::path();
}

// The memory's file for a read-through of `digest` (golden_check.hpp), or empty when there is no
// memory or this executable cannot be told apart from another build.
fs::path GoldenGate::remembered(const std::string& digest) {
  if (memory_.empty()) return {};
  if (identity_.empty()) {
    const std::string self = golden::file_identity(self_);
    if (self.empty()) return {};
    identity_ = self + " | " + golden::hdf5_identity();
  }
  const std::string key = fmt::format("golden gate 1 | {} | read_through | {}", digest, identity_);
  return memory_ / sha256_hex({reinterpret_cast<const uint8_t*>(key.data()), key.size()});
}

const GoldenCheck& GoldenGate::check(const fs::path& file, const std::string& digest, GoldenDepth depth) {
  if (auto it = cache_.find({digest, depth}); it != cache_.end()) return it->second;
  if (depth == GoldenDepth::read_through) {
    // A full check did everything a read-through does.
    if (auto it = cache_.find({digest, GoldenDepth::full}); it != cache_.end()) return it->second;
  }
  // Only a read-through is remembered across runs: the full check's callers read its case
  // problems (`mla goldens validate`), which the memory does not hold.
  const fs::path memory = depth == GoldenDepth::read_through ? remembered(digest) : fs::path();
  std::error_code ec;
  if (!memory.empty() && fs::is_regular_file(memory, ec)) {
    GoldenCheck c;
    c.kind = GoldenCheck::Kind::ok;
    c.remembered = true;
    return cache_[{digest, depth}] = std::move(c);
  }
  if (!work_) work_.emplace();
  const int n = runs_++;
  const auto result = work_->path() / fmt::format("golden-{}.msg", n);
  const auto log = work_->path() / fmt::format("golden-{}.log", n);
  const fs::path abs = fs::absolute(file, ec).lexically_normal();
  std::vector<std::string> argv{self_.string(), "__child", "golden", "--file", abs.string(), "--result", result.string()};
  if (depth == GoldenDepth::full) argv.push_back("--full");
  const auto outcome = run_child(argv, timeout_s_, log);

  GoldenCheck c;
  if (outcome.ok() && fs::exists(result, ec)) {
    try {
      const auto m = wire::read(result, kGoldenCheck);
      const json& f = m.fields();
      c.family = f.at("family").get<std::string>();
      c.schema_version = f.at("schema_version").get<int64_t>();
      c.cases = f.at("cases").get<std::vector<std::string>>();
      c.case_problems = f.at("case_problems").get<std::map<std::string, std::string>>();
      c.problem = f.at("problem").is_null() ? std::string() : f.at("problem").get<std::string>();
      c.kind = c.problem.empty() ? GoldenCheck::Kind::ok : GoldenCheck::Kind::invalid;
    } catch (const std::exception& e) {
      c.kind = GoldenCheck::Kind::crashed;
      c.problem = fmt::format("the child's report is unreadable: {}", e.what());
    }
  } else {
    c.kind = GoldenCheck::Kind::crashed;
    c.host = host_cause(outcome).has_value();
    c.problem = outcome.ok() ? std::string("the child exited without a report") : outcome.describe();
    if (!outcome.stderr_tail.empty()) c.problem += "; its last output: " + outcome.stderr_tail;
  }
  fs::remove(result, ec);
  fs::remove(log, ec);
  if (!memory.empty() && c.kind == GoldenCheck::Kind::ok) {
    // Written whole under another name, then renamed: runs sharing the memory never see a
    // partial entry. A memory that cannot be written is only slower.
    fs::create_directories(memory_, ec);
    const fs::path tmp = memory.string() + fmt::format(".{}.tmp", ::getpid());
    if (std::ofstream(tmp) << "survived a read-through\n") fs::rename(tmp, memory, ec);
    fs::remove(tmp, ec);
  }
  return cache_[{digest, depth}] = std::move(c);
}

std::string GoldenGate::refusal(const fs::path& file, const GoldenCheck& c) {
  return fmt::format("golden file {} is refused: reading it through the HDF5 library in a child process failed "
                     "({}); nothing else was read from it",
                     file.string(), c.problem);
}

int child_check_golden(const fs::path& file, const fs::path& result, GoldenDepth depth) {
  wire::Message m(kGoldenCheck);
  json& f = m.fields();
  f = {{"family", ""}, {"schema_version", 0}, {"cases", json::array()}, {"case_problems", json::object()},
       {"problem", nullptr}};
  try {
    golden::read_through(file);
    const auto info = golden::read_file_info(file);
    f["family"] = info.family;
    f["schema_version"] = info.schema_version;
    f["cases"] = info.cases;
    exercise_listing(file);
    const bool attention = golden::family(info.family).kind == golden::FamilyKind::attention;
    for (const auto& name : info.cases) {
      try {
        if (depth == GoldenDepth::full) {
          golden::validate_case(file, name);  // through its family kind's loader
        } else if (attention) {
          (void)golden::read_attn_header(file, name);
        }
      } catch (const std::bad_alloc&) {
        throw;  // the machine's memory (ulimit -v), not the file's: see below
      } catch (const std::exception& e) {
        f["case_problems"][name] = printable(e.what());
      }
    }
  } catch (const std::bad_alloc&) {
    // Out of memory says nothing about the file: the child ends with the host-failure status
    // (`mla __child golden`), and the file is neither refused nor believed.
    throw;
  } catch (const std::exception& e) {
    f["problem"] = printable(e.what());
  }
  wire::write(result, m);
  return 0;
}

}  // namespace mla::certify
