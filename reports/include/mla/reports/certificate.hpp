// The certification report: what mla-certify found, per implementation and golden case, as a
// machine-readable JSON (the record) and a Markdown rendering (for people), plus the
// one-screen summary the certifier prints.
//
// The JSON is the source of truth; certificate_from_json reads it back so that tools and tests
// can consume a certificate without re-running anything.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mla/core/error.hpp"
#include "mla/core/tolerance.hpp"

namespace mla::reports {

// Format 2 added the verdicts NOT_CLAIMED and HOST_ERROR and the certificate's own verdict
// INCOMPLETE; a format 1 certificate is still read (its UNSUPPORTED "not claimed: ..." rows are
// NOT_CLAIMED rows).
inline constexpr int kCertificateFormat = 2;
inline constexpr int kMinCertificateFormat = 1;

// Exit status of `mla certify` and `mla merge`, from the certificate they wrote (README,
// "Reading a report"); the order is the order of precedence.
inline constexpr int kExitPass = 0;        // every claimed case judged, none red
inline constexpr int kExitFail = 1;        // some implementation FAILed or had an ERROR on a case
inline constexpr int kExitUsage = 2;       // bad options or unusable input; no certificate written
inline constexpr int kExitIncomplete = 3;  // the run did not finish or HOST_ERRORs left cases
                                           // uncertified: --resume (or the missing shards)
                                           // finishes it
inline constexpr int kExitCoverage = 4;    // nothing judged (NOT_JUDGED), or --require-full-coverage
                                           // and some case is not covered

struct MachineInfo {
  std::string hostname;
  std::string cpu_model;  // /proc/cpuinfo "model name"
  int threads = 0;        // hardware threads
  std::string os;         // /etc/os-release PRETTY_NAME
  std::vector<std::string> gpus;  // NVIDIA driver's /proc entries; empty without a driver
  std::optional<std::string> driver;  // NVIDIA kernel driver version; nullopt (n/a) without one
  std::optional<std::string> git_commit;
};

// Reads what it can; a field it cannot read stays empty (a report is still useful without it).
// The git commit is that of the repository containing `inside` (walking up), read from .git
// without running git.
MachineInfo detect_machine(const std::filesystem::path& inside);
std::optional<std::string> git_commit_of(const std::filesystem::path& inside);

// Why a row has its verdict, where the verdict alone does not say it and a reader (coverage,
// headline, merge) must tell rows apart without reading the reasons' words.
enum class Cause {
  none,
  broken_claim,     // FAIL: the kernel refused at run time a shape it claims
  over_max_tokens,  // SKIPPED: the case's cache holds more tokens than --max-tokens allows
};
const char* to_string(Cause c);
Cause cause_from_string(const std::string& s);  // throws mla::Error on an unknown word

// One (implementation, case) cell.
struct CaseResult {
  std::string family, file, name, description;
  nlohmann::json shape;  // batch, s_q, heads, cache format, lengths ...: whatever the caller records
  tol::Verdict verdict = tol::Verdict::error;
  Cause cause = Cause::none;
  // Every reason the verdict is not PASS: failed rules ("out: ..."), the skip or unsupported
  // reason, or an error message.
  std::vector<std::string> reasons;
  // Attention rows: the output and the LSE against the truth.
  std::optional<tol::Comparison> out, lse;
  // Cache-append rows: the stored latent (kv_norm) and k_pe (RoPE) against their fp64 values.
  std::optional<tol::Comparison> latent, k_pe;
  // Sparse prefill rows: max_logits against the truth (out and lse as attention rows).
  std::optional<tol::Comparison> max_logits;
  // FP8 cases: the result against the fp64 result on the unquantized cache (information only,
  // never part of the verdict).
  std::optional<tol::Comparison> out_vs_unquantized, lse_vs_unquantized;
  // Wall time of run() + synchronize(), the fastest of the certifier's repeats (inputs are
  // prepared and results copied outside it).
  std::optional<double> run_seconds;
  std::optional<double> bytes, flops;  // the implementation's cost model for this call
  // NOT_CLAIMED rows only: the verdict of the informational run on the unclaimed shape (never
  // part of any verdict; the kernel's notes count it). Its words are the row's last reason.
  std::optional<tol::Verdict> probe;
};

// The comparisons a row's verdict rests on (out, lse, latent, k_pe: whichever it has), in that
// order; never the information-only ones against the unquantized cache.
std::vector<const tol::Comparison*> judged_comparisons(const CaseResult& r);

struct KernelReport {
  std::string name, backend, description, out_dtype;
  std::string version;     // what --resume compares: a result is reused only for the same version
  nlohmann::json origin;   // where it came from: builtin, or a plug-in's path, sha256, ABI version
  // What it declared and the host applied: its precision class (and whether declared or implied
  // by the output dtype), lse and index conventions, FP8 append recipes, whether it has a
  // can_implement. Null in certificates written before declarations were recorded.
  nlohmann::json declared;
  // The case kinds (mla certify's catalog words: decode, append, prefill, merge) it is certified
  // on. Empty in certificates written before kinds other than decode and append had kernels of
  // their own: such a kernel has the decode entry (and the append one where it has append rows).
  std::vector<std::string> kinds;
  std::vector<std::string> notes;  // informational, never part of the verdict
  std::optional<std::string> unavailable;
  std::vector<CaseResult> cases;
};

struct Counts {
  int pass = 0, fail = 0, unsupported = 0, error = 0, skipped = 0, not_claimed = 0, host_error = 0;
  int total() const { return pass + fail + unsupported + error + skipped + not_claimed + host_error; }
};
Counts count(const KernelReport& k);

// A shard's certificate (`mla certify --shard I/N`) holds the cases of the selection whose
// identity hashes to shard I (certify/src/run/plan.cpp, shard_of); it is never the catalog's verdict.
// A merged one (`mla merge`) records every shard it was made of, and the missing ones.
struct ShardInfo {
  int index = 0;  // 1-based; 0 in a merged certificate
  int count = 0;
  std::vector<int> missing;  // merged: the shard indices no certificate was given for
  nlohmann::json merged;     // merged: one record per shard (index, folder, machine, times)
  bool part() const { return index > 0; }
};

struct Certificate {
  std::string tool = "mla-certify";
  std::string tool_version;
  std::string started_utc, finished_utc;  // ISO 8601
  bool complete = false;                  // false while the run is still going (or crashed)
  MachineInfo machine;
  nlohmann::json build;    // compiler, build type ...
  nlohmann::json options;  // filters the run used
  std::string goldens_dir;
  std::map<std::string, std::string> manifest;  // file -> sha256, as verified
  std::string manifest_sha256;                   // of MANIFEST.sha256 itself: the catalog's identity
  std::vector<std::string> notes;                // catalog remarks (missing family, ...)
  std::vector<KernelReport> kernels;
  double wall_seconds = 0;
  std::optional<ShardInfo> shard;  // nullopt: neither a shard nor a merge of shards
};

// Why row `r` contradicts itself, or nullopt: its verdict recomputed from its own reasons and
// comparisons (a PASS has no reason and no comparison that did not pass; anything else says
// why it is not PASS) differs from the one it states. Only what a row says about itself is
// checked; a row edited to stay self-consistent is not detected.
std::optional<std::string> row_contradiction(const CaseResult& r);

// FAIL or ERROR anywhere: the certificate is red.
bool is_red(const Certificate& c);

// The certificate's own verdict: INCOMPLETE when the run did not finish, some case is a
// HOST_ERROR or a merge lacks a shard (something selected was never certified, whatever else it
// holds), else FAIL when it is red, else NOT_JUDGED when no case was judged at all or a kernel
// from outside the suite (plug-in, Python) that can run here had none of its cases judged (it
// refused or claimed none of them: nothing was certified about it), else PASS.
enum class Overall { pass, fail, incomplete, not_judged };
Overall overall(const Certificate& c);
const char* to_string(Overall o);
// Why a certificate is NOT_JUDGED: the kernels none of whose cases were judged.
std::string not_judged_reason(const Certificate& c);
// The verdict as the certificate states it: to_string(overall(c)), and for a shard's certificate
// "PASS (shard 2 of 4)", so no part of a selection reads as the whole catalog's pass.
std::string verdict_text(const Certificate& c);
// An implementation's headline (coverage.hpp) within this certificate: a shard's says so.
std::string headline(const Certificate& c, const KernelReport& k);
// kExitPass / kExitFail / kExitIncomplete / kExitCoverage (the last only when
// `require_full_coverage` and some implementation's coverage is not full, see coverage.hpp).
int exit_status(const Certificate& c, bool require_full_coverage = false);

nlohmann::json to_json(const Certificate& c);
// Throws mla::Error naming what is missing or malformed.
Certificate certificate_from_json(const nlohmann::json& j);
std::string to_markdown(const Certificate& c);
// At most ~`max_lines` lines: per kernel the verdict counts and its worst cases.
std::string summary(const Certificate& c, std::size_t max_lines = 40);

// A file that could not be written, with the system's reason (errno): the certifier tells a
// full disk or a file-size limit (the host's failure) from anything else by it.
class WriteError : public Error {
 public:
  WriteError(const std::string& what, int err) : Error(what), err_(err) {}
  int err() const { return err_; }

 private:
  int err_;
};

// Writes `text` to `path` through a temporary file in the same folder and a rename, so a reader
// (or a crash) never sees half a file. Throws WriteError naming the path and the system's
// reason on failure.
void write_file_atomically(const std::filesystem::path& path, std::string_view text);
// Several files replaced together: every one written to a temporary file first (any failure
// leaves every target as it was and removes the temporaries), then the renames back to back
// with every signal blocked, so no handled signal and no write failure can leave some replaced
// and others not; only a SIGKILL or a crash within those few renames could, and the first file,
// renamed last, is then still the old one: once it is replaced, all are. Throws WriteError.
void write_files_together(const std::vector<std::pair<std::filesystem::path, std::string>>& files);
// <dir>/certificate.json and <dir>/certificate.md, each atomically; creates `dir`.
void write_certificate(const Certificate& c, const std::filesystem::path& dir);

std::string utc_now_iso8601();

}  // namespace mla::reports
