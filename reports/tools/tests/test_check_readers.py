"""The device check's readers (check_readers.py): the verdict and detail of each step from the
files it wrote, the kernels selected from the registry's listing, and the rehearsal's time plan."""
import json
import subprocess
import sys

import benchfiles  # noqa: F401  (reports/tools on sys.path)
import pytest

import check_readers as cr

SCRIPT = str(benchfiles.TOOLS / "check_readers.py")


def run_cli(*args, stdin=None):
    return subprocess.run([sys.executable, SCRIPT, *args], input=stdin, capture_output=True, text=True)


def write(tmp_path, name, doc):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(p)


def gtest_doc(*results):  # results: "pass", "fail" or "skip", one test each
    tests = []
    for i, r in enumerate(results):
        t = {"name": f"T{i}", "result": "SKIPPED" if r == "skip" else "COMPLETED"}
        if r == "fail":
            t["failures"] = [{"failure": "expected 1, got 2"}]
        tests.append(t)
    return {"testsuites": [{"name": "Suite", "testsuite": tests}]}


# ---- gtest ---------------------------------------------------------------------------------------


def test_gtest_verdict_counts_and_names_the_failures(tmp_path):
    assert cr.gtest_verdict(write(tmp_path, "a.json", gtest_doc("pass", "pass"))) == ("PASS", "2 tests, 0 failed, 0 skipped")
    st, detail = cr.gtest_verdict(write(tmp_path, "b.json", gtest_doc("pass", "fail", "skip")))
    assert st == "FAIL" and detail == "3 tests, 1 failed, 1 skipped: Suite.T1"


def test_gtest_verdict_every_test_skipped_is_a_skip(tmp_path):
    assert cr.gtest_verdict(write(tmp_path, "a.json", gtest_doc("skip", "skip")))[0] == "SKIP"
    assert cr.gtest_verdict(write(tmp_path, "b.json", gtest_doc("skip", "pass")))[0] == "PASS"


def test_gtest_verdict_unreadable_file_fails_with_the_reason(tmp_path):
    st, detail = cr.gtest_verdict(str(tmp_path / "missing.json"))
    assert st == "FAIL" and detail.startswith("no readable gtest JSON (") and "missing.json" in detail
    st, detail = cr.gtest_verdict(write(tmp_path, "cut.json", '{"testsuites": ['))
    assert st == "FAIL" and "no readable gtest JSON" in detail


def test_gtest_verdict_cli_prints_status_tab_detail(tmp_path):
    p = run_cli("gtest-verdict", write(tmp_path, "a.json", gtest_doc("fail")))
    assert p.returncode == 0 and p.stdout == "FAIL\t1 tests, 1 failed, 0 skipped: Suite.T0\n"


# ---- certificates --------------------------------------------------------------------------------


def kernel(name, counts=None, cases=(), unavailable=None, isolation=None, version=None):
    k = {"name": name, "unavailable": unavailable, "counts": counts or {}, "cases": list(cases)}
    if isolation:
        k["origin"] = {"kind": "builtin", "isolation": isolation}
    if version:
        k["version"] = version
    return k


def test_certificate_detail_of_builtin_kernels_gives_nonzero_counts_and_isolation():
    cert = {"kernels": [kernel("cuda_mla_decode", {"PASS": 2, "FAIL": 0, "UNSUPPORTED": 1}, isolation="in_process"),
                        kernel("cuda_naive_mha_cublas", {"PASS": 3}, isolation="in_process")]}
    assert cr.certificate_detail(cert, plugin=False) == (
        False, "cuda_mla_decode (in_process): 2 PASS, 1 UNSUPPORTED; cuda_naive_mha_cublas (in_process): 3 PASS")


def test_certificate_detail_every_kernel_unavailable_is_allskip():
    cert = {"kernels": [kernel("cuda_mla_decode", unavailable="CUDA unavailable: no device"),
                        kernel("cuda_naive_mha_cublas", unavailable="CUDA unavailable: no device")]}
    allskip, detail = cr.certificate_detail(cert, plugin=False)
    assert allskip and detail.startswith("cuda_mla_decode: unavailable (CUDA unavailable: no device); ")
    one_ran = {"kernels": [cert["kernels"][0], kernel("x", {"PASS": 1})]}
    assert cr.certificate_detail(one_ran, plugin=False)[0] is False
    assert cr.certificate_detail({"kernels": []}, plugin=False) == (False, "")


