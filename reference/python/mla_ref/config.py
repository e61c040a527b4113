"""ModelArgs (the MLA fields of DeepSeek-V3 `inference/model.py`), presets, derived constants."""
from __future__ import annotations

import dataclasses

from . import exact

# The order in which ModelArgs fields are written as HDF5 attributes.
FIELDS = ("dim", "n_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
          "v_head_dim", "max_seq_len", "original_seq_len", "rope_theta", "rope_factor", "beta_fast",
          "beta_slow", "mscale", "max_batch_size")
INT_FIELDS = ("dim", "n_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
              "v_head_dim", "max_seq_len", "original_seq_len", "max_batch_size")


@dataclasses.dataclass(frozen=True)
class ModelArgs:
    """Upstream defaults except where a preset overrides them."""
    dim: int = 2048
    n_heads: int = 16
    q_lora_rank: int = 0
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    max_seq_len: int = 16384
    original_seq_len: int = 4096
    rope_theta: float = 10000.0
    rope_factor: float = 40.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 1.0
    max_batch_size: int = 8
    # DeepSeek-V3.2's lightning indexer (upstream names and defaults). Not in FIELDS: no golden
    # case depends on them, so adding them leaves every stored attribute set unchanged.
    index_n_heads: int = 64
    index_head_dim: int = 128
    index_topk: int = 2048

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def yarn(self) -> bool:
        """YaRN frequency correction and the mscale^2 softmax factor are on iff this holds."""
        return self.max_seq_len > self.original_seq_len

    @property
    def softmax_scale(self) -> float:
        """(nope+rope)^-0.5 · (0.1·mscale·ln(rope_factor) + 1)^2 under YaRN: the float64 nearest to
        that real number (0.1 a tenth exactly; mscale and rope_factor their float64 values), so it
        does not depend on the library's pow/log (upstream evaluates it in float64: within an ulp)."""
        return softmax_scale_exact(self.qk_head_dim, self.yarn, self.mscale, self.rope_factor)

    def attrs(self) -> list:
        out = []
        for f in FIELDS:
            v = getattr(self, f)
            out.append((f, int(v) if f in INT_FIELDS else float(v)))
        return out


_TINY = dict(dim=64, n_heads=4, q_lora_rank=24, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
             v_head_dim=16, max_seq_len=32, original_seq_len=16, max_batch_size=4)
_V3 = dict(dim=7168, n_heads=128, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
           qk_rope_head_dim=64, v_head_dim=128, mscale=1.0)

PRESETS = {
    # tiny: runs in milliseconds; max_seq_len 32 > original 16, so YaRN is on
    "tiny": ModelArgs(**_TINY),
    # tiny with YaRN off (max_seq_len == original_seq_len)
    "tiny-noyarn": ModelArgs(**{**_TINY, "original_seq_len": 32}),
    # tiny without q-LoRA (single wq projection, like V2-Lite)
    "tiny-noqlora": ModelArgs(**{**_TINY, "q_lora_rank": 0}),
    "tiny-noqlora-noyarn": ModelArgs(**{**_TINY, "q_lora_rank": 0, "original_seq_len": 32}),
    # DeepSeek-V2-Lite: dim 2048, 16 heads, no q-LoRA, mscale 0.707
    "v2-lite": ModelArgs(dim=2048, n_heads=16, q_lora_rank=0, kv_lora_rank=512, qk_nope_head_dim=128,
                         qk_rope_head_dim=64, v_head_dim=128, mscale=0.707),
    # DeepSeek-V3 / V3.1 (671B): 128 heads, and its tensor-parallel head shards
    "v3": ModelArgs(**_V3),
    "v3-tp2": ModelArgs(**{**_V3, "n_heads": 64}),
    "v3-tp4": ModelArgs(**{**_V3, "n_heads": 32}),
    "v3-tp8": ModelArgs(**{**_V3, "n_heads": 16}),
    # DeepSeek-V3.2 (671B): V3's MLA plus the indexer, 64 index heads x 128, top-2048
    "v32": ModelArgs(**_V3, index_n_heads=64, index_head_dim=128, index_topk=2048),
    # tiny with an indexer: one 128-wide quantization block per index head (its smallest legal
    # width) and a top-k below max_seq_len, so both "k < valid" and "valid < k" rows occur
    "tiny-indexer": ModelArgs(**_TINY, index_n_heads=4, index_head_dim=128, index_topk=8),
    # V3.2's 64 index heads on the tiny layer: the head sum at its deployed length
    "tiny-indexer-h64": ModelArgs(**_TINY, index_n_heads=64, index_head_dim=128, index_topk=4),
}


def softmax_scale_exact(qk_head_dim: int, yarn: bool = False, mscale: float = 1.0, rope_factor: float = 1.0) -> float:
    c = exact._CTX
    s = c.divide(exact.Decimal(1), exact.sqrt(qk_head_dim))
    if yarn:
        m = c.add(c.multiply(c.multiply(exact.Decimal("0.1"), exact._d(mscale)), exact.ln(rope_factor)), 1)
        s = c.multiply(s, c.multiply(m, m))
    return exact.to_float(s)


def preset(name: str) -> ModelArgs:
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None


# ---------------------------------------------------------------- KV-cache bytes per token per layer

def kv_bytes_per_token(args: ModelArgs, layout: str) -> int:
    """Bytes one token occupies in one layer's cache.

    naive_bf16: upstream attn_impl="naive" caches, bf16: k_cache holds nope+rope per head and
        v_cache holds v per head -> 2 * h * (nope + rope + v). V3 (128 heads): 2*128*320 = 81 920;
        16 heads: 10 240 (docs/field.md, "KV-cache bytes per token and layer").
    mla_bf16:   latent + shared rope key, bf16 -> 2 * (kv_lora_rank + rope) = 1 152.
    latent_bf16: latent only (rope recomputed / stored elsewhere) -> 2 * kv_lora_rank = 1 024.
    fp8_v32:    V3.2 FlashMLA layout: kv_lora_rank e4m3 bytes + 4 B per 128-block scale + 2 B per
                rope value -> 512 + 16 + 128 = 656.
    """
    h, nope, rope, v, r = args.n_heads, args.qk_nope_head_dim, args.qk_rope_head_dim, args.v_head_dim, args.kv_lora_rank
    if layout == "naive_bf16":
        return 2 * h * (nope + rope + v)
    if layout == "mla_bf16":
        return 2 * (r + rope)
    if layout == "latent_bf16":
        return 2 * r
    if layout == "fp8_v32":
        assert r % 128 == 0
        return r + 4 * (r // 128) + 2 * rope
    raise ValueError(f"unknown layout {layout!r}")
