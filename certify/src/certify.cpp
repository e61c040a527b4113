#include "certifier.hpp"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <ostream>
#include <regex>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "append_cases.hpp"
#include "case_index.hpp"
#include "isolate.hpp"
#include "junit.hpp"
#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/sha256.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/fixtures/golden.hpp"
#include "mla/kernels/perturbed.hpp"
#include "mla/kernels/registry.hpp"
#include "runner.hpp"

#ifndef MLA_VERSION
#define MLA_VERSION "unknown"
#endif
#ifndef MLA_BUILD_TYPE
#define MLA_BUILD_TYPE "unknown"
#endif

namespace mla::certify {
namespace {

using tol::Verdict;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The words that open the reason an informational run adds to an UNSUPPORTED case; the kernel
// notes are derived from them, so a resumed certificate gets the same notes.
constexpr const char* kProbePass = "informational run on this unclaimed shape: PASS (handles it without claiming it)";
constexpr const char* kProbePrefix = "informational run on this unclaimed shape: ";
// Opens the reason of an UNSUPPORTED verdict decided from the declared capabilities.
constexpr std::string_view kNotClaimed = "not claimed: ";

json shape_json(const AttnShape& s, const std::string& scale_fmt, const std::vector<int32_t>* seqlens) {
  json j = {{"batch", s.batch},           {"s_q", s.s_q},
            {"heads", s.heads},           {"page_size", s.page_size},
            {"num_blocks", s.num_blocks}, {"max_blocks", s.max_blocks},
            {"topk", s.topk},             {"causal", s.causal},
            {"cache_format", to_string(s.cache_format)}};
  if (!scale_fmt.empty()) j["scale_fmt"] = scale_fmt;
  if (seqlens) j["cache_seqlens"] = *seqlens;
  return j;
}

std::vector<double> widen(const std::vector<uint16_t>& bf16) {
  std::vector<double> v(bf16.size());
  for (std::size_t i = 0; i < bf16.size(); ++i) v[i] = static_cast<double>(bf16_to_float(bf16[i]));
  return v;
}
std::vector<double> widen(const std::vector<float>& f) { return {f.begin(), f.end()}; }

// Capabilities carry `varlen`, which a shape alone cannot show: it needs the lengths.
std::optional<std::string> varlen_refusal(const Capabilities& caps, const std::vector<int32_t>& seqlens) {
  if (caps.varlen || seqlens.empty()) return std::nullopt;
  const auto [lo, hi] = std::minmax_element(seqlens.begin(), seqlens.end());
  if (*lo == *hi) return std::nullopt;
  return fmt::format("varlen not supported (cache_seqlens range from {} to {})", *lo, *hi);
}

// A private folder for the inputs/results files exchanged with children, named after this
// process: one left behind by a certifier that was killed (its pid gone) is removed by the next.
class WorkDir {
 public:
  WorkDir() {
    remove_abandoned();
    std::string tmpl = (fs::temp_directory_path() / fmt::format("mla-certify-{}-XXXXXX", ::getpid())).string();
    if (!mkdtemp(tmpl.data())) throw Error(fmt::format("cannot create a temporary folder in {}", fs::temp_directory_path().string()));
    path_ = tmpl;
  }
  ~WorkDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  static void remove_abandoned() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::temp_directory_path(), ec)) {
      const auto name = e.path().filename().string();
      constexpr std::string_view prefix = "mla-certify-";
      if (name.rfind(prefix, 0) != 0) continue;
      const auto dash = name.find('-', prefix.size());
      const auto digits = name.substr(prefix.size(), dash == std::string::npos ? 0 : dash - prefix.size());
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
      const pid_t owner = static_cast<pid_t>(std::stol(digits));
      if (owner != ::getpid() && ::kill(owner, 0) != 0 && errno == ESRCH) {
        std::error_code rm;
        fs::remove_all(e.path(), rm);
      }
    }
  }
  fs::path path_;
};

// One implementation under certification.
struct Entry {
  KernelInfo info;
  std::optional<std::string> unavailable;
  const AttentionImpl* impl = nullptr;  // builtin / self-test: the object in this process
  KernelRef ref;                        // how a child builds it
  bool plugin = false;
  uint32_t append_formats = 0, append_scale_fmts = 0;  // plug-ins with an append entry (ABI 1.1)
  std::size_t report_index = 0;
};

// What --resume compares: the version, and for a plug-in also the library's bytes.
std::string identity(const reports::KernelReport& k) {
  std::string id = k.version;
  if (k.origin.is_object() && k.origin.contains("sha256")) id += "#" + k.origin.at("sha256").get<std::string>();
  return id;
}

// The options a result depends on (a kept result must be what a rerun would give).
json result_options(const json& options) {
  json j = json::object();
  for (const char* key : {"repeats", "max_tokens", "timeout_s", "probe_unclaimed", "isolate"}) {
    j[key] = options.contains(key) ? options.at(key) : json();
  }
  return j;
}

class Run {
 public:
  Run(const Options& o, std::ostream& progress) : o_(o), progress_(progress) {}

