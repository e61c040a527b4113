// The fresh twin of a stored merge case (mla/certify/twin.hpp).
#include <cmath>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "mla/certify/twin.hpp"
#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"

namespace mla::certify {
namespace {

std::vector<int> drawn_permutation(uint64_t seed, uint64_t stream, int n) {
  std::vector<int> p;
  for (const int64_t i : gen::permutation(seed, stream, n)) p.push_back(static_cast<int>(i));
  return p;
}

}  // namespace

MergeBuffers make_merge_twin(const MergeInputs& in, uint64_t seed, double out_noise, MergeTwinMap* map) {
  const auto& s = in.shape;
  const std::size_t vb = bytes_per_value(s.dtype), n = static_cast<std::size_t>(s.tokens),
                    h = static_cast<std::size_t>(s.heads), dim = static_cast<std::size_t>(s.head_dim);
  if (in.out_a.size() != n * h * dim * vb || in.out_b.size() != in.out_a.size() || in.lse_a.size() != n * h ||
      in.lse_b.size() != n * h) {
    throw Error(fmt::format("a merge twin needs buffers that match the case's shape (out {} and {} bytes, lse {} and {} values)",
                            in.out_a.size(), in.out_b.size(), in.lse_a.size(), in.lse_b.size()));
  }
  const auto heads = drawn_permutation(seed, 1, s.heads);
  const auto from = drawn_permutation(seed, 2, s.head_dim);
  // The sign bit is the top bit of the value's last byte (little-endian bf16, f16 and f32 alike).
  const auto flipped = [&](std::size_t i) { return (gen::bits(seed, 3, i) & 1u) != 0; };
  if (map) {
    *map = MergeTwinMap{heads, from, {}};
    for (std::size_t i = 0; i < dim; ++i) map->dim_flip.push_back(flipped(i) ? 1 : 0);
  }
  MergeBuffers t;
  t.shape = s;
  t.lse_a.resize(n * h), t.lse_b.resize(n * h);
  for (std::size_t x = 0; x < n; ++x) {
    for (std::size_t j = 0; j < h; ++j) {
      const std::size_t src = static_cast<std::size_t>(heads[j]) * n + x, dst = j * n + x;
      // One shift for both sides: the weights stay, the merged lse moves by it.
      const auto shift = static_cast<float>(gen::value(seed, 4, dst, 0.0, 1.0));
      const float a = in.lse_a[src], b = in.lse_b[src];
      t.lse_a[dst] = std::isfinite(a) ? a + shift : a;
      t.lse_b[dst] = std::isfinite(b) ? b + shift : b;
    }
  }
  // out: moved, flipped, then (where its side is not empty) noise of out_noise of the RMS.
  const auto moved = [&](std::span<const uint8_t> src_out) {
    std::vector<uint8_t> out(src_out.size());
    for (std::size_t x = 0; x < n; ++x) {
      for (std::size_t j = 0; j < h; ++j) {
        for (std::size_t i = 0; i < dim; ++i) {
          const std::size_t at = (x * h + j) * dim + i;
          const std::size_t src = (x * h + static_cast<std::size_t>(heads[j])) * dim + static_cast<std::size_t>(from[i]);
          std::memcpy(out.data() + at * vb, src_out.data() + src * vb, vb);
          if (flipped(i)) out[at * vb + vb - 1] ^= 0x80u;
        }
      }
    }
    return out;
  };
  const auto noisy = [&](std::vector<uint8_t> out, const std::vector<float>& lse, uint64_t stream) {
    double sum2 = 0;
    std::size_t finite = 0;
    for (std::size_t e = 0; e < n * h * dim; ++e) {
      const double v = state_value(s.dtype, out, e);
      if (std::isfinite(v) && std::isfinite(lse[(e / dim % h) * n + e / dim / h])) sum2 += v * v, ++finite;
    }
    const double sd = finite ? out_noise * std::sqrt(sum2 / static_cast<double>(finite)) : 0.0;
    std::vector<uint8_t> res;
    res.reserve(out.size());
    for (std::size_t e = 0; e < n * h * dim; ++e) {
      const double v = state_value(s.dtype, out, e);
      const bool live = std::isfinite(v) && std::isfinite(lse[(e / dim % h) * n + e / dim / h]);
      if (live && sd > 0) {
        append_state_value(s.dtype, v + gen::value(seed, stream, e, 0.0, sd), res);
      } else {
        res.insert(res.end(), out.begin() + static_cast<std::ptrdiff_t>(e * vb),
                   out.begin() + static_cast<std::ptrdiff_t>((e + 1) * vb));
      }
    }
    return res;
  };
  t.out_a = noisy(moved(in.out_a), t.lse_a, 5);
  t.out_b = noisy(moved(in.out_b), t.lse_b, 6);
  return t;
}

}  // namespace mla::certify
