#!/usr/bin/python3
"""Replays fuzzer artifacts (crash-*, leak-*, timeout-*, oom-*, slow-unit-*) and sorts each one:

    /usr/bin/python3 suites/fuzz/triage.py FUZZER ARTIFACT... [--timeout S] [--tool MLA] [-- FUZZER_FLAGS...]

  libhdf5   the report's first frame outside the sanitizer/fuzzer runtime is inside Debian's
            uninstrumented libhdf5 (a known 1.10 weakness on corrupt files; README "Findings"),
            AND the tool survives the file: a golden-file artifact is put in a catalog whose
            manifest matches it and given to `MLA goldens validate` and `MLA certify`, which must
            refuse it from their isolated child without dying (exit 2 naming the file, or 1)
  ours      anything else: a frame of our code, an uncaught exception (the loader must turn every
            failure into mla::Error, an escaping H5::Exception included), a UBSan report; and a
            libhdf5 crash that kills or hangs the tool's own process (or that cannot be shown
            not to, because no --tool was given)
  gone      replays cleanly now (fixed since it was found, or flaky)

Exit status 1 when any artifact is `ours`: suites/fuzz/run_ci.sh fails the build on it.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

FRAME = re.compile(r"^\s+#\d+ 0x[0-9a-f]+\s+(?:in (?P<func>.+?) )?\(?(?P<where>[^()\s]+?)(?:\+0x[0-9a-f]+)?\)?(?: \(BuildId: [0-9a-f]+\))?$")
# Frames that belong to the machinery reporting the problem, not to the code that has it.
RUNTIME = re.compile(r"__asan|__lsan|__ubsan|__sanitizer|__interceptor|^fuzzer::|^malloc$|^calloc$|^realloc$|"
                     r"^free$|^operator new|^operator delete|^__libc_|^raise$|^abort$|^gsignal$|"
                     r"__cxa_|__gxx_personality|^std::terminate|^__gnu_cxx::__verbose_terminate|^_Unwind_|"
                     r"^LLVMFuzzer|^main$|^_start$|^H5FL_|^H5MM_")
RUNTIME_MODULES = ("libc.so", "libstdc++.so", "libgcc_s.so", "ld-linux")
# With libc6-dbg installed, glibc frames name their source file instead of libc.so: a memcpy that
# libhdf5 called is then reported at string/../sysdeps/..., and must not be taken for our code.
RUNTIME_SOURCES = ("sysdeps/", "/glibc-")
HDF5 = re.compile(r"libhdf5(_serial)?(_cpp)?\.so|/hdf5/")


def first_frames(report: str) -> list[tuple[str, str]]:
    """(function, module-or-file) of the first stack in the report."""
    frames, started = [], False
    for line in report.splitlines():
        m = FRAME.match(line)
        if m:
            started = True
            frames.append((m.group("func") or "", m.group("where") or ""))
        elif started and not line.strip().startswith("#"):
            break
    return frames


def classify(report: str) -> tuple[str, str]:
    if "terminate called" in report or "uncaught exception" in report:
        return "ours", "an exception escaped the loader"
    if "runtime error:" in report:
        return "ours", "UBSan: " + report.split("runtime error:", 1)[1].splitlines()[0].strip()
    kind = re.search(r"ERROR: (?:AddressSanitizer|LeakSanitizer|libFuzzer): ?([^\n]*)", report)
    kind = kind.group(1).strip() if kind else "unknown"
    for func, where in first_frames(report):
        if RUNTIME.search(func) or any(m in where for m in RUNTIME_MODULES + RUNTIME_SOURCES):
            continue
        if func == "" and "fuzz_" in os.path.basename(where):
            continue  # an unsymbolized frame of the fuzzer's own runtime
        if HDF5.search(where) or func.startswith("H5"):
            return "libhdf5", f"{kind} at {func or '?'} ({os.path.basename(where)})"
        return "ours", f"{kind} at {func or '?'} ({where})"
    return "ours", f"{kind} (no frame to attribute it to)"


def _died(rc: int) -> str | None:
    """The signal a process died of, from subprocess's returncode (negative) or a shell's 128+N."""
    n = -rc if rc < 0 else rc - 128 if rc > 128 else 0
    if n <= 0:
        return None
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def through_tool(tool: str, artifact: str, timeout: int, deadline: int | None = None) -> tuple[str, str]:
    """A golden file that crashes libhdf5 in the fuzzer, given to the tool as a user would have it:
    in a catalog whose manifest matches it. The tool reads every golden through in a child process
    first (certify/src/run/golden_check.cpp), so it must refuse the file and live; if its own process
    dies of a signal, hangs or reports a sanitizer error, the crash is the tool's: a finding."""
    with tempfile.TemporaryDirectory(prefix="mla-triage-") as work:
        catalog = os.path.join(work, "catalog")
        os.mkdir(catalog)
        shutil.copyfile(artifact, os.path.join(catalog, "artifact.h5"))
        with open(artifact, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        with open(os.path.join(catalog, "MANIFEST.sha256"), "w") as f:
            f.write(f"{digest}  artifact.h5\n")
        runs = (("goldens validate", [tool, "goldens", "--dir", catalog, "validate"]),
                ("certify", [tool, "certify", "--goldens", catalog, "--out", os.path.join(work, "out"), "--kernel",
                             "cpu_mla_fp64", "--max-tokens", "4096", "--timeout", str(timeout)]))
        said = []
        deadline = timeout * 4 + 30 if deadline is None else deadline
        for name, argv in runs:
            try:
                p = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=deadline)
            except subprocess.TimeoutExpired:
                return "ours", f"libhdf5 hangs the tool itself: `mla {name}` was killed after {deadline} s"
            out = p.stdout + p.stderr
            sig = _died(p.returncode)
            if sig or "ERROR: AddressSanitizer" in out or "runtime error:" in out:
                tail = out.strip().splitlines()[-1] if out.strip() else ""
                return "ours", (f"libhdf5 crashes the tool itself: `mla {name}` "
                                f"{'died of ' + sig if sig else 'reported a sanitizer error'} ({tail[:200]})")
            said.append(f"mla {name} exit {p.returncode}")
        return "libhdf5", "the tool survives it (its child reads it first): " + ", ".join(said)


