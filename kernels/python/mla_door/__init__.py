"""mla_door: certify an MLA decode or prefill kernel written in Python (torch) with `mla certify --python`.

A kernel is a `Kernel` object (or a zero-argument callable returning one) that a module or a
file exposes under a name:

    mla certify --python my_pkg.my_mod:KERNEL      # imported as a module
    mla certify --python path/to/file.py:KERNEL    # loaded from the file

It declares the same facts as a C plug-in's descriptor (kernels/plugin/include/mla/plugin/
mla_plugin.h): who it is, what it claims, its conventions and its precision class. The C++
certifier validates the declaration, decides what to run, owns every input and output buffer
and judges the results; this package only runs in the certifier's child process, calls the
kernel and writes nothing but the outputs (and a bounded message) back.

A kernel may also have a prefill in the MHA form (`Prefill`), a merge of two attention states
(`Merge`), V3.2's top-k over the indexer's logits (`Topk`), the indexer's logits themselves
(`IndexerLogits`), the append of its keys into their 132-byte cache (`IndexerAppend`) and
FlashMLA's sparse prefill (`SparsePrefill`; their docstrings have the signatures), each certified as an implementation of
its own; a kernel without a decode leaves `decode` out.

The one signature of a decode:

    decode(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call) -> None

    q              torch.bfloat16 [batch, s_q, heads, 576]        (the absorbed query)
    kv_cache       torch.uint8    [num_blocks, page_size, bytes]  1152 bytes per token (bf16 cache:
                                  576 bf16 values; `bf16_cache(kv_cache)` views it as
                                  torch.bfloat16 [num_blocks, page_size, 576]) or 656 (the FP8
                                  token: 512 e4m3 | 4 float32 scales | 64 bf16 rope)
    block_table    torch.int32    [batch, max_blocks]
    cache_seqlens  torch.int32    [batch]
    indices        torch.int32    [batch, s_q, topk], or None when the call is dense (topk == 0);
                                  numbered as the kernel's conventions say (positions, or global
                                  slots with -1 the only invalid value)
    out            [batch, s_q, heads, 512], dtype of `out_dtype`: WRITE EVERY ELEMENT, in place
    lse            torch.float32, [batch, heads, s_q] or [batch, s_q, heads] as the conventions
                   say: WRITE EVERY ELEMENT, in place
    call           a `Call`: the shape, the softmax scale, causal, cache and scale format

Inputs are read-only (the certifier compares them byte for byte after every call). On the CPU
every tensor is a zero-copy view of the certifier's shared buffers. A kernel with backend "cuda"
gets tensors on the current CUDA device: the door copies the inputs there before the call and
the outputs back after it (documented, not zero-copy: the shared buffers are host memory;
torch.cuda.synchronize() before the outputs are written back; MLA_DOOR_DEVICE=cpu takes the same
copy path on the CPU, which is how the suite tests it without a GPU). Without a CUDA device such a
kernel's cases are SKIPPED with the reason.
The call must be deterministic: the certifier calls several times, in two processes, and
compares bit for bit. Raise `Unsupported(reason)` to refuse a shape at call time (recorded
UNSUPPORTED); any other exception is the kernel's ERROR with its message.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Tuple

# Words of the wire format, spelled as the C++ host spells them (mla/core/conventions.hpp,
# mla/core/precision.hpp, mla/core/kernel.hpp): one spelling of each fact in the suite.
CACHE_FORMATS = ("bf16", "fp8")
OUT_DTYPES = ("f32", "bf16")
LSE_BASES = ("e", "2")
LSE_LAYOUTS = ("[b,h,s_q]", "[b,s_q,h]")
EMPTY_ROW_LSES = ("+inf", "-inf")
INDEX_NUMBERINGS = ("positions", "global_slots")
PRECISIONS = ("f64", "f32", "bf16")
BACKENDS = ("cpu", "cuda")

D_QK, D_V, D_ROPE = 576, 512, 64
BF16_TOKEN_BYTES, FP8_TOKEN_BYTES = 1152, 656


class Unsupported(Exception):
    """Raised by decode (or returned as a reason by can_implement) to refuse a shape."""


@dataclass(frozen=True)
class Caps:
    """What the kernel claims; the certifier runs nothing outside it (NOT_CLAIMED)."""

    cache_formats: Tuple[str, ...] = ("bf16",)
    dense: bool = True
    sparse: bool = False
    varlen: bool = True
    heads: Tuple[int, int] = (1, 128)      # inclusive range
    s_q: Tuple[int, int] = (1, 64)         # inclusive range: query tokens per sequence per call
    page_sizes: Tuple[int, ...] = ()       # empty: any page size


@dataclass(frozen=True)
class Conventions:
    """How lse and sparse indices cross the boundary; the host converts (kernels/plugin/README.md, "Conventions")."""

    lse_base: str = "e"
    lse_layout: str = "[b,h,s_q]"
    empty_row_lse: str = "+inf"
    indices: str = "positions"


@dataclass(frozen=True)
class Precision:
    """The precision class besides the output dtype: what the products read, what they sum in."""

    operands: str = "f32"
    accumulate: str = "f32"


@dataclass(frozen=True)
class Shape:
    """What can_implement sees: the call's shape before any data exists."""

    batch: int
    s_q: int
    heads: int
    d_qk: int
    d_v: int
    page_size: int
    num_blocks: int
    max_blocks: int
    topk: int               # 0: dense
    cache_format: str       # "bf16" | "fp8"
    causal: bool
    scale_fmt: str          # "fp32" | "ue8m0" for an FP8 cache, "" for bf16
    # The cache length of every sequence (can_implement sees them; () in a Call, whose tensors
    # hold them). A shape can_implement accepts and decode then refuses is a broken claim: FAIL.
    cache_seqlens: Tuple[int, ...] = ()


