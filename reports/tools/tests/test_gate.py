"""The regression gate's verdicts and exit codes on synthetic runs with known changes."""
import json

import numpy as np
import pytest
from benchfiles import bench_json

from mla_benchtools import gate

K = "mla/cpu_x/cpu_decode/manual_time"
K2 = "mla/cpu_x/cpu_other/manual_time"
CEIL = "ceiling/read_bw/real_time/threads:1"


def times(center, n, seed, noise=0.01):
    rng = np.random.default_rng(seed)
    return list(center * (1.0 + noise * rng.standard_normal(n)))


def run_gate(write_json, base_cases, run_cases, *extra, base_ctx=None, run_ctx=None, base_err=None, run_err=None):
    b = write_json(bench_json({k: (v, {}) for k, v in base_cases.items()}, context=base_ctx, errors=base_err))
    r = write_json(bench_json({k: (v, {}) for k, v in run_cases.items()}, context=run_ctx, errors=run_err))
    return gate.main([b, r, *extra])


def test_same_distribution_passes(write_json, capsys):
    rc = run_gate(write_json, {K: times(10.0, 9, 1)}, {K: times(10.0, 9, 2)})
    out = capsys.readouterr().out
    assert rc == 0
    assert "| SAME |" in out
    assert "mann-whitney" in out


def test_significant_slowdown_beyond_threshold_fails(write_json, capsys):
    rc = run_gate(write_json, {K: times(10.0, 9, 1)}, {K: times(13.0, 9, 2)})
    out = capsys.readouterr().out
    assert rc == 1
    assert "| SLOWER |" in out


def test_speedup_is_faster_and_passes(write_json, capsys):
    rc = run_gate(write_json, {K: times(10.0, 9, 1)}, {K: times(7.0, 9, 2)})
    assert rc == 0
    assert "| FASTER |" in capsys.readouterr().out


def test_significant_change_inside_threshold_is_same(write_json, capsys):
    rc = run_gate(write_json, {K: times(10.0, 9, 1, noise=0.001)}, {K: times(10.3, 9, 2, noise=0.001)},
                  "--threshold", "0.10")
    out = capsys.readouterr().out
    assert rc == 0
    assert "significant but within the threshold" in out
    # The same 3% with a 1% threshold is a failure.
    rc = run_gate(write_json, {K: times(10.0, 9, 1, noise=0.001)}, {K: times(10.3, 9, 2, noise=0.001)},
                  "--threshold", "0.01")
    assert rc == 1


def test_noisy_large_change_is_not_significant(write_json, capsys):
    base = [10.0, 20.0, 10.5, 19.0, 11.0, 18.0, 10.2, 19.5, 10.8]
    run = [x * 1.15 for x in reversed(base)]  # +15% medians, but the spread swamps it
    rc = run_gate(write_json, {K: base}, {K: run})
    assert rc == 0
    assert "large but not significant change" in capsys.readouterr().out


def test_few_repetitions_fall_back_to_ranges(write_json, capsys):
    rc = run_gate(write_json, {K: [10.0, 10.1, 10.2]}, {K: [13.0, 13.1, 13.2]})
    out = capsys.readouterr().out
    assert rc == 1 and "| ranges |" in out and "| SLOWER |" in out
    rc = run_gate(write_json, {K: [10.0, 10.1, 14.0]}, {K: [13.0, 13.1, 13.2]})
    assert rc == 0  # overlapping ranges: not significant


def test_machine_mismatch_refuses_unless_forced(write_json, capsys):
    rc = run_gate(write_json, {K: times(10, 5, 1)}, {K: times(10, 5, 2)}, run_ctx={"mla_cpu_model": "Other CPU"})
    assert rc == 2
    assert "different machines" in capsys.readouterr().err
    rc = run_gate(write_json, {K: times(10, 5, 1)}, {K: times(10, 5, 2)}, "--allow-machine-mismatch",
                  run_ctx={"mla_threads": "2"})
    assert rc == 0


def test_missing_new_and_errored_cases(write_json, capsys, tmp_path):
    out_json = tmp_path / "verdicts.json"
    rc = run_gate(write_json, {K: times(10, 5, 1), K2: times(10, 5, 3)}, {K: times(10, 5, 2)},
                  "--json", str(out_json), run_err={"mla/cpu_x/cpu_new/manual_time": "unsupported: no"})
    assert rc == 0
    v = {c["name"]: c["verdict"] for c in json.loads(out_json.read_text())["cases"]}
    assert v[K] == "SAME" and v[K2] == "MISSING" and v["mla/cpu_x/cpu_new/manual_time"] == "NEW"
    capsys.readouterr()
    rc = run_gate(write_json, {K: times(10, 5, 1), K2: times(10, 5, 3)}, {K: times(10, 5, 2)}, "--fail-on-missing")
    assert rc == 1
    rc = run_gate(write_json, {K: times(10, 5, 1), K2: times(10, 5, 3)}, {K: times(10, 5, 2)},
                  run_err={K2: "error: boom"})
    assert rc == 0
    assert "| ERROR |" in capsys.readouterr().out


