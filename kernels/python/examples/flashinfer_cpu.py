"""FlashInfer's adapter over the CPU stand-in of its wrapper, and the stand-in's bug variants.

    mla certify --python kernels/python/examples/flashinfer_cpu.py:KERNEL             # green
    mla certify --python kernels/python/examples/flashinfer_cpu.py:BUG_NATURAL_LSE    # red

The same adapter (mla_door.adapters.flashinfer) certifies the real library where it imports;
here it drives standin_flashinfer, so CI checks the adapter's layout work (split q and cache,
CSR pages) and the certifier's conversions (base-2 lse, [b,s_q,h], -inf) without a GPU.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # loaded as a file (mla certify --python FILE.py:ATTR): find the siblings
    sys.path.insert(0, _HERE)

import standin_flashinfer as standin  # noqa: E402
from mla_door.adapters import flashinfer  # noqa: E402

KERNEL = flashinfer.make(standin, name="flashinfer_cpu_standin")
BUG_NATURAL_LSE = flashinfer.make(standin.library("natural_lse"), name="flashinfer_cpu_bug_natural_lse")
BUG_SHORT_CSR = flashinfer.make(standin.library("short_csr"), name="flashinfer_cpu_bug_short_csr")
BUG_CAUSAL_TOP_LEFT = flashinfer.make(standin.library("causal_top_left"),
                                      name="flashinfer_cpu_bug_causal_top_left")
