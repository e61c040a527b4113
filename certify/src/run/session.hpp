// Private to mla_certify: the state one certification run shares between its seams (plan,
// resume, attention case, append case) and the few things they all do with it.
#pragma once

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "mla/certify/certify.hpp"
#include "mla/certify/child.hpp"
#include "mla/certify/golden_check.hpp"
#include "mla/certify/isolation.hpp"
#include "mla/certify/protocol.hpp"
#include "mla/certify/twin.hpp"
#include "mla/core/kernel.hpp"
#include "mla/core/merge.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/core/indexer_cache.hpp"
#include "mla/core/indexer_logits.hpp"
#include "mla/core/sparse_prefill.hpp"
#include "mla/core/topk.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/judge/attention.hpp"
#include "mla/judge/computed.hpp"
#include "mla/reports/certificate.hpp"

namespace mla::certify {

// Seconds of the steady clock since t0: a row's run time, a phase's, a run's.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The words of the reason an informational run adds to a NOT_CLAIMED case, for a reader; the
// kernel notes are derived from the row's typed `probe`, never from these words.
inline constexpr const char* kProbePass =
    "informational run on this unclaimed shape: PASS (handles it without claiming it)";
inline constexpr const char* kProbePrefix = "informational run on this unclaimed shape: ";

// One implementation under certification.
struct Implementation {
  KernelInfo info;
  std::optional<std::string> unavailable;
  const AttentionImpl* impl = nullptr;  // builtin / fault kernel: the object in this process
  KernelRef ref;                        // how a child builds it
  // A kernel from outside the suite (a C plug-in or a Python kernel): untrusted, so always run
  // in child processes, with a drawn number of calls, another case between them and a second
  // process that must agree bitwise.
  bool external = false;
  // A kernel from outside whose can_implement is asked about each shape: the decode's (ABI 1.2),
  // or for an implementation of one other entry, that entry's own (1.6).
  bool can_implement = false;
  uint32_t append_formats = 0, append_scale_fmts = 0;  // plug-ins with an append entry (ABI 1.1)
  uint32_t append_fp8_recipes = 0;                     // MLA_PLUGIN_RECIPE_* its FP8 append writes
  std::size_t report_index = 0;                         // its KernelReport in the certificate
  // An implementation of one other kind only (exactly one set, impl then null): a registered
  // prefill, merge, top-k, indexer append or indexer logits kernel, or a plug-in's prefill entry.
  // `info` then holds its name, backend, description and out dtype alone. Registered ones run in
  // this process; a plug-in's prefill runs in child processes.
  const PrefillImpl* prefill = nullptr;
  const MergeImpl* merge = nullptr;
  const TopkImpl* topk = nullptr;
  const IndexerAppendImpl* indexer_append = nullptr;
  const IndexerLogitsImpl* indexer_logits = nullptr;
  const SparsePrefillImpl* sparse_prefill = nullptr;
  // A plug-in's prefill entry (ABI 1.4): the object `prefill` points to, whose info, check() and
  // cost() this process uses; its calls are made in child processes (kinds/prefill).
  std::shared_ptr<const PrefillImpl> owned_prefill;
  std::shared_ptr<const MergeImpl> owned_merge;  // the same for a merge entry
  std::shared_ptr<const TopkImpl> owned_topk;    // and a top-k entry
  std::shared_ptr<const IndexerLogitsImpl> owned_indexer_logits;  // and an indexer logits entry (1.5)
  std::shared_ptr<const IndexerAppendImpl> owned_indexer_append;  // and an indexer append entry (1.5)
  std::shared_ptr<const SparsePrefillImpl> owned_sparse_prefill;  // and a sparse prefill entry (1.5)
  // Whether it has the decode entry point (every registered decode kernel, fault kernel,
  // plug-in and Python kernel; a kernel of one of the other kinds has none).
  bool decodes() const { return !prefill && !merge && !topk && !indexer_append && !indexer_logits && !sparse_prefill; }
};

// The implementations of an external kernel's entries other than decode (a plug-in's, ABI 1.4 and
// 1.5, or a Python kernel's): each a copy of `base` (its reference, backend and availability) and of
// `report` (its version and origin) under the entry's own name, with its kind's object and the
// entry and claims in the origin.
std::vector<std::pair<Implementation, reports::KernelReport>> external_entries(
    const Implementation& base, const reports::KernelReport& report, const std::optional<PrefillKernelInfo>& prefill,
    const std::optional<MergeKernelInfo>& merge, const std::optional<TopkKernelInfo>& topk,
    const std::optional<IndexerLogitsKernelInfo>& indexer_logits,
    const std::optional<IndexerAppendKernelInfo>& indexer_append,
    const std::optional<SparsePrefillKernelInfo>& sparse_prefill, const std::vector<std::string>& entry_can_implement);

// A case of the plan: the family as the certificate names it, the catalog file, the case.
struct CaseRef {
  std::string family, file, name;
  std::string key() const { return file + "/" + name; }
};

// The fresh family's name, as the catalog declares it (a generated family: golden::kFreshFamily,
// checked by golden::fresh_family()): the family of every drawn row, the file of its attention
// rows, the word --family selects it by.
inline const std::string kFresh{golden::kFreshFamily};
// A drawn case's "<family>/<case>", which --case searches and --shard splits by, as a catalog case's.
inline std::string fresh_key(const std::string& name) { return kFresh + "/" + name; }

// Rows of cases drawn at run time (the fresh family's attention and append cases): no golden
// file, identified by the run's seed and the drawn case's name.
bool is_fresh_file(const std::string& file);

// What --resume may keep: per implementation, the identity of the one that produced the
// results, and per case the golden file's digest then (for a fresh row: the seed it was drawn
// from) and the result.
class Resume {
 public:
  // Reads <out>/certificate.json; a missing, unreadable or incomparable one (another tool
  // version, tolerance table or result-relevant option) keeps nothing, saying why on `progress`.
  void load(const std::filesystem::path& out, const reports::Certificate& now, std::ostream& progress);
  // The previous result of `k` on `ref`, when the implementation and the golden file are the
  // same as now.
  std::optional<reports::CaseResult> previous(const reports::KernelReport& k, const CaseRef& ref,
                                              const golden::Catalog& catalog) const;
  std::size_t kept = 0;
  // The previous results of `k` that still hold (as previous() decides) on cases this run does
  // not select (`selected(key)` false): a narrower --case or --family keeps them, never deletes
  // them. In the previous certificate's order.
  template <class Selected>
  std::vector<reports::CaseResult> outside(const reports::KernelReport& k, const golden::Catalog& catalog,
                                           Selected selected) const {
    std::vector<reports::CaseResult> rows;
    const auto p = kernels_.find(k.name);
    if (p == kernels_.end()) return rows;
    for (const auto& key : p->second.order) {
      const auto& r = p->second.cases.at(key).second;
      if (selected(r)) continue;
      if (auto still = previous(k, {r.family, r.file, r.name}, catalog)) rows.push_back(std::move(*still));
    }
    return rows;
  }

