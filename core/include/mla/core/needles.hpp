// Needles (fixtures/SCHEMA.md "Needles", rule `needles-v1`): high-logit tokens planted in long
// cases at the first and last position and on both sides of every page and 64-token tile
// boundary, so that a kernel that drops, duplicates or misreads any one of them is far outside
// every tolerance, while half of the heads keep the ordinary random attention.
//
// Why in the ground floor: the catalog's long cases carry the overlay stored (written by the
// Python reference, mla_ref/needles.py), and the run-time generator (the certifier's `fresh`
// family, through mla/workloads/axes.hpp build_inputs) must plant exactly the same rule on what
// it generates. One implementation of the rule in C++, which a test holds to the stored overlay
// bit for bit, serves every caller.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mla/core/attention.hpp"

namespace mla::needles {

inline constexpr const char* kRule = "needles-v1";
// A case is long, and carries needles, when one of its sequences has at least this many tokens.
inline constexpr int64_t kLongTokens = 16384;
inline constexpr int64_t kTile = 64;
inline constexpr int64_t kMaxSlots = 64;
inline constexpr int64_t kMaxRanks = 448;  // spike dims 0..R-1 leave >= 64 latent dims of q random

// The overlay of one case, in the layout of the `needles/` group.
struct Overlay {
  double alpha = 0;                // the needles' rope value (their logit is softmax_scale · alpha)
  std::vector<int32_t> positions;  // [n, 2] (sequence, logical position), ascending
  std::vector<uint16_t> kv;        // [n, 576] bf16 bits: the token written at each position
  std::vector<uint8_t> q_mask;     // [b, 576]: 1 where sequence i's query dims are overwritten
  std::vector<uint16_t> q_values;  // [b, h, 576] bf16 bits: the value written there, per head
  int64_t count() const { return static_cast<int64_t>(positions.size() / 2); }
};

// Needle positions of one sequence of `length` tokens (ascending): every t with t mod 64 in
// {0, 63} or t mod page_size in {0, page_size - 1}, and t = length - 1.
std::vector<int64_t> positions(int64_t length, int64_t page_size);
// S = max(1, min(64, ceil(heads/2), n/2)).
int64_t slots(int64_t n_needles, int64_t heads);
// Whether any sequence is long (>= kLongTokens).
bool is_long(std::span<const int32_t> seqlens);
// Whether the rule can place the needles of these sequences at `heads` heads (R <= 448 in every
// sequence); the reason when not, empty when it can.
std::string refusal(std::span<const int32_t> seqlens, int64_t page_size, int64_t heads);
// The fewest heads in [lo, hi] at which the rule can place them; 0 when none can.
int fewest_heads(std::span<const int32_t> seqlens, int64_t page_size, int lo, int hi);

// The overlay of a case computed from its inputs before any overlay (q, the bf16 cache, paging,
// softmax scale): alpha from max|q| over q and max|k| over every used cache slot. Throws
// mla::Error on an FP8 cache (needles are defined over bf16 caches only) or when refusal() says
// the rule cannot place them.
Overlay make_overlay(const AttnInputs& in);
// Writes the overlay over q and the bf16 cache of `b`, as SCHEMA.md says a reader does.
void apply(const Overlay& o, AttnBuffers& b);

}  // namespace mla::needles
