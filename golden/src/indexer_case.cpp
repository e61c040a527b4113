// DeepSeek-V3.2 indexer cases (family indexer; fixtures/SCHEMA.md "Indexer cases").
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "h5io.hpp"
#include "mla/core/error.hpp"
#include "mla/core/indexer_cache.hpp"
#include "mla/core/presets.hpp"
#include "mla/core/numeric.hpp"
#include "mla/golden/golden.hpp"

namespace mla::golden {

using detail::Reader;

namespace {

constexpr int64_t kMaxBatch = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxSteps = 4096;
constexpr int64_t kMaxTokens = int64_t{1} << 20;

std::string at(const std::vector<int64_t>& dims, std::size_t flat) {
  return detail::element_at(dims, static_cast<int64_t>(flat));
}

// e4m3fn has one NaN pattern per sign (S.1111.111); act_quant never writes it.
void require_codes(const Reader& r, const std::string& ds, const std::vector<uint8_t>& v,
                   const std::vector<int64_t>& dims) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if ((v[i] & 0x7F) == 0x7F) r.fail(ds, "e4m3 codes without NaN (0x7F, 0xFF)", fmt::format("{}: 0x{:02X}", at(dims, i), v[i]));
  }
}

// A block scale is positive and finite; under ue8m0 a power of two (its mantissa bits zero).
void require_scales(const Reader& r, const std::string& ds, const std::vector<float>& v, ScaleFmt fmt_,
                    const std::vector<int64_t>& dims) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    int e = 0;
    const bool pow2 = std::frexp(v[i], &e) == 0.5f;
    if (!std::isfinite(v[i]) || v[i] <= 0 || (fmt_ == ScaleFmt::ue8m0 && !pow2)) {
      r.fail(ds, fmt_ == ScaleFmt::ue8m0 ? "positive powers of two (ue8m0 scales)" : "positive finite scales",
             fmt::format("{}: {}", at(dims, i), v[i]));
    }
  }
}

// Row (b, i) of a step sees positions 0 .. n_valid - 1: finite logits there, -inf past it.
template <class T>
void require_horizon(const Reader& r, const std::string& ds, const std::vector<T>& logits, const IndexerStep& s,
                     int64_t batch) {
  const int64_t T_ = s.end_pos();
  for (int64_t row = 0; row < batch * s.seqlen; ++row) {
    const int64_t nv = s.n_valid[static_cast<std::size_t>(row)];
    for (int64_t t = 0; t < T_; ++t) {
      const double v = logits[static_cast<std::size_t>(row * T_ + t)];
      const bool ok = t < nv ? std::isfinite(v) : v == -std::numeric_limits<double>::infinity();
      if (!ok) {
        r.fail(ds, t < nv ? "a finite logit inside the row's causal horizon" : "-inf past the row's causal horizon",
               fmt::format("row {} (batch {}, token {}) position {}: {}", row, row / s.seqlen, row % s.seqlen, t, v));
      }
    }
  }
}

// Each row: min(K, n_valid) distinct positions inside the horizon, then -1.
void require_topk(const Reader& r, const std::string& ds, const std::vector<int32_t>& idx, const IndexerStep& s,
                  int64_t batch, int64_t K) {
  for (int64_t row = 0; row < batch * s.seqlen; ++row) {
    const int64_t nv = s.n_valid[static_cast<std::size_t>(row)];
    std::set<int32_t> seen;
    for (int64_t j = 0; j < K; ++j) {
      const int32_t v = idx[static_cast<std::size_t>(row * K + j)];
      const bool filled = j < std::min(K, nv);
      if (filled ? (v < 0 || v >= nv || !seen.insert(v).second) : v != -1) {
        r.fail(ds, filled ? "distinct positions inside the row's causal horizon" : "-1 past the row's valid count",
               fmt::format("row {} entry {}: {} (valid positions 0 .. {})", row, j, v, nv - 1));
      }
    }
  }
}

void require_flags(const Reader& r, const std::string& ds, const std::vector<uint8_t>& v) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] > 1) r.fail(ds, "0 or 1", fmt::format("entry {}: {}", i, v[i]));
  }
}

}  // namespace

