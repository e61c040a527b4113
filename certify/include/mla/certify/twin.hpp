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

#include "mla/core/merge.hpp"
#include "mla/core/prefill.hpp"

namespace mla::certify {

// The fresh twin of a stored prefill case (MHA form), for the same reason and by the same rule:
// symmetries the attention commutes with exactly, then noise on q.
//  - the heads permuted in q, k and v alike (each head's output and lse move with it);
//  - the 128 nope dimensions permuted and sign-flipped in q and k alike, the 64 rope dimensions
//    likewise (one map for every head, so k_pe stays the one vector every head shares);
//  - the 128 V dimensions permuted and sign-flipped (the output's columns move with them).
// Lengths, causality and the softmax scale are the case's.
struct PrefillTwinMap {
  std::vector<int> heads, qk_from, v_from;  // new head h is stored head heads[h]; likewise dimensions
  std::vector<uint8_t> qk_flip, v_flip;     // new dimension i negated
};
PrefillBuffers make_prefill_twin(const PrefillInputs& stored, uint64_t seed, double q_noise = kTwinQNoise,
                                 PrefillTwinMap* map = nullptr);

// The fresh twin of a stored merge case: the heads permuted and the head dimensions permuted and
// sign-flipped in out_a, out_b and their lse alike; then each finite (token, head) pair of lse
// values shifted by one drawn amount (a merge commutes with that exactly: the weights stay, the
// merged lse moves by it; in float32 the shift rounds, and the truth is computed afresh anyway),
// and every out value moved by noise of `out_noise` of the case's out RMS, rounded to its dtype.
// An infinite lse (an empty side) stays infinite and its out values, never to be read, stay as
// stored (NaN included).
struct MergeTwinMap {
  std::vector<int> heads, dim_from;  // new head h is stored head heads[h]; likewise dimensions
  std::vector<uint8_t> dim_flip;     // new dimension i negated
};
MergeBuffers make_merge_twin(const MergeInputs& stored, uint64_t seed, double out_noise = kTwinQNoise,
                             MergeTwinMap* map = nullptr);

}  // namespace mla::certify

#include "mla/core/indexer_logits.hpp"

namespace mla::certify {

// The fresh twin of a stored indexer logits call (the indexer family's cases as a kernel gets
// them), by the same rule: the index heads permuted in q and its weights alike; the 128 dimensions
// permuted and sign-flipped in every q and key vector alike (a sign flip is one bit of an e4m3
// code, so q8·k8 of every pair, and with it every relu, is unchanged); the key scales, lengths,
// ranges, block table and cache layout as they are; then every weight moved by noise of `w_noise`
// of their RMS (float32): the logits change, their scale stays.
IndexerLogitsBuffers make_indexer_logits_twin(const IndexerLogitsInputs& stored, uint64_t seed,
                                              double w_noise = kTwinQNoise);

}  // namespace mla::certify
