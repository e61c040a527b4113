"""The door-overhead benchmark's arithmetic: the fixed start-up cancels, the kernel's bound is
taken out per row, and a pair of runs that cannot give a slope is refused."""

import pytest

import door_overhead


def test_start_up_cancels_and_the_kernel_bound_is_taken_out():
    # 5 s of start-up in both; 0.25 s per row of which 0.01 s is the kernel's fastest call.
    small = {"wall": 5.0 + 2 * 0.25, "rows": 2, "kernel": 2 * 0.01}
    large = {"wall": 5.0 + 20 * 0.25, "rows": 20, "kernel": 20 * 0.01}
    r = door_overhead.per_row(small, large, max_calls=6)
    assert r["wall_per_row"] == pytest.approx(0.25)
    assert r["kernel_bound_per_row"] == pytest.approx(0.06)
    assert r["overhead_per_row"] == pytest.approx(0.19)


def test_no_slope_without_more_rows():
    run = {"wall": 3.0, "rows": 4, "kernel": 0.0}
    with pytest.raises(ValueError, match="more rows"):
        door_overhead.per_row(run, dict(run))