  reports::Certificate go() {
    const auto t_start = Clock::now();
    // Before anything else, so a run that could not record its results never starts.
    check_writable_folder(o_.out);
    self_ = o_.self_exe.empty() ? self_executable() : o_.self_exe;
    if (self_.empty()) throw UsageError("cannot find this executable (/proc/self/exe) to run kernels in a child");

    cert_.tool = "mla certify";
    cert_.tool_version = MLA_VERSION;
    cert_.started_utc = reports::utc_now_iso8601();
    cert_.machine = reports::detect_machine(o_.goldens);
    cert_.build = {{"compiler", __VERSION__},
                   {"build_type", MLA_BUILD_TYPE},
                   {"tolerance_table_sha256", tolerance_table_digest()}};
    cert_.goldens_dir = fs::absolute(o_.goldens).lexically_normal().string();
    cert_.options = options_json();

    try {
      catalog_ = fixtures::open_catalog(o_.goldens);
      cert_.manifest_sha256 = sha256_file(o_.goldens / "MANIFEST.sha256");
    } catch (const Error& e) {
      throw UsageError(fmt::format("the golden catalog in {} cannot be used: {}", o_.goldens.string(), e.what()));
    }
    cert_.manifest = catalog_.sha256;

    select_kernels();
    const auto cases = select_cases();
    if (o_.resume) load_previous();
    progress_ << fmt::format("mla certify: {} implementations x {} cases from {}\n", entries_.size(), cases.size(),
                             cert_.goldens_dir);

    for (std::size_t i = 0; i < cases.size(); ++i) {
      const auto t_case = Clock::now();
      certify_case(cases[i], i);
      update_notes();
      cert_.wall_seconds = seconds_since(t_start);
      save();
      progress_line(i + 1, cases.size(), cases[i], seconds_since(t_case));
    }
    certify_appends();
    if (o_.resume) {
      progress_ << fmt::format("resume: kept {} of {} results from the previous certificate\n", kept_, total_results());
    }
    cert_.complete = true;
    cert_.finished_utc = reports::utc_now_iso8601();
    cert_.wall_seconds = seconds_since(t_start);
    save();
    return std::move(cert_);
  }

  bool save_failed() const { return save_failed_; }

 private:
  struct CaseRef {
    std::string family, file, name;
    std::string key() const { return file + "/" + name; }
  };

  json options_json() const {
    std::vector<std::string> plugins;
    for (const auto& p : o_.plugins) plugins.push_back(fs::absolute(p).lexically_normal().string());
    json j = {{"kernels", o_.kernels},     {"plugins", plugins},         {"families", o_.families},
              {"extras", o_.extras},       {"repeats", o_.repeats},      {"timeout_s", o_.timeout_s},
              {"isolate", o_.isolate},     {"probe_unclaimed", o_.probe_unclaimed}};
    j["case_regex"] = o_.case_regex ? json(*o_.case_regex) : json();
    j["max_tokens"] = o_.max_tokens ? json(*o_.max_tokens) : json();
    return j;
  }

  // ---- kernels ------------------------------------------------------------------------------

  std::string builtin_version() const {
    const auto& commit = cert_.machine.git_commit;
    return fmt::format("{} (commit {})", MLA_VERSION, commit ? commit->substr(0, 12) : std::string("unknown"));
  }

  void add_entry(Entry e, reports::KernelReport r) {
    for (const auto& other : entries_) {
      if (other.info.name == e.info.name) {
        throw UsageError(fmt::format("two implementations are named '{}'{}", e.info.name,
                                     e.plugin ? " (a plug-in's name must differ from every other kernel's)" : ""));
      }
    }
    r.name = e.info.name;
    r.backend = e.info.backend;
    r.description = e.info.description;
    r.out_dtype = to_string(e.info.out_dtype);
    r.unavailable = e.unavailable;
    e.report_index = cert_.kernels.size();
    cert_.kernels.push_back(std::move(r));
    entries_.push_back(std::move(e));
  }

  void select_kernels() {
    register_builtin_kernels();
    struct Candidate {
      const AttentionImpl* impl;
      std::optional<std::string> extra;
    };
    std::vector<Candidate> pool;
    for (const auto& k : Registry::instance().attention()) pool.push_back({k.get(), std::nullopt});
    for (const auto& name : o_.extras) {
      extras_.push_back(make_extra_kernel(name));
      pool.push_back({extras_.back().get(), name});
    }
    std::set<std::string> known;
    for (const auto& c : pool) known.insert(c.impl->info().name);
    for (const auto& want : o_.kernels) {
      if (!known.count(want)) {
        throw UsageError(fmt::format("no implementation named '{}' (known: {})", want, fmt::join(known, ", ")));
      }
    }
    // --plugin alone certifies the plug-ins (and any requested self-test kernels), not the
    // whole registry; with neither --kernel nor --plugin, everything registered.
    for (const auto& c : pool) {
      const auto& name = c.impl->info().name;
      const bool wanted = o_.kernels.empty() ? (o_.plugins.empty() || c.extra.has_value())
                                             : std::find(o_.kernels.begin(), o_.kernels.end(), name) != o_.kernels.end();
      if (!wanted) continue;
      Entry e;
      e.info = c.impl->info();
      e.impl = c.impl;
      if (c.extra) e.ref.extra = c.extra;
      else e.ref.builtin = name;
      try {
        e.unavailable = c.impl->unavailable();
      } catch (const std::exception& ex) {
        e.unavailable = fmt::format("unavailable() threw: {}", ex.what());
      }
      reports::KernelReport r;
      r.version = builtin_version();
      r.origin = {{"kind", c.extra ? "self-test" : "builtin"}, {"capabilities", capabilities_json(e.info.caps)}};
      add_entry(std::move(e), std::move(r));
    }
    for (std::size_t i = 0; i < o_.plugins.size(); ++i) add_plugin(o_.plugins[i], i);
    if (entries_.empty()) throw UsageError("no implementation selected");
  }