def test_unavailable_on_both_runs_is_skipped_with_the_reason(write_json, capsys, tmp_path):
    gpu = "mla/cuda_x/cuda_decode/manual_time"
    why = "unavailable: cudaGetDeviceCount failed: cudaErrorInsufficientDriver"
    out_json = tmp_path / "verdicts.json"
    rc = run_gate(write_json, {K: times(10, 5, 1)}, {K: times(10, 5, 2)}, "--json", str(out_json),
                  base_err={gpu: why}, run_err={gpu: why})
    assert rc == 0
    v = {c["name"]: c for c in json.loads(out_json.read_text())["cases"]}
    assert v[gpu]["verdict"] == "SKIPPED" and v[gpu]["note"] == why
    assert "| ERROR |" not in capsys.readouterr().out
    # Measured in the baseline, unavailable now: not a skip, the run lost something.
    rc = run_gate(write_json, {K: times(10, 5, 1), gpu: times(10, 5, 3)}, {K: times(10, 5, 2)}, "--json",
                  str(out_json), run_err={gpu: why})
    assert json.loads(out_json.read_text())["cases"][1]["verdict"] == "ERROR"
    # A benchmark that failed on both runs stays an ERROR.
    rc = run_gate(write_json, {K: times(10, 5, 1)}, {K: times(10, 5, 2)}, "--json", str(out_json),
                  base_err={gpu: "error in run(): boom"}, run_err={gpu: "error in run(): boom"})
    assert {c["name"]: c["verdict"] for c in json.loads(out_json.read_text())["cases"]}[gpu] == "ERROR"


def test_ceiling_drift_warns_but_does_not_gate(write_json, capsys):
    rc = run_gate(write_json, {K: times(10, 9, 1), CEIL: times(5, 9, 4)}, {K: times(10, 9, 2), CEIL: times(8, 9, 5)})
    cap = capsys.readouterr()
    assert rc == 0
    assert "ceilings moved" in cap.err
    assert CEIL not in cap.out


def test_unreadable_or_disjoint_inputs(write_json, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    good = write_json(bench_json({K: (times(10, 5, 1), {})}))
    assert gate.main([str(bad), good]) == 2
    assert gate.main([good, str(tmp_path / "absent.json")]) == 2
    other = write_json(bench_json({K2: (times(10, 5, 1), {})}))
    assert gate.main([good, other]) == 2
    assert gate.main([good, good, "--alpha", "1.5"]) == 2
    capsys.readouterr()


def test_aggregate_rows_are_ignored(write_json):
    # conftest adds a median aggregate of 1e9 ms to every case; if it were read, the run would
    # look identical to any other and the medians would be absurd.
    from mla_benchtools import benchjson
    run = benchjson.load(write_json(bench_json({K: ([1.0, 2.0, 3.0], {})})))
    assert run.cases[K].times_s == pytest.approx([1e-3, 2e-3, 3e-3])


def _with_share(doc, share):
    for r in doc["benchmarks"]:
        if r["run_type"] == "iteration":
            r["cpu_share"] = share
    return doc


def test_busy_machine_makes_only_the_doubtful_direction_inconclusive(write_json, capsys):
    base_q, run_q = times(10.0, 9, 1), times(13.0, 9, 2)
    quiet_base = write_json(_with_share(bench_json({K: (base_q, {})}), 1.0))
    busy_run = write_json(_with_share(bench_json({K: (run_q, {})}), 0.6))
    quiet_run = write_json(_with_share(bench_json({K: (run_q, {})}), 0.99))
    # Slower while the run was descheduled: could be the machine, not the code.
    assert gate.main([quiet_base, busy_run]) == 3
    out = capsys.readouterr()
    assert "| BUSY |" in out.out and "inconclusive" in out.err
    # The same slowdown on a quiet machine fails.
    assert gate.main([quiet_base, quiet_run]) == 1
    # A busy baseline only inflates the baseline: a slowdown against it still stands.
    busy_base = write_json(_with_share(bench_json({K: (base_q, {})}), 0.6))
    assert gate.main([busy_base, quiet_run]) == 1
    # ... but a speed-up against a busy baseline is not evidence.
    fast_run = write_json(_with_share(bench_json({K: (times(7.0, 9, 3), {})}), 1.0))
    assert gate.main([busy_base, fast_run]) == 3
    # A threshold of 0 disables the check.
    assert gate.main([quiet_base, busy_run, "--min-cpu-share", "0"]) == 1
    capsys.readouterr()
