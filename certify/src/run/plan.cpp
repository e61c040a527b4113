// The plan of a certification: which implementations (registered kernels, fault kernels,
// plug-ins described by a child), and which cases of which families.
#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/certify/case_kind.hpp"
#include "mla/certify/host_error.hpp"
#include "mla/certify/protocol.hpp"
#include "mla/core/sha256.hpp"
#include "mla/core/text.hpp"
#include "mla/faults/faults.hpp"
#include "mla/golden/families.hpp"
#include "mla/registry/registry.hpp"
#include "isolation/python_door.hpp"
#include "kinds/indexer_append/indexer_append_rows.hpp"
#include "kinds/indexer_logits/indexer_logits_rows.hpp"
#include "kinds/merge/merge_rows.hpp"
#include "kinds/sparse_prefill/sparse_prefill_rows.hpp"
#include "kinds/prefill/prefill_rows.hpp"
#include "kinds/topk/topk_rows.hpp"
#include "run/session.hpp"

#ifndef MLA_VERSION
#define MLA_VERSION "unknown"
#endif

namespace mla::certify {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string builtin_version(const Session& s) {
  const auto& commit = s.cert.machine.git_commit;
  return fmt::format("{} (commit {})", MLA_VERSION, commit ? commit->substr(0, 12) : std::string("unknown"));
}

// Enum values as the certificate writes them (state dtypes, scale formats, layouts).
template <class T>
std::vector<std::string> spelled(const std::vector<T>& values) {
  std::vector<std::string> n;
  for (const auto v : values) n.emplace_back(to_string(v));
  return n;
}
// The state dtypes a merge kernel merges, by name: its claims, its declaration and its out dtype.
std::vector<std::string> dtype_names(const MergeKernelInfo& i) { return spelled(i.dtypes); }

// The claims a merge and a top-k are recorded with (origin.capabilities), registered or external.
nlohmann::json capabilities_json(const MergeKernelInfo& i) {
  return {{"dtypes", dtype_names(i)}, {"head_dims", i.head_dims}};
}
nlohmann::json capabilities_json(const TopkKernelInfo& i) {
  return {{"ks", i.ks}, {"max_n", i.max_n}, {"range_all_valid", i.range_all_valid}};
}
nlohmann::json capabilities_json(const SparsePrefillKernelInfo& i) {
  return {{"heads", i.heads}, {"topk_multiple", i.topk_multiple}, {"d_qks", i.d_qks}, {"sink", i.sink},
          {"topk_length", i.topk_length}};
}
nlohmann::json capabilities_json(const IndexerAppendKernelInfo& i) {
  return {{"scale_fmts", spelled(i.scale_fmts)}, {"block_sizes", i.block_sizes}};
}
nlohmann::json capabilities_json(const IndexerLogitsKernelInfo& i) {
  return {{"layouts", spelled(i.layouts)}, {"next_ns", i.next_ns},         {"heads", i.heads},
          {"block_sizes", i.block_sizes},  {"max_context", i.max_context}};
}

// What the implementation declared, as the host applies it (the certificate's "declared").
nlohmann::json declared_json(const Implementation& e) {
  if (e.prefill) {
    const auto& i = e.prefill->info();
    return {{"precision", to_json(precision_class(i), i.compute.has_value())}, {"conventions", to_json(i.conventions)}};
  }
  if (e.sparse_prefill) {
    // Judged by the decode entries of its class (out, lse) and sparse_prefill.max_logits.
    const auto& i = e.sparse_prefill->info();
    return {{"precision", to_json(precision_class(i.compute, i.out_dtype), i.compute.has_value())}};
  }
  if (e.indexer_logits) {
    // Judged by the one entry indexer.logits.f32, whatever the kernel computes in.
    const auto& i = e.indexer_logits->info();
    return {{"precision", "indexer.logits.f32"}, {"layouts", spelled(i.layouts)}, {"next_ns", i.next_ns}, {"heads", i.heads},
            {"block_sizes", i.block_sizes}, {"max_context", i.max_context}};
  }
  if (e.indexer_append) {
    // Its scales' float32 operation decides the fp32 scales the judge expects.
    const auto& i = e.indexer_append->info();
    return {{"precision", "exact bytes"}, {"scale_fmts", spelled(i.scale_fmts)}, {"block_sizes", i.block_sizes},
            {"conventions", {{"fp32_scale_op", to_string(i.conventions.fp32_scale_op)}}}};
  }
  if (e.topk) {
    // A top-k's precision is the one its logits are compared in, which picks its tolerance
    // entry (topk.dominance.<precision>).
    const auto& i = e.topk->info();
    return {{"precision", to_string(i.precision)}, {"ks", i.ks}, {"max_n", i.max_n},
            {"range_all_valid", i.range_all_valid}, {"conventions", to_json(i.conventions)}};
  }
  if (e.merge) {
    // A merge has no precision class of its own: each case is judged by the entry of its state
    // dtype (merge.out.<dtype>, merge.lse.f32).
    const auto& i = e.merge->info();
    return {{"precision", "the state dtype of each case"},
            {"dtypes", dtype_names(i)},
            {"head_dims", i.head_dims},
            {"conventions", to_json(i.conventions)}};
  }
  json j = {{"precision", to_json(precision_class(e.info), e.info.compute.has_value())},
            {"conventions", to_json(e.info.conventions)}};
  if (e.external) {
    j["can_implement"] = e.can_implement;
    if (e.append_formats & MLA_PLUGIN_CACHE_FP8) {
      json recipes = json::array();
      if (e.append_fp8_recipes & MLA_PLUGIN_RECIPE_DEEPSEEK_V32) recipes.push_back(to_string(Fp8Recipe::deepseek_v32));
      if (e.append_fp8_recipes & MLA_PLUGIN_RECIPE_FLASHMLA) recipes.push_back(to_string(Fp8Recipe::flashmla));
      j["append_fp8_recipes"] = recipes;
    }
  }
  return j;
}

void add_implementation(Session& s, Implementation e, reports::KernelReport r) {
  for (const auto& other : s.implementations) {
    if (other.info.name == e.info.name) {
      throw UsageError(fmt::format("two implementations are named '{}'{}", e.info.name,
                                   e.external ? " (a plug-in's or Python kernel's name must differ from every other kernel's)" : ""));
    }
  }
  r.name = e.info.name;
  r.backend = e.info.backend;
  r.description = e.info.description;
  r.out_dtype = to_string(e.info.out_dtype);
  if (e.merge) {
    // A merge writes each case's out in that case's state dtype: the dtypes it merges, as
    // `mla kernels` lists them.
    r.out_dtype = fmt::format("{}", fmt::join(dtype_names(e.merge->info()), "|"));
  }
  if (e.topk) r.out_dtype = "int32";  // the indices it selects
  if (e.indexer_append) r.out_dtype = "fp8 cache";  // the 132-byte tokens it writes
  if (e.indexer_logits) r.out_dtype = "f32";        // the scores
  r.unavailable = e.unavailable;
  r.declared = declared_json(e);
  e.report_index = s.cert.kernels.size();
  s.cert.kernels.push_back(std::move(r));
  s.implementations.push_back(std::move(e));
}

// The descriptor is read in a child: loading a library runs its code, which this process
// never does.
void add_plugin(Session& s, const fs::path& path, std::size_t i) {
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec).lexically_normal();
  if (!fs::is_regular_file(abs, ec)) throw UsageError(fmt::format("plug-in {} is not a readable file", path.string()));
  const auto result = s.work.path() / fmt::format("describe-{}.msg", i);
  const auto log = s.work.path() / fmt::format("describe-{}.log", i);
  const auto outcome = run_child({s.self.string(), "__child", "describe", "--plugin", abs.string(), "--result",
                                  result.string()},
                                 std::min(s.options.timeout_s, 60.0), log);
  // No process or descriptor to run the description in is the machine's failure, not the plug-in's.
  if (const auto host = host_cause(outcome)) {
    throw HostFailure(fmt::format("plug-in {} could not be described: {}", path.string(), *host));
  }
  if (!outcome.ok() || !fs::exists(result)) {
    throw UsageError(fmt::format("plug-in {} cannot be loaded: {}{}", path.string(), outcome.describe(),
                                 outcome.stderr_tail.empty() ? "" : ": " + outcome.stderr_tail));
  }
  PluginDescription d;
  try {
    d = decode_plugin_description(wire::read(result, kPluginDescription));
  } catch (const Error& ex) {
    throw UsageError(fmt::format("plug-in {}: malformed description from the child: {}", path.string(), ex.what()));
  }
  // The descriptor's text is the plug-in's bytes: made printable (and valid UTF-8 for the JSON
  // certificate) before any message or report shows it.
  d.info.name = printable(d.info.name);
  d.info.description = printable(d.info.description);
  d.version = printable(d.version);
  const json origin = {{"kind", "plugin"},
                       {"path", abs.string()},
                       {"sha256", sha256_file(abs)},
                       {"abi_version", d.abi_version},
                       {"abi_minor", d.abi_minor},
                       {"device_memory", d.device_memory}};
  if (d.decodes) {
    Implementation e;
    e.external = true;
    e.ref.plugin = abs;
    e.info = d.info;
    e.unavailable = d.unavailable;
    e.append_formats = d.append_formats;
    e.append_scale_fmts = d.append_scale_fmts;
    e.append_fp8_recipes = d.append_fp8_recipes;
    e.can_implement = d.can_implement;
    reports::KernelReport r;
    r.version = d.version;
    r.origin = origin;
    r.origin["append_formats"] = d.append_formats;
    r.origin["append_scale_fmts"] = d.append_scale_fmts;
    r.origin["capabilities"] = to_json(d.info.caps);
    add_implementation(s, std::move(e), std::move(r));
  }
  Implementation base;
  base.external = true;
  base.ref.plugin = abs;
  base.info.backend = d.info.backend;
  base.unavailable = d.unavailable;
  reports::KernelReport report;
  report.version = d.version;
  report.origin = origin;
  for (auto& [e, r] : external_entries(base, report, d.prefill, d.merge, d.topk, d.indexer_logits,
                                         d.indexer_append, d.sparse_prefill, d.entry_can_implement)) {
    add_implementation(s, std::move(e), std::move(r));
  }
}

