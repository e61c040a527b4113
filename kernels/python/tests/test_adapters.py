"""The FlashMLA and FlashInfer adapters over their CPU stand-ins, called the way the certifier
calls them (host.py: index numbering in, lse conventions out), against torch_mla on generated
shapes and against committed goldens; each stand-in bug variant is caught; each adapter's
claims and its skip reason where the real library does not import."""
import importlib.util
import math
import re

import pytest
import torch

import golden_cases as gc
import host
import mla_door
import torch_mla
import flashinfer_cpu
import flashmla_cpu
from mla_door.adapters import flashinfer, flashmla

SENTINEL = 2147483647


def generated(seed, b, s_q, h, ps, lens, cache_format, topk=0, causal=True):
    """Inputs with permuted pages, poisoned (NaN) unused slots and sentinel block-table tails,
    and for sparse rows invalid indices of every kind (-1, -2, L, INT_MIN, INT_MAX)."""
    g = torch.Generator().manual_seed(seed)
    pages = [(L + ps - 1) // ps for L in lens]
    nb = sum(pages) + 2                                               # two spare blocks
    mb = max(pages) + 1
    perm = torch.randperm(nb, generator=g)
    bt = torch.full((b, mb), SENTINEL, dtype=torch.int32)
    k = 0
    for i, n in enumerate(pages):
        bt[i, :n] = perm[k:k + n].to(torch.int32)
        k += n
    q = torch.randn(b, s_q, h, 576, generator=g).to(torch.bfloat16)
    if cache_format == "bf16":
        vals = torch.randn(nb, ps, 576, generator=g).to(torch.bfloat16)
        cache = vals.view(torch.uint8).reshape(nb, ps, 1152).clone()
        poison = torch.tensor([0x7FC0], dtype=torch.int16).view(torch.uint8).repeat(576)
    else:
        codes = torch.randint(0, 256, (nb, ps, 512), generator=g, dtype=torch.int64)
        codes[(codes & 0x7F) == 0x7F] = 0x3C                          # no NaN codes in used tokens
        scales = (torch.rand(nb, ps, 4, generator=g) * 0.02 + 1e-3).float()
        rope = torch.randn(nb, ps, 64, generator=g).to(torch.bfloat16)
        cache = torch.cat([codes.to(torch.uint8), scales.view(torch.uint8).reshape(nb, ps, 16),
                           rope.view(torch.uint8).reshape(nb, ps, 128)], dim=2).contiguous()
        poison = torch.cat([torch.full((512,), 0x7F, dtype=torch.uint8),
                            torch.tensor([math.nan] * 4, dtype=torch.float32).view(torch.uint8),
                            torch.tensor([0x7FC0] * 64, dtype=torch.int16).view(torch.uint8)])
    used = set()
    for i, L in enumerate(lens):
        for t in range(L):
            used.add(int(bt[i, t // ps]) * ps + t % ps)
    flat = cache.reshape(nb * ps, -1)
    for s in range(nb * ps):
        if s not in used:
            flat[s] = poison
    lens_t = torch.tensor(lens, dtype=torch.int32)
    indices = None
    if topk:
        indices = torch.empty(b, s_q, topk, dtype=torch.int32)
        bad = torch.tensor([-1, -2, -2147483648, 2147483647], dtype=torch.int32)
        for i, L in enumerate(lens):
            for s in range(s_q):
                row = torch.randperm(max(L, 1), generator=g)[:topk].to(torch.int32) if L else \
                    torch.empty(0, dtype=torch.int32)
                fill = torch.cat([bad, torch.tensor([L], dtype=torch.int32)])
                pad = fill[torch.randint(0, 5, (topk,), generator=g)]
                r = torch.cat([row, pad])[:topk]
                n_bad = topk // 4                                     # a quarter invalid at least
                r[torch.randperm(topk, generator=g)[:n_bad]] = pad[:n_bad]
                indices[i, s] = r
        causal = False
    call = mla_door.Call(batch=b, s_q=s_q, heads=h, d_qk=576, d_v=512, page_size=ps,
                         num_blocks=nb, max_blocks=mb, topk=topk, cache_format=cache_format,
                         causal=causal, scale_fmt="fp32" if cache_format == "fp8" else "",
                         softmax_scale=576 ** -0.5)
    return q, cache, bt, lens_t, indices, call


def reference(q, cache, bt, lens, indices, call):
    out, lse = torch_mla.decode_rows(q, cache, bt, lens, indices, call.softmax_scale, call.causal)
    return out.to(torch.bfloat16), lse.double()


def assert_same(kernel, inputs):
    out, lse = host.run(kernel, *inputs)
    ref_out, ref_lse = reference(*inputs)
    assert torch.equal(out, ref_out)
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    fin = torch.isfinite(ref_lse)
    assert torch.allclose(lse[fin], ref_lse[fin], rtol=1e-6, atol=1e-6)


def differs(kernel, inputs) -> bool:
    try:
        out, lse = host.run(kernel, *inputs)
    except Exception:
        return True                                    # an error is red as well
    ref_out, ref_lse = reference(*inputs)
    return not (torch.equal(out, ref_out) and torch.allclose(lse, ref_lse, rtol=1e-5, atol=1e-5,
                                                               equal_nan=False))


# ---------------------------------------------------------------- FlashMLA
FLASHMLA_DENSE = [
    dict(seed=1, b=3, s_q=1, h=16, ps=64, lens=[1, 130, 64], cache_format="bf16"),
    dict(seed=2, b=4, s_q=2, h=128, ps=64, lens=[0, 1, 65, 200], cache_format="bf16"),   # L < s_q
    dict(seed=3, b=2, s_q=4, h=3, ps=64, lens=[4, 77], cache_format="bf16"),
]
FLASHMLA_SPARSE = [
    dict(seed=4, b=2, s_q=1, h=64, ps=64, lens=[100, 0], cache_format="fp8", topk=64),
    dict(seed=5, b=2, s_q=2, h=128, ps=64, lens=[300, 70], cache_format="fp8", topk=128),
    dict(seed=6, b=2, s_q=1, h=64, ps=16, lens=[90, 33], cache_format="fp8", topk=64),  # any page size
]


@pytest.mark.parametrize("shape", FLASHMLA_DENSE + FLASHMLA_SPARSE, ids=lambda s: f"seed{s['seed']}")
def test_flashmla_adapter_over_the_standin_matches_torch_mla(shape):
    inputs = generated(**shape)
    assert flashmla_cpu.KERNEL.can_implement(inputs[-1]) is None
    assert_same(flashmla_cpu.KERNEL, inputs)


@pytest.mark.parametrize("bug,shape", [
    ("BUG_DROPPED_LAST_TOKEN", FLASHMLA_DENSE[0]),
    ("BUG_SLOTS_AS_POSITIONS", FLASHMLA_SPARSE[0]),
    ("BUG_LSE_BASE2", FLASHMLA_DENSE[0]),
])
def test_flashmla_bug_variants_are_caught(bug, shape):
    assert differs(getattr(flashmla_cpu, bug), generated(**shape))


def test_flashmla_refuses_what_flashmla_cannot_run():
    ok = dict(batch=1, s_q=1, heads=64, d_qk=576, d_v=512, page_size=64, num_blocks=4,
              max_blocks=4, topk=0, cache_format="bf16", causal=True, scale_fmt="")
    k = flashmla_cpu.KERNEL
    assert k.can_implement(mla_door.Shape(**ok)) is None
    sparse = dict(ok, topk=128, cache_format="fp8", causal=False, scale_fmt="ue8m0")
    assert k.can_implement(mla_door.Shape(**sparse)) is None
    assert k.can_implement(mla_door.Shape(**dict(sparse, page_size=16))) is None
    for change, word in [(dict(ok, page_size=16), "page"),
                         (dict(ok, cache_format="fp8", scale_fmt="fp32"), "bf16 cache"),
                         (dict(sparse, cache_format="bf16", scale_fmt=""), "FP8"),
                         (dict(sparse, heads=16), "heads"),
                         (dict(sparse, topk=32), "topk")]:
        why = k.can_implement(mla_door.Shape(**change))
        assert why and word in why, (change, why)


# ---------------------------------------------------------------- FlashInfer
FLASHINFER = [
    dict(seed=11, b=3, s_q=1, h=16, ps=16, lens=[0, 17, 64], cache_format="bf16"),
    dict(seed=12, b=2, s_q=4, h=8, ps=64, lens=[4, 130], cache_format="bf16"),
    dict(seed=13, b=2, s_q=3, h=128, ps=1, lens=[5, 2], cache_format="bf16"),          # L < s_q
]


@pytest.mark.parametrize("shape", FLASHINFER, ids=lambda s: f"seed{s['seed']}")
def test_flashinfer_adapter_over_the_standin_matches_torch_mla(shape):
    inputs = generated(**shape)
    assert flashinfer_cpu.KERNEL.can_implement(inputs[-1]) is None
    assert_same(flashinfer_cpu.KERNEL, inputs)


@pytest.mark.parametrize("bug,shape", [
    ("BUG_NATURAL_LSE", FLASHINFER[0]),
    ("BUG_SHORT_CSR", FLASHINFER[0]),
    ("BUG_CAUSAL_TOP_LEFT", FLASHINFER[1]),
])
def test_flashinfer_bug_variants_are_caught(bug, shape):
    assert differs(getattr(flashinfer_cpu, bug), generated(**shape))


def test_flashinfer_csr_takes_exactly_the_first_pages():
    bt = torch.tensor([[7, 3, SENTINEL], [5, SENTINEL, SENTINEL], [2, 9, 4]], dtype=torch.int32)
    indptr, idx = flashinfer.csr_pages(bt, torch.tensor([17, 0, 33], dtype=torch.int32), 16)
    assert indptr.tolist() == [0, 2, 2, 5] and idx.tolist() == [7, 3, 2, 9, 4]


def test_flashinfer_refuses_sparse_and_fp8():
    base = dict(batch=1, s_q=1, heads=16, d_qk=576, d_v=512, page_size=16, num_blocks=4,
                max_blocks=4, topk=0, cache_format="bf16", causal=True, scale_fmt="")
    k = flashinfer_cpu.KERNEL
    assert k.can_implement(mla_door.Shape(**base)) is None
    assert "sparse" in k.can_implement(mla_door.Shape(**dict(base, topk=64, causal=False)))
    assert "per-128" in k.can_implement(mla_door.Shape(**dict(base, cache_format="fp8", scale_fmt="fp32")))


# ---------------------------------------------------------------- both, on committed goldens
@pytest.mark.parametrize("kernel,family,name", [
    (flashmla_cpu.KERNEL, "attn_core", "h16_varlen_ps64"),
    (flashmla_cpu.KERNEL, "attn_sparse", "sparse_fp8_tiny_flashmla_ue8m0"),
    (flashinfer_cpu.KERNEL, "attn_core", "all_empty"),
    (flashinfer_cpu.KERNEL, "attn_core", "h3_sq4_short"),
], ids=lambda x: getattr(x, "name", x))
def test_adapters_pass_goldens_with_the_hosts_conversions(kernel, family, name):
    case = gc.load(family, name)
    assert kernel.can_implement(case.call) is None
    out, lse = host.run(kernel, case.q, case.kv_cache, case.block_table, case.cache_seqlens,
                        case.indices, case.call)
    assert gc.judge_result(case, out.float(), lse.float(), kernel.out_dtype) == []


# ---------------------------------------------------------------- declarations
@pytest.mark.parametrize("module", [flashmla_cpu, flashinfer_cpu])
def test_declarations_are_in_the_hosts_words(module):
    for attr in [a for a in dir(module) if a == "KERNEL" or a.startswith("BUG_")]:
        k = getattr(module, attr)
        d = mla_door.describe(k)
        assert re.fullmatch(r"[a-z0-9_]+", d["name"]), d["name"]
        assert d["backend"] == "cpu" and d["out_dtype"] == "bf16" and d["can_implement"]
        c = d["conventions"]
        assert c["lse_base"] in mla_door.LSE_BASES and c["lse_layout"] in mla_door.LSE_LAYOUTS
        assert c["empty_row_lse"] in mla_door.EMPTY_ROW_LSES
        assert c["indices"] in mla_door.INDEX_NUMBERINGS
        assert d["precision"] == {"operands": "bf16", "accumulate": "f32"}
        assert k.unavailable() is None
    names = {getattr(module, a).name for a in dir(module) if a == "KERNEL" or a.startswith("BUG_")}
    assert len(names) == 4                              # one name per kernel


@pytest.mark.parametrize("adapter,module", [(flashmla, "flash_mla"), (flashinfer, "flashinfer")])
def test_without_the_library_every_case_is_skipped_with_the_reason(adapter, module):
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here: the device check certifies it")
    k = adapter.kernel()
    why = k.unavailable()
    assert why and module in why and "does not import" in why
    assert k.backend == "cuda"
