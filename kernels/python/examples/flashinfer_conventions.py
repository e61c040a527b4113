"""A torch CPU MLA decode in FlashInfer's conventions, certified through the host's conversions.

    mla certify --python kernels/python/examples/flashinfer_conventions.py:KERNEL

FlashInfer's MLA decode (docs/field.md, "The peers' conventions") returns the lse in base 2,
shaped [b, s_q, h], with -inf for a row that attends nothing, and takes sparse indices as global
cache slots (block * page_size + offset) with -1 the only invalid value. This kernel speaks
exactly that and DECLARES it (`Conventions` below): the certifier hands it global slots and
converts its lse back before judging, so it certifies with no conversion written by hand.
KERNEL_UNDECLARED is the same code declaring the suite's canonical conventions, as an adapter
that forgot to declare would: it is read with the wrong base, layout and empty-row value, and
handed positions and the goldens' many invalid markers as if they were slots, and certifies red.

The math is torch_mla's (the suite's canonical torch decode): the same gather, token decode and
attention core, so the two differ only in what crosses the boundary.
"""
from __future__ import annotations

import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_mla  # noqa: E402

import mla_door  # noqa: E402


def decode(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call) -> None:
    """out [b, s_q, h, 512]; lse float32 [b, s_q, h] in base 2, -inf for an empty row; indices
    (sparse) global slots, -1 invalid."""
    b, s_q, h, _ = q.shape
    if indices is None:
        o, natural = torch_mla.decode_rows(q, kv_cache, block_table, cache_seqlens, None,
                                           call.softmax_scale, bool(call.causal))
    else:
        qf = q.float()
        o = torch.zeros(b, s_q, h, mla_door.D_V, dtype=torch.float32)
        natural = torch.full((b, h, s_q), math.inf, dtype=torch.float32)
        for i in range(b):
            for s in range(s_q):
                row = indices[i, s].long()
                slots = row[row != -1]       # global slots: read where they point
                keys = torch_mla.token_values(torch_mla.gather_slots(kv_cache, slots))
                o[i, s], natural[i, :, s] = torch_mla.attend(qf[i, s], keys, call.softmax_scale)
    base2 = natural / math.log(2)
    base2[torch.isposinf(natural)] = -math.inf   # an empty row: -inf, as FlashInfer writes it
    out.copy_(o.to(out.dtype))
    lse.copy_(base2.transpose(1, 2))


def _kernel(name: str, description: str, conventions: mla_door.Conventions) -> mla_door.Kernel:
    return mla_door.Kernel(
        name=name, version="1", description=description, decode=decode,
        caps=mla_door.Caps(cache_formats=("bf16", "fp8"), dense=True, sparse=True, varlen=True,
                           heads=(1, 128), s_q=(1, 64)),
        conventions=conventions,
        precision=mla_door.Precision(operands="f32", accumulate="f32"),
    )


KERNEL = _kernel("flashinfer_conventions_cpu",
                 "torch CPU MLA decode in FlashInfer's conventions (lse base 2 [b,s_q,h], -inf empty, global slots)",
                 mla_door.Conventions(lse_base="2", lse_layout="[b,s_q,h]", empty_row_lse="-inf",
                                      indices="global_slots"))
KERNEL_UNDECLARED = _kernel("flashinfer_conventions_undeclared",
                            "the same decode declaring the canonical conventions (red: an adapter that forgot)",
                            mla_door.Conventions())
