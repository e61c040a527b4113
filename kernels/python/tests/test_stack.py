"""mla_door.stack: three kernels' V3.2 sparse entries as one kernel (the certifier's chain cases
feed its sparse prefill with its own logits and top-k: suites/certify/test_certify_python.cpp judges
that). Here: the entries are the three kernels' own, renamed after the stack; a kernel without the
entry it is taken for, or kernels of different backends, are refused naming why; the stack is
unavailable where one of the three is, with that one's reason; its declaration is the host's."""
import dataclasses

import pytest

import mla_door
import v32_stack_cpu


def test_the_entries_are_the_three_kernels_own_renamed_after_the_stack():
    k = v32_stack_cpu.STACK
    assert (k.indexer_logits.name, k.topk.name, k.sparse_prefill.name) == (
        "v32_stack_cpu_standin_indexer_logits", "v32_stack_cpu_standin_topk", "v32_stack_cpu_standin_sparse_prefill")
    assert k.decode is None and k.prefill is None and k.merge is None
    assert k.unavailable() is None
    d = mla_door.describe(k)
    assert d["indexer_logits"]["layouts"] == ["paged", "ragged"]
    assert d["sparse_prefill"]["heads"] == [64, 128] and d["topk"]["name"] == "v32_stack_cpu_standin_topk"


def _parts():
    k = v32_stack_cpu.STACK
    base = dict(name="x", version="1", description="d")
    return (mla_door.Kernel(**base, indexer_logits=k.indexer_logits), mla_door.Kernel(**base, topk=k.topk),
            mla_door.Kernel(**base, sparse_prefill=k.sparse_prefill))


def test_a_kernel_without_its_entry_or_of_another_backend_is_refused_naming_it():
    logits, topk, attention = _parts()
    with pytest.raises(ValueError, match="has no topk entry"):
        mla_door.stack("s", logits, logits, attention)
    with pytest.raises(ValueError, match="different backends"):
        mla_door.stack("s", logits, topk, dataclasses.replace(attention, backend="cuda"))


def test_the_stack_is_unavailable_where_one_of_its_kernels_is_with_that_ones_reason():
    logits, topk, attention = _parts()
    gone = dataclasses.replace(topk, name="gone_topk", unavailable=lambda: "no flashinfer here")
    s = mla_door.stack("s", logits, gone, attention)
    assert s.unavailable() == "gone_topk: no flashinfer here"
