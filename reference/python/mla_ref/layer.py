"""The full MLA layer (DeepSeek-V3 `inference/model.py` semantics), both forms, three pipelines.

Forms
    naive     per-head K = [W_UK c | k_pe], V = W_UV c; caches k_cache [b,T,h,nope+rope], v_cache [b,T,h,v]
    absorbed  q_nope W_UK into the latent; scores = q_lat . c + q_pe . k_pe; out = (P c) W_UV^T;
              caches kv_cache [b,T,kv_lora_rank], pe_cache [b,T,rope]
Pipelines (SCHEMA.md, "Full-layer pipelines")
    fp64  everything float64 (the truth)
    fp32  everything float32, no intermediate rounding
    bf16  as deployed: computed in float32 with explicit rounding to bf16 values
          (.to(torch.bfloat16).to(torch.float32)) at the points listed in SCHEMA.md, so results do
          not depend on torch's bf16 kernels.
"""
from __future__ import annotations

import numpy as np
import torch

from . import exact, generator, numerics, rope
from .config import ModelArgs

PIPELINES = ("fp64", "fp32", "bf16")
FORMS = ("naive", "absorbed")
RMS_EPS = 1e-6
CAPACITY_ERROR = "cache capacity exceeded"

# generator streams of the layer's tensors (a case's seed is combined with these)
WEIGHT_STREAMS = {"wq": 1, "wq_a": 2, "q_norm": 3, "wq_b": 4, "wkv_a": 5, "kv_norm": 6, "wkv_b": 7, "wo": 8}
X_STREAM_BASE = 100  # step k input x: stream 100 + k


class CacheCapacityError(RuntimeError):
    """A write at or past max_seq_len (upstream would silently drop a 1-token write)."""


def weight_names(args: ModelArgs):
    q = ["wq"] if args.q_lora_rank == 0 else ["wq_a", "q_norm", "wq_b"]
    return q + ["wkv_a", "kv_norm", "wkv_b", "wo"]


def weight_shapes(args: ModelArgs) -> dict:
    h, qk = args.n_heads, args.qk_head_dim
    return {
        "wq": (h * qk, args.dim),
        "wq_a": (args.q_lora_rank, args.dim),
        "q_norm": (args.q_lora_rank,),
        "wq_b": (h * qk, args.q_lora_rank),
        "wkv_a": (args.kv_lora_rank + args.qk_rope_head_dim, args.dim),
        "kv_norm": (args.kv_lora_rank,),
        "wkv_b": (h * (args.qk_nope_head_dim + args.v_head_dim), args.kv_lora_rank),
        "wo": (args.dim, h * args.v_head_dim),
    }


def weight_generators(args: ModelArgs, seed: int) -> dict:
    """Generated bf16 weights: linear layers uniform with std fan_in^-0.5, norm weights mean 1 std 0.1."""
    shapes = weight_shapes(args)
    out = {}
    for name in weight_names(args):
        shp = shapes[name]
        if name.endswith("norm"):
            mean, std = 1.0, 0.1
        else:
            mean, std = 0.0, float(shp[1]) ** -0.5
        out[name] = generator.GeneratedTensor(seed, WEIGHT_STREAMS[name], shp, "bfloat16", mean, std)
    return out


def x_generator(args: ModelArgs, seed: int, step: int, batch: int, seqlen: int):
    return generator.GeneratedTensor(seed, X_STREAM_BASE + step, (batch, seqlen, args.dim), "bfloat16", 0.0, 1.0)


class _Cache:
    """A [batch, max_seq_len, ...] cache allocated on demand; writes past max_seq_len raise."""

    def __init__(self, name, args, batch, tail, dtype):
        self.name, self.args, self.batch, self.tail, self.dtype = name, args, batch, tuple(tail), dtype
        self.t = torch.zeros((batch, 0) + self.tail, dtype=dtype)

    def write(self, start_pos: int, val: torch.Tensor):
        end = start_pos + val.shape[1]
        if start_pos < 0 or end > self.args.max_seq_len:
            raise CacheCapacityError(
                f"{CAPACITY_ERROR}: {self.name} write [{start_pos}, {end}) but max_seq_len is {self.args.max_seq_len}")
        if end > self.t.shape[1]:
            grown = torch.zeros((self.batch, end) + self.tail, dtype=self.dtype)
            grown[:, :self.t.shape[1]] = self.t
            self.t = grown
        self.t[:val.shape[0], start_pos:end] = val

    def read(self, bsz: int, end_pos: int) -> torch.Tensor:
        return self.t[:bsz, :end_pos]