@dataclass(frozen=True)
class Call(Shape):
    """What decode is told besides its tensors."""

    softmax_scale: float = 0.0


@dataclass(frozen=True)
class PrefillCaps:
    """What a prefill claims (the calls it takes); the certifier runs nothing outside it."""

    heads: Tuple[int, int] = (1, 128)      # inclusive range
    causal: bool = True                    # causal calls (aligned as its conventions say)
    non_causal: bool = True                # context-chunk calls
    varlen: bool = True                    # sequences of different lengths in one batch
    max_total_tokens: int = 1 << 20        # query rows, and key rows, of one call


@dataclass(frozen=True)
class PrefillConventions:
    """How a prefill's lse, V and mask cross the boundary; the host converts (kernels/plugin/README.md,
    "Prefill"). The lse layout's words are decode's with b = 1 and s_q = total_q: "[b,h,s_q]" is
    [heads, total_q] (FlashAttention's), "[b,s_q,h]" is [total_q, heads] (FlashInfer's)."""

    lse_base: str = "e"                    # "e" | "2"
    lse_layout: str = "[b,h,s_q]"
    empty_row_lse: str = "+inf"            # "+inf" (FA2) | "-inf" (FA3)
    v_padded: bool = False                 # V handed over padded with zeros to 192, out written 192 wide
    causal_alignment: str = "bottom_right"  # "bottom_right" | "top_left" (FlashAttention < 2.1)


@dataclass(frozen=True)
class PrefillCall:
    """What a prefill is told besides its tensors."""

    batch: int
    heads: int
    total_q: int
    total_k: int
    d_qk: int              # 192
    d_v: int               # 128, or 192 when the conventions say v_padded
    causal: bool
    softmax_scale: float   # 192^-0.5 · mscale²: use it as given
    # The sequence boundaries (can_implement sees them; () in a call, whose tensors hold them).
    cu_seqlens_q: Tuple[int, ...] = ()
    cu_seqlens_k: Tuple[int, ...] = ()


