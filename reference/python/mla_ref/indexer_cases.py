"""Indexer golden cases (fixtures/SCHEMA.md, "Indexer cases"): DeepSeek-V3.2's lightning indexer
run step by step (indexer.forward: a prompt, then one-token decode steps, each appending its keys
to the FP8 key cache), with every stage a kernel of the sparse path starts from.

Per step the file holds the bf16 q and k after RoPE and the Hadamard rotation (what the key-cache
append and the query quantizer read), their e4m3 codes and block scales, the head weights with
the q scales folded in (what an indexer logits kernel reads), the logits of every query row over
every cached position (float64 truth, float32 as deployed; -inf outside the causal horizon) and
the top-k of each. The RoPE layout of the rope columns and the scale format are attributes of the
case: deployments differ on both, and each changes the selected positions, so the same inputs are
stored under both layouts.

The weights and the activations x and qr are neither stored nor described in the file: they are
drawn from the case's seed by the rule below (indexer.weight_generators, then step k's x and qr
from streams X_STREAM + 2k and QR_STREAM + 2k, splitmix64-uniform-v1, bf16 mean 0 std 1), which is
what the reference reruns from; no C++ reader needs them.
"""
from __future__ import annotations

import numpy as np

from . import config, generator, indexer
from .golden_h5 import Node

X_STREAM, QR_STREAM = 31, 32  # the step's activations (weights use indexer.WEIGHT_STREAMS)
STEP_STREAM_STRIDE = 2  # step k draws x from X_STREAM + 2k and qr from QR_STREAM + 2k


class IndexerSpec:
    def __init__(self, name, description, *, preset, batch, prompt, decode_steps, rope_layout, scale_fmt, seed):
        """prompt: tokens of the first step (start_pos 0); then decode_steps one-token steps."""
        self.__dict__.update(locals())
        del self.__dict__["self"]


def _activation(seed, stream, shape):
    return generator.GeneratedTensor(seed, stream, shape, "bfloat16", 0.0, 1.0)


def step_inputs(spec: IndexerSpec):
    """[(x generator, qr generator, start_pos, seqlen)] of the case's steps."""
    a = config.preset(spec.preset)
    out, pos = [], 0
    for k in range(1 + spec.decode_steps):
        s = spec.prompt if k == 0 else 1
        off = STEP_STREAM_STRIDE * k
        out.append((_activation(spec.seed, X_STREAM + off, (spec.batch, s, a.dim)),
                    _activation(spec.seed, QR_STREAM + off, (spec.batch, s, a.q_lora_rank)), pos, s))
        pos += s
    return out


def run_case(spec: IndexerSpec):
    """(args, weight generators, steps [(x gen, qr gen, start_pos, seqlen, indexer.Step)])."""
    a = config.preset(spec.preset)
    wgen = indexer.weight_generators(a, spec.seed)
    weights = {k: g.values() for k, g in wgen.items()}
    cache = indexer.KeyCache.empty(spec.batch, a.index_head_dim)
    steps = []
    for xg, qg, pos, s in step_inputs(spec):
        st = indexer.forward(a, weights, xg.values(), qg.values(), pos, cache, spec.rope_layout, spec.scale_fmt)
        cache = st.cache
        steps.append((xg, qg, pos, s, st))
    return a, wgen, steps


def masked(logits: np.ndarray, mask) -> np.ndarray:
    """logits [b, s, T] with -inf where the causal mask hides a position (the kernels' convention:
    -inf outside a row's valid range)."""
    return logits if mask is None else logits + np.asarray(mask, dtype=np.float64)[None]


def padded_indices(tk: indexer.TopK) -> np.ndarray:
    """int32 [b, s, k]: a row's selected positions, -1 past its n_valid (where upstream's choice among
    masked positions is unspecified, the top-k kinds' contract writes -1)."""
    idx = tk.indices.astype(np.int64).copy()
    k = idx.shape[-1]
    idx[np.arange(k)[None, None, :] >= tk.n_valid[..., None]] = -1
    return idx.astype(np.int32)


def write_indexer_case(root: Node, spec: IndexerSpec):
    a, _, steps = run_case(spec)
    case = root.group(spec.name)
    case.attrs([("kind", "indexer"), ("description", spec.description), ("preset", spec.preset),
                ("rope_layout", spec.rope_layout), ("scale_fmt", spec.scale_fmt), ("batch", spec.batch),
                ("heads", a.index_n_heads), ("head_dim", a.index_head_dim), ("rope_dim", a.qk_rope_head_dim),
                ("index_topk", a.index_topk), ("n_steps", len(steps)), ("seed", spec.seed),
                # what every kernel of the path reads (q, k, codes, scales, weights) is stored
                ("inputs_stored", 1)])
    # One group per step and flat datasets: every HDF5 object costs about 1.5 KiB, more than most
    # of these small datasets hold, and the catalog's budget is 40 MiB.
    for k, (_, _, pos, s, st) in enumerate(steps):
        node = case.group("steps").group(str(k))
        node.attrs([("start_pos", pos), ("seqlen", s)])
        p, qz = st.projected, st.quantized
        node.bf16("q", p.q)
        node.bf16("k", p.k)
        node.ds("q_codes", qz.q_codes, "uint8")
        node.ds("q_scale", qz.q_scale, "float32")
        node.ds("k_codes", qz.k_codes, "uint8")
        node.ds("k_scale", qz.k_scale, "float32")
        node.ds("weights", qz.weights, "float32")
        node.ds("n_valid", st.topk.n_valid, "int32")
        node.f64("logits_truth", masked(st.logits_truth, st.mask))
        node.ds("logits_deployed", masked(st.logits_deployed, st.mask), "float32")
        for suffix, tk in (("truth", st.topk_truth), ("deployed", st.topk)):
            node.ds("topk_" + suffix, padded_indices(tk), "int32")
            node.ds("tie_" + suffix, tk.boundary_tie, "uint8")


def write_indexer_specs(root: Node, specs):
    for spec in specs:
        write_indexer_case(root, spec)
