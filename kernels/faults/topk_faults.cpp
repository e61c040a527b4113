// The planted top-k bugs (faults.hpp lists them): the exact selection of cpu_topk_exact with one
// field bug each, written per row so that each bug is visible in a few lines.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/error.hpp"
#include "mla/faults/faults.hpp"

namespace mla::faults {
namespace {

enum class TopkFault {
  last_valid_dropped,
  range_end_ignored,
  masked_filler,
  duplicate,
  one_short,
  padding_first,
  unsorted_declared_sorted,
  index_past_row,
  absolute_declared_relative,
  relative_declared_absolute,
};

struct TopkSpec {
  TopkFault fault;
  const char* name;
  const char* description;
};

const std::vector<TopkSpec>& topk_specs() {
  static const std::vector<TopkSpec> specs{
      {TopkFault::last_valid_dropped, "last_valid_dropped",
       "scans [start, end - 1): the row's last valid position is never selected"},
      {TopkFault::range_end_ignored, "range_end_ignored",
       "scans [start, n): a row selects positions past its end (a causal future)"},
      {TopkFault::masked_filler, "masked_filler", "fills a short row with -inf positions instead of -1"},
      {TopkFault::duplicate, "duplicate", "the last selected slot repeats the first"},
      {TopkFault::one_short, "one_short", "one index fewer than min(k, valid positions)"},
      {TopkFault::padding_first, "padding_first", "the -1 padding before the selection"},
      {TopkFault::unsorted_declared_sorted, "unsorted_declared_sorted", "ascending order, declared sorted"},
      {TopkFault::index_past_row, "index_past_row", "pads with n instead of -1"},
      {TopkFault::absolute_declared_relative, "absolute_declared_relative",
       "writes columns, declares indices relative to the row's start"},
      {TopkFault::relative_declared_absolute, "relative_declared_absolute",
       "writes offsets from the row's start, declares columns"},
  };
  return specs;
}

// The conventions each declares: sorted and absolute, except the base bugs, which declare what
// vLLM's radix top-k does (unsorted) so that the order rule does not speak first.
TopkConventions declared(TopkFault f) {
  if (f == TopkFault::absolute_declared_relative) return {IndexBase::relative, false};
  if (f == TopkFault::relative_declared_absolute) return {IndexBase::absolute, false};
  return {IndexBase::absolute, true};
}

// The exact selection of row r (valid positions by descending logit, ties by position) with the
// bug, in the conventions the kernel declares.
void buggy_row(TopkFault f, const TopkInputs& in, int64_t r, std::span<int32_t> out) {
  const auto& s = in.shape;
  const float* row = in.logits.data() + r * s.n;
  const int64_t b = in.starts[static_cast<std::size_t>(r)];
  int64_t e = std::max(b, static_cast<int64_t>(in.ends[static_cast<std::size_t>(r)]));
  if (f == TopkFault::last_valid_dropped) {
    while (e > b && !std::isfinite(row[e - 1])) --e;  // the last VALID position, not just the last one
    e = std::max(b, e - 1);
  }
  if (f == TopkFault::range_end_ignored) e = s.n;
  std::vector<int64_t> pick, masked;
  for (int64_t j = b; j < e; ++j) (std::isfinite(row[j]) ? pick : masked).push_back(j);
  std::sort(pick.begin(), pick.end(), [&](int64_t x, int64_t y) { return row[x] != row[y] ? row[x] > row[y] : x < y; });
  if (static_cast<int64_t>(pick.size()) > s.k) pick.resize(static_cast<std::size_t>(s.k));
  if (f == TopkFault::masked_filler) {
    for (std::size_t i = 0; i < masked.size() && static_cast<int64_t>(pick.size()) < s.k; ++i) pick.push_back(masked[i]);
  }
  if (f == TopkFault::duplicate && pick.size() >= 2) pick.back() = pick.front();
  if (f == TopkFault::one_short && !pick.empty()) pick.pop_back();
  if (f == TopkFault::unsorted_declared_sorted) std::reverse(pick.begin(), pick.end());
  if (f == TopkFault::relative_declared_absolute) {
    for (auto& x : pick) x -= b;
  }
  std::fill(out.begin(), out.end(), f == TopkFault::index_past_row ? static_cast<int32_t>(s.n) : -1);
  const std::size_t pad = out.size() - pick.size();
  const std::size_t at = f == TopkFault::padding_first ? pad : 0;
  for (std::size_t i = 0; i < pick.size(); ++i) out[at + i] = static_cast<int32_t>(pick[i]);
}

class FaultyTopk final : public TopkImpl {
 public:
  FaultyTopk(TopkFault f, std::string name, std::string description) : fault_(f) {
    info_.name = std::move(name);
    info_.backend = "cpu";
    info_.description = std::move(description);
    info_.precision = LogitsPrecision::f32;
    info_.conventions = declared(f);
  }
  const TopkKernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedTopk> prepare(const TopkInputs& in) const override {
    validate_topk_inputs(in, info_.name);
    struct Prepared final : PreparedTopk {
      TopkFault fault;
      TopkBuffers in;
      std::vector<int32_t> out;
      void run() override {
        const auto v = in.view();
        const auto k = static_cast<std::size_t>(v.shape.k);
        out.assign(static_cast<std::size_t>(v.shape.rows) * k, -1);
        for (int64_t r = 0; r < v.shape.rows; ++r) {
          buggy_row(fault, v, r, std::span<int32_t>(out).subspan(static_cast<std::size_t>(r) * k, k));
        }
      }
      TopkOutputs results() override { return TopkOutputs{{out.begin(), out.end()}}; }
    };
    auto p = std::make_unique<Prepared>();
    p->fault = fault_;
    p->in = TopkBuffers(in);
    return p;
  }

 private:
  TopkFault fault_;
  TopkKernelInfo info_;
};

}  // namespace

const std::vector<std::string>& topk_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& s : topk_specs()) n.emplace_back(s.name);
    return n;
  }();
  return names;
}

std::unique_ptr<TopkImpl> make_topk(const std::string& name) {
  for (const auto& s : topk_specs()) {
    if (name == s.name) return std::make_unique<FaultyTopk>(s.fault, fmt::format("cpu_topk_{}", s.name), s.description);
  }
  throw Error(fmt::format("unknown top-k fault kernel '{}' (known: {})", name, fmt::join(topk_names(), ", ")));
}

}  // namespace mla::faults
