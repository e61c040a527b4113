"""The HDF5 side of the golden catalog (fixtures/SCHEMA.md): writing a file deterministically
(`Node`) and comparing a regenerated file with the one on disk (`compare_files`), which is what
`python3 -m mla_ref.goldens check` judges by. What goes into the files is goldens.py's and
attn_cases.py's.
"""
from __future__ import annotations

import math

import h5py
import numpy as np

from . import generator, numerics, tolerances

# float16 is stored as its 16 bits, like bfloat16: one integer storage rule for both half types
STORAGE = {"float64": "<f8", "float32": "<f4", "bfloat16": "<u2", "float16": "<u2", "int32": "<i4",
           "fp8_kv_v32": "u1", "uint8": "u1"}
COMPRESS_MIN_ELEMENTS = 4096
# Root attributes that say how a file was made, not what it holds (goldens.root_attrs writes
# them): `check` reports their differences and does not fail on them.
PROVENANCE_ATTRS = ("generator_version", "torch_version", "numpy_version", "h5py_version", "python_version", "command")


# ================================================================ deterministic HDF5 writing

class Node:
    """A thin wrapper over an h5py group that writes attributes and datasets deterministically."""

    def __init__(self, g):
        self.g = g

    def attr(self, k, v):
        if isinstance(v, str):
            self.g.attrs.create(k, v, dtype=h5py.string_dtype("utf-8"))
        elif isinstance(v, (bool, np.bool_)):
            self.g.attrs.create(k, np.int64(int(v)))
        elif isinstance(v, (int, np.integer)):
            self.g.attrs.create(k, np.int64(v))
        elif isinstance(v, (float, np.floating)):
            self.g.attrs.create(k, np.float64(v))
        elif isinstance(v, np.ndarray):
            self.g.attrs.create(k, v)
        else:
            raise TypeError(f"attribute {k}: {type(v)}")

    def attrs(self, items):
        for k, v in items:
            self.attr(k, v)

    def group(self, name) -> "Node":
        return Node(self.g.require_group(name))

    def ds(self, name, arr, dtype_attr, attrs=()):
        arr = np.ascontiguousarray(arr)
        storage = STORAGE[dtype_attr]
        if dtype_attr in ("bfloat16", "float16"):
            assert arr.dtype == np.uint16, f"{name}: {dtype_attr} datasets are written from uint16 bits"
        data = arr.astype(storage)
        kw = {}
        if data.size >= COMPRESS_MIN_ELEMENTS:
            kw = dict(compression="gzip", compression_opts=4, shuffle=True)
        d = self.g.create_dataset(name, data=data, track_times=False, **kw)
        dn = Node(d)
        dn.attr("dtype", dtype_attr)
        dn.attrs(attrs)
        return d

    def f64(self, name, arr, attrs=()):
        return self.ds(name, np.asarray(arr, dtype=np.float64), "float64", attrs)

    def bf16(self, name, values, attrs=()):
        """float64 values (rounded to bf16 by the schema rule) or uint16 bits."""
        a = np.asarray(values)
        bits = a if a.dtype == np.uint16 else numerics.bf16_bits_from_f64(a)
        return self.ds(name, bits, "bfloat16", attrs)

    def generated(self, name, gt: generator.GeneratedTensor):
        self.group("generated").group(name).attrs(gt.attrs())


# ================================================================ comparing

def _walk(f):
    """{path: object} for every group and dataset (sorted)."""
    items = {"/": f}
    f.visititems(lambda name, obj: items.__setitem__("/" + name, obj))
    return dict(sorted(items.items()))