def test_certificate_detail_of_a_plugin_counts_appends_and_decodes_apart():
    cases = [{"family": "cache_append", "verdict": "PASS"}, {"family": "attn_core", "verdict": "PASS"},
             {"family": "attn_core", "verdict": "PASS"}, {"family": "attn_core", "verdict": "FAIL"}]
    cert = {"kernels": [kernel("cuda_plugin", {"PASS": 3, "FAIL": 1}, cases, isolation="child_per_case")]}
    assert cr.certificate_detail(cert, plugin=True) == (
        False, "cuda_plugin (child_per_case): 1 append PASS, 1 decode FAIL, 2 decode PASS")
    # Without counts a built-in kernel's cases are counted, without the family.
    assert cr.certificate_detail({"kernels": [kernel("k", {}, cases)]}, plugin=False) == (False, "k: 1 FAIL, 3 PASS")


def test_python_door_detail_names_the_kernel_that_did_not_import():
    cert = {"kernels": [kernel("flashmla", {"PASS": 4, "NOT_CLAIMED": 3, "SKIPPED": 0}, version="1.0.0"),
                        kernel("flashinfer", {"SKIPPED": 7}, unavailable="flashinfer.mla does not import here")]}
    assert cr.python_door_detail(cert) == (
        False, "flashmla 1.0.0: 3 NOT_CLAIMED, 4 PASS; flashinfer: unavailable (flashinfer.mla does not import here)")
    idle = {"kernels": [kernel("flashmla", {"SKIPPED": 3}), kernel("flashinfer", unavailable="no module")]}
    assert cr.python_door_detail(idle) == (
        True, "flashmla: unavailable (every case skipped); flashinfer: unavailable (no module)")


def test_certificate_cli_prefixes_allskip_and_reports_an_unreadable_file(tmp_path):
    f = write(tmp_path, "c.json", {"kernels": [kernel("cuda_mla_decode", unavailable="no GPU")]})
    assert run_cli("certificate-detail", f).stdout == "ALLSKIP cuda_mla_decode: unavailable (no GPU)\n"
    missing = str(tmp_path / "none.json")
    assert run_cli("certificate-detail", missing).stdout.startswith("no readable certificate: ")
    assert run_cli("python-door-detail", missing).stdout.startswith("FAIL no readable certificate: ")


# ---- the bench -------------------------------------------------------------------------------------


def row(name, error=None, **extra):
    r = {"name": name, "run_type": "iteration", "real_time": 0.05}
    if error:
        r.update(error_occurred=True, error_message=error)
    r.update(extra)
    return r


def bench_doc(rows, state=None):
    d = {"benchmarks": rows + [{"name": "mla/x/p/manual_time_mean", "run_type": "aggregate"}]}
    if state is not None:
        d["mla_run"] = state
    return d


def test_bench_detail_a_baseline_may_refuse_the_optimized_kernel_may_not():
    rows = [row("mla/cuda_mla_decode/p/manual_time"), row("mla/cuda_naive_mha_cublas/sparse/manual_time", "unsupported: sparse")]
    assert cr.bench_detail(bench_doc(rows), ["cuda_mla_decode"]) == ("PASS", "1 rows, 1 unsupported")
    refused = rows + [row("mla/cuda_mla_decode/fp8/manual_time", "unsupported: fp8")]
    st, detail = cr.bench_detail(bench_doc(refused), ["cuda_mla_decode"])
    assert st == "FAIL" and detail == "1 rows, 1 unsupported; errors: mla/cuda_mla_decode/fp8/manual_time: unsupported: fp8"
    # A kernel outside must_claim may refuse.
    assert cr.bench_detail(bench_doc(refused), [])[0] == "PASS"


def test_bench_detail_any_other_error_or_no_good_row_fails():
    st, detail = cr.bench_detail(bench_doc([row("mla/cuda_naive_mha_cublas/p/manual_time", "CUDA error: illegal address")]),
                                 ["cuda_mla_decode"])
    assert st == "FAIL" and "errors: mla/cuda_naive_mha_cublas/p/manual_time: CUDA error: illegal address" in detail
    assert cr.bench_detail(bench_doc([]), ["cuda_mla_decode"]) == ("FAIL", "0 rows, 0 unsupported")


def test_bench_detail_partial_run_and_measured_speedup():
    rows = [row("mla/cuda_mla_decode/p/manual_time"),
            row("mla_ratio/cuda_mla_decode/fp8_b128_h16_sq1_sk8192/manual_time", speedup_fp8_over_bf16=1.8123)]
    doc = bench_doc(rows, {"complete": False, "rows": 2, "last": "mla/cuda_mla_decode/p/manual_time"})
    assert cr.bench_detail(doc, ["cuda_mla_decode"]) == (
        "PASS", "2 rows, 0 unsupported; PARTIAL: 2 benchmarks done, last mla/cuda_mla_decode/p/manual_time; "
                "measured fp8/bf16 speedup fp8_b128_h16_sq1_sk8192: 1.812x")


