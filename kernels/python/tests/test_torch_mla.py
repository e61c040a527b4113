"""torch_mla (the canonical torch CPU decode) against committed golden cases, judged with the
suite's bounds for its precision class; and its parts against their definitions."""
import math
import os
import sys

import numpy as np
import pytest
import torch

import golden_cases as gc
import torch_mla

# The decode's class is f32 operands / f32 sums: float32 output is held to attn.*.f32, bfloat16
# output to the bf16 (bf16 cache) or fp8 (FP8 cache) entries.
CASES = [
    ("attn_core", "all_empty"),              # L = 0 everywhere: out 0, lse +inf
    ("attn_core", "h3_sq4_short"),           # causal s_q = 4: the bottom-right alignment
    ("attn_core", "h16_varlen_ps16"),        # varlen, small pages, permuted blocks
    ("attn_fp8", "fp8_tiny_flashmla_ue8m0"), # FP8 tiny-amax blocks, ue8m0 scales
    ("attn_fp8", "fp8_ue8m0_h64_sq2"),       # FP8, causal s_q = 2
    ("attn_sparse", "sparse_bf16_topk16"),   # invalid indices of every kind, bf16 cache
    ("attn_sparse", "sparse_fp8_topk32"),    # FP8 sparse with an all-invalid row
    ("attn_stress", "q_std100_sq2_ps16"),    # large logits
]


@pytest.mark.parametrize("family,name", CASES)
def test_f32_output_within_the_f32_bounds(family, name):
    case = gc.load(family, name)
    out, lse = gc.empty_outputs(case, "f32")
    torch_mla.KERNEL.decode(case.q, case.kv_cache, case.block_table, case.cache_seqlens,
                            case.indices, out, lse, case.call)
    assert gc.judge_result(case, out, lse, "f32") == []


@pytest.mark.parametrize("family,name", [("attn_core", "h3_sq4_short"), ("attn_fp8", "fp8_ue8m0_h64_sq2"),
                                         ("attn_sparse", "sparse_fp8_topk32")])
def test_bf16_output_within_the_bf16_bounds(family, name):
    case = gc.load(family, name)
    out, lse = gc.empty_outputs(case, "bf16")
    torch_mla.KERNEL_BF16.decode(case.q, case.kv_cache, case.block_table, case.cache_seqlens,
                                 case.indices, out, lse, case.call)
    assert out.dtype == torch.bfloat16
    assert gc.judge_result(case, out, lse, "bf16") == []


def test_the_judge_here_can_fail():
    # A decode that drops each sequence's last token is outside the f32 bounds: these tests
    # would see a real off-by-one.
    case = gc.load("attn_core", "h16_varlen_ps16")
    out, lse = gc.empty_outputs(case, "f32")
    short = (case.cache_seqlens - 1).clamp(min=0)
    torch_mla.KERNEL.decode(case.q, case.kv_cache, case.block_table, short, None, out, lse, case.call)
    assert any(f.startswith("out") for f in gc.judge_result(case, out, lse, "f32"))
    # and a correct result rounded to bf16 is outside the f32 bounds (the class matters)
    torch_mla.KERNEL.decode(case.q, case.kv_cache, case.block_table, case.cache_seqlens, None,
                            out, lse, case.call)
    assert gc.judge_result(case, out, lse, "f32") == []
    assert gc.judge_result(case, out.bfloat16().float(), lse, "f32") != []


def test_e4m3_table_matches_the_references_decoder():
    sys.path.insert(0, os.path.join(gc.ROOT, "reference", "python"))
    from mla_ref.numerics import E4M3_TABLE
    mine = torch_mla.e4m3_table().double().numpy()
    assert np.array_equal(np.isnan(mine), np.isnan(E4M3_TABLE))
    fin = ~np.isnan(mine)
    assert np.array_equal(mine[fin], E4M3_TABLE[fin])
    assert torch_mla.e4m3_value(0x7E) == 448.0 and torch_mla.e4m3_value(0x01) == 2.0 ** -9
    assert math.isnan(torch_mla.e4m3_value(0x7F)) and math.isnan(torch_mla.e4m3_value(0xFF))


