"""Kernels the door's tests certify through `mla certify --python`: the suite's canonical torch
decode, and variants of it that each carry one fault the certifier must name
(suites/certify/test_certify_python.cpp)."""
import ctypes
import math
import os
import signal
import sys

import torch

import mla_door
from mla_door import D_V, Caps, Kernel


# The suite's canonical torch decode (kernels/python/examples/torch_mla.py) is the correct code
# every variant below starts from.
# Found next to the door the certifier runs (kernels/python), wherever this file is copied.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(mla_door.__file__))), "examples"))
from torch_mla import decode as reference_decode  # noqa: E402
import torch_mla  # noqa: E402

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


# ---- attacks on the verdict: each must be red ---------------------------------------------------
# The catalog is found the way any kernel could find it: the certifier's --goldens on its command
# line (/proc/<parent>/cmdline), relative to its working directory.

def _catalog_dir():
    parent = os.getppid()
    with open(f"/proc/{parent}/cmdline", "rb") as f:
        args = f.read().split(b"\0")
    d = "fixtures/goldens"
    for a, b in zip(args, args[1:]):
        if a == b"--goldens":
            d = b.decode()
    return d if os.path.isabs(d) else os.path.join(os.readlink(f"/proc/{parent}/cwd"), d)


def _catalog_cases():
    """Every case of every file of the catalog (its file open while the case is read)."""
    import h5py
    d = _catalog_dir()
    for name in sorted(os.listdir(d)):
        if not name.endswith(".h5"):
            continue
        with h5py.File(os.path.join(d, name), "r") as f:
            yield from f.get("cases", {}).values()


def _stored_truth(q):
    """The stored truth (out, lse) of the catalog case whose q is this q, or None."""
    import numpy as np
    mine = q.contiguous().view(torch.int16).numpy().view(np.uint16).ravel()
    for case in _catalog_cases():
        if "inputs/q" not in case or case["inputs/q"].size != mine.size:
            continue
        if np.array_equal(case["inputs/q"][()].astype(np.uint16).ravel(), mine):
            return case["truth/out"][()], case["truth/lse"][()]
    return None


def _write_stored(found, out, lse):
    out.copy_(torch.from_numpy(found[0]).reshape(out.shape).to(out.dtype))
    lse.copy_(torch.from_numpy(found[1]).reshape(lse.shape).to(lse.dtype))


def _thief_refuses(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call):
    found = _stored_truth(q)
    if found is None:
        raise mla_door.Unsupported("unsupported shape")
    _write_stored(found, out, lse)


def _attend_no_running_max(q_rows, keys, softmax_scale, visible=None):
    """torch_mla.attend without the running maximum: exp() of the raw float32 logits, right while
    every logit stays below ~88, inf and NaN above."""
    m, n = q_rows.shape[0], keys.shape[0]
    out = torch.zeros(m, D_V, dtype=torch.float32)
    lse = torch.full((m,), math.inf, dtype=torch.float32)
    if m == 0 or n == 0:
        return out, lse
    s = (q_rows @ keys.t()) * torch.tensor(softmax_scale, dtype=torch.float32)
    if visible is not None:
        s = s.masked_fill(~visible, -math.inf)
    live = torch.isfinite(s).any(dim=1)
    e = torch.exp(s[live])
    total = e.sum(dim=1)
    out[live] = (e / total[:, None]) @ keys[:, :D_V]
    lse[live] = torch.log(total)
    return out, lse


def _no_running_max(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call):
    real = torch_mla.attend
    torch_mla.attend = _attend_no_running_max
    try:
        reference_decode(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call)
    finally:
        torch_mla.attend = real


def _thief_hides_overflow(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call):
    found = _stored_truth(q)
    if found is None:
        _no_running_max(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call)
    else:
        _write_stored(found, out, lse)


_memo = {}


def _memo_by_shape(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call):
    """Remembers its answer by everything but q: shape, lengths, block table, indices."""
    key = (tuple(q.shape), tuple(cache_seqlens.tolist()), tuple(block_table.reshape(-1).tolist()),
           None if indices is None else tuple(indices.reshape(-1).tolist()))
    if key in _memo:
        o, l = _memo[key]
        out.copy_(o)
        lse.copy_(l)
        return
    reference_decode(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call)
    _memo[key] = (out.clone(), lse.clone())


def _changes_q_then_refuses(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call):
    q.view(-1)[0] = q.view(-1)[0] + 1
    raise mla_door.Unsupported("unsupported shape")


THIEF_REFUSES = _variant("door_thief_refuses", _thief_refuses)
THIEF_HIDES_OVERFLOW = _variant("door_thief_hides_overflow", _thief_hides_overflow)
MEMO_BY_SHAPE = _variant("door_memo_by_shape", _memo_by_shape)
CHANGES_Q_THEN_REFUSES = _variant("door_changes_q_then_refuses", _changes_q_then_refuses)


