"""FlashAttention's varlen prefill adapter over the CPU stand-in, and the stand-in's bug variants.

    mla certify --python kernels/python/examples/flash_attn_cpu.py:FA2              # green
    mla certify --python kernels/python/examples/flash_attn_cpu.py:FA3              # green
    mla certify --python kernels/python/examples/flash_attn_cpu.py:BUG_TOP_LEFT     # red

The same adapter (mla_door.adapters.flash_attn) certifies the real library where it imports; here
it drives standin_flash_attn, so CI checks the adapter's work and the certifier's conversions (V
padded to 192 and out cut back for FlashAttention 2; lse [h, total_q] with +inf or -inf for an
empty row) without a GPU. FA2_UNDECLARED_EMPTY is FlashAttention 3's stand-in declared with
FlashAttention 2's empty-row lse: red exactly where a row attends nothing.
"""
import dataclasses
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # loaded as a file (mla certify --python FILE.py:ATTR): find the siblings
    sys.path.insert(0, _HERE)

import standin_flash_attn as standin  # noqa: E402
from mla_door.adapters import flash_attn  # noqa: E402

FA2 = flash_attn.make(standin.library(2), version=2, name="flash_attn2_cpu_standin")
FA3 = flash_attn.make(standin.library(3), version=3, name="flash_attn3_cpu_standin")
BUG_TOP_LEFT = flash_attn.make(standin.library(2, "top_left"), version=2, name="flash_attn2_cpu_bug_top_left")
BUG_CU_SEQLENS = flash_attn.make(standin.library(3, "cu_seqlens_off_by_one"), version=3,
                                 name="flash_attn3_cpu_bug_cu_seqlens_off_by_one")


def _fa3_declared_as_fa2_empty():
    k = flash_attn.make(standin.library(3), version=3, name="flash_attn3_cpu_declared_plus_inf")
    conv = dataclasses.replace(k.prefill.conventions, empty_row_lse="+inf")
    return dataclasses.replace(k, prefill=dataclasses.replace(k.prefill, conventions=conv))


FA3_DECLARED_PLUS_INF = _fa3_declared_as_fa2_empty()
