"""The prefill adapters (FlashAttention's varlen forward, FlashInfer's ragged prefill) over their CPU
stand-ins, called as the certifier calls them (V padded to 192 for FlashAttention 2 and out cut
back; lse made canonical: natural log, [h, total_q], +inf for an empty row), against the Python
reference's float64 prefill (mla_ref.prefill) on generated ragged batches: chunked causal rows,
sequences with no key, a context chunk; each stand-in bug is caught; the declarations are in the
host's words; without the library the kernel is unavailable with the reason."""
import importlib.util
import math
import os
import sys

import numpy as np
import pytest
import torch

import golden_cases as gc
import flash_attn_cpu
import flashinfer_prefill_cpu
import mla_door
import standin_flash_attn
from mla_door.adapters import flash_attn, flashinfer_prefill

sys.path.insert(0, os.path.join(gc.ROOT, "reference", "python"))
from mla_ref import prefill as ref  # noqa: E402

# (s_q, s_k) per sequence: a chunk over a prefix, a sequence with more queries than keys (empty
# rows when causal), one with no key, a square one.
SEQS = [(5, 9), (4, 2), (3, 0), (6, 6)]


def generated(seed, h=3, seqs=SEQS):
    g = torch.Generator().manual_seed(seed)
    tq, tk = sum(s for s, _ in seqs), sum(k for _, k in seqs)
    q = torch.randn(tq, h, 192, generator=g).to(torch.bfloat16)
    k = torch.randn(tk, h, 192, generator=g).to(torch.bfloat16)
    v = torch.randn(tk, h, 128, generator=g).to(torch.bfloat16)
    cu_q = torch.tensor([0] + list(np.cumsum([s for s, _ in seqs])), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(np.cumsum([s for _, s in seqs])), dtype=torch.int32)
    return q, k, v, cu_q, cu_k


def call_as_host(kernel, q, k, v, cu_q, cu_k, causal, scale):
    """The certifier's side: V padded when declared, outputs made canonical (natural log,
    [h, total_q], +inf for an empty row, out 128 wide). The C++ host does this for real; this
    is the test's own reading of the declared conventions."""
    p = kernel.prefill
    conv = p.conventions
    tq, h = q.shape[0], q.shape[1]
    kv = torch.cat([v, torch.zeros(v.shape[0], h, 64, dtype=v.dtype)], dim=-1) if conv.v_padded else v
    out = torch.full((tq, h, kv.shape[-1]), float("nan"), dtype=torch.bfloat16 if p.out_dtype == "bf16" else torch.float32)
    lse = torch.full((h, tq) if conv.lse_layout == "[b,h,s_q]" else (tq, h), float("nan"))
    call = mla_door.PrefillCall(batch=len(cu_q) - 1, heads=h, total_q=tq, total_k=k.shape[0], d_qk=192,
                                d_v=kv.shape[-1], causal=causal, softmax_scale=scale)
    p.prefill(q, k, kv, cu_q, cu_k, out, lse, call)
    l = lse.double() if conv.lse_layout == "[b,h,s_q]" else lse.double().t()
    if conv.lse_base == "2":
        l = l * math.log(2.0)
    if conv.empty_row_lse == "-inf":
        l = torch.where(torch.isinf(l), torch.full_like(l, math.inf), l)
    return out[..., :128].double().numpy(), l.numpy()


def truth(q, k, v, cu_q, cu_k, causal, scale):
    return ref.prefill_attention(q.double().numpy(), k.double().numpy(), v.double().numpy(), cu_q.numpy(),
                                 cu_k.numpy(), causal, scale)


def within(out, lse, t_out, t_lse):
    """bf16 out against float64: inside a few bf16 ulps; lse (float32) close; infinities equal."""
    if not np.array_equal(np.isinf(lse), np.isinf(t_lse)):
        return False
    fin = np.isfinite(t_lse)
    return bool(np.allclose(out, t_out, atol=2e-2, rtol=2e-2) and np.allclose(lse[fin], t_lse[fin], atol=1e-4))


GREEN = [flash_attn_cpu.FA2, flash_attn_cpu.FA3, flashinfer_prefill_cpu.RAGGED]
RED = [flash_attn_cpu.BUG_TOP_LEFT, flash_attn_cpu.BUG_CU_SEQLENS, flashinfer_prefill_cpu.BUG_NATURAL_LSE]