 private:
  struct Kernel {
    std::string identity;
    std::map<std::string, std::pair<std::string, reports::CaseResult>> cases;  // key -> (file digest, result)
    std::vector<std::string> order;  // the keys in the previous certificate's order
  };
  std::map<std::string, Kernel> kernels_;
  std::string now_fresh_;  // this run's seed, as a fresh row's origin
};

class Session {
 public:
  Session(const Options& o, std::ostream& progress) : options(o), progress(progress) {}

  const Options& options;
  std::ostream& progress;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();  // the run's clock
  WorkDir work;
  std::filesystem::path self;  // the executable children run
  golden::Catalog catalog;
  reports::Certificate cert;
  // The plan (plan.cpp).
  std::vector<Implementation> implementations;
  std::vector<std::unique_ptr<AttentionImpl>> fault_kernels;  // owned; implementations point at them
  std::vector<std::unique_ptr<PrefillImpl>> prefill_fault_kernels;  // likewise, for --fault of a prefill bug
  std::vector<std::unique_ptr<MergeImpl>> merge_fault_kernels;      // and of a merge bug
  std::vector<std::unique_ptr<TopkImpl>> topk_fault_kernels;        // and of a top-k bug
  std::vector<std::unique_ptr<SparsePrefillImpl>> sparse_prefill_fault_kernels;  // and of a sparse prefill bug
  std::vector<std::unique_ptr<IndexerAppendImpl>> indexer_append_fault_kernels;  // and of an indexer append bug
  std::vector<std::unique_ptr<IndexerLogitsImpl>> indexer_logits_fault_kernels;  // and of an indexer logits bug
  std::vector<CaseRef> attention_cases;
  // The stored cases of the kinds that plan them one by one (prefill, merge), by kind name.
  std::map<std::string, std::vector<CaseRef>> kind_cases;
  // Every file of the catalog by the family its `family` attribute names (never by its file
  // name), in name order; every one of them read through in a child first (golden_check.hpp).
  std::map<std::string, std::vector<std::string>> family_files;
  std::optional<GoldenGate> goldens;
  std::optional<std::regex> case_regex;
  Resume resume;
  // Per implementation (report_index), what --resume keeps of cases outside this run's
  // selection: written with every save and part of the final certificate.
  std::vector<std::vector<reports::CaseResult>> outside;
  // The certificate that was in the folder when this run started, as the run marked it
  // (INCOMPLETE, superseded by this run); what the folder holds until the first save.
  std::optional<reports::Certificate> superseded;
  bool save_failed = false;
  std::string save_error;  // the first failed save's reason
  // can_implement answers already obtained (claims.cpp), by implementation and shape.
  std::map<std::string, ClaimAnswer> claim_answers;
  // The run's seed (recorded; --seed reproduces it): draws the number of calls per case. The
  // key is a secret of this process (never recorded, never told to a child): it keys the
  // canary bytes and the unwritten-output pattern, so a kernel cannot know them in advance.
  uint64_t seed = 0;
  uint64_t secret = 0;
  // The Python door's fork servers, by executable (python_door.hpp); null where one could not
  // start (its children then import torch themselves). Last member: stopped before the rest.
  std::map<std::string, std::unique_ptr<ForkServer>> door_servers;