@dataclass(frozen=True)
class Prefill:
    """A prefill in the MHA form: its own implementation in the certificate, under its own name.

        prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, call) -> None

        q             torch.bfloat16 [total_q, heads, 192]   (q_nope 128 | q_pe 64)
        k             torch.bfloat16 [total_k, heads, 192]   (k_nope 128 | k_pe 64, k_pe the same for every head)
        v             torch.bfloat16 [total_k, heads, d_v]
        cu_seqlens_q  torch.int32 [batch + 1]
        cu_seqlens_k  torch.int32 [batch + 1]
        out           [total_q, heads, d_v], dtype of `out_dtype`: WRITE EVERY ELEMENT, in place
        lse           torch.float32 [heads, total_q] or [total_q, heads] as the conventions say:
                      WRITE EVERY ELEMENT, in place
        call          a `PrefillCall`

    Causal (bottom-right): query i of a sequence with s_q queries and s_k keys attends keys
    j <= s_k - s_q + i; a row that attends nothing has out 0 and lse +inf (or the declared -inf).
    Inputs read-only, deterministic calls, `Unsupported` to refuse: as for decode."""

    name: str                                   # [a-z0-9_]+, not the decode's
    description: str
    prefill: Callable
    out_dtype: str = "f32"                      # "f32" | "bf16"
    caps: PrefillCaps = field(default_factory=PrefillCaps)
    conventions: PrefillConventions = field(default_factory=PrefillConventions)
    precision: Optional[Precision] = None       # None: the class out_dtype implies
    # Optional: PrefillCall (with its cu_seqlens, before any data) -> None (implemented) or a
    # reason string (not claimed, never counted); a call it accepts and prefill then refuses is
    # a broken claim: FAIL. Each stored case is also run on its fresh twin of the same shape.
    can_implement: Optional[Callable[[PrefillCall], Optional[str]]] = None


@dataclass(frozen=True)
class MergeConventions:
    """How a merge's lse crosses the boundary (inputs and output): base and layout, and what it
    writes when both sides are empty; the host converts."""

    lse_base: str = "e"                    # "e" | "2" (FlashInfer's merge_state)
    lse_layout: str = "[h,n]"              # "[h,n]" (vLLM's) | "[n,h]" (FlashInfer's)
    both_empty_lse: str = "-inf"           # "-inf" | "+inf"


@dataclass(frozen=True)
class MergeCall:
    """What a merge is told besides its tensors."""

    tokens: int
    heads: int
    head_dim: int
    dtype: str             # "bf16" | "f16" | "f32": the partial and merged outs'


@dataclass(frozen=True)
class Merge:
    """Two partial attention states over disjoint keys merged into one: its own implementation in
    the certificate, under its own name.

        merge(out_a, lse_a, out_b, lse_b, out, lse, call) -> None

        out_a, out_b  [tokens, heads, head_dim] of the state dtype (bf16, f16 or f32)
        lse_a, lse_b  torch.float32 [heads, tokens] or [tokens, heads] as the conventions say
        out, lse      the merged state, the same shapes: WRITE EVERY ELEMENT, in place
        call          a `MergeCall`

    lse = log(e^lse_a + e^lse_b), out = e^(lse_a - lse)·out_a + e^(lse_b - lse)·out_b. An infinite
    input lse (+inf or -inf) is a side that attended nothing: weight 0, its out never read (it may
    hold NaN). Both sides empty: out 0, lse -inf (or the declared +inf), never NaN."""

    name: str                                   # [a-z0-9_]+, not another entry's
    description: str
    merge: Callable
    dtypes: Tuple[str, ...] = ("bf16", "f16", "f32")
    head_dims: Tuple[int, ...] = ()             # empty: any
    conventions: MergeConventions = field(default_factory=MergeConventions)
    # Optional: MergeCall -> None (implemented) or a reason string, as Prefill's.
    can_implement: Optional[Callable[[MergeCall], Optional[str]]] = None


@dataclass(frozen=True)
class TopkCall:
    """What a top-k is told besides its tensors."""

    rows: int
    n: int
    k: int
    # Each row's range (can_implement sees them; () in a call, whose tensors hold them).
    starts: Tuple[int, ...] = ()
    ends: Tuple[int, ...] = ()


