"""DeepGEMM's indexer logits adapter over the CPU stand-in of its calls, and the bug variants.

    mla certify --python kernels/python/examples/deepgemm_cpu.py:KERNEL --family indexer --family fresh     # green
    mla certify --python kernels/python/examples/deepgemm_cpu.py:BUG_NO_RELU --family indexer --family fresh  # red

The same adapter (mla_door.adapters.deepgemm) certifies the real library where deep_gemm imports;
here it drives standin_deep_gemm, so CI checks the adapter's calls (the cache's view, the
metadata, clean_logits) without a GPU. UNCLEAN is the correct arithmetic called as vLLM's decode
path calls it (clean_logits=False): finite values past each row's horizon, red by the -inf rule.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # loaded as a file (mla certify --python FILE.py:ATTR): find the siblings
    sys.path.insert(0, _HERE)

import standin_deep_gemm as standin  # noqa: E402
from mla_door.adapters import deepgemm  # noqa: E402

KERNEL = deepgemm.make(standin.make(), name="deepgemm_logits_cpu_standin")
UNCLEAN = deepgemm.make(standin.make(), name="deepgemm_logits_cpu_unclean", clean_logits=False)
BUG_NO_RELU = deepgemm.make(standin.make("no_relu"), name="deepgemm_logits_cpu_bug_no_relu")
BUG_SCALE_AFTER_EACH_TOKEN = deepgemm.make(standin.make("scale_after_each_token"),
                                           name="deepgemm_logits_cpu_bug_scale_after_each_token")
BUG_SEES_NEXT_TOKEN = deepgemm.make(standin.make("sees_next_token"), name="deepgemm_logits_cpu_bug_sees_next_token")
