// Helpers shared by the certifier's tests: temporary folders and running mla-certify.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "mla/certify/certify.hpp"
#include "mla/certify/twin.hpp"
#include "mla/golden/families.hpp"
#include "support/temp_dir.hpp"

namespace mla::certify::testing {

// The family name of the rows drawn at run time, as the catalog declares it (a generated family).
inline const std::string kFresh{mla::golden::kFreshFamily};

// A folder of the test's own (mkdtemp), removed at scope exit.
using TempDir = mla::testing::TempDir;

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A kernel's record in a certificate (JSON), by name; throws when it has none.
inline const nlohmann::json& kernel(const nlohmann::json& cert, const std::string& name) {
  for (const auto& k : cert["kernels"]) {
    if (k["name"] == name) return k;
  }
  throw std::runtime_error("no kernel " + name + " in the certificate");
}

#if defined(MLA_CLI_EXE) && defined(MLA_SOURCE_DIR)
// The options of a run in this process (registered kernels in it too) over the committed
// catalog, with a fixed seed: `kernels` on `families` into `out`.
inline mla::certify::Options in_process_options(const std::filesystem::path& out, std::vector<std::string> kernels,
                                                std::vector<std::string> families) {
  mla::certify::Options o;
  o.goldens = std::filesystem::path(MLA_SOURCE_DIR) / "fixtures" / "goldens";
  o.out = out;
  o.self_exe = MLA_CLI_EXE;
  o.kernels = std::move(kernels);
  o.families = std::move(families);
  o.seed = 11;
  o.isolate = false;
  return o;
}
#endif

// `mla certify` as a library in this process (its children, which read the goldens through, are
// the mla executable the options name); the certificate it wrote, and what it said in `progress`.
inline nlohmann::json certify_here(const mla::certify::Options& o, std::string* progress = nullptr) {
  std::ostringstream said;
  (void)mla::certify::run(o, said);
  if (progress) *progress = said.str();
  return nlohmann::json::parse(slurp(o.out / "certificate.json"));
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

// Runs a shell command in the background (its own process group), returning its pid, or -1.
inline pid_t spawn_command(const std::string& cmd) {
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Whether `pid` is a live process: a zombie (dead, not yet reaped by whoever inherited it —
// in a container that can take a while) counts as dead.
inline bool process_alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) return false;
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  const char state = stat[close + 2];
  return state != 'Z' && state != 'X';
}

// Single-quoted for the shell (appended piecewise: GCC 12 misreports `"'" + string` under
// -Wrestrict).
inline std::string quote(const std::filesystem::path& p) {
  std::string s(1, '\'');
  s += p.string();
  s += '\'';
  return s;
}

// A certificate without what legitimately differs between two runs of the same work: dates,
// wall time and the measured run times.
inline nlohmann::json without_timings(nlohmann::json j) {
  for (const char* key : {"started_utc", "finished_utc", "wall_seconds"}) j.erase(key);
  for (auto& k : j["kernels"]) {
    for (auto& c : k["cases"]) c.erase("run_seconds");
  }
  return j;
}

// Whether a row is a stored case's fresh twin (named `<case>~twin`).
inline bool is_twin(const std::string& case_name) {
  const std::string_view twin = mla::certify::kTwinSuffix;
  return case_name.size() > twin.size() && case_name.ends_with(twin);
}

// A row whose inputs were drawn at run time (the fresh family, a stored case's fresh twin): no
// golden holds them, so a prediction made from a stored case's data does not apply to it.
inline bool drawn_at_run_time(const std::string& family, const std::string& name) {
  return family == kFresh || is_twin(name);
}

// A failed rule's words without the opening that says it was the call made between a case's
// calls ("the other case called between calls 1 and 2 (q negated): out: ..." -> "out: ..."): a
// bug shows on that call as on the case's own.
inline std::string judged_rule(const std::string& why) {
  const std::string opening = "the other case called between calls ";
  if (why.rfind(opening, 0) != 0) return why;
  const auto at = why.find("(q negated): ");
  return at == std::string::npos ? why : why.substr(at + 13);
}

inline std::string plugin_path(const std::string& name) {
#define MLA_P(upper, lower) \
  if (name == #lower) return upper;
  MLA_P(MLA_PLUGIN_GOOD_PLUGIN, good_plugin)
  MLA_P(MLA_PLUGIN_GOOD_PLUGIN_BF16, good_plugin_bf16)
  MLA_P(MLA_PLUGIN_UNDERCLAIMS, underclaims)
  MLA_P(MLA_PLUGIN_DROPS_LAST_TOKEN, drops_last_token)
  MLA_P(MLA_PLUGIN_LSE_LOG2, lse_log2)
  MLA_P(MLA_PLUGIN_READS_UNUSED_SLOT, reads_unused_slot)
  MLA_P(MLA_PLUGIN_CRASHES, crashes)
  MLA_P(MLA_PLUGIN_HANGS, hangs)
  MLA_P(MLA_PLUGIN_WRITES_OUT_OF_BOUNDS, writes_out_of_bounds)
  MLA_P(MLA_PLUGIN_MUTATES_INPUT, mutates_input)
  MLA_P(MLA_PLUGIN_RETURNS_NAN, returns_nan)
  MLA_P(MLA_PLUGIN_TAMPERS_WITH_GOLDENS, tampers_with_goldens)
  MLA_P(MLA_PLUGIN_REWRITES_AUDIT, rewrites_audit)
  MLA_P(MLA_PLUGIN_CHANGES_ON_LATER_CALL, changes_on_later_call)
  MLA_P(MLA_PLUGIN_STATE_ACROSS_PROCESSES, state_across_processes)
  MLA_P(MLA_PLUGIN_READS_PAST_END, reads_past_end)
  MLA_P(MLA_PLUGIN_IGNORES_BLOCK_TABLE, ignores_block_table)
  MLA_P(MLA_PLUGIN_LEAVES_DAEMON, leaves_daemon)
  MLA_P(MLA_PLUGIN_READS_CATALOG, reads_catalog)
  MLA_P(MLA_PLUGIN_REFUSES_UNKNOWN, refuses_unknown)
  MLA_P(MLA_PLUGIN_HIDES_OVERFLOW, hides_overflow)
  MLA_P(MLA_PLUGIN_MEMO_BY_SHAPE, memo_by_shape)
  MLA_P(MLA_PLUGIN_CHANGES_Q_THEN_REFUSES, changes_q_then_refuses)
  MLA_P(MLA_PLUGIN_WRAPS_NEGATIVE_INDEX, wraps_negative_index)
#undef MLA_P
  throw std::runtime_error("no example plug-in named " + name);
}

// The rows of `k`, a kernel whose own can_implement claims less than its declared ranges: each row
// its predicate claims (`claimed`, read from the row) PASS, each other one NOT_CLAIMED in the
// predicate's `words`; rows outside its declared claims (never asked) are left out. Both occur.
inline void expect_predicate_claims(const nlohmann::json& k, const std::function<bool(const nlohmann::json&)>& claimed,
                                    const std::string& words) {
  int yes = 0, no = 0;
  for (const auto& row : k.at("cases")) {
    SCOPED_TRACE(row.at("case").get<std::string>());
    const auto why = row.at("reasons").dump();
    if (row.at("verdict") == "NOT_CLAIMED" && why.find("(the kernel's can_implement)") == std::string::npos) continue;
    if (claimed(row)) {
      ++yes;
      EXPECT_EQ(row.at("verdict"), "PASS") << why;
    } else {
      ++no;
      EXPECT_EQ(row.at("verdict"), "NOT_CLAIMED") << why;
      EXPECT_NE(why.find(words), std::string::npos) << why;
    }
  }
  EXPECT_GT(yes, 0) << "no row its predicate claims";
  EXPECT_GT(no, 0) << "no row its predicate refuses";
}

}  // namespace mla::certify::testing
