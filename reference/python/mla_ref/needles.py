"""Needles (fixtures/SCHEMA.md, "Needles", rule `needles-v1`): high-logit tokens planted in long
cases at the first and last position and on both sides of every page and 64-token tile boundary,
so that a kernel that drops, duplicates or misreads any one of them is far outside tolerance.

Per sequence i (length L > 0) of a case with h heads, page size ps, softmax scale sigma:

* positions: every t in [0, L) with t % 64 in {0, 63} or t % ps in {0, ps-1}, and t = L-1;
  needle n is the n-th of them in increasing order, N of them in all;
* slots: S = max(1, min(64, ceil(h/2), N // 2)); needle n sits in slot n % S with rank n // S;
  R = ceil(N / S) ranks (R <= 448 or the case is not valid); needle heads are the even heads,
  head 2u serving slot u % S; odd heads are background heads;
* spike B = the smallest power of two >= 2R;
* alpha (one per case) = the smallest power of two >= 576 * Q * K + 64 / sigma, float64 in that
  order, Q = max |q| over the case's q and K = max |k| over the cache's used slots, both before
  any overlay;
* q overlay of sequence i (every query row): dims 0..R-1 and 512..512+S-1 are 0 in every head;
  then q[.., 2u, 512 + u % S] = 1 for every even head 2u;
* token of needle n: all 576 values 0 except latent[n // S] = B and rope[n % S] = alpha.

So in needle head 2u the needles of its slot have logit exactly sigma*alpha, at least 64 above
any other token's (|q.k| <= 576*Q*K), and share the head's weight equally: the output at each
needle's own latent dim is B/(needles in the slot), in [2, 8), and nothing else there. Dropping
one moves that element by all of it, duplicating one by a third of it at least. Background heads
see every needle at logit exactly 0 (their q is zero wherever a needle is not) and carry the
ordinary random attention, where errors elsewhere show.
"""
from __future__ import annotations

import math

import numpy as np

from . import attention, numerics

RULE = "needles-v1"
TILE = 64
MAX_SLOTS = 64
MAX_RANKS = 448  # spike dims 0..R-1 leave at least 64 latent dims of q random


def positions(L: int, page_size: int) -> np.ndarray:
    """Needle positions of a sequence of length L (ascending int64)."""
    if L <= 0:
        return np.zeros(0, np.int64)
    t = np.arange(L, dtype=np.int64)
    keep = (t % TILE == 0) | (t % TILE == TILE - 1) | (t % page_size == 0) | (t % page_size == page_size - 1)
    keep[L - 1] = True
    return t[keep]


def slots(n_needles: int, heads: int) -> int:
    return max(1, min(MAX_SLOTS, -(-heads // 2), n_needles // 2))


def pow2_ceil(x: float) -> float:
    """Smallest power of two >= x > 0 (exact: frexp)."""
    m, e = math.frexp(x)
    return x if m == 0.5 else math.ldexp(1.0, e)


def alpha(q_max: float, k_max: float, softmax_scale: float) -> float:
    return pow2_ceil(576.0 * q_max * k_max + 64.0 / softmax_scale)


class Overlay:
    """The needles of one case: what goes under `needles/` and how it changes q and the cache."""

    def __init__(self, lengths, page_size: int, heads: int, softmax_scale: float, q_max: float, k_max: float):
        self.lengths = [int(L) for L in lengths]
        self.alpha = alpha(q_max, k_max, softmax_scale)
        b = len(self.lengths)
        self.q_mask = np.zeros((b, attention.D_QK), np.uint8)
        self.q_values = np.zeros((b, heads, attention.D_QK), np.float64)
        pos_rows, tokens = [], []
        self.per_seq = []  # (N, S, R, B)
        for i, L in enumerate(self.lengths):
            p = positions(L, page_size)
            n = len(p)
            if n == 0:
                self.per_seq.append((0, 0, 0, 0.0))
                continue
            S = slots(n, heads)
            R = -(-n // S)
            if R > MAX_RANKS:
                raise ValueError(f"sequence {i}: {n} needles in {S} slots need {R} ranks > {MAX_RANKS}; "
                                 "use more heads or a larger page size")
            B = pow2_ceil(2.0 * R)
            self.per_seq.append((n, S, R, B))
            self.q_mask[i, :R] = 1
            self.q_mask[i, attention.D_V:attention.D_V + S] = 1
            for u in range(0, -(-heads // 2)):
                self.q_values[i, 2 * u, attention.D_V + u % S] = 1.0
            for k, t in enumerate(p):
                tok = np.zeros(attention.D_QK)
                tok[k // S] = B
                tok[attention.D_V + k % S] = self.alpha
                pos_rows.append((i, int(t)))
                tokens.append(tok)
        self.positions = np.array(pos_rows, np.int32).reshape(-1, 2)
        self.kv = np.array(tokens, np.float64).reshape(-1, attention.D_QK)
        for arr in (self.q_values, self.kv):
            assert np.array_equal(arr, numerics.round_bf16_np(arr)), "needle values are bf16-exact"

    def apply(self, q: np.ndarray, cache: np.ndarray, block_table: np.ndarray) -> None:
        """In place on float64 values: q [b, s_q, h, 576], cache [nb, ps, 576]."""
        ps = cache.shape[1]
        for i in range(q.shape[0]):
            m = self.q_mask[i].astype(bool)
            q[i][..., m] = self.q_values[i][None, :, m]
        for (i, t), tok in zip(self.positions, self.kv):
            cache[block_table[i, t // ps], t % ps] = tok

    def write(self, node) -> None:
        g = node.group("needles")
        g.attrs([("rule", RULE), ("alpha", float(self.alpha))])
        g.ds("positions", self.positions, "int32")
        g.bf16("kv", self.kv)
        g.ds("q_mask", self.q_mask, "uint8")
        g.bf16("q_values", self.q_values)
