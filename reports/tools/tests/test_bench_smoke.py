"""End to end: the real mla-bench on the smallest axis points, then the report and the gate on its JSON.

Needs the built binary: CTest passes it as MLA_BENCH (suites/bench/CMakeLists.txt, test
`bench_smoke`); without it the module is skipped.
"""
import json
import os
import subprocess

import pytest

from mla_benchtools import benchjson, gate, report

BENCH = os.environ.get("MLA_BENCH")
pytestmark = pytest.mark.skipif(not BENCH, reason="MLA_BENCH (path of mla-bench) not set")

POINTS = "edge_len0_mixed,edge_page_boundaries,edge_heads7,edge_sparse_invalid,edge_fp8_tiny_values"
# Two threads whatever the machine: the kernels and the ceilings both use the one setting.
FAST = ["--mla_stream_mib=64", "--mla_ceiling_reps=1", "--mla_no_flush", "--benchmark_min_time=0.001", "--mla_threads=2"]


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    out = d / "run.json"
    p = subprocess.run([BENCH, f"--mla_points={POINTS}", *FAST, "--benchmark_repetitions=3",
                        "--benchmark_filter=^mla/|^ceiling/read_bw",
                        f"--benchmark_out={out}", "--benchmark_out_format=json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def test_json_carries_ceilings_points_and_kernels(bench_run):
    run = benchjson.load(bench_run)
    for key in ("read_bw", "triad_bw", "fma_f64", "fma_f32", "gemm_f64"):
        assert run.ceiling_value(key) > 0, key
    assert set(run.points) == set(POINTS.split(","))
    assert run.context["mla_threads"] == "2" and run.context["mla_cpu_model"]
    assert json.loads(run.context["mla_ceilings"])["threads"] == 2
    assert run.context["mla_isa_kernels"] in ("sse2", "avx2", "avx512")
    # The FMA probes say how many CPUs they got and what else ran meanwhile.
    loads = json.loads(run.context["mla_ceilings_machine_load"])
    for key in ("fma_f64", "fma_f32"):
        assert 0.0 < loads[key]["process_cpus"] <= 2.5, loads
        assert loads[key]["others_cpus"] >= 0.0, loads
    cpu = [k for k, v in run.kernels.items() if v["backend"] == "cpu"]
    assert cpu, "no CPU implementation registered"
    for k in cpu:
        for p in POINTS.split(","):
            c = run.cases.get(f"mla/{k}/{p}/manual_time")
            assert c is not None, (k, p)
            assert c.error or len(c.times_s) == 3, (k, p, c.error)


def test_bench_counters_agree_with_the_report_math(bench_run):
    run = benchjson.load(bench_run)
    doc = json.loads(bench_run.read_text())
    checked = 0
    for row in doc["benchmarks"]:
        if row.get("run_type") != "iteration" or not row["name"].startswith("mla/") or row.get("error_occurred"):
            continue
        k = run.kernels[row["run_name"].split("/")[1]]
        if not k["roof_bw"]:
            continue
        t = row["real_time"] * {"ms": 1e-3, "us": 1e-6, "ns": 1e-9, "s": 1.0}[row["time_unit"]]
        bw, peak = run.ceiling_value(k["roof_bw"]), run.ceiling_value(k["roof_peak"])
        ai = row["model_flops"] / row["model_bytes"]
        mem = ai < peak / bw
        want = 100 * (row["model_bytes"] / t / bw if mem else row["model_flops"] / t / peak)
        assert row["pct_of_ceiling"] == pytest.approx(want, rel=1e-6)
        assert row["memory_bound"] == (1.0 if mem else 0.0)
        assert row["label"].startswith("memory-bound" if mem else "compute-bound")
        # Single-threaded implementations: at most one core's worth of CPU per wall second
        # (plus clock granularity on microsecond calls).
        assert 0.0 <= row["cpu_share"] <= 1.5
        # What the rest of the machine did meanwhile (bench_host.hpp, machine_load): CPUs' worth
        # between none and the machine's (tick-sampled readings are clamped to that).
        ncpu = os.cpu_count() or 1
        assert 0.0 <= row["others_cpus"] <= ncpu
        assert 0.0 <= row["steal_cpus"] <= ncpu
        if "cpu_wait" in row:
            assert 0.0 <= row["cpu_wait"] <= 1.5
        assert row["cold_cache"] == 0.0  # edges are below the eviction threshold
        checked += 1
    assert checked > 0


def test_report_and_gate_run_on_real_output(bench_run, tmp_path, capsys):
    assert report.main([str(bench_run), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Measured ceilings" in md and "edge_page_boundaries" in md
    assert gate.main([str(bench_run), str(bench_run)]) == 0  # a run against itself is SAME
    assert "SLOWER" not in capsys.readouterr().out


def test_points_over_the_memory_budget_are_skipped_with_the_reason(tmp_path):
    out = tmp_path / "small.json"
    p = subprocess.run([BENCH, "--mla_points=edge_len1", "--mla_max_mem_gib=0.001", *FAST,
                        "--benchmark_filter=^mla/", f"--benchmark_out={out}", "--benchmark_out_format=json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    run = benchjson.load(out)
    cases = run.kernel_cases()
    # Kernels that run here are refused for size; the CUDA ones of a CUDA build have no GPU here
    # and keep their own "unavailable" reason, which outranks the size check.
    runnable = [c for c in cases if c.kernel.startswith("cpu_")]
    assert runnable and all(c.error and c.error.startswith("too large for this machine") for c in runnable)
    assert all(c.error for c in cases)


def test_list_and_flag_errors():
    p = subprocess.run([BENCH, "--mla_list"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0
    lines = p.stdout.splitlines()
    assert lines[0].startswith("name\taxis\ttiers")
    assert any(line.startswith("decode_b128_h16_sq1_sk65536\t") for line in lines)
    for bad in (["--mla_points=no_such_point"], ["--mla_tier=tpu"], ["--mla_threads=0"], ["--mla_bogus=1"],
                ["--mla_kernels=no_such_kernel"], ["--plugin"], ["--kernel", "no_such_kernel"]):
        q = subprocess.run([BENCH, *bad, *FAST, "--benchmark_filter=^$"], capture_output=True, text=True, timeout=120)
        assert q.returncode == 2, (bad, q.stderr)
        assert q.stderr.strip(), bad


GOOD, BAD = os.environ.get("MLA_PLUGIN_GOOD"), os.environ.get("MLA_PLUGIN_BAD")


# The Python door's example kernel, run by the Python that has torch (the one on PATH may not).
TORCH_KERNEL = os.path.join(os.path.dirname(__file__), "..", "..", "..", "kernels", "python", "examples", "torch_mla.py")


def _python_has_torch() -> bool:
    return subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode == 0


@pytest.mark.skipif(not (GOOD and BAD), reason="MLA_PLUGIN_GOOD / MLA_PLUGIN_BAD (example plug-ins) not set")
def test_external_kernels_beside_the_builtins_timed_only_where_they_pass(tmp_path):
    # A correct plug-in, one that drops each sequence's last key and (where torch imports) the
    # Python door's example kernel, beside the fp64 reference, in one run: the correct ones get
    # times and their calling path's overhead rows; the wrong one is judged before it is timed and
    # gets "not timed: FAIL" rows, never a number.
    out = tmp_path / "ext.json"
    python = [f"--python={os.path.abspath(TORCH_KERNEL)}:KERNEL", "--python-exe", "/usr/bin/python3"] \
        if _python_has_torch() else []
    # The selectors as `mla certify` spells them, beside the benchmark's own spelling.
    p = subprocess.run([BENCH, "--mla_points=edge_page_boundaries,edge_heads7", "--kernel", "cpu_mla_fp64",
                        "--plugin", GOOD, f"--mla_plugin={BAD}", *python, *FAST, "--benchmark_repetitions=2",
                        "--benchmark_filter=^mla/", f"--benchmark_out={out}", "--benchmark_out_format=json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    run = benchjson.load(out)
    external = {n: k for n, k in run.kernels.items() if k.get("origin")}
    good = [n for n, k in external.items() if k["origin"].get("path", "").endswith(os.path.basename(GOOD)) and not k.get("overhead_of")]
    bad = [n for n, k in external.items() if k["origin"].get("path", "").endswith(os.path.basename(BAD)) and not k.get("overhead_of")]
    assert len(good) == 1 and len(bad) == 1, external
    assert len(external[good[0]]["origin"]["sha256"]) == 64
    rows = {(c.kernel, c.point): c for c in run.kernel_cases()}
    overhead = {(run.kernels[c.kernel]["overhead_of"], c.point): c for c in run.overhead_cases()}
    for point in ("edge_page_boundaries", "edge_heads7"):
        g, b = rows[(good[0], point)], rows[(bad[0], point)]
        assert not g.error and len(g.times_s) == 2, g.error
        assert b.error and b.error.startswith("not timed: FAIL (") and not b.times_s, b.error
        o = overhead[(good[0], point)]
        assert not o.error and len(o.times_s) == 2, o.error
    if python:
        py = [n for n, k in external.items() if k["origin"]["kind"] == "python" and not k.get("overhead_of")]
        assert len(py) == 1 and len(external[py[0]]["origin"]["module_digest"]) == 64, external
        for point in ("edge_page_boundaries", "edge_heads7"):
            c, o = rows[(py[0], point)], overhead[(py[0], point)]
            assert not c.error and len(c.times_s) == 2 and not o.error and len(o.times_s) == 2, (c.error, o.error)
            # Its work is done in the door's child: no CPU share of this process is claimed for it.
            assert "cpu_share" not in c.counters
    md = report.render_markdown(run, roofline_png=None, bandwidth_png=None)
    assert "## External kernels" in md and external[good[0]]["origin"]["sha256"] in md
    assert "## Calling-path overhead" in md and f"| `{good[0]}` | edge_heads7 |" in md
    assert f"| `{bad[0]}` | edge_heads7 | not timed: FAIL (" in md
    assert "not timed: FAIL |" in md  # the kind table's cell


def _bench_rows(args, out):
    """mla-bench with `args` on two repetitions into `out`: (the run, its kernel rows by (kernel,
    point), its overhead rows by (the kernel they are the path of, point))."""
    p = subprocess.run([BENCH, *args, *FAST, "--benchmark_repetitions=2", "--benchmark_filter=^mla/",
                        f"--benchmark_out={out}", "--benchmark_out_format=json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    run = benchjson.load(out)
    rows = {(c.kernel, c.point): c for c in run.kernel_cases()}
    overhead = {(run.kernels[c.kernel]["overhead_of"], c.point): c for c in run.overhead_cases()}
    return run, rows, overhead


BAD_LOGITS = os.environ.get("MLA_PLUGIN_BAD_LOGITS")
BAD_SPARSE = os.environ.get("MLA_PLUGIN_BAD_SPARSE")


@pytest.mark.skipif(not (GOOD and BAD_LOGITS and BAD_SPARSE),
                    reason="MLA_PLUGIN_GOOD / MLA_PLUGIN_BAD_LOGITS / MLA_PLUGIN_BAD_SPARSE (example plug-ins) not set")
def test_a_plugins_other_entries_are_timed_beside_the_builtins_only_where_they_pass(tmp_path):
    # The template plug-in's top-k, indexer logits and sparse prefill entries, a plug-in whose
    # indexer logits drop the relu and one whose sparse prefill gathers -1 as position 0, beside the
    # registered kernels of those kinds: the template's entries get times and overhead rows, the
    # wrong ones "not timed: FAIL" rows, each row named by its entry.
    out = tmp_path / "entries.json"
    points = "indexer_logits_edge_paged_b3_n2_bs16_ctx67,topk_edge_r12_n4096_k2048,sparse_prefill_edge_h64_sq80_skv80_k64"
    run, rows, overhead = _bench_rows([f"--mla_points={points}", "--kernel", "cpu_topk_exact", "--kernel",
                                       "cpu_sparse_prefill_f32", "--plugin", GOOD, f"--mla_plugin={BAD_LOGITS}",
                                       f"--mla_plugin={BAD_SPARSE}"], out)
    logits_point, topk_point, sparse_point = points.split(",")
    for name, point in (("good_append_indexer_logits", logits_point), ("good_append_topk", topk_point),
                        ("good_append_sparse_prefill", sparse_point)):
        assert run.kernels[name]["origin"]["path"].endswith(os.path.basename(GOOD)), run.kernels[name]
        r, o = rows[(name, point)], overhead[(name, point)]
        assert not r.error and len(r.times_s) == 2, r.error
        assert not o.error and len(o.times_s) == 2, o.error
    for name, point in (("indexer_no_relu", logits_point), ("sparse_prefill_minus_one_as_zero", sparse_point)):
        bad = rows[(name, point)]
        assert bad.error and bad.error.startswith("not timed: FAIL (") and not bad.times_s, (name, bad.error)
    assert not rows[("cpu_topk_exact", topk_point)].error
    assert not rows[("cpu_sparse_prefill_f32", sparse_point)].error
    assert run.points[sparse_point]["axis"] == "sparse_prefill"
    md = report.render_markdown(run, roofline_png=None, bandwidth_png=None)
    assert "good_append_indexer_logits" in md and "not timed: FAIL" in md
    assert "good_append_sparse_prefill" in md and "V3.2 sparse prefill" in md


EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "kernels", "python", "examples")


@pytest.mark.skipif(not _python_has_torch(), reason="/usr/bin/python3 cannot import torch")
def test_a_python_kernels_other_entries_are_timed_beside_the_builtins_only_where_they_pass(tmp_path):
    # FlashMLA's sparse prefill and vLLM's merge through their adapters (CPU stand-ins), FlashMLA's
    # with its bug that gathers -1 as position 0, beside the registered kernels of those kinds:
    # the correct entries get times (their own clock, the trip kept apart) and overhead rows, the
    # wrong one "not timed: FAIL" rows; each Python entry is named by the kernel's own name.
    out = tmp_path / "py_entries.json"
    sparse, merge = "sparse_prefill_edge_h64_sq80_skv80_k64", "merge_edge_empty_sides_bf16_t64_h16_d128"
    ex = os.path.abspath(EXAMPLES)
    run, rows, overhead = _bench_rows([f"--mla_points={sparse},{merge}", "--kernel", "cpu_sparse_prefill_f32", "--kernel",
                                       "cpu_merge_f32", f"--python={ex}/flashmla_sparse_cpu.py:KERNEL",
                                       f"--python={ex}/flashmla_sparse_cpu.py:BUG_MINUS_ONE_AS_ZERO",
                                       f"--python={ex}/merge_cpu.py:VLLM", "--python-exe", "/usr/bin/python3"], out)
    for name, point in (("flashmla_sparse_prefill_cpu_standin", sparse), ("vllm_merge_cpu_standin", merge)):
        k = run.kernels[name]
        assert k["origin"]["kind"] == "python" and len(k["origin"]["module_digest"]) == 64, k
        r, o = rows[(name, point)], overhead[(name, point)]
        assert not r.error and len(r.times_s) == 2, r.error
        assert not o.error and len(o.times_s) == 2, o.error
        # Its own clock is the time; the trip through the door is kept beside it.
        assert r.counters.get("round_trip_seconds", 0) > 0, r.counters
        # It computes in the door's child: no CPU share of this process is claimed for it.
        assert "cpu_share" not in r.counters
    bad = rows[("flashmla_sparse_prefill_cpu_bug_minus_one_as_zero", sparse)]
    assert bad.error and bad.error.startswith("not timed: FAIL (") and not bad.times_s, bad.error
    for name, point in (("cpu_sparse_prefill_f32", sparse), ("cpu_merge_f32", merge)):
        assert not rows[(name, point)].error, (name, rows[(name, point)].error)


CLI = os.environ.get("MLA_CLI")


@pytest.mark.skipif(not CLI, reason="MLA_CLI (path of mla) not set")
def test_the_report_reads_the_certificate_mla_certify_writes(bench_run, tmp_path):
    # `./mla.sh certify` hands the certifier's own certificate to the report: the format the
    # report accepts must be the one `mla certify` writes today, so take a real one.
    out = tmp_path / "cert"
    p = subprocess.run([CLI, "certify", "--goldens", "fixtures/goldens", "--out", str(out), "--kernel", "cpu_mla_fp64",
                        "--family", "attn_core", "--case", "attn_core/(all_empty|h1_sq1_single_page)$"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    cert = report.load_certificate(out / "certificate.json")
    md = report.render_markdown(benchjson.load(bench_run), cert, roofline_png=None, bandwidth_png=None)
    assert "cpu_mla_fp64" in md
    assert "Certificate: PASS" in md, md[:3000]
