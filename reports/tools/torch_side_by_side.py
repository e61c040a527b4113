#!/usr/bin/env python3
"""Times the same MLA decode problems with the machine's PyTorch, next to the suite's CUDA kernels.

Three ways to compute one decode step, each timed on the GPU with CUDA events, an L2 flush before
every call, warm-ups and repetitions:

  torch_absorbed_einsum  DeepSeek's absorbed decode as its reference code does it, written here
                         from the formulas: scores = (q_latent . kv_latent + q_rope . k_rope) *
                         scale, a float32 softmax cast back to bf16, out = probs . kv_latent.
                         Contiguous [b, s_k, 512] + [b, s_k, 64] caches. Same byte/FLOP model as
                         the suite's MLA kernels (1152 bytes per cached token).
  torch_sdpa_mha         torch.nn.functional.scaled_dot_product_attention on a decompressed
                         per-head cache, DeepSeek's "naive" layout: K = [k_nope 128 | k_rope 64],
                         V = 128 per head (h*640 bytes per token: 10 240 for 16 heads).
  torch_sdpa_latent      SDPA on per-head copies of the latent (K 576, V 512 per head): the
                         problem the suite's cuda_naive_mha_cublas baseline solves, same model.

Multi-token (s_q > 1) decode is causal with the diagonal at the bottom right (query i of s_q sees
cache positions 0 .. s_k - s_q + i), as the suite's kernels do.

Output: Google Benchmark JSON (context + one row per repetition with real_time, time_unit,
iterations, bytes_per_second, items_per_second = decoded query tokens per second, and the
counters mla-bench writes: model_bytes, model_flops, flop_per_second, ai_flop_per_byte,
cold_cache), which reports/tools reads. With --merge-with, the rows and context entries are added
to an mla-bench JSON of the same device, so one report shows both.

    python3 torch_side_by_side.py --points-tsv points.tsv --out torch.json \
        [--merge-with gpu.json --merged-out combined.json]

points.tsv is `mla-bench --mla_list_points --mla_points=...` (the suite's axis table); without it the
seven points of the device check are used. Exit status: 0 done, 77 no CUDA device (the reason on
stderr: nothing was timed), 2 bad usage, 1 error.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The Python reference's model constants: reference/python in a checkout; the bundle carries
# mla_ref next to this file (suites/device/make_bundle.sh).
sys.path.insert(1, os.path.join(HERE, os.pardir, os.pardir, "reference", "python"))
from mla_benchtools import benchjson  # noqa: E402  (reports/tools, also in the bundle's tools/reports)

EXIT_NO_GPU = 77
D_LATENT, D_ROPE, D_NOPE, D_V_MHA = 512, 64, 128, 128
D_QK, D_V = D_LATENT + D_ROPE, D_LATENT          # 576, 512: the absorbed problem
VARIANTS = ("torch_absorbed_einsum", "torch_sdpa_mha", "torch_sdpa_latent")
TSV_COLUMNS = ["name", "axis", "batch", "s_q", "heads", "page_size", "topk", "cache", "seqlen_max",
               "seqlen_mean", "causal"]


@dataclass(frozen=True)
class Point:
    name: str
    axis: str
    batch: int
    s_q: int
    heads: int
    page_size: int
    topk: int
    cache: str
    seqlen_max: int
    seqlen_mean: float
    causal: bool


def _dense(name: str, axis: str, s_q: int, h: int, s_k: int) -> Point:
    return Point(name, axis, 128, s_q, h, 64, 0, "bf16", s_k, float(s_k), True)


# The device check's points (suites/device/check.sh), as mla-bench --mla_list_points prints them.
DEFAULT_POINTS = (
    _dense("decode_b128_h16_sq1_sk1024", "decode_memory", 1, 16, 1024),
    _dense("decode_b128_h16_sq1_sk4096", "decode_memory", 1, 16, 4096),
    _dense("decode_b128_h16_sq1_sk16384", "decode_memory", 1, 16, 16384),
    _dense("compute_b128_h64_sq1_sk4096", "decode_compute", 1, 64, 4096),
    _dense("compute_b128_h64_sq2_sk4096", "decode_compute", 2, 64, 4096),
    _dense("compute_b128_h128_sq1_sk4096", "decode_compute", 1, 128, 4096),
    _dense("compute_b128_h128_sq2_sk4096", "decode_compute", 2, 128, 4096),
)


class UsageError(ValueError):
    pass


def parse_points_tsv(text: str) -> list[Point]:
    """Rows of `mla-bench --mla_list_points`; the header must be the one it prints."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or lines[0].split("\t") != TSV_COLUMNS:
        raise UsageError(f"points TSV: expected the header {' '.join(TSV_COLUMNS)!r}, got "
                         f"{lines[0] if lines else 'an empty file'!r}")
    pts = []
    for i, ln in enumerate(lines[1:], start=2):
        f = ln.split("\t")
        if len(f) != len(TSV_COLUMNS):
            raise UsageError(f"points TSV line {i}: {len(f)} fields, expected {len(TSV_COLUMNS)}")
        try:
            pts.append(Point(f[0], f[1], int(f[2]), int(f[3]), int(f[4]), int(f[5]), int(f[6]), f[7],
                             int(f[8]), float(f[9]), f[10] == "1"))
        except ValueError as e:
            raise UsageError(f"points TSV line {i}: {e}") from e
    return pts


