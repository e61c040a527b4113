#include "certifier.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "case_index.hpp"
#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/fixtures/golden.hpp"
#include "mla/kernels/perturbed.hpp"
#include "mla/kernels/registry.hpp"

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

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Selected {
  const AttentionImpl* impl = nullptr;
  std::size_t report_index = 0;
};

nlohmann::json shape_json(const AttnShape& s, const std::string& scale_fmt,
                          const std::vector<int32_t>* seqlens) {
  nlohmann::json j = {{"batch", s.batch},         {"s_q", s.s_q},
                      {"heads", s.heads},         {"page_size", s.page_size},
                      {"num_blocks", s.num_blocks}, {"max_blocks", s.max_blocks},
                      {"topk", s.topk},           {"causal", s.causal},
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

// Bitwise, so that NaN payloads and signed zeros count too: run() must be repeatable exactly.
std::optional<std::string> first_difference(const std::vector<double>& a, const std::vector<double>& b,
                                            const char* what) {
  if (a.size() != b.size()) return fmt::format("{} has {} elements on one run and {} on another", what, a.size(), b.size());
  int64_t n = 0, first = -1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) {
      if (n++ == 0) first = static_cast<int64_t>(i);
    }
  }
  if (n == 0) return std::nullopt;
  return fmt::format("{} differs between repeated runs at {} elements, first flat index {} ({} vs {})", what, n,
                     first, a[first], b[first]);
}

class Run {
 public:
  Run(const Options& o, std::ostream& progress) : o_(o), progress_(progress) {}

  reports::Certificate go() {
    const auto t_start = Clock::now();
    cert_.tool_version = MLA_VERSION;
    cert_.started_utc = reports::utc_now_iso8601();
    cert_.machine = reports::detect_machine(o_.goldens);
    cert_.build = {{"compiler", __VERSION__}, {"build_type", MLA_BUILD_TYPE}};
    cert_.goldens_dir = std::filesystem::absolute(o_.goldens).lexically_normal().string();
    cert_.options = options_json();

    fixtures::Catalog catalog;
    try {
      catalog = fixtures::open_catalog(o_.goldens);
    } catch (const Error& e) {
      throw UsageError(fmt::format("the golden catalog in {} cannot be used: {}", o_.goldens.string(), e.what()));
    }
    cert_.manifest = catalog.sha256;

    select_kernels();
    const auto cases = select_cases(catalog);
    progress_ << fmt::format("mla-certify: {} implementations x {} cases from {}\n", selected_.size(), cases.size(),
                             cert_.goldens_dir);

    for (std::size_t i = 0; i < cases.size(); ++i) {
      const auto t_case = Clock::now();
      certify_case(catalog, cases[i]);
      cert_.wall_seconds = seconds_since(t_start);
      save();
      progress_line(i + 1, cases.size(), cases[i], seconds_since(t_case));
    }
    cert_.complete = true;
    cert_.finished_utc = reports::utc_now_iso8601();
    cert_.wall_seconds = seconds_since(t_start);
    save();
    return std::move(cert_);
  }

 private:
  struct CaseRef {
    std::string family, file, name;
  };

  nlohmann::json options_json() const {
    nlohmann::json j = {{"kernels", o_.kernels}, {"families", o_.families}, {"extras", o_.extras},
                        {"repeats", o_.repeats}};
    j["case_regex"] = o_.case_regex ? nlohmann::json(*o_.case_regex) : nlohmann::json();
    j["max_tokens"] = o_.max_tokens ? nlohmann::json(*o_.max_tokens) : nlohmann::json();
    return j;
  }

  void select_kernels() {
    register_builtin_kernels();
    std::vector<const AttentionImpl*> pool;
    for (const auto& k : Registry::instance().attention()) pool.push_back(k.get());
    for (const auto& name : o_.extras) {
      extras_.push_back(make_extra_kernel(name));
      pool.push_back(extras_.back().get());
    }
    std::set<std::string> known;
    for (const auto* k : pool) known.insert(k->info().name);
    for (const auto& want : o_.kernels) {
      if (!known.count(want)) {
        throw UsageError(fmt::format("no implementation named '{}' (known: {})", want, fmt::join(known, ", ")));
      }
    }
    for (const auto* k : pool) {
      if (!o_.kernels.empty() &&
          std::find(o_.kernels.begin(), o_.kernels.end(), k->info().name) == o_.kernels.end()) {
        continue;
      }
      reports::KernelReport r;
      r.name = k->info().name;
      r.backend = k->info().backend;
      r.description = k->info().description;
      r.out_dtype = to_string(k->info().out_dtype);
      try {
        r.unavailable = k->unavailable();
      } catch (const std::exception& e) {
        r.unavailable = fmt::format("unavailable() threw: {}", e.what());
      }
      selected_.push_back({k, cert_.kernels.size()});
      cert_.kernels.push_back(std::move(r));
    }
    if (selected_.empty()) throw UsageError("no implementation selected");
  }

