"""FlashAttention's varlen forward (`flash_attn_varlen_func`) as an MLA prefill behind the Python door.

    mla certify --python mla_door.adapters.flash_attn:fa2      # flash_attn (FlashAttention 2)
    mla certify --python mla_door.adapters.flash_attn:fa3      # flash_attn_interface (FlashAttention 3)

MLA's prefill in the MHA form is how vLLM and SGLang call FlashAttention (kernels/plugin/
README.md, "Prefill"): per head q and k of 192 values (nope 128 | rope 64), v of 128, one varlen
call over the ragged batch with `cu_seqlens_q` / `cu_seqlens_k` and their maxima, the layer's
softmax scale, causal for new tokens and non-causal for a cached context chunk. Both versions
align the causal mask bottom-right (FlashAttention 2 since 2.1) and return, beside `out`
[total_q, h, d_v] in q's dtype, a natural-log lse laid out [h, total_q]. They differ in what the
certifier must be told, and the adapter declares exactly that:

- FlashAttention 2 needs V as wide as q·k: V is handed over padded with zeros to 192 and `out`
  comes back 192 wide (`v_padded`; vLLM pads it the same way); a row that attends nothing has lse
  +inf. `flash_attn_varlen_func(..., return_attn_probs=True)` returns (out, lse, probabilities).
- FlashAttention 3 takes V 128 wide beside a 192-wide q·k and writes -inf for an empty row; its
  `flash_attn_varlen_func` returns (out, lse) (with `return_attn_probs=True` where the installed
  version has that argument, which later versions need to return lse at all).

Operands are bf16 and P is rounded to bf16 before P·V, accumulation float32: the precision class
bf16 / f32 with a bf16 out. The adapter does the layout work only; the certifier converts lse
and cuts the padded out itself.
"""
from __future__ import annotations

from typing import Optional

import mla_door
from mla_door.adapters import availability, open_library, takes_argument

MODULES = {2: "flash_attn", 3: "flash_attn_interface"}


def make(lib=None, version: int = 2, name: Optional[str] = None) -> mla_door.Kernel:
    """The FlashAttention `version` (2 or 3) prefill: `lib` the module holding
    flash_attn_varlen_func (None: import it) or a stand-in with its API (a `BACKEND` attribute
    says where it runs, "cpu")."""
    if version not in MODULES:
        raise ValueError(f"FlashAttention version {version}: 2 or 3")
    module = MODULES[version]
    lib, why_not, backend, lib_version = open_library(lib, module)
    takes_probs = lib is not None and takes_argument(lib.flash_attn_varlen_func, "return_attn_probs")

    def prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, call) -> None:
        import torch

        lengths_q = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]) if call.batch else cu_seqlens_q[:0]
        lengths_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]) if call.batch else cu_seqlens_k[:0]
        max_q = int(lengths_q.max()) if lengths_q.numel() else 0
        max_k = int(lengths_k.max()) if lengths_k.numel() else 0
        extra = {"return_attn_probs": True} if takes_probs else {}
        res = lib.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k,
                                         softmax_scale=call.softmax_scale, causal=call.causal, **extra)
        if not isinstance(res, (tuple, list)) or len(res) < 2:
            raise RuntimeError(f"{module}.flash_attn_varlen_func returned no lse (got {type(res).__name__})")
        o, l = res[0], res[1]
        out.copy_(o.to(out.dtype))
        lse.copy_(l.to(torch.float32).reshape(lse.shape))

    entry = mla_door.Prefill(
        name=name or f"flash_attn{version}_varlen",
        description=f"FlashAttention {version} flash_attn_varlen_func ({module} {lib_version}), MHA-form MLA prefill",
        prefill=prefill,
        out_dtype="bf16",
        conventions=mla_door.PrefillConventions(lse_base="e", lse_layout="[b,h,s_q]",
                                                empty_row_lse="+inf" if version == 2 else "-inf",
                                                v_padded=version == 2, causal_alignment="bottom_right"),
        precision=mla_door.Precision(operands="bf16", accumulate="f32"),
    )
    return mla_door.Kernel(
        name=name or f"flash_attn{version}_varlen",  # no decode: the name is the prefill's alone
        version=lib_version,
        description=f"FlashAttention {version} ({module}) prefill",
        backend=backend,
        prefill=entry,
        unavailable=availability(why_not, backend, module),
    )


def fa2() -> mla_door.Kernel:
    return make(version=2)


def fa3() -> mla_door.Kernel:
    return make(version=3)
