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
import sys
from pathlib import Path
from typing import Any

from . import benchjson
from .benchjson import BenchRun, Case
from .metrics import Metrics, g as _g, metrics_for, si as _si
from .plots import plot_bandwidth, plot_roofline

# Below this share of a core per thread while timed, a row is flagged as measured on a busy machine.
BUSY_SHARE = 0.9

AXIS_ORDER = ["decode_memory", "decode_compute", "long_context", "varlen", "sparse", "fp8", "edge", "prefill", "merge",
              "indexer_logits", "topk", "sparse_prefill"]

# What each kind of case (the axis mla-bench records for its point) measures, for the headings.
KIND_TITLES = {
    "decode_memory": "dense decode, memory-bound shapes",
    "decode_compute": "dense decode, compute-bound shapes (many heads, or several query tokens)",
    "long_context": "dense decode at long context",
    "varlen": "dense decode over sequences of different lengths",
    "sparse": "sparse (top-k) decode",
    "fp8": "dense decode over the FP8 cache",
    "edge": "edge cases (empty and one-token sequences, odd head counts, page boundaries, extreme values)",
    "prefill": "prefill in the MHA form (compute-bound: causal, skewed varlen, a chunk over a cached prefix)",
    "merge": "merge of two partial attention states (memory-bound; empty sides as an edge)",
    "indexer_logits": "V3.2 lightning-indexer logits over the 132-byte FP8 key cache (paged decode steps, "
                      "ragged prefill; every key scored by each of 64 heads)",
    "topk": "V3.2's top-2048 over the indexer logits (no arithmetic: measured in logits read per second)",
    "sparse_prefill": "V3.2 sparse prefill (FlashMLA's flash_mla_sparse_fwd): each token attends its top-k keys "
                      "(compute-bound: the heads share each gathered 576-wide key)",
    "other": "cases of no known kind",
}

# The first word of a point's name (after a cpu_ prefix) -> its kind, as the axis table names them.
_NAME_KINDS = {"decode": "decode_memory", "compute": "decode_compute", "long": "long_context",
               "varlen": "varlen", "sparse": "sparse", "fp8": "fp8", "edge": "edge",
               "prefill": "prefill", "merge": "merge", "indexer": "indexer_logits",
               "topk": "topk"}


def kind_from_name(point: str) -> str:
    """The kind of a point from its name alone, for points a file lists no shape for (files
    written before mla_points existed, or a point added by hand): mla-bench names its points
    `[cpu_]<kind word>_<shape>` (cpu_decode_b4_h16_sq1_sk1024, sparse_b64_..., edge_len1)."""
    stem = point[4:] if point.startswith("cpu_") else point
    if stem.startswith("sparse_prefill_"):  # not the sparse decode its first word names
        return "sparse_prefill"
    return _NAME_KINDS.get(stem.split("_", 1)[0], "other")


def case_kind(run: BenchRun, point: str) -> str:
    """A point's kind: the axis the run recorded for it, else what its name says."""
    axis = run.points.get(point, {}).get("axis")
    return axis if axis else kind_from_name(point)


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


CERTIFICATE_FORMATS = (1, 2)
# The prefix mla-bench gives a row whose output the judge did not pass (suites/bench/point_judge.hpp).
NOT_TIMED = "not timed: "


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
    return sorted(names, key=lambda n: (AXIS_ORDER.index(case_kind(run, n)) if case_kind(run, n) in AXIS_ORDER
                                        else len(AXIS_ORDER), names.index(n)))


def default_baselines(run: BenchRun) -> list[str]:
    # The baselines (the naive MHA paths) are what MLA's absorbed form is meant to beat; each
    # implementation declares its role in the registry, which the benchmark records.
    return [name for name, k in run.kernels.items() if k.get("role") == "baseline"]


# --- Markdown report: one function per section, each returning its lines ---------------------

