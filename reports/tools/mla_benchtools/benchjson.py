"""Reads the Google Benchmark JSON that mla-bench writes into per-case records.

The statistics are recomputed here from the per-repetition rows (run_type "iteration"), not
taken from Google Benchmark's aggregates: the gate needs the samples, and the report must show
the spread it is based on. Rows are grouped by `run_name`; names are
`mla/<kernel>/<axis point>[/manual_time]` for kernels and `ceiling/<probe>/...` for ceilings.
"""
from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_TIME_UNIT_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


class BenchFileError(ValueError):
    """A benchmark file that is not mla-bench / Google Benchmark JSON, with what is wrong."""


@dataclass
class Case:
    run_name: str
    kind: str                      # "kernel", "ceiling" or "other"
    kernel: str | None = None
    point: str | None = None
    times_s: list[float] = field(default_factory=list)  # per repetition, seconds per iteration
    iterations: list[int] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)  # from the first repetition
    rep_counters: list[dict[str, float]] = field(default_factory=list)  # every repetition's
    label: str = ""
    error: str | None = None

    def counter_median(self, key: str) -> float | None:
        vals = [c[key] for c in self.rep_counters if key in c]
        return statistics.median(vals) if vals else None

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.times_s), max(self.times_s)

    @property
    def cv(self) -> float:
        if len(self.times_s) < 2:
            return 0.0
        return statistics.stdev(self.times_s) / statistics.mean(self.times_s)


@dataclass
class BenchRun:
    path: str
    context: dict[str, Any]
    cases: dict[str, Case]               # by run_name, file order
    ceilings: dict[str, dict[str, Any]]  # key -> {value, unit, method}
    points: dict[str, dict[str, Any]]
    kernels: dict[str, dict[str, Any]]
    complete: bool = True                # False: the run stopped before its last benchmark
    run_note: str = ""                   # why, and how many rows it has, when not complete

    def is_overhead(self, kernel: str | None) -> bool:
        """A calling path timed with an empty kernel (mla-bench's "<name>~overhead" rows beside an
        external kernel): not an implementation, so never on a roofline or in a speed-up."""
        return bool(kernel) and bool(self.kernels.get(kernel, {}).get("overhead_of"))

    def kernel_cases(self) -> list[Case]:
        return [c for c in self.cases.values() if c.kind == "kernel" and not self.is_overhead(c.kernel)]

    def overhead_cases(self) -> list[Case]:
        return [c for c in self.cases.values() if c.kind == "kernel" and self.is_overhead(c.kernel)]

    def ceiling_value(self, key: str | None) -> float | None:
        if not key or key not in self.ceilings:
            return None
        return float(self.ceilings[key]["value"])

    def machine_key(self) -> dict[str, str]:
        """What must match for two runs to be comparable (same machine model and setup)."""
        c = self.context
        return {
            "cpu_model": str(c.get("mla_cpu_model", "")),
            "num_cpus": str(c.get("num_cpus", "")),
            "threads": str(c.get("mla_threads", "")),
            "isa_runtime": str(c.get("mla_isa_runtime", "")),
            "isa_build": str(c.get("mla_isa_build", "")),
        }


def _parse_name(run_name: str) -> tuple[str, str | None, str | None]:
    parts = run_name.split("/")
    if parts[0] == "mla" and len(parts) >= 3:
        return "kernel", parts[1], parts[2]
    if parts[0] == "ceiling":
        return "ceiling", None, None
    return "other", None, None


def _json_context_field(ctx: dict[str, Any], key: str, default):
    raw = ctx.get(key)
    if raw is None:
        return default
    if isinstance(raw, (dict, list)):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise BenchFileError(f"context field {key} is not JSON: {e}") from e


def _recover_truncated(text: str) -> tuple[dict[str, Any], int] | None:
    """A Google Benchmark JSON file cut off while it was written (a process killed mid-run): the
    document up to its last complete row, closed, and that row count; None if even the context
    is incomplete. Google Benchmark writes rows as `    {` ... `    }` inside `"benchmarks": [`."""
    start = text.find('"benchmarks": [')
    if start < 0:
        return None
    head = text[:start + len('"benchmarks": [')]
    end = text.rfind("\n    }")
    body = text[len(head):end + len("\n    }")] if end > start else ""
    try:
        doc = json.loads(head + body + "\n  ]\n}\n")
    except json.JSONDecodeError:
        return None
    return doc, len(doc.get("benchmarks", []))