// A registered or fault kernel of any kind the run can select: exactly one of the pointers set.
// A fault kernel of another kind is one more entry with its pointer and `fault` set.
struct Candidate {
  const AttentionImpl* impl = nullptr;
  const PrefillImpl* prefill = nullptr;
  const MergeImpl* merge = nullptr;
  const TopkImpl* topk = nullptr;
  const IndexerAppendImpl* indexer_append = nullptr;
  const IndexerLogitsImpl* indexer_logits = nullptr;
  const SparsePrefillImpl* sparse_prefill = nullptr;
  std::optional<std::string> fault;
  const std::string& name() const {
    return impl      ? impl->info().name
           : prefill ? prefill->info().name
           : merge   ? merge->info().name
           : topk    ? topk->info().name
           : indexer_append ? indexer_append->info().name
           : indexer_logits ? indexer_logits->info().name
                            : sparse_prefill->info().name;
  }
};

// The implementation and the report of one candidate (the kind-specific fields).
std::pair<Implementation, reports::KernelReport> describe_candidate(const Session& s, const Candidate& c) {
  Implementation e;
  reports::KernelReport r;
  r.version = builtin_version(s);
  if (c.fault) e.ref.fault = c.fault;
  else e.ref.builtin = c.name();
  const auto availability = [&](auto* k) {
    try {
      e.unavailable = k->unavailable();
    } catch (const std::exception& ex) {
      e.unavailable = fmt::format("unavailable() threw: {}", ex.what());
    }
  };
  // A kernel of another kind than decode: its name, backend and description, and whether it is
  // available; its info for the fields of its kind.
  const auto adopt = [&](auto* k) -> decltype(k->info()) {
    const auto& i = k->info();
    e.info.name = i.name, e.info.backend = i.backend, e.info.description = i.description;
    availability(k);
    return i;
  };
  json caps;
  if (c.impl) {
    e.info = c.impl->info();
    e.impl = c.impl;
    availability(c.impl);
    caps = to_json(e.info.caps);
  } else if (c.prefill) {
    const auto& i = adopt(c.prefill);
    e.info.out_dtype = i.out_dtype;
    e.prefill = c.prefill;
    caps = to_json(i.caps);
  } else if (c.merge) {
    const auto& i = adopt(c.merge);
    e.merge = c.merge;
    caps = capabilities_json(i);
  } else if (c.topk) {
    const auto& i = adopt(c.topk);
    e.topk = c.topk;
    caps = capabilities_json(i);
  } else if (c.sparse_prefill) {
    const auto& i = adopt(c.sparse_prefill);
    e.info.out_dtype = i.out_dtype;
    e.sparse_prefill = c.sparse_prefill;
    caps = capabilities_json(i);
  } else if (c.indexer_logits) {
    const auto& i = adopt(c.indexer_logits);
    e.indexer_logits = c.indexer_logits;
    caps = capabilities_json(i);
  } else {
    const auto& i = adopt(c.indexer_append);
    e.indexer_append = c.indexer_append;
    caps = capabilities_json(i);
  }
  r.origin = {{"kind", c.fault ? "self-test" : "builtin"}, {"capabilities", caps}};
  return {std::move(e), std::move(r)};
}