def replay(fuzzer: str, artifact: str, timeout: int, flags: list[str]) -> tuple[int, str]:
    try:
        p = subprocess.run([fuzzer, *flags, f"-timeout={timeout}", artifact], capture_output=True, text=True,
                           errors="replace", timeout=timeout * 3 + 30)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        return 124, (e.stdout or "") + (e.stderr or "") + "\nERROR: libFuzzer: timeout (replay killed)\n"


def attribute_libhdf5(fuzzer: str, artifact: str, why: str, tool: str | None, timeout: int) -> tuple[str, str]:
    """A crash inside libhdf5 is tolerated only where the tool is shown to survive it."""
    if "golden_loader" not in os.path.basename(fuzzer):
        # The other targets' inputs are recipes or manifests, not golden files: nothing to give
        # the tool. (fuzz_golden_schema's files are written by HDF5 itself.)
        return "libhdf5", why + "; not a golden file, so not replayed through the tool"
    if not tool:
        return "ours", why + "; no --tool given, so nothing shows the tool survives this file"
    verdict, how = through_tool(tool, artifact, timeout)
    return verdict, f"{why}; {how}"


def main(argv: list[str]) -> int:
    flags: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, flags = argv[:i], argv[i + 1:]
    timeout = 25
    if "--timeout" in argv:
        i = argv.index("--timeout")
        timeout = int(argv[i + 1])
        del argv[i:i + 2]
    tool = None
    if "--tool" in argv:
        i = argv.index("--tool")
        tool = argv[i + 1]
        del argv[i:i + 2]
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    fuzzer, artifacts = argv[0], argv[1:]
    counts = {"ours": 0, "libhdf5": 0, "gone": 0}
    for a in artifacts:
        rc, out = replay(fuzzer, a, timeout, flags)
        if rc == 0:
            verdict, why = "gone", "replays cleanly"
        else:
            verdict, why = classify(out)
            if verdict == "libhdf5":
                verdict, why = attribute_libhdf5(fuzzer, a, why, tool, timeout)
        counts[verdict] += 1
        print(f"{verdict:8} {os.path.basename(a)}: {why}")
        if verdict == "ours":
            print("\n".join("    " + line for line in out.splitlines()[-60:]))
    print(f"triage: {counts['ours']} ours, {counts['libhdf5']} inside libhdf5 and survived by the tool, "
          f"{counts['gone']} no longer reproduce")
    return 1 if counts["ours"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
