#include "mla/core/conventions.hpp"

#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla {
namespace {

template <class E, std::size_t N>
E parse(std::string_view s, const E (&all)[N], const char* what) {
  std::string known;
  for (E e : all) {
    if (s == to_string(e)) return e;
    known += known.empty() ? "" : ", ";
    known += to_string(e);
  }
  throw Error(fmt::format("unknown {} '{}' (known: {})", what, s, known));
}

constexpr LseBase kBases[] = {LseBase::e, LseBase::two};
constexpr LseLayout kLayouts[] = {LseLayout::b_h_sq, LseLayout::b_sq_h};
constexpr EmptyRowLse kEmpties[] = {EmptyRowLse::pos_inf, EmptyRowLse::neg_inf};
constexpr IndexNumbering kNumberings[] = {IndexNumbering::positions, IndexNumbering::global_slots};

void need_exactly(const char* what, std::size_t have, int64_t want) {
  if (want < 0 || static_cast<int64_t>(have) != want) {
    throw Error(fmt::format("conventions: {} has {} elements, the shape needs {}", what, have, want));
  }
}

int64_t lse_count(const AttnShape& s) { return int64_t{s.batch} * s.heads * s.s_q; }

// Where canonical lse element (b, h, s) lives in the kernel's layout.
int64_t kernel_lse_index(LseLayout l, const AttnShape& s, int64_t b, int64_t h, int64_t q) {
  return l == LseLayout::b_sq_h ? (b * s.s_q + q) * s.heads + h : (b * s.heads + h) * s.s_q + q;
}

// The value change between the two conventions, one element; `to_canonical` picks the direction.
// Exchanging the infinities is its own inverse; the base change is a multiplication by ln 2 one
// way and a division by it the other.
double convert_value(const Conventions& c, double v, bool to_canonical) {
  if (std::isinf(v)) return c.empty_row_lse == EmptyRowLse::neg_inf ? -v : v;
  if (c.lse_base == LseBase::two && std::isfinite(v)) {
    return to_canonical ? v * std::numbers::ln2 : v / std::numbers::ln2;
  }
  return v;
}

}  // namespace

const char* to_string(LseBase b) { return b == LseBase::two ? "2" : "e"; }
const char* to_string(LseLayout l) { return l == LseLayout::b_sq_h ? "[b,s_q,h]" : "[b,h,s_q]"; }
const char* to_string(EmptyRowLse e) { return e == EmptyRowLse::neg_inf ? "-inf" : "+inf"; }
const char* to_string(IndexNumbering n) { return n == IndexNumbering::global_slots ? "global_slots" : "positions"; }
LseBase lse_base_from_string(std::string_view s) { return parse(s, kBases, "lse base"); }
LseLayout lse_layout_from_string(std::string_view s) { return parse(s, kLayouts, "lse layout"); }
EmptyRowLse empty_row_lse_from_string(std::string_view s) { return parse(s, kEmpties, "empty-row lse"); }
IndexNumbering index_numbering_from_string(std::string_view s) { return parse(s, kNumberings, "index numbering"); }

nlohmann::json to_json(const Conventions& c) {
  return {{"lse_base", to_string(c.lse_base)},
          {"lse_layout", to_string(c.lse_layout)},
          {"empty_row_lse", to_string(c.empty_row_lse)},
          {"indices", to_string(c.indices)}};
}

Conventions conventions_from_json(const nlohmann::json& j) {
  try {
    Conventions c;
    c.lse_base = lse_base_from_string(j.at("lse_base").get<std::string>());
    c.lse_layout = lse_layout_from_string(j.at("lse_layout").get<std::string>());
    c.empty_row_lse = empty_row_lse_from_string(j.at("empty_row_lse").get<std::string>());
    c.indices = index_numbering_from_string(j.at("indices").get<std::string>());
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("malformed conventions: {}", e.what()));
  }
}

// What both directions of the index translation open with: a dense call has no indices and
// positions translate to themselves; otherwise every span the translation reads is checked
// against the shape. nullopt: the indices must be translated.
static std::optional<std::vector<int32_t>> decided_without_translation(IndexNumbering n, const AttnInputs& in) {
  const AttnShape& s = in.shape;
  if (s.topk == 0) return std::vector<int32_t>{};
  need_exactly("indices", in.indices.size(), int64_t{s.batch} * s.s_q * s.topk);
  if (n == IndexNumbering::positions) return std::vector<int32_t>(in.indices.begin(), in.indices.end());
  need_exactly("cache_seqlens", in.cache_seqlens.size(), s.batch);
  need_exactly("block_table", in.block_table.size(), int64_t{s.batch} * s.max_blocks);
  return std::nullopt;
}