def test_fp8_tokens_decode_to_the_stored_dequantized_cache():
    # The exact dequantization is stored with every FP8 case; token_values rounds each product
    # once to float32, so it must equal float32(kv_cache_dequant) on every used slot.
    import h5py
    with h5py.File(os.path.join(gc.GOLDENS, "attn_fp8.h5"), "r") as f:
        c = f["cases/fp8_tiny_flashmla_ue8m0/inputs"]
        raw, deq = c["kv_cache"][...], c["kv_cache_dequant"][...]
        bt, lens = c["block_table"][...], c["cache_seqlens"][...]
    for i, L in enumerate(lens):
        pos = torch.arange(int(L))
        slots = torch_mla.slots_of_positions(torch.from_numpy(bt[i]), pos, raw.shape[1])
        got = torch_mla.token_values(torch_mla.gather_slots(torch.from_numpy(raw), slots))
        want = deq.reshape(-1, 576)[slots.numpy()].astype(np.float32)
        assert np.array_equal(got.numpy(), want)


def test_invalid_sparse_indices_are_never_read():
    # Every slot that no valid index names is NaN: reading one would poison the row.
    case = gc.load("attn_sparse", "sparse_bf16_topk16")
    used = set()
    for i in range(case.call.batch):
        L = int(case.cache_seqlens[i])
        for p in case.indices[i].flatten().tolist():
            if 0 <= p < L:
                used.add(int(torch_mla.slots_of_positions(case.block_table[i], torch.tensor([p]),
                                                          case.call.page_size)))
    cache = case.kv_cache.clone().reshape(-1, case.kv_cache.shape[2])
    poison = torch.tensor([0x7FC0], dtype=torch.int16).view(torch.uint8).repeat(576)
    for s in range(cache.shape[0]):
        if s not in used:
            cache[s] = poison
    out, lse = gc.empty_outputs(case, "f32")
    torch_mla.decode(case.q, cache.reshape(case.kv_cache.shape), case.block_table,
                     case.cache_seqlens, case.indices, out, lse, case.call)
    assert gc.judge_result(case, out, lse, "f32") == []


def test_the_judge_picks_the_entry_of_the_output_dtype_and_cache():
    # The verdict comes from `mla judge`, which names the table entries it used: those of the
    # class the output dtype implies, with the FP8 entries for an FP8 cache.
    for (family, name), dtype, kind in ((("attn_core", "h3_sq4_short"), "f32", "f32"),
                                         (("attn_core", "h3_sq4_short"), "bf16", "bf16"),
                                         (("attn_fp8", "fp8_ue8m0_h64_sq2"), "bf16", "fp8")):
        case = gc.load(family, name)
        out, lse = gc.empty_outputs(case, dtype)
        (torch_mla.KERNEL if dtype == "f32" else torch_mla.KERNEL_BF16).decode(
            case.q, case.kv_cache, case.block_table, case.cache_seqlens, case.indices, out, lse, case.call)
        j = gc.judgement(case, out, lse, dtype)
        assert j["verdict"] == "PASS", j["reasons"]
        assert (j["out"]["tolerance"], j["lse"]["tolerance"]) == (f"attn.out.{kind}", f"attn.lse.{kind}")
        assert j["tolerances"]["out"]["name"] == f"attn.out.{kind}"


def test_a_result_the_judge_cannot_read_is_an_error_not_a_verdict():
    case = gc.load("attn_core", "h3_sq4_short")
    out, lse = gc.empty_outputs(case, "f32")
    with pytest.raises(RuntimeError, match="shape"):
        gc.judge_result(case, out[:, :, :2], lse, "f32")
    with pytest.raises(ValueError, match="not bf16"):
        gc.judge_result(case, out.fill_(1.0 / 3.0), lse, "bf16")


def test_declarations_are_the_suites_conventions():
    import mla_door
    for k, dt in ((torch_mla.KERNEL, "f32"), (torch_mla.KERNEL_BF16, "bf16")):
        d = mla_door.describe(k)
        assert d["out_dtype"] == dt and d["backend"] == "cpu"
        assert d["conventions"] == {"lse_base": "e", "lse_layout": "[b,h,s_q]", "empty_row_lse": "+inf",
                                    "indices": "positions"}
        assert d["precision"] == {"operands": "f32", "accumulate": "f32"}
        assert d["caps"]["cache_formats"] == ["bf16", "fp8"] and d["caps"]["sparse"]