void select_implementations(Session& s) {
  const Options& o = s.options;
  register_builtin_kernels();
  std::vector<Candidate> pool;
  for (const auto& k : Registry::instance().attention()) pool.push_back({.impl = k.get()});
  // --fault names one planted bug of any kind: the decode, prefill, merge, top-k, indexer append
  // and indexer logits faults share one namespace (faults.hpp keeps the lists disjoint).
  const auto has = [](const std::vector<std::string>& v, const std::string& n) {
    return std::find(v.begin(), v.end(), n) != v.end();
  };
  for (const auto& name : o.faults) {
    if (has(faults::names(), name)) {
      s.fault_kernels.push_back(faults::make(name));
      pool.push_back({.impl = s.fault_kernels.back().get(), .fault = name});
    } else if (has(faults::prefill_names(), name)) {
      s.prefill_fault_kernels.push_back(faults::make_prefill(name));
      pool.push_back({.prefill = s.prefill_fault_kernels.back().get(), .fault = name});
    } else if (has(faults::merge_names(), name)) {
      s.merge_fault_kernels.push_back(faults::make_merge(name));
      pool.push_back({.merge = s.merge_fault_kernels.back().get(), .fault = name});
    } else if (has(faults::topk_names(), name)) {
      s.topk_fault_kernels.push_back(faults::make_topk(name));
      pool.push_back({.topk = s.topk_fault_kernels.back().get(), .fault = name});
    } else if (has(faults::indexer_append_names(), name)) {
      s.indexer_append_fault_kernels.push_back(faults::make_indexer_append(name));
      pool.push_back({.indexer_append = s.indexer_append_fault_kernels.back().get(), .fault = name});
    } else if (has(faults::indexer_logits_names(), name)) {
      s.indexer_logits_fault_kernels.push_back(faults::make_indexer_logits(name));
      pool.push_back({.indexer_logits = s.indexer_logits_fault_kernels.back().get(), .fault = name});
    } else if (has(faults::sparse_prefill_names(), name)) {
      s.sparse_prefill_fault_kernels.push_back(faults::make_sparse_prefill(name));
      pool.push_back({.sparse_prefill = s.sparse_prefill_fault_kernels.back().get(), .fault = name});
    } else {
      throw UsageError(fmt::format("unknown fault kernel '{}' (decode: {}; prefill: {}; merge: {}; top-k: {}; indexer "
                                   "append: {}; indexer logits: {}; sparse prefill: {})",
                                   name, fmt::join(faults::names(), ", "), fmt::join(faults::prefill_names(), ", "),
                                   fmt::join(faults::merge_names(), ", "), fmt::join(faults::topk_names(), ", "),
                                   fmt::join(faults::indexer_append_names(), ", "),
                                   fmt::join(faults::indexer_logits_names(), ", "),
                                   fmt::join(faults::sparse_prefill_names(), ", ")));
    }
  }
  for (const auto& k : Registry::instance().prefill()) pool.push_back({.prefill = k.get()});
  for (const auto& k : Registry::instance().merge()) pool.push_back({.merge = k.get()});
  for (const auto& k : Registry::instance().topk()) pool.push_back({.topk = k.get()});
  for (const auto& k : Registry::instance().indexer_append()) pool.push_back({.indexer_append = k.get()});
  for (const auto& k : Registry::instance().indexer_logits()) pool.push_back({.indexer_logits = k.get()});
  for (const auto& k : Registry::instance().sparse_prefill()) pool.push_back({.sparse_prefill = k.get()});
  std::set<std::string> known;
  for (const auto& c : pool) known.insert(c.name());
  for (const auto& want : o.kernels) {
    if (!known.count(want)) {
      throw UsageError(fmt::format("no implementation named '{}' (known: {})", want, fmt::join(known, ", ")));
    }
  }
  // --plugin or --python alone certifies those (and any requested fault kernels), not the whole
  // registry; with neither --kernel nor --plugin, everything registered.
  for (const auto& c : pool) {
    const auto& name = c.name();
    const bool wanted = o.kernels.empty() ? ((o.plugins.empty() && o.pythons.empty()) || c.fault.has_value())
                                          : std::find(o.kernels.begin(), o.kernels.end(), name) != o.kernels.end();
    if (!wanted) continue;
    auto [e, r] = describe_candidate(s, c);
    add_implementation(s, std::move(e), std::move(r));
  }
  // Each description is a child process that may take its whole deadline: a stop is honoured
  // between two of them.
  for (std::size_t i = 0; i < o.plugins.size(); ++i) {
    stop_point(s);
    add_plugin(s, o.plugins[i], i);
  }
  for (std::size_t i = 0; i < o.pythons.size(); ++i) {
    stop_point(s);
    for (auto& [e, r] : describe_python(s, o.pythons[i], i)) add_implementation(s, std::move(e), std::move(r));
  }
  if (s.implementations.empty()) throw UsageError("no implementation selected");
  // How each one was run, in its own record: one certificate may hold registered kernels run in
  // this process (--in-process: one process, so one CUDA context, for the whole run) beside
  // plug-ins and Python kernels, which always run each case in fresh child processes.
  for (const auto& k : s.implementations) {
    auto& r = s.report(k);
    r.origin["isolation"] = s.isolated(k) ? "child_per_case" : "in_process";
    if (!k.decodes() && !k.external) {
      r.origin["isolation_note"] = "no child transport exists for registered kernels of other kinds than decode yet: "
                                   "they run in this process, whatever --in-process says for decode kernels";
    }
    // The case kinds it is certified on, so a shard or resumed certificate compares each kind's
    // rows among the implementations that have them (consistency.cpp).
    for (const CaseKind* kind : case_kinds()) {
      if (kind->serves(k)) r.kinds.emplace_back(kind->name());
    }
  }
}

