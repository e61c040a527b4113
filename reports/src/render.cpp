// Renderings of a certificate for people: Markdown (the full record, one table per
// implementation) and the one-screen summary.
#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "mla/reports/certificate.hpp"
#include "mla/reports/coverage.hpp"

namespace mla::reports {
namespace {

std::string sci(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return "0";
  return fmt::format("{:.2e}", x);
}

// Markdown table cells must not contain a bare '|' or a newline.
std::string cell(std::string s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|') out += "\\|";
    else if (ch == '\n') out += ' ';
    else out += ch;
  }
  return out;
}

std::string shorten(const std::string& s, std::size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

// The summary is for a terminal: no line longer than this.
constexpr std::size_t kSummaryWidth = 150;

bool ran(const CaseResult& r) { return !judged_comparisons(r).empty(); }

// How close a case came to failing: the largest bound use of its comparisons (out and lse, or
// an append's latent and k_pe).
double bound_use(const CaseResult& r) {
  double u = 0;
  for (const auto* c : judged_comparisons(r)) u = std::max(u, c->max_bound_use);
  return u;
}

std::string first_reason(const CaseResult& r) {
  return r.reasons.empty() ? std::string("(no reason recorded)") : r.reasons.front();
}

// One line per red case for the summary: where it went wrong and by how much, from the
// structured metrics (a full reason is too long for a screen; the certificate has it).
std::string compact_reason(const CaseResult& r) {
  std::vector<std::string> parts;
  for (const auto* c : judged_comparisons(r)) {
    if (c->verdict == tol::Verdict::pass) continue;
    const auto& m = *c;
    std::string p = fmt::format("{} {}/{} bad", m.what, m.elements_failed, m.numel);
    if (m.nan_mismatch + m.inf_mismatch > 0) p += fmt::format(" ({} NaN/Inf mask)", m.nan_mismatch + m.inf_mismatch);
    if (!m.max_abs_index.empty()) p += fmt::format(", max err {} @ {}", sci(m.max_abs_err), tol::format_index(m.max_abs_index));
    if (m.elements_failed == 0) p += fmt::format(", cos diff {}", sci(m.cos_diff));
    parts.push_back(p);
  }
  // Reasons the comparisons above do not hold (repeatability, a dtype lie, a kernel's message)
  // are kept in full; those they hold are the very strings the judge wrote from them.
  std::set<std::string> summarized;
  for (const auto* c : judged_comparisons(r)) {
    for (const auto& why : c->reasons) summarized.insert(tol::row_reason(*c, why));
  }
  for (const auto& why : r.reasons) {
    if (!summarized.count(why)) parts.push_back(why);
  }
  if (parts.empty()) return first_reason(r);
  return fmt::format("{}", fmt::join(parts, "; "));
}

void coverage_table(std::string& md, const KernelReport& k) {
  const auto cov = coverage(k);
  if (cov.table.empty()) return;
  md += "\n| coverage | selected cases | claimed | passed |\n|---|---|---|---|\n";
  for (const auto& row : cov.table) {
    md += fmt::format("| {} | {} | {} | {} |\n", row.dimension, cell(row.catalog), cell(row.claimed), cell(row.passed));
  }
}

void kernel_section(std::string& md, const Certificate& c, const KernelReport& k) {
  const auto n = count(k);
  md += fmt::format("\n## {}\n\n**{}**\n\n{} backend, {} output. {}\n\n", k.name, cell(headline(c, k)),
                    k.backend, k.out_dtype, cell(k.description));
  if (!k.version.empty()) md += fmt::format("Version: {}\n", cell(k.version));
  if (!k.origin.is_null()) md += fmt::format("Origin: `{}`\n\n", k.origin.dump());
  if (!k.declared.is_null()) md += fmt::format("Declared: `{}`\n\n", k.declared.dump());
  for (const auto& note : k.notes) md += fmt::format("Note (information only): {}\n\n", cell(note));
  md += fmt::format("PASS {} · FAIL {} · ERROR {} · HOST_ERROR {} · UNSUPPORTED {} · NOT_CLAIMED {} · SKIPPED {}\n",
                    n.pass, n.fail, n.error, n.host_error, n.unsupported, n.not_claimed, n.skipped);
  if (k.unavailable) md += fmt::format("\nUnavailable on this machine: {}\n", cell(*k.unavailable));
  coverage_table(md, k);

  if (std::any_of(k.cases.begin(), k.cases.end(), ran)) {
    md += "\n| case | family | verdict | out max abs err @ index | out max rel err | out p99 abs err "
          "| out cos diff | out error ratio | out pass % | lse max abs err | bound use | run ms |\n";
    md += "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& r : k.cases) {
      if (!ran(r)) continue;
      std::string abs = "-", rel = "-", p99 = "-", cos = "-", ratio = "-", pass = "-", lse = "-";
      // An append row has no out and lse: its latent takes the out columns, its k_pe the lse
      // column (the note under the table says so).
      const auto& first = r.out ? r.out : r.latent;
      const auto& second = r.lse ? r.lse : r.k_pe;
      if (first) {
        abs = sci(first->max_abs_err) + " @ " + tol::format_index(first->max_abs_index);
        rel = sci(first->max_rel_err);
        p99 = sci(first->p99_abs_err);
        cos = sci(first->cos_diff);
        if (first->error_ratio) ratio = fmt::format("{:.3g}", *first->error_ratio);
        pass = fmt::format("{:.4f}", 100.0 * first->pass_fraction);
      }
      if (second) lse = sci(second->max_abs_err);
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.3g} | {} |\n", r.name,
                        r.family, tol::to_string(r.verdict), abs, rel, p99, cos, ratio, pass, lse,
                        bound_use(r), r.run_seconds ? fmt::format("{:.3f}", *r.run_seconds * 1e3) : "-");
    }
    if (std::any_of(k.cases.begin(), k.cases.end(), [](const CaseResult& r) { return r.latent || r.k_pe; })) {
      md += "\nAppend rows: the stored latent in the out columns, the stored k_pe in the lse column.\n";
    }
  }

  std::vector<const CaseResult*> not_pass;
  for (const auto& r : k.cases) {
    if (r.verdict != tol::Verdict::pass) not_pass.push_back(&r);
  }
  if (!not_pass.empty()) {
    md += "\n### Not passed\n\n";
    for (const auto* r : not_pass) {
      md += fmt::format("- `{}/{}` **{}**", r->family, r->name, tol::to_string(r->verdict));
      if (r->reasons.size() == 1) {
        md += ": " + r->reasons.front() + "\n";
      } else {
        md += "\n";
        for (const auto& why : r->reasons) md += "  - " + why + "\n";
      }
    }
  }

  if (std::any_of(k.cases.begin(), k.cases.end(), [](const CaseResult& r) { return r.out_vs_unquantized.has_value(); })) {
    md += "\n### FP8: distance from the unquantized result (information only)\n\n"
          "| case | out max abs err | out p99 abs err | out cos diff | lse max abs err |\n"
          "|---|---|---|---|---|\n";
    for (const auto& r : k.cases) {
      if (!r.out_vs_unquantized) continue;
      md += fmt::format("| {} | {} | {} | {} | {} |\n", r.name, sci(r.out_vs_unquantized->max_abs_err),
                        sci(r.out_vs_unquantized->p99_abs_err), sci(r.out_vs_unquantized->cos_diff),
                        r.lse_vs_unquantized ? sci(r.lse_vs_unquantized->max_abs_err) : "-");
    }
  }
}

}  // namespace

