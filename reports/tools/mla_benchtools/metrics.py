"""Per-case metrics of a benchmark run: median time, achieved bytes/s and FLOP/s from the
implementation's own model, and where they stand against the measured roofs."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .benchjson import BenchRun, Case


@dataclass
class Metrics:
    case: Case
    median_s: float
    lo_s: float
    hi_s: float
    reps: int
    bytes: float
    flops: float
    bps: float
    fps: float
    ai: float
    bw_roof: float | None
    peak_roof: float | None
    peak_key: str | None
    ridge: float | None
    bound: str | None       # "memory" / "compute" / None when no roof is known
    pct: float | None       # % of the binding roof
    over_roof: bool         # achieved rate above the measured roof (modelled bytes served from caches)


def metrics_for(run: BenchRun, case: Case) -> Metrics | None:
    if case.error or not case.times_s:
        return None
    med = case.median_s
    lo, hi = case.spread
    b = case.counters.get("model_bytes", 0.0)
    f = case.counters.get("model_flops", 0.0)
    kinfo = run.kernels.get(case.kernel or "", {})
    bw = run.ceiling_value(kinfo.get("roof_bw"))
    peak_key = kinfo.get("roof_peak")
    peak = run.ceiling_value(peak_key)
    bps = b / med if med > 0 else 0.0
    fps = f / med if med > 0 else 0.0
    ai = f / b if b > 0 else 0.0
    ridge = bound = pct = None
    over = False
    if bw and peak:
        ridge = peak / bw
        bound = "memory" if ai < ridge else "compute"
        pct = 100.0 * (bps / bw if bound == "memory" else fps / peak)
        over = pct > 100.0
    return Metrics(case, med, lo, hi, len(case.times_s), b, f, bps, fps, ai, bw, peak, peak_key,
                   ridge, bound, pct, over)


def g(v: float | None, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:.{digits}g}"


def si(v: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.4g} {prefix}{unit}"
    return f"{v:.4g} {unit}"