// Whether this process runs under an address-space limit (ulimit -v), which its children inherit.
bool address_space_limited() {
  struct rlimit lim {};
  return ::getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY;
}

void select_cases(Session& s) {
  const Options& o = s.options;
  // The family names certificate rows carry, by the case kind that certifies them.
  std::vector<std::string> known;
  for (const CaseKind* kind : case_kinds()) {
    std::vector<std::string> rows;
    for (const auto& f : golden::families()) {
      if (f.certify == kind->name()) rows.push_back(f.certified_as);
    }
    known.push_back(fmt::format("{}: {}", kind->families_are(), rows.empty() ? "none" : fmt::format("{}", fmt::join(rows, ", "))));
  }
  // The drawn cases' family name is the catalog's: a build whose catalog does not declare it as
  // generated stops here, before any row carries the name.
  (void)golden::fresh_family();
  for (const auto& f : o.families) {
    if (f == kFresh) continue;  // drawn at run time (fresh.cpp): no stored file
    if (!case_kind_of_rows(f)) {
      throw UsageError(fmt::format("unknown family '{}' ({}; drawn at run time: {})", f, fmt::join(known, "; "), kFresh));
    }
  }
  if (o.case_regex) {
    try {
      s.case_regex.emplace(*o.case_regex, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw UsageError(fmt::format("--case '{}' is not a valid regular expression: {}", *o.case_regex, e.what()));
    }
  }
  // The catalog by each file's `family` attribute: every file of a selected family is certified,
  // whatever its name. Each is read through in a child process before this one reads it.
  for (const auto& [file, digest] : s.catalog.sha256) {
    stop_point(s);  // a read-through is a child process per file
    const auto path = s.catalog.file(file);
    const auto& check = s.goldens->check(path, digest, GoldenDepth::read_through);
    if (check.host) throw HostFailure(fmt::format("golden file {} could not be read through: {}", file, check.problem));
    if (check.kind == GoldenCheck::Kind::crashed && address_space_limited()) {
      // Under an address-space limit the HDF5 library crashes on allocations it does not check:
      // the file cannot be told from the limit, so the limit is named and nothing is refused.
      throw HostFailure(fmt::format("golden file {} could not be read through under this run's address-space limit "
                                    "(ulimit -v): {}; raise the limit, then --resume (without one, a file that "
                                    "still crashes the reader is refused)",
                                    file, check.problem));
    }
    if (check.kind == GoldenCheck::Kind::crashed) throw UsageError(GoldenGate::refusal(path, check));
    golden::FileInfo info;
    try {
      if (check.kind == GoldenCheck::Kind::invalid) throw Error(check.problem);
      info = golden::read_file_info(path);
    } catch (const Error& e) {
      throw UsageError(fmt::format("cannot read {}: {}", file, e.what()));
    }
    s.family_files[info.family].push_back(file);
  }
  std::vector<std::string> unused;
  static const std::vector<std::string> kNoFile;
  for (const auto& fam : golden::families()) {
    const auto files = s.family_files.find(fam.name);
    const auto& its_files = files == s.family_files.end() ? kNoFile : files->second;
    const bool selected = o.families.empty() || std::find(o.families.begin(), o.families.end(), fam.certified_as) != o.families.end();
    if (!fam.certified() || !selected) {
      for (const auto& f : its_files) {
        unused.push_back(fmt::format("{} (family {}: {})", f, fam.name,
                                     fam.certified() ? "not selected by --family" : "not certified by mla certify"));
      }
      continue;
    }
    case_kind_of(fam)->plan(s, fam, its_files, unused);
  }
  if (!unused.empty()) {
    s.cert.notes.push_back(fmt::format("files of the catalog this run does not certify: {}", fmt::join(unused, "; ")));
  }
  const bool fresh_only = std::find(o.families.begin(), o.families.end(), kFresh) != o.families.end();
  const auto& kinds = case_kinds();
  if (!fresh_only && std::none_of(kinds.begin(), kinds.end(), [&](const CaseKind* k) { return k->has_cases(s); })) {
    std::vector<std::string> why;
    for (const CaseKind* k : kinds) {
      if (auto w = k->why_none(s); !w.empty()) why.push_back(std::move(w));
    }
    throw UsageError(fmt::format("the selection matches no case ({})", fmt::join(why, "; ")));
  }
  // The shard is cut from the whole selection, after it was found non-empty: a shard that
  // happens to hold no case is a (trivially) complete part, not a usage error.
  if (o.shard_count > 0) {
    for (const CaseKind* k : kinds) k->cut_to_shard(s);
  }
}

}  // namespace

