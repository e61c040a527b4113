// Coverage of an implementation's rows: what was judged, what its claims leave out, and the
// ranges of the selected cases beside the claimed and the passed ones.
#include "mla/reports/coverage.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/kernel.hpp"

namespace mla::reports {
namespace {

using nlohmann::json;
using tol::Verdict;

std::optional<int64_t> int_of(const json& shape, const char* key) {
  if (!shape.is_object() || !shape.contains(key) || !shape.at(key).is_number_integer()) return std::nullopt;
  return shape.at(key).get<int64_t>();
}
std::optional<std::string> str_of(const json& shape, const char* key) {
  if (!shape.is_object() || !shape.contains(key) || !shape.at(key).is_string()) return std::nullopt;
  return shape.at(key).get<std::string>();
}
// The cached lengths of a case when it was loaded (the attributes alone do not have them).
std::optional<std::pair<int64_t, int64_t>> lengths_of(const json& shape) {
  if (!shape.is_object() || !shape.contains("cache_seqlens") || !shape.at("cache_seqlens").is_array()) return std::nullopt;
  std::optional<std::pair<int64_t, int64_t>> r;
  for (const auto& v : shape.at("cache_seqlens")) {
    if (!v.is_number_integer()) return std::nullopt;
    const int64_t x = v.get<int64_t>();
    r = r ? std::pair{std::min(r->first, x), std::max(r->second, x)} : std::pair{x, x};
  }
  return r;
}

// Whether `k` has the decode entry, whose capabilities the decode dimensions describe (a
// certificate that does not record the kinds held decode kernels only).
bool decodes(const KernelReport& k) {
  return k.kinds.empty() || std::find(k.kinds.begin(), k.kinds.end(), "decode") != k.kinds.end();
}

std::optional<Capabilities> claims_of(const KernelReport& k) {
  if (!decodes(k) || !k.origin.is_object() || !k.origin.contains("capabilities")) return std::nullopt;
  try {
    return capabilities_from_json(k.origin.at("capabilities"));
  } catch (const std::exception&) {
    return std::nullopt;  // a certificate from another build: the counts still hold
  }
}

// A numeric range over rows, shown "1–128" (or "64" when one value).
struct Span {
  std::optional<int64_t> lo, hi;
  void add(int64_t v) {
    lo = lo ? std::min(*lo, v) : v;
    hi = hi ? std::max(*hi, v) : v;
  }
  std::string text() const {
    if (!lo) return "-";
    return *lo == *hi ? std::to_string(*lo) : fmt::format("{}–{}", *lo, *hi);
  }
};
// A set of words or numbers over rows, shown "16, 64".
template <class T>
std::string listed(const std::set<T>& s) {
  return s.empty() ? std::string("-") : fmt::format("{}", fmt::join(s, ", "));
}

// The dimensions a row is described by, read from its shape.
struct RowFacts {
  std::optional<std::string> format;
  std::optional<bool> sparse;
  std::optional<int64_t> heads, s_q, page;
  std::optional<std::pair<int64_t, int64_t>> lengths;
};
RowFacts facts_of(const CaseResult& r) {
  RowFacts f;
  f.format = str_of(r.shape, "cache_format");
  if (auto k = int_of(r.shape, "topk")) f.sparse = *k > 0;
  f.heads = int_of(r.shape, "heads");
  f.s_q = int_of(r.shape, "s_q");
  f.page = int_of(r.shape, "page_size");
  f.lengths = lengths_of(r.shape);
  return f;
}

struct Ranges {
  std::set<std::string> formats, kinds;
  Span heads, s_q, lengths;
  std::set<int64_t> pages;
  void add(const RowFacts& f) {
    if (f.format) formats.insert(*f.format);
    if (f.sparse) kinds.insert(*f.sparse ? "sparse" : "dense");
    if (f.heads) heads.add(*f.heads);
    if (f.s_q) s_q.add(*f.s_q);
    if (f.page) pages.insert(*f.page);
    if (f.lengths) lengths.add(f.lengths->first), lengths.add(f.lengths->second);
  }
};

// The dimensions of a kernel without the decode entry (prefill, merge, top-k, indexer append),
// from the shapes its rows record and the capabilities it declared: only those its rows have.
std::vector<Coverage::Row> other_kind_table(const KernelReport& k) {
  const json caps = k.origin.is_object() && k.origin.contains("capabilities") ? k.origin.at("capabilities") : json{};
  Span heads, heads_ok, total_q, total_q_ok, total_k, total_k_ok;
  std::set<std::string> calls, calls_ok, dtypes, dtypes_ok, fmts, fmts_ok;
  std::set<int64_t> dims, dims_ok, ks, ks_ok, blocks, blocks_ok;
  Span row_n, row_n_ok;
  for (const auto& r : k.cases) {
    const bool ok = r.verdict == Verdict::pass;
    const auto add_span = [&](const char* key, Span& all, Span& passed) {
      if (auto v = int_of(r.shape, key)) {
        all.add(*v);
        if (ok) passed.add(*v);
      }
    };
    add_span("heads", heads, heads_ok);
    add_span("total_q", total_q, total_q_ok);
    add_span("total_k", total_k, total_k_ok);
    if (r.shape.is_object() && r.shape.contains("causal") && r.shape.at("causal").is_boolean()) {
      const std::string call = r.shape.at("causal").get<bool>() ? "causal" : "non-causal";
      calls.insert(call);
      if (ok) calls_ok.insert(call);
    }
    if (auto d = str_of(r.shape, "dtype")) dtypes.insert(*d), ok ? (void)dtypes_ok.insert(*d) : void();
    if (auto d = int_of(r.shape, "head_dim")) dims.insert(*d), ok ? (void)dims_ok.insert(*d) : void();
    if (auto v = int_of(r.shape, "k")) ks.insert(*v), ok ? (void)ks_ok.insert(*v) : void();
    if (auto v = int_of(r.shape, "block_size")) blocks.insert(*v), ok ? (void)blocks_ok.insert(*v) : void();
    if (auto f = str_of(r.shape, "scale_fmt")) fmts.insert(*f), ok ? (void)fmts_ok.insert(*f) : void();
    add_span("n", row_n, row_n_ok);
  }
  const auto claimed = [&](const char* key) -> std::string {
    if (!caps.is_object() || !caps.contains(key)) return "-";
    const auto& v = caps.at(key);
    if (v.is_array()) {
      // Each element as it reads: a string's text, a number's digits (joining the json values
      // themselves would read every one as a string).
      std::vector<std::string> items;
      for (const auto& x : v) items.push_back(x.is_string() ? x.get<std::string>() : x.dump());
      return items.empty() ? "any" : fmt::format("{}", fmt::join(items, ", "));
    }
    return v.dump();
  };
  std::vector<Coverage::Row> t;
  if (heads.lo) {
    const std::string c = caps.is_object() && caps.contains("min_heads") && caps.contains("max_heads")
                              ? fmt::format("{}–{}", caps.at("min_heads").dump(), caps.at("max_heads").dump())
                              : "any";
    t.push_back({"heads", heads.text(), c, heads_ok.text()});
  }
  if (!calls.empty()) {
    std::set<std::string> c;
    if (caps.is_object() && caps.value("causal", false)) c.insert("causal");
    if (caps.is_object() && caps.value("non_causal", false)) c.insert("non-causal");
    t.push_back({"calls", listed(calls), listed(c), listed(calls_ok)});
  }
  const std::string max_tokens = claimed("max_total_tokens") == "-" ? "-" : "≤ " + claimed("max_total_tokens");
  if (total_q.lo) t.push_back({"query rows per call", total_q.text(), max_tokens, total_q_ok.text()});
  if (total_k.lo) t.push_back({"key rows per call", total_k.text(), max_tokens, total_k_ok.text()});
  if (!dtypes.empty()) t.push_back({"state dtypes", listed(dtypes), claimed("dtypes"), listed(dtypes_ok)});
  if (!dims.empty()) t.push_back({"head dims", listed(dims), claimed("head_dims"), listed(dims_ok)});
  if (!ks.empty()) t.push_back({"k (indices per row)", listed(ks), claimed("ks"), listed(ks_ok)});
  if (!fmts.empty()) t.push_back({"scale formats", listed(fmts), claimed("scale_fmts"), listed(fmts_ok)});
  if (!blocks.empty()) t.push_back({"block sizes", listed(blocks), claimed("block_sizes"), listed(blocks_ok)});
  if (row_n.lo) {
    const std::string c = claimed("max_n") == "-" || claimed("max_n") == "0" ? "any" : "≤ " + claimed("max_n");
    t.push_back({"logits per row", row_n.text(), c, row_n_ok.text()});
  }
  return t;
}

bool size_filtered(const CaseResult& r) {
  return r.verdict == Verdict::skipped && r.cause == Cause::over_max_tokens;
}

}  // namespace

Coverage coverage(const KernelReport& k) {
  Coverage c;
  const auto claims = claims_of(k);
  Ranges catalog, passed;
  // What excludes each NOT_CLAIMED row, in a fixed order of dimensions.
  std::set<std::string> formats_out, kinds_out;
  std::optional<int64_t> heads_above, heads_below, s_q_above, s_q_below;
  std::set<int64_t> pages_out;
  bool varlen_out = false;
  int unexplained = 0;
  for (const auto& r : k.cases) {
    ++c.cases;
    const auto f = facts_of(r);
    catalog.add(f);
    switch (r.verdict) {
      case Verdict::pass: ++c.passed, ++c.judged, passed.add(f); break;
      case Verdict::fail:
      case Verdict::error: ++c.judged; break;
      case Verdict::unsupported: ++c.unsupported; break;
      case Verdict::skipped:
        ++c.skipped;
        if (size_filtered(r)) ++c.size_filtered;
        break;
      case Verdict::host_error: ++c.host_error; break;
      case Verdict::not_claimed: {
        ++c.not_claimed;
        bool explained = false;
        if (claims) {
          const auto& cl = *claims;
          if (f.format && std::none_of(cl.cache_formats.begin(), cl.cache_formats.end(),
                                       [&](CacheFormat x) { return to_string(x) == *f.format; })) {
            formats_out.insert(*f.format), explained = true;
          }
          if (f.sparse && *f.sparse && !cl.sparse) kinds_out.insert("sparse"), explained = true;
          if (f.sparse && !*f.sparse && !cl.dense) kinds_out.insert("dense"), explained = true;
          if (f.heads && *f.heads > cl.max_heads) heads_above = cl.max_heads, explained = true;
          if (f.heads && *f.heads < cl.min_heads) heads_below = cl.min_heads, explained = true;
          if (f.s_q && *f.s_q > cl.max_s_q) s_q_above = cl.max_s_q, explained = true;
          if (f.s_q && *f.s_q < cl.min_s_q) s_q_below = cl.min_s_q, explained = true;
          if (f.page && !cl.page_sizes.empty() &&
              std::find(cl.page_sizes.begin(), cl.page_sizes.end(), *f.page) == cl.page_sizes.end()) {
            pages_out.insert(*f.page), explained = true;
          }
          if (!cl.varlen && f.lengths && f.lengths->first != f.lengths->second) varlen_out = true, explained = true;
        }
        if (!explained) ++unexplained;
        break;
      }
    }
  }
  for (const auto& x : formats_out) c.claims_exclude.push_back(x);
  for (const auto& x : kinds_out) c.claims_exclude.push_back(x);
  if (heads_above) c.claims_exclude.push_back(fmt::format("heads > {}", *heads_above));
  if (heads_below) c.claims_exclude.push_back(fmt::format("heads < {}", *heads_below));
  if (s_q_above) c.claims_exclude.push_back(fmt::format("s_q > {}", *s_q_above));
  if (s_q_below) c.claims_exclude.push_back(fmt::format("s_q < {}", *s_q_below));
  for (const auto p : pages_out) c.claims_exclude.push_back(fmt::format("page {}", p));
  if (varlen_out) c.claims_exclude.push_back("variable lengths");
  if (unexplained > 0) c.claims_exclude.push_back(fmt::format("{} by its own refusal", unexplained));

  if (!decodes(k)) {
    c.table = other_kind_table(k);
    return c;
  }
  std::string claimed_formats = "-", claimed_kinds = "-", claimed_heads = "-", claimed_s_q = "-", claimed_pages = "-",
              claimed_lengths = "-";
  if (claims) {
    std::set<std::string> fs;
    for (auto x : claims->cache_formats) fs.insert(to_string(x));
    claimed_formats = listed(fs);
    std::set<std::string> ks;
    if (claims->dense) ks.insert("dense");
    if (claims->sparse) ks.insert("sparse");
    claimed_kinds = listed(ks);
    claimed_heads = fmt::format("{}–{}", claims->min_heads, claims->max_heads);
    claimed_s_q = fmt::format("{}–{}", claims->min_s_q, claims->max_s_q);
    claimed_pages = claims->page_sizes.empty() ? "any" : fmt::format("{}", fmt::join(claims->page_sizes, ", "));
    claimed_lengths = claims->varlen ? "any, varying per sequence" : "any, equal per batch";
  }
  c.table = {
      {"cache formats", listed(catalog.formats), claimed_formats, listed(passed.formats)},
      {"attention", listed(catalog.kinds), claimed_kinds, listed(passed.kinds)},
      {"heads", catalog.heads.text(), claimed_heads, passed.heads.text()},
      {"s_q", catalog.s_q.text(), claimed_s_q, passed.s_q.text()},
      {"page sizes", listed(catalog.pages), claimed_pages, listed(passed.pages)},
      {"cached tokens per sequence", catalog.lengths.text(), claimed_lengths, passed.lengths.text()},
  };
  return c;
}

std::string kernel_verdict(const KernelReport& k, bool run_complete) {
  const auto n = count(k);
  if (n.fail > 0 || n.error > 0) return "FAIL";
  if (n.host_error > 0 || !run_complete) return "INCOMPLETE";
  if (n.pass > 0) return "PASS";
  if (n.skipped > 0) return "SKIPPED";
  if (n.not_claimed > 0) return "NOT_CLAIMED";
  if (n.unsupported > 0) return "UNSUPPORTED";
  return "EMPTY";
}

std::string headline(const KernelReport& k, bool run_complete) {
  const auto c = coverage(k);
  const auto n = count(k);
  const std::string verdict = kernel_verdict(k, run_complete);
  std::string s;
  if (verdict == "PASS") s = fmt::format("PASS on {} of {} cases", n.pass, c.cases);
  else if (verdict == "FAIL") s = fmt::format("FAIL on {} of {} cases ({} passed)", n.fail + n.error, c.cases, n.pass);
  else if (verdict == "INCOMPLETE") s = fmt::format("INCOMPLETE: {} passed of {} cases recorded", n.pass, c.cases);
  else if (verdict == "EMPTY") s = "no case of the selection";
  else s = fmt::format("{} ({} cases, none judged)", verdict, c.cases);
  std::vector<std::string> more;
  const auto broken = std::count_if(k.cases.begin(), k.cases.end(), [](const CaseResult& r) { return r.cause == Cause::broken_claim; });
  if (broken > 0) {
    more.push_back(broken == n.fail + n.error && n.pass == 0
                       ? fmt::format("it refused every one of the {} cases it claims", broken)
                       : fmt::format("{} claimed case{} refused at run time", broken, broken == 1 ? "" : "s"));
  }
  if (!c.claims_exclude.empty()) more.push_back(fmt::format("claims exclude: {}", fmt::join(c.claims_exclude, ", ")));
  if (c.unsupported > 0) more.push_back(fmt::format("{} refused at run time", c.unsupported));
  if (c.skipped > c.size_filtered && verdict != "SKIPPED") more.push_back(fmt::format("{} skipped", c.skipped - c.size_filtered));
  if (c.size_filtered > 0) more.push_back(fmt::format("{} over --max-tokens", c.size_filtered));
  if (c.host_error > 0) more.push_back(fmt::format("{} HOST_ERROR, to be rerun", c.host_error));
  if (!run_complete) more.push_back("run not finished");
  if (!more.empty()) s += fmt::format(" ({})", fmt::join(more, "; "));
  return s;
}

}  // namespace mla::reports
