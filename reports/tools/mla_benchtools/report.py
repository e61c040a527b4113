"""Turns an mla-bench JSON (and optionally an mla-certify certificate.json) into a Markdown
report, a log-log roofline and a bandwidth-vs-context plot.

Every number comes from the files: times are the medians of the repetitions, rates use the
implementation's own byte/FLOP model (recorded by the bench as model_bytes / model_flops), and
the roofs are the ceilings the same run measured (context `mla_ceilings`), chosen per
implementation as the bench chose them (`roof_bw` / `roof_peak` of `mla_kernels`).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import benchjson
from .benchjson import BenchRun, Case

# Below this share of a core per thread while timed, a row is flagged as measured on a busy machine.
BUSY_SHARE = 0.9

AXIS_ORDER = ["decode_memory", "decode_compute", "long_context", "varlen", "sparse", "fp8", "edge"]


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


def _g(v: float | None, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:.{digits}g}"


def _si(v: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.4g} {prefix}{unit}"
    return f"{v:.4g} {unit}"


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


CERTIFICATE_FORMATS = (1, 2)


def load_certificate(path: str | Path) -> dict[str, Any]:
    doc = json.loads(Path(path).read_text())
    if not isinstance(doc, dict) or "kernels" not in doc:
        raise benchjson.BenchFileError(f"{path}: not an mla-certify certificate (no 'kernels')")
    # Format 2 (mla/reports/certificate.hpp) added NOT_CLAIMED, HOST_ERROR and INCOMPLETE; what
    # the report reads (kernels, counts, verdict, complete) means the same in both.
    if doc.get("format") not in CERTIFICATE_FORMATS:
        raise benchjson.BenchFileError(f"{path}: certificate format {doc.get('format')!r} is not one of "
                                       f"{', '.join(map(str, CERTIFICATE_FORMATS))}")
    return doc


def _cert_status(cert: dict[str, Any] | None) -> dict[str, str]:
    """kernel -> 'certified' / 'FAILS certification' / ..."""
    out: dict[str, str] = {}
    if not cert:
        return out
    for k in cert["kernels"]:
        c = k.get("counts", {})
        if k.get("unavailable"):
            out[k["name"]] = "unavailable"
        elif c.get("FAIL", 0) or c.get("ERROR", 0):
            out[k["name"]] = "FAILS certification"
        elif c.get("HOST_ERROR", 0):
            # The certifier's own failure: not the kernel's, and not a pass either.
            out[k["name"]] = "not certified (the host failed on some cases)"
        elif c.get("PASS", 0):
            out[k["name"]] = "certified" if cert.get("complete", False) else "certified (incomplete run)"
        else:
            out[k["name"]] = "not certified (no case passed)"
    return out


def ordered_points(run: BenchRun) -> list[str]:
    names = list(run.points.keys())
    seen_in_cases = [c.point for c in run.kernel_cases() if c.point and c.point not in run.points]
    names += [n for n in dict.fromkeys(seen_in_cases)]
    return sorted(names, key=lambda n: (AXIS_ORDER.index(run.points[n]["axis"])
                                        if n in run.points and run.points[n]["axis"] in AXIS_ORDER
                                        else len(AXIS_ORDER), names.index(n)))


def default_baselines(run: BenchRun) -> list[str]:
    # The baselines (the naive MHA paths) are what MLA's absorbed form is meant to beat; each
    # implementation declares its role in the registry, which the benchmark records.
    return [name for name, k in run.kernels.items() if k.get("role") == "baseline"]


# --- Markdown report: one function per section, each returning its lines ---------------------

def _md_header(run: BenchRun, cert: dict[str, Any] | None, model: str) -> list[str]:
    ctx = run.context
    L = [f"# MLA attention-core benchmark: {model}", ""]
    L.append(f"Generated by `reports/tools/bench_report.py` from `{Path(run.path).name}`"
             + (" and an mla-certify certificate" if cert else "") + ". Every number below was measured"
             f" by mla-bench in that run on this machine ({ctx.get('num_cpus', '?')}-CPU host, CPU timings).")
    L.append("")
    if not run.complete:
        L.append(f"**Partial run**: {_md_escape(run.run_note)}. Every row below was measured; the benchmarks that"
                 " did not run are absent from the tables, not passed.")
        L.append("")
    return L


def _md_run(run: BenchRun, cases: list[Case], model: str) -> list[str]:
    ctx = run.context
    L = ["## Run", "", "| what | value |", "|---|---|"]
    rows = [
        ("date", ctx.get("date")),
        ("host", ctx.get("host_name")),
        ("CPU model", model),
        ("CPUs / threads used by probes and kernels", f"{ctx.get('num_cpus')} / {ctx.get('mla_threads')}"),
        ("ISA: CPU / kernels compiled for", f"{ctx.get('mla_isa_runtime')} / {ctx.get('mla_isa_build')}"),
        ("load average at start", ", ".join(_g(x, 3) for x in ctx.get("load_avg", [])) or "–"),
        ("axis tier", ctx.get("mla_tier")),
        ("repetitions per case", ", ".join(str(n) for n in sorted({len(c.times_s) for c in cases if c.times_s}))
         or "–"),
        ("timing", ctx.get("mla_timing")),
        ("cache flush between timed calls",
         f"{int(ctx.get('mla_cache_flush_bytes', 0)) >> 20} MiB written before each call of points whose inputs are"
         f" ≥ {int(ctx.get('mla_cache_flush_min_input_bytes', 0) or 0) / 2**20:.4g} MiB (smaller ones: warm caches)"
         if int(ctx.get("mla_cache_flush_bytes", 0) or 0) else "none"),
        ("Google Benchmark library build", ctx.get("library_build_type")),
        ("axes", ctx.get("mla_axes_note")),
        ("run", "complete" if run.complete else f"PARTIAL: {run.run_note}"),
    ]
    # GPU runs (mla-gpu-bench, torch_side_by_side.py) say how they timed and flushed L2.
    for key, what in (("mla_gpu_timing", "GPU timing"), ("mla_gpu_l2_flush", "GPU L2 flush between timed calls"),
                      ("mla_torch_l2_flush", "torch L2 flush between timed calls"),
                      ("mla_input_generator", "input generator")):
        if ctx.get(key):
            rows.append((what, ctx.get(key)))
    for k, v in rows:
        L.append(f"| {k} | {_md_escape(str(v))} |")
    L.append("")
    return L


def _md_ceilings(run: BenchRun) -> list[str]:
    """The measured ceilings, the ridge points they make, and why the compute roof may be out of
    reach (the kernels ran or were compiled for a narrower ISA than the probes)."""
    ctx = run.context
    L = ["## Measured ceilings", "", "| ceiling | value | how |", "|---|---|---|"]
    for key, c in run.ceilings.items():
        if not isinstance(c, dict):
            continue
        L.append(f"| `{key}` | {_si(float(c['value']), c['unit'])} | {_md_escape(c.get('method', ''))} |")
    L.append("")
    ridges = {}
    for name, k in run.kernels.items():
        bw, pk = run.ceiling_value(k.get("roof_bw")), run.ceiling_value(k.get("roof_peak"))
        if bw and pk:
            ridges[f"{k['roof_peak']} / {k['roof_bw']}"] = pk / bw
    if ridges:
        L.append("Ridge points (FLOP/byte; below: memory-bound): "
                 + "; ".join(f"{k} = {_g(v)}" for k, v in ridges.items()) + ".")
        L.append("")
    kernel_isa = ctx.get("mla_isa_kernels")
    if kernel_isa is not None:
        # Runs whose host kernels choose their ISA at run time (mla/ref/gemm.hpp).
        runtime = ctx.get("mla_isa_runtime")
        if kernel_isa != str(runtime).replace("avx2_fma", "avx2"):
            L.append(f"The compute roofs are what this CPU reaches with {runtime}; the host kernels ran with"
                     f" {kernel_isa} (MLA_ISA), so part of the distance to the roof is that choice"
                     " (see `fma_f64_kernel_isa`).")
            L.append("")
    elif ctx.get("mla_isa_runtime") != ctx.get("mla_isa_build"):
        L.append(f"The compute roofs are what this CPU reaches with {ctx.get('mla_isa_runtime')}; the kernels were"
                 f" compiled for {ctx.get('mla_isa_build')}, so part of the distance to the roof is the build's ISA"
                 " (see `fma_f64_build_isa` and `gemm_f64`).")
        L.append("")
    return L


def _md_certification(cert: dict[str, Any], cert_status: dict[str, str], kernels: list[str],
                      model: str) -> list[str]:
    L = ["## Certification", ""]
    cm = cert.get("machine", {}).get("cpu_model")
    L.append(f"Certificate: {cert.get('verdict', '?')}, complete: {cert.get('complete')}, "
             f"finished {cert.get('finished_utc', '?')}, machine `{cm}`"
             + ("" if cm == model else " (**not the benchmarked machine**)") + ".")
    L.append("")
    L.append("| implementation | PASS | FAIL | UNSUPPORTED | ERROR | SKIPPED | status |")
    L.append("|---|---|---|---|---|---|---|")
    for k in cert["kernels"]:
        c = k.get("counts", {})
        L.append(f"| `{k['name']}` | {c.get('PASS', 0)} | {c.get('FAIL', 0)} | {c.get('UNSUPPORTED', 0)} | "
                 f"{c.get('ERROR', 0)} | {c.get('SKIPPED', 0)} | {cert_status.get(k['name'], '?')} |")
    L.append("")
    bad = [k for k in kernels if cert_status.get(k, "").startswith("FAILS")]
    if bad:
        L.append("**Speed of an implementation that fails certification means nothing:** "
                 + ", ".join(f"`{k}`" for k in bad) + ".")
        L.append("")
    return L


def _md_result_row(p: str, k: str, c: Case, m: Metrics, mets: dict[tuple, Metrics | None],
                   baselines: list[str], cert_status: dict[str, str]) -> str:
    """One row of a results table: implementation `k` at point `p`."""
    status = cert_status.get(k, "")
    kname = f"`{k}`" + (" ⚠" if status.startswith("FAILS") else "")
    pct = "–" if m.pct is None else f"{m.pct:.1f}" + (" †" if m.over_roof else "")
    bound = m.bound or "no roof"
    if c.counters.get("cold_cache", 1.0) == 0.0:
        bound += ", warm caches"
    sp = []
    for b in baselines:
        bm = mets.get((b, p))
        sp.append("–" if bm is None or b == k else f"{bm.median_s / m.median_s:.2f}")
    share = c.counter_median("cpu_share")
    share_s = "–" if share is None else f"{share:.2f}"
    return (f"| {p} | {kname} | {m.median_s * 1e3:.4g} [{m.lo_s * 1e3:.4g}–{m.hi_s * 1e3:.4g}] | {m.reps} | "
            f"{m.bps / 1e9:.4g} | {m.fps / 1e12:.4g} | {m.ai:.4g} | {pct} | {bound} | {share_s} |"
            + "".join(f" {s} |" for s in sp))


def _md_results(run: BenchRun, cases: list[Case], kernels: list[str], pts: list[str],
                by_key: dict[tuple, Case], mets: dict[tuple, Metrics | None],
                baselines: list[str], cert_status: dict[str, str]) -> list[str]:
    """The results tables, one per axis, in the order of `pts`."""
    L = ["## Results", ""]
    L.append("Time: median over repetitions of the timed call (min–max in brackets). GB/s and TFLOP/s: the"
             " implementation's byte/FLOP model divided by the median time. % of ceiling: of the binding roof"
             " (bandwidth when the arithmetic intensity is below the ridge point, else compute). CPU share: process"
             " CPU time per wall second and thread during the timed calls (median; 1.00 = never descheduled).")
    L.append("")
    if any(m and m.over_roof for m in mets.values()):
        L.append("† above the measured roof: the model counts bytes (e.g. the naive path's per-head K/V) that this"
                 " implementation serves from the caches, not from DRAM.")
        L.append("")
    current_axis = None
    shares = [c.counter_median("cpu_share") for c in cases if not c.error]
    busy = [x for x in shares if x is not None and x < BUSY_SHARE]
    if busy:
        L.append(f"**The machine was busy during this run:** {len(busy)} of {len(shares)} rows got less than"
                 f" {BUSY_SHARE:.0%} of a core per thread while timed (CPU share column), so their times include"
                 " periods when the implementation was descheduled and overstate its cost.")
        L.append("")
    header = ("| case | implementation | time (ms) | reps | GB/s | TFLOP/s | FLOP/B | % of ceiling | bound | CPU share |"
              + "".join(f" × vs `{b}` |" for b in baselines))
    sep = "|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(baselines)
    for p in pts:
        axis = run.points.get(p, {}).get("axis", "other")
        if axis != current_axis:
            current_axis = axis
            L.append(f"### {axis}")
            L.append("")
            L.append(header)
            L.append(sep)
        for k in kernels:
            c = by_key.get((k, p))
            if c is None:
                continue
            m = mets[(k, p)]
            if m is None:
                continue
            L.append(_md_result_row(p, k, c, m, mets, baselines, cert_status))
        if p == pts[-1] or run.points.get(pts[pts.index(p) + 1], {}).get("axis", "other") != axis:
            L.append("")
    return L


def _md_not_measured(cases: list[Case]) -> list[str]:
    skipped = [c for c in cases if c.error]
    if not skipped:
        return []
    L = ["## Not measured", "", "| implementation | case | reason |", "|---|---|---|"]
    for c in skipped:
        L.append(f"| `{c.kernel}` | {c.point} | {_md_escape(c.error or '')} |")
    L.append("")
    return L


def _md_shapes(run: BenchRun, pts: list[str]) -> list[str]:
    scaled = [(p, run.points[p]) for p in pts if run.points.get(p, {}).get("scaled_from")]
    if not scaled:
        return []
    L = ["## Shapes", ""]
    L.append("CPU points are reduced copies of production shapes (the fp64 reference cannot run b=128 at 64K"
             " tokens in a CI budget); these numbers are not the production shapes' numbers.")
    L.append("")
    L.append("| case | b | s_q | h | cache | top-k | max s_k | reduced from |")
    L.append("|---|---|---|---|---|---|---|---|")
    for p, d in scaled:
        L.append(f"| {p} | {d['batch']} | {d['s_q']} | {d['heads']} | {d['cache_format']} | {d['topk']} | "
                 f"{d['seqlen_max']} | {_md_escape(d['scaled_from'])} |")
    L.append("")
    return L


def _md_ceiling_probes(run: BenchRun) -> list[str]:
    cl = [c for c in run.cases.values() if c.kind == "ceiling" and not c.error and c.times_s]
    if not cl:
        return []
    L = ["## Ceiling probes as benchmarks", ""]
    L.append("The same probes timed by Google Benchmark in this run (rows the regression gate tracks; the"
             " roofs above are the best of the pre-run measurement).")
    L.append("")
    L.append("| probe | median rate | reps |")
    L.append("|---|---|---|")
    for c in cl:
        if "bytes_per_second" in c.counters:
            rate = _si(c.counters["bytes_per_second"], "B/s")
        elif "flop_per_second" in c.counters:
            rate = _si(c.counters["flop_per_second"], "FLOP/s")
        else:
            rate = "–"
        L.append(f"| {c.run_name} | {rate} | {len(c.times_s)} |")
    L.append("")
    return L


def _md_plots(run: BenchRun, kernels: list[str], mets: dict[tuple, Metrics | None],
              roofline_png: str | None, bandwidth_png: str | None) -> list[str]:
    if not (roofline_png or bandwidth_png):
        return []
    L = ["## Plots", ""]
    unroofed = [k for k in kernels if not run.kernels.get(k, {}).get("roof_bw")]
    if unroofed:
        L.append("Not plotted (no ceilings of their device in this run): "
                 + ", ".join(f"`{k}`" for k in unroofed) + ".")
        L.append("")
    warm = sorted({m.case.point for m in mets.values()
                   if m and m.bw_roof is not None and m.case.counters.get("cold_cache", 1.0) == 0.0})
    if warm and roofline_png:
        L.append("Left out of the roofline (timed with warm caches, so not bounded by the DRAM roof): "
                 + ", ".join(warm) + ".")
        L.append("")
    if roofline_png:
        L.append(f"![roofline]({roofline_png})")
        L.append("")
    if bandwidth_png:
        L.append(f"![bandwidth vs context]({bandwidth_png})")
        L.append("")
    return L


def render_markdown(run: BenchRun, cert: dict[str, Any] | None = None,
                    baselines: list[str] | None = None,
                    roofline_png: str | None = "roofline.png",
                    bandwidth_png: str | None = "bandwidth.png") -> str:
    baselines = default_baselines(run) if baselines is None else baselines
    cert_status = _cert_status(cert)
    cases = run.kernel_cases()
    by_key = {(c.kernel, c.point): c for c in cases}
    mets = {(c.kernel, c.point): metrics_for(run, c) for c in cases}
    kernels = list(dict.fromkeys([c.kernel for c in cases]))
    pts = [p for p in ordered_points(run) if any((k, p) in by_key for k in kernels)]
    model = run.context.get("mla_cpu_model", "unknown CPU")
    L = _md_header(run, cert, model) + _md_run(run, cases, model) + _md_ceilings(run)
    if cert is not None:
        L += _md_certification(cert, cert_status, kernels, model)
    L += _md_results(run, cases, kernels, pts, by_key, mets, baselines, cert_status)
    L += _md_not_measured(cases) + _md_shapes(run, pts) + _md_ceiling_probes(run)
    L += _md_plots(run, kernels, mets, roofline_png, bandwidth_png)
    return "\n".join(L)


# --- plots --------------------------------------------------------------------------------

def _short(point: str) -> str:
    return point[4:] if point.startswith("cpu_") else point


def roofline_plottable(m: Metrics | None) -> bool:
    """Drawn on the roofline: measured against these ceilings (not a device kernel under host
    roofs) and timed with cold caches (a warm-cache point is not bounded by the DRAM roof)."""
    return bool(m and m.fps > 0 and m.ai > 0 and m.bw_roof is not None
                and m.case.counters.get("cold_cache", 1.0) != 0.0)


def _family(ceiling_key: str) -> str:
    """Which device a ceiling belongs to: the GPU probes are named gpu_*, the host ones are not."""
    return "gpu" if ceiling_key.startswith("gpu_") else "cpu"


def _ceilings_of(run: BenchRun, family: str, unit: str) -> list[str]:
    return [k for k, c in run.ceilings.items()
            if isinstance(c, dict) and c.get("unit") == unit and _family(k) == family and c.get("value")]


def roofline_groups(run: BenchRun) -> dict[str, list[Metrics]]:
    """Plottable metrics by the bandwidth roof that judges them (one roofline panel each)."""
    groups: dict[str, list[Metrics]] = {}
    for m in (metrics_for(run, c) for c in run.kernel_cases()):
        if roofline_plottable(m):
            groups.setdefault(run.kernels[m.case.kernel]["roof_bw"], []).append(m)
    return groups


# Offsets (points) tried around a marker for its label, nearest first: right, above, left, below,
# then the diagonals, then the same farther out (from the third ring on, with a leader line).
_LABEL_OFFSETS = [(dx * r, dy * r) for r in (3, 9, 16, 24, 34, 46, 60, 76) for dx, dy in
                  ((1, 0.3), (0, 1), (-1, 0.3), (0, -1.2), (1, 1), (-1, 1), (1, -1), (-1, -1))]
_LEADER_FROM = 16


def label_box(t, renderer):
    """The box of a label's text alone (an Annotation's own extent also spans its leader line,
    which may cross other labels)."""
    from matplotlib.text import Text
    return Text.get_window_extent(t, renderer)


def place_labels(ax, renderer, items, fontsize=6):
    """items: [(x, y, text, colour)] in data coordinates. Each label takes the first offset around
    its marker whose box overlaps no label placed before it (greedy, in drawing order); where every
    offset overlaps, the one overlapping least. Returns the Text artists (gid "point-label").

    Why: the points of one kernel sit close together on a log-log roofline (the same shapes at
    other lengths), and labels written at a fixed offset land on top of each other."""
    placed, boxes = [], []

    def overlap(b):
        return sum(max(0.0, min(b.x1, o.x1) - max(b.x0, o.x0)) * max(0.0, min(b.y1, o.y1) - max(b.y0, o.y0))
                   for o in boxes)

    for x, y, text, colour in items:
        best = None
        for off in _LABEL_OFFSETS:
            far = max(abs(off[0]), abs(off[1])) >= _LEADER_FROM
            t = ax.annotate(text, (x, y), xytext=off, textcoords="offset points", fontsize=fontsize,
                            color=colour, gid="point-label",
                            ha="left" if off[0] >= 0 else "right", va="bottom" if off[1] >= 0 else "top",
                            arrowprops=dict(arrowstyle="-", lw=0.3, color=colour, shrinkA=0, shrinkB=2)
                            if far else None)
            b = label_box(t, renderer)
            cost = overlap(b)
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, t, b)
            else:
                t.remove()
            if cost == 0:
                break
        placed.append(best[1])
        boxes.append(best[2])
    return placed


def point_numbers(run: BenchRun, metrics) -> dict[str, int]:
    """A short number per benchmark point drawn (in the run's point order), for labels that stay
    small; the figure's key spells each one out."""
    drawn = {m.case.point or "" for m in metrics}
    order = [p for p in run.points if p in drawn] + sorted(p for p in drawn if p not in run.points)
    return {p: i + 1 for i, p in enumerate(order)}


def plot_roofline(run: BenchRun, path: str | Path) -> None:
    """The roofline figure (draw_roofline), written to `path`."""
    import matplotlib.pyplot as plt
    fig = draw_roofline(run)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)


