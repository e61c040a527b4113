"""Regression gate: compares a benchmark run to a stored baseline of the same machine model.

Per case (a run_name present in both files) the verdict is SAME, FASTER or SLOWER:
  * the change is the ratio of median times (run / baseline);
  * it is *significant* when the two-sided Mann-Whitney U test over the repetitions gives
    p < alpha, or, when the repetitions are too few for the U test to ever reach alpha
    (e.g. 3 vs 3: p >= 0.1), when the min-max ranges do not overlap;
  * SLOWER: significant and ratio > 1 + threshold; FASTER: significant and ratio < 1 - threshold;
    everything else SAME (a significant change inside the threshold is noise we accept).
A busy machine only ever inflates times, so contention (the bench's `cpu_share` counter below
--min-cpu-share: the implementation was descheduled while timed) casts doubt in one direction:
a SLOWER case whose *run* was busy, or a FASTER case whose *baseline* was busy, becomes BUSY
(inconclusive); the other combinations stand.
Exit status: 0 no significant slowdown, 1 at least one SLOWER case, 2 the files cannot be
compared (unreadable, different machine model, nothing in common), 3 no SLOWER case but some
BUSY ones (rerun on a quiet machine).
A case that neither run could measure for a reason of the machine or the implementation's
declared limits (mla-bench's "unavailable: ...", "unsupported: ...", "too large for this
machine: ..." rows, e.g. a CUDA kernel on a machine without a GPU) is SKIPPED with the run's
reason; ERROR stays for a benchmark that failed (or that only one of the two runs could measure).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass

from . import benchjson, stats


@dataclass
class CaseVerdict:
    name: str
    verdict: str            # SAME / FASTER / SLOWER / BUSY / MISSING / NEW / SKIPPED / ERROR
    ratio: float | None     # median(run) / median(baseline)
    p_value: float | None
    method: str             # "mann-whitney (exact, scipy)", "ranges", ...
    n_base: int
    n_run: int
    note: str = ""


def compare_case(name: str, base: list[float], run: list[float], alpha: float, threshold: float) -> CaseVerdict:
    import statistics

    ratio = statistics.median(run) / statistics.median(base)
    p = None
    if stats.min_two_sided_p(len(base), len(run)) < alpha:
        u = stats.mann_whitney_u(run, base)
        p = u.p_value
        significant = p < alpha
        method = f"mann-whitney ({u.method}, {u.backend})"
    else:
        significant = not stats.ranges_overlap(base, run)
        method = "ranges"
    if significant and ratio > 1.0 + threshold:
        verdict = "SLOWER"
    elif significant and ratio < 1.0 - threshold:
        verdict = "FASTER"
    else:
        verdict = "SAME"
    note = ""
    if significant and verdict == "SAME":
        note = "significant but within the threshold"
    elif not significant and abs(ratio - 1.0) > threshold:
        note = "large but not significant change"
    return CaseVerdict(name, verdict, ratio, p, method, len(base), len(run), note)


# The prefixes mla-bench gives a row it did not measure on purpose (suites/bench/mla_bench.cpp).
SKIP_PREFIXES = ("unavailable: ", "unsupported: ", "too large for this machine")


def _not_measurable(error: str | None) -> bool:
    return bool(error) and error.startswith(SKIP_PREFIXES)


def _busy(case: benchjson.Case, min_share: float) -> float | None:
    share = case.counter_median("cpu_share")
    return share if share is not None and share < min_share else None


def compare(base: benchjson.BenchRun, run: benchjson.BenchRun, alpha: float, threshold: float,
            pattern: str, min_share: float = 0.9) -> list[CaseVerdict]:
    rx = re.compile(pattern)
    out: list[CaseVerdict] = []
    for name, bc in base.cases.items():
        if not rx.search(name):
            continue
        rc = run.cases.get(name)
        if rc is None:
            out.append(CaseVerdict(name, "MISSING", None, None, "", len(bc.times_s), 0, "not in the run"))
            continue
        if _not_measurable(bc.error) and _not_measurable(rc.error):
            out.append(CaseVerdict(name, "SKIPPED", None, None, "", len(bc.times_s), len(rc.times_s), rc.error))
            continue
        if bc.error or rc.error or not bc.times_s or not rc.times_s:
            why = rc.error or bc.error or "no timings"
            out.append(CaseVerdict(name, "ERROR", None, None, "", len(bc.times_s), len(rc.times_s), why))
            continue
        v = compare_case(name, bc.times_s, rc.times_s, alpha, threshold)
        run_busy, base_busy = _busy(rc, min_share), _busy(bc, min_share)
        if v.verdict == "SLOWER" and run_busy is not None:
            v.verdict, v.note = "BUSY", f"slower, but the run got {run_busy:.2f} of a core while timed"
        elif v.verdict == "FASTER" and base_busy is not None:
            v.verdict, v.note = "BUSY", f"faster, but the baseline got {base_busy:.2f} of a core while timed"
        out.append(v)
    for name, rc in run.cases.items():
        if rx.search(name) and name not in base.cases:
            out.append(CaseVerdict(name, "NEW", None, None, "", 0, len(rc.times_s), "not in the baseline"))
    return out


def render(verdicts: list[CaseVerdict], alpha: float, threshold: float) -> str:
    lines = [f"Regression gate: alpha {alpha}, threshold {threshold * 100:.1f}% (ratio = run / baseline median time)",
             "",
             "| case | verdict | ratio | p | test | reps (base/run) | note |",
             "|---|---|---|---|---|---|---|"]
    for v in verdicts:
        ratio = "–" if v.ratio is None else f"{v.ratio:.3f}"
        p = "–" if v.p_value is None else f"{v.p_value:.3g}"
        lines.append(f"| {v.name} | {v.verdict} | {ratio} | {p} | {v.method} | {v.n_base}/{v.n_run} | {v.note} |")
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    lines += ["", "Summary: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Compare an mla-bench run to a stored baseline (same machine model).")
    ap.add_argument("baseline")
    ap.add_argument("run")
    ap.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    ap.add_argument("--threshold", type=float, default=0.10,
                    help="relative slowdown that fails the gate when significant (default 0.10 = 10%%)")
    ap.add_argument("--filter", default=r"^mla/",
                    help="regex on case names to gate (default ^mla/: the kernels; ceilings are machine drift)")
    ap.add_argument("--allow-machine-mismatch", action="store_true",
                    help="compare even when CPU model / threads / ISA differ (results are then advisory)")
    ap.add_argument("--fail-on-missing", action="store_true", help="a baseline case absent from the run fails")
    ap.add_argument("--min-cpu-share", type=float, default=0.9,
                    help="below this median cpu_share a measurement counts as taken on a busy machine (default 0.9)")
    ap.add_argument("--json", help="also write the verdicts as JSON to this file")
    a = ap.parse_args(argv)
    if not (0 < a.alpha < 1) or a.threshold < 0:
        print("bench_gate: need 0 < alpha < 1 and threshold >= 0", file=sys.stderr)
        return 2
    try:
        base = benchjson.load(a.baseline)
        run = benchjson.load(a.run)
        re.compile(a.filter)
    except (benchjson.BenchFileError, re.error) as e:
        print(f"bench_gate: {e}", file=sys.stderr)
        return 2
    mb, mr = base.machine_key(), run.machine_key()
    if mb != mr:
        diff = ", ".join(f"{k}: {mb[k]!r} vs {mr[k]!r}" for k in mb if mb[k] != mr[k])
        if not a.allow_machine_mismatch:
            print(f"bench_gate: baseline and run are from different machines or setups ({diff}); "
                  "a timing comparison across them means nothing (--allow-machine-mismatch to force)", file=sys.stderr)
            return 2
        print(f"bench_gate: warning: machines differ ({diff})", file=sys.stderr)
    verdicts = compare(base, run, a.alpha, a.threshold, a.filter, a.min_cpu_share)
    if not any(v.verdict in ("SAME", "FASTER", "SLOWER", "BUSY") for v in verdicts):
        print("bench_gate: no case was measured in both files", file=sys.stderr)
        return 2
    print(render(verdicts, a.alpha, a.threshold))
    # Machine drift: the ceilings of both runs, information only.
    drift = compare(base, run, a.alpha, a.threshold, r"^ceiling/", a.min_cpu_share)
    moved = [v for v in drift if v.verdict in ("SLOWER", "FASTER")]
    if moved:
        print("\nbench_gate: warning: measured ceilings moved between the runs (machine state differs): "
              + ", ".join(f"{v.name} {v.verdict} x{v.ratio:.2f}" for v in moved), file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"alpha": a.alpha, "threshold": a.threshold, "cases": [asdict(v) for v in verdicts],
                       "ceilings": [asdict(v) for v in drift]}, f, indent=1)
    failed = any(v.verdict == "SLOWER" for v in verdicts) or (
        a.fail_on_missing and any(v.verdict == "MISSING" for v in verdicts))
    if failed:
        return 1
    if any(v.verdict == "BUSY" for v in verdicts):
        print("bench_gate: inconclusive: some changes were measured on a busy machine (BUSY rows); "
              "rerun on a quiet one", file=sys.stderr)
        return 3
    return 0