def unsupported(p: Point) -> str | None:
    """Why this script does not time the point (it covers dense uniform-length bf16 decode)."""
    if p.topk:
        return "sparse top-k decode is not part of the torch comparison"
    if p.cache != "bf16":
        return f"{p.cache} cache: the torch comparison runs on the bf16 cache only"
    if p.seqlen_max <= 0 or p.seqlen_mean != p.seqlen_max:
        return "variable or zero sequence lengths: the torch comparison uses uniform lengths"
    if p.s_q > p.seqlen_max:
        return "s_q > s_k"
    return None


def attended_pairs(p: Point) -> int:
    """(query, key) pairs of one sequence, causal-aware: as the suite's attention_traffic()."""
    L = p.seqlen_max
    if not p.causal:
        return p.s_q * L
    return sum(max(min(L - p.s_q + s, L - 1) + 1, 0) for s in range(p.s_q))


def cost_model(p: Point, variant: str) -> tuple[float, float]:
    """(bytes, FLOPs) of one call: each input read once, each output written once."""
    rows = p.batch * p.s_q * p.heads
    tokens = p.batch * p.seqlen_max
    pairs = p.batch * attended_pairs(p)
    if variant == "torch_absorbed_einsum":
        # Identical to mla_cost_model (core/src/kernel.cpp) with bf16 output: q, the latent
        # cache read once (1152 B/token), out, and 4 B of lse per row (torch writes none, but the
        # same model keeps the rows comparable with the CUDA kernels' rows byte for byte).
        return (rows * D_QK * 2 + tokens * (D_QK * 2) + rows * D_V * 2 + rows * 4,
                2.0 * pairs * p.heads * (D_QK + D_V))
    if variant == "torch_sdpa_latent":
        # Identical to cuda_naive_mha_cublas's model: per-head K (576) and V (512) per token.
        return (rows * D_QK * 2 + tokens * p.heads * (D_QK + D_V) * 2 + rows * D_V * 2 + rows * 4,
                2.0 * pairs * p.heads * (D_QK + D_V))
    if variant == "torch_sdpa_mha":
        dk = D_NOPE + D_ROPE
        return (rows * dk * 2 + tokens * p.heads * (dk + D_V_MHA) * 2 + rows * D_V_MHA * 2,
                2.0 * pairs * p.heads * (dk + D_V_MHA))
    raise UsageError(f"unknown variant {variant!r} (expected one of {', '.join(VARIANTS)})")