def _md_header(run: BenchRun, cert: dict[str, Any] | None, model: str) -> list[str]:
    ctx = run.context
    # A run with a GPU is named after it: its rows are the GPU's, timed by CUDA events; the host
    # CPU only built the inputs and the truths they were judged against.
    gpu = ctx.get("mla_gpu_name")
    where = (f"{gpu}, hosted by {model} ({ctx.get('num_cpus', '?')} CPUs); GPU rows timed by CUDA events"
             if gpu else f"{ctx.get('num_cpus', '?')}-CPU host, CPU timings")
    L = [f"# MLA attention-core benchmark: {gpu or model}", ""]
    L.append(f"Generated by `reports/tools/bench_report.py` from `{Path(run.path).name}`"
             + (" and an mla-certify certificate" if cert else "") + ". Every number below was measured"
             f" by mla-bench in that run on this machine ({where}).")
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
    # GPU runs (mla-bench, torch_side_by_side.py) say how they timed and flushed L2.
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


def _kernel_name(k: str, cert_status: dict[str, str]) -> str:
    return f"`{k}`" + (" ⚠" if cert_status.get(k, "").startswith("FAILS") else "")


def _pct_text(m: Metrics) -> str:
    return "–" if m.pct is None else f"{m.pct:.1f}" + (" †" if m.over_roof else "")


def _bound_text(c: Case, m: Metrics) -> str:
    bound = m.bound or "no roof"
    if c.counters.get("cold_cache", 1.0) == 0.0:
        bound += ", warm caches"
    return bound


def _md_result_row(p: str, k: str, c: Case, m: Metrics, mets: dict[tuple, Metrics | None],
                   baselines: list[str], cert_status: dict[str, str]) -> str:
    """One row of a detail table: implementation `k` at point `p`."""
    sp = []
    for b in baselines:
        bm = mets.get((b, p))
        sp.append("–" if bm is None or b == k else f"{bm.median_s / m.median_s:.2f}")
    share = c.counter_median("cpu_share")
    share_s = "–" if share is None else f"{share:.2f}"
    return (f"| {p} | {_kernel_name(k, cert_status)} | {m.median_s * 1e3:.4g} [{m.lo_s * 1e3:.4g}–{m.hi_s * 1e3:.4g}]"
            f" | {m.reps} | {m.bps / 1e9:.4g} | {m.fps / 1e12:.4g} | {m.ai:.4g} | {_pct_text(m)} | {_bound_text(c, m)}"
            f" | {share_s} |" + "".join(f" {s} |" for s in sp))


def kind_groups(run: BenchRun, kernels: list[str], pts: list[str],
                mets: dict[tuple, Metrics | None]) -> list[tuple[str, list[str]]]:
    """[(kind, its points)] in the order of `pts`, over the points with at least one measurement
    (a point every implementation failed on is listed under Not measured, not as an empty row)."""
    groups: dict[str, list[str]] = {}
    for p in pts:
        if any(mets.get((k, p)) for k in kernels):
            groups.setdefault(case_kind(run, p), []).append(p)
    return list(groups.items())


def _kind_cell(c: Case | None, m: Metrics | None) -> str:
    """'1.487 ms · 35.7 % (compute)': the detail row's time, % of ceiling and bound, same rounding
    (a top-k's logits per second after its time)."""
    if c is not None and (c.error or "").startswith(NOT_TIMED):
        return "not timed: " + c.error[len(NOT_TIMED):].split(" ", 1)[0]  # the verdict word; the reason is below
    if c is None or m is None:
        return "–"
    # A kind measured in logits per second (the top-k) has that rate beside its time.
    lps = c.counters.get("logits_per_second")
    rate = f" · {lps / 1e6:.4g} M logits/s" if lps else ""
    if m.pct is None:
        return f"{m.median_s * 1e3:.4g} ms{rate} ({_bound_text(c, m)})"
    return (f"{m.median_s * 1e3:.4g} ms{rate} · {m.pct:.1f} %" + (" †" if m.over_roof else "")
            + f" ({_bound_text(c, m)})")


