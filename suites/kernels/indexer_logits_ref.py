"""The Python reference indexer's logits (indexer.logits_truth) on codes, scales and weights the
C++ test gives, for the comparison with the C++ oracle in test_indexer_logits_kernels.cpp.

usage: indexer_logits_ref.py IN.bin ROWS HEADS KEYS OUT.bin
IN.bin, little-endian, one after another: q codes uint8 [ROWS, HEADS, 128], weights float32
[ROWS, HEADS], k codes uint8 [KEYS, 128], k scales float32 [KEYS]. OUT.bin: the unmasked logits
float64 [ROWS, KEYS] (every row against every key: one batch, the rows its step's tokens)."""
import sys

import numpy as np

from mla_ref import indexer

D = 128


def main() -> None:
    in_path, rows, heads, keys, out_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    raw = np.fromfile(in_path, dtype=np.uint8)
    sizes = [rows * heads * D, rows * heads * 4, keys * D, keys * 4]
    if raw.size != sum(sizes):
        raise SystemExit(f"{in_path} holds {raw.size} bytes, rows {rows} heads {heads} keys {keys} need {sum(sizes)}")
    parts = np.split(raw, np.cumsum(sizes)[:-1])
    q = parts[0].reshape(1, rows, heads, D)
    w = parts[1].view("<f4").reshape(1, rows, heads)
    k = parts[2].reshape(1, keys, D)
    ks = parts[3].view("<f4").reshape(1, keys)
    logits = indexer.logits_truth(q, w, k, ks)
    np.ascontiguousarray(logits.reshape(rows, keys), dtype="<f8").tofile(out_path)


if __name__ == "__main__":
    main()
