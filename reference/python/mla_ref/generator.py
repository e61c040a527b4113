"""The counter-based generator `splitmix64-uniform-v1` (fixtures/SCHEMA.md), vectorized numpy.

    GAMMA = 0x9E3779B97F4A7C15
    mix64(z): z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
              z = (z ^ (z >> 27)) * 0x94D049BB133111EB
              return z ^ (z >> 31)
    key(seed, stream)     = mix64(seed * GAMMA + stream + 1)
    bits(seed, stream, i) = mix64(key(seed, stream) + (i + 1) * GAMMA)
    u     = (bits >> 11) * 2^-53
    value = ((2u - 1) * 1.7320508075688772) * std + mean

All u64 arithmetic is modulo 2^64 (numpy uint64 wraps silently; overflow warnings are off).
"""
from __future__ import annotations

import hashlib

import numpy as np

from . import numerics

ALGORITHM = "splitmix64-uniform-v1"
GAMMA = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_MASK = (1 << 64) - 1
SQRT3 = 1.7320508075688772
_CHUNK = 1 << 22  # elements per vectorized chunk (bounds temporary memory)


def mix64_int(z: int) -> int:
    """Scalar mix64 on Python ints (the specification, used to check the vectorized one)."""
    z &= _MASK
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def key(seed: int, stream: int) -> int:
    return mix64_int((seed * GAMMA + stream + 1) & _MASK)


def bits_int(seed: int, stream: int, i: int) -> int:
    return mix64_int((key(seed, stream) + (i + 1) * GAMMA) & _MASK)


def _mix64_np(z: np.ndarray) -> np.ndarray:
    """In-place vectorized mix64 on a uint64 array."""
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= np.uint64(_M1)
        z ^= z >> np.uint64(27)
        z *= np.uint64(_M2)
        z ^= z >> np.uint64(31)
    return z


def bits(seed: int, stream: int, start: int, count: int) -> np.ndarray:
    """bits(seed, stream, i) for i in [start, start+count), as uint64."""
    k = np.uint64(key(seed, stream))
    with np.errstate(over="ignore"):
        z = np.arange(start + 1, start + count + 1, dtype=np.uint64)
        z *= np.uint64(GAMMA)
        z += k
    return _mix64_np(z)


def _values_chunk(seed, stream, start, count, mean, std) -> np.ndarray:
    b = bits(seed, stream, start, count)
    b >>= np.uint64(11)
    u = b.astype(np.float64) * (2.0 ** -53)  # exact: < 2^53
    v = (2.0 * u - 1.0) * SQRT3
    v *= std
    v += mean
    return v


def uniform(seed: int, stream: int, shape, mean: float = 0.0, std: float = 1.0) -> np.ndarray:
    """float64 values of the generator, C order, shape `shape`."""
    shape = tuple(int(s) for s in shape)
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    out = np.empty(n, dtype=np.float64)
    for s in range(0, n, _CHUNK):
        c = min(_CHUNK, n - s)
        out[s:s + c] = _values_chunk(seed, stream, s, c, float(mean), float(std))
    return out.reshape(shape)


def uniform_bf16_bits(seed: int, stream: int, shape, mean: float = 0.0, std: float = 1.0) -> np.ndarray:
    """The generated values rounded to bfloat16 (float64 -> float32 -> bf16, RNE), as uint16 bits."""
    shape = tuple(int(s) for s in shape)
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    out = np.empty(n, dtype=np.uint16)
    for s in range(0, n, _CHUNK):
        c = min(_CHUNK, n - s)
        out[s:s + c] = numerics.bf16_bits_from_f64(_values_chunk(seed, stream, s, c, float(mean), float(std)))
    return out.reshape(shape)


def permutation(seed: int, stream: int, n: int) -> np.ndarray:
    """Stable argsort of bits(seed, stream, i), i < n, ascending as unsigned 64-bit (int64 result)."""
    return np.argsort(bits(seed, stream, 0, n), kind="stable").astype(np.int64)


def sha256_hex(arr: np.ndarray) -> str:
    """sha256 of the little-endian C-order bytes of `arr` (uint16 bf16 bits or float64)."""
    a = np.ascontiguousarray(arr)
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and np.little_endian is False):
        a = a.astype(a.dtype.newbyteorder("<"))
    return hashlib.sha256(a.tobytes(order="C")).hexdigest()


class GeneratedTensor:
    """Description of a generated tensor (what goes under `generated/<name>`)."""

    def __init__(self, seed: int, stream: int, shape, dtype: str, mean: float = 0.0, std: float = 1.0):
        assert dtype in ("bfloat16", "float64")
        self.seed, self.stream = int(seed), int(stream)
        self.shape = tuple(int(s) for s in shape)
        self.dtype, self.mean, self.std = dtype, float(mean), float(std)
        self._data = None

    def data(self) -> np.ndarray:
        """uint16 bf16 bits for bfloat16, float64 values otherwise."""
        if self._data is None:
            if self.dtype == "bfloat16":
                self._data = uniform_bf16_bits(self.seed, self.stream, self.shape, self.mean, self.std)
            else:
                self._data = uniform(self.seed, self.stream, self.shape, self.mean, self.std)
        return self._data

    def values(self) -> np.ndarray:
        """float64 values (bf16 widened)."""
        d = self.data()
        return numerics.bf16_bits_to_f64(d) if self.dtype == "bfloat16" else d

    def sha256(self) -> str:
        return sha256_hex(self.data())

    def attrs(self) -> list:
        """Attributes in their fixed write order."""
        return [
            ("algorithm", ALGORITHM),
            ("seed", self.seed),
            ("stream", self.stream),
            ("mean", self.mean),
            ("std", self.std),
            ("shape", np.array(self.shape, dtype=np.int64)),
            ("dtype", self.dtype),
            ("sha256", self.sha256()),
        ]
