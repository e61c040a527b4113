"""vLLM's top-k adapter over the CPU stand-in of top_k_per_row_prefill (and FlashInfer's over its
top_k_ragged_transform stand-in, on the valid ranges it declares), called as the certifier
calls it (relative indices made absolute), against an exact selection on rows with masked (-inf)
positions, NaN outside the valid range, fewer valid positions than k and a row with no range;
its order moves between calls while its set does not; each stand-in bug is caught; the declaration is in the host's words; without vllm the kernel is
unavailable with the reason."""
import importlib.util
import math

import pytest
import torch

import flashinfer_topk_cpu
import mla_door
import standin_topk
import vllm_topk_cpu
from mla_door.adapters import flashinfer_topk, vllm_topk


def rows(seed, n=300, k=64):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(5, n, generator=g)
    starts = torch.tensor([0, 10, 50, 7, 100], dtype=torch.int32)
    ends = torch.tensor([n, 200, 90, 7, 130], dtype=torch.int32)
    logits[1, 150:] = -math.inf              # masked positions inside the range
    logits[2, :50] = math.nan                # outside the range: never read
    logits[4, 100:125] = -math.inf           # fewer valid positions (5) than k
    return logits, starts, ends, k


def selected(kernel, logits, starts, ends, k):
    idx = torch.full((logits.shape[0], k), 123456, dtype=torch.int32)
    kernel.topk.topk(logits, starts, ends, idx, mla_door.TopkCall(rows=logits.shape[0], n=logits.shape[1], k=k))
    out = []
    for r in range(logits.shape[0]):
        row = [int(x) for x in idx[r] if x >= 0]
        base = int(starts[r]) if kernel.topk.index_base == "relative" else 0
        out.append(sorted(x + base for x in row))
        assert all(int(x) == -1 for x in idx[r][len(row):]), "padding is -1 and trails"
    return out


def exact(logits, starts, ends, k):
    out = []
    for r in range(logits.shape[0]):
        s, e = int(starts[r]), int(ends[r])
        valid = [j for j in range(s, e) if math.isfinite(float(logits[r, j]))]
        valid.sort(key=lambda j: -float(logits[r, j]))
        out.append(sorted(valid[:k]))
    return out


def test_adapter_over_the_standin_selects_exactly():
    case = rows(1)
    assert selected(vllm_topk_cpu.KERNEL, *case) == exact(*case)


@pytest.mark.parametrize("kernel", [vllm_topk_cpu.BUG_ABSOLUTE, vllm_topk_cpu.BUG_KEEPS_MASKED], ids=lambda k: k.name)
def test_each_standin_bug_is_caught(kernel):
    case = rows(2)
    assert selected(kernel, *case) != exact(*case)


def raw(kernel, logits, starts, ends, k):
    idx = torch.full((logits.shape[0], k), 123456, dtype=torch.int32)
    kernel.topk.topk(logits, starts, ends, idx, mla_door.TopkCall(rows=logits.shape[0], n=logits.shape[1], k=k))
    return idx


def test_the_standins_order_changes_between_calls_and_its_set_does_not():
    """What the certifier's repeated calls must accept of an unsorted top-k (and what they must not)."""
    case = rows(3)
    kernel = vllm_topk.make(standin_topk.ops())
    first, second = raw(kernel, *case), raw(kernel, *case)
    assert not torch.equal(first, second), "the order moved"
    assert torch.equal(torch.sort(first, dim=1).values, torch.sort(second, dim=1).values), "the sets did not"
    bug = vllm_topk.make(standin_topk.ops("second_call_differs"))
    first, second = raw(bug, *case), raw(bug, *case)
    assert not torch.equal(torch.sort(first, dim=1).values, torch.sort(second, dim=1).values)


def test_declaration_is_in_the_hosts_words():
    d = mla_door.describe(vllm_topk_cpu.KERNEL)
    assert d["decode"] is False and d["topk"]["name"] == "vllm_topk_cpu_standin"
    assert d["topk"]["index_base"] == "relative" and d["topk"]["sorted"] is False
    assert d["topk"]["ks"] == [2048] and d["topk"]["precision"] == "f32"


def test_without_vllm_every_case_is_skipped_with_the_reason():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here: the device check certifies it")
    k = vllm_topk.kernel()
    why = k.unavailable()
    assert why and "vllm._C" in why and "does not import" in why
    assert k.backend == "cuda"


# ---- FlashInfer's top_k_ragged_transform -----------------------------------------------------------

def valid_rows(seed, n=300, k=64):
    """Rows whose every in-range position is finite (what a range_all_valid kernel is given): a
    whole row, a ragged range past 0 with NaN before it, a row shorter than k, an empty one."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(4, n, generator=g)
    starts = torch.tensor([0, 40, 100, 7], dtype=torch.int32)
    ends = torch.tensor([n, 250, 130, 7], dtype=torch.int32)
    logits[1, :40] = math.nan
    return logits, starts, ends, k


def test_flashinfer_adapter_over_the_standin_selects_exactly_on_valid_ranges():
    case = valid_rows(5)
    assert selected(flashinfer_topk_cpu.KERNEL, *case) == exact(*case)


def test_flashinfer_returns_masked_positions_of_a_short_row_which_is_why_it_declares_valid_ranges():
    logits, starts, ends, k = rows(1)  # row 4: 30 positions in range, 25 of them -inf
    got = selected(flashinfer_topk_cpu.KERNEL, logits, starts, ends, k)
    assert got[4] == list(range(100, 130)) != exact(logits, starts, ends, k)[4]
    assert mla_door.describe(flashinfer_topk_cpu.KERNEL)["topk"]["range_all_valid"] is True
    assert mla_door.describe(flashinfer_topk_cpu.UNDECLARED_RANGES)["topk"]["range_all_valid"] is False


def test_flashinfer_standin_bug_is_caught():
    case = valid_rows(6)
    assert selected(flashinfer_topk_cpu.BUG_IGNORES_ROW_STARTS, *case) != exact(*case)


def test_without_flashinfer_its_topk_is_skipped_with_the_reason():
    if importlib.util.find_spec("flashinfer") is not None:
        pytest.skip("flashinfer is installed here: the device check certifies it")
    k = flashinfer_topk.kernel()
    why = k.unavailable()
    assert why and "flashinfer" in why and "does not import" in why
    assert k.backend == "cuda"