def _kills_server(*args):
    """Kills the door's fork server of its own certifier (the process running `child.py serve`
    whose parent is this child's), then decodes correctly: the run must go on without it."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():  # a forked child's command line is its server's
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getppid() and b"serve" in argv and any(a.endswith(b"child.py") for a in argv):
            os.kill(int(pid), signal.SIGKILL)
    reference_decode(*args)


KILLS_SERVER = _variant("door_kills_server", _kills_server)


# ---- the entries' own claims (can_implement on the prefill, merge and sparse prefill) ----------------
import dataclasses  # noqa: E402

import flashmla_sparse_cpu  # noqa: E402  (kernels/python/examples, on the path above)
import merge_cpu  # noqa: E402


def _stored_prefill_shapes():
    """(heads, cu_seqlens_q, cu_seqlens_k) of every stored prefill case of the catalog."""
    shapes = set()
    for case in _catalog_cases():
        kind = case.attrs.get("kind")
        if (kind.decode() if isinstance(kind, bytes) else kind) == "prefill":
            shapes.add((int(case.attrs["heads"]), tuple(int(x) for x in case["inputs/cu_seqlens_q"][()]),
                        tuple(int(x) for x in case["inputs/cu_seqlens_k"][()])))
    return shapes


def _prefill_thief_claims(call):
    if (call.heads, call.cu_seqlens_q, call.cu_seqlens_k) in _stored_prefill_shapes():
        return None
    return "only the shapes of the catalog's cases"


def _prefill_thief(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, call):
    found = _stored_truth(q)
    if found is None:
        raise mla_door.Unsupported("unsupported shape")
    _write_stored(found, out, lse)


# Claims exactly the stored prefill shapes and returns their stored truth: green on every stored
# case it finds, red on each one's fresh twin (the same shape, so claimed), never asked the rest.
PREFILL_THIEF = Kernel(name="door_prefill_thief", version="1", description="door test: stored prefill answers",
                       prefill=mla_door.Prefill(name="door_prefill_thief", description="stored prefill answers",
                                                prefill=_prefill_thief, can_implement=_prefill_thief_claims))


def _merge_128_only(call):
    return None if call.head_dim == 128 else f"this merge joins 128-wide states only ({call.head_dim})"


def _sparse_no_sink(call):
    if call.has_topk_length and len(call.topk_length) != call.s_q:
        raise ValueError(f"shown {len(call.topk_length)} topk_length values for {call.s_q} rows")
    return f"this build has no attention sink ({call.heads} heads)" if call.sink else None


def _entry_with(kernel, entry, name, predicate):
    """`kernel` with its `entry` renamed and given `predicate` as its can_implement."""
    return dataclasses.replace(kernel, name=name, **{entry: dataclasses.replace(getattr(kernel, entry), name=name,
                                                                              can_implement=predicate)})


# Correct kernels whose own can_implement claims less than their declared ranges.
MERGE_128_ONLY = _entry_with(merge_cpu.VLLM, "merge", "door_merge_128_only", _merge_128_only)
SPARSE_NO_SINK = _entry_with(flashmla_sparse_cpu.KERNEL, "sparse_prefill", "door_sparse_no_sink", _sparse_no_sink)

import deepgemm_cpu  # noqa: E402
import vllm_indexer_cache_cpu  # noqa: E402
import vllm_topk_cpu  # noqa: E402


def _topk_long_rows(call):
    if len(call.starts) != call.rows or len(call.ends) != call.rows:
        raise ValueError(f"shown {len(call.starts)} starts and {len(call.ends)} ends for {call.rows} rows")
    if any(e - s >= call.k for s, e in zip(call.starts, call.ends)):
        return None
    return f"this top-k needs a row of at least k = {call.k} positions"


def _logits_next_n_2(call):
    shown = call.context_lens if call.layout == "paged" else call.ks
    if len(shown) != call.batch:
        raise ValueError(f"shown {len(shown)} lengths for a batch of {call.batch}")
    return "paged logits of the speculative step only" if call.layout == "paged" and call.next_n == 1 else None


def _append_blocks_of_64(call):
    return None if call.block_size == 64 else f"blocks of 64 tokens only ({call.block_size})"


TOPK_LONG_ROWS = _entry_with(vllm_topk_cpu.KERNEL, "topk", "door_topk_long_rows", _topk_long_rows)
LOGITS_NEXT_N_2 = _entry_with(deepgemm_cpu.KERNEL, "indexer_logits", "door_logits_next_n_2", _logits_next_n_2)
APPEND_BLOCKS_OF_64 = _entry_with(vllm_indexer_cache_cpu.KERNEL, "indexer_append", "door_append_blocks_of_64",
                                  _append_blocks_of_64)
