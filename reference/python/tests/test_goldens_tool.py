"""The `goldens` writer and checker themselves (on the small cache_boundary family)."""
import os
import shutil

import h5py
import numpy as np

from mla_ref import goldens


def test_write_is_deterministic_and_check_detects_changes(tmp_path):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    goldens.write_family("cache_boundary", str(a), goldens.CANONICAL_COMMAND)
    goldens.write_family("cache_boundary", str(b), goldens.CANONICAL_COMMAND)
    assert goldens.sha256_file(a) == goldens.sha256_file(b)
    ok, notes = goldens.compare_files(str(a), str(b))
    assert ok, notes

    # a computed fp64 value off by an ulp: within tolerance (1e-3 of the fp64 bound); by 1e-13
    # of the largest magnitude (a tenth of the bound an fp64 kernel gets): a failure
    c = tmp_path / "c.h5"
    shutil.copy(a, c)
    path = "cases/tiny_boundary/accept/fp64/absorbed/out"
    with h5py.File(c, "r+") as f:
        d = f[path]
        v = d[()]
        v.flat[0] = np.nextafter(v.flat[0], np.inf)
        d[...] = v
    assert goldens.compare_files(str(c), str(b))[0]
    with h5py.File(c, "r+") as f:
        v = f[path][()]
        v.flat[0] += 1e-13 * np.abs(v).max()
        f[path][...] = v
    ok, notes = goldens.compare_files(str(c), str(b))
    assert not ok and any("accept/fp64/absorbed/out" in n for n in notes)

    # a stored bf16 input must be identical; an attribute too; and a float64 definition
    # (rope/inv_freq) by a single ulp
    shutil.copy(a, c)
    with h5py.File(c, "r+") as f:
        x = f["cases/tiny_boundary/accept/x"]
        v = x[()]
        v.flat[3] ^= 1
        x[...] = v
        f["cases/tiny_boundary"].attrs["seed"] = np.int64(12345)
        r = f["cases/tiny_boundary/rope/inv_freq"]
        v = r[()]
        v[1] = np.nextafter(v[1], 0)
        r[...] = v
    ok, notes = goldens.compare_files(str(c), str(b))
    assert not ok
    assert any("accept/x" in n for n in notes) and any("attribute seed" in n for n in notes)
    assert any("rope/inv_freq" in n and "must be identical" in n for n in notes)

    # provenance differences are reported, not failed
    shutil.copy(a, c)
    with h5py.File(c, "r+") as f:
        f.attrs.create("torch_version", "9.9.9", dtype=h5py.string_dtype("utf-8"))
    ok, notes = goldens.compare_files(str(c), str(b))
    assert ok and any("torch_version" in n for n in notes)


def test_check_cli_fails_on_a_bad_manifest(tmp_path, capsys):
    d = tmp_path / "g"
    os.makedirs(d)
    goldens.write_family("cache_boundary", str(d / "cache_boundary.h5"), goldens.CANONICAL_COMMAND)
    goldens.write_manifest(str(d))
    assert goldens.check(str(d), ("cache_boundary",))
    with open(d / "MANIFEST.sha256", "w") as f:
        f.write("0" * 64 + "  cache_boundary.h5\n")
    assert not goldens.check(str(d), ("cache_boundary",))
    assert "FAIL cache_boundary.h5" in capsys.readouterr().out
