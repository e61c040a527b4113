"""Golden attention cases as the door hands them to a decode, and the suite's judgement of a
result, for the tests of the Python kernels (fixtures/SCHEMA.md is the contract).

Nothing of the judge is restated here: a result is written to a file and judged by `mla judge`,
the certifier's own judge with the one tolerance table, so a Python test and a certificate cannot
disagree about a result."""
from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Optional

import h5py
import numpy as np
import torch

import mla_door

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
GOLDENS = os.path.join(ROOT, "fixtures", "goldens")


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
        return Case(
            name=f"{family}/{name}",
            q=_bf16(inp["q"][...]),
            kv_cache=torch.from_numpy(np.ascontiguousarray(cache)),
            block_table=torch.from_numpy(inp["block_table"][...]),
            cache_seqlens=torch.from_numpy(inp["cache_seqlens"][...]),
            indices=torch.from_numpy(inp["indices"][...]) if topk > 0 else None,
            call=mla_door.Call(softmax_scale=float(a["softmax_scale"]), **shape))


def _mla() -> str:
    exe = os.environ.get("MLA_CLI_EXE", "")
    if not exe or not os.access(exe, os.X_OK):
        raise RuntimeError(f"MLA_CLI_EXE={exe!r}: these tests judge through the suite's `mla judge`; set MLA_CLI_EXE "
                           "to the built mla executable (ctest sets it)")
    return exe


_STORED = {"f32": (torch.float32, "float32"), "bf16": (torch.bfloat16, "bfloat16"), "f64": (torch.float64, "float64")}


def judgement(case: Case, out: torch.Tensor, lse: torch.Tensor, out_dtype: str) -> dict:
    """`mla judge` on (out, lse [b,h,s_q] natural, +inf empty) of an implementation that declares
    `out_dtype` and no operand precision: the certifier's judge, its table entry choice and its
    rules, verdict and measurements as JSON. out is stored in `out_dtype`, as the implementation
    wrote it; a value that dtype cannot hold is refused here rather than rounded into a pass."""
    dt, word = _STORED[out_dtype]
    given = out.detach().cpu().double()
    stored = out.detach().cpu().to(dt)
    back = stored.double()
    if not bool(((back == given) | (back.isnan() & given.isnan())).all()):
        raise ValueError(f"{case.name}: out holds values that are not {out_dtype}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "result.h5")
        with h5py.File(path, "w") as f:
            data = stored.view(torch.int16).numpy().view(np.uint16) if dt == torch.bfloat16 else stored.numpy()
            f.create_dataset("out", data=data).attrs["dtype"] = word
            # float32 holds every narrower lse exactly; a float64 one is kept as it is.
            wide = lse.dtype == torch.float64
            l_np = lse.detach().cpu().to(torch.float64 if wide else torch.float32).numpy()
            f.create_dataset("lse", data=l_np).attrs["dtype"] = "float64" if wide else "float32"
        p = subprocess.run([_mla(), "judge", "--goldens", GOLDENS, "--case", case.name, "--result", path,
                            "--out-dtype", out_dtype], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"mla judge {case.name} exited {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def judge_result(case: Case, out: torch.Tensor, lse: torch.Tensor, out_dtype: str) -> list:
    """Every failure of (out, lse) against the case's truth, in the judge's words (empty: PASS)."""
    j = judgement(case, out, lse, out_dtype)
    assert (j["verdict"] == "PASS") == (not j["reasons"]), j
    return j["reasons"]


def empty_outputs(case: Case, out_dtype: str, lse_layout: str = "[b,h,s_q]"):
    """out and lse filled with NaN, so that an element a kernel does not write is caught."""
    b, s_q, h = case.call.batch, case.call.s_q, case.call.heads
    dt = torch.float32 if out_dtype == "f32" else torch.bfloat16
    out = torch.full((b, s_q, h, mla_door.D_V), math.nan, dtype=dt)
    shape = (b, h, s_q) if lse_layout == "[b,h,s_q]" else (b, s_q, h)
    return out, torch.full(shape, math.nan, dtype=torch.float32)
