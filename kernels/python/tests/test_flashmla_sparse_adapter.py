"""FlashMLA's sparse prefill adapter (mla_door.adapters.flashmla:sparse_prefill) over the CPU stand-in
of flash_mla_sparse_fwd, called as the certifier calls it: out / max_logits / lse of a row without
keys, a -1 entry skipped, the sink shrinking out but not lse, topk_length cutting a row; each
stand-in bug changes what it should; the declaration is in the host's words; without flash_mla the
kernel is unavailable with the reason. (The judgement against the fp64 oracle is the
certifier's: suites/certify/test_certify_python.cpp.)"""
import importlib.util
import math

import pytest
import torch

import flashmla_sparse_cpu
import mla_door
from mla_door.adapters import flashmla

S_Q, S_KV, H, D, TOPK = 4, 10, 64, 576, 64


def call_of(kernel, indices, sink=None, length=None, seed=3):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(S_Q, H, D, generator=g).to(torch.bfloat16)
    kv = torch.randn(S_KV, D, generator=g).to(torch.bfloat16)
    out = torch.full((S_Q, H, 512), math.nan, dtype=torch.bfloat16)
    mx = torch.full((S_Q, H), math.nan)
    lse = torch.full((S_Q, H), math.nan)
    call = mla_door.SparsePrefillCall(s_q=S_Q, s_kv=S_KV, heads=H, d_qk=D, topk=TOPK, sm_scale=0.1352)
    kernel.sparse_prefill.sparse_prefill(q, kv, indices, sink, length, out, mx, lse, call)
    return out.float(), mx, lse


def indices():
    idx = torch.full((S_Q, TOPK), -1, dtype=torch.int32)
    idx[0, :3] = torch.tensor([1, 4, 7])
    idx[1, :4] = torch.tensor([2, -1, 9, S_KV])   # -1 and s_kv among keys
    # row 2: no key; row 3: every position
    idx[3, :S_KV] = torch.arange(S_KV)
    return idx


def test_rows_without_keys_and_skipped_entries():
    out, mx, lse = call_of(flashmla_sparse_cpu.KERNEL, indices())
    assert torch.all(out[2] == 0) and torch.all(torch.isinf(lse[2]) & (lse[2] > 0)) and torch.all(mx[2] == -math.inf)
    assert torch.isfinite(lse[:2]).all() and torch.isfinite(lse[3]).all()
    bug_out, _, _ = call_of(flashmla_sparse_cpu.BUG_MINUS_ONE_AS_ZERO, indices())
    assert not torch.equal(bug_out[1], out[1]), "a -1 gathered as position 0 changes the row"
    assert torch.equal(bug_out[3], out[3]), "a row naming position 0 already is unchanged"


def test_the_sink_shrinks_out_and_leaves_lse_and_topk_length_cuts():
    idx = indices()
    out, _, lse = call_of(flashmla_sparse_cpu.KERNEL, idx)
    sink = torch.full((H,), 1.0)
    out_s, _, lse_s = call_of(flashmla_sparse_cpu.KERNEL, idx, sink=sink)
    assert torch.equal(lse_s, lse)
    w = 1 / (1 + torch.exp(1.0 - lse[0]))
    assert torch.allclose(out_s[0], out[0] * w[:, None], rtol=2e-2, atol=1e-2)
    length = torch.tensor([1, 4, 0, S_KV], dtype=torch.int32)
    _, _, lse_l = call_of(flashmla_sparse_cpu.KERNEL, idx, length=length)
    assert not torch.equal(lse_l[0], lse[0]) and torch.equal(lse_l[3], lse[3])


def test_the_base2_bug_divides_lse_by_ln2():
    _, _, lse = call_of(flashmla_sparse_cpu.KERNEL, indices())
    _, _, lse2 = call_of(flashmla_sparse_cpu.BUG_LSE_BASE2, indices())
    assert torch.allclose(lse2[0], lse[0] / math.log(2.0))


def test_declaration_is_in_the_hosts_words():
    d = mla_door.describe(flashmla_sparse_cpu.KERNEL)
    assert d["decode"] is False
    sp = d["sparse_prefill"]
    assert sp["heads"] == [64, 128] and sp["topk_multiple"] == 64 and sp["out_dtype"] == "bf16"
    assert sp["sink"] is True and sp["topk_length"] is True
    assert sp["precision"] == {"operands": "bf16", "accumulate": "f32"}


def test_without_flash_mla_every_case_is_skipped_with_the_reason():
    if importlib.util.find_spec("flash_mla") is not None:
        pytest.skip("flash_mla is installed here: the device check certifies it")
    k = flashmla.sparse_prefill()
    why = k.unavailable()
    assert why and "flash_mla" in why and "does not import" in why
