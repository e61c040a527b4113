#include "goldens_cmd.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <ostream>

#include <fmt/format.h>

#include "mla/certify/golden_check.hpp"
#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/sha256.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"

namespace mla::tools {
namespace {

namespace fx = mla::golden;
using certify::GoldenCheck;
using certify::GoldenDepth;
using certify::GoldenGate;

GoldenGate make_gate() { return GoldenGate(certify::self_executable()); }

// Reads `file` through in a child first; a crash or hang there refuses it (exit 2), a refusal
// of the loader is an ordinary error (exit 1).
void read_through_first(GoldenGate& gate, const std::filesystem::path& file, const std::string& digest) {
  const GoldenCheck& c = gate.check(file, digest, GoldenDepth::read_through);
  if (c.kind == GoldenCheck::Kind::crashed) throw GoldenRefused(GoldenGate::refusal(file, c));
  if (c.kind == GoldenCheck::Kind::invalid) throw Error(c.problem);
}

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// min / max / mean|x| / NaN and Inf counts of a tensor: enough to see poisoned slots, empty
// rows (+inf lse) and the magnitude a tolerance will face.
template <class T, class F>
std::string stats(const std::vector<T>& v, F to_double) {
  int64_t nan = 0, inf = 0, finite = 0;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum_abs = 0;
  for (const auto& raw : v) {
    const double x = to_double(raw);
    if (std::isnan(x)) ++nan;
    else if (std::isinf(x)) ++inf;
    else {
      ++finite;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      sum_abs += std::fabs(x);
    }
  }
  std::string s = fmt::format("{} values", v.size());
  if (finite) s += fmt::format(", min {:.6g}, max {:.6g}, mean|x| {:.6g}", lo, hi, sum_abs / static_cast<double>(finite));
  if (nan) s += fmt::format(", {} NaN", nan);
  if (inf) s += fmt::format(", {} Inf", inf);
  return s;
}

std::string stats_f64(const std::vector<double>& v) {
  return stats(v, [](double x) { return x; });
}
std::string stats_bf16(const std::vector<uint16_t>& v) {
  return stats(v, [](uint16_t b) { return static_cast<double>(bf16_to_float(b)); });
}

template <class T>
std::string ints(const std::vector<T>& v, std::size_t max_shown = 24) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < v.size() && i < max_shown; ++i) parts.push_back(std::to_string(v[i]));
  if (v.size() > max_shown) parts.push_back(fmt::format("... ({} more)", v.size() - max_shown));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

void inspect_attention(const fx::AttnCase& c, std::ostream& out) {
  const auto& s = c.shape;
  out << fmt::format("{}/{} ({}): {}\n", c.file, c.name, c.family, c.description);
  out << fmt::format("  shape: batch {} s_q {} heads {} d_qk {} d_v {} page_size {} num_blocks {} max_blocks {} topk {} "
                     "{} cache{} {}\n",
                     s.batch, s.s_q, s.heads, s.d_qk, s.d_v, s.page_size, s.num_blocks, s.max_blocks, s.topk,
                     to_string(s.cache_format),
                     s.cache_format == CacheFormat::fp8 ? fmt::format(" (scale {})", to_string(c.scale_fmt)) : "",
                     s.topk > 0 ? "sparse" : (s.causal ? "dense causal" : "dense"));
  out << fmt::format("  softmax_scale {:.10g}, seed {}, sentinel block id {}, inputs {}\n", c.softmax_scale, c.seed,
                     c.sentinel_block_id, c.inputs_stored ? "stored" : "generated (sha256 checked)");
  out << fmt::format("  cache_seqlens {}\n", ints(c.cache_seqlens));
  for (int b = 0; b < s.batch && b < 8; ++b) {
    std::vector<int32_t> row(c.block_table.begin() + static_cast<std::ptrdiff_t>(b) * s.max_blocks,
                             c.block_table.begin() + static_cast<std::ptrdiff_t>(b + 1) * s.max_blocks);
    out << fmt::format("  block_table[{}] {}\n", b, ints(row, 16));
  }
  if (s.batch > 8) out << fmt::format("  ... {} more block-table rows\n", s.batch - 8);
  out << fmt::format("  q             {}  {}\n", shape_str({s.batch, s.s_q, s.heads, s.d_qk}), stats_bf16(c.q));
  out << fmt::format("  kv_cache      {}  {} bytes ({} per token)\n",
                     shape_str({s.num_blocks, s.page_size, static_cast<int64_t>(cache_bytes_per_token(s.cache_format))}),
                     c.kv_cache.size(), cache_bytes_per_token(s.cache_format));
  if (!c.kv_cache_dequant.empty()) out << fmt::format("  kv dequant    {}\n", stats_f64(c.kv_cache_dequant));
  if (s.topk > 0) out << fmt::format("  indices       {}  {}\n", shape_str({s.batch, s.s_q, s.topk}), ints(c.indices, 16));
  out << fmt::format("  truth out     {}  {}\n", shape_str({s.batch, s.s_q, s.heads, s.d_v}), stats_f64(c.truth_out));
  out << fmt::format("  truth lse     {}  {}\n", shape_str({s.batch, s.heads, s.s_q}), stats_f64(c.truth_lse));
  out << fmt::format("  bf16 out      {}\n", stats_bf16(c.same_dtype_out));
  out << fmt::format("  bf16 lse      {}\n", stats(c.same_dtype_lse, [](float f) { return static_cast<double>(f); }));
  if (!c.unquantized_out.empty()) {
    out << fmt::format("  unquantized out {}\n", stats_f64(c.unquantized_out));
    out << fmt::format("  unquantized lse {}\n", stats_f64(c.unquantized_lse));
  }
}

void inspect_layer(const fx::LayerCase& c, std::ostream& out) {
  const auto& m = c.config;
  out << fmt::format("{}/{} ({}, {}): {}\n", c.file, c.name, c.family, c.kind, c.description);
  out << fmt::format("  config {}: dim {} heads {} q_lora {} kv_lora {} nope {} rope {} v {} max_seq_len {} "
                     "original {} yarn {} mscale {}\n",
                     m.preset, m.dim, m.n_heads, m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim,
                     m.v_head_dim, m.max_seq_len, m.original_seq_len, m.yarn() ? "on" : "off", m.mscale);
  out << fmt::format("  batch {}, softmax_scale {:.10g}, seed {}\n", c.batch, c.softmax_scale, c.seed);
  for (const auto& [name, a] : c.weights) out << fmt::format("  weight {:<8} {}  {}\n", name, shape_str(a.shape), stats_f64(a.data));
  auto step = [&](const std::string& label, const fx::LayerStep& s) {
    out << fmt::format("  {} start_pos {}: x {}  {}\n", label, s.start_pos, shape_str(s.x.shape), stats_f64(s.x.data));
    for (const auto& [name, a] : s.outputs) out << fmt::format("    out {:<16} {}  {}\n", name, shape_str(a.shape), stats_f64(a.data));
    for (const auto& [name, a] : s.intermediates) {
      out << fmt::format("    intermediate {:<22} {}\n", name, shape_str(a.shape));
    }
  };
  for (std::size_t i = 0; i < c.steps.size(); ++i) step(fmt::format("step {}", i), c.steps[i]);
  if (c.accept) step("accept", *c.accept);
  if (c.reject) step("reject", *c.reject);
  if (!c.expected_error.empty()) out << fmt::format("  expected error on reject: {}\n", c.expected_error);
  for (const auto& [name, a] : c.final_cache) out << fmt::format("  final cache {:<18} {}\n", name, shape_str(a.shape));
}

void inspect_prefill(const fx::PrefillCase& c, std::ostream& out) {
  const auto& s = c.shape;
  out << fmt::format("{}/{} ({}): {}\n", c.file, c.name, c.family, c.description);
  out << fmt::format("  shape: batch {} heads {} total_q {} total_k {} d_qk {} d_v {} {}\n", s.batch, s.heads, s.total_q,
                     s.total_k, s.d_qk, s.d_v, s.causal ? "causal (bottom-right)" : "non-causal");
  out << fmt::format("  softmax_scale {:.10g}, seed {}, inputs {}\n", c.softmax_scale, c.seed,
                     c.inputs_stored ? "stored" : "generated (sha256 checked)");
  out << fmt::format("  cu_seqlens_q  {}\n  cu_seqlens_k  {}\n", ints(c.cu_seqlens_q), ints(c.cu_seqlens_k));
  if (!c.needle_positions.empty()) {
    out << fmt::format("  needles       {} (alpha {}, spike {})  {}\n", c.needle_positions.size() / 2, c.needle_alpha,
                       c.needle_spike, ints(c.needle_positions, 16));
  }
  out << fmt::format("  q             {}  {}\n", shape_str({s.total_q, s.heads, s.d_qk}), stats_bf16(c.q));
  out << fmt::format("  k             {}  {}\n", shape_str({s.total_k, s.heads, s.d_qk}), stats_bf16(c.k));
  out << fmt::format("  v             {}  {}\n", shape_str({s.total_k, s.heads, s.d_v}), stats_bf16(c.v));
  out << fmt::format("  truth out     {}  {}\n", shape_str({s.total_q, s.heads, s.d_v}), stats_f64(c.truth_out));
  out << fmt::format("  truth lse     {}  {}\n", shape_str({s.heads, s.total_q}), stats_f64(c.truth_lse));
}

void inspect_merge(const fx::MergeCase& c, std::ostream& out) {
  out << fmt::format("{}/{} ({}): {}\n", c.file, c.name, c.family, c.description);
  out << fmt::format("  tokens {} heads {} head_dim {} out {}, seed {}\n", c.tokens, c.heads, c.head_dim, c.out_dtype, c.seed);
  const std::vector<int64_t> o{c.tokens, c.heads, c.head_dim}, l{c.heads, c.tokens};
  out << fmt::format("  out_a         {}  {}\n  out_b         {}  {}\n", shape_str(o), stats_f64(c.out_a), shape_str(o),
                     stats_f64(c.out_b));
  out << fmt::format("  lse_a         {}  {}\n  lse_b         {}  {}\n", shape_str(l), stats_f64(c.lse_a), shape_str(l),
                     stats_f64(c.lse_b));
  out << fmt::format("  truth out     {}  {}\n  truth lse     {}  {}\n", shape_str(o), stats_f64(c.truth_out), shape_str(l),
                     stats_f64(c.truth_lse));
}

void inspect_indexer(const fx::IndexerCase& c, std::ostream& out) {
  out << fmt::format("{}/{} ({}): {}\n", c.file, c.name, c.family, c.description);
  out << fmt::format("  batch {} heads {} head_dim {} rope_dim {} ({}) top-{} scales {}, seed {}\n", c.batch, c.heads,
                     c.head_dim, c.rope_dim, c.rope_layout, c.index_topk, to_string(c.scale_fmt), c.seed);
  for (const auto& s : c.steps) {
    const std::vector<int64_t> l{c.batch, s.seqlen, s.end_pos()};
    out << fmt::format("  step at {} ({} token{}): logits {}  {}\n", s.start_pos, s.seqlen, s.seqlen == 1 ? "" : "s",
                       shape_str(l), stats_f64(s.logits_truth));
  }
}

}  // namespace

