#include "mla/certify/golden_check.hpp"

#include <new>

#include <fmt/format.h>

#include "mla/certify/host_error.hpp"
#include "mla/certify/wire.hpp"
#include "mla/core/error.hpp"
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

GoldenGate::GoldenGate(fs::path self, double timeout_s) : self_(std::move(self)), timeout_s_(timeout_s) {}

const GoldenCheck& GoldenGate::check(const fs::path& file, const std::string& digest, GoldenDepth depth) {
  if (auto it = cache_.find({digest, depth}); it != cache_.end()) return it->second;
  if (depth == GoldenDepth::read_through) {
    // A full check did everything a read-through does.
    if (auto it = cache_.find({digest, GoldenDepth::full}); it != cache_.end()) return it->second;
  }
  if (!work_) work_.emplace();
  const int n = runs_++;
  const auto result = work_->path() / fmt::format("golden-{}.msg", n);
  const auto log = work_->path() / fmt::format("golden-{}.log", n);
  std::error_code ec;
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