def test_bench_detail_external_kernels_not_timed_are_findings_not_failures():
    kernels = [{"name": "cuda_mla_decode"}, {"name": "flashmla", "origin": {"kind": "python"}},
               {"name": "flashmla~overhead", "origin": {"kind": "python"}}]
    rows = [row("mla/cuda_mla_decode/p/manual_time"), row("mla/flashmla/p/manual_time"),
            row("mla/flashmla~overhead/p/manual_time"),
            row("mla/flashmla/q/manual_time", "not timed: FAIL (out: 3 elements over tolerance)"),
            row("mla/flashmla/r/manual_time", "not timed: this run times its external kernels only at --mla_external_points"),
            row("mla_ratio/flashmla/fp8_r_vs_r", "not timed: no timing of flashmla/r (not timed: this run times its external "
                                                 "kernels only at --mla_external_points)")]
    doc = bench_doc(rows)
    doc["context"] = {"mla_kernels": json.dumps(kernels)}
    st, detail = cr.bench_detail(doc, ["cuda_mla_decode"])
    assert st == "PASS"
    assert detail == ("3 rows, 0 unsupported; external kernels (flashmla, flashmla~overhead): 2 rows timed, 3 not timed "
                      "(mla/flashmla/q/manual_time: not timed: FAIL (out: 3 elements over tolerance))")
    # The same error of the suite's own kernel fails the step.
    own = bench_doc([row("mla/cuda_mla_decode/q/manual_time", "not timed: FAIL (out)"), row("mla/cuda_mla_decode/p/manual_time")])
    own["context"] = {"mla_kernels": json.dumps(kernels)}
    assert cr.bench_detail(own, ["cuda_mla_decode"])[0] == "FAIL"


def test_bench_detail_cli_unreadable_json_fails(tmp_path):
    p = run_cli("bench-detail", write(tmp_path, "g.json", "{"), "--must-claim", "cuda_mla_decode")
    assert p.stdout.startswith("FAIL\tunreadable benchmark JSON: ")


# ---- kernels from the registry ---------------------------------------------------------------------

# The shape of `mla kernels --json` (name, backend, role, out_dtype), in registration order.
LISTING = [{"name": "cpu_mla_fp64", "backend": "cpu", "role": "oracle", "out_dtype": "f64"},
           {"name": "cpu_naive_mha_fp64", "backend": "cpu", "role": "baseline", "out_dtype": "f64"},
           {"name": "cpu_naive_mha_fp32", "backend": "cpu", "role": "baseline", "out_dtype": "f32"},
           {"name": "cuda_naive_mha_cublas", "backend": "cuda", "role": "baseline", "out_dtype": "bf16"},
           {"name": "cuda_mla_decode", "backend": "cuda", "role": "optimized", "out_dtype": "bf16"}]


def test_every_cuda_kernel_is_selected_in_registration_order():
    assert cr.select_kernels(LISTING, "cuda") == ["cuda_naive_mha_cublas", "cuda_mla_decode"]
    extra = LISTING + [{"name": "cuda_new", "backend": "cuda", "role": "optimized", "out_dtype": "bf16"}]
    assert cr.select_kernels(extra, "cuda") == ["cuda_naive_mha_cublas", "cuda_mla_decode", "cuda_new"]
    assert cr.select_kernels(extra, "must-claim") == ["cuda_mla_decode", "cuda_new"]
    assert cr.select_kernels(LISTING[:3], "cuda") == []


def test_standins_take_the_same_role_with_the_narrowest_output_else_the_oracle():
    assert cr.select_kernels(LISTING, "standins") == ["cpu_mla_fp64", "cpu_naive_mha_fp32"]
    only_optimized = [k for k in LISTING if k["name"] != "cuda_naive_mha_cublas"]
    assert cr.select_kernels(only_optimized, "standins") == ["cpu_mla_fp64"]
    no_oracle = [k for k in LISTING if k["name"] != "cpu_mla_fp64"]
    # No oracle: any host kernel of the kind, the narrowest.
    assert cr.select_kernels(no_oracle, "standins") == ["cpu_naive_mha_fp32"]
    with pytest.raises(ValueError, match="no host kernel can stand in for cuda_naive_mha_cublas .* its kind \\(decode\\)"):
        cr.select_kernels([k for k in LISTING if k["backend"] == "cuda"], "standins")