def draw_roofline(run: BenchRun):
    """One log-log panel per device (grouped by the bandwidth roof that judges the kernels), with
    that device's measured roofs and one point per kernel x case: one colour and marker per kernel
    (the same in every panel), each point labelled with its number, placed so that no two labels
    overlap, and a key of the numbers beside each panel."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = roofline_groups(run)
    if not groups:  # still a valid figure: the roofs alone
        groups = {"read_bw": []} if "read_bw" in run.ceilings else {}
    fig, axes = plt.subplots(1, max(len(groups), 1), figsize=(11 * max(len(groups), 1), 7.5), squeeze=False)
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    cmap = plt.get_cmap("tab10")
    all_kernels = list(dict.fromkeys(m.case.kernel for gm in groups.values() for m in gm))
    style = {k: (cmap(i % 10), markers[i % len(markers)]) for i, k in enumerate(all_kernels)}
    renderer = fig.canvas.get_renderer()
    line_styles = ["-", "-.", "--", ":", (0, (3, 1, 1, 1))]
    for ax, (bw_key, gm) in zip(axes[0], groups.items()):
        fam = _family(bw_key)
        bw = run.ceiling_value(bw_key)
        own_peaks = list(dict.fromkeys(run.kernels[m.case.kernel]["roof_peak"] for m in gm))
        peaks = own_peaks + [k for k in _ceilings_of(run, fam, "FLOP/s") if k not in own_peaks]
        ais = [m.ai for m in gm] or [1.0]
        x_lo = 10 ** math.floor(math.log10(min(ais + [0.05]) / 2))
        x_hi = 10 ** math.ceil(math.log10(max(ais + [100.0]) * 2))
        xs = [x_lo * (x_hi / x_lo) ** (i / 200) for i in range(201)]
        top = max((run.ceiling_value(k) or 0) for k in peaks) if peaks else (bw or 1) * x_hi
        for i, pk in enumerate(peaks):
            peak = run.ceiling_value(pk)
            if bw and peak:
                ax.plot(xs, [min(bw * x, peak) for x in xs], linestyle=line_styles[i % len(line_styles)],
                        color="black" if i == 0 else plt.get_cmap("Dark2")(i % 8), lw=1.4,
                        label=f"roof: {bw_key} × AI, capped by {pk} ({_si(peak, 'FLOP/s')})")
        for bk in _ceilings_of(run, fam, "B/s"):
            v = run.ceiling_value(bk)
            if bk != bw_key and v:
                keep = [x for x in xs if v * x <= top]
                ax.plot(keep, [v * x for x in keep], ":", color="tab:blue", lw=1.0, label=f"{bk} ({_si(v, 'B/s')})")
        if bw:
            ax.text(xs[5], bw * xs[5] * 1.3, f"{bw_key} {_si(bw, 'B/s')}", fontsize=7)
        kernels = list(dict.fromkeys(m.case.kernel for m in gm))
        for k in kernels:
            km = [m for m in gm if m.case.kernel == k]
            ax.scatter([m.ai for m in km], [m.fps for m in km], marker=style[k][1], s=28,
                       color=style[k][0], label=k, zorder=3, edgecolors="black", linewidths=0.3)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(x_lo, x_hi)
        numbers = point_numbers(run, gm)
        # Labels are placed once the axes' scales and limits are final: placement measures boxes
        # in display coordinates.
        ax.set_ylim(*ax.get_ylim())
        place_labels(ax, renderer, [(m.ai, m.fps, str(numbers[m.case.point or ""]), style[m.case.kernel][0])
                                    for m in gm])
        if numbers:
            key = "\n".join(f"{n:>2} {_short(p)}" for p, n in numbers.items())
            ax.text(1.01, 1.0, key, transform=ax.transAxes, va="top", ha="left", fontsize=6, family="monospace")
        ax.set_xlabel("arithmetic intensity (FLOP / byte, the implementation's model)")
        ax.set_ylabel("FLOP/s (model FLOPs / median time)")
        device = (run.context.get("mla_gpu_name", "GPU") if fam == "gpu" else
                  f"{run.context.get('mla_cpu_model', '')}, {run.context.get('mla_threads', '?')} thread(s)")
        ax.set_title(f"Roofline with measured ceilings: {device}", fontsize=10)
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
        ax.legend(fontsize=7, loc="lower right")
    if len(groups) > 1:
        fig.subplots_adjust(wspace=0.35)  # room for each panel's key before the next panel
    return fig


def bandwidth_series(run: BenchRun) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """(kernel, cache format) -> [(context length, achieved B/s)] over dense uniform-length decode
    (ue8m0-scaled FP8 points form their own series)."""
    series: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for c in run.kernel_cases():
        m = metrics_for(run, c)
        d = run.points.get(c.point or "")
        if not m or m.bw_roof is None or not d or d.get("topk", 0) or \
                d.get("axis") not in ("decode_memory", "fp8", "long_context"):
            continue
        if d["seqlen_max"] <= 0 or d["seqlen_mean"] != d["seqlen_max"] or d["heads"] != 16 or d["s_q"] != 1:
            continue  # one family: uniform lengths, h=16, s_q=1 (the memory-bound decode shape)
        cache = d["cache_format"] + (" ue8m0" if d.get("scale_fmt") == "ue8m0" else "")
        series.setdefault((c.kernel, cache), []).append((int(d["seqlen_max"]), m.bps))
    for v in series.values():
        v.sort()
    return series


def plot_bandwidth(run: BenchRun, path: str | Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = bandwidth_series(run)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    cmap = plt.get_cmap("tab10")
    kernels = list(dict.fromkeys(k for k, _ in series))
    for (k, fmt_), pts in series.items():
        ax.plot([p[0] for p in pts], [p[1] / 1e9 for p in pts], "-" if fmt_ == "bf16" else "--",
                marker={"bf16": "o", "fp8": "s"}.get(fmt_, "^"), color=cmap(kernels.index(k) % 10),
                label=f"{k} ({fmt_} cache)")
    families = {_family(run.kernels[k]["roof_bw"]) for k, _ in series}
    for fam in sorted(families):
        for i, key in enumerate(_ceilings_of(run, fam, "B/s")):
            v = run.ceiling_value(key)
            ax.axhline(v / 1e9, color="black" if fam == "cpu" else "tab:red", ls=["-", ":", "--"][i % 3], lw=1.0,
                       label=f"measured {key} {v / 1e9:.3g} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context length s_k (tokens per sequence; h=16, s_q=1, uniform lengths)")
    ax.set_ylabel("achieved GB/s (model bytes / median time)")
    ax.set_title(f"Bandwidth vs context: {run.context.get('mla_cpu_model', '')}", fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Markdown report + roofline/bandwidth plots from mla-bench JSON")
    ap.add_argument("bench_json")
    ap.add_argument("--certificate", help="certificate.json from mla-certify (adds certification status)")
    ap.add_argument("--baseline", action="append", dest="baselines",
                    help="implementation to compute speed-ups against (repeatable; default: those whose role is baseline)")
    ap.add_argument("--out", required=True, help="folder for report.md, roofline.png, bandwidth.png")
    a = ap.parse_args(argv)
    try:
        run = benchjson.load(a.bench_json)
        cert = load_certificate(a.certificate) if a.certificate else None
    except (benchjson.BenchFileError, OSError, json.JSONDecodeError) as e:
        print(f"bench_report: {e}", file=sys.stderr)
        return 2
    if not run.kernel_cases():
        print("bench_report: the file has no mla/<kernel>/<point> rows", file=sys.stderr)
        return 2
    for b in a.baselines or []:
        if b not in run.kernels and not any(c.kernel == b for c in run.kernel_cases()):
            print(f"bench_report: baseline {b!r} is not in the run", file=sys.stderr)
            return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    plot_roofline(run, out / "roofline.png")
    plot_bandwidth(run, out / "bandwidth.png")
    (out / "report.md").write_text(render_markdown(run, cert, a.baselines) + "\n")
    return 0
