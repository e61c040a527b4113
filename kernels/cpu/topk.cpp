// The host top-k kernels (mla/core/topk.hpp), two algorithms so that the judge's normalization
// and its tie rule are exercised by kernels that legitimately disagree on ties:
//   cpu_topk_exact      the oracle: every valid position sorted by (logit descending, position
//                       ascending), absolute indices, sorted, -1 padded; deterministic.
//   cpu_topk_radix_f32  a radix select as vLLM's per-row top-k does it: the k-th largest key
//                       found 8 bits at a time over order-preserving integer keys, then every
//                       larger key in arrival order and the ties at the threshold from the END of
//                       the row (the opposite tie-break to the oracle's); indices relative to
//                       the row's start, unsorted, -1 padded.
// Both compare the given float32 values exactly (declared precision f32).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/core/threads.hpp"
#include "mla/core/topk.hpp"

namespace mla::cpu {
namespace {

// Rows are independent: split them over the threads; each piece writes only its rows.
constexpr std::size_t kRowsPerPiece = 16;

void exact_row(const TopkInputs& in, int64_t r, std::span<int32_t> out) {
  const auto& s = in.shape;
  const int64_t b = in.starts[static_cast<std::size_t>(r)], e = in.ends[static_cast<std::size_t>(r)];
  const float* row = in.logits.data() + r * s.n;
  std::vector<int32_t> valid;
  for (int64_t j = b; j < e; ++j) {
    if (std::isfinite(row[j])) valid.push_back(static_cast<int32_t>(j));
  }
  std::sort(valid.begin(), valid.end(), [&](int32_t x, int32_t y) {
    return row[x] != row[y] ? row[x] > row[y] : x < y;
  });
  std::fill(out.begin(), out.end(), -1);
  std::copy_n(valid.begin(), std::min<std::size_t>(valid.size(), out.size()), out.begin());
}

// Larger float -> larger unsigned key: flip every bit of a negative, only the sign of a positive.
uint32_t order_key(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

void radix_row(const TopkInputs& in, int64_t r, std::span<int32_t> out) {
  const auto& s = in.shape;
  const int64_t b = in.starts[static_cast<std::size_t>(r)], e = std::max<int64_t>(b, in.ends[static_cast<std::size_t>(r)]);
  const float* row = in.logits.data() + r * s.n;
  std::fill(out.begin(), out.end(), -1);
  int64_t valid = 0;
  for (int64_t j = b; j < e; ++j) valid += std::isfinite(row[j]);
  std::size_t w = 0;
  if (valid <= static_cast<int64_t>(out.size())) {
    for (int64_t j = b; j < e; ++j) {
      if (std::isfinite(row[j])) out[w++] = static_cast<int32_t>(j - b);
    }
    return;
  }
  // Radix select of the k-th largest key: fix one byte per pass from the top, keeping in
  // `need` how many of the keys that share the fixed prefix still belong to the top k.
  uint32_t prefix = 0, mask = 0;
  int64_t need = static_cast<int64_t>(out.size());
  for (int shift = 24; shift >= 0; shift -= 8) {
    std::array<int64_t, 256> hist{};
    for (int64_t j = b; j < e; ++j) {
      if (!std::isfinite(row[j])) continue;
      const uint32_t key = order_key(row[j]);
      if ((key & mask) == prefix) ++hist[(key >> shift) & 0xFFu];
    }
    int digit = 255;
    while (hist[static_cast<std::size_t>(digit)] < need) need -= hist[static_cast<std::size_t>(digit--)];
    prefix |= static_cast<uint32_t>(digit) << shift;
    mask |= 0xFFu << shift;
  }
  // `prefix` is now the threshold key; `need` of the keys equal to it complete the top k.
  for (int64_t j = b; j < e; ++j) {
    if (std::isfinite(row[j]) && order_key(row[j]) > prefix) out[w++] = static_cast<int32_t>(j - b);
  }
  for (int64_t j = e - 1; j >= b && need > 0; --j) {
    if (std::isfinite(row[j]) && order_key(row[j]) == prefix) out[w++] = static_cast<int32_t>(j - b), --need;
  }
}

using RowFn = void (*)(const TopkInputs&, int64_t, std::span<int32_t>);

class TopkPrepared final : public PreparedTopk {
 public:
  TopkPrepared(const TopkInputs& in, RowFn fn)
      : in_(in), fn_(fn), out_(static_cast<std::size_t>(in.shape.rows * in.shape.k)) {}
  void run() override {
    const TopkInputs v = in_.view();
    const auto k = static_cast<std::size_t>(v.shape.k);
    parallel_for(static_cast<std::size_t>(v.shape.rows), kRowsPerPiece, [&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r) fn_(v, static_cast<int64_t>(r), std::span<int32_t>(out_).subspan(r * k, k));
    });
  }
  TopkOutputs results() override { return TopkOutputs{{out_.begin(), out_.end()}}; }

 private:
  TopkBuffers in_;
  RowFn fn_;
  std::vector<int32_t> out_;
};

class CpuTopk final : public TopkImpl {
 public:
  CpuTopk(TopkKernelInfo info, RowFn fn) : info_(std::move(info)), fn_(fn) {}
  const TopkKernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedTopk> prepare(const TopkInputs& in) const override {
    validate_topk_inputs(in, info_.name);
    if (auto why = check(in.shape)) throw UnsupportedError(info_.name + ": " + *why);
    return std::make_unique<TopkPrepared>(in, fn_);
  }

 private:
  TopkKernelInfo info_;
  RowFn fn_;
};

}  // namespace
}  // namespace mla::cpu

namespace mla::builtin {

std::unique_ptr<TopkImpl> make_cpu_topk_exact() {
  TopkKernelInfo i;
  i.name = "cpu_topk_exact";
  i.backend = "cpu";
  i.description = "top-k by a full sort of each row's valid logits (ties by ascending position), absolute, sorted";
  i.role = KernelRole::oracle;
  i.precision = LogitsPrecision::f32;
  i.conventions = {IndexBase::absolute, true};
  return std::make_unique<cpu::CpuTopk>(std::move(i), cpu::exact_row);
}

std::unique_ptr<TopkImpl> make_cpu_topk_radix_f32() {
  TopkKernelInfo i;
  i.name = "cpu_topk_radix_f32";
  i.backend = "cpu";
  i.description = "top-k by an 8-bit radix select on float32 keys (ties from the row's end), relative, unsorted";
  i.role = KernelRole::baseline;
  i.precision = LogitsPrecision::f32;
  i.conventions = {IndexBase::relative, false};
  return std::make_unique<cpu::CpuTopk>(std::move(i), cpu::radix_row);
}

}  // namespace mla::builtin
