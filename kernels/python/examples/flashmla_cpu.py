"""FlashMLA's adapter over the CPU stand-in of its API, and the stand-in's bug variants.

    mla certify --python kernels/python/examples/flashmla_cpu.py:KERNEL               # green
    mla certify --python kernels/python/examples/flashmla_cpu.py:BUG_DROPPED_LAST_TOKEN   # red

The same adapter (mla_door.adapters.flashmla) certifies the real library where it imports;
here it drives standin_flash_mla, so CI checks the adapter's layout work and the certifier's
conversions (global slots, FlashMLA's limits as NOT_CLAIMED) without a GPU.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # loaded as a file (mla certify --python FILE.py:ATTR): find the siblings
    sys.path.insert(0, _HERE)

import standin_flash_mla as standin  # noqa: E402
from mla_door.adapters import flashmla  # noqa: E402

KERNEL = flashmla.make(standin, name="flashmla_cpu_standin")
BUG_DROPPED_LAST_TOKEN = flashmla.make(standin.library("dropped_last_token"),
                                       name="flashmla_cpu_bug_dropped_last_token")
BUG_SLOTS_AS_POSITIONS = flashmla.make(standin.library("slots_as_positions"),
                                       name="flashmla_cpu_bug_slots_as_positions")
BUG_LSE_BASE2 = flashmla.make(standin.library("lse_base2"), name="flashmla_cpu_bug_lse_base2")
