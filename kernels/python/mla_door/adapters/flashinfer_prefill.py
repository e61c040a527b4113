"""FlashInfer's ragged prefill (`flashinfer.BatchPrefillWithRaggedKVCacheWrapper`) as an MLA prefill
behind the Python door.

    mla certify --python mla_door.adapters.flashinfer_prefill:ragged

SGLang's FlashInfer MLA backend runs DeepSeek's prefill in the MHA form through this wrapper
(docs/field.md, "FlashInfer's ragged prefill"): per head q and k of 192 values (nope 128 | rope
64), v of 128 (`head_dim_vo`, no padding), one `plan` per set of lengths with the ragged batch's
`qo_indptr` / `kv_indptr` (the certifier's `cu_seqlens_q` / `cu_seqlens_k`), as many kv heads as
q heads, the layer's softmax scale, causal for new tokens and non-causal for a context chunk;
then `run(q, k, v, return_lse=True)` returns out [total_q, h, 128] in q's dtype and a float32 lse
[total_q, h].

What the certifier must be told, and the adapter declares: the lse is **base 2**
(`log2(d) + m` with the logits pre-scaled by log2 e), laid out [total_q, h] ("[b,s_q,h]" with
b = 1); a row that attends nothing keeps m = -inf with d = 1, so its lse is **-inf** and its out
0; causal rows are aligned bottom-right (query i of s_q sees keys j <= s_k - s_q + i). Operands
bf16, P rounded to bf16 before P·V, accumulation float32: the precision class bf16 / f32 with a
bf16 out. The adapter does the layout work only; the certifier converts the lse itself.
"""
from __future__ import annotations

from typing import Optional

import mla_door
from mla_door.adapters import availability, open_library

MODULE = "flashinfer"
# The workspace FlashInfer's documentation recommends for its split-KV partial results.
WORKSPACE_BYTES = 128 * 1024 * 1024


def make(lib=None, name: Optional[str] = None) -> mla_door.Kernel:
    """The ragged prefill: `lib` the flashinfer module (None: import it) or a stand-in with its
    API (a `BACKEND` attribute says where it runs, "cpu")."""
    lib, why_not, backend, version = open_library(lib, MODULE)
    name = name or "flashinfer_ragged_prefill"
    state = {}

    def wrapper_for(device):
        # One wrapper (and its workspace) per device, as a serving engine keeps it; plan() is
        # called afresh for every call, since every call brings its own lengths.
        if state.get("device") != device:
            import torch
            ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
            state["wrapper"] = lib.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD")
            state["device"] = device
        return state["wrapper"]

    def prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, call) -> None:
        import torch

        w = wrapper_for(q.device)
        w.plan(cu_seqlens_q, cu_seqlens_k, call.heads, call.heads, call.d_qk, head_dim_vo=call.d_v,
               causal=call.causal, sm_scale=call.softmax_scale, q_data_type=q.dtype, kv_data_type=k.dtype)
        res = w.run(q, k, v, return_lse=True)
        if not isinstance(res, (tuple, list)) or len(res) < 2:
            raise RuntimeError(f"{MODULE} BatchPrefillWithRaggedKVCacheWrapper.run returned no lse "
                               f"(got {type(res).__name__})")
        o, s = res[0], res[1]
        out.copy_(o.to(out.dtype))
        lse.copy_(s.to(torch.float32).reshape(lse.shape))

    entry = mla_door.Prefill(
        name=name,
        description=f"FlashInfer BatchPrefillWithRaggedKVCacheWrapper ({MODULE} {version}), MHA-form MLA prefill",
        prefill=prefill,
        out_dtype="bf16",
        conventions=mla_door.PrefillConventions(lse_base="2", lse_layout="[b,s_q,h]", empty_row_lse="-inf",
                                                v_padded=False, causal_alignment="bottom_right"),
        precision=mla_door.Precision(operands="bf16", accumulate="f32"),
    )
    return mla_door.Kernel(
        name=name,  # no decode: the name is the prefill's alone
        version=version,
        description=f"FlashInfer ragged prefill ({MODULE})",
        backend=backend,
        prefill=entry,
        unavailable=availability(why_not, backend, MODULE),
    )


def ragged() -> mla_door.Kernel:
    return make()
