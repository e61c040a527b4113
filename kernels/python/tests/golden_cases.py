"""Golden attention cases as the door hands them to a decode, and the suite's judgement of a
result, for the tests of the Python kernels (fixtures/SCHEMA.md is the contract).

The bounds are not restated here: they are read from the one tolerance table,
core/src/tolerance_table.cpp, by entry name, so a change there moves these tests too."""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Optional

import h5py
import numpy as np
import torch

import mla_door

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
GOLDENS = os.path.join(ROOT, "fixtures", "goldens")
TABLE = os.path.join(ROOT, "core", "src", "tolerance_table.cpp")


def _bf16(bits: np.ndarray) -> torch.Tensor:
    """uint16 bf16 bit patterns -> torch.bfloat16 of the same shape."""
    return torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).view(torch.bfloat16)


@dataclass
class Case:
    name: str
    q: torch.Tensor              # bf16 [b, s_q, h, 576]
    kv_cache: torch.Tensor       # uint8 [nb, ps, 1152 | 656]
    block_table: torch.Tensor    # int32 [b, mb]
    cache_seqlens: torch.Tensor  # int32 [b]
    indices: Optional[torch.Tensor]   # int32 [b, s_q, topk] positions, or None
    call: mla_door.Call
    truth_out: np.ndarray        # f64 [b, s_q, h, 512]
    truth_lse: np.ndarray        # f64 [b, h, s_q]
    same_dtype_out: np.ndarray   # f64 (from bf16) [b, s_q, h, 512]
    same_dtype_lse: np.ndarray   # f64 (from f32) [b, h, s_q]


def load(family: str, name: str) -> Case:
    with h5py.File(os.path.join(GOLDENS, family + ".h5"), "r") as f:
        c = f["cases/" + name]
        a = c.attrs
        if int(a["inputs_stored"]) != 1:
            raise ValueError(f"{family}/{name}: generated inputs; these tests read stored cases only")
        fmt = a["cache_format"]
        inp = c["inputs"]
        cache = inp["kv_cache"][...]
        if fmt == "bf16":
            cache = np.ascontiguousarray(cache).view(np.uint8).reshape(cache.shape[0], cache.shape[1], -1)
        topk = int(a["topk"])
        shape = dict(batch=int(a["batch"]), s_q=int(a["s_q"]), heads=int(a["heads"]),
                     d_qk=int(a["d_qk"]), d_v=int(a["d_v"]), page_size=int(a["page_size"]),
                     num_blocks=int(a["num_blocks"]), max_blocks=int(a["max_blocks"]), topk=topk,
                     cache_format=str(fmt), causal=bool(int(a["causal"])),
                     scale_fmt=str(a["scale_fmt"]) if fmt == "fp8" else "")
        sd_out = inp.parent["same_dtype/out"][...]
        return Case(
            name=f"{family}/{name}",
            q=_bf16(inp["q"][...]),
            kv_cache=torch.from_numpy(np.ascontiguousarray(cache)),
            block_table=torch.from_numpy(inp["block_table"][...]),
            cache_seqlens=torch.from_numpy(inp["cache_seqlens"][...]),
            indices=torch.from_numpy(inp["indices"][...]) if topk > 0 else None,
            call=mla_door.Call(softmax_scale=float(a["softmax_scale"]), **shape),
            truth_out=c["truth/out"][...], truth_lse=c["truth/lse"][...],
            same_dtype_out=_bf16(sd_out).double().numpy(),
            same_dtype_lse=c["same_dtype/lse"][...].astype(np.float64))