  // The descriptor is read in a child: loading a library runs its code, which this process
  // never does.
  void add_plugin(const fs::path& path, std::size_t i) {
    std::error_code ec;
    const fs::path abs = fs::absolute(path, ec).lexically_normal();
    if (!fs::is_regular_file(abs, ec)) throw UsageError(fmt::format("plug-in {} is not a readable file", path.string()));
    const auto result = work_.path() / fmt::format("describe-{}.json", i);
    const auto log = work_.path() / fmt::format("describe-{}.log", i);
    const auto outcome = run_child({self_.string(), "__child", "describe", "--plugin", abs.string(), "--result",
                                    result.string()},
                                   std::min(o_.timeout_s, 60.0), log);
    if (!outcome.ok() || !fs::exists(result)) {
      throw UsageError(fmt::format("plug-in {} cannot be loaded: {}{}", path.string(), outcome.describe(),
                                   outcome.stderr_tail.empty() ? "" : ": " + outcome.stderr_tail));
    }
    json d;
    try {
      std::ifstream in(result);
      d = json::parse(in);
      Entry e;
      e.plugin = true;
      e.ref.plugin = abs;
      e.info.name = d.at("name");
      e.info.backend = d.at("backend");
      e.info.description = d.at("description");
      const std::string dtype = d.at("out_dtype");
      e.info.out_dtype = dtype == "bf16" ? OutDType::bf16 : OutDType::f32;
      e.info.caps = capabilities_from_json(d.at("capabilities"));
      if (!d.at("unavailable").is_null()) e.unavailable = d.at("unavailable").get<std::string>();
      e.append_formats = d.value("append_formats", 0u);
      e.append_scale_fmts = d.value("append_scale_fmts", 0u);
      reports::KernelReport r;
      r.version = d.at("version");
      r.origin = {{"kind", "plugin"},
                  {"path", abs.string()},
                  {"sha256", sha256_file(abs)},
                  {"abi_version", d.at("abi_version")},
                  {"abi_minor", d.value("abi_minor", 0u)},
                  {"device_memory", d.value("device_memory", false)},
                  {"append_formats", e.append_formats},
                  {"append_scale_fmts", e.append_scale_fmts},
                  {"capabilities", d.at("capabilities")}};
      add_entry(std::move(e), std::move(r));
    } catch (const json::exception& ex) {
      throw UsageError(fmt::format("plug-in {}: malformed description from the child: {}", path.string(), ex.what()));
    }
  }

  std::optional<std::string> refusal(const Entry& k, const AttnShape& shape) const {
    auto no = k.impl ? k.impl->check(shape) : check_capabilities(k.info.caps, shape);
    if (no) return std::string(kNotClaimed) + *no;
    return no;
  }

  // ---- cases --------------------------------------------------------------------------------

