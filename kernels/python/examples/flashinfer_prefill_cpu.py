"""FlashInfer's ragged prefill adapter over the CPU stand-in, and the stand-in's bug variants.

    mla certify --python kernels/python/examples/flashinfer_prefill_cpu.py:RAGGED             # green
    mla certify --python kernels/python/examples/flashinfer_prefill_cpu.py:BUG_NATURAL_LSE    # red

The same adapter (mla_door.adapters.flashinfer_prefill) certifies the real library where it
imports; here it drives standin_flashinfer_prefill, so CI checks the adapter's plan/run calls and
the certifier's conversions (base-2 lse laid out [total_q, h], -inf for an empty row) without a
GPU.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # loaded as a file (mla certify --python FILE.py:ATTR): find the siblings
    sys.path.insert(0, _HERE)

import standin_flashinfer_prefill as standin  # noqa: E402
from mla_door.adapters import flashinfer_prefill  # noqa: E402

RAGGED = flashinfer_prefill.make(standin.library(), name="flashinfer_ragged_cpu_standin")
BUG_NATURAL_LSE = flashinfer_prefill.make(standin.library("natural_lse"), name="flashinfer_ragged_cpu_bug_natural_lse")