def _attr_equal(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


DEFINING_GROUPS = ("inputs", "weights", "rope", "generated", "needles")


def _defines_case(path: str) -> bool:
    """Datasets that define a case (inputs, weights, frequencies, overlays) rather than results."""
    parts = path.split("/")
    return any(g in parts for g in DEFINING_GROUPS) or (len(parts) >= 2 and parts[-1] == "x")


def _compare_values(path, dtype_attr, a, b, worst=None):
    """a = on disk, b = regenerated. Returns None or a reason. `worst` (a dict) collects, per
    class of result, the largest error / bound seen."""
    if a.shape != b.shape:
        return f"shape {a.shape} != {b.shape}"
    if dtype_attr in ("int32", "uint8", "fp8_kv_v32") or _defines_case(path):
        if not np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
            n = int(np.count_nonzero(a != b))
            return f"{n} of {a.size} elements differ (defines the case: must be identical)"
        return None
    if dtype_attr == "bfloat16":
        a, b = numerics.bf16_bits_to_f64(a), numerics.bf16_bits_to_f64(b)
        rel, what = tolerances.CHECK_BF16_REL, "bfloat16 (deployed precision)"
    elif dtype_attr == "float16":
        a, b = (np.asarray(x, np.uint16).view(np.float16).astype(np.float64) for x in (a, b))
        rel, what = tolerances.CHECK_FP16_REL, "float16 (deployed precision)"
    elif dtype_attr == "float32":
        rel, what = tolerances.CHECK_FP32_REL, "float32 (deployed precision)"
    else:
        rel, what = tolerances.CHECK_TRUTH_REL, "float64 truth"
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return "NaN positions differ"
    fa, fb = np.isfinite(a), np.isfinite(b)
    if not np.array_equal(fa, fb) or not np.array_equal(a[~fa & ~np.isnan(a)], b[~fb & ~np.isnan(b)]):
        return "infinity positions differ"
    if not fa.any():
        return None
    err = np.abs(a[fa] - b[fb]).max()
    bound = rel * np.abs(b[fb]).max()
    if worst is not None and bound > 0 and err / bound > worst.get(what, (0.0, ""))[0]:
        worst[what] = (err / bound, path)
    if err > bound:
        return f"max abs diff {err:.3e} > {bound:.3e} ({rel:.1e} x max magnitude)"
    return None


def compare_files(disk_path, regen_path):
    """Returns (ok, notes). Attributes (except provenance) and every dataset that defines a case
    exactly; the fp64 truth within CHECK_TRUTH_REL, deployed-precision float32 within
    CHECK_FP32_REL and bf16 within CHECK_BF16_REL (normwise: max |diff| <= rel * max |value|)."""
    problems, notes, worst = [], [], {}
    with h5py.File(disk_path, "r") as fa, h5py.File(regen_path, "r") as fb:
        A, B = _walk(fa), _walk(fb)
        if list(A) != list(B):
            missing = sorted(set(B) - set(A))[:5]
            extra = sorted(set(A) - set(B))[:5]
            problems.append(f"objects differ: missing {missing} extra {extra}")
            return False, problems
        for p in A:
            oa, ob = A[p], B[p]
            ka, kb = list(oa.attrs.keys()), list(ob.attrs.keys())
            if ka != kb:
                problems.append(f"{p}: attribute names {ka} != {kb}")
                continue
            for k in ka:
                if p == "/" and k in PROVENANCE_ATTRS:
                    if not _attr_equal(oa.attrs[k], ob.attrs[k]):
                        notes.append(f"provenance {k}: disk {oa.attrs[k]!r}, here {ob.attrs[k]!r}")
                    continue
                if not _attr_equal(oa.attrs[k], ob.attrs[k]):
                    problems.append(f"{p}: attribute {k}: {oa.attrs[k]!r} != {ob.attrs[k]!r}")
            if isinstance(oa, h5py.Dataset):
                if oa.dtype != ob.dtype:
                    problems.append(f"{p}: storage type {oa.dtype} != {ob.dtype}")
                    continue
                r = _compare_values(p, oa.attrs.get("dtype"), oa[()], ob[()], worst)
                if r:
                    problems.append(f"{p}: {r}")
    for what, (ratio, path) in sorted(worst.items()):
        notes.append(f"largest {what} difference: {ratio:.2e} of its bound ({path})")
    return not problems, problems + notes