@dataclass(frozen=True)
class Topk:
    """V3.2's top-k selection over the indexer's logits: its own implementation in the certificate.

        topk(logits, starts, ends, indices, call) -> None

        logits   torch.float32 [rows, n]; row r's valid positions are [starts[r], ends[r]) with a
                 finite logit (-inf: masked); outside the range anything, NaN included: never read
        starts, ends  torch.int32 [rows]
        indices  torch.int32 [rows, k]: WRITE EVERY ELEMENT: min(k, valid) distinct valid positions
                 of the row's k largest, then -1
        call     a `TopkCall`"""

    name: str                                   # [a-z0-9_]+, not another entry's
    description: str
    topk: Callable
    ks: Tuple[int, ...] = ()                    # the k it supports; empty: any
    max_n: int = 0                              # the longest row; 0: any
    index_base: str = "absolute"                # "absolute" | "relative" (to the row's start: vLLM's)
    sorted: bool = False                        # True: by descending logit (then held to it)
    precision: str = "f32"                      # "f32" | "bf16": what its comparisons see
    # True: claims only rows whose every position in [start, end) is finite (the range is the
    # causal horizon, as V3.2's sparse attention calls it); it is then given no masked position
    # inside a range. False: masked positions in range, never to be selected.
    range_all_valid: bool = False
    # Optional: TopkCall (with starts and ends) -> None (implemented) or a reason, as Prefill's.
    can_implement: Optional[Callable[[TopkCall], Optional[str]]] = None


@dataclass(frozen=True)
class IndexerLogitsCall:
    """What an indexer logits call is told besides its tensors (mla/core/indexer_logits.hpp)."""

    layout: str       # "paged" | "ragged"
    batch: int        # paged: sequences; ragged: query rows
    next_n: int       # paged: 1 or 2; ragged: 1
    heads: int
    rows: int         # the logits' rows: batch * next_n (paged) or batch (ragged)
    cols: int         # the logits' width: max_context (paged) or num_keys (ragged)
    block_size: int   # paged; 0 for ragged
    max_context: int  # paged; 0 for ragged
    num_keys: int     # ragged; 0 for paged
    # The lengths (can_implement sees them; () in a call, whose tensors hold them): context_lens
    # for paged, ks and ke for ragged.
    context_lens: Tuple[int, ...] = ()
    ks: Tuple[int, ...] = ()
    ke: Tuple[int, ...] = ()


@dataclass(frozen=True)
class IndexerLogits:
    """V3.2's lightning-indexer logits: its own implementation in the certificate.

        logits[r, p] = k_scale[p] * sum_h weights[r, h] * relu(q8[r, h] . k8[p])

    q8, k8 the e4m3 values of the codes (128 per head and key; `e4m3(t)` views a uint8 tensor as
    torch.float8_e4m3fn where torch has it); q has no scale of its own (V3.2 folds it into the
    weights). Give `paged`, `ragged` or both (DeepGEMM's two calls, in their argument order):

        paged(q, kv_cache, weights, context_lens, block_table, logits, call) -> None
            q             torch.uint8   [batch, next_n, heads, 128] e4m3 codes
            kv_cache      torch.uint8   [num_blocks, block_size * 132]: per block every token's
                                        128 codes, then every token's float32 scale
            weights       torch.float32 [batch * next_n, heads]
            context_lens  torch.int32   [batch]; row i of next_n sees [0, ctx - next_n + i + 1)
            block_table   torch.int32   [batch, max_blocks]
            logits        torch.float32 [batch * next_n, max_context]: WRITE EVERY ELEMENT

        ragged(q, k_codes, k_scales, weights, ks, ke, logits, call) -> None
            q             torch.uint8   [rows, heads, 128]
            k_codes       torch.uint8   [num_keys, 128];  k_scales torch.float32 [num_keys]
            weights       torch.float32 [rows, heads]
            ks, ke        torch.int32   [rows]: row r sees [ks[r], ke[r])
            logits        torch.float32 [rows, num_keys]: WRITE EVERY ELEMENT

    Outside its row's range every logit is -inf (DeepGEMM's clean_logits=True), inside finite.
    `call` is an `IndexerLogitsCall`."""

    name: str                                   # [a-z0-9_]+, not another entry's
    description: str
    paged: Optional[Callable] = None
    ragged: Optional[Callable] = None
    next_ns: Tuple[int, ...] = ()               # paged next_n it takes (1, 2); empty: both
    heads: Tuple[int, ...] = ()                 # empty: any
    block_sizes: Tuple[int, ...] = ()           # paged; empty: any
    max_context: int = 0                        # the widest logits row; 0: any
    # Optional: IndexerLogitsCall (with its lengths) -> None (implemented) or a reason, as Prefill's.
    can_implement: Optional[Callable[[IndexerLogitsCall], Optional[str]]] = None