def test_kernels_of_another_case_kind_are_certified_and_stood_in_for_by_their_own_kind():
    # `mla kernels --json` lists kernels of every case kind; the device check certifies every CUDA
    # kernel, each on its own kind's cases, so a rehearsal stands in for a CUDA merge with a host
    # merge (never with the decode oracle, which would run other cases), and the bench's must-claim
    # list (decode points) keeps decode kernels only.
    listing = ([dict(k, kind="decode") for k in LISTING] +
               [{"name": "cpu_merge_f32", "kind": "merge", "backend": "cpu", "role": "baseline", "out_dtype": "f32"},
                {"name": "cuda_merge", "kind": "merge", "backend": "cuda", "role": "optimized", "out_dtype": "f32"}])
    assert cr.select_kernels(listing, "cuda") == ["cuda_naive_mha_cublas", "cuda_mla_decode", "cuda_merge"]
    assert cr.select_kernels(listing, "standins") == ["cpu_mla_fp64", "cpu_naive_mha_fp32", "cpu_merge_f32"]
    assert cr.select_kernels(listing, "must-claim") == ["cuda_mla_decode"]
    no_host_merge = [k for k in listing if k["name"] != "cpu_merge_f32"]
    with pytest.raises(ValueError, match="no host kernel can stand in for cuda_merge .* its kind \\(merge\\)"):
        cr.select_kernels(no_host_merge, "standins")


def test_kernels_cli_lists_names_and_refuses_what_is_not_a_listing(tmp_path):
    p = run_cli("kernels", write(tmp_path, "k.json", LISTING), "--select", "cuda")
    assert p.returncode == 0 and p.stdout == "cuda_naive_mha_cublas\ncuda_mla_decode\n"
    bad = run_cli("kernels", write(tmp_path, "bad.json", {"kernels": []}), "--select", "cuda")
    assert bad.returncode == 1 and "not a kernel listing" in bad.stderr and "bad.json" in bad.stderr
    none = run_cli("kernels", write(tmp_path, "cpu.json", LISTING[:3]), "--select", "cuda")
    assert none.returncode == 0 and none.stdout == "", "an empty selection must print no line at all"
    missing = run_cli("kernels", str(tmp_path / "none.json"), "--select", "standins")
    assert missing.returncode == 1 and "none.json" in missing.stderr


# ---- CTest ---------------------------------------------------------------------------------------------


def test_gpu_test_binaries_are_the_gtest_executables_under_the_build_dir_once_each():
    ctest = {"tests": [
        {"command": ["/b/suites/gpu/a_tests", "--gtest_filter=A.x"]},
        {"command": ["/b/suites/gpu/a_tests", "--gtest_filter=A.y"]},
        {"command": ["/b/suites/device/mla-gpu-bench", "--mla_points=x"]},  # not a gtest binary
        {"command": ["/elsewhere/b_tests", "--gtest_filter=B.x"]},            # outside the build
        {"command": ["/b/suites/gpu/c_tests", "--gtest_filter=C.x"]},
        {"name": "no command"}]}
    assert cr.gpu_test_binaries(ctest, "/b") == ["/b/suites/gpu/a_tests", "/b/suites/gpu/c_tests"]
    p = run_cli("gpu-test-binaries", "/b", stdin=json.dumps(ctest))
    assert p.stdout == "/b/suites/gpu/a_tests\n/b/suites/gpu/c_tests\n"


# ---- the time plan -----------------------------------------------------------------------------------

CAPS = {"setup": 10, "probe": 20, "certify": 160, "bench": 100, "torch": 35, "report": 15, "sanitize_memcheck": 20,
        "sanitize_racecheck": 30, "sanitize_synccheck": 20, "package": 10}
INPUT_ROWS = [{"name": f"inputs/p{i}", "seconds": 2.0, "bytes": 2**30} for i in range(11)] + [
    {"name": "gen/fill_bf16/avx2/threads:2", "items_per_second": 5e8}]


def plan(took, rows=INPUT_ROWS, budget=420, caps=CAPS, py_ms=3000.0, door_rows=0, door_kernels=0):
    status = {n: "PASS" for n in took}
    return cr.time_plan(took, status, rows, budget, dict(caps), py_ms, 1.5, {"certify": 1, "certify_plugin": 12},
                        25, 600, 60, door_rows=door_rows, door_kernels=door_kernels)