IndexerKeys IndexerCase::keys_through(std::size_t k) const {
  IndexerKeys out;
  out.positions = steps.at(k).end_pos();
  const int64_t D = head_dim, T = out.positions;
  out.codes.resize(static_cast<std::size_t>(batch * T * D));
  out.scales.resize(static_cast<std::size_t>(batch * T));
  for (std::size_t j = 0; j <= k; ++j) {
    const auto& s = steps[j];
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < s.seqlen; ++i) {
        const auto src = static_cast<std::size_t>(b * s.seqlen + i), dst = static_cast<std::size_t>(b * T + s.start_pos + i);
        std::copy_n(s.k_codes.begin() + static_cast<std::ptrdiff_t>(src * D), D, out.codes.begin() + static_cast<std::ptrdiff_t>(dst * D));
        out.scales[dst] = s.k_scale[src];
      }
    }
  }
  return out;
}

IndexerCase load_indexer_case(const std::filesystem::path& file, const std::string& name) {
  const Reader r(file);
  const detail::Header h = detail::read_header(r);
  const std::string p = detail::case_path(r, name);
  IndexerCase c;
  c.file = file.string();
  c.name = name;
  c.family = h.family;
  detail::case_family(r, h, FamilyKind::indexer, p, c.description);
  c.rope_layout = r.attr_str(p, "rope_layout");
  if (c.rope_layout != "interleaved" && c.rope_layout != "half") {
    r.fail(p, "rope_layout 'interleaved' or 'half'", fmt::format("'{}'", c.rope_layout));
  }
  const std::string sf = r.attr_str(p, "scale_fmt");
  if (sf != "ue8m0" && sf != "fp32") r.fail(p, "scale_fmt 'ue8m0' or 'fp32'", fmt::format("'{}'", sf));
  c.scale_fmt = scale_fmt_from_string(sf);
  c.batch = r.attr_int(p, "batch", 1, kMaxBatch);
  c.heads = r.attr_int(p, "heads", 1, kMaxHeads);
  // fp8_index takes one scale per (token, head): one act_quant block per head.
  c.head_dim = r.attr_int(p, "head_dim", kIndexerHeadDim, kIndexerHeadDim);
  c.rope_dim = r.attr_int(p, "rope_dim", 2, c.head_dim - 1);
  if (c.rope_dim % 2) r.fail(p, "an even rope_dim (RoPE rotates pairs)", fmt::format("{}", c.rope_dim));
  c.index_topk = r.attr_int(p, "index_topk", 1, kMaxTokens);
  c.seed = r.attr_int(p, "seed");
  const int64_t n_steps = r.attr_int(p, "n_steps", 1, kMaxSteps);
  const std::string steps = p + "/steps";
  r.require_group(steps);
  if (const auto kids = r.children(steps); static_cast<int64_t>(kids.size()) != n_steps) {
    r.fail(steps, fmt::format("{} steps (n_steps of the case attributes)", n_steps), fmt::format("{} groups", kids.size()));
  }
  const int64_t b = c.batch, H = c.heads, D = c.head_dim;
  int64_t pos = 0;
  for (int64_t k = 0; k < n_steps; ++k) {
    const std::string sp = fmt::format("{}/{}", steps, k);
    r.require_group(sp);
    IndexerStep s;
    s.start_pos = r.attr_int(sp, "start_pos", 0, kMaxTokens);
    s.seqlen = r.attr_int(sp, "seqlen", 1, kMaxTokens);
    if (s.start_pos != pos) {
      r.fail(sp, fmt::format("start_pos {} (the previous step's end: steps are contiguous from 0)", pos),
             fmt::format("{}", s.start_pos));
    }
    // Upstream's Indexer adds a prompt-sized [s, s] mask: a multi-token step fits only at position 0.
    if (k > 0 && s.seqlen != 1) r.fail(sp, "seqlen 1 after the first step (upstream's semantics)", fmt::format("{}", s.seqlen));
    pos = s.end_pos();
    if (pos > kMaxTokens) r.fail(sp, fmt::format("at most {} positions", kMaxTokens), fmt::format("{}", pos));
    const int64_t sl = s.seqlen, T = pos, K = c.topk_width(s);
    const std::vector<int64_t> qd{b, sl, H, D}, kd{b, sl, D}, hd{b, sl, H}, rd{b, sl}, ld{b, sl, T}, td{b, sl, K};
    const auto from = fmt::format("batch={}, heads={}, head_dim={} of the case, seqlen={}, end_pos={}, top-k width={} of the step",
                                  b, H, D, sl, T, K);
    struct Want {
      const char* name;
      const char* dtype;
      const std::vector<int64_t>* dims;
    };
    const Want wants[] = {{"q", "bfloat16", &qd},          {"k", "bfloat16", &kd},
                          {"q_codes", "uint8", &qd},        {"q_scale", "float32", &hd},
                          {"k_codes", "uint8", &kd},        {"k_scale", "float32", &rd},
                          {"weights", "float32", &hd},      {"n_valid", "int32", &rd},
                          {"logits_truth", "float64", &ld}, {"logits_deployed", "float32", &ld},
                          {"topk_truth", "int32", &td},     {"topk_deployed", "int32", &td},
                          {"tie_truth", "uint8", &rd},      {"tie_deployed", "uint8", &rd}};
    // Every dataset against the attributes before anything is allocated.
    for (const auto& w : wants) r.check(sp + "/" + w.name, w.dtype, *w.dims, from);
    const auto ds = [&](const char* n) { return sp + "/" + n; };
    s.q = r.read<uint16_t>(ds("q"), "bfloat16", qd);
    s.k = r.read<uint16_t>(ds("k"), "bfloat16", kd);
    s.q_codes = r.read<uint8_t>(ds("q_codes"), "uint8", qd);
    s.q_scale = r.read<float>(ds("q_scale"), "float32", hd);
    s.k_codes = r.read<uint8_t>(ds("k_codes"), "uint8", kd);
    s.k_scale = r.read<float>(ds("k_scale"), "float32", rd);
    s.weights = r.read<float>(ds("weights"), "float32", hd);
    s.n_valid = r.read<int32_t>(ds("n_valid"), "int32", rd);
    s.logits_truth = r.read<double>(ds("logits_truth"), "float64", ld);
    s.logits_deployed = r.read<float>(ds("logits_deployed"), "float32", ld);
    s.topk_truth = r.read<int32_t>(ds("topk_truth"), "int32", td);
    s.topk_deployed = r.read<int32_t>(ds("topk_deployed"), "int32", td);
    s.tie_truth = r.read<uint8_t>(ds("tie_truth"), "uint8", rd);
    s.tie_deployed = r.read<uint8_t>(ds("tie_deployed"), "uint8", rd);

    detail::require_finite_bf16(r, ds("q"), s.q, qd);
    detail::require_finite_bf16(r, ds("k"), s.k, kd);
    require_codes(r, ds("q_codes"), s.q_codes, qd);
    require_codes(r, ds("k_codes"), s.k_codes, kd);
    require_scales(r, ds("q_scale"), s.q_scale, c.scale_fmt, hd);
    require_scales(r, ds("k_scale"), s.k_scale, c.scale_fmt, rd);
    for (std::size_t i = 0; i < s.weights.size(); ++i) {
      if (!std::isfinite(s.weights[i])) r.fail(ds("weights"), "finite head weights", fmt::format("{}: {}", at(hd, i), s.weights[i]));
    }
    for (int64_t row = 0; row < b * sl; ++row) {
      const int32_t nv = s.n_valid[static_cast<std::size_t>(row)];
      if (nv != s.start_pos + row % sl + 1) {
        r.fail(ds("n_valid"), fmt::format("start_pos + token + 1 = {} (causal)", s.start_pos + row % sl + 1),
               fmt::format("row {}: {}", row, nv));
      }
    }
    require_horizon(r, ds("logits_truth"), s.logits_truth, s, b);
    require_horizon(r, ds("logits_deployed"), s.logits_deployed, s, b);
    require_topk(r, ds("topk_truth"), s.topk_truth, s, b, K);
    require_topk(r, ds("topk_deployed"), s.topk_deployed, s, b, K);
    require_flags(r, ds("tie_truth"), s.tie_truth);
    require_flags(r, ds("tie_deployed"), s.tie_deployed);
    c.steps.push_back(std::move(s));
  }
  return c;
}

}  // namespace mla::golden