  reports::KernelReport& report(const Implementation& k) { return cert.kernels[k.report_index]; }
  void record(const Implementation& k, reports::CaseResult r) { report(k).cases.push_back(std::move(r)); }
  reports::CaseResult base_result(const CaseRef& ref) const;
  // The previous result of `k` on `ref` that --resume keeps, counted.
  std::optional<reports::CaseResult> kept(const Implementation& k, const CaseRef& ref);
  // The same for a case drawn at run time (file kFresh or kFreshAppendFile), kept only when
  // the previous row's drawn lengths, where it records them, are `seqlens` too.
  std::optional<reports::CaseResult> kept_drawn(const Implementation& k, const CaseRef& ref,
                                                const std::vector<int32_t>* seqlens = nullptr);
  // Rewrites the certificate (JSON, Markdown, JUnit); a failure is said on `progress` and
  // remembered, the run goes on.
  void save();
  // The certificate as written: this run's rows, then those kept from outside its selection.
  reports::Certificate with_outside() const;
  // A plug-in's entries always are (decode, append, prefill); a registered kernel of another kind
  // than decode never is: no child transport exists for those yet.
  bool isolated(const Implementation& k) const {
    return k.external || (k.decodes() && (options.isolate || !k.impl));
  }
  // Whether a case of the selection belongs to this run's --shard (always, without one).
  bool in_shard(const std::string& family, const std::string& name) const {
    return options.shard_count == 0 || shard_of(family, name, options.shard_count) == options.shard_index;
  }
};

// How one (kernel, case) is called in children (run_case.cpp).
struct CallSchedule {
  int calls = 2;                           // calls of the case in the first process
  std::optional<AttnInputs> between;       // another case called between them (plug-ins)
  bool second_process = false;             // the case once more in a fresh process, bitwise equal
  bool enforce_caps = true;
  std::optional<ScaleFmt> scale_fmt;       // FP8 cases: told to kernels that are told it (Python's Call)
};
// The number of calls of a plug-in on a case: 3 to 5, drawn from the run's seed, the kernel and
// the case (the same seed gives the same numbers; a kernel cannot count on a fixed count).
// The suite's text hash (splitmix64 over the bytes): the same on every standard library, so
// whatever a seed draws is reproducible anywhere.
uint64_t hash_text(uint64_t h, const std::string& s);
int calls_per_case(uint64_t seed, const std::string& kernel, const std::string& case_key);
// run_case.cpp: the case in one or two child processes on shared buffers this process created,
// audited here from the raw bytes (arena.hpp); the child's words only explain an ERROR.
RunResult run_in_children(Session& s, const Implementation& k, const AttnInputs& in, const CallSchedule& plan,
                          const std::string& tag);

// run_case.cpp: the one boundary between the canonical conventions and the kernel's declared
// ones (mla/core/conventions.hpp). Inputs converted before the call, outputs made canonical
// after, so everything that judges or records a result sees canonical ones; then the call in
// children (isolated kernels) or in this process (trusted registered kernels, plan.calls times).
// plan.between, when set, is given in canonical conventions too; only its q may differ from `in`.
RunResult run_declared(Session& s, const Implementation& k, const AttnInputs& canonical, const CallSchedule& plan,
                       const std::string& tag);

// run_case.cpp: how every attention row is decided, catalog or fresh: the run's own failure
// (HOST_ERROR, ERROR; a refusal is FAIL for a `claimed` shape, UNSUPPORTED for an informational
// run) or the judge's PASS/FAIL under the kernel's declaration, with the run's figures, into
// `r`. `between_truth`: the truth of the case called between the case's calls (plan.between),
// whose outputs are judged too; nullptr when there was none.
void judge_run(reports::CaseResult& r, const Implementation& k, const AttnShape& shape, const RunResult& run,
               const AttentionTruth& truth, const AttentionTruth* between_truth, bool claimed = true);


// The case called between a case's calls: the same inputs with every q value negated (one
// bit each, so exactly representable), of a shape the kernel claims. Its logits are the case's
// negated, so its answer differs from the case's wherever a row attends two or more keys.
AttnBuffers negated_q(const AttnInputs& in);

// fresh.cpp: the `fresh` family, drawn from the run's seed inside each implementation's claims
// (every case kind's drawn cases, implementation by implementation) and judged against the C++
// fp64 oracles; selected unless --family names other families only.
bool fresh_selected(const Options& o);
void certify_fresh(Session& s);

// plan.cpp: fills the session's implementations (and their KernelReports) and cases from the
// options; UsageError when the selection is empty or names something unknown.
void plan(Session& s);


// attention_case.cpp: every can_implement question the selected attention cases will ask, asked
// up front, one child per kernel (a Python child imports torch: about a second each), so that
// certify_attention_case finds its answers. A case whose header cannot be read is left to it.
void ask_catalog_claims(Session& s);

// attention_case.cpp: every implementation on one attention case (index `i` of the plan).
void certify_attention_case(Session& s, const CaseRef& ref, std::size_t i);

// append_case.cpp: whether `fam` (a family of appends) is selected, whether some plug-in's
// append case of it survives the selection, and certifying them all.
bool appends_selected(const Session& s, const golden::Family& fam);
bool any_append_case_selected(const Session& s, const golden::Family& fam);
void certify_appends(Session& s, const golden::Family& fam);
// The fresh append cases of one plug-in with an append entry (make_fresh_append_cases), run and
// judged like the catalog's.
void certify_fresh_appends(Session& s, const Implementation& k, uint64_t seed);
// fresh.cpp: the fresh decode cases of one implementation, drawn from `seed` inside its claims.
void certify_fresh_decode(Session& s, const Implementation& k, uint64_t seed);

// stop.cpp: SIGINT, SIGTERM and SIGHUP ask the run to stop between two steps; installed for
// the life of one run (and before it by `mla certify`, install_stop_handlers), restoring the
// previous handlers after it.
class StopHandlers {
 public:
  StopHandlers();
  ~StopHandlers();
  StopHandlers(const StopHandlers&) = delete;
  StopHandlers& operator=(const StopHandlers&) = delete;

 private:
  struct sigaction old_[3] {};
  struct sigaction old_fsz_ {};
};
// The signal that asked the run to stop, 0 while none did.
int stop_signal();
// Whether a stop was asked for; the first time, notes it in the certificate and on `progress`.
bool stop_requested(Session& s);
// Thrown by stop_point in the phases before the first case, where nothing is recorded yet.
struct Stopped {};
void stop_point(Session& s);

// consistency.cpp: UsageError naming the first row of `c` that contradicts itself
// (reports::row_contradiction) or, in a shard's certificate, that belongs to another shard;
// `where` names the certificate.
void check_consistent(const reports::Certificate& c, const std::string& where);
// UsageError unless every implementation of `c` holds rows for the same catalog cases.
void check_same_cases(const reports::Certificate& c, const std::string& where);

// Notes derived from the case results alone, so a resumed run words them identically.
void update_notes(reports::Certificate& cert);

}  // namespace mla::certify
