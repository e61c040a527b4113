"""vLLM's and FlashInfer's merge adapters over their CPU stand-ins, called as the certifier calls
them (lse into each one's base and layout, back to natural [h, n]), against the Python
reference's float64 merge (mla_ref.merge) on states with every kind of empty side (+inf, -inf,
both) and lse far apart; each stand-in bug is caught; the declarations are in the host's words;
without the library the kernel is unavailable with the reason."""
import importlib.util
import math
import os
import sys

import numpy as np
import pytest
import torch

import golden_cases as gc
import merge_cpu
import mla_door
from mla_door.adapters import merge_states

sys.path.insert(0, os.path.join(gc.ROOT, "reference", "python"))
from mla_ref import merge as ref  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def states(seed, n=6, h=3, d=16, dtype="bf16"):
    """Row 0: a empty (+inf, NaN out); row 1: b empty (-inf); row 2: both empty; row 3: lse 1000
    apart around 500; the rest finite."""
    g = torch.Generator().manual_seed(seed)
    out_a = torch.randn(n, h, d, generator=g).to(DTYPES[dtype])
    out_b = torch.randn(n, h, d, generator=g).to(DTYPES[dtype])
    lse_a = torch.randn(h, n, generator=g) * 3
    lse_b = torch.randn(h, n, generator=g) * 3
    lse_a[:, 0], out_a[0] = math.inf, math.nan
    lse_b[:, 1] = -math.inf
    lse_a[:, 2], lse_b[:, 2] = -math.inf, math.inf
    lse_a[:, 3], lse_b[:, 3] = 1000.0, 0.0
    return out_a, lse_a, out_b, lse_b


def call_as_host(kernel, out_a, lse_a, out_b, lse_b):
    m = kernel.merge
    c = m.conventions
    n, h, d = out_a.shape

    def to_kernel(l):
        l = l / math.log(2.0) if c.lse_base == "2" else l.clone()
        return l.t().contiguous() if c.lse_layout == "[n,h]" else l

    out = torch.full_like(out_a, math.nan)
    lse = torch.full((n, h) if c.lse_layout == "[n,h]" else (h, n), math.nan)
    call = mla_door.MergeCall(tokens=n, heads=h, head_dim=d, dtype={v: k for k, v in DTYPES.items()}[out_a.dtype])
    m.merge(out_a, to_kernel(lse_a), out_b, to_kernel(lse_b), out, lse, call)
    l = lse.double().t() if c.lse_layout == "[n,h]" else lse.double()
    if c.lse_base == "2":
        l = l * math.log(2.0)
    return out.double().numpy(), l.numpy()


def matches(out, lse, out_a, lse_a, out_b, lse_b):
    t_out, t_lse = ref.merge_states(out_a.double().numpy(), lse_a.double().numpy(), out_b.double().numpy(),
                                    lse_b.double().numpy())
    if np.isnan(out).any() or np.isnan(lse).any() or not np.array_equal(np.isinf(lse), np.isinf(t_lse)):
        return False
    fin = np.isfinite(t_lse)
    return bool(np.allclose(out, t_out, atol=2e-2, rtol=2e-2) and np.allclose(lse[fin], t_lse[fin], rtol=1e-5, atol=1e-4))


@pytest.mark.parametrize("kernel", [merge_cpu.VLLM, merge_cpu.FLASHINFER], ids=lambda k: k.name)
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_adapter_over_the_standin_matches_the_float64_reference(kernel, dtype):
    s = states(7, dtype=dtype)
    assert matches(*call_as_host(kernel, *s), *s)


@pytest.mark.parametrize("kernel", [merge_cpu.BUG_BOTH_EMPTY_NAN, merge_cpu.BUG_POS_INF_AS_NUMBER,
                                    merge_cpu.BUG_NATURAL_EXP], ids=lambda k: k.name)
def test_each_standin_bug_is_caught(kernel):
    s = states(8)
    assert not matches(*call_as_host(kernel, *s), *s)


def test_declarations_are_in_the_hosts_words():
    names = set()
    for attr in ("VLLM", "FLASHINFER", "BUG_BOTH_EMPTY_NAN", "BUG_POS_INF_AS_NUMBER", "BUG_NATURAL_EXP"):
        k = getattr(merge_cpu, attr)
        d = mla_door.describe(k)
        assert d["decode"] is False and d["prefill"] is None and d["merge"]["name"] == k.name
        c = d["merge"]["conventions"]
        assert c["lse_base"] in ("e", "2") and c["lse_layout"] in ("[h,n]", "[n,h]") and c["both_empty_lse"] == "-inf"
        assert set(d["merge"]["dtypes"]) <= {"bf16", "f16", "f32"}
        assert k.unavailable() is None
        names.add(k.name)
    assert len(names) == 5
    assert mla_door.describe(merge_cpu.FLASHINFER)["merge"]["conventions"] == \
        {"lse_base": "2", "lse_layout": "[n,h]", "both_empty_lse": "-inf"}


@pytest.mark.parametrize("make,module", [(merge_states.vllm, "vllm"), (merge_states.flashinfer, "flashinfer")])
def test_without_the_library_every_case_is_skipped_with_the_reason(make, module):
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here: the device check certifies it")
    k = make()
    why = k.unavailable()
    assert why and module in why and "does not import" in why
    assert k.backend == "cuda"
