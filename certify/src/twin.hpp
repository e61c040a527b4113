// Private to mla_certify: the fresh twin of a stored case.
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

#include "mla/core/attention.hpp"

namespace mla::certify {

AttnBuffers make_twin(const AttnInputs& stored, uint64_t seed);

}  // namespace mla::certify
