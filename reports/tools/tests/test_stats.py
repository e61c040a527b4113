"""The Mann-Whitney U implementation against first principles and (when installed) scipy."""
import itertools
import math

import numpy as np
import pytest

from mla_benchtools import stats


def brute_force_counts(n1, n2):
    """Distribution of U over every way to place n1 labels among n1+n2 ranks (no ties)."""
    counts = np.zeros(n1 * n2 + 1)
    for pos in itertools.combinations(range(n1 + n2), n1):
        rank_sum = sum(p + 1 for p in pos)
        counts[rank_sum - n1 * (n1 + 1) // 2] += 1
    return counts


@pytest.mark.parametrize("n1,n2", [(1, 1), (2, 3), (3, 3), (4, 2), (5, 5), (3, 7)])
def test_exact_distribution_matches_enumeration(n1, n2):
    np.testing.assert_array_equal(stats._exact_cdf_counts(n1, n2), brute_force_counts(n1, n2))


def test_fully_separated_samples_give_the_smallest_p():
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    y = [10.0, 11.0, 12.0, 13.0, 14.0]
    r = stats.mann_whitney_u_numpy(x, y)
    assert r.method == "exact"
    assert r.u == 0.0
    assert r.p_value == pytest.approx(2.0 / math.comb(10, 5), rel=1e-12)
    assert stats.min_two_sided_p(5, 5) == pytest.approx(2.0 / 252)
    assert stats.min_two_sided_p(3, 3) == pytest.approx(0.1)


def test_identical_samples_are_not_significant():
    r = stats.mann_whitney_u_numpy([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert r.method == "asymptotic"  # ties
    assert r.p_value == pytest.approx(1.0)


def test_rejects_empty_samples():
    with pytest.raises(ValueError):
        stats.mann_whitney_u_numpy([], [1.0])
    with pytest.raises(ValueError):
        stats.mann_whitney_u_numpy([1.0], [2.0], method="bogus")


def test_ranges_overlap():
    assert stats.ranges_overlap([1, 2], [2, 3])
    assert not stats.ranges_overlap([1, 2], [2.5, 3])
    assert not stats.ranges_overlap([5, 6], [1, 2])


def _scipy():
    return pytest.importorskip("scipy.stats", reason="scipy not installed: numpy implementation only")


@pytest.mark.parametrize("seed", range(12))
def test_matches_scipy_without_ties(seed):
    scipy_stats = _scipy()
    rng = np.random.default_rng(seed)
    n1, n2 = int(rng.integers(2, 12)), int(rng.integers(2, 12))
    x = rng.normal(0.0, 1.0, n1)
    y = rng.normal(float(rng.uniform(-1, 1)), 1.0, n2)
    ours = stats.mann_whitney_u_numpy(x, y)
    ref = scipy_stats.mannwhitneyu(x, y, alternative="two-sided", method="auto")
    assert ours.u == pytest.approx(float(ref.statistic))
    assert ours.p_value == pytest.approx(float(ref.pvalue), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("seed", range(8))
def test_matches_scipy_with_ties(seed):
    scipy_stats = _scipy()
    rng = np.random.default_rng(100 + seed)
    x = rng.integers(0, 5, int(rng.integers(3, 15))).astype(float)
    y = rng.integers(1, 6, int(rng.integers(3, 15))).astype(float)
    ours = stats.mann_whitney_u_numpy(x, y)
    ref = scipy_stats.mannwhitneyu(x, y, alternative="two-sided", method="auto")
    assert ours.method == "asymptotic"
    assert ours.u == pytest.approx(float(ref.statistic))
    assert ours.p_value == pytest.approx(float(ref.pvalue), rel=1e-9)


def test_dispatcher_uses_scipy_when_present():
    _scipy()
    r = stats.mann_whitney_u([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0])
    assert r.backend == "scipy"
    assert r.p_value == pytest.approx(stats.mann_whitney_u_numpy([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]).p_value)