  std::vector<CaseRef> select_cases() {
    const auto& all = attention_families();
    for (const auto& f : o_.families) {
      if (std::find(all.begin(), all.end(), f) == all.end() && f != kAppendFamily) {
        throw UsageError(fmt::format("unknown family '{}' (attention families: {}; plug-in appends: {})", f,
                                     fmt::join(all, ", "), kAppendFamily));
      }
    }
    std::optional<std::regex> re;
    if (o_.case_regex) {
      try {
        re.emplace(*o_.case_regex, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        throw UsageError(fmt::format("--case '{}' is not a valid regular expression: {}", *o_.case_regex, e.what()));
      }
    }
    std::vector<CaseRef> out;
    for (const auto& family : all) {
      if (!o_.families.empty() && std::find(o_.families.begin(), o_.families.end(), family) == o_.families.end()) {
        continue;
      }
      const std::string file = family + ".h5";
      if (!catalog_.sha256.count(file)) {
        const auto note = fmt::format("family {} is not in the catalog ({} missing from MANIFEST.sha256)", family, file);
        if (!o_.families.empty()) throw UsageError(note);
        cert_.notes.push_back(note);
        progress_ << "warning: " << note << "\n";
        continue;
      }
      fixtures::FileInfo info;
      try {
        info = fixtures::read_file_info(catalog_.file(file));
      } catch (const Error& e) {
        throw UsageError(fmt::format("cannot read {}: {}", file, e.what()));
      }
      if (info.family != family) {
        throw UsageError(fmt::format("{} says it is family '{}', expected '{}'", file, info.family, family));
      }
      for (const auto& name : info.cases) {
        if (re && !std::regex_search(family + "/" + name, *re)) continue;
        out.push_back({family, file, name});
      }
    }
    if (out.empty() && !any_append_case_selected(re)) {
      throw UsageError(append_selected() ? "the selection matches no case (no attention case, and no selected plug-in has "
                                           "an append entry point for the cache_append cases)"
                                         : "the selection matches no attention case");
    }
    return out;
  }

  // ---- resume -------------------------------------------------------------------------------

  void load_previous() {
    const auto file = o_.out / kJsonName;
    std::error_code ec;
    if (!fs::exists(file, ec)) {
      progress_ << fmt::format("resume: no previous certificate in {}; running everything\n", o_.out.string());
      return;
    }
    reports::Certificate old;
    try {
      std::ifstream in(file);
      old = reports::certificate_from_json(json::parse(in));
    } catch (const std::exception& e) {
      progress_ << fmt::format("resume: {} is unreadable ({}); running everything\n", file.string(), e.what());
      return;
    }
    auto mismatch = [&]() -> std::optional<std::string> {
      if (old.tool_version != cert_.tool_version) return fmt::format("tool version {} vs {}", old.tool_version, cert_.tool_version);
      const json old_tol = old.build.is_object() && old.build.contains("tolerance_table_sha256")
                               ? old.build.at("tolerance_table_sha256") : json();
      if (old_tol != cert_.build.at("tolerance_table_sha256")) return std::string("the tolerance table changed");
      if (result_options(old.options) != result_options(cert_.options)) {
        return fmt::format("options {} vs {}", result_options(old.options).dump(), result_options(cert_.options).dump());
      }
      return std::nullopt;
    }();
    if (mismatch) {
      progress_ << fmt::format("resume: the previous certificate is not comparable ({}); running everything\n", *mismatch);
      return;
    }
    for (const auto& k : old.kernels) {
      auto& slot = previous_[k.name];
      slot.identity = identity(k);
      for (const auto& r : k.cases) {
        const auto digest = old.manifest.find(r.file);
        if (digest == old.manifest.end()) continue;
        slot.cases[r.file + "/" + r.name] = {digest->second, r};
      }
    }
  }

  // The previous result of kernel `k` on `ref`, when the kernel and the golden file are the same.
  std::optional<reports::CaseResult> previous(const Entry& k, const CaseRef& ref) const {
    const auto p = previous_.find(k.info.name);
    if (p == previous_.end() || p->second.identity != identity(cert_.kernels[k.report_index])) return std::nullopt;
    const auto c = p->second.cases.find(ref.key());
    if (c == p->second.cases.end()) return std::nullopt;
    const auto now = catalog_.sha256.find(ref.file);
    if (now == catalog_.sha256.end() || now->second != c->second.first) return std::nullopt;
    return c->second.second;
  }

  std::size_t total_results() const {
    std::size_t n = 0;
    for (const auto& k : cert_.kernels) n += k.cases.size();
    return n;
  }

  // ---- one case -----------------------------------------------------------------------------

  void record(const Entry& k, reports::CaseResult r) { cert_.kernels[k.report_index].cases.push_back(std::move(r)); }

  reports::CaseResult base_result(const CaseRef& ref) const {
    reports::CaseResult r;
    r.family = ref.family;
    r.file = ref.file;
    r.name = ref.name;
    return r;
  }

  void certify_case(const CaseRef& ref, std::size_t case_index) {
    // Results that --resume may keep; the order of the certificate stays the order of the run.
    std::vector<const Entry*> pending;
    for (const auto& k : entries_) {
      if (auto kept = previous(k, ref)) {
        record(k, std::move(*kept));
        ++kept_;
      } else {
        pending.push_back(&k);
      }
    }
    if (pending.empty()) return;

    auto fail_all = [&](const std::vector<const Entry*>& ks, const std::string& why, const CaseHeader* h) {
      for (const auto* k : ks) {
        auto r = base_result(ref);
        if (h) {
          r.description = h->description;
          r.shape = shape_json(h->shape, h->scale_fmt, nullptr);
        }
        r.verdict = Verdict::error;
        r.reasons.push_back(why);
        record(*k, std::move(r));
      }
    };

    // The manifest was checked at the start; the file is checked again right before it is
    // read, so a golden deleted or changed since (by a plug-in, by anyone) is never believed.
    try {
      fixtures::verify_file(catalog_, ref.file);
    } catch (const std::exception& e) {
      fail_all(pending, fmt::format("golden file {} failed re-verification before loading: {}", ref.file, e.what()),
               nullptr);
      return;
    }
    const auto path = catalog_.file(ref.file);
    CaseHeader header;
    try {
      header = read_case_header(path, ref.name);
    } catch (const std::exception& e) {
      fail_all(pending, fmt::format("case attributes unreadable: {}", e.what()), nullptr);
      return;
    }

    // Decide everything that does not need the arrays first, so a case no implementation can
    // run is never loaded.
    std::vector<const Entry*> runnable, probes;
    std::map<const Entry*, std::string> refused;
    for (const auto* k : pending) {
      auto r = base_result(ref);
      r.description = header.description;
      r.shape = shape_json(header.shape, header.scale_fmt, nullptr);
      try {
        if (k->unavailable) {
          r.verdict = Verdict::skipped;
          r.reasons.push_back(*k->unavailable);
        } else if (o_.max_tokens && header.cache_tokens() > *o_.max_tokens) {
          r.verdict = Verdict::skipped;
          r.reasons.push_back(fmt::format("cache of {} tokens > --max-tokens {}", header.cache_tokens(), *o_.max_tokens));
        } else if (auto no = refusal(*k, header.shape)) {
          if (probe_worthwhile(header)) {
            refused[k] = *no;
            probes.push_back(k);
            continue;
          }
          r.verdict = Verdict::unsupported;
          r.reasons.push_back(*no);
        } else {
          runnable.push_back(k);
          continue;
        }
      } catch (const std::exception& e) {
        // A capability query that throws is a defect of the implementation, not of the run.
        r.verdict = Verdict::error;
        r.reasons.push_back(fmt::format("exception from unavailable()/check(): {}", e.what()));
      }
      record(*k, std::move(r));
    }
    if (runnable.empty() && probes.empty()) return;

    fixtures::AttnCase c;
    try {
      c = fixtures::load_attn_case(path, ref.name);
    } catch (const std::exception& e) {
      fail_all(runnable, fmt::format("case failed to load: {}", e.what()), &header);
      for (const auto* k : probes) record(*k, unsupported(ref, header, refused[k]));
      return;
    }
    // Varlen is a property of the lengths, known only now.
    for (auto it = runnable.begin(); it != runnable.end();) {
      if (auto no = varlen_refusal((*it)->info.caps, c.cache_seqlens)) {
        refused[*it] = std::string(kNotClaimed) + *no;
        probes.push_back(*it);
        it = runnable.erase(it);
      } else {
        ++it;
      }
    }

    const auto same_out = widen(c.same_dtype_out);
    const auto same_lse = widen(c.same_dtype_lse);
    fs::path inputs;
    const bool any_child = std::any_of(runnable.begin(), runnable.end(), [&](const Entry* k) { return isolated(*k); }) ||
                           std::any_of(probes.begin(), probes.end(), [&](const Entry* k) { return isolated(*k); });
    if (any_child) {
      inputs = work_.path() / fmt::format("case-{}.inputs", case_index);
      try {
        write_inputs(inputs, c.inputs());
      } catch (const std::exception& e) {
        fail_all(runnable, fmt::format("cannot hand the case to a child process: {}", e.what()), &header);
        for (const auto* k : probes) record(*k, unsupported(ref, header, refused[k]));
        return;
      }
    }

    // Claimed shapes first, then the informational runs, in the certificate's kernel order.
    std::map<const Entry*, reports::CaseResult> results;
    for (const auto* k : runnable) {
      const auto run = run_kernel(*k, c, inputs, /*enforce_caps=*/true, case_index);
      results[k] = judged(*k, c, ref, run, same_out, same_lse);
    }
    for (const auto* k : probes) {
      auto r = unsupported(ref, header, refused[k]);
      r.shape = shape_json(c.shape, c.scale_fmt, &c.cache_seqlens);
      if (probe_worthwhile(header)) {
        const auto run = run_kernel(*k, c, inputs, /*enforce_caps=*/false, case_index);
        r.reasons.push_back(probe_reason(*k, c, ref, run, same_out, same_lse));
      }
      results[k] = std::move(r);
    }
    for (const auto& k : entries_) {
      const auto it = results.find(&k);
      if (it != results.end()) record(k, std::move(it->second));
    }
    std::error_code ec;
    if (!inputs.empty()) fs::remove(inputs, ec);
  }

  // ---- plug-in appends (ABI 1.1) -----------------------------------------------------------

  bool append_selected() const {
    return o_.families.empty() || std::find(o_.families.begin(), o_.families.end(), kAppendFamily) != o_.families.end();
  }

  // Whether some plug-in's append case survives the selection; the names follow
  // make_append_cases ("<golden case>/<format>/<call>"), so this needs no case built.
  bool any_append_case_selected(const std::optional<std::regex>& re) const {
    if (!append_selected()) return false;
    if (std::none_of(entries_.begin(), entries_.end(), [](const Entry& k) { return k.plugin && k.append_formats; })) {
      return false;
    }
    if (!catalog_.sha256.count(kAppendGoldenFile)) return false;
    if (!re) return true;
    std::vector<std::string> names;
    try {
      names = fixtures::read_file_info(catalog_.file(kAppendGoldenFile)).cases;
    } catch (const std::exception&) {
      return true;  // certify_appends reports the unreadable file as an ERROR row
    }
    for (const auto& n : names) {
      for (const char* f : {"bf16", "fp8_fp32", "fp8_ue8m0"}) {
        for (const char* what : {"prefill", "last_valid", "rejected"}) {
          if (std::regex_search(fmt::format("{}/{}/{}/{}", kAppendFamily, n, f, what), *re)) return true;
        }
      }
    }
    return false;
  }

  // Every plug-in with an append entry on the append cases of every cache_boundary golden case,
  // after the attention cases; rows of family cache_append, judged in this process.
  void certify_appends() {
    if (!append_selected()) return;
    std::vector<const Entry*> appenders;
    for (const auto& k : entries_) {
      if (k.plugin && k.append_formats != 0) appenders.push_back(&k);
    }
    if (appenders.empty()) return;
    if (!catalog_.sha256.count(kAppendGoldenFile)) {
      const auto note = fmt::format("plug-in appends not certified: {} is not in the catalog", kAppendGoldenFile);
      cert_.notes.push_back(note);
      progress_ << "warning: " << note << "\n";
      return;
    }
    std::optional<std::regex> re;
    if (o_.case_regex) re.emplace(*o_.case_regex, std::regex::ECMAScript);
    std::vector<fixtures::LayerCase> goldens;
    try {
      fixtures::verify_file(catalog_, kAppendGoldenFile);
      const auto path = catalog_.file(kAppendGoldenFile);
      for (const auto& name : fixtures::read_file_info(path).cases) goldens.push_back(fixtures::load_layer_case(path, name));
    } catch (const std::exception& e) {
      const auto note = fmt::format("plug-in appends not certified: {} cannot be used: {}", kAppendGoldenFile, e.what());
      cert_.notes.push_back(note);
      progress_ << "error: " << note << "\n";
      for (const auto* k : appenders) {
        reports::CaseResult r;
        r.family = kAppendFamily;
        r.file = kAppendGoldenFile;
        r.name = "all";
        r.verdict = Verdict::error;
        r.reasons.push_back(note);
        record(*k, std::move(r));
      }
      save();
      return;
    }
    std::size_t index = 0;
    for (const auto* k : appenders) {
      for (const auto& g : goldens) {
        std::vector<AppendCase> cases;
        try {
          cases = make_append_cases(g, k->append_formats, k->append_scale_fmts, k->info.caps);
        } catch (const std::exception& e) {
          reports::CaseResult r;
          r.family = kAppendFamily;
          r.file = kAppendGoldenFile;
          r.name = g.name;
          r.verdict = Verdict::error;
          r.reasons.push_back(fmt::format("append cases cannot be built: {}", e.what()));
          record(*k, std::move(r));
          continue;
        }
        for (const auto& c : cases) {
          const CaseRef ref{kAppendFamily, kAppendGoldenFile, c.name};
          if (re && !std::regex_search(std::string(kAppendFamily) + "/" + c.name, *re)) continue;
          const auto t0 = Clock::now();
          if (auto kept = previous(*k, ref)) {
            record(*k, std::move(*kept));
            ++kept_;
          } else {
            auto r = base_result(ref);
            r.description = c.description;
            r.shape = c.shape();
            if (k->unavailable) {
              r.verdict = Verdict::skipped;
              r.reasons.push_back(*k->unavailable);
            } else {
              judge_append(c, run_append(*k, c, index++), r);
            }
            record(*k, std::move(r));
          }
          save();
          progress_ << fmt::format("[append] {}/{} {:.2f}s: {}={}\n", kAppendFamily, c.name, seconds_since(t0),
                                   k->info.name, tol::to_string(cert_.kernels[k->report_index].cases.back().verdict));
        }
      }
    }
  }

  AppendRun run_append(const Entry& k, const AppendCase& c, std::size_t index) {
    const auto inputs = work_.path() / fmt::format("append-{}.inputs", index);
    const auto result = work_.path() / fmt::format("append-{}.result", index);
    const auto log = work_.path() / fmt::format("append-{}.log", index);
    AppendRun r;
    try {
      write_append_inputs(inputs, c.in);
    } catch (const std::exception& e) {
      r.message = fmt::format("cannot hand the case to a child process: {}", e.what());
      return r;
    }
    const int repeats = std::max(2, o_.repeats);
    const auto outcome = run_child({self_.string(), "__child", "append", "--plugin", k.ref.plugin->string(), "--inputs",
                                    inputs.string(), "--result", result.string(), "--repeats", std::to_string(repeats)},
                                   o_.timeout_s, log);
    std::error_code ec;
    if (outcome.ok() && fs::exists(result, ec)) {
      try {
        r = read_append_result(result);
      } catch (const std::exception& e) {
        r = AppendRun{};
        r.message = fmt::format("the child's result is unreadable: {}", e.what());
      }
    } else {
      r.message = outcome.ok() ? "the child exited without writing a result" : outcome.describe();
      if (!outcome.stderr_tail.empty()) r.message += "; its last output: " + outcome.stderr_tail;
    }
    fs::remove(inputs, ec);
    fs::remove(result, ec);
    fs::remove(log, ec);
    return r;
  }

  bool probe_worthwhile(const CaseHeader& h) const { return o_.probe_unclaimed && !header_too_large_to_probe(h); }
  static bool header_too_large_to_probe(const CaseHeader& h) { return h.cache_tokens() > kProbeMaxCacheTokens; }

  reports::CaseResult unsupported(const CaseRef& ref, const CaseHeader& h, const std::string& why) const {
    auto r = base_result(ref);
    r.description = h.description;
    r.shape = shape_json(h.shape, h.scale_fmt, nullptr);
    r.verdict = Verdict::unsupported;
    r.reasons.push_back(why);
    return r;
  }

  bool isolated(const Entry& k) const { return k.plugin || o_.isolate || !k.impl; }

  RunResult run_kernel(const Entry& k, const fixtures::AttnCase& c, const fs::path& inputs, bool enforce_caps,
                       std::size_t case_index) {
    // A plug-in is always called at least twice: repeatability is part of its contract.
    const int repeats = k.plugin ? std::max(2, o_.repeats) : o_.repeats;
    if (!isolated(k)) return execute(*k.impl, c.inputs(), repeats, enforce_caps);

    const auto result = work_.path() / fmt::format("case-{}-{}.result", case_index, k.report_index);
    const auto log = work_.path() / fmt::format("case-{}-{}.log", case_index, k.report_index);
    std::vector<std::string> argv{self_.string(), "__child", "run", "--inputs", inputs.string(), "--result",
                                  result.string(), "--repeats", std::to_string(repeats)};
    if (k.ref.plugin) argv.insert(argv.end(), {"--plugin", k.ref.plugin->string()});
    if (k.ref.extra) argv.insert(argv.end(), {"--extra", *k.ref.extra});
    if (k.ref.builtin) argv.insert(argv.end(), {"--kernel", *k.ref.builtin});
    if (!enforce_caps) argv.push_back("--unclaimed");
    const auto outcome = run_child(argv, o_.timeout_s, log);

    RunResult r;
    std::error_code ec;
    if (outcome.ok() && fs::exists(result, ec)) {
      try {
        r = read_result(result);
      } catch (const std::exception& e) {
        r.status = RunResult::Status::error;
        r.message = fmt::format("the child's result is unreadable: {}", e.what());
      }
    } else {
      r.status = RunResult::Status::error;
      r.message = outcome.describe();
      if (outcome.ok()) r.message = "the child exited without writing a result";
      if (!outcome.stderr_tail.empty()) r.message += "; its last output: " + outcome.stderr_tail;
    }
    fs::remove(result, ec);
    fs::remove(log, ec);
    return r;
  }

  reports::CaseResult judged(const Entry& k, const fixtures::AttnCase& c, const CaseRef& ref, const RunResult& run,
                             const std::vector<double>& same_out, const std::vector<double>& same_lse) const {
    auto r = base_result(ref);
    r.description = c.description;
    r.shape = shape_json(c.shape, c.scale_fmt, &c.cache_seqlens);
    r.bytes = run.bytes;
    r.flops = run.flops;
    switch (run.status) {
      case RunResult::Status::unsupported:
        r.verdict = Verdict::unsupported;
        r.reasons.push_back(run.message);
        return r;
      case RunResult::Status::error:
        r.verdict = Verdict::error;
        r.reasons.push_back(run.message);
        return r;
      case RunResult::Status::ran: break;
    }
    r.run_seconds = run.run_seconds;
    try {
      judge(k.info, c, run.outputs, same_out, same_lse, r);
    } catch (const std::exception& e) {
      r.verdict = Verdict::error;
      r.reasons.push_back(fmt::format("the results could not be judged: {}", e.what()));
      return r;
    }
    for (const auto& why : run.reasons) r.reasons.push_back(why);
    r.verdict = r.reasons.empty() ? Verdict::pass : Verdict::fail;
    return r;
  }

  std::string probe_reason(const Entry& k, const fixtures::AttnCase& c, const CaseRef& ref, const RunResult& run,
                           const std::vector<double>& same_out, const std::vector<double>& same_lse) const {
    const auto r = judged(k, c, ref, run, same_out, same_lse);
    switch (r.verdict) {
      case Verdict::pass: return kProbePass;
      case Verdict::fail: return fmt::format("{}would FAIL ({})", kProbePrefix, r.reasons.front());
      case Verdict::unsupported: return fmt::format("{}refused ({})", kProbePrefix, r.reasons.front());
      default: return fmt::format("{}ERROR ({})", kProbePrefix, r.reasons.empty() ? "" : r.reasons.front());
    }
  }

  static void judge(const KernelInfo& info, const fixtures::AttnCase& c, const AttnOutputs& res,
                    const std::vector<double>& same_out, const std::vector<double>& same_lse, reports::CaseResult& r) {
    const auto& s = c.shape;
    const std::vector<int64_t> out_shape{s.batch, s.s_q, s.heads, s.d_v};
    const std::vector<int64_t> lse_shape{s.batch, s.heads, s.s_q};
    if (res.dtype != info.out_dtype) {
      r.reasons.push_back(fmt::format("declared output {} but produced {}", to_string(info.out_dtype), to_string(res.dtype)));
    }
    // An fp64 implementation is held to the truth alone: the bf16 reference is far coarser
    // than it, so an error ratio against it would bound nothing.
    const bool with_ref = res.dtype != OutDType::f64;
    auto ref = [&](const std::vector<double>& v) {
      return with_ref ? std::optional<std::span<const double>>(v) : std::nullopt;
    };
    r.out = tol::judge("out", res.out, c.truth_out, out_shape, tol::tolerance_for(res.dtype, s.cache_format, "out"),
                       ref(same_out));
    r.lse = tol::judge("lse", res.lse, c.truth_lse, lse_shape, tol::tolerance_for(res.dtype, s.cache_format, "lse"),
                       ref(same_lse));
    for (const auto& why : r.out->reasons) r.reasons.push_back("out: " + why);
    for (const auto& why : r.lse->reasons) r.reasons.push_back("lse: " + why);
    if (!c.unquantized_out.empty()) {
      r.out_vs_unquantized = tol::judge("out_vs_unquantized", res.out, c.unquantized_out, out_shape,
                                        tol::lookup("attn.fp8_quantization.info"));
      r.lse_vs_unquantized = tol::judge("lse_vs_unquantized", res.lse, c.unquantized_lse, lse_shape,
                                        tol::lookup("attn.fp8_quantization.info"));
    }
  }

  // Notes are derived from the case results alone, so a resumed run words them identically.
  void update_notes() {
    for (auto& k : cert_.kernels) {
      std::map<std::string, int> handled;
      for (const auto& r : k.cases) {
        if (r.verdict == Verdict::unsupported && r.reasons.size() >= 2 && r.reasons[1] == kProbePass) {
          std::string_view why = r.reasons[0];
          if (why.substr(0, kNotClaimed.size()) == kNotClaimed) why.remove_prefix(kNotClaimed.size());
          ++handled[std::string(why)];
        }
      }
      k.notes.clear();
      if (handled.empty()) continue;
      std::vector<std::string> parts;
      for (const auto& [why, n] : handled) parts.push_back(fmt::format("\"{}\" ({} case{})", why, n, n == 1 ? "" : "s"));
      k.notes.push_back(fmt::format("handles shapes it does not claim (informational runs pass): {}", fmt::join(parts, ", ")));
    }
  }

  void save() {
    try {
      reports::write_certificate(cert_, o_.out);
      reports::write_file_atomically(o_.out / kJunitName, to_junit(cert_));
    } catch (const Error& e) {
      // The run is worth finishing (the summary still reports it); say loudly that the file
      // on disk is behind.
      progress_ << "error: " << e.what() << "\n";
      save_failed_ = true;
    }
  }

  void progress_line(std::size_t i, std::size_t n, const CaseRef& ref, double secs) {
    std::string verdicts;
    for (const auto& k : entries_) {
      const auto& cases = cert_.kernels[k.report_index].cases;
      if (cases.empty()) continue;
      verdicts += fmt::format(" {}={}", k.info.name, tol::to_string(cases.back().verdict));
    }
    progress_ << fmt::format("[{}/{}] {}/{} {:.2f}s:{}\n", i, n, ref.family, ref.name, secs, verdicts);
  }

  struct Previous {
    std::string identity;
    std::map<std::string, std::pair<std::string, reports::CaseResult>> cases;  // key -> (file digest, result)
  };

  const Options& o_;
  std::ostream& progress_;
  WorkDir work_;
  fs::path self_;
  fixtures::Catalog catalog_;
  reports::Certificate cert_;
  std::vector<std::unique_ptr<AttentionImpl>> extras_;
  std::vector<Entry> entries_;
  std::map<std::string, Previous> previous_;
  std::size_t kept_ = 0;
  bool save_failed_ = false;
};

// Certifier self-test kernels: the fp64 reference with one injected fault each, so the tests
// can show that each path of the certifier (ERROR, a repeatability FAIL, UNSUPPORTED) is taken
// when it should be and the run carries on. Never registered.
enum class Fault { throw_in_run, leak_between_runs, bf16_cache_only };

class FaultyPrepared : public PreparedAttention {
 public:
  FaultyPrepared(std::unique_ptr<PreparedAttention> inner, Fault f) : inner_(std::move(inner)), fault_(f) {}
  void run() override {
    if (fault_ == Fault::throw_in_run) throw Error("injected failure in run()");
    inner_->run();
    ++runs_;
  }
  AttnOutputs results() override {
    auto r = inner_->results();
    // State carried from one call into the next (FIELD-NOTES bug 12): from the second run
    // on, one output element is NaN.
    if (fault_ == Fault::leak_between_runs && runs_ > 1 && !r.out.empty()) {
      r.out.front() = std::numeric_limits<double>::quiet_NaN();
    }
    return r;
  }
  void synchronize() override { inner_->synchronize(); }