int goldens_list(const std::filesystem::path& dir, bool verify, std::ostream& out) {
  const fx::Catalog cat = fx::open_catalog(dir, verify);
  out << fmt::format("catalog {} ({} files, manifest {})\n", cat.dir.string(), cat.sha256.size(),
                     verify ? "verified" : "NOT verified");
  auto gate = make_gate();
  std::size_t n = 0;
  for (const auto& [name, digest] : cat.sha256) {
    const auto path = cat.file(name);
    read_through_first(gate, path, verify ? digest : sha256_file(path));
    const fx::FileInfo info = fx::read_file_info(path);
    const auto gv = info.provenance.find("generator_version");
    out << fmt::format("\n{}  family={} schema={} sha256={} generator={}\n", name, info.family, info.schema_version,
                       digest, gv == info.provenance.end() ? std::string("?") : gv->second);
    for (const auto& c : fx::summarize_cases(path)) {
      ++n;
      out << fmt::format("  {:<28} {:<9} {}\n      {}\n", c.name, c.inputs_stored ? "stored" : "generated", c.shape,
                         c.description);
    }
  }
  out << fmt::format("\n{} cases\n", n);
  return 0;
}

int goldens_validate(const std::filesystem::path& dir, std::ostream& out) {
  const auto t0 = std::chrono::steady_clock::now();
  fx::Catalog cat;
  try {
    cat = fx::open_catalog(dir, /*verify_files=*/false);
  } catch (const Error& e) {
    out << fmt::format("FAIL manifest: {}\n", e.what());
    return 1;
  }
  int problems = 0, cases = 0;
  auto fail = [&](const std::string& what, const std::string& why) {
    ++problems;
    out << fmt::format("FAIL {}: {}\n", what, why);
  };
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".h5" && !cat.sha256.count(entry.path().filename().string())) {
      fail(entry.path().filename().string(), "not listed in MANIFEST.sha256 (an unvouched golden is never read)");
    }
  }
  auto gate = make_gate();
  bool refused = false;
  for (const auto& [name, digest] : cat.sha256) {
    try {
      fx::verify_file(cat, name);
    } catch (const Error& e) {
      fail(name, e.what());
      continue;  // a file that fails its digest is not opened
    }
    // Every loader check, in a child process: a file that crashes the HDF5 library costs that
    // child, and the other files are still validated.
    const GoldenCheck& chk = gate.check(cat.file(name), digest, GoldenDepth::full);
    if (chk.kind == GoldenCheck::Kind::crashed) {
      refused = true;
      fail(name, GoldenGate::refusal(cat.file(name), chk));
      continue;
    }
    if (chk.kind == GoldenCheck::Kind::invalid) {
      fail(name, chk.problem);
      continue;
    }
    out << fmt::format("ok   {} (sha256 verified, family {}, schema {}, {} cases)\n", name, chk.family,
                       chk.schema_version, chk.cases.size());
    for (const auto& c : chk.cases) {
      ++cases;
      if (auto p = chk.case_problems.find(c); p != chk.case_problems.end()) fail(name + "/" + c, p->second);
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out << fmt::format("{}: {} files, {} cases loaded through every loader check, {} problem{} ({:.1f} s)\n",
                     problems ? "INVALID" : "VALID", cat.sha256.size(), cases, problems, problems == 1 ? "" : "s", s);
  return refused ? 2 : problems ? 1 : 0;
}

int goldens_inspect(const std::filesystem::path& dir, const std::string& file, const std::string& case_name,
                    std::ostream& out) {
  const fx::Catalog cat = fx::open_catalog(dir, /*verify_files=*/false);
  if (!cat.sha256.count(file)) {
    throw Error(fmt::format("{} is not in the catalog's manifest (files: {})", file, [&] {
      std::vector<std::string> names;
      for (const auto& [n, d] : cat.sha256) names.push_back(n);
      return fmt::format("{}", fmt::join(names, ", "));
    }()));
  }
  fx::verify_file(cat, file);
  const auto path = cat.file(file);
  auto gate = make_gate();
  read_through_first(gate, path, cat.sha256.at(file));
  const auto info = fx::read_file_info(path);
  if (std::find(info.cases.begin(), info.cases.end(), case_name) == info.cases.end()) {
    throw Error(fmt::format("{} has no case '{}' (cases: {})", file, case_name, fmt::join(info.cases, ", ")));
  }
  switch (fx::family(info.family).kind) {
    case fx::FamilyKind::attention: inspect_attention(fx::load_attn_case(path, case_name), out); break;
    case fx::FamilyKind::layer: inspect_layer(fx::load_layer_case(path, case_name), out); break;
    case fx::FamilyKind::prefill: inspect_prefill(fx::load_prefill_case(path, case_name), out); break;
    case fx::FamilyKind::merge: inspect_merge(fx::load_merge_case(path, case_name), out); break;
    case fx::FamilyKind::indexer: inspect_indexer(fx::load_indexer_case(path, case_name), out); break;
  }
  return 0;
}

}  // namespace mla::tools
