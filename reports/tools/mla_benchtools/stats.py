"""Two-sample statistics for the regression gate: the Mann-Whitney U test and interval overlap.

Why both: Google Benchmark's compare.py uses the U test over repetitions, which needs enough
repetitions to ever reach significance (with 3 against 3 the smallest two-sided p-value is
0.1); for fewer repetitions the gate falls back to nvbench-compare's rule, non-overlapping
ranges. scipy is used when it is installed; the pure implementation below is the fallback and is
checked against scipy by the tests.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

try:  # pragma: no cover - depends on the machine
    from scipy import stats as _scipy_stats
except Exception:  # noqa: BLE001 - any import failure means "no scipy"
    _scipy_stats = None

# When either sample has at most this many values and there are no ties the exact null
# distribution is used, as scipy's 'auto' does; otherwise the normal approximation.
EXACT_MAX_PER_SAMPLE = 8


def _auto_method(n1: int, n2: int, has_ties: bool) -> str:
    return "exact" if (min(n1, n2) <= EXACT_MAX_PER_SAMPLE and not has_ties) else "asymptotic"


@dataclass(frozen=True)
class UResult:
    u: float          # U statistic of the first sample
    p_value: float    # two-sided
    method: str       # "exact" or "asymptotic"
    backend: str      # "scipy" or "numpy"


def _ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mid-ranks (1-based) and the sizes of the tie groups."""
    order = np.argsort(values, kind="mergesort")
    sorted_v = values[order]
    ranks = np.empty(len(values), dtype=float)
    ties = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and sorted_v[j + 1] == sorted_v[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    return ranks, np.array(ties, dtype=float)


def _exact_cdf_counts(n1: int, n2: int) -> np.ndarray:
    """counts[u] = number of arrangements with U = u, for U of a sample of size n1 vs n2."""
    # f(i, j) over u via the recurrence f(i,j,u) = f(i-1,j,u-j) + f(i,j-1,u), kept as a table of
    # polynomials in u indexed by j for the current i.
    rows = [np.ones(1, dtype=float) for _ in range(n2 + 1)]  # i = 0: only u = 0
    for i in range(1, n1 + 1):
        new = [np.ones(1, dtype=float)]  # j = 0: only u = 0
        for j in range(1, n2 + 1):
            a = rows[j]            # f(i-1, j, u - j): shifted by j
            b = new[j - 1]         # f(i, j-1, u)
            size = i * j + 1
            out = np.zeros(size)
            out[j:j + len(a)] += a
            out[:len(b)] += b
            new.append(out)
        rows = new
    return rows[n2]


def mann_whitney_u_numpy(x: Sequence[float], y: Sequence[float], method: str = "auto") -> UResult:
    """Two-sided Mann-Whitney U test of x against y (no scipy)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("Mann-Whitney U needs two non-empty samples")
    ranks, ties = _ranks(np.concatenate([x, y]))
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    if method == "auto":
        method = _auto_method(n1, n2, len(ties) > 0)
    if method == "exact":
        counts = _exact_cdf_counts(n1, n2)
        total = counts.sum()
        k = int(round(u1))
        p_le = counts[:k + 1].sum() / total
        p_ge = counts[k:].sum() / total
        p = min(1.0, 2.0 * min(p_le, p_ge))
    elif method == "asymptotic":
        n = n1 + n2
        mu = n1 * n2 / 2.0
        tie_term = float((ties ** 3 - ties).sum()) if len(ties) else 0.0
        var = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1)))
        if var <= 0:
            p = 1.0
        else:
            # Continuity correction toward the mean, as scipy does by default.
            z = (abs(u1 - mu) - 0.5) / math.sqrt(var)
            p = min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0)))
    else:
        raise ValueError(f"unknown method {method!r}")
    return UResult(u=u1, p_value=float(p), method=method, backend="numpy")


def mann_whitney_u(x: Sequence[float], y: Sequence[float]) -> UResult:
    """Two-sided U test; scipy when available, else the numpy implementation."""
    if _scipy_stats is not None:
        r = _scipy_stats.mannwhitneyu(x, y, alternative="two-sided", method="auto")
        n1, n2 = len(x), len(y)
        _, ties = _ranks(np.concatenate([np.asarray(x, float), np.asarray(y, float)]))
        m = _auto_method(n1, n2, len(ties) > 0)
        return UResult(u=float(r.statistic), p_value=float(r.pvalue), method=m, backend="scipy")
    return mann_whitney_u_numpy(x, y)


def min_two_sided_p(n1: int, n2: int) -> float:
    """The smallest two-sided p-value the exact U test can give for these sample sizes."""
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def ranges_overlap(x: Sequence[float], y: Sequence[float]) -> bool:
    return not (max(x) < min(y) or max(y) < min(x))
