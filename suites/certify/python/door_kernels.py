"""Kernels the door's tests certify through `mla certify --python`: the suite's canonical torch
decode, and variants of it that each carry one fault the certifier must name
(suites/certify/test_certify_python.cpp)."""
import ctypes
import os
import signal
import sys

import torch

import mla_door
from mla_door import Caps, Kernel


# The suite's canonical torch decode (kernels/python/examples/torch_mla.py) is the correct code
# every variant below starts from.
# Found next to the door the certifier runs (kernels/python), wherever this file is copied.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(mla_door.__file__))), "examples"))
from torch_mla import decode as reference_decode  # noqa: E402

CAPS = Caps(cache_formats=("bf16",), dense=True, sparse=True, heads=(1, 128), s_q=(1, 64))
GOOD = Kernel(name="door_good", version="1", description="plain torch decode, canonical conventions",
              decode=reference_decode, caps=CAPS)


def _writes_past_out(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call):
    reference_decode(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call)
    ctypes.memset(out.data_ptr() + out.numel() * out.element_size(), 0x5A, 64)  # a native overrun


def _changes_q(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call):
    reference_decode(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call)
    q[0, 0, 0, 0] = q[0, 0, 0, 0] + 1


_calls = [0]


def _drifts(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call):
    reference_decode(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call)
    _calls[0] += 1
    if _calls[0] >= 3:  # state kept across calls: a later call's bits differ
        out.view(-1)[-1] += 0.5


def _raises(*args):
    # A control sequence and a non-ASCII letter: the certificate shows the first escaped, the second as it is.
    raise ValueError("the door's test kernel refuses to work \x1b[2J, déjà vu")


def _killed(*args):
    os.kill(os.getpid(), signal.SIGKILL)


def _variant(name, decode, **kw):
    return Kernel(name=name, version="1", description=f"door test: {name}", decode=decode,
                  caps=kw.pop("caps", CAPS), **kw)


WRITES_PAST_OUT = _variant("door_writes_past_out", _writes_past_out)
CHANGES_Q = _variant("door_changes_q", _changes_q)
DRIFTS = _variant("door_drifts", _drifts)
RAISES = _variant("door_raises", _raises)
KILLED = _variant("door_killed", _killed)
BAD_HEADS = _variant("door_bad_heads", reference_decode, caps=Caps(heads=(0, 128)))


def _via_cpu(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call):
    """A "cuda" kernel for the door's tests: computes on the CPU, writes its device outputs."""
    o, l = out.cpu(), lse.cpu()
    reference_decode(q.cpu(), kv_cache.cpu(), block_table.cpu(), cache_seqlens.cpu(),
                     None if indices is None else indices.cpu(), o, l, call)
    out.copy_(o)
    lse.copy_(l)


def _cuda_changes_q(q, *rest):
    _via_cpu(q, *rest)
    q[0, 0, 0, 0] = q[0, 0, 0, 0] + 1  # its device copy of q: the door carries the change back


CUDA = _variant("door_cuda", _via_cpu, backend="cuda")
CUDA_CHANGES_Q = _variant("door_cuda_changes_q", _cuda_changes_q, backend="cuda")


def make_good():
    """A zero-argument callable returning a Kernel (how an adapter imports its library lazily)."""
    return GOOD


NOT_A_KERNEL = 42


def _only_three_heads(shape):
    return None if shape.heads == 3 else f"this test kernel does {shape.heads} heads only as 3"


CLAIMS_THREE_HEADS = _variant("door_three_heads", reference_decode, can_implement=_only_three_heads)


def _refuses(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call):
    raise mla_door.Unsupported(f"page size {call.page_size} not today")


REFUSES = _variant("door_refuses", _refuses)
