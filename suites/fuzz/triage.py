#!/usr/bin/python3
"""Replays fuzzer artifacts (crash-*, leak-*, timeout-*, oom-*, slow-unit-*) and sorts each one:

    /usr/bin/python3 suites/fuzz/triage.py FUZZER ARTIFACT... [--timeout S] [-- FUZZER_FLAGS...]

  libhdf5   the report's first frame outside the sanitizer/fuzzer runtime is inside Debian's
            uninstrumented libhdf5 (a known 1.10 weakness on corrupt files; README "Findings")
  ours      anything else: a frame of our code, an uncaught exception (the loader must turn every
            failure into mla::Error, an escaping H5::Exception included), a UBSan report, or an
            input that no longer reproduces is replayed again to be sure
  gone      replays cleanly now (fixed since it was found, or flaky)

Exit status 1 when any artifact is `ours`: suites/fuzz/run_ci.sh fails the build on it.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

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


def replay(fuzzer: str, artifact: str, timeout: int, flags: list[str]) -> tuple[int, str]:
    try:
        p = subprocess.run([fuzzer, *flags, f"-timeout={timeout}", artifact], capture_output=True, text=True,
                           errors="replace", timeout=timeout * 3 + 30)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        return 124, (e.stdout or "") + (e.stderr or "") + "\nERROR: libFuzzer: timeout (replay killed)\n"


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
        counts[verdict] += 1
        print(f"{verdict:8} {os.path.basename(a)}: {why}")
        if verdict == "ours":
            print("\n".join("    " + line for line in out.splitlines()[-60:]))
    print(f"triage: {counts['ours']} ours, {counts['libhdf5']} inside libhdf5, {counts['gone']} no longer reproduce")
    return 1 if counts["ours"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