std::string incomplete_reason(const Certificate& c) {
  int host = 0;
  for (const auto& k : c.kernels) host += count(k).host_error;
  std::vector<std::string> why;
  if (!c.complete) why.push_back("the run did not finish (it was still going, or was stopped)");
  if (host > 0) why.push_back(fmt::format("{} case{} hit a HOST_ERROR", host, host == 1 ? "" : "s"));
  if (c.shard && !c.shard->missing.empty()) {
    return fmt::format("{}shard{} {} of {} missing: `mla merge` it with the others' certificates",
                       why.empty() ? "" : fmt::format("{}; ", fmt::join(why, " and ")),
                       c.shard->missing.size() == 1 ? "" : "s", fmt::join(c.shard->missing, ", "), c.shard->count);
  }
  return fmt::format("{}; `mla certify --resume` with the same options finishes it", fmt::join(why, " and "));
}

std::string to_markdown(const Certificate& c) {
  std::string md;
  const Overall o = overall(c);
  md += fmt::format("# MLA attention certificate: {}{}\n\n", verdict_text(c),
                    c.kernels.size() == 1 && o != Overall::incomplete ? ": " + headline(c, c.kernels[0]) : "");
  if (c.shard && c.shard->part()) {
    md += fmt::format("**Shard {} of {}: only the cases of this shard; `mla merge` of all {} shards' certificates gives "
                      "the verdict of the whole selection.**\n\n",
                      c.shard->index, c.shard->count, c.shard->count);
  } else if (c.shard) {
    md += fmt::format("Merged from {} of {} shards.\n\n", c.shard->count - c.shard->missing.size(), c.shard->count);
  }
  if (o == Overall::incomplete) {
    md += fmt::format("**INCOMPLETE: {}.**{}\n\n", incomplete_reason(c),
                      is_red(c) ? " Some results recorded so far are red." : "");
  }
  if (o == Overall::not_judged) md += fmt::format("**NOT_JUDGED: {}.**\n\n", not_judged_reason(c));
  for (const auto& k : c.kernels) md += fmt::format("- `{}`: {}\n", k.name, cell(headline(c, k)));
  md += "\n";
  md += fmt::format("- Run: {} to {} ({:.1f} s), {} {}\n", c.started_utc,
                    c.finished_utc.empty() ? "?" : c.finished_utc, c.wall_seconds, c.tool, c.tool_version);
  md += fmt::format("- Machine: {} — {} ({} threads), {}\n", c.machine.hostname,
                    c.machine.cpu_model.empty() ? "unknown CPU" : c.machine.cpu_model, c.machine.threads,
                    c.machine.os.empty() ? "unknown OS" : c.machine.os);
  if (!c.machine.gpus.empty()) md += fmt::format("- GPUs: {}\n", fmt::join(c.machine.gpus, "; "));
  md += fmt::format("- Driver: {}\n", c.machine.driver.value_or("n/a"));
  md += fmt::format("- Commit: {}\n", c.machine.git_commit.value_or("unknown"));
  if (!c.build.is_null()) md += fmt::format("- Build: `{}`\n", c.build.dump());
  if (!c.options.is_null()) md += fmt::format("- Options: `{}`\n", c.options.dump());
  md += fmt::format("- Catalog: `{}`{}\n", c.goldens_dir,
                    c.manifest_sha256.empty() ? "" : fmt::format(", MANIFEST.sha256 sha256 `{}`", c.manifest_sha256));
  for (const auto& [file, sha] : c.manifest) md += fmt::format("  - `{}` sha256 `{}`\n", file, sha);
  for (const auto& note : c.notes) md += fmt::format("- Note: {}\n", note);

  md += "\n| implementation | backend | output | PASS | FAIL | ERROR | HOST_ERROR | UNSUPPORTED | NOT_CLAIMED | SKIPPED |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& k : c.kernels) {
    const auto n = count(k);
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", k.name, k.backend, k.out_dtype, n.pass,
                      n.fail, n.error, n.host_error, n.unsupported, n.not_claimed, n.skipped);
  }
  md += "\n\"bound use\" is the worst element's |error| / its bound max(atol_used, rtol·|truth|) over out and lse "
        "(an append: latent and k_pe): "
        "below 1 every element is inside its bound.\n";

  for (const auto& k : c.kernels) kernel_section(md, c, k);

  std::set<std::string> used;
  for (const auto& k : c.kernels) {
    for (const auto& r : k.cases) {
      for (const auto* cmp : judged_comparisons(r)) used.insert(cmp->tolerance);
      for (const auto* cmp : {&r.out_vs_unquantized, &r.lse_vs_unquantized}) {
        if (*cmp) used.insert((*cmp)->tolerance);
      }
    }
  }
  if (!used.empty()) {
    md += "\n## Tolerances applied\n\nElement rule: \\|error\\| <= max(atol, atol_rel_max·max\\|truth\\|) or "
          "<= rtol·\\|truth\\|.\n\n| name | atol | atol_rel_max | rtol | cos diff | ratio k | ratio floor | why |\n"
          "|---|---|---|---|---|---|---|---|\n";
    for (const auto& t : tol::table()) {
      if (!used.count(t.name)) continue;
      std::string floor = "-";
      if (t.ratio_k > 0) {
        floor = t.ratio_floor_rel > 0 ? fmt::format("{} + {}·max\\|truth\\|", sci(t.ratio_floor), sci(t.ratio_floor_rel))
                                      : sci(t.ratio_floor);
      }
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", t.name, sci(t.atol),
                        t.atol_rel_max > 0 ? sci(t.atol_rel_max) : "-", sci(t.rtol), sci(t.cos_diff),
                        t.ratio_k > 0 ? fmt::format("{:g}", t.ratio_k) : "-", floor, cell(t.why));
    }
  }
  return md;
}

