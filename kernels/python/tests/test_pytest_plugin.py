"""The pytest front door (mla_door.pytest_plugin) as a kernel author runs it: one item per
certificate row, the judge's reasons as a red row's message, -k selecting rows, and a run that
judged nothing never green. Each test runs pytest in a subprocess over a real `mla certify`."""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.dirname(HERE)
EXAMPLES = os.path.join(PY, "examples")
MLA = os.environ.get("MLA_CLI_EXE", "")

pytestmark = pytest.mark.skipif(not MLA, reason="MLA_CLI_EXE is not set (CTest sets it to the built mla)")


def run_pytest(tmp_path, *args):
    out = tmp_path / "report"
    junit = tmp_path / "junit.xml"
    env = dict(os.environ, PYTHONPATH=PY, PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "mla_door.pytest_plugin",
                        "--mla-exe", MLA, "--mla-out", str(out), f"--junitxml={junit}", "-q", *args],
                       cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    cases = {}
    if junit.exists():
        for tc in ET.parse(junit).getroot().iter("testcase"):
            kind = "passed"
            for child in tc:
                if child.tag in ("failure", "error", "skipped"):
                    kind = child.tag
                    cases[tc.get("name")] = (kind, child.get("message", "") + (child.text or ""))
                    break
            else:
                cases[tc.get("name")] = (kind, "")
    cert_file = out / "certificate.json"
    cert = json.loads(cert_file.read_text()) if cert_file.exists() else None
    return p, cases, cert


def rows(cert):
    return {(k["name"], f"{r['family']}/{r['case']}"): r for k in cert["kernels"] for r in k["cases"]}


def test_one_item_per_row_and_a_green_kernel_passes(tmp_path):
    p, cases, cert = run_pytest(tmp_path, "--mla-kernel", os.path.join(EXAMPLES, "torch_mla.py") + ":KERNEL",
                                "--mla-args", "--family attn_core --case 'h3_sq2_short$|all_empty$'")
    assert p.returncode == 0, p.stdout
    assert cert is not None and cert["verdict"] == "PASS"
    want = {f"{row}" for (_, row) in rows(cert)} | {"verdict", "certification"}
    assert set(cases) == want, p.stdout
    assert len(rows(cert)) == 4  # two stored cases and their twins
    assert all(kind == "passed" for kind, _ in cases.values()), cases


def test_a_bug_variant_fails_with_the_judges_reasons(tmp_path):
    p, cases, cert = run_pytest(tmp_path, "--mla-kernel", os.path.join(EXAMPLES, "flashmla_cpu.py") + ":BUG_LSE_BASE2",
                                "--mla-args", "--family attn_core --case 'h16_varlen_ps64$'")
    assert p.returncode == 1, p.stdout
    red = [(name, r) for (_, name), r in rows(cert).items() if r["verdict"] in ("FAIL", "ERROR")]
    assert red, cert
    for name, r in red:
        kind, message = cases[name]
        assert kind == "failure", (name, cases[name])
        for reason in r["reasons"]:
            assert reason in message, (reason, message)
    assert cases["verdict"][0] == "failure" and cases["certification"][0] == "failure"


def test_k_selects_rows(tmp_path):
    p, cases, cert = run_pytest(tmp_path, "--mla-kernel", os.path.join(EXAMPLES, "torch_mla.py") + ":KERNEL",
                                "--mla-args", "--family attn_core --case 'h3_sq2_short$|all_empty$'",
                                "-k", "all_empty")
    assert p.returncode == 0, p.stdout
    assert set(cases) == {"attn_core/all_empty", "attn_core/all_empty~twin"}, p.stdout


def test_a_run_that_judged_nothing_is_red(tmp_path):
    # Every case left out by size: every row SKIPPED; the skips are not a green run.
    p, cases, cert = run_pytest(tmp_path, "--mla-kernel", os.path.join(EXAMPLES, "torch_mla.py") + ":KERNEL",
                                "--mla-args", "--family attn_core --case 'h64_sq2_ps64$' --max-tokens 1")
    assert p.returncode == 1, p.stdout
    assert cases["certification"][0] == "failure", cases
    assert all(kind in ("skipped", "failure") for kind, _ in cases.values()), cases
    assert not any(kind == "passed" for kind, _ in cases.values()), cases


def test_a_usage_error_is_one_red_item_naming_it(tmp_path):
    p, cases, cert = run_pytest(tmp_path, "--mla-kernel", os.path.join(EXAMPLES, "torch_mla.py") + ":NO_SUCH_ATTR",
                                "--mla-args", "--family attn_core")
    assert p.returncode == 1, p.stdout
    assert set(cases) == {"certification"}, cases
    kind, message = cases["certification"]
    assert kind == "failure" and "exited 2" in message and "NO_SUCH_ATTR" in message, message
