"""DeepGEMM's indexer logits adapter over the CPU stand-in of fp8_paged_mqa_logits / fp8_mqa_logits,
called as the certifier calls it (uint8 codes, the 132-byte paged cache as bytes), against the
scores written out here in float64 from the e4m3 codes: a paged call with two query tokens per
sequence on a shuffled block pool with garbage in the blocks no sequence reads, and a ragged call
with an empty range. Each stand-in bug is caught, the call without clean_logits leaves finite
values past the horizon, the declaration is in the host's words, and without deep_gemm the
kernel is unavailable with the reason."""
import importlib.util
import math
import struct

import pytest
import torch

import deepgemm_cpu
import mla_door
import standin_deep_gemm
from mla_door.adapters import deepgemm

HEADS, BLOCK = 32, 64


def e4m3_value(code: int) -> float:
    """The e4m3fn value of a code, written out independently of the stand-in's table."""
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> 3) & 0xF, code & 7
    if e == 15 and m == 7:
        return math.nan
    return sign * (m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


def codes(g, *shape):
    """Random e4m3 codes without the two NaN codes."""
    c = torch.randint(0, 256, shape, generator=g, dtype=torch.int64)
    c[(c & 0x7F) == 0x7F] = 0x7E
    return c.to(torch.uint8)


def score(q_row, w_row, k_codes, k_scale):
    total = 0.0
    for h in range(q_row.shape[0]):
        dot = sum(e4m3_value(int(a)) * e4m3_value(int(b)) for a, b in zip(q_row[h], k_codes))
        total += max(dot, 0.0) * float(w_row[h])
    return total * k_scale


def paged_call(seed=1, next_n=2):
    g = torch.Generator().manual_seed(seed)
    ctx = [3, BLOCK + 5]
    num_blocks, max_blocks = 6, 3
    cache = torch.randint(0, 256, (num_blocks, BLOCK * 132), generator=g, dtype=torch.int64).to(torch.uint8)
    table = torch.tensor([[4, 99, -7], [1, 5, 12345]], dtype=torch.int32)  # past each sequence's blocks: garbage
    keys = {}
    for b, L in enumerate(ctx):
        for p in range(L):
            blk, off = int(table[b, p // BLOCK]), p % BLOCK
            kc = codes(g, 128)
            scale = float(torch.rand((), generator=g)) + 0.01
            cache[blk, off * 128:(off + 1) * 128] = kc
            cache[blk, BLOCK * 128 + off * 4:BLOCK * 128 + off * 4 + 4] = torch.tensor(list(struct.pack("<f", scale)),
                                                                                    dtype=torch.uint8)
            keys[(b, p)] = (kc, struct.unpack("<f", struct.pack("<f", scale))[0])
    q = codes(g, len(ctx), next_n, HEADS, 128)
    w = torch.randn(len(ctx) * next_n, HEADS, generator=g)
    lens = torch.tensor(ctx, dtype=torch.int32)
    width = max(ctx) + 3
    call = mla_door.IndexerLogitsCall(layout="paged", batch=len(ctx), next_n=next_n, heads=HEADS,
                                      rows=len(ctx) * next_n, cols=width, block_size=BLOCK, max_context=width, num_keys=0)
    truth = torch.full((len(ctx) * next_n, width), -math.inf, dtype=torch.float64)
    for b, L in enumerate(ctx):
        for i in range(next_n):
            r = b * next_n + i
            for p in range(max(0, L - next_n + i + 1)):
                truth[r, p] = score(q[b, i], w[r], *keys[(b, p)])
    return (q, cache, w, lens, table), call, truth


def ragged_call(seed=2):
    g = torch.Generator().manual_seed(seed)
    rows, n = 3, 9
    q = codes(g, rows, HEADS, 128)
    kc = codes(g, n, 128)
    ks_scale = torch.rand(n, generator=g) + 0.01
    w = torch.randn(rows, HEADS, generator=g)
    ks = torch.tensor([0, 4, 6], dtype=torch.int32)
    ke = torch.tensor([5, 9, 6], dtype=torch.int32)  # the last row's range is empty
    call = mla_door.IndexerLogitsCall(layout="ragged", batch=rows, next_n=1, heads=HEADS, rows=rows, cols=n,
                                      block_size=0, max_context=0, num_keys=n)
    truth = torch.full((rows, n), -math.inf, dtype=torch.float64)
    for r in range(rows):
        for p in range(int(ks[r]), int(ke[r])):
            truth[r, p] = score(q[r], w[r], kc[p], float(ks_scale[p]))
    return (q, kc, ks_scale, w, ks, ke), call, truth


def run(kernel, args, call):
    out = torch.full((call.rows, call.cols), math.nan, dtype=torch.float32)
    fn = kernel.indexer_logits.paged if call.layout == "paged" else kernel.indexer_logits.ragged
    fn(*args, out, call)
    return out


def agrees(out, truth):
    """Within 1e-5 of each row's largest |logit|: a logit is a sum over heads of terms with both
    signs (the weights have both), summed in float32 in the BLAS's order, so its error scales
    with the terms, not with a result that may cancel (one such logit was 2.4e-5 off relative to
    itself under OpenBLAS, 3e-7 of its row's largest)."""
    if not torch.equal(torch.isinf(out), torch.isinf(truth)):
        return False
    finite = torch.isfinite(truth)
    zero = torch.zeros_like(truth)
    err = (out.double() - truth).abs().where(finite, zero)
    row_scale = truth.abs().where(finite, zero).amax(dim=-1, keepdim=True).clamp(min=1.0)
    return bool((err <= 1e-5 * row_scale).all())


@pytest.fixture(scope="module")
def paged():
    return paged_call()


@pytest.fixture(scope="module")
def ragged():
    return ragged_call()


def test_adapter_over_the_standin_gives_the_scores(paged, ragged):
    for args, call, truth in (paged, ragged):
        assert agrees(run(deepgemm_cpu.KERNEL, args, call), truth), call.layout


@pytest.mark.parametrize("name,layouts", [("BUG_NO_RELU", ("paged", "ragged")),
                                          ("BUG_SCALE_AFTER_EACH_TOKEN", ("paged",)),
                                          ("BUG_SEES_NEXT_TOKEN", ("paged",))])
def test_each_standin_bug_is_caught_where_it_applies(paged, ragged, name, layouts):
    kernel = getattr(deepgemm_cpu, name)
    for args, call, truth in (paged, ragged):
        assert agrees(run(kernel, args, call), truth) != (call.layout in layouts), (name, call.layout)


def test_without_clean_logits_the_positions_past_the_horizon_are_finite(paged):
    args, call, truth = paged
    out = run(deepgemm_cpu.UNCLEAN, args, call)
    assert torch.isfinite(out[torch.isinf(truth)]).any()


def test_e4m3_views_codes_as_float8_where_torch_has_it():
    t = torch.tensor([0x38, 0xB8], dtype=torch.uint8)  # 1.0 and -1.0
    v = mla_door.e4m3(t)
    if hasattr(torch, "float8_e4m3fn"):
        assert v.dtype == torch.float8_e4m3fn and v.float().tolist() == [1.0, -1.0]
        every = torch.arange(256, dtype=torch.int64).to(torch.uint8)
        ours = standin_deep_gemm._values(every)
        theirs = every.view(torch.float8_e4m3fn).float()
        assert torch.equal(torch.isnan(ours), torch.isnan(theirs))
        assert torch.equal(ours[~torch.isnan(ours)], theirs[~torch.isnan(theirs)])
    else:
        assert v is t


def test_declaration_is_in_the_hosts_words():
    d = mla_door.describe(deepgemm_cpu.KERNEL)
    assert d["decode"] is False
    il = d["indexer_logits"]
    assert il["name"] == "deepgemm_logits_cpu_standin"
    assert il["layouts"] == ["paged", "ragged"] and il["next_ns"] == [1, 2]
    assert il["heads"] == [32, 64] and il["block_sizes"] == [64] and il["max_context"] == 0


def test_without_deep_gemm_every_case_is_skipped_with_the_reason():
    if importlib.util.find_spec("deep_gemm") is not None:
        pytest.skip("deep_gemm is installed here: the device check certifies it")
    k = deepgemm.kernel()
    why = k.unavailable()
    assert why and "deep_gemm" in why and "does not import" in why
    assert k.backend == "cuda"
