// The fresh twin of a stored case (exposed so a test can hold the symmetries to exactness).
//
// Why: a stored case's answer is on disk, so a kernel that recognises the case can return it and
// compute something else (or nothing) everywhere else; and every property the catalog was built
// around (q of std 100, one dominant logit, equal logits, tiny-amax FP8 blocks, needles, poisoned
// slots, every recipe and scale format) would then be checked on stored inputs only. The twin is
// the stored case carried through symmetries that attention commutes with exactly, drawn from the
// run's seed, plus fresh noise on q: its structure and its value distribution are the stored
// case's, its answer is on no disk and is computed at run time by the C++ oracles.
//
// The symmetries, all exact on the stored bytes (no value is rounded again):
//  - the heads of q permuted (each head's output moves with it);
//  - the 512 latent dimensions permuted and sign-flipped in q_nope and in every cache token alike
//    (q·k and the V columns move together): whole 128-dimension blocks permuted among themselves
//    with their FP8 scales, dimensions permuted inside each block, so an FP8 token stays an FP8
//    token of the same recipe and scale format; a sign flip is one bit in bf16 and in e4m3;
//  - the 64 rope dimensions permuted and sign-flipped in q_pe and k_pe alike;
//  - the physical pages permuted (block table rewritten), positions and sparse indices (positions
//    in the canonical convention) unchanged, unused slots and sentinel entries carried as they are.
// Then every q value moves by noise from the suite's generator with 1/32 of the case's q RMS as its
// standard deviation, rounded to bf16:
// the logits change (so the truth is new) while their scale, and whatever the case built into
// the cache, stay.
#pragma once

#include <cstdint>
#include <vector>

#include "mla/core/attention.hpp"

namespace mla::certify {

// The name of a stored case's fresh twin row is the case's name and this; it is certified with
// its case (same selection, same shard).
inline constexpr const char* kTwinSuffix = "~twin";

// Where the twin's values came from: new head h is stored head heads[h]; new latent dimension i
// is stored dimension latent_from[i], negated when latent_flip[i] (likewise rope_*).
struct TwinMap {
  std::vector<int> heads, latent_from, rope_from;
  std::vector<uint8_t> latent_flip, rope_flip;
};

inline constexpr double kTwinQNoise = 1.0 / 32.0;

// `q_noise`: the noise on q as a fraction of its RMS (0: the symmetries alone, for tests);
// `map`, when given, receives the drawn symmetries.
AttnBuffers make_twin(const AttnInputs& stored, uint64_t seed, double q_noise = kTwinQNoise, TwinMap* map = nullptr);

}  // namespace mla::certify