@dataclass(frozen=True)
class IndexerAppendCall:
    """What an indexer append is told besides its tensors (mla/core/indexer_cache.hpp)."""

    num_tokens: int
    num_blocks: int
    block_size: int
    scale_fmt: str    # "fp32" | "ue8m0"


@dataclass(frozen=True)
class IndexerAppend:
    """V3.2's indexer keys into their paged 132-byte FP8 cache: its own implementation.

        append(keys, slot_mapping, kv_cache, call) -> None

        keys          torch.bfloat16 [num_tokens, 128] (normalized, rotated: the append only
                      quantizes and stores)
        slot_mapping  torch.int64    [num_tokens]; slot = block * block_size + offset, < 0: skip
        kv_cache      torch.uint8    [num_blocks, block_size * 132], WRITTEN IN PLACE: per block
                      every token's 128 e4m3 codes, then every token's float32 scale; a byte no
                      token of the call owns keeps its value
        call          an `IndexerAppendCall`

    Per token s = max(amax, 1e-4) / 448 in float32 (`fp32_scale_op` "divide", vLLM's) or
    max(amax, 1e-4) * float32(1/448) ("times_reciprocal", DeepSeek's act_quant); ue8m0 rounds s up
    to a power of two; codes e4m3(k / s), nearest even, saturated to 448."""

    name: str                                   # [a-z0-9_]+, not another entry's
    description: str
    append: Callable
    scale_fmts: Tuple[str, ...] = ("fp32", "ue8m0")
    block_sizes: Tuple[int, ...] = ()           # empty: any
    fp32_scale_op: str = "divide"               # "divide" | "times_reciprocal"
    # Optional: IndexerAppendCall -> None (implemented) or a reason, as Prefill's.
    can_implement: Optional[Callable[[IndexerAppendCall], Optional[str]]] = None


@dataclass(frozen=True)
class SparsePrefillCall:
    """What a sparse prefill is told besides its tensors (mla/core/sparse_prefill.hpp)."""

    s_q: int
    s_kv: int
    heads: int
    d_qk: int          # 576 or 512
    topk: int
    sm_scale: float
    d_v: int = 512
    sink: bool = False             # the call has an attention sink
    has_topk_length: bool = False  # the call has topk_length
    # Its values (can_implement sees them when the call has one; () in a call, whose tensor holds them).
    topk_length: Tuple[int, ...] = ()


@dataclass(frozen=True)
class SparsePrefill:
    """FlashMLA's sparse prefill (flash_mla_sparse_fwd): its own implementation in the certificate.

        sparse_prefill(q, kv, indices, attn_sink, topk_length, out, max_logits, lse, call) -> None

        q            torch.bfloat16 [s_q, heads, d_qk]
        kv           torch.bfloat16 [s_kv, d_qk] (one latent head)
        indices      torch.int32    [s_q, topk]: an entry is a key when 0 <= idx < s_kv (and, with
                                    topk_length, j < topk_length[i]); -1, INT32_MIN, s_kv,
                                    INT32_MAX ... are none
        attn_sink    torch.float32  [heads], or None; topk_length torch.int32 [s_q], or None
        out          [s_q, heads, 512] of `out_dtype`: WRITE EVERY ELEMENT (0 for a row without keys)
        max_logits   torch.float32  [s_q, heads]: WRITE EVERY ELEMENT (-inf without keys)
        lse          torch.float32  [s_q, heads], natural log: WRITE EVERY ELEMENT (+inf without keys)
        call         a `SparsePrefillCall`

    With a sink, out shrinks by 1 / (1 + exp(sink - lse)); lse and max_logits stay the keys'."""

    name: str                                   # [a-z0-9_]+, not another entry's
    description: str
    sparse_prefill: Callable
    out_dtype: str = "bf16"                     # "f32" | "bf16"
    precision: Optional[Precision] = None       # None: the class out_dtype implies
    heads: Tuple[int, ...] = ()                 # empty: any (FlashMLA: 64, 128)
    topk_multiple: int = 1                      # topk must be a multiple of it (FlashMLA: 64)
    d_qks: Tuple[int, ...] = ()                 # empty: 576 and 512
    sink: bool = True                           # takes attn_sink
    topk_length: bool = True                    # takes topk_length
    # Optional: SparsePrefillCall -> None (implemented) or a reason string, as Prefill's.
    can_implement: Optional[Callable[[SparsePrefillCall], Optional[str]]] = None