int shard_of(const std::string& family, const std::string& name, int count) {
  if (count < 1) throw UsageError("a shard count must be at least 1");
  // A stored case's fresh twin is certified with its case, so it is in its case's shard.
  const std::string_view suffix = kTwinSuffix;
  const bool twin = name.size() > suffix.size() && name.ends_with(suffix);
  const std::string id = family + "/" + (twin ? name.substr(0, name.size() - suffix.size()) : name);
  const auto hex = sha256_hex({reinterpret_cast<const uint8_t*>(id.data()), id.size()});
  const uint64_t h = std::stoull(hex.substr(0, 15), nullptr, 16);
  return static_cast<int>(h % static_cast<uint64_t>(count)) + 1;
}

std::pair<int, int> parse_shard(const std::string& text) {
  const auto bad = [&] {
    return UsageError(fmt::format("--shard '{}' is not I/N with 1 <= I <= N <= 1000 (e.g. 2/4)", printable(text)));
  };
  const auto slash = text.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 >= text.size() || text.size() > 9) throw bad();
  const auto digits = [](const std::string& t) { return std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }); };
  const auto i = text.substr(0, slash), n = text.substr(slash + 1);
  if (!digits(i) || !digits(n)) throw bad();
  const int index = std::stoi(i), count = std::stoi(n);
  if (index < 1 || count < 1 || index > count || count > 1000) throw bad();
  return {index, count};
}