def read_doc(path: str | Path) -> tuple[dict[str, Any], bool, str]:
    """The benchmark document of `path`, whether its run completed, and a note when it did not.

    Partial runs are accepted, never silently: mla-bench's incremental file carries
    "mla_run": {"complete": false, ...} until its run ends normally (a timeout leaves the rows
    done so far), and a file cut off mid-write has its complete rows recovered. Either way
    `complete` is False and the note says so."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError as e:
        raise BenchFileError(f"{p}: no such file") from e
    try:
        doc = json.loads(text)
        truncated = None
    except json.JSONDecodeError as e:
        rec = _recover_truncated(text)
        if rec is None:
            raise BenchFileError(f"{p}: not JSON ({e})") from e
        doc, n = rec
        truncated = f"file cut off mid-write; {n} complete rows recovered"
    if not isinstance(doc, dict) or "benchmarks" not in doc or "context" not in doc:
        raise BenchFileError(f"{p}: not Google Benchmark JSON (needs 'context' and 'benchmarks')")
    state = doc.get("mla_run")
    complete, note = True, ""
    if truncated:
        complete, note = False, truncated
    elif isinstance(state, dict) and not state.get("complete", True):
        complete = False
        note = state.get("note") or (f"the run stopped before its end after {state.get('rows', '?')} benchmarks"
                + (f" (last: {state['last']})" if state.get("last") else "")
                + (f"; {state['stopped']}" if state.get("stopped") else ""))
    return doc, complete, note


def load(path: str | Path) -> BenchRun:
    p = Path(path)
    doc, complete, note = read_doc(p)
    ctx = doc["context"]
    cases: dict[str, Case] = {}
    for row in doc["benchmarks"]:
        if row.get("run_type", "iteration") != "iteration":
            continue  # aggregates: recomputed from the repetitions
        name = row.get("run_name") or row.get("name")
        if not name:
            raise BenchFileError(f"{p}: a benchmark row without a name")
        kind, kernel, point = _parse_name(name)
        case = cases.get(name)
        if case is None:
            case = cases[name] = Case(run_name=name, kind=kind, kernel=kernel, point=point)
        if row.get("error_occurred"):
            case.error = row.get("error_message", "error")
            continue
        unit = row.get("time_unit", "ns")
        if unit not in _TIME_UNIT_S:
            raise BenchFileError(f"{p}: {name}: unknown time unit {unit!r}")
        case.times_s.append(float(row["real_time"]) * _TIME_UNIT_S[unit])
        case.iterations.append(int(row.get("iterations", 0)))
        skip = {"name", "run_name", "run_type", "family_index", "per_family_instance_index",
                "repetitions", "repetition_index", "threads", "iterations", "real_time",
                "cpu_time", "time_unit", "label", "error_occurred", "error_message"}
        counters = {k: float(v) for k, v in row.items() if k not in skip and isinstance(v, (int, float))}
        case.rep_counters.append(counters)
        if not case.counters:
            case.counters = counters
            case.label = row.get("label", "")
    # A case with an error on one repetition and times on others keeps the times but is
    # reported with the error (it is not a clean measurement).
    kernels = {k["name"]: k for k in _json_context_field(ctx, "mla_kernels", [])}
    return BenchRun(path=str(p), context=ctx, cases=cases,
                    ceilings=_json_context_field(ctx, "mla_ceilings", {}),
                    points=_json_context_field(ctx, "mla_points", {}),
                    kernels=kernels, complete=complete, run_note=note)


def model_slug(cpu_model: str) -> str:
    """'AMD EPYC 9654 96-Core Processor' -> 'amd-epyc-9654-96-core-processor'."""
    s = re.sub(r"[^a-z0-9]+", "-", cpu_model.lower()).strip("-")
    return s or "unknown"
