"""The Python reference indexer's key quantization on keys the C++ test gives, for the byte-for-byte
comparison in test_indexer_append_kernels.cpp.

usage: indexer_quantize_ref.py KEYS.bin {fp32|ue8m0} OUT.bin
KEYS.bin: bf16 bits, little-endian uint16 [n, 128]. OUT.bin: the codes uint8 [n, 128], then the
scales float32 little-endian [n], as indexer.quantize returns them for k (q is a dummy: quantize
quantizes both, and only k is compared)."""
import sys

import numpy as np

from mla_ref import config, indexer, numerics


def main() -> None:
    keys_path, scale_fmt, out_path = sys.argv[1:4]
    bits = np.fromfile(keys_path, dtype="<u2").reshape(-1, 128)
    k = numerics.bf16_bits_to_f64(bits)
    args = config.preset("tiny-indexer")
    n, heads = k.shape[0], args.index_n_heads
    p = indexer.Projected(q=np.zeros((1, n, heads, 128)), k=k.reshape(1, n, 128), weights_proj=np.zeros((1, n, heads)))
    quantized = indexer.quantize(args, p, scale_fmt, "fp64")
    with open(out_path, "wb") as f:
        f.write(np.ascontiguousarray(quantized.k_codes.reshape(n, 128), dtype=np.uint8).tobytes())
        f.write(np.ascontiguousarray(quantized.k_scale.reshape(n), dtype="<f4").tobytes())


if __name__ == "__main__":
    main()