  std::vector<CaseRef> select_cases(const fixtures::Catalog& catalog) {
    const auto& all = attention_families();
    for (const auto& f : o_.families) {
      if (std::find(all.begin(), all.end(), f) == all.end()) {
        throw UsageError(fmt::format("unknown family '{}' (attention families: {})", f, fmt::join(all, ", ")));
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
      if (!catalog.sha256.count(file)) {
        const auto note = fmt::format("family {} is not in the catalog ({} missing from MANIFEST.sha256)", family, file);
        if (!o_.families.empty()) throw UsageError(note);
        cert_.notes.push_back(note);
        progress_ << "warning: " << note << "\n";
        continue;
      }
      fixtures::FileInfo info;
      try {
        info = fixtures::read_file_info(catalog.file(file));
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
    if (out.empty()) throw UsageError("the selection matches no attention case");
    return out;
  }

  void record(const Selected& k, reports::CaseResult r) { cert_.kernels[k.report_index].cases.push_back(std::move(r)); }

  reports::CaseResult base_result(const CaseRef& ref) const {
    reports::CaseResult r;
    r.family = ref.family;
    r.file = ref.file;
    r.name = ref.name;
    return r;
  }

  void certify_case(const fixtures::Catalog& catalog, const CaseRef& ref) {
    const auto path = catalog.file(ref.file);
    CaseHeader header;
    try {
      header = read_case_header(path, ref.name);
    } catch (const std::exception& e) {
      for (const auto& k : selected_) {
        auto r = base_result(ref);
        r.verdict = Verdict::error;
        r.reasons.push_back(fmt::format("case attributes unreadable: {}", e.what()));
        record(k, std::move(r));
      }
      return;
    }

    // Decide everything that does not need the arrays first, so a case no implementation can
    // run is never loaded.
    std::vector<const Selected*> runnable;
    for (const auto& k : selected_) {
      auto r = base_result(ref);
      r.description = header.description;
      r.shape = shape_json(header.shape, header.scale_fmt, nullptr);
      try {
        if (auto why = k.impl->unavailable()) {
          r.verdict = Verdict::skipped;
          r.reasons.push_back(*why);
        } else if (o_.max_tokens && header.cache_tokens() > *o_.max_tokens) {
          r.verdict = Verdict::skipped;
          r.reasons.push_back(fmt::format("cache of {} tokens > --max-tokens {}", header.cache_tokens(), *o_.max_tokens));
        } else if (auto no = k.impl->check(header.shape)) {
          r.verdict = Verdict::unsupported;
          r.reasons.push_back(*no);
        } else {
          runnable.push_back(&k);
          continue;
        }
      } catch (const std::exception& e) {
        // A capability query that throws is a defect of the implementation, not of the run.
        r.verdict = Verdict::error;
        r.reasons.push_back(fmt::format("exception from unavailable()/check(): {}", e.what()));
      }
      record(k, std::move(r));
    }
    if (runnable.empty()) return;

    fixtures::AttnCase c;
    try {
      c = fixtures::load_attn_case(path, ref.name);
    } catch (const std::exception& e) {
      for (const auto* k : runnable) {
        auto r = base_result(ref);
        r.description = header.description;
        r.shape = shape_json(header.shape, header.scale_fmt, nullptr);
        r.verdict = Verdict::error;
        r.reasons.push_back(fmt::format("case failed to load: {}", e.what()));
        record(*k, std::move(r));
      }
      return;
    }
    // The same-dtype reference is widened once per case, not per implementation.
    const auto same_out = widen(c.same_dtype_out);
    const auto same_lse = widen(c.same_dtype_lse);
    for (const auto* k : runnable) record(*k, certify_one(*k->impl, c, ref, same_out, same_lse));
  }

  reports::CaseResult certify_one(const AttentionImpl& impl, const fixtures::AttnCase& c, const CaseRef& ref,
                                  const std::vector<double>& same_out, const std::vector<double>& same_lse) {
    auto r = base_result(ref);
    r.description = c.description;
    r.shape = shape_json(c.shape, c.scale_fmt, &c.cache_seqlens);
    const auto inputs = c.inputs();
    try {
      // The loaded shape is authoritative; it only differs from the header if the file is
      // inconsistent, which the loader would have refused.
      if (auto no = impl.check(c.shape)) {
        r.verdict = Verdict::unsupported;
        r.reasons.push_back(*no);
        return r;
      }
      const auto cost = impl.cost(inputs);
      r.bytes = cost.bytes;
      r.flops = cost.flops;
      std::unique_ptr<PreparedAttention> prepared;
      try {
        prepared = impl.prepare(inputs);
      } catch (const UnsupportedError& e) {
        // check() accepted the shape but prepare() refused it: still not a wrong answer, but
        // say so, since check() should have known (FIELD-NOTES bug 9: no silent routing).
        r.verdict = Verdict::unsupported;
        r.reasons.push_back(fmt::format("prepare refused a shape check() accepted: {}", e.what()));
        return r;
      }
      AttnOutputs first;
      double best = std::numeric_limits<double>::infinity();
      std::vector<std::string> repeat_reasons;
      for (int rep = 0; rep < std::max(1, o_.repeats); ++rep) {
        const auto t0 = Clock::now();
        prepared->run();
        prepared->synchronize();
        best = std::min(best, seconds_since(t0));
        auto res = prepared->results();
        if (rep == 0) {
          first = std::move(res);
        } else if (repeat_reasons.empty()) {
          // FIELD-NOTES bug 12: state leaking from one call into the next.
          if (auto d = first_difference(first.out, res.out, "out")) repeat_reasons.push_back(*d);
          if (auto d = first_difference(first.lse, res.lse, "lse")) repeat_reasons.push_back(*d);
        }
      }
      r.run_seconds = best;
      judge(impl, c, first, same_out, same_lse, r);
      for (auto& why : repeat_reasons) r.reasons.push_back(std::move(why));
      r.verdict = r.reasons.empty() ? Verdict::pass : Verdict::fail;
    } catch (const std::exception& e) {
      r.verdict = Verdict::error;
      r.reasons.push_back(fmt::format("exception: {}", e.what()));
    } catch (...) {
      r.verdict = Verdict::error;
      r.reasons.push_back("exception of unknown type");
    }
    return r;
  }

  static void judge(const AttentionImpl& impl, const fixtures::AttnCase& c, const AttnOutputs& res,
                    const std::vector<double>& same_out, const std::vector<double>& same_lse,
                    reports::CaseResult& r) {
    const auto& s = c.shape;
    const std::vector<int64_t> out_shape{s.batch, s.s_q, s.heads, s.d_v};
    const std::vector<int64_t> lse_shape{s.batch, s.heads, s.s_q};
    if (res.dtype != impl.info().out_dtype) {
      r.reasons.push_back(fmt::format("declared output {} but produced {}", to_string(impl.info().out_dtype),
                                      to_string(res.dtype)));
    }
    // An fp64 implementation is held to the truth alone: the bf16 reference is far coarser
    // than it, so an error ratio against it would bound nothing.
    const bool with_ref = res.dtype != OutDType::f64;
    auto ref = [&](const std::vector<double>& v) {
      return with_ref ? std::optional<std::span<const double>>(v) : std::nullopt;
    };
    r.out = tol::judge("out", res.out, c.truth_out, out_shape,
                       tol::tolerance_for(res.dtype, s.cache_format, "out"), ref(same_out));
    r.lse = tol::judge("lse", res.lse, c.truth_lse, lse_shape,
                       tol::tolerance_for(res.dtype, s.cache_format, "lse"), ref(same_lse));
    for (const auto& why : r.out->reasons) r.reasons.push_back("out: " + why);
    for (const auto& why : r.lse->reasons) r.reasons.push_back("lse: " + why);
    if (!c.unquantized_out.empty()) {
      r.out_vs_unquantized = tol::judge("out_vs_unquantized", res.out, c.unquantized_out, out_shape,
                                        tol::lookup("attn.fp8_quantization.info"));
      r.lse_vs_unquantized = tol::judge("lse_vs_unquantized", res.lse, c.unquantized_lse, lse_shape,
                                        tol::lookup("attn.fp8_quantization.info"));
    }
  }

  void save() {
    try {
      reports::write_certificate(cert_, o_.out);
    } catch (const Error& e) {
      // The run is worth finishing (the summary still reports it); say loudly that the file
      // on disk is behind.
      progress_ << "error: " << e.what() << "\n";
      save_failed_ = true;
    }
  }

  void progress_line(std::size_t i, std::size_t n, const CaseRef& ref, double secs) {
    std::string verdicts;
    for (const auto& k : selected_) {
      const auto& cases = cert_.kernels[k.report_index].cases;
      if (cases.empty()) continue;
      verdicts += fmt::format(" {}={}", cert_.kernels[k.report_index].name, tol::to_string(cases.back().verdict));
    }
    progress_ << fmt::format("[{}/{}] {}/{} {:.2f}s:{}\n", i, n, ref.family, ref.name, secs, verdicts);
  }

  const Options& o_;
  std::ostream& progress_;
  reports::Certificate cert_;
  std::vector<std::unique_ptr<AttentionImpl>> extras_;
  std::vector<Selected> selected_;
  bool save_failed_ = false;

 public:
  bool save_failed() const { return save_failed_; }
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

reports::Certificate run(const Options& options, std::ostream& progress) {
  if (options.out.empty()) throw UsageError("--out is required");
  if (options.repeats < 1) throw UsageError("--repeat must be at least 1");
  Run r(options, progress);
  auto cert = r.go();
  if (r.save_failed()) throw Error(fmt::format("the certificate could not be written to {}", options.out.string()));
  return cert;
}

}  // namespace mla::certify
