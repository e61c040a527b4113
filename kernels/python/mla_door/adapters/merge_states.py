"""The field's merges of two attention states behind the Python door, as they are.

    mla certify --python mla_door.adapters.merge_states:vllm         # vLLM's merge_attn_states
    mla certify --python mla_door.adapters.merge_states:flashinfer   # FlashInfer's merge_state

Chunked prefill folds each cached context chunk's partial attention into the new tokens' part with
one of these (kernels/plugin/README.md, "Merge"). What each takes, as the adapter calls it:

- vLLM, `vllm.attention.ops.merge_attn_states.merge_attn_states(output, prefix_output,
  prefix_lse, suffix_output, suffix_lse, output_lse=None)`: outs [n, h, d], lse [h, n] natural
  log (float32), the merged state written into `output` and `output_lse`; an infinite lse is an
  empty side. Canonical conventions: nothing to declare.
- FlashInfer, `flashinfer.merge_state(v_a, s_a, v_b, s_b) -> (v, s)`: outs [n, h, d], lse
  [n, h] in base 2 (float32), the merged state returned. Declared: base 2, [n, h].

The adapter does the layout work only (argument order, copying a returned state into the
certifier's buffers); the certifier converts lse itself.
"""
from __future__ import annotations

from typing import Optional

import mla_door
from mla_door.adapters import availability, open_library

VLLM_MODULE = "vllm.attention.ops.merge_attn_states"
FLASHINFER_MODULE = "flashinfer"


def make_vllm(lib=None, name: Optional[str] = None) -> mla_door.Kernel:
    """vLLM's merge: `lib` the module holding merge_attn_states (None: import it) or a stand-in."""
    lib, why_not, backend, version = open_library(lib, VLLM_MODULE)
    name = name or "vllm_merge_attn_states"

    def merge(out_a, lse_a, out_b, lse_b, out, lse, call) -> None:
        lib.merge_attn_states(out, out_a, lse_a, out_b, lse_b, lse)

    return mla_door.Kernel(
        name=name, version=version, description=f"vLLM merge_attn_states ({VLLM_MODULE} {version})", backend=backend,
        merge=mla_door.Merge(name=name, description="vLLM merge_attn_states: natural-log lse [h, n]", merge=merge,
                             dtypes=("bf16", "f16", "f32")),
        unavailable=availability(why_not, backend, VLLM_MODULE))


def make_flashinfer(lib=None, name: Optional[str] = None) -> mla_door.Kernel:
    """FlashInfer's merge_state: `lib` the flashinfer module (None: import it) or a stand-in."""
    lib, why_not, backend, version = open_library(lib, FLASHINFER_MODULE)
    name = name or "flashinfer_merge_state"

    def merge(out_a, lse_a, out_b, lse_b, out, lse, call) -> None:
        v, s = lib.merge_state(out_a, lse_a, out_b, lse_b)
        out.copy_(v.to(out.dtype))
        lse.copy_(s.float())

    return mla_door.Kernel(
        name=name, version=version, description=f"FlashInfer merge_state ({FLASHINFER_MODULE} {version})",
        backend=backend,
        merge=mla_door.Merge(name=name, description="FlashInfer merge_state: base-2 lse [n, h]", merge=merge,
                             dtypes=("bf16", "f16"),
                             conventions=mla_door.MergeConventions(lse_base="2", lse_layout="[n,h]")),
        unavailable=availability(why_not, backend, FLASHINFER_MODULE))


def vllm() -> mla_door.Kernel:
    return make_vllm()


def flashinfer() -> mla_door.Kernel:
    return make_flashinfer()