def test_plan_charges_each_python_door_bench_row_a_context_and_a_row_and_each_kernel_one_torch_import():
    took = {"certify": 36, "certify_plugin": 30, "certify_python": 60}
    base = "\n".join(plan(took)[0])
    lines, _ = plan(took, door_rows=8, door_kernels=2, caps=dict(CAPS, bench=130, certify=130))
    text = "\n".join(lines)
    upload = 2 * 11 * 2**30 / 10e9
    door = 8 * (1.5 + 1.5) + (2 + 1) * 3.0
    assert f"| bench | 130 | {22 + upload + 42 + door:.0f} (inputs 22.0 measured + bounds, below) |" in text
    assert f"Python door rows <= {door:.0f} s (8 rows" in text and "Python door rows" not in base
    assert "once by each of 2 kernels' fork servers" in text
    # A slower import costs each kernel's server once, not each row.
    slow = "\n".join(plan(took, py_ms=9000.0, door_rows=8, door_kernels=2, caps=dict(CAPS, bench=130))[0])
    assert f"Python door rows <= {8 * 3.0 + 3 * 9.0:.0f} s" in slow
    # Too many door rows for the cap: the plan does not fit.
    assert not plan(took, door_rows=40, door_kernels=2)[1]


def test_plan_fits_and_reports_each_phase():
    lines, fits = plan({"setup": 2, "probe": 0, "certify": 36, "certify_plugin": 30, "certify_python": 60,
                        "smoke_tests": 5, "torch": 1, "report": 0})
    text = "\n".join(lines)
    assert fits and lines[-1] == "Plan: fits the 420 s budget."
    assert "Caps sum to 420 s of the 420 s budget (one command may run 600 s: give it a timeout of 480 s)." in text
    assert "| certify | 160 | 60 (slowest step of 4 in parallel) | 62 % |" in text
    # 11 points: 22 s of inputs, 2 x 11 GiB at 10 GB/s, 22 rows x 1.5 s + 3 ceilings x 3 s.
    upload = 2 * 11 * 2**30 / 10e9
    assert f"| bench | 100 | {22 + upload + 42:.0f} (inputs 22.0 measured + bounds, below) |" in text
    assert "| sanitize_memcheck | 20 | not rehearsed (GPU only) |  |" in text
    assert ("certify 36 s (PASS, 1 simulated context); certify_plugin 30 s (PASS, 12 simulated contexts); "
            "certify_python 60 s (PASS, 0 simulated contexts).") in text
    assert "Certify margin: 62 % of the cap left by the slowest, certify_python." in text
    assert "generator avx2 500 M elements/s at 2 thread(s)" in text


def test_plan_does_not_fit_for_each_reason():
    base = {"certify": 36, "certify_plugin": 30, "certify_python": 60}
    lines, fits = plan(dict(base, certify_python=121))
    assert not fits and any("certify_python took 121 s, over 75 % of the certify cap" in ln for ln in lines)
    lines, fits = plan({"smoke_tests": 5})
    assert not fits and any("No certify step ran" in ln for ln in lines)
    slow_inputs = [dict(r, seconds=6.0) if r["name"].startswith("inputs/") else r for r in INPUT_ROWS]
    lines, fits = plan(base, rows=slow_inputs)
    assert not fits and any("bench step does not fit its cap" in ln for ln in lines)
    lines, fits = plan(base, py_ms=20000.0)
    assert not fits and any("Importing torch took 20 s here" in ln for ln in lines)
    lines, fits = plan(base, budget=400)
    assert not fits and any("The caps sum to 420 s, over the 400 s budget." in ln for ln in lines)
    assert lines[-1] == "Plan: DOES NOT FIT the 400 s budget."


def test_plan_cli_reads_the_steps_file_and_exits_1_when_it_does_not_fit(tmp_path):
    steps = write(tmp_path, "steps.tsv", "setup\tPASS\t2\tbundle\ncertify\tPASS\t130\tx\nbench\tSKIP\t0\tno GPU\n")
    inputs = write(tmp_path, "inputs.json", {"benchmarks": INPUT_ROWS})
    caps = " ".join(f"{k}:{v}" for k, v in CAPS.items())
    args = ["plan", "--steps", steps, "--inputs", inputs, "--budget", "420", "--caps", caps, "--py-ms", "3000",
            "--sim-ctx", "1.5", "--contexts", "certify:1 certify_plugin:0 certify_python:0", "--certify-margin", "25",
            "--command-limit", "600", "--command-margin", "60"]
    p = run_cli(*args)
    assert p.returncode == 1 and "certify took 130 s, over 75 % of the certify cap" in p.stdout
    assert p.stdout.startswith("## Time plan\n")
    # An unreadable inputs file counts as no rows measured.
    p = run_cli(*[a if a != inputs else str(tmp_path / "none.json") for a in args])
    assert "inputs 0.0 s measured here (0.00 GiB for 0 points" in p.stdout