@pytest.mark.parametrize("kernel", GREEN, ids=lambda k: k.name)
@pytest.mark.parametrize("causal", [True, False])
def test_adapter_over_the_standin_matches_the_float64_reference(kernel, causal):
    q, k, v, cu_q, cu_k = generated(3)
    scale = 192 ** -0.5 * 1.3
    out, lse = call_as_host(kernel, q, k, v, cu_q, cu_k, causal, scale)
    t_out, t_lse = truth(q, k, v, cu_q, cu_k, causal, scale)
    assert np.isinf(t_lse).any(), "the batch has rows that attend nothing"
    assert within(out, lse, t_out, t_lse)


@pytest.mark.parametrize("kernel", RED, ids=lambda k: k.name)
def test_each_standin_bug_is_caught(kernel):
    q, k, v, cu_q, cu_k = generated(4)
    out, lse = call_as_host(kernel, q, k, v, cu_q, cu_k, True, 192 ** -0.5)
    assert not within(out, lse, *truth(q, k, v, cu_q, cu_k, True, 192 ** -0.5))


def test_flashinfer_standin_keeps_the_plan_it_was_given():
    """run() works on the lengths plan() fixed, and refuses tensors that do not match them (as the
    library does), so the adapter must plan every call with the call's own batch."""
    q, k, v, cu_q, cu_k = generated(6)
    w = flashinfer_prefill_cpu.standin.library().BatchPrefillWithRaggedKVCacheWrapper(torch.empty(0))
    with pytest.raises(RuntimeError, match="before plan"):
        w.run(q, k, v)
    w.plan(cu_q[:-1], cu_k[:-1], 3, 3, 192, head_dim_vo=128, causal=True)
    with pytest.raises(ValueError, match="does not match qo_indptr"):
        w.run(q, k, v, return_lse=True)


def test_flash_attention_2_needs_v_as_wide_as_q():
    q, k, v, cu_q, cu_k = generated(5)
    with pytest.raises(RuntimeError, match="v's head dim"):
        standin_flash_attn.library(2).flash_attn_varlen_func(q, k, v, cu_q, cu_k, 6, 9, causal=True,
                                                             return_attn_probs=True)


def test_declarations_are_in_the_hosts_words():
    names = set()
    kernels = [getattr(flash_attn_cpu, a) for a in ("FA2", "FA3", "BUG_TOP_LEFT", "BUG_CU_SEQLENS", "FA3_DECLARED_PLUS_INF")]
    kernels += [flashinfer_prefill_cpu.RAGGED, flashinfer_prefill_cpu.BUG_NATURAL_LSE]
    for k in kernels:
        d = mla_door.describe(k)
        assert d["decode"] is False and d["prefill"]["name"] == k.name
        c = d["prefill"]["conventions"]
        assert c["lse_base"] in mla_door.LSE_BASES and c["lse_layout"] in mla_door.LSE_LAYOUTS
        assert c["empty_row_lse"] in mla_door.EMPTY_ROW_LSES
        assert c["causal_alignment"] == "bottom_right"
        assert d["prefill"]["precision"] == {"operands": "bf16", "accumulate": "f32"}
        assert k.unavailable() is None
        names.add(k.name)
    assert len(names) == len(kernels)
    assert mla_door.describe(flash_attn_cpu.FA2)["prefill"]["conventions"]["v_padded"] is True
    assert mla_door.describe(flash_attn_cpu.FA3)["prefill"]["conventions"]["v_padded"] is False
    assert mla_door.describe(flashinfer_prefill_cpu.RAGGED)["prefill"]["conventions"] == {
        "lse_base": "2", "lse_layout": "[b,s_q,h]", "empty_row_lse": "-inf", "v_padded": False,
        "causal_alignment": "bottom_right"}


@pytest.mark.parametrize("factory,module", [(flash_attn.fa2, "flash_attn"), (flash_attn.fa3, "flash_attn_interface"),
                                            (flashinfer_prefill.ragged, "flashinfer")], ids=lambda x: getattr(x, "__name__", x))
def test_without_the_library_every_case_is_skipped_with_the_reason(factory, module):
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here: the device check certifies it")
    k = factory()
    why = k.unavailable()
    assert why and module in why and "does not import" in why
    assert k.backend == "cuda"
