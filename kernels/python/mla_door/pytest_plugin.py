"""pytest as a front door to `mla certify`: every row of the certificate is a test item.

    PYTHONPATH=kernels/python pytest -p mla_door.pytest_plugin \\
        --mla-kernel my_kernel.py:KERNEL [--mla-kernel other.py:KERNEL] \\
        [--mla-args "--family attn_core"] [--mla-exe build/ci/tools/mla/mla] [--mla-out report/]

The plugin runs `mla certify` once, at collection, with every --mla-kernel as a `--python` kernel
(the certifier's children, audit and judge, exactly as on the command line), then turns what the
certificate says into items, so `-k`, `-x`, `--junitxml` and IDE runners work as usual:

    mla::certification                 the run itself: fails unless `mla certify` exited 0
                                       (red, usage error, incomplete, nothing judged), with its
                                       last output
    mla::<kernel>::verdict             fails unless the kernel's verdict is PASS (its headline)
    mla::<kernel>::<family>/<case>     one per certificate row: PASS passes; FAIL, ERROR and
                                       HOST_ERROR fail with the judge's reasons; NOT_CLAIMED,
                                       UNSUPPORTED and SKIPPED are skips with their reason

There is no second judge here: every outcome is read from the certificate the certifier wrote
(kept in --mla-out, default a temporary folder named in the report header). A run whose rows
are all skipped still fails its `verdict` and `certification` items, so skipping everything
never reads as green.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

import pytest

_DOOR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # kernels/python, or a bundle's python/
_RED = {"FAIL", "ERROR", "HOST_ERROR"}
_SKIPS = {"NOT_CLAIMED", "UNSUPPORTED", "SKIPPED"}
_EXIT_WORDS = {0: "PASS", 1: "red (a kernel FAILed or had an ERROR)", 2: "usage error (no certificate)",
               3: "INCOMPLETE (did not finish, or HOST_ERRORs)", 4: "nothing judged, or coverage not full"}


def pytest_addoption(parser):
    g = parser.getgroup("mla", "MLA certification (mla certify --python)")
    g.addoption("--mla-kernel", action="append", default=[], metavar="SPEC",
                help="a Python kernel, module.path:ATTR or path/to/file.py:ATTR (repeatable)")
    g.addoption("--mla-args", default="", metavar="ARGS",
                help="more `mla certify` options, one shell-quoted string (e.g. \"--family attn_core\")")
    g.addoption("--mla-exe", default=None, metavar="PATH",
                help="the mla executable (default: $MLA_CLI_EXE, `mla` on PATH, then the source tree's "
                     "build/ci or the bundle's bin/)")
    g.addoption("--mla-goldens", default=None, metavar="DIR",
                help="the golden catalog (default: $MLA_GOLDENS_DIR, else the one mla was built with)")
    g.addoption("--mla-out", default=None, metavar="DIR",
                help="report folder for the certificate (default: a temporary folder)")


def _find_mla(config):
    given = config.getoption("--mla-exe") or os.environ.get("MLA_CLI_EXE")
    tried = []
    candidates = [given] if given else [shutil.which("mla"),
                                        os.path.join(os.path.dirname(os.path.dirname(_DOOR)), "build", "ci",
                                                     "tools", "mla", "mla"),
                                        os.path.join(os.path.dirname(_DOOR), "bin", "mla")]
    for c in candidates:
        if not c:
            continue
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
        tried.append(c)
    raise pytest.UsageError("mla_door.pytest_plugin: no mla executable (give --mla-exe); tried: "
                            + (", ".join(tried) or "mla on PATH"))


class Certification:
    """One `mla certify` run and what it wrote."""

    def __init__(self, config):
        specs = config.getoption("--mla-kernel")
        self.out = config.getoption("--mla-out") or tempfile.mkdtemp(prefix="mla-pytest-")
        self.cmd = [_find_mla(config), "certify", "--out", self.out]
        goldens = config.getoption("--mla-goldens")
        if goldens:
            self.cmd += ["--goldens", goldens]
        for s in specs:
            self.cmd += ["--python", s]
        # The pytest process's interpreter runs the kernels unless the arguments say otherwise.
        extra = shlex.split(config.getoption("--mla-args"))
        if "--python-exe" not in extra:
            self.cmd += ["--python-exe", sys.executable]
        self.cmd += extra
        p = subprocess.run(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.status, self.output = p.returncode, p.stdout
        self.cert = None
        path = os.path.join(self.out, "certificate.json")
        # A certificate left from an earlier run is not this run's: only read it when the run
        # wrote one (any status but a usage error), and only if it is complete JSON.
        if self.status != 2 and os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as f:
                    self.cert = json.load(f)
            except (OSError, ValueError) as e:
                self.output += f"\n(the certificate {path} is unreadable: {e})"


class MlaFailure(Exception):
    """A red item: its message is what the certificate (or the run) says."""


class MlaItem(pytest.Item):
    def __init__(self, *, outcome, message, where, **kw):
        super().__init__(**kw)
        self.outcome, self.message, self.where = outcome, message, where

    def runtest(self):
        if self.outcome == "skip":
            pytest.skip(self.message)
        if self.outcome == "fail":
            raise MlaFailure(self.message)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, MlaFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.where, None, self.nodeid


class MlaCollector(pytest.Collector):
    def collect(self):  # the items are made by pytest_collection_modifyitems
        return []


def _row_item(parent, kernel, row, where):
    name = f"{row.get('family', '?')}/{row.get('case', '?')}"
    verdict = row.get("verdict", "?")
    reasons = row.get("reasons") or []
    if verdict == "PASS":
        return MlaItem.from_parent(parent, name=name, outcome="pass", message="", where=where)
    if verdict in _SKIPS:
        why = "; ".join(reasons) or "(no reason given)"
        return MlaItem.from_parent(parent, name=name, outcome="skip", message=f"{verdict}: {why}", where=where)
    lines = [f"{kernel} on {name}: {verdict}" + (f" ({row['cause']})" if row.get("cause") not in (None, "none") else "")]
    lines += [f"  {r}" for r in reasons] or ["  (the certificate gives no reason)"]
    if verdict not in _RED:
        lines.append(f"  (a verdict this plugin does not know: {verdict})")
    return MlaItem.from_parent(parent, name=name, outcome="fail", message="\n".join(lines), where=where)


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect: they must see these items
def pytest_collection_modifyitems(session, config, items):
    if not config.getoption("--mla-kernel"):
        return
    run = Certification(config)
    config._mla_certification = run
    where = os.path.join(run.out, "certificate.json")
    root = MlaCollector.from_parent(session, name="mla", nodeid="mla")
    tail = "\n".join(run.output.strip().splitlines()[-40:])
    ok = run.status == 0 and run.cert is not None
    items.append(MlaItem.from_parent(
        root, name="certification", where=where, outcome="pass" if ok else "fail",
        message=(f"`{shlex.join(run.cmd)}` exited {run.status}: {_EXIT_WORDS.get(run.status, 'unknown status')}"
                 f"{'' if run.cert is not None else ' (no certificate)'}\n{tail}")))
    if run.cert is None:
        return
    for k in run.cert.get("kernels", []):
        name = k.get("name", "?")
        kc = MlaCollector.from_parent(root, name=name)
        verdict = k.get("verdict", "?")
        why = "\n".join([k.get("headline", "")] + [f"  {n}" for n in k.get("notes", [])]
                        + ([f"  unavailable: {k['unavailable']}"] if k.get("unavailable") else []))
        items.append(MlaItem.from_parent(kc, name="verdict", where=where, outcome="pass" if verdict == "PASS" else "fail",
                                         message=f"{name}: {verdict}\n{why}"))
        for row in k.get("cases", []):
            items.append(_row_item(kc, name, row, where))


def pytest_report_header(config):
    if config.getoption("--mla-kernel"):
        return [f"mla: certifying {', '.join(config.getoption('--mla-kernel'))} with `mla certify` "
                f"(report folder: {config.getoption('--mla-out') or 'a temporary folder'})"]
    return []


def pytest_terminal_summary(terminalreporter, config):
    run = getattr(config, "_mla_certification", None)
    if run is not None:
        terminalreporter.write_line(f"mla: the certificate is {os.path.join(run.out, 'certificate.md')}")
