// fuzz_golden_schema's writers of prefill and merge cases (fixtures/SCHEMA.md, "Prefill cases",
// "Merge cases"): mostly consistent with rare deviations, as the other writers (schema_builder.hpp).
#include <cmath>

#include "schema_builder.hpp"

namespace mla::fuzz::schema {

// The truth and same_dtype results of a prefill case: out 0 and lse +inf in the rows that attend
// nothing (no key, or causal with t < s_q - s_k), finite elsewhere; sometimes one element wrong.
// hl: the heads the loops run over (0 when the arrays do not fit in kWriteCap).
void Builder::prefill_results(hid_t g, const std::vector<int64_t>& sq, const std::vector<int64_t>& sk, bool causal,
                              int64_t tq, int64_t h, int64_t hl, int64_t dv) {
  std::vector<char> empty;
  for (std::size_t i = 0; i < sq.size(); ++i) {
    for (int64_t j = 0; j < sq[i]; ++j) empty.push_back(sk[i] == 0 || (causal && sk[i] - sq[i] + j < 0));
  }
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> out(static_cast<size_t>(std::clamp<int64_t>(smul(smul(tq, h), dv), 0, kWriteCap)), 0.5);
  std::vector<double> lse(static_cast<size_t>(std::clamp<int64_t>(smul(h, tq), 0, kWriteCap)), 1.0);
  std::vector<uint16_t> sd_out(out.size(), 0x3F00);
  std::vector<float> sd_lse(lse.size(), 1.0f);
  for (int64_t t = 0; t < static_cast<int64_t>(empty.size()); ++t) {
    if (!empty[static_cast<size_t>(t)]) continue;
    for (int64_t hh = 0; hh < hl; ++hh) {
      const int64_t li = hh * tq + t;
      if (li < static_cast<int64_t>(lse.size())) {
        lse[static_cast<size_t>(li)] = inf;
        sd_lse[static_cast<size_t>(li)] = INFINITY;
      }
      for (int64_t d = 0; d < dv; ++d) {
        const int64_t oi = (t * h + hh) * dv + d;
        if (oi < static_cast<int64_t>(out.size())) {
          out[static_cast<size_t>(oi)] = 0;
          sd_out[static_cast<size_t>(oi)] = 0;
        }
      }
    }
  }
  if (!out.empty() && odd()) out[in.ConsumeIntegralInRange<size_t>(0, out.size() - 1)] = in.PickValueInArray({nan, inf, 0.0});
  if (!lse.empty() && odd()) lse[in.ConsumeIntegralInRange<size_t>(0, lse.size() - 1)] = in.PickValueInArray({nan, inf, -inf, 0.0});
  if (!sd_out.empty() && odd()) sd_out[in.ConsumeIntegralInRange<size_t>(0, sd_out.size() - 1)] = in.PickValueInArray<uint16_t>({0x7FC0, 0x7F80, 0x3F80});
  if (!sd_lse.empty() && odd()) sd_lse[in.ConsumeIntegralInRange<size_t>(0, sd_lse.size() - 1)] = in.PickValueInArray<float>({NAN, INFINITY, -INFINITY});
  dataset<double>(g, "truth/out", "float64", {tq, h, dv}, &out);
  dataset<double>(g, "truth/lse", "float64", {h, tq}, &lse);
  dataset<uint16_t>(g, "same_dtype/out", "bfloat16", {tq, h, dv}, &sd_out);
  dataset<float>(g, "same_dtype/lse", "float32", {h, tq}, &sd_lse);
}

// A prefill case (SCHEMA.md "Prefill cases"): varlen q/k/v, cu_seqlens, optional needles, the
// truth and same_dtype results with out 0 / lse +inf exactly in the rows that attend nothing.
void Builder::prefill_case(hid_t cases, const std::string& family) {
  const hid_t g = group(cases, pick({"p", "p_1"}));
  if (g < 0) return;
  const int64_t b = num(1, 3), h = num(1, 3);
  const int64_t dqk = odd(4) ? 192 : num(1, 8), dv = odd(4) ? 128 : num(1, 8);
  const bool causal = in.ConsumeBool(), stored = !odd(4);
  std::vector<int64_t> sq, sk;
  for (int64_t i = 0; i < std::min<int64_t>(b, 64); ++i) {
    sq.push_back(in.ConsumeIntegralInRange<int64_t>(0, 4));
    sk.push_back(in.ConsumeIntegralInRange<int64_t>(0, 6));
  }
  int64_t tq = 0, tk = 0;
  for (std::size_t i = 0; i < sq.size(); ++i) {
    tq += sq[i];
    tk += sk[i];
  }
  // The builder's loops run over the heads and widths only when every array fits in kWriteCap
  // (a wild extent is written unstored and its values never matter).
  const auto in_cap = [](int64_t x) { return x >= 0 && x <= kWriteCap; };
  const bool fits = in_cap(h) && in_cap(dqk) && in_cap(dv) && in_cap(smul(smul(std::max(tq, tk), h), std::max(dqk, dv)));
  const int64_t hl = fits ? h : 0;
  const mla::golden::Family* known = mla::golden::find_family(family);
  str(g, "kind", known ? known->case_kind : std::string("prefill"));
  str(g, "description", "fuzz");
  i64(g, "batch", b);
  i64(g, "heads", h);
  i64(g, "d_qk", dqk);
  i64(g, "d_v", dv);
  i64(g, "total_q", odd() ? num(0, 20) : tq);
  i64(g, "total_k", odd() ? num(0, 30) : tk);
  i64(g, "causal", odd() ? num(0, 2) : causal);
  f64(g, "softmax_scale", odd() ? in.ConsumeFloatingPoint<double>() : 0.072);
  i64(g, "seed", num(0, 1000));
  i64(g, "inputs_stored", odd() ? num(0, 5) : stored);
  if (odd(4)) str(g, "layer_preset", "v3-tp8");

  const auto cu_q = cu_seqlens(sq), cu_k = cu_seqlens(sk);
  // b may be a wild value (num): the extent saturates like every other computed one.
  dataset<int32_t>(g, "inputs/cu_seqlens_q", "int32", {sadd(b, 1)}, &cu_q);
  dataset<int32_t>(g, "inputs/cu_seqlens_k", "int32", {sadd(b, 1)}, &cu_k);
  // Finite bf16 inputs (1.0), sometimes one NaN or infinity; needle keys carry alpha (2.0).
  const uint16_t one = 0x3F80, alpha = 0x4000;
  auto k = values<uint16_t>(smul(smul(tk, h), dqk), one, {0x7FC0, 0x7F80, 0xFF80});
  // One case in four has needles, whatever the rarity: a fully valid file reaches their checks.
  const bool needles = stored && in.ConsumeIntegralInRange<int>(0, 3) == 3;
  std::vector<int32_t> pos;
  if (needles) {
    for (std::size_t i = 0; i < sk.size(); ++i) {
      for (int64_t t = 0; t < sk[i]; t += 2) {
        pos.push_back(static_cast<int32_t>(i));
        pos.push_back(static_cast<int32_t>(t));
        for (int64_t hh = 0; hh < hl; ++hh) {
          const int64_t at = ((cu_k[i] + t) * h + hh) * dqk + dqk - 1;
          if (at >= 0 && at < static_cast<int64_t>(k.size())) k[static_cast<size_t>(at)] = alpha;
        }
      }
    }
    if (!pos.empty() && odd()) pos[in.ConsumeIntegralInRange<size_t>(0, pos.size() - 1)] = static_cast<int32_t>(num(-1, 8));
  }
  if (stored) {
    const auto q = values<uint16_t>(smul(smul(tq, h), dqk), one, {0x7FC0, 0xFF80});
    const auto v = values<uint16_t>(smul(smul(tk, h), dv), one, {0x7FC1, 0x7F80});
    dataset<uint16_t>(g, "inputs/q", "bfloat16", {tq, h, dqk}, &q);
    dataset<uint16_t>(g, "inputs/k", "bfloat16", {tk, h, dqk}, &k);
    dataset<uint16_t>(g, "inputs/v", "bfloat16", {tk, h, dv}, &v);
  } else {
    generated(g, "generated/q", "bfloat16", {tq, h, dqk});
    generated(g, "generated/k", "bfloat16", {tk, h, dqk});
    generated(g, "generated/v", "bfloat16", {tk, h, dv});
  }
  if (needles || odd()) {
    const hid_t n = group(g, "needles");
    if (n >= 0) {
      str(n, "rule", "prefill-needles-v1");
      f64(n, "alpha", odd() ? in.ConsumeFloatingPoint<double>() : 2.0);
      f64(n, "spike", 4.0);
      dataset<int32_t>(n, "positions", "int32", {static_cast<int64_t>(pos.size() / 2), 2}, &pos);
      H5Gclose(n);
    }
  }
  prefill_results(g, sq, sk, causal, tq, h, hl, dv);
  H5Gclose(g);
}

// An out of `dtype` (bfloat16 and float16 as uint16 bits, float32 as float) from the values
// 0, 0.5 and NaN: `code` 0, 1, 2 per element.
void Builder::typed_out(hid_t g, const std::string& path, const std::string& dtype, std::vector<int64_t> shape,
                        const std::vector<uint8_t>& code) {
  if (dtype == "float32") {
    std::vector<float> v(code.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = code[i] == 0 ? 0.0f : code[i] == 1 ? 0.5f : NAN;
    return dataset<float>(g, path, "float32", std::move(shape), &v);
  }
  const bool bf = dtype != "float16";
  const uint16_t half = bf ? 0x3F00 : 0x3800, qnan = bf ? 0x7FC0 : 0x7E00;
  std::vector<uint16_t> v(code.size());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = code[i] == 0 ? 0 : code[i] == 1 ? half : qnan;
  dataset<uint16_t>(g, path, dtype.c_str(), std::move(shape), &v);
}

// A merge case (SCHEMA.md "Merge cases"): two partial states whose lse may be +-inf (that
// side's out then NaN, legal) and the merged results, lse -inf and out 0 where both are empty.
void Builder::merge_case(hid_t cases, const std::string& family) {
  const hid_t g = group(cases, pick({"m", "m_1"}));
  if (g < 0) return;
  const int64_t n = num(0, 4), h = num(1, 3), d = odd(4) ? 512 : num(1, 8);
  std::string dtype = pick({"bfloat16", "float16", "float32"});
  const mla::golden::Family* known = mla::golden::find_family(family);
  str(g, "kind", known ? known->case_kind : std::string("merge"));
  str(g, "description", "fuzz");
  i64(g, "tokens", n);
  i64(g, "heads", h);
  i64(g, "head_dim", d);
  str(g, "out_dtype", dtype);
  i64(g, "seed", num(0, 1000));
  i64(g, "inputs_stored", odd() ? num(0, 5) : 1);
  if (odd()) dtype = pick({"bfloat16", "float16", "float32"});  // datasets of another type than out_dtype says

  // Values only when every array fits in kWriteCap (a wild extent is written unstored).
  const auto in_cap = [](int64_t x) { return x >= 0 && x <= kWriteCap; };
  const bool fits = in_cap(n) && in_cap(h) && in_cap(d) && in_cap(smul(smul(n, h), d)) && in_cap(smul(h, n));
  const int64_t nn = fits ? n : 0, hn = fits ? h : 0, dn = fits ? d : 0;
  const int64_t nl = hn * nn, no = nn * hn * dn;
  const float inf = INFINITY;
  std::vector<float> lse[2];
  std::vector<uint8_t> code[2];
  for (int s = 0; s < 2; ++s) {
    lse[s].assign(static_cast<size_t>(nl), 1.0f);
    code[s].assign(static_cast<size_t>(no), 1);
    for (auto& l : lse[s]) l = in.PickValueInArray<float>({1.0f, -3.0f, 500.0f, inf, -inf});
    if (!lse[s].empty() && odd()) lse[s][in.ConsumeIntegralInRange<size_t>(0, lse[s].size() - 1)] = NAN;
    for (int64_t t = 0; t < nn; ++t) {
      for (int64_t hh = 0; hh < hn; ++hh) {
        const int64_t li = hh * nn + t;
        const bool empty = li < nl && std::isinf(lse[s][static_cast<size_t>(li)]);
        for (int64_t k = 0; k < dn; ++k) {
          const int64_t oi = (t * hn + hh) * dn + k;
          if (oi < no && (empty ? in.ConsumeBool() : odd(64))) code[s][static_cast<size_t>(oi)] = 2;  // NaN
        }
      }
    }
  }
  std::vector<double> lse_m(static_cast<size_t>(nl), 1.0);
  std::vector<uint8_t> code_m(static_cast<size_t>(no), 1);
  for (int64_t t = 0; t < nn; ++t) {
    for (int64_t hh = 0; hh < hn; ++hh) {
      const int64_t li = hh * nn + t;
      if (li >= nl || !std::isinf(lse[0][static_cast<size_t>(li)]) || !std::isinf(lse[1][static_cast<size_t>(li)])) continue;
      lse_m[static_cast<size_t>(li)] = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < dn; ++k) {
        const int64_t oi = (t * hn + hh) * dn + k;
        if (oi < no) code_m[static_cast<size_t>(oi)] = 0;
      }
    }
  }
  if (!lse_m.empty() && odd()) lse_m[in.ConsumeIntegralInRange<size_t>(0, lse_m.size() - 1)] = in.PickValueInArray<double>({NAN, INFINITY, -INFINITY, 0.0});
  if (!code_m.empty() && odd()) code_m[in.ConsumeIntegralInRange<size_t>(0, code_m.size() - 1)] = in.PickValueInArray<uint8_t>({0, 1, 2});
  std::vector<double> out_m(code_m.size());
  for (std::size_t i = 0; i < out_m.size(); ++i) out_m[i] = code_m[i] == 0 ? 0.0 : code_m[i] == 1 ? 0.5 : NAN;
  std::vector<float> sd_lse(lse_m.begin(), lse_m.end());
  for (int s = 0; s < 2; ++s) {
    const std::string side = s == 0 ? "a" : "b";
    typed_out(g, "inputs/out_" + side, dtype, {n, h, d}, code[s]);
    dataset<float>(g, "inputs/lse_" + side, "float32", {h, n}, &lse[s]);
  }
  dataset<double>(g, "truth/out", "float64", {n, h, d}, &out_m);
  dataset<double>(g, "truth/lse", "float64", {h, n}, &lse_m);
  typed_out(g, "same_dtype/out", dtype, {n, h, d}, code_m);
  dataset<float>(g, "same_dtype/lse", "float32", {h, n}, &sd_lse);
  H5Gclose(g);
}

}  // namespace mla::fuzz::schema
