"""Shared helpers: the package on sys.path and a writer of Google-Benchmark-shaped JSON.

A module of its own (conftest.py holds only the pytest fixture), so that the test files import it
by a name no other test tree of the repository uses: pytest runs reports/tools/tests and
reference/python in one session.

The synthetic files mirror what mla-bench writes (rows per repetition, aggregate rows that the
tools must ignore, the mla_* context fields as JSON strings), so the tools are tested on the
format without needing a build.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOOLS))

CEILINGS = {
    "read_bw": {"value": 20e9, "unit": "B/s", "method": "test read"},
    "triad_bw": {"value": 18e9, "unit": "B/s", "method": "test triad"},
    "fma_f64": {"value": 40e9, "unit": "FLOP/s", "method": "test fma64"},
    "fma_f32": {"value": 80e9, "unit": "FLOP/s", "method": "test fma32"},
}


def point(axis="decode_memory", batch=4, s_q=1, heads=16, seqlen=1024, mean=None, topk=0, fmt="bf16",
          scaled_from="prod: reduced"):
    return {"axis": axis, "why": "test", "scaled_from": scaled_from, "batch": batch, "s_q": s_q, "heads": heads,
            "page_size": 64, "topk": topk, "cache_format": fmt, "seqlen_max": seqlen,
            "seqlen_mean": seqlen if mean is None else mean, "total_tokens": batch * seqlen, "seed": 1}


def kernel(name, out_dtype="f64", backend="cpu", role="optimized"):
    cpu = backend == "cpu"
    return {"name": name, "backend": backend, "description": "test", "role": role, "out_dtype": out_dtype,
            "unavailable": "",
            "roof_bw": "read_bw" if cpu else None,
            "roof_peak": ("fma_f64" if out_dtype == "f64" else "fma_f32") if cpu else None}


def bench_json(cases, *, points=None, kernels=None, ceilings=None, context=None, errors=None):
    """cases: {run_name: (times_ms list, counters dict)}; errors: {run_name: message}."""
    ctx = {
        "date": "2026-11-30T00:00:00+00:00", "host_name": "test", "num_cpus": 2, "mhz_per_cpu": 2600,
        "load_avg": [0.5, 0.5, 0.5], "library_build_type": "release",
        "mla_cpu_model": "Test CPU", "mla_threads": "1", "mla_isa_runtime": "avx512", "mla_isa_build": "sse2",
        "mla_tier": "cpu_quick", "mla_timing": "manual", "mla_cache_flush_bytes": "67108864",
        "mla_axes_note": "reduced",
        "mla_ceilings": json.dumps(CEILINGS if ceilings is None else ceilings),
        "mla_points": json.dumps(points or {}),
        "mla_kernels": json.dumps(kernels or []),
    }
    ctx.update(context or {})
    rows = []
    for fam, (name, (times, counters)) in enumerate(cases.items()):
        for i, t in enumerate(times):
            r = {"name": name, "family_index": fam, "per_family_instance_index": 0, "run_name": name,
                 "run_type": "iteration", "repetitions": len(times), "repetition_index": i, "threads": 1,
                 "iterations": 1, "real_time": t, "cpu_time": t, "time_unit": "ms"}
            r.update(counters)
            rows.append(r)
        # An aggregate row with a deliberately wrong time: the tools must not read it.
        rows.append({"name": name + "_median", "run_name": name, "run_type": "aggregate", "aggregate_name": "median",
                     "repetitions": len(times), "threads": 1, "iterations": len(times), "real_time": 1e9,
                     "cpu_time": 1e9, "time_unit": "ms"})
    for name, msg in (errors or {}).items():
        rows.append({"name": name, "run_name": name, "run_type": "iteration", "repetitions": 1, "repetition_index": 0,
                     "threads": 1, "iterations": 0, "real_time": 0, "cpu_time": 0, "time_unit": "ms",
                     "error_occurred": True, "error_message": msg})
    return {"context": ctx, "benchmarks": rows}


# The published runs (reports/published/<machine>/<date>/bench.json): real mla-bench output, so
# the report's tests also hold on the files a reader is shown.
PUBLISHED_BENCH = sorted((TOOLS.parent / "published").glob("*/*/bench.json"))