def tolerance(name: str) -> dict:
    """Entry `name` of core/src/tolerance_table.cpp: its numeric fields, evaluated."""
    src = open(TABLE, encoding="utf-8").read()
    consts = {}
    for m in re.finditer(r"constexpr double (k\w+) = ([^;]+);", src):
        expr = m.group(2).replace("std::numeric_limits<double>::infinity()", "inf")
        consts[m.group(1)] = eval(expr, {"__builtins__": {}}, dict(consts, inf=math.inf))
    m = re.search(r'add\(\{\.name = "' + re.escape(name) + r'",(.*?)\}\);', src, re.S)
    if m is None:
        raise KeyError(f"no tolerance {name} in {TABLE}")
    body = re.sub(r'"(?:[^"\\]|\\.)*"', '""', m.group(1))          # the reasons' text out
    fields = {k: eval(v, {"__builtins__": {}}, dict(consts))
              for k, v in re.findall(r"\.(\w+) = ([^,}]+)", body) if k != "why"}
    base = dict(atol=0.0, rtol=0.0, cos_diff=0.0, ratio_k=0.0, ratio_floor=0.0,
                ratio_floor_rel=0.0, atol_rel_max=0.0)
    base.update({k: float(v) for k, v in fields.items()})
    return base


def judge(what: str, got: np.ndarray, truth: np.ndarray, same_dtype: np.ndarray, tol: dict) -> list:
    """The suite's rules (core/include/mla/core/tolerance.hpp): equal shapes and non-finite
    masks, every finite element within atol or rtol, cosine difference, error ratio. Returns the
    list of failures (empty: inside every bound)."""
    fails = []
    if got.shape != truth.shape:
        return [f"{what}: shape {got.shape} != {truth.shape}"]
    for mask_name, fn in (("nan", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        if not np.array_equal(fn(got), fn(truth)):
            fails.append(f"{what}: {mask_name} positions differ")
    fin = np.isfinite(truth) & np.isfinite(got)
    t, g = truth[fin], got[fin]
    if t.size == 0:
        return fails
    mx = float(np.abs(t).max())
    atol = max(tol["atol"], tol["atol_rel_max"] * mx)
    d = np.abs(g - t)
    bad = ~((d <= atol) | (d <= tol["rtol"] * np.abs(t)))
    if bad.any():
        fails.append(f"{what}: {int(bad.sum())} of {t.size} elements outside atol {atol:.3g} / "
                     f"rtol {tol['rtol']:.3g} (worst abs err {float(d.max()):.3g})")
    den = float(np.sum(g * g + t * t))
    if den > 0:
        cos = 1.0 - 2.0 * float(np.sum(g * t)) / den
        if cos > tol["cos_diff"]:
            fails.append(f"{what}: cos diff {cos:.3g} > {tol['cos_diff']:.3g}")
    if tol["ratio_k"] > 0:
        ref_err = float(np.abs(same_dtype[fin] - t).max())
        bound = tol["ratio_k"] * ref_err + tol["ratio_floor"] + tol["ratio_floor_rel"] * mx
        if float(d.max()) > bound:
            fails.append(f"{what}: max err {float(d.max()):.3g} > ratio bound {bound:.3g}")
    return fails


def entries(out_dtype: str, cache_format: str) -> tuple:
    """The table entries (out, lse) of an f32-operand implementation with this output dtype:
    the class its output implies (core/include/mla/core/tolerance.hpp, tolerance_for)."""
    if out_dtype == "f32":
        return "attn.out.f32", "attn.lse.f32"
    kind = "bf16" if cache_format == "bf16" else "fp8"
    return f"attn.out.{kind}", f"attn.lse.{kind}"


def judge_result(case: Case, out: torch.Tensor, lse: torch.Tensor, out_dtype: str) -> list:
    """Every failure of (out, lse [b,h,s_q] natural, +inf empty) against the case's truth."""
    o_name, l_name = entries(out_dtype, case.call.cache_format)
    return (judge("out", out.double().numpy(), case.truth_out, case.same_dtype_out, tolerance(o_name)) +
            judge("lse", lse.double().numpy(), case.truth_lse, case.same_dtype_lse, tolerance(l_name)))


def empty_outputs(case: Case, out_dtype: str, lse_layout: str = "[b,h,s_q]"):
    """out and lse filled with NaN, so that an element a kernel does not write is caught."""
    b, s_q, h = case.call.batch, case.call.s_q, case.call.heads
    dt = torch.float32 if out_dtype == "f32" else torch.bfloat16
    out = torch.full((b, s_q, h, mla_door.D_V), math.nan, dtype=dt)
    shape = (b, h, s_q) if lse_layout == "[b,h,s_q]" else (b, s_q, h)
    return out, torch.full(shape, math.nan, dtype=torch.float32)