void plan(Session& s) {
  select_implementations(s);
  select_cases(s);
}

std::vector<std::pair<Implementation, reports::KernelReport>> external_entries(
    const Implementation& base, const reports::KernelReport& report, const std::optional<PrefillKernelInfo>& prefill,
    const std::optional<MergeKernelInfo>& merge, const std::optional<TopkKernelInfo>& topk,
    const std::optional<IndexerLogitsKernelInfo>& indexer_logits,
    const std::optional<IndexerAppendKernelInfo>& indexer_append,
    const std::optional<SparsePrefillKernelInfo>& sparse_prefill, const std::vector<std::string>& entry_can_implement) {
  std::vector<std::pair<Implementation, reports::KernelReport>> out;
  const auto entry = [&](const std::string& name, const std::string& description, const char* kind) -> auto& {
    auto& [e, r] = out.emplace_back(base, report);
    e.info.name = printable(name), e.info.description = printable(description);
    r.origin["entry"] = kind;
    // The entry's own predicate (1.6), asked before each of its calls (claims.hpp, claim_entry).
    e.can_implement = std::find(entry_can_implement.begin(), entry_can_implement.end(), kind) != entry_can_implement.end();
    if (e.can_implement) r.origin["can_implement"] = true;
    return out.back();
  };
  if (prefill) {
    auto& [e, r] = entry(prefill->name, prefill->description, "prefill");
    e.info.out_dtype = prefill->out_dtype;
    e.owned_prefill = external_prefill(*prefill);
    e.prefill = e.owned_prefill.get();
    r.origin["capabilities"] = to_json(prefill->caps);
  }
  if (merge) {
    auto& [e, r] = entry(merge->name, merge->description, "merge");
    e.owned_merge = external_merge(*merge);
    e.merge = e.owned_merge.get();
    r.origin["capabilities"] = capabilities_json(*merge);
  }
  if (topk) {
    auto& [e, r] = entry(topk->name, topk->description, "topk");
    e.owned_topk = external_topk(*topk);
    e.topk = e.owned_topk.get();
    r.origin["capabilities"] = capabilities_json(*topk);
  }
  if (indexer_logits) {
    auto& [e, r] = entry(indexer_logits->name, indexer_logits->description, "indexer_logits");
    e.owned_indexer_logits = external_indexer_logits(*indexer_logits);
    e.indexer_logits = e.owned_indexer_logits.get();
    r.origin["capabilities"] = capabilities_json(*indexer_logits);
  }
  if (indexer_append) {
    auto& [e, r] = entry(indexer_append->name, indexer_append->description, "indexer_append");
    e.owned_indexer_append = external_indexer_append(*indexer_append);
    e.indexer_append = e.owned_indexer_append.get();
    r.origin["capabilities"] = capabilities_json(*indexer_append);
  }
  if (sparse_prefill) {
    auto& [e, r] = entry(sparse_prefill->name, sparse_prefill->description, "sparse_prefill");
    e.info.out_dtype = sparse_prefill->out_dtype;
    e.owned_sparse_prefill = external_sparse_prefill(*sparse_prefill);
    e.sparse_prefill = e.owned_sparse_prefill.get();
    r.origin["capabilities"] = capabilities_json(*sparse_prefill);
  }
  return out;
}

}  // namespace mla::certify
