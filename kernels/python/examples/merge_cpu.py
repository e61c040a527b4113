"""vLLM's and FlashInfer's merge adapters over the CPU stand-ins, and the stand-ins' bug variants.

    mla certify --python kernels/python/examples/merge_cpu.py:VLLM          # green
    mla certify --python kernels/python/examples/merge_cpu.py:FLASHINFER    # green
    mla certify --python kernels/python/examples/merge_cpu.py:BUG_BOTH_EMPTY_NAN   # red

The same adapters (mla_door.adapters.merge_states) certify the real libraries where they import;
here they drive standin_merge, so CI checks the adapters' argument order and the certifier's lse
conversions (FlashInfer's base 2 and [n, h]) without a GPU.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # loaded as a file (mla certify --python FILE.py:ATTR): find the siblings
    sys.path.insert(0, _HERE)

import standin_merge as standin  # noqa: E402
from mla_door.adapters import merge_states  # noqa: E402

VLLM = merge_states.make_vllm(standin.vllm_library(), name="vllm_merge_cpu_standin")
FLASHINFER = merge_states.make_flashinfer(standin.flashinfer_library(), name="flashinfer_merge_cpu_standin")
BUG_BOTH_EMPTY_NAN = merge_states.make_vllm(standin.vllm_library("both_empty_nan"), name="vllm_merge_cpu_bug_both_empty_nan")
BUG_POS_INF_AS_NUMBER = merge_states.make_vllm(standin.vllm_library("pos_inf_as_number"),
                                               name="vllm_merge_cpu_bug_pos_inf_as_number")
BUG_NATURAL_EXP = merge_states.make_flashinfer(standin.flashinfer_library("natural_exp"),
                                               name="flashinfer_merge_cpu_bug_natural_exp")
