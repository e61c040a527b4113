"""Partial benchmark runs (a device-check bench stopped by its timeout): the reader, the torch
merge and the report accept what was measured and say, everywhere, that the run did not finish."""
from __future__ import annotations

import json
import sys

import pytest
from benchfiles import bench_json, kernel, point

import torch_side_by_side as tsb
from mla_benchtools import benchjson, report

P1, P2 = "decode_b128_h16_sq1_sk1024", "decode_b128_h16_sq1_sk4096"


def gpu_doc():
    pts = {P1: point(batch=128, seqlen=1024), P2: point(batch=128, seqlen=4096)}
    c = {"model_bytes": 1.5e8, "model_flops": 4.5e9}
    return bench_json({f"mla/cuda_mla_decode/{P1}/manual_time": ([0.05, 0.051], c),
                       f"mla/cuda_mla_decode/{P2}/manual_time": ([0.2, 0.21], c)},
                      points=pts, kernels=[kernel("cuda_mla_decode", "bf16", backend="cuda")],
                      context={"mla_gpu_name": "Test GPU", "mla_gpu_l2_flush": "read-only stream over 240 MiB"})


def incremental(doc, complete, rows, stopped=None):
    state = {"complete": complete, "rows": rows, "last": doc["benchmarks"][-1]["name"]}
    if stopped:
        state["stopped"] = stopped
    return {"mla_run": state, **doc}


def test_a_complete_file_reads_as_complete(write_json):
    run = benchjson.load(write_json(incremental(gpu_doc(), True, 2)))
    assert run.complete and run.run_note == ""
    assert benchjson.load(write_json(gpu_doc())).complete  # a plain Google Benchmark file too


def test_an_incremental_file_of_a_stopped_run_is_partial(write_json):
    run = benchjson.load(write_json(incremental(gpu_doc(), False, 2, "mla/x/y: cudaErrorIllegalAddress")))
    assert not run.complete
    assert "stopped before its end after 2 benchmarks" in run.run_note
    assert "cudaErrorIllegalAddress" in run.run_note
    assert len(run.kernel_cases()) == 2  # every finished row is kept


def test_a_file_cut_off_mid_write_keeps_its_complete_rows(tmp_path):
    text = json.dumps(gpu_doc(), indent=2)  # Google Benchmark's layout: rows at indent 4
    rows = json.loads(text)["benchmarks"]
    # Cut inside the last row: everything before it must survive.
    cut = text.rfind('"name"')
    p = tmp_path / "cut.json"
    p.write_text(text[:cut])
    run = benchjson.load(p)
    assert not run.complete and "cut off mid-write" in run.run_note
    assert f"{len(rows) - 1} complete rows recovered" in run.run_note
    # Cut inside the context: nothing is recoverable, and that is an error naming the file.
    p.write_text(text[:text.find('"mla_points"')])
    with pytest.raises(benchjson.BenchFileError, match="not JSON"):
        benchjson.load(p)


def test_report_says_partial_at_the_top_and_in_the_run_table(write_json):
    run = benchjson.load(write_json(incremental(gpu_doc(), False, 2)))
    md = report.render_markdown(run)
    assert "**Partial run**" in md.split("## Run")[0]
    assert "| run | PARTIAL: the run stopped before its end after 2 benchmarks" in md
    assert "| GPU L2 flush between timed calls | read-only stream over 240 MiB |" in md
    full = report.render_markdown(benchjson.load(write_json(incremental(gpu_doc(), True, 2))))
    assert "Partial run" not in full and "| run | complete |" in full


def test_torch_merge_accepts_a_partial_gpu_file_and_keeps_it_partial(tmp_path, monkeypatch, write_json):
    gpu = tmp_path / "gpu.json"
    text = json.dumps(incremental(gpu_doc(), False, 1), indent=2)
    gpu.write_text(text[:text.rfind('"name"')])  # partial and cut off
    torch_doc = {"context": {"mla_points": "{}", "mla_kernels": "[]", "mla_ceilings": "{}"}, "benchmarks": []}
    monkeypatch.setattr(tsb, "run", lambda args: torch_doc)
    merged = tmp_path / "combined.json"
    assert tsb.main(["--out", str(tmp_path / "torch.json"), "--merge-with", str(gpu),
                     "--merged-out", str(merged)]) == 0
    run = benchjson.load(merged)
    assert not run.complete and "cut off mid-write" in run.run_note
    assert run.kernel_cases(), "the finished GPU rows are in the merged file"


def test_torch_merge_refuses_an_unreadable_gpu_file(tmp_path, monkeypatch, capsys):
    gpu = tmp_path / "gpu.json"
    gpu.write_text('{"context": {"date": ')
    monkeypatch.setattr(tsb, "run", lambda args: {"context": {}, "benchmarks": []})
    assert tsb.main(["--out", str(tmp_path / "t.json"), "--merge-with", str(gpu),
                     "--merged-out", str(tmp_path / "m.json")]) == 1
    assert "cannot merge" in capsys.readouterr().err
