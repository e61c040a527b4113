"""vLLM's indexer cache append adapter over the CPU stand-in of its op, and the stand-in's bugs.

    mla certify --python kernels/python/examples/vllm_indexer_cache_cpu.py:KERNEL --family fresh              # green
    mla certify --python kernels/python/examples/vllm_indexer_cache_cpu.py:BUG_SCALE_AFTER_EACH_TOKEN --family fresh

The same adapter (mla_door.adapters.vllm_indexer_cache) certifies the real op where vllm imports;
here it drives standin_vllm_indexer_cache, so CI checks the adapter's call (the cache's view, the
slots, the scale format word) without a GPU. Indexer append cases are drawn at run time only (the
fresh family): their truth is the C++ oracle's bytes.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # loaded as a file (mla certify --python FILE.py:ATTR): find the siblings
    sys.path.insert(0, _HERE)

import standin_vllm_indexer_cache as standin  # noqa: E402
from mla_door.adapters import vllm_indexer_cache  # noqa: E402

KERNEL = vllm_indexer_cache.make(standin.ops(), name="vllm_indexer_cache_cpu_standin")
BUG_SCALE_AFTER_EACH_TOKEN = vllm_indexer_cache.make(standin.ops("scale_after_each_token"),
                                                     name="vllm_indexer_cache_cpu_bug_scale_after_each_token")
BUG_CLAMP_AFTER_DIVIDE = vllm_indexer_cache.make(standin.ops("clamp_after_divide"),
                                                 name="vllm_indexer_cache_cpu_bug_clamp_after_divide")
BUG_WRITES_SKIPPED_SLOTS = vllm_indexer_cache.make(standin.ops("writes_skipped_slots"),
                                                   name="vllm_indexer_cache_cpu_bug_writes_skipped_slots")