 private:
  std::unique_ptr<PreparedAttention> inner_;
  Fault fault_;
  int runs_ = 0;
};

class FaultyKernel : public AttentionImpl {
 public:
  FaultyKernel(const AttentionImpl& inner, Fault f, std::string name, std::string description)
      : inner_(inner), fault_(f) {
    info_ = inner.info();
    info_.name = std::move(name);
    info_.description = std::move(description);
    if (f == Fault::bf16_cache_only) info_.caps.cache_formats = {CacheFormat::bf16};
  }
  const KernelInfo& info() const override { return info_; }
  std::optional<std::string> unavailable() const override { return inner_.unavailable(); }
  std::unique_ptr<PreparedAttention> prepare(const AttnInputs& in) const override {
    return std::make_unique<FaultyPrepared>(inner_.prepare(in), fault_);
  }

 private:
  const AttentionImpl& inner_;
  Fault fault_;
  KernelInfo info_;
};

std::unique_ptr<AttentionImpl> faulty(Fault f, std::string name, std::string description) {
  register_builtin_kernels();
  const auto* base = Registry::instance().find("cpu_mla_fp64");
  if (!base) throw Error("self-test kernels wrap cpu_mla_fp64, which is not registered");
  return std::make_unique<FaultyKernel>(*base, f, std::move(name), std::move(description));
}

}  // namespace