def device_bytes(p: Point, variant: str) -> int:
    """Bytes of GPU memory the variant's inputs, intermediates and output take."""
    b, s, h, L = p.batch, p.s_q, p.heads, p.seqlen_max
    scores = b * s * h * L * (4 + 2 + 2)          # fp32 softmax input/output + bf16 copies
    if variant == "torch_absorbed_einsum":
        return b * s * h * D_QK * 2 + b * L * D_QK * 2 + scores + b * s * h * D_V * 2
    if variant == "torch_sdpa_latent":
        return b * s * h * D_QK * 2 + b * h * L * (D_QK + D_V) * 2 + scores + b * s * h * D_V * 2
    if variant == "torch_sdpa_mha":
        return b * s * h * 192 * 2 + b * h * L * (192 + D_V_MHA) * 2 + scores + b * s * h * D_V_MHA * 2
    raise UsageError(f"unknown variant {variant!r}")


def point_json(p: Point) -> dict[str, Any]:
    """An mla_points entry with the fields mla-bench writes (those this table knows)."""
    return {"axis": p.axis, "why": "", "scaled_from": "", "batch": p.batch, "s_q": p.s_q,
            "heads": p.heads, "page_size": p.page_size, "topk": p.topk, "cache_format": p.cache,
            "scale_fmt": "", "seqlen_max": p.seqlen_max, "seqlen_mean": p.seqlen_mean,
            "total_tokens": p.batch * p.seqlen_max}