class MLA:
    """One layer with its caches for one (pipeline, form)."""

    def __init__(self, args: ModelArgs, weights: dict, pipeline: str, form: str, batch: int):
        assert pipeline in PIPELINES and form in FORMS
        if batch > args.max_batch_size:
            raise ValueError(f"batch {batch} > max_batch_size {args.max_batch_size}")
        self.args, self.pipeline, self.form, self.batch = args, pipeline, form, batch
        self.dtype = torch.float64 if pipeline == "fp64" else torch.float32
        # weights: float64 numpy arrays of bf16 values -> pipeline dtype (exact)
        self.w = {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64)).to(self.dtype) for k, v in weights.items()}
        self.scale = torch.tensor(args.softmax_scale, dtype=torch.float64).to(self.dtype)
        self.eps = torch.tensor(RMS_EPS, dtype=torch.float64).to(self.dtype)
        a = args
        if form == "naive":
            self.k_cache = _Cache("k_cache", a, batch, (a.n_heads, a.qk_head_dim), self.dtype)
            self.v_cache = _Cache("v_cache", a, batch, (a.n_heads, a.v_head_dim), self.dtype)
        else:
            self.kv_cache = _Cache("kv_cache", a, batch, (a.kv_lora_rank,), self.dtype)
            self.pe_cache = _Cache("pe_cache", a, batch, (a.qk_rope_head_dim,), self.dtype)
        self.end_pos = 0
        self._wt = {}  # fp64: transposed weights split once for exact.matmul

    # rounding point: identity except in the bf16 pipeline
    def R(self, t: torch.Tensor) -> torch.Tensor:
        return numerics.round_bf16(t) if self.pipeline == "bf16" else t

    # The fp64 pipeline is the truth: its sums go through exact.matmul, whose result does not
    # depend on the BLAS's summation order, so the fp64 outputs regenerate to the last bit or two
    # under any torch. The fp32 and bf16 pipelines model deployed kernels and keep torch's own
    # matmul/einsum (their results may move within their tolerance between libraries).
    def mm(self, a, b):
        return exact.matmul(a.contiguous(), b.contiguous()) if self.pipeline == "fp64" else torch.matmul(a, b)

    def einsum(self, spec, a, b):
        if self.pipeline != "fp64":
            return torch.einsum(spec, a, b)
        if spec == "bshd,hdc->bshc":  # per head: [h, b*s, d] @ [h, d, c]
            B, S, H, D = a.shape
            y = self.mm(a.permute(2, 0, 1, 3).reshape(H, B * S, D), b)
            return y.reshape(H, B, S, -1).permute(1, 2, 0, 3)
        if spec == "bshc,hdc->bshd":  # per head: [h, b*s, c] @ [h, c, d]
            B, S, H, C = a.shape
            y = self.mm(a.permute(2, 0, 1, 3).reshape(H, B * S, C), b.transpose(1, 2))
            return y.reshape(H, B, S, -1).permute(1, 2, 0, 3)
        if spec in ("bshc,btc->bsht", "bshr,btr->bsht"):  # per batch: [b, s*h, c] @ [b, c, t]
            B, S, H, C = a.shape
            return self.mm(a.reshape(B, S * H, C), b.transpose(1, 2)).reshape(B, S, H, -1)
        if spec == "bsht,btc->bshc":  # per batch: [b, s*h, t] @ [b, t, c]
            B, S, H, T = a.shape
            return self.mm(a.reshape(B, S * H, T), b).reshape(B, S, H, -1)
        if spec == "bshd,bthd->bsht":  # per (b, h): [b, h, s, d] @ [b, h, d, t]
            return self.mm(a.permute(0, 2, 1, 3), b.permute(0, 2, 3, 1)).permute(0, 2, 1, 3)
        if spec == "bsht,bthd->bshd":  # per (b, h): [b, h, s, t] @ [b, h, t, d]
            return self.mm(a.permute(0, 2, 1, 3), b.permute(0, 2, 1, 3)).permute(0, 2, 1, 3)
        raise AssertionError(spec)

    def rowsum(self, x):
        """Σ over the last axis, keepdim (fp64: order-independent, see mm)."""
        if self.pipeline != "fp64":
            return x.sum(-1, keepdim=True)
        return self.mm(x, torch.ones((x.shape[-1], 1), dtype=x.dtype))

    def softmax(self, scores):
        if self.pipeline != "fp64":
            return torch.softmax(scores, dim=-1)
        m = scores.max(dim=-1, keepdim=True).values
        e = torch.exp(scores - m)
        return e / self.rowsum(e)

    def linear(self, x, name):
        if self.pipeline == "fp64":
            if name not in self._wt:
                self._wt[name] = exact.SplitB(self.w[name].t())
            return exact.matmul(x.contiguous(), self._wt[name])
        return self.R(torch.matmul(x, self.w[name].t()))

    def rmsnorm(self, x, name):
        if self.pipeline == "fp64":
            var = self.rowsum(x * x) / x.shape[-1]
        else:
            var = (x * x).mean(-1, keepdim=True)
        return self.R(x * torch.rsqrt(var + self.eps) * self.w[name])

    def rope(self, x, start_pos):
        """Interleaved pairs (2i, 2i+1) rotated by pos*inv_freq[i]; x [..., s, (h,) rope]."""
        c64, s64 = rope.cos_sin(self.args, start_pos, x.shape[1])  # [s, rope/2], correctly rounded float64
        cos = torch.from_numpy(c64).to(self.dtype)
        sin = torch.from_numpy(s64).to(self.dtype)
        if x.dim() == 4:  # [b, s, h, r]
            cos, sin = cos[None, :, None, :], sin[None, :, None, :]
        else:  # [b, s, r]
            cos, sin = cos[None], sin[None]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        y = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
        return self.R(y)

    # project and naive_kv are forward's own steps, exposed so that the MHA-form prefill
    # (mla_ref.prefill) derives its q, k, v from exactly the arithmetic the layer runs.
    def project(self, x: torch.Tensor, start_pos: int):
        """x [b, s, dim] (pipeline dtype, already rounded) -> q_nope [b,s,h,nope], q_pe [b,s,h,rope]
        (roped), c [b,s,kv_lora_rank] (through kv_norm), k_pe [b,s,rope] (roped, one for all heads)."""
        a = self.args
        bsz, seqlen, _ = x.shape
        h, nope, rdim, r = a.n_heads, a.qk_nope_head_dim, a.qk_rope_head_dim, a.kv_lora_rank
        if a.q_lora_rank == 0:
            q = self.linear(x, "wq")
        else:
            q = self.linear(self.rmsnorm(self.linear(x, "wq_a"), "q_norm"), "wq_b")
        q = q.view(bsz, seqlen, h, nope + rdim)
        q_nope, q_pe = q[..., :nope], q[..., nope:]
        q_pe = self.rope(q_pe, start_pos)
        kv = self.linear(x, "wkv_a")
        c, k_pe = kv[..., :r], kv[..., r:]
        k_pe = self.rope(k_pe, start_pos)  # [b, s, rope], shared by all heads
        c = self.rmsnorm(c, "kv_norm")
        return q_nope, q_pe, c, k_pe

    def naive_kv(self, c: torch.Tensor, k_pe: torch.Tensor):
        """The naive form's per-head K = [W_UK c | k_pe] [b,s,h,nope+rope] and V = W_UV c [b,s,h,v]."""
        a = self.args
        bsz, seqlen, _ = c.shape
        h, nope, vdim = a.n_heads, a.qk_nope_head_dim, a.v_head_dim
        kvb = self.R(self.mm(c, self.w["wkv_b"].t())).view(bsz, seqlen, h, nope + vdim)
        k_nope, v = kvb[..., :nope], kvb[..., nope:]
        k = torch.cat([k_nope, k_pe.unsqueeze(2).expand(-1, -1, h, -1)], dim=-1)
        return k, v

    def forward(self, x: np.ndarray, start_pos: int, record: dict | None = None) -> torch.Tensor:
        """x: [b, s, dim] (float64 values of bf16). Returns the layer output [b, s, dim] (pipeline dtype).
        When `record` is a dict, intermediates are stored into it (fp64 names of SCHEMA.md)."""
        a, R = self.args, self.R
        x = R(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)).to(self.dtype))
        bsz, seqlen, _ = x.shape
        end_pos = start_pos + seqlen
        if bsz > self.batch:
            raise ValueError(f"batch {bsz} > cache batch {self.batch}")
        if seqlen > 1 and start_pos != 0:
            raise ValueError("a multi-token step requires start_pos == 0 (upstream semantics)")
        if end_pos > a.max_seq_len or start_pos < 0:
            raise CacheCapacityError(
                f"{CAPACITY_ERROR}: step [{start_pos}, {end_pos}) but max_seq_len is {a.max_seq_len}")
        h, nope, vdim, r = a.n_heads, a.qk_nope_head_dim, a.v_head_dim, a.kv_lora_rank
        q_nope, q_pe, c, k_pe = self.project(x, start_pos)
        if record is not None:
            record.update(q_nope=q_nope, q_pe=q_pe, kv_normed=c, k_pe=k_pe)
        wkv_b = self.w["wkv_b"].view(h, nope + vdim, r)
        if self.form == "naive":
            k, v = self.naive_kv(c, k_pe)
            self.k_cache.write(start_pos, k)
            self.v_cache.write(start_pos, v)
            qf = torch.cat([q_nope, q_pe], dim=-1)
            scores = R(self.einsum("bshd,bthd->bsht", qf, self.k_cache.read(bsz, end_pos)))
            scores = R(scores * self.scale)
        else:
            q_abs = R(self.einsum("bshd,hdc->bshc", q_nope, wkv_b[:, :nope]))
            self.kv_cache.write(start_pos, c)
            self.pe_cache.write(start_pos, k_pe)
            s_lat = R(self.einsum("bshc,btc->bsht", q_abs, self.kv_cache.read(bsz, end_pos)))
            s_pe = R(self.einsum("bshr,btr->bsht", q_pe, self.pe_cache.read(bsz, end_pos)))
            scores = R(R(s_lat + s_pe) * self.scale)
            if record is not None:
                record["q_absorbed"] = q_abs
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"), dtype=self.dtype).triu_(1)
            scores = scores + mask[:, None, :]  # [s, 1, t] over [b, s, h, t]; start_pos == 0 so t == s
        probs = R(self.softmax(scores))
        if self.form == "naive":
            o = R(self.einsum("bsht,bthd->bshd", probs, self.v_cache.read(bsz, end_pos)))
            if record is not None:
                record["attn_out"] = o
        else:
            lat = R(self.einsum("bsht,btc->bshc", probs, self.kv_cache.read(bsz, end_pos)))
            o = R(self.einsum("bshc,hdc->bshd", lat, wkv_b[:, nope:]))
            if record is not None:
                record["latent_out"] = lat
        if record is not None:
            record.update(scores=scores, probs=probs)
        out = self.linear(o.flatten(2), "wo")
        self.end_pos = end_pos
        return out

    def caches(self) -> dict:
        """Cache contents [:batch, :end_pos] (float64 numpy)."""
        names = ("k_cache", "v_cache") if self.form == "naive" else ("kv_cache", "pe_cache")
        return {n: getattr(self, n).read(self.batch, self.end_pos).to(torch.float64).numpy() for n in names}


def run_steps(args: ModelArgs, weights: dict, steps, pipelines=PIPELINES, forms=FORMS, record_fp64=True):
    """Runs the steps [(x [b,s,dim] float64, start_pos), ...] through every (pipeline, form).

    Returns (outputs, intermediates, caches):
      outputs[(k, pipeline, form)] = float64 numpy [b, s, dim]
      intermediates[(k, form)] = {name: float64 numpy} (fp64 pipeline only)
      caches[(pipeline, form)] = {cache name: float64 numpy [b, T, ...]} after the last step
    """
    batch = steps[0][0].shape[0]
    outputs, inter, caches = {}, {}, {}
    for p in pipelines:
        for f in forms:
            layer = MLA(args, weights, p, f, batch)
            for k, (x, start_pos) in enumerate(steps):
                rec = {} if (p == "fp64" and record_fp64) else None
                y = layer.forward(x, start_pos, rec)
                outputs[(k, p, f)] = y.to(torch.float64).numpy()
                if rec is not None:
                    inter[(k, f)] = {n: t.to(torch.float64).numpy() for n, t in rec.items()}
            caches[(p, f)] = layer.caches()
    return outputs, inter, caches
