"""FlashInfer's top-k adapter over the CPU stand-in of top_k_ragged_transform, and its red variants.

    mla certify --python kernels/python/examples/flashinfer_topk_cpu.py:KERNEL --family fresh              # green
    mla certify --python kernels/python/examples/flashinfer_topk_cpu.py:UNDECLARED_RANGES --family fresh   # red

The same adapter (mla_door.adapters.flashinfer_topk) certifies the real function where flashinfer
imports; here it drives standin_flashinfer_topk, so CI checks the adapter's call (offsets and
row_starts both the rows' starts, lengths clamped at 0) and the declared capability without a GPU.
UNDECLARED_RANGES is the same code without `range_all_valid`: the certifier then gives it masked
positions inside ranges, and it returns them where a row holds no more than k positions: red.
"""
import dataclasses
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # loaded as a file (mla certify --python FILE.py:ATTR): find the siblings
    sys.path.insert(0, _HERE)

import standin_flashinfer_topk as standin  # noqa: E402
from mla_door.adapters import flashinfer_topk  # noqa: E402

KERNEL = flashinfer_topk.make(standin.library(), name="flashinfer_topk_cpu_standin")
BUG_IGNORES_ROW_STARTS = flashinfer_topk.make(standin.library("ignores_row_starts"),
                                              name="flashinfer_topk_cpu_bug_ignores_row_starts")


def _undeclared():
    k = flashinfer_topk.make(standin.library(), name="flashinfer_topk_cpu_undeclared_ranges")
    return dataclasses.replace(k, topk=dataclasses.replace(k.topk, range_all_valid=False))


UNDECLARED_RANGES = _undeclared()