def _md_kind_table(kind: str, kpts: list[str], kernels: list[str], by_key: dict[tuple, Case],
                   mets: dict[tuple, Metrics | None], cert_status: dict[str, str]) -> list[str]:
    """One kind's cases side by side: a row per case, a column per implementation measured in
    this kind; a cell holds the detail row's median time, % of ceiling and bound, as printed there."""
    def shown(k: str, p: str) -> bool:
        c = by_key.get((k, p))
        return bool(mets.get((k, p))) or (c is not None and (c.error or "").startswith(NOT_TIMED))
    ks = [k for k in kernels if any(shown(k, p) for p in kpts)]
    L = [f"### {kind}: {KIND_TITLES.get(kind, KIND_TITLES['other'])}", ""]
    L.append("| case |" + "".join(f" {_kernel_name(k, cert_status)} |" for k in ks))
    L.append("|---|" + "---|" * len(ks))
    for p in kpts:
        L.append(f"| {p} |" + "".join(f" {_kind_cell(by_key.get((k, p)), mets.get((k, p)))} |" for k in ks))
    L.append("")
    return L


def _md_results(run: BenchRun, cases: list[Case], kernels: list[str], pts: list[str],
                by_key: dict[tuple, Case], mets: dict[tuple, Metrics | None],
                baselines: list[str], cert_status: dict[str, str]) -> list[str]:
    """One table per kind of case with the implementations side by side, then the detail
    tables (a row per implementation and case, every metric), in the order of `pts`."""
    L = ["## Results", ""]
    L.append("One table per kind of case: a row per case, a column per implementation. A cell: the median time"
             " of the timed call, the share of the binding ceiling and which roof binds (details below).")
    L.append("")
    if any(m and m.over_roof for m in mets.values()):
        L.append("† above the measured roof: the model counts bytes (e.g. the naive path's per-head K/V) that this"
                 " implementation serves from the caches, not from DRAM.")
        L.append("")
    shares = [c.counter_median("cpu_share") for c in cases if not c.error]
    busy = [x for x in shares if x is not None and x < BUSY_SHARE]
    if busy:
        L.append(f"**The machine was busy during this run:** {len(busy)} of {len(shares)} rows got less than"
                 f" {BUSY_SHARE:.0%} of a core per thread while timed (CPU share column of the detail tables), so their times include"
                 " periods when the implementation was descheduled and overstate its cost.")
        L.append("")
    groups = kind_groups(run, kernels, pts, mets)
    for kind, kpts in groups:
        L += _md_kind_table(kind, kpts, kernels, by_key, mets, cert_status)
    L += ["## Results in detail", ""]
    L.append("Time: median over repetitions of the timed call (min–max in brackets). GB/s and TFLOP/s: the"
             " implementation's byte/FLOP model divided by the median time. % of ceiling: of the binding roof"
             " (bandwidth when the arithmetic intensity is below the ridge point, else compute). CPU share: process"
             " CPU time per wall second and thread during the timed calls (median; 1.00 = never descheduled).")
    L.append("")
    for kind, kpts in groups:
        # Speed-ups only against the baselines measured on this kind's points: a decode baseline
        # has nothing to say about a prefill or merge row.
        kb = [b for b in baselines if any(mets.get((b, p)) for p in kpts)]
        header = ("| case | implementation | time (ms) | reps | GB/s | TFLOP/s | FLOP/B | % of ceiling | bound | CPU share |"
                  + "".join(f" × vs `{b}` |" for b in kb))
        sep = "|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(kb)
        L += [f"### {kind}", "", header, sep]
        L += [_md_result_row(p, k, by_key[(k, p)], mets[(k, p)], mets, kb, cert_status)
              for p in kpts for k in kernels if mets.get((k, p))]
        L.append("")
    return L


def _md_not_measured(cases: list[Case]) -> list[str]:
    """The rows without a time: first those the judge stopped (a wrong result is never timed),
    then the declared limits and errors."""
    skipped = sorted((c for c in cases if c.error), key=lambda c: not (c.error or "").startswith(NOT_TIMED))
    if not skipped:
        return []
    L = ["## Not measured", ""]
    if any((c.error or "").startswith(NOT_TIMED) for c in skipped):
        L.append("Each implementation's output at each case was judged against the fp64 truth by the certifier's judge"
                 " and tolerance table before the case was timed; \"not timed\" rows did not pass, so they have no time.")
        L.append("")
    L += ["| implementation | case | reason |", "|---|---|---|"]
    for c in skipped:
        L.append(f"| `{c.kernel}` | {c.point} | {_md_escape(c.error or '')} |")
    L.append("")
    return L


