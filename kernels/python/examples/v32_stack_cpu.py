"""V3.2's sparse path as one kernel through the door (mla_door.stack): DeepGEMM's indexer logits,
FlashInfer's top-k and FlashMLA's sparse prefill, each through its adapter over its CPU stand-in.

    mla certify --python kernels/python/examples/v32_stack_cpu.py:STACK --family fresh                    # green
    mla certify --python kernels/python/examples/v32_stack_cpu.py:BUG_ATTENTION_LSE_BASE2 --family fresh  # red
    mla certify --python kernels/python/examples/v32_stack_cpu.py:BUG_LOGITS_NO_RELU --family fresh       # red

Each entry is certified as its own implementation (v32_stack_cpu_standin_indexer_logits, _topk,
_sparse_prefill); the sparse prefill is also certified on the chain cases (sparse_chain_*), where the
stack's own logits and top-k selection feed it, each link judged before its output is handed on.
With the real libraries installed, the same call stacks them: mla_door.stack(name,
deepgemm.kernel(), flashinfer_topk.kernel(), flashmla.sparse_prefill()).
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # loaded as a file (mla certify --python FILE.py:ATTR): find the siblings
    sys.path.insert(0, _HERE)

import mla_door  # noqa: E402
import standin_deep_gemm  # noqa: E402
import standin_flash_mla_sparse  # noqa: E402
import standin_flashinfer_topk  # noqa: E402
from mla_door.adapters import deepgemm, flashinfer_topk, flashmla  # noqa: E402


def _stack(name, attention_bug=None, logits_bug=None):
    return mla_door.stack(name, deepgemm.make(standin_deep_gemm.make(logits_bug), name=name + "_logits"),
                          flashinfer_topk.make(standin_flashinfer_topk.library(), name=name + "_select"),
                          flashmla.make_sparse_prefill(standin_flash_mla_sparse.library(attention_bug),
                                                       name=name + "_attention"))


STACK = _stack("v32_stack_cpu_standin")
# A bug in the last link: red on its own cases and on the chain's.
BUG_ATTENTION_LSE_BASE2 = _stack("v32_stack_cpu_bug_attention_lse_base2", "lse_base2")
# A bug in the first link: red on the indexer's own cases, and the chain's rows red naming that link
# (its wrong logits are never handed on to be judged as the attention's fault).
BUG_LOGITS_NO_RELU = _stack("v32_stack_cpu_bug_logits_no_relu", logits_bug="no_relu")