const std::vector<std::string>& attention_families() {
  static const std::vector<std::string> f{"attn_core", "attn_fp8", "attn_sparse", "attn_stress"};
  return f;
}

std::vector<std::string> extra_kernel_names() { return {"dropped_last", "throws", "leaky", "bf16_only"}; }

std::unique_ptr<AttentionImpl> make_extra_kernel(const std::string& name) {
  if (name == "dropped_last") return make_dropped_last_token_kernel();
  if (name == "throws") {
    return faulty(Fault::throw_in_run, "selftest_throws", "cpu_mla_fp64 whose run() throws (certifier self-test)");
  }
  if (name == "leaky") {
    return faulty(Fault::leak_between_runs, "selftest_leaky",
                  "cpu_mla_fp64 whose second run returns a NaN (certifier self-test)");
  }
  if (name == "bf16_only") {
    return faulty(Fault::bf16_cache_only, "selftest_bf16_only",
                  "cpu_mla_fp64 claiming the bf16 cache only (certifier self-test)");
  }
  throw UsageError(fmt::format("unknown extra kernel '{}' (known: {})", name, fmt::join(extra_kernel_names(), ", ")));
}

void check_writable_folder(const std::filesystem::path& dir) {
  if (dir.empty()) throw UsageError("--out is required");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UsageError(fmt::format("report folder {} cannot be created: {}", dir.string(), ec.message()));
  if (!fs::is_directory(dir, ec)) throw UsageError(fmt::format("report folder {} is not a folder", dir.string()));
  // Creating a file is the only reliable test (permissions, read-only mounts, quotas, root).
  const auto probe = dir / fmt::format(".mla-write-test.{}", ::getpid());
  {
    std::ofstream out(probe);
    out << "probe\n";
    out.flush();
    if (!out) {
      fs::remove(probe, ec);
      throw UsageError(fmt::format("report folder {} is not writable", dir.string()));
    }
  }
  fs::remove(probe, ec);
}

std::string tolerance_table_digest() {
  json all = json::array();
  for (const auto& t : tol::table()) all.push_back(tol::to_json(t));
  const auto text = all.dump();
  return sha256_hex({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

reports::Certificate run(const Options& options, std::ostream& progress) {
  if (options.out.empty()) throw UsageError("--out is required");
  if (options.repeats < 1) throw UsageError("--repeat must be at least 1");
  if (!(options.timeout_s > 0)) throw UsageError("--timeout must be positive");
  Run r(options, progress);
  auto cert = r.go();
  if (r.save_failed()) throw Error(fmt::format("the certificate could not be written to {}", options.out.string()));
  return cert;
}

}  // namespace mla::certify