def e4m3(t):
    """A uint8 tensor of e4m3 codes viewed as torch.float8_e4m3fn (no copy), or the tensor itself
    where this torch has no float8 dtype (torch < 2.1)."""
    import torch
    dt = getattr(torch, "float8_e4m3fn", None)
    return t.view(dt) if dt is not None else t


@dataclass(frozen=True)
class Kernel:
    name: str                                   # [a-z0-9_]+
    version: str
    description: str
    decode: Optional[Callable] = None           # None only for a prefill-only kernel
    backend: str = "cpu"                        # "cpu" | "cuda"
    out_dtype: str = "f32"                      # "f32" | "bf16"
    caps: Caps = field(default_factory=Caps)
    conventions: Conventions = field(default_factory=Conventions)
    precision: Optional[Precision] = None       # None: the class out_dtype implies
    # Optional: shape -> None (implemented) or a reason string (not claimed, never counted).
    can_implement: Optional[Callable[[Shape], Optional[str]]] = None
    # Optional: () -> None (can run here) or why not (every case SKIPPED with that reason).
    unavailable: Optional[Callable[[], Optional[str]]] = None
    # Optional: a prefill in the MHA form, certified as an implementation of its own.
    prefill: Optional[Prefill] = None
    # Optional: a merge of two attention states, certified as an implementation of its own.
    merge: Optional[Merge] = None
    # Optional: V3.2's top-k over the indexer's logits, certified as an implementation of its own.
    topk: Optional[Topk] = None
    # Optional: V3.2's indexer logits, certified as an implementation of its own.
    indexer_logits: Optional[IndexerLogits] = None
    # Optional: V3.2's indexer key cache append, certified as an implementation of its own.
    indexer_append: Optional[IndexerAppend] = None
    # Optional: FlashMLA's sparse prefill, certified as an implementation of its own.
    sparse_prefill: Optional[SparsePrefill] = None


def stack(name: str, indexer_logits: Kernel, topk: Kernel, sparse_prefill: Kernel, version: str = "",
          description: str = "") -> Kernel:
    """V3.2's sparse path as deployed, one kernel of three: `indexer_logits`'s indexer logits entry,
    `topk`'s top-k entry and `sparse_prefill`'s sparse prefill entry (three kernels, an adapter's
    each, of one backend), renamed <name>_indexer_logits, <name>_topk and <name>_sparse_prefill.
    `mla certify` certifies each entry as its own implementation, and the sparse prefill also on
    the chain cases (sparse_chain_*), where this kernel's own logits and top-k feed it. Unavailable
    where any of the three is, with its reason."""
    parts = (("indexer_logits", indexer_logits), ("topk", topk), ("sparse_prefill", sparse_prefill))
    for entry, k in parts:
        if getattr(k, entry) is None:
            raise ValueError(f"stack {name}: {k.name} has no {entry} entry")
    backends = {k.backend for _, k in parts}
    if len(backends) != 1:
        raise ValueError(f"stack {name}: its kernels run on different backends ({', '.join(sorted(backends))})")

    def unavailable():
        for _, k in parts:
            why = k.unavailable() if k.unavailable is not None else None
            if why:
                return f"{k.name}: {why}"
        return None

    return Kernel(
        name=name, version=version or "+".join(f"{k.name} {k.version}" for _, k in parts),
        description=description or "V3.2 sparse path: " + " -> ".join(k.name for _, k in parts),
        backend=backends.pop(),
        indexer_logits=dataclasses.replace(indexer_logits.indexer_logits, name=f"{name}_indexer_logits"),
        topk=dataclasses.replace(topk.topk, name=f"{name}_topk"),
        sparse_prefill=dataclasses.replace(sparse_prefill.sparse_prefill, name=f"{name}_sparse_prefill"),
        unavailable=unavailable)