std::string summary(const Certificate& c, std::size_t max_lines) {
  std::vector<std::string> lines;
  int cases = 0;
  for (const auto& k : c.kernels) cases = std::max(cases, static_cast<int>(k.cases.size()));
  const Overall o = overall(c);
  lines.push_back(fmt::format("mla-certify: {} - {} implementations x {} cases in {:.1f} s", verdict_text(c),
                              c.kernels.size(), cases, c.wall_seconds));
  if (o == Overall::incomplete) lines.push_back(shorten("INCOMPLETE: " + incomplete_reason(c), kSummaryWidth));
  if (o == Overall::not_judged) lines.push_back(shorten("NOT_JUDGED: " + not_judged_reason(c), kSummaryWidth));
  std::size_t width = std::string_view("implementation").size();
  for (const auto& k : c.kernels) width = std::max(width, k.name.size());
  width = std::min<std::size_t>(width, 48);
  for (const auto& k : c.kernels) {
    lines.push_back(shorten(fmt::format("{:<{}}  {}", shorten(k.name, width), width, headline(c, k)), kSummaryWidth));
  }
  lines.push_back(fmt::format("{:<{}} {:>5} {:>5} {:>5} {:>5} {:>6} {:>6} {:>5}  {}", "implementation", width, "PASS",
                              "FAIL", "ERROR", "HOST", "UNSUP", "NOTCL", "SKIP", "worst"));
  std::vector<std::vector<std::string>> details(c.kernels.size());
  for (std::size_t ki = 0; ki < c.kernels.size(); ++ki) {
    const auto& k = c.kernels[ki];
    const auto n = count(k);
    std::string worst;
    std::vector<const CaseResult*> bad;
    for (const auto& r : k.cases) {
      if (r.verdict == tol::Verdict::fail || r.verdict == tol::Verdict::error || r.verdict == tol::Verdict::host_error) {
        bad.push_back(&r);
      }
    }
    if (!bad.empty()) {
      worst = fmt::format("{} cases red, e.g. {}/{}", bad.size(), bad.front()->family, bad.front()->name);
      for (const auto* r : bad) {
        details[ki].push_back(shorten(fmt::format("  {:<5} {}/{}: {}", tol::to_string(r->verdict), r->family,
                                                  r->name, compact_reason(*r)),
                                      kSummaryWidth));
      }
    } else {
      const CaseResult* closest = nullptr;
      for (const auto& r : k.cases) {
        if (ran(r) && (!closest || bound_use(r) > bound_use(*closest))) closest = &r;
      }
      if (closest) {
        worst = fmt::format("closest to its bound: {}/{} at {:.2g} of it", closest->family, closest->name,
                            bound_use(*closest));
      } else if (n.skipped == n.total() && k.unavailable) {
        worst = shorten("skipped: " + *k.unavailable, 60);
      } else if (n.pass == 0 && n.not_claimed + n.unsupported > 0) {
        // Rows judged without bounds (a top-k's, the indexer's) are passes, not "nothing claimed".
        worst = "nothing it claims in the selection";
      }
    }
    lines.push_back(shorten(fmt::format("{:<{}} {:>5} {:>5} {:>5} {:>5} {:>6} {:>6} {:>5}  {}", shorten(k.name, width),
                                        width, n.pass, n.fail, n.error, n.host_error, n.unsupported, n.not_claimed,
                                        n.skipped, worst),
                            kSummaryWidth));
  }
  // Red cases fill what is left of the screen, shared fairly between implementations.
  std::size_t room = max_lines > lines.size() ? max_lines - lines.size() : 0;
  std::size_t red_kernels = std::count_if(details.begin(), details.end(), [](const auto& d) { return !d.empty(); });
  for (const auto& d : details) {
    if (d.empty() || room == 0) continue;
    const std::size_t share = std::max<std::size_t>(1, room / std::max<std::size_t>(1, red_kernels));
    const std::size_t show = std::min(d.size(), d.size() > share ? share - 1 : share);
    for (std::size_t i = 0; i < show; ++i) lines.push_back(d[i]);
    if (show < d.size()) lines.push_back(fmt::format("  ... and {} more (see the certificate)", d.size() - show));
    room = max_lines > lines.size() ? max_lines - lines.size() : 0;
    --red_kernels;
  }
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

}  // namespace mla::reports
