"""vLLM's top-k adapter over the CPU stand-in of its op, and the stand-in's bug variants.

    mla certify --python kernels/python/examples/vllm_topk_cpu.py:KERNEL --family fresh          # green
    mla certify --python kernels/python/examples/vllm_topk_cpu.py:BUG_ABSOLUTE --family fresh    # red

The same adapter (mla_door.adapters.vllm_topk) certifies the real op where vllm imports; here it
drives standin_topk, so CI checks the adapter's call and the certifier's relative-index
conversion without a GPU; its order changes from call to call, as the real op's may, which the
certifier must accept of an unsorted top-k. Top-k cases are drawn at run time only (the fresh family).
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # loaded as a file (mla certify --python FILE.py:ATTR): find the siblings
    sys.path.insert(0, _HERE)

import standin_topk as standin  # noqa: E402
from mla_door.adapters import vllm_topk  # noqa: E402

KERNEL = vllm_topk.make(standin.ops(), name="vllm_topk_cpu_standin")
BUG_ABSOLUTE = vllm_topk.make(standin.ops("absolute_indices"), name="vllm_topk_cpu_bug_absolute_indices")
BUG_KEEPS_MASKED = vllm_topk.make(standin.ops("keeps_masked"), name="vllm_topk_cpu_bug_keeps_masked")
BUG_SECOND_CALL_DIFFERS = vllm_topk.make(standin.ops("second_call_differs"), name="vllm_topk_cpu_bug_second_call_differs")
