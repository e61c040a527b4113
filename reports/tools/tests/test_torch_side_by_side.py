"""torch_side_by_side.py without a GPU: its byte/FLOP models agree with the C++ ones, its JSON is
what reports/tools reads (alone and merged into an mla-bench file), its point table is the one
mla-bench --mla_list_points prints, and on a machine without CUDA it exits 77 with the reason, timing nothing."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from benchfiles import TOOLS, bench_json, kernel, point

import torch_side_by_side as tsb
from mla_benchtools import benchjson, report

SCRIPT = TOOLS / "torch_side_by_side.py"

# What `mla-bench --mla_list_points --mla_points=...` prints for two of the points (the C++ formats
# seqlen_mean with {} of a double: 1024, not 1024.0).
TSV = ("name\taxis\tbatch\ts_q\theads\tpage_size\ttopk\tcache\tseqlen_max\tseqlen_mean\tcausal\n"
       "decode_b128_h16_sq1_sk1024\tdecode_memory\t128\t1\t16\t64\t0\tbf16\t1024\t1024\t1\n"
       "compute_b128_h128_sq2_sk4096\tdecode_compute\t128\t2\t128\t64\t0\tbf16\t4096\t4096\t1\n")


def test_tsv_parses_into_the_default_points():
    pts = tsb.parse_points_tsv(TSV)
    by_name = {p.name: p for p in tsb.DEFAULT_POINTS}
    assert [p.name for p in pts] == ["decode_b128_h16_sq1_sk1024", "compute_b128_h128_sq2_sk4096"]
    for p in pts:
        assert p == by_name[p.name]


@pytest.mark.parametrize("text,msg", [
    ("", "empty file"),
    ("name\taxis\n", "expected the header"),
    (TSV.splitlines()[0] + "\nx\ty\n", "2 fields"),
    (TSV.splitlines()[0] + "\nx\taxis\tb\t1\t1\t64\t0\tbf16\t1\t1\t1\n", "line 2"),
])
def test_bad_tsv_is_a_usage_error(text, msg):
    with pytest.raises(tsb.UsageError, match=msg):
        tsb.parse_points_tsv(text)


def test_default_points_match_the_binary_when_built():
    exe = os.environ.get("MLA_BENCH")
    if not exe:
        pytest.skip("MLA_BENCH (path of mla-bench) not set")
    names = ",".join(p.name for p in tsb.DEFAULT_POINTS)
    out = subprocess.run([exe, "--mla_list_points", f"--mla_points={names}"], check=True, capture_output=True,
                         text=True).stdout
    assert tsb.parse_points_tsv(out) == list(tsb.DEFAULT_POINTS)


def test_absorbed_model_equals_the_suites_mla_model():
    p = tsb.DEFAULT_POINTS[0]  # b=128, s_q=1, h=16, s_k=1024
    rows, tokens = 128 * 16, 128 * 1024
    b, f = tsb.cost_model(p, "torch_absorbed_einsum")
    # mla_cost_model: q bf16 + 1152 B per cached token + bf16 out + fp32 lse; 2*pairs*h*(576+512).
    assert b == rows * 576 * 2 + tokens * 1152 + rows * 512 * 2 + rows * 4 == 155_459_584
    assert f == 2 * tokens * 16 * 1088


def test_causal_pairs_follow_the_bottom_right_diagonal():
    p = next(p for p in tsb.DEFAULT_POINTS if p.s_q == 2 and p.heads == 128)
    assert tsb.attended_pairs(p) == (4096 - 1) + 4096
    nc = tsb.Point(**{**p.__dict__, "causal": False})
    assert tsb.attended_pairs(nc) == 2 * 4096
    short = tsb.Point(**{**p.__dict__, "s_q": 4, "seqlen_max": 3, "seqlen_mean": 3.0})
    assert tsb.attended_pairs(short) == 0 + 1 + 2 + 3  # the first query sees nothing


def test_decompressed_mha_reads_the_documented_bytes_per_token():
    p = tsb.DEFAULT_POINTS[0]
    b1, _ = tsb.cost_model(p, "torch_sdpa_mha")
    p2 = tsb.Point(**{**p.__dict__, "seqlen_max": 2048, "seqlen_mean": 2048.0})
    b2, _ = tsb.cost_model(p2, "torch_sdpa_mha")
    assert (b2 - b1) / (128 * 1024) == 10240  # naive MHA, 16 heads (docs/field.md)
    lb1, lf = tsb.cost_model(p, "torch_sdpa_latent")
    lb2, _ = tsb.cost_model(p2, "torch_sdpa_latent")
    assert (lb2 - lb1) / (128 * 1024) == 16 * (576 + 512) * 2  # cuda_naive_mha_cublas's model
    assert lf == tsb.cost_model(p, "torch_absorbed_einsum")[1]
    with pytest.raises(tsb.UsageError):
        tsb.cost_model(p, "nope")


def test_the_softmax_scale_is_the_python_references(tmp_path):
    # One definition (mla_ref.config, correctly rounded), read by the side-by-side, not copied:
    # from the source tree, and from the bundle's layout (make_bundle.sh puts reference/python's
    # mla_ref beside the tools, with no source tree around them).
    from mla_ref import config
    want = config.preset("v3").softmax_scale
    assert tsb.v3_softmax_scale() == want
    tools = tmp_path / "tools" / "reports"
    shutil.copytree(TOOLS, tools, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    shutil.copytree(Path(config.__file__).parent, tools / "mla_ref", ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import torch_side_by_side as t;"
            " s = t.v3_softmax_scale(); import mla_ref; print(mla_ref.__file__); print(repr(s))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", code, str(tools)], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    where, scale = r.stdout.split()
    assert Path(where).parent == tools / "mla_ref"
    assert float(scale) == want


def test_unsupported_points_say_why():
    base = tsb.DEFAULT_POINTS[0].__dict__
    assert tsb.unsupported(tsb.DEFAULT_POINTS[0]) is None
    assert "sparse" in tsb.unsupported(tsb.Point(**{**base, "topk": 2048}))
    assert "fp8" in tsb.unsupported(tsb.Point(**{**base, "cache": "fp8"}))
    assert "uniform" in tsb.unsupported(tsb.Point(**{**base, "seqlen_mean": 500.0}))


def torch_doc():
    """A document as run() writes it, built from the pure helpers with made-up times."""
    rows = []
    p = tsb.DEFAULT_POINTS[0]
    for v in tsb.VARIANTS[:2]:
        b, f = tsb.cost_model(p, v)
        rows += tsb.rows_for(f"mla/{v}/{p.name}/manual_time", [1e-4, 1.1e-4, 0.9e-4], [10, 10, 10], b, f,
                             p.batch * p.s_q, "test", {"event_timed": 1.0})
    rows += tsb.rows_for("ceiling/torch_copy_bw/manual_time", [1e-3] * 3, [5] * 3, 4e9, 0.0, 0, "copy")
    rows.append(tsb.error_row(f"mla/torch_sdpa_latent/{p.name}/manual_time", "unsupported: too large"))
    ctx = tsb.base_context({
        "mla_ceilings": json.dumps({"torch_read_bw": {"value": 4e12, "unit": "B/s", "method": "t"},
                                    "torch_gemm_bf16": {"value": 7e14, "unit": "FLOP/s", "method": "t"}}),
        "mla_points": json.dumps({p.name: tsb.point_json(p)}),
        "mla_kernels": json.dumps([tsb.kernel_json(v, "torch_read_bw", "torch_gemm_bf16") for v in tsb.VARIANTS]),
        "mla_torch_version": "2.11.0",
    })
    return {"context": ctx, "benchmarks": rows}


def test_json_is_read_by_the_report_tools(write_json, tmp_path):
    run = benchjson.load(write_json(torch_doc()))
    cases = run.kernel_cases()
    assert {c.kernel for c in cases} == set(tsb.VARIANTS)
    ein = next(c for c in cases if c.kernel == "torch_absorbed_einsum")
    assert ein.point == "decode_b128_h16_sq1_sk1024"
    assert ein.median_s == pytest.approx(1e-4)
    m = report.metrics_for(run, ein)
    assert m.bps == pytest.approx(155_459_584 / 1e-4)
    assert m.bound == "memory" and m.pct == pytest.approx(100 * m.bps / 4e12)
    latent = next(c for c in cases if c.kernel == "torch_sdpa_latent")
    assert latent.error == "unsupported: too large"
    md = report.render_markdown(run)
    assert "torch_absorbed_einsum" in md


def test_merge_into_a_device_bench_file_uses_the_gpu_ceilings(write_json):
    p = "decode_b128_h16_sq1_sk1024"
    gpu = bench_json(
        {f"mla/cuda_mla_decode/{p}/manual_time": ([0.05, 0.05, 0.06], {"model_bytes": 155_459_584,
                                                                       "model_flops": 4.5e9})},
        points={p: point(batch=128, seqlen=1024)},
        kernels=[{**kernel("cuda_mla_decode", "bf16", backend="cuda"), "roof_bw": "gpu_read_bw",
                  "roof_peak": "gpu_gemm_bf16"}],
        ceilings={"gpu_read_bw": {"value": 4.2e12, "unit": "B/s", "method": "c++"},
                  "gpu_gemm_bf16": {"value": 7.8e14, "unit": "FLOP/s", "method": "c++"}})
    merged = tsb.merge(gpu, torch_doc())
    run = benchjson.load(write_json(merged))
    assert {"cuda_mla_decode", *tsb.VARIANTS} <= set(run.kernels)
    for v in tsb.VARIANTS:
        assert run.kernels[v]["roof_bw"] == "gpu_read_bw"
        assert run.kernels[v]["roof_peak"] == "gpu_gemm_bf16"
    assert run.ceilings["gpu_read_bw"]["value"] == 4.2e12  # the GPU bench's own entry wins
    assert "torch_read_bw" in run.ceilings                  # torch's kept as a cross-check
    assert run.points[p]["why"] == "test"                   # the GPU bench's point entry wins
    assert run.context["mla_torch_version"] == "2.11.0"
    assert len(merged["benchmarks"]) == len(gpu["benchmarks"]) + len(torch_doc()["benchmarks"])
    ein = next(c for c in run.kernel_cases() if c.kernel == "torch_absorbed_einsum")
    assert report.metrics_for(run, ein).bw_roof == 4.2e12


def test_without_cuda_it_exits_77_and_times_nothing(tmp_path):
    try:
        import torch
        if torch.cuda.is_available():
            pytest.skip("a CUDA device is present: the no-GPU path is checked on machines without one")
    except ImportError:
        pass  # no torch at all is also "no CUDA device": the script must say so
    out = tmp_path / "t.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 77, r.stderr
    assert "skipped" in r.stderr and ("no CUDA device" in r.stderr or "not importable" in r.stderr), r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()


def test_usage_errors_come_before_torch(tmp_path):
    bad = tmp_path / "p.tsv"
    bad.write_text("not a header\n")
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "t.json"), "--points-tsv", str(bad)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "expected the header" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "t.json"), "--variants", "bogus"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown variant" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", "x", "--merge-with", "y"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "go together" in r.stderr


def test_report_generator_runs_on_a_merged_gpu_file(write_json, tmp_path):
    """bench_report.py end to end on what check.sh feeds it: GPU ceilings under gpu_* keys, CUDA
    and torch rows on the same point, ceiling rows; Markdown and both plots are written."""
    p = "decode_b128_h16_sq1_sk1024"
    gpu_ceil = {"gpu_read_bw": {"value": 4.2e12, "unit": "B/s", "method": "c++"},
                "gpu_copy_bw": {"value": 4.3e12, "unit": "B/s", "method": "c++"},
                "gpu_gemm_bf16": {"value": 7.8e14, "unit": "FLOP/s", "method": "c++"}}
    gpu = bench_json(
        {f"mla/cuda_mla_decode/{p}/manual_time": ([0.05, 0.05, 0.06], {"model_bytes": 155_459_584,
                                                                       "model_flops": 4.5e9, "cold_cache": 1.0}),
         "ceiling/gpu_read_bw/manual_time": ([0.5, 0.5, 0.5], {"bytes_per_second": 4.2e12})},
        points={p: point(batch=128, seqlen=1024)},
        kernels=[{**kernel("cuda_mla_decode", "bf16", backend="cuda"), "roof_bw": "gpu_read_bw",
                  "roof_peak": "gpu_gemm_bf16"}],
        ceilings=gpu_ceil, context={"mla_gpu_name": "NVIDIA H200"})
    merged = write_json(tsb.merge(gpu, torch_doc()))
    out = tmp_path / "report"
    assert report.main([merged, "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    for k in ("cuda_mla_decode", "torch_absorbed_einsum", "gpu_read_bw"):
        assert k in md
    assert (out / "roofline.png").stat().st_size > 0 and (out / "bandwidth.png").stat().st_size > 0
