"""mla_ref: the Python reference for DeepSeek-V3/V3.2 Multi-head Latent Attention (MLA).

Pure torch + numpy, float64 truth. Works with torch 1.13 (Debian 12) and torch 2.x: no float8
dtypes, no F.rms_norm, no torch-2-only APIs. The golden catalog (fixtures/SCHEMA.md) is written by
``python3 -m mla_ref.goldens write --out fixtures/goldens``.
"""

__version__ = "1.0.0"
