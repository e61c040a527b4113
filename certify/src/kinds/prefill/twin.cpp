// The fresh twin of a stored prefill case (mla/certify/twin.hpp).
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "mla/certify/twin.hpp"
#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"
#include "kinds/twin_draw.hpp"

namespace mla::certify {
namespace {

// rows x heads x width bf16 values: new [r, h, i] = stored [r, heads[h], from[i]], negated by flip[i].
void map_rows(std::span<const uint16_t> src, std::vector<uint16_t>& dst, int64_t rows, const std::vector<int>& heads,
              int width, const std::vector<int>& from, const std::vector<uint8_t>& flip) {
  const auto h_n = heads.size(), w = static_cast<std::size_t>(width);
  dst.resize(src.size());
  for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) {
    for (std::size_t h = 0; h < h_n; ++h) {
      const uint16_t* s = src.data() + (r * h_n + static_cast<std::size_t>(heads[h])) * w;
      uint16_t* d = dst.data() + (r * h_n + h) * w;
      for (std::size_t i = 0; i < w; ++i) d[i] = bf16_signed(s[from[i]], flip[i] != 0);
    }
  }
}

}  // namespace

PrefillBuffers make_prefill_twin(const PrefillInputs& in, uint64_t seed, double q_noise, PrefillTwinMap* map) {
  const auto& s = in.shape;
  const auto h = static_cast<std::size_t>(s.heads);
  if (s.d_qk != kMhaDqk || s.d_v != kMhaDv || in.q.size() != static_cast<std::size_t>(s.total_q) * h * kMhaDqk ||
      in.k.size() != static_cast<std::size_t>(s.total_k) * h * kMhaDqk ||
      in.v.size() != static_cast<std::size_t>(s.total_k) * h * kMhaDv) {
    throw Error(fmt::format("a prefill twin needs a {}/{}-wide case whose buffers match its shape (q {}, k {}, v {} values)",
                            kMhaDqk, kMhaDv, in.q.size(), in.k.size(), in.v.size()));
  }
  constexpr int kNope = kMhaNope, kRope = kMhaRope;  // 128 and 64
  TwinDraw d(seed);
  const auto heads = d.permutation(s.heads);
  const auto nope = d.permutation(kNope), rope = d.permutation(kRope);
  std::vector<int> qk_from(nope.begin(), nope.end());
  for (const int i : rope) qk_from.push_back(kNope + i);
  const auto qk_flip = d.signs(kMhaDqk);
  const auto v_from = d.permutation(kMhaDv);
  const auto v_flip = d.signs(kMhaDv);
  if (map) *map = PrefillTwinMap{heads, qk_from, v_from, qk_flip, v_flip};

  PrefillBuffers t;
  t.shape = s;
  t.softmax_scale = in.softmax_scale;
  t.cu_seqlens_q.assign(in.cu_seqlens_q.begin(), in.cu_seqlens_q.end());
  t.cu_seqlens_k.assign(in.cu_seqlens_k.begin(), in.cu_seqlens_k.end());
  map_rows(in.q, t.q, s.total_q, heads, kMhaDqk, qk_from, qk_flip);
  map_rows(in.k, t.k, s.total_k, heads, kMhaDqk, qk_from, qk_flip);
  map_rows(in.v, t.v, s.total_k, heads, kMhaDv, v_from, v_flip);
  // q moved by noise: new logits.
  const double noise = bf16_noise_sd(t.q, q_noise);
  const uint64_t noise_seed = d.next();
  if (noise > 0) {
    for (std::size_t i = 0; i < t.q.size(); ++i) {
      t.q[i] = bf16_from_double(static_cast<double>(bf16_to_float(t.q[i])) + gen::value(noise_seed, 0, i, 0.0, noise));
    }
  }
  return t;
}

}  // namespace mla::certify