std::vector<int32_t> indices_to_kernel(IndexNumbering n, const AttnInputs& in) {
  if (auto done = decided_without_translation(n, in)) return *done;
  const AttnShape& s = in.shape;
  std::vector<int32_t> out(in.indices.size());
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t L = in.cache_seqlens[static_cast<std::size_t>(b)];
    for (int64_t k = b * s.s_q * s.topk; k < (b + 1) * s.s_q * s.topk; ++k) {
      const int64_t p = in.indices[static_cast<std::size_t>(k)];
      if (p < 0 || p >= L) {
        out[static_cast<std::size_t>(k)] = -1;
        continue;
      }
      const int64_t block = in.block_table[static_cast<std::size_t>(b * s.max_blocks + p / s.page_size)];
      out[static_cast<std::size_t>(k)] = static_cast<int32_t>(block * s.page_size + p % s.page_size);
    }
  }
  return out;
}

std::vector<int32_t> indices_to_canonical(IndexNumbering n, const AttnInputs& in) {
  if (auto done = decided_without_translation(n, in)) return *done;
  const AttnShape& s = in.shape;
  std::vector<int32_t> out(in.indices.size(), -1);
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t L = in.cache_seqlens[static_cast<std::size_t>(b)];
    const int64_t pages = (L + s.page_size - 1) / s.page_size;
    for (int64_t k = b * s.s_q * s.topk; k < (b + 1) * s.s_q * s.topk; ++k) {
      const int64_t slot = in.indices[static_cast<std::size_t>(k)];
      if (slot < 0) continue;
      const int64_t block = slot / s.page_size, offset = slot % s.page_size;
      // The page of this sequence that is that block (a block belongs to one sequence at most
      // in a well-formed table; the first one found is the answer either way).
      for (int64_t j = 0; j < pages; ++j) {
        if (in.block_table[static_cast<std::size_t>(b * s.max_blocks + j)] != block) continue;
        const int64_t p = j * s.page_size + offset;
        if (p < L) out[static_cast<std::size_t>(k)] = static_cast<int32_t>(p);
        break;
      }
    }
  }
  return out;
}

std::optional<AttnBuffers> inputs_to_kernel(const Conventions& c, const AttnInputs& in) {
  if (c.indices == IndexNumbering::positions || in.shape.topk == 0) return std::nullopt;
  AttnBuffers k(in);
  k.indices = indices_to_kernel(c.indices, in);
  return k;
}

namespace {
// One element at a time between the two layouts, each value converted; `to_canonical` picks the
// direction (the loops are the same both ways, only which index reads and which writes swaps).
std::vector<double> convert_lse(const Conventions& c, const AttnShape& s, std::span<const double> lse, bool to_canonical) {
  need_exactly("lse", lse.size(), lse_count(s));
  std::vector<double> out(lse.size());
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t q = 0; q < s.s_q; ++q) {
        const auto canonical = static_cast<std::size_t>((b * s.heads + h) * s.s_q + q);
        const auto kernel = static_cast<std::size_t>(kernel_lse_index(c.lse_layout, s, b, h, q));
        const std::size_t from = to_canonical ? kernel : canonical, to = to_canonical ? canonical : kernel;
        out[to] = convert_value(c, lse[from], to_canonical);
      }
  return out;
}
}  // namespace

std::vector<double> lse_to_canonical(const Conventions& c, const AttnShape& s, std::span<const double> lse) {
  return convert_lse(c, s, lse, true);
}

std::vector<double> lse_to_kernel(const Conventions& c, const AttnShape& s, std::span<const double> lse) {
  return convert_lse(c, s, lse, false);
}

void outputs_to_canonical(const Conventions& c, const AttnShape& s, AttnOutputs& o) {
  if (c.lse_base == LseBase::e && c.lse_layout == LseLayout::b_h_sq && c.empty_row_lse == EmptyRowLse::pos_inf) return;
  if (static_cast<int64_t>(o.lse.size()) != lse_count(s)) return;
  o.lse = lse_to_canonical(c, s, o.lse);
}

}  // namespace mla