def rows_for(run_name: str, rep_times_s: list[float], iterations: list[int], bytes_: float, flops: float,
             queries: int, label: str, extra: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """Google Benchmark rows, one per repetition (run_type "iteration"), times in ms per iteration."""
    out = []
    for i, (t, n) in enumerate(zip(rep_times_s, iterations)):
        row: dict[str, Any] = {
            "name": run_name, "family_index": 0, "per_family_instance_index": 0,
            "run_name": run_name, "run_type": "iteration", "repetitions": len(rep_times_s),
            "repetition_index": i, "threads": 1, "iterations": n,
            "real_time": t * 1e3, "cpu_time": t * 1e3, "time_unit": "ms",
        }
        if bytes_:
            row["bytes_per_second"] = bytes_ / t
        if queries:
            row["items_per_second"] = queries / t
        if flops:
            row["flop_per_second"] = flops / t
        if bytes_ or flops:
            row.update({"model_bytes": bytes_, "model_flops": flops,
                        "ai_flop_per_byte": flops / bytes_ if bytes_ else 0.0, "cold_cache": 1.0})
        row.update(extra or {})
        row["label"] = label
        out.append(row)
    return out


def error_row(run_name: str, message: str) -> dict[str, Any]:
    return {"name": run_name, "family_index": 0, "per_family_instance_index": 0, "run_name": run_name,
            "run_type": "iteration", "repetitions": 1, "repetition_index": 0, "threads": 1,
            "iterations": 0, "real_time": 0, "cpu_time": 0, "time_unit": "ms",
            "error_occurred": True, "error_message": message}


def kernel_json(name: str, roof_bw: str, roof_peak: str) -> dict[str, Any]:
    descr = {
        "torch_absorbed_einsum": "PyTorch einsum: DeepSeek's absorbed MLA decode on contiguous latent + rope caches, "
                                 "fp32 softmax",
        "torch_sdpa_mha": "PyTorch SDPA (default dispatcher) on a decompressed per-head cache: K 192, V 128 per head",
        "torch_sdpa_latent": "PyTorch SDPA (default dispatcher) on per-head copies of the latent: K 576, V 512",
    }[name]
    return {"name": name, "backend": "torch", "description": descr, "out_dtype": "bf16", "unavailable": "",
            "roof_bw": roof_bw, "roof_peak": roof_peak}


def base_context(extra: dict[str, str]) -> dict[str, Any]:
    ctx: dict[str, Any] = {
        "date": datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds"),
        "host_name": platform.node(), "executable": os.path.abspath(__file__),
        "num_cpus": os.cpu_count() or 0, "mhz_per_cpu": 0, "cpu_scaling_enabled": False,
        "caches": [], "library_build_type": "release",
        "mla_bench_format": "1", "mla_cpu_model": cpu_model(), "mla_threads": "1",
        "mla_tier": "explicit points",
    }
    ctx.update(extra)
    return ctx


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ctx_json(ctx: dict[str, Any], key: str, default):
    raw = ctx.get(key)
    if raw is None:
        return default
    return raw if isinstance(raw, (dict, list)) else json.loads(raw)


def merge(gpu_doc: dict[str, Any], torch_doc: dict[str, Any]) -> dict[str, Any]:
    """The mla-bench document with the torch rows appended and its context extended: torch
    kernels added to mla_kernels (judged against the GPU bench's ceilings, same device), torch
    ceilings and unknown points added. The GPU bench's own entries win where both have one."""
    gctx, tctx = dict(gpu_doc["context"]), torch_doc["context"]
    ceilings = _ctx_json(gctx, "mla_ceilings", {})
    for k, v in _ctx_json(tctx, "mla_ceilings", {}).items():
        ceilings.setdefault(k, v)
    roof_bw = "gpu_read_bw" if "gpu_read_bw" in ceilings else "torch_read_bw"
    roof_peak = "gpu_gemm_bf16" if "gpu_gemm_bf16" in ceilings else "torch_gemm_bf16"
    kernels = _ctx_json(gctx, "mla_kernels", [])
    names = {k["name"] for k in kernels}
    for k in _ctx_json(tctx, "mla_kernels", []):
        if k["name"] not in names:
            kernels.append({**k, "roof_bw": roof_bw, "roof_peak": roof_peak})
    points = _ctx_json(gctx, "mla_points", {})
    for k, v in _ctx_json(tctx, "mla_points", {}).items():
        points.setdefault(k, v)
    gctx["mla_ceilings"] = json.dumps(ceilings)
    gctx["mla_kernels"] = json.dumps(kernels)
    gctx["mla_points"] = json.dumps(points)
    for k, v in tctx.items():
        if k.startswith("mla_torch") and k not in gctx:
            gctx[k] = v
    merged = {"context": gctx, "benchmarks": list(gpu_doc["benchmarks"]) + list(torch_doc["benchmarks"])}
    if "mla_run" in gpu_doc:  # a partial GPU run stays marked as one
        merged = {"mla_run": gpu_doc["mla_run"], **merged}
    return merged


# ---- the GPU part (torch imported only here) -----------------------------------------------------

class NoGpu(RuntimeError):
    pass


def import_torch():
    try:
        import torch  # noqa: PLC0415
    except Exception as e:  # an image without torch, or a broken install
        raise NoGpu(f"PyTorch is not importable ({type(e).__name__}: {e})") from e
    if not torch.cuda.is_available():
        why = f"torch {torch.__version__} (CUDA build {torch.version.cuda}) reports no CUDA device"
        raise NoGpu(why)
    return torch


class Timer:
    """CUDA events around each call on the current stream, an L2 flush enqueued before each.

    The flush reads (a sum over) a buffer four times the L2 instead of writing it: L2 is
    write-back, so a fill_() left an L2 of dirty lines whose write-back then counted inside the
    timed call; lines brought in by loads are clean (suites/device/README.md, "L2 flush")."""

    def __init__(self, torch, flush: bool):
        self.torch = torch
        props = torch.cuda.get_device_properties(0)
        l2 = int(getattr(props, "L2_cache_size", 0) or 0) or (64 << 20)
        self.flush_bytes = max(4 * l2, 64 << 20) if flush else 0
        self.buf = torch.zeros(self.flush_bytes // 4, dtype=torch.int32, device="cuda") if flush else None
        self.start = torch.cuda.Event(enable_timing=True)
        self.stop = torch.cuda.Event(enable_timing=True)
        if self.buf is not None:  # the zero-fill's dirty lines are written back here, untimed
            self.buf.sum()
            torch.cuda.synchronize()

    def flush_method(self) -> str:
        if self.buf is None:
            return "no L2 flush (warm L2)"
        return (f"read-only L2 flush: torch int32 sum over {self.flush_bytes >> 20} MiB (4x the L2) before each "
                "call, untimed; L2 left holding clean lines only")

    def once(self, fn) -> float:
        if self.buf is not None:
            self.buf.sum()  # reads every line of the buffer; the only write is the 8-byte result
        self.start.record()
        fn()
        self.stop.record()
        self.stop.synchronize()
        return self.start.elapsed_time(self.stop) * 1e-3

    def measure(self, fn, warmup: int, reps: int, min_rep_s: float) -> tuple[list[float], list[int]]:
        """Per repetition: mean seconds per call over enough calls to last min_rep_s (at least 3)."""
        for _ in range(warmup):
            self.once(fn)
        first = self.once(fn)
        n = max(3, min(200, math.ceil(min_rep_s / max(first, 1e-6))))
        times, iters = [], []
        for _ in range(reps):
            total = sum(self.once(fn) for _ in range(n))
            times.append(total / n)
            iters.append(n)
        return times, iters


def v3_softmax_scale() -> float:
    """DeepSeek-V3's softmax scale (YaRN on, mscale 1.0: docs/field.md, "Upstream semantics"), as
    the Python reference defines it (mla_ref.config), not a copy of its digits. Imported with the
    GPU part, not with the module: the reference needs numpy, the usage checks and the no-GPU
    exit do not."""
    try:
        from mla_ref import config  # noqa: PLC0415
    except Exception as e:
        raise RuntimeError(f"the Python reference's config (mla_ref.config) is not importable "
                           f"({type(e).__name__}: {e})") from e
    return config.preset("v3").softmax_scale


def make_case(torch, p: Point, variant: str, gen, scale: float):
    """Inputs on the GPU (normal values, never zeros) and the call to time; `scale` is the
    softmax scale (v3_softmax_scale())."""
    F = torch.nn.functional
    b, s, h, L = p.batch, p.s_q, p.heads, p.seqlen_max
    bf16 = torch.bfloat16
    dev = "cuda"

    def randn(*shape):  # bf16 directly: a float32 temporary would double the peak memory
        return torch.randn(*shape, generator=gen, device=dev, dtype=bf16)

    # Bottom-right causal mask for s_q > 1: query i sees keys 0 .. L - s + i.
    mask_bool = None
    if p.causal and s > 1:
        qi = torch.arange(s, device=dev).view(s, 1)
        kj = torch.arange(L, device=dev).view(1, L)
        mask_bool = kj <= (L - s + qi)
    if variant == "torch_absorbed_einsum":
        q_lat, q_pe = randn(b, s, h, D_LATENT), randn(b, s, h, D_ROPE)
        kv, pe = randn(b, L, D_LATENT), randn(b, L, D_ROPE)
        neg = None
        if mask_bool is not None:
            neg = torch.zeros(s, L, device=dev, dtype=torch.float32).masked_fill(~mask_bool, float("-inf"))
            neg = neg.view(1, s, 1, L)

        def call():
            scores = (torch.einsum("bshc,btc->bsht", q_lat, kv) +
                      torch.einsum("bshr,btr->bsht", q_pe, pe)) * scale
            if neg is not None:
                scores = scores + neg
            probs = scores.softmax(dim=-1, dtype=torch.float32).to(bf16)
            return torch.einsum("bsht,btc->bshc", probs, kv)
        return call, "einsum in bf16 (fp32 accumulate), softmax fp32"

    dk, dv = (D_QK, D_V) if variant == "torch_sdpa_latent" else (D_NOPE + D_ROPE, D_V_MHA)
    q, k, v = randn(b, h, s, dk), randn(b, h, L, dk), randn(b, h, L, dv)
    attn_mask = None
    if mask_bool is not None:
        try:
            from torch.nn.attention.bias import causal_lower_right  # noqa: PLC0415  (torch >= 2.2)
            attn_mask = causal_lower_right(s, L)
        except ImportError:
            attn_mask = mask_bool

    def call():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)
    return call, "SDPA default dispatcher; eligible backends: " + sdpa_backends(torch, call)


def sdpa_backends(torch, call) -> str:
    """Which SDPA backends accept this call (the dispatcher picks among them by its own priority)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415  (torch >= 2.3)
    except ImportError:
        return "unknown (torch < 2.3)"
    ok = []
    for name in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        be = getattr(SDPBackend, name, None)
        if be is None:
            continue
        try:
            with sdpa_kernel(be):
                call()
            torch.cuda.synchronize()
            ok.append(name.lower())
        except RuntimeError:
            torch.cuda.synchronize()
    return ",".join(ok) or "none"


def torch_ceilings(torch, timer: Timer, gib: float = 2.0, gemm_n: int = 8192) -> list[dict[str, Any]]:
    """Cross-checks of the C++ ceilings through torch: a bf16 sum (read), a copy (read + write,
    both counted), a bf16 matmul (2n^3)."""
    n = int(gib * (1 << 30)) // 2
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    a = torch.randn(gemm_n, gemm_n, device="cuda", dtype=torch.bfloat16)
    bm = torch.randn(gemm_n, gemm_n, device="cuda", dtype=torch.bfloat16)
    out = []
    for key, unit, amount, fn, how in (
        ("torch_read_bw", "B/s", 2.0 * n, lambda: x.sum(dtype=torch.float32), f"torch bf16 sum of {gib:g} GiB"),
        ("torch_copy_bw", "B/s", 4.0 * n, lambda: y.copy_(x), f"torch copy_ of {gib:g} GiB; read + write"),
        ("torch_gemm_bf16", "FLOP/s", 2.0 * gemm_n ** 3, lambda: a @ bm, f"torch bf16 matmul {gemm_n}^3"),
    ):
        times, iters = timer.measure(fn, warmup=3, reps=5, min_rep_s=0.02)
        out.append({"key": key, "unit": unit, "amount": amount, "times": times, "iters": iters,
                    "value": amount / min(times), "method": how + "; best of 5 repetitions, CUDA events"})
    del x, y, a, bm
    torch.cuda.empty_cache()
    return out


def select(args: argparse.Namespace) -> tuple[list[Point], list[str]]:
    """The points and variants asked for (pure: usage errors surface before torch is imported)."""
    points = list(DEFAULT_POINTS)
    if args.points_tsv:
        with open(args.points_tsv) as f:
            points = parse_points_tsv(f.read())
    if args.points:
        wanted = args.points.split(",")
        unknown = [w for w in wanted if w not in {p.name for p in points}]
        if unknown:
            raise UsageError(f"unknown points {', '.join(unknown)} (not in the table)")
        points = [p for p in points if p.name in wanted]
    variants = args.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            raise UsageError(f"unknown variant {v!r} (expected one of {', '.join(VARIANTS)})")
    return points, variants


def run(args: argparse.Namespace) -> dict[str, Any]:
    points, variants = select(args)
    torch = import_torch()
    scale = v3_softmax_scale()
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cuda")
    gen.manual_seed(20251130)
    timer = Timer(torch, flush=not args.no_flush)
    props = torch.cuda.get_device_properties(0)
    t0 = time.time()
    ceil = torch_ceilings(torch, timer)
    rows: list[dict[str, Any]] = []
    for c in ceil:
        rows += rows_for(f"ceiling/{c['key']}/manual_time", c["times"], c["iters"],
                         c["amount"] if c["unit"] == "B/s" else 0.0,
                         c["amount"] if c["unit"] == "FLOP/s" else 0.0, 0, c["method"])
    print(f"[torch] ceilings in {time.time() - t0:.1f} s: " +
          ", ".join(f"{c['key']} {c['value']:.4g} {c['unit']}" for c in ceil), file=sys.stderr)
    free_limit = args.max_gib * (1 << 30)
    for p in points:
        for v in variants:
            name = f"mla/{v}/{p.name}/manual_time"  # Google Benchmark's name for a manual-time row
            why = unsupported(p)
            if why is None and device_bytes(p, v) > free_limit:
                why = (f"too large: {device_bytes(p, v) / (1 << 30):.1f} GiB of GPU memory > --max-gib "
                       f"{args.max_gib:g}")
            if why:
                rows.append(error_row(name, "unsupported: " + why))
                continue
            try:
                call, how = make_case(torch, p, v, gen, scale)
                times, iters = timer.measure(call, args.warmup, args.reps, args.min_rep_s)
            except Exception as e:  # an OOM or a backend refusal is a row, not the end of the run
                rows.append(error_row(name, f"error: {type(e).__name__}: {str(e).splitlines()[0][:300]}"))
                call = None
                torch.cuda.empty_cache()
                continue
            del call
            torch.cuda.empty_cache()
            bytes_, flops = cost_model(p, v)
            label = f"{how}; CUDA events; L2 flushed" if not args.no_flush else f"{how}; CUDA events; warm L2"
            rows += rows_for(name, times, iters, bytes_, flops, p.batch * p.s_q, label,
                             {"event_timed": 1.0, "cold_cache": 0.0 if args.no_flush else 1.0})
            med = statistics.median(times)
            print(f"[torch] {name}: {med * 1e3:.3f} ms, {bytes_ / med / 1e9:.0f} GB/s, "
                  f"{flops / med / 1e12:.1f} TFLOP/s", file=sys.stderr)
    ceilings = {c["key"]: {"value": c["value"], "unit": c["unit"], "method": c["method"]} for c in ceil}
    ctx = base_context({
        "mla_gpu_name": props.name,
        "mla_torch_version": torch.__version__,
        "mla_torch_cuda": str(torch.version.cuda),
        "mla_torch_gpu": json.dumps({"name": props.name, "sm_count": props.multi_processor_count,
                                     "memory_bytes": props.total_memory,
                                     "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0),
                                     "compute_capability": f"{props.major}.{props.minor}"}),
        "mla_torch_timing": "CUDA events around each call on the current stream; "
                            f"{timer.flush_method()}; {args.warmup} warm-ups; each repetition the mean of >= 3 calls",
        "mla_torch_l2_flush": timer.flush_method(),
        "mla_ceilings": json.dumps(ceilings),
        "mla_points": json.dumps({p.name: point_json(p) for p in points}),
        "mla_kernels": json.dumps([kernel_json(v, "torch_read_bw", "torch_gemm_bf16") for v in variants]),
    })
    return {"context": ctx, "benchmarks": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="Google Benchmark JSON to write")
    ap.add_argument("--points-tsv", help="`mla-bench --mla_list_points` output (default: the device check's points)")
    ap.add_argument("--points", help="only these point names (comma-separated)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5, help="repetitions (rows) per case")
    ap.add_argument("--min-rep-s", type=float, default=0.02, help="seconds of calls per repetition")
    ap.add_argument("--no-flush", action="store_true", help="no L2 flush between calls")
    ap.add_argument("--max-gib", type=float, default=48.0, help="skip cases needing more GPU memory")
    ap.add_argument("--merge-with", help="mla-bench JSON of the same device to merge into")
    ap.add_argument("--merged-out", help="where the merged JSON goes (with --merge-with)")
    args = ap.parse_args(argv)
    if bool(args.merge_with) != bool(args.merged_out):
        ap.error("--merge-with and --merged-out go together")
    if args.reps < 1 or args.warmup < 0:
        ap.error("--reps must be >= 1 and --warmup >= 0")
    try:
        doc = run(args)
    except NoGpu as e:
        print(f"torch_side_by_side: skipped: {e}; nothing was timed", file=sys.stderr)
        return EXIT_NO_GPU
    except UsageError as e:
        print(f"torch_side_by_side: {e}", file=sys.stderr)
        return 2
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"torch_side_by_side: wrote {args.out} ({len(doc['benchmarks'])} rows)", file=sys.stderr)
    if args.merge_with:
        # A partial GPU run (stopped by a timeout, or a file cut off mid-write) is merged as far
        # as it got and stays marked partial; only an unreadable file is an error.
        try:
            gpu_doc, complete, note = benchjson.read_doc(args.merge_with)
        except benchjson.BenchFileError as e:
            print(f"torch_side_by_side: cannot merge: {e}", file=sys.stderr)
            return 1
        if not complete:
            gpu_doc = {**gpu_doc, "mla_run": {**gpu_doc.get("mla_run", {}), "complete": False, "note": note}}
            print(f"torch_side_by_side: {args.merge_with} is a partial run ({note}); merged as such", file=sys.stderr)
        with open(args.merged_out, "w") as f:
            json.dump(merge(gpu_doc, doc), f, indent=1)
        print(f"torch_side_by_side: merged into {args.merged_out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