def _md_external(run: BenchRun) -> list[str]:
    """Kernels from outside the suite: where each came from, so a number names exactly what ran."""
    ext = [(n, k) for n, k in run.kernels.items() if k.get("origin") and not k.get("overhead_of")]
    if not ext:
        return []
    L = ["## External kernels", "", "| implementation | from | version | digest |", "|---|---|---|---|"]
    for n, k in ext:
        o = k["origin"]
        where = o.get("path") or o.get("spec") or "?"
        digest = o.get("sha256") and f"sha256 {o['sha256']}" or o.get("module_digest") and f"module {o['module_digest']}"
        version = o.get("version") or ", ".join(f"{x} {o[x]}" for x in ("python", "torch") if o.get(x)) or "–"
        L.append(f"| `{n}` | {o.get('kind', '?')} `{_md_escape(where)}` | {_md_escape(str(version))} | "
                 f"{_md_escape(str(digest or '–'))} |")
    L.append("")
    return L


def _md_overheads(run: BenchRun, by_key: dict[tuple, Case]) -> list[str]:
    """Each external kernel's calling path timed with an empty kernel, beside the kernel's own time:
    how much of a short call is the door (the plug-in host or the Python child) rather than the kernel."""
    rows = run.overhead_cases()
    if not rows:
        return []
    L = ["## Calling-path overhead", ""]
    L.append("The same calling path with a kernel that does nothing, timed in the same run: for a C plug-in the"
             " host's call through the C ABI (the kernel's time includes it), for a Python kernel the round trip to"
             " the door's child (the kernel's time is the child's own clock of the call, CUDA events on a device,"
             " so the path comes on top of it).")
    L.append("")
    L += ["| implementation | case | kernel (ms) | calling path alone (µs) | share of the kernel's time |",
          "|---|---|---|---|---|"]
    for c in rows:
        of = run.kernels.get(c.kernel, {}).get("overhead_of", "?")
        k = by_key.get((of, c.point))
        own = _md_escape(c.error) if c.error else "–" if not c.times_s else f"{c.median_s * 1e6:.4g}"
        if k is None or not k.times_s or k.error:
            # The kernel's own reason is in its table; here only which kind of row it is.
            kt, share = (_kind_cell(k, None) if k is not None and k.error else "–"), "–"
            if k is not None and k.error and not k.error.startswith(NOT_TIMED):
                kt = "not measured"
        else:
            kt = f"{k.median_s * 1e3:.4g}"
            share = "–" if c.error or not c.times_s else f"{100 * c.median_s / k.median_s:.2g} %"
        L.append(f"| `{of}` | {c.point} | {kt} | {own} | {share} |")
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
    # Prefill and merge points have no cache or top-k (a merge has no batch either): "–" there,
    # and a merge's state dtype in the cache column.
    for p, d in scaled:
        g = lambda k: d.get(k, "–")  # noqa: E731
        cache = d.get("cache_format", d.get("dtype", "–"))
        L.append(f"| {p} | {g('batch')} | {g('s_q')} | {g('heads')} | {cache} | {g('topk')} | "
                 f"{g('seqlen_max')} | {_md_escape(d['scaled_from'])} |")
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
    # A kind whose cost model counts no FLOPs (the top-k) has no place on a log-log roofline; its
    # rate is in its table (% of the bandwidth ceiling, and the logits per second it reports).
    no_flops = sorted({m.case.point for m in mets.values()
                       if m and m.bw_roof is not None and m.ai <= 0 and m.case.point not in warm})
    if no_flops and roofline_png:
        L.append("Left out of the roofline (no arithmetic in their cost model; see their % of the bandwidth "
                 "ceiling above): " + ", ".join(no_flops) + ".")
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
    L += _md_external(run)
    L += _md_results(run, cases, kernels, pts, by_key, mets, baselines, cert_status)
    L += _md_overheads(run, by_key) + _md_not_measured(cases) + _md_shapes(run, pts) + _md_ceiling_probes(run)
    L += _md_plots(run, kernels, mets, roofline_png, bandwidth_png)
    return "\n".join(L)


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
