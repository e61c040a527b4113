// fuzz_golden_schema's writer of V3.2 indexer cases (fixtures/SCHEMA.md, "Indexer cases"): mostly
// consistent with rare deviations, as the other writers (schema_builder.hpp): steps that do not
// follow each other, NaN codes, scales that are not powers of two, a horizon one position off,
// top-k rows with a duplicate, a position past the horizon or padding in the middle.
#include <cmath>
#include <limits>

#include "schema_builder.hpp"

namespace mla::fuzz::schema {

void Builder::indexer_case(hid_t cases, const std::string& family) {
  const hid_t g = group(cases, pick({"ix", "ix_1"}));
  if (g < 0) return;
  const mla::golden::Family* known = mla::golden::find_family(family);
  str(g, "kind", known ? known->case_kind : std::string("indexer"));
  str(g, "description", "fuzz");
  const int64_t b = num(1, 2), h = num(1, 2), d = odd(8) ? num(0, 256) : 128, topk = num(1, 4);
  const std::string fmt_ = pick({"ue8m0", "fp32"});
  str(g, "rope_layout", pick({"interleaved", "half"}));
  str(g, "scale_fmt", fmt_);
  i64(g, "batch", b);
  i64(g, "heads", h);
  i64(g, "head_dim", d);
  i64(g, "rope_dim", odd() ? num(0, 200) : 64);
  i64(g, "index_topk", topk);
  i64(g, "seed", num(0, 1000));
  i64(g, "inputs_stored", 1);
  const int64_t n_steps = num(1, 2);
  i64(g, "n_steps", n_steps);
  const auto in_cap = [](int64_t x) { return x >= 0 && x <= kWriteCap; };
  const double inf = std::numeric_limits<double>::infinity();
  int64_t pos = 0;
  for (int64_t k = 0; k < std::clamp<int64_t>(n_steps, 0, 3); ++k) {
    const hid_t s = group(g, "steps/" + std::to_string(k));
    if (s < 0) break;
    const int64_t sl = k == 0 ? num(1, 3) : (odd() ? num(0, 3) : 1);
    const int64_t start = odd() ? num(0, 5) : pos;
    i64(s, "start_pos", start);
    i64(s, "seqlen", sl);
    pos = sadd(start, sl);
    const int64_t T = pos, K = std::min(topk, T);
    const int64_t rows = smul(b, sl), qn = smul(smul(rows, h), d), kn = smul(rows, d), ln = smul(rows, T);
    if (!in_cap(qn) || !in_cap(kn) || !in_cap(ln) || !in_cap(smul(rows, K)) || !in_cap(smul(rows, h))) {
      dataset<uint8_t>(s, "q_codes", "uint8", {b, sl, h, d});  // a wild extent, unstored
      H5Gclose(s);
      continue;
    }
    const auto bf16 = values<uint16_t>(qn, 0x3F80, {0x7FC0, 0x7F80});
    const auto kbf16 = values<uint16_t>(kn, 0x3F80, {0x7FC0, 0xFF80});
    const auto qc = values<uint8_t>(qn, 0x38, {0x7F, 0xFF});
    const auto kc = values<uint8_t>(kn, 0x38, {0x7F, 0xFF});
    const auto qs = values<float>(smul(rows, h), 0.5f, {0.3f, NAN, -1.0f, 0.0f, INFINITY});
    const auto ks = values<float>(rows, 0.25f, {0.3f, NAN, -1.0f, 0.0f});
    const auto w = values<float>(smul(rows, h), 1.0f, {NAN, INFINITY});
    std::vector<int32_t> nv(static_cast<size_t>(rows));
    // start may be a wild value (num): saturating sums, then the int32 the schema stores (a wild
    // position wraps, which the loader must refuse like any other lie).
    for (int64_t r = 0; r < rows; ++r) {
      nv[static_cast<size_t>(r)] = static_cast<int32_t>(sadd(sadd(start, r % std::max<int64_t>(sl, 1)), 1));
    }
    if (!nv.empty() && odd()) {
      int32_t& v = nv[in.ConsumeIntegralInRange<size_t>(0, nv.size() - 1)];
      v = static_cast<int32_t>(int64_t{v} + in.PickValueInArray<int32_t>({-1, 1, 100}));
    }
    std::vector<double> lt(static_cast<size_t>(ln));
    std::vector<int32_t> top(static_cast<size_t>(rows * K), -1);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t horizon = nv[static_cast<size_t>(r)];
      for (int64_t t = 0; t < T; ++t) lt[static_cast<size_t>(r * T + t)] = t < horizon ? 1.0 + t : -inf;
      for (int64_t j = 0; j < std::min(K, horizon); ++j) top[static_cast<size_t>(r * K + j)] = static_cast<int32_t>(horizon - 1 - j);
    }
    if (!lt.empty() && odd()) lt[in.ConsumeIntegralInRange<size_t>(0, lt.size() - 1)] = in.PickValueInArray<double>({NAN, inf, -inf, 0.0});
    if (!top.empty() && odd()) top[in.ConsumeIntegralInRange<size_t>(0, top.size() - 1)] = in.PickValueInArray<int32_t>({-1, -2, 0, 1, 1000});
    std::vector<float> ld(lt.begin(), lt.end());
    const auto ties = values<uint8_t>(rows, 0, {1, 2});
    dataset<uint16_t>(s, "q", "bfloat16", {b, sl, h, d}, &bf16);
    dataset<uint16_t>(s, "k", "bfloat16", {b, sl, d}, &kbf16);
    dataset<uint8_t>(s, "q_codes", "uint8", {b, sl, h, d}, &qc);
    dataset<float>(s, "q_scale", "float32", {b, sl, h}, &qs);
    dataset<uint8_t>(s, "k_codes", "uint8", {b, sl, d}, &kc);
    dataset<float>(s, "k_scale", "float32", {b, sl}, &ks);
    dataset<float>(s, "weights", "float32", {b, sl, h}, &w);
    dataset<int32_t>(s, "n_valid", "int32", {b, sl}, &nv);
    dataset<double>(s, "logits_truth", "float64", {b, sl, T}, &lt);
    dataset<float>(s, "logits_deployed", "float32", {b, sl, T}, &ld);
    dataset<int32_t>(s, "topk_truth", "int32", {b, sl, K}, &top);
    dataset<int32_t>(s, "topk_deployed", "int32", {b, sl, K}, &top);
    dataset<uint8_t>(s, "tie_truth", "uint8", {b, sl}, &ties);
    dataset<uint8_t>(s, "tie_deployed", "uint8", {b, sl}, &ties);
    H5Gclose(s);
  }
  H5Gclose(g);
}

}  // namespace mla::fuzz::schema
