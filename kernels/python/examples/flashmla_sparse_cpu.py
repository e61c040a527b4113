"""FlashMLA's sparse prefill adapter (mla_door.adapters.flashmla:sparse_prefill) over the CPU stand-in
of flash_mla_sparse_fwd, and the stand-in's bug variants.

    mla certify --python kernels/python/examples/flashmla_sparse_cpu.py:KERNEL --family fresh              # green
    mla certify --python kernels/python/examples/flashmla_sparse_cpu.py:BUG_LSE_BASE2 --family fresh       # red

The same adapter certifies the installed flash_mla where it imports; here it drives
standin_flash_mla_sparse, so CI checks the adapter's call (kv and indices in FlashMLA's shapes, the
sink and topk_length passed where given) without a GPU. Sparse prefill cases are drawn at run time
only (the fresh family): their truth is the fp64 oracle of each call.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # loaded as a file (mla certify --python FILE.py:ATTR): find the siblings
    sys.path.insert(0, _HERE)

import standin_flash_mla_sparse as standin  # noqa: E402
from mla_door.adapters import flashmla  # noqa: E402

KERNEL = flashmla.make_sparse_prefill(standin.library(), name="flashmla_sparse_prefill_cpu_standin")
BUG_MINUS_ONE_AS_ZERO = flashmla.make_sparse_prefill(standin.library("minus_one_as_zero"),
                                                     name="flashmla_sparse_prefill_cpu_bug_minus_one_as_zero")
BUG_LSE_BASE2 = flashmla.make_sparse_prefill(standin.library("lse_base2"), name="flashmla_sparse_prefill_cpu_bug_lse_base2")