def describe(k: Kernel) -> dict:
    """The declaration as the C++ host reads it (it validates every field itself)."""
    return {
        "name": k.name,
        "version": k.version,
        "description": k.description,
        "backend": k.backend,
        "out_dtype": k.out_dtype,
        "caps": {
            "cache_formats": list(k.caps.cache_formats),
            "min_heads": k.caps.heads[0],
            "max_heads": k.caps.heads[1],
            "min_s_q": k.caps.s_q[0],
            "max_s_q": k.caps.s_q[1],
            "page_sizes": list(k.caps.page_sizes),
            "dense": k.caps.dense,
            "sparse": k.caps.sparse,
            "varlen": k.caps.varlen,
        },
        "conventions": dataclasses.asdict(k.conventions),
        "precision": None if k.precision is None else dataclasses.asdict(k.precision),
        "can_implement": k.can_implement is not None,
        "decode": k.decode is not None,
        "prefill": None if k.prefill is None else describe_prefill(k.prefill),
        "merge": None if k.merge is None else {
            "name": k.merge.name,
            "description": k.merge.description,
            "dtypes": list(k.merge.dtypes),
            "head_dims": list(k.merge.head_dims),
            "conventions": dataclasses.asdict(k.merge.conventions),
            "can_implement": k.merge.can_implement is not None,
        },
        "topk": None if k.topk is None else {
            "name": k.topk.name,
            "description": k.topk.description,
            "ks": list(k.topk.ks),
            "max_n": k.topk.max_n,
            "index_base": k.topk.index_base,
            "sorted": k.topk.sorted,
            "precision": k.topk.precision,
            "range_all_valid": k.topk.range_all_valid,
            "can_implement": k.topk.can_implement is not None,
        },
        "indexer_logits": None if k.indexer_logits is None else {
            "name": k.indexer_logits.name,
            "description": k.indexer_logits.description,
            "layouts": [w for w in ("paged", "ragged") if getattr(k.indexer_logits, w) is not None],
            "next_ns": list(k.indexer_logits.next_ns),
            "heads": list(k.indexer_logits.heads),
            "block_sizes": list(k.indexer_logits.block_sizes),
            "max_context": k.indexer_logits.max_context,
            "can_implement": k.indexer_logits.can_implement is not None,
        },
        "indexer_append": None if k.indexer_append is None else {
            "name": k.indexer_append.name,
            "description": k.indexer_append.description,
            "scale_fmts": list(k.indexer_append.scale_fmts),
            "block_sizes": list(k.indexer_append.block_sizes),
            "fp32_scale_op": k.indexer_append.fp32_scale_op,
            "can_implement": k.indexer_append.can_implement is not None,
        },
        "sparse_prefill": None if k.sparse_prefill is None else {
            "name": k.sparse_prefill.name,
            "description": k.sparse_prefill.description,
            "out_dtype": k.sparse_prefill.out_dtype,
            "precision": None if k.sparse_prefill.precision is None else dataclasses.asdict(k.sparse_prefill.precision),
            "heads": list(k.sparse_prefill.heads),
            "topk_multiple": k.sparse_prefill.topk_multiple,
            "d_qks": list(k.sparse_prefill.d_qks),
            "sink": k.sparse_prefill.sink,
            "topk_length": k.sparse_prefill.topk_length,
            "can_implement": k.sparse_prefill.can_implement is not None,
        },
    }


def describe_prefill(p: Prefill) -> dict:
    return {
        "name": p.name,
        "description": p.description,
        "out_dtype": p.out_dtype,
        "caps": {
            "min_heads": p.caps.heads[0],
            "max_heads": p.caps.heads[1],
            "causal": p.caps.causal,
            "non_causal": p.caps.non_causal,
            "varlen": p.caps.varlen,
            "max_total_tokens": p.caps.max_total_tokens,
        },
        "conventions": dataclasses.asdict(p.conventions),
        "precision": None if p.precision is None else dataclasses.asdict(p.precision),
        "can_implement": p.can_implement is not None,
    }


def bf16_cache(kv_cache):
    """A bf16 cache's bytes [num_blocks, page_size, 1152] as bfloat16 [num_blocks, page_size, 576]."""
    import torch

    return kv_cache.view(torch.bfloat16).view(kv_cache.shape[0], kv_cache.shape[1], D_QK)
