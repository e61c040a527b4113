#!/usr/bin/env python3
"""What the device check (suites/device/check.sh) reads from the files its steps write, and which
kernels it asks the registry for: one tested module instead of inline scripts in the check.

Standard library only: the check runs these with whatever python3 the machine has, including one
where numpy and torch do not import. Each subcommand prints one line (or a list, or the time plan)
in the form check.sh reads:

  gtest-verdict FILE                   gtest JSON -> "STATUS<TAB>detail"
  certificate-detail FILE [--plugin]   certificate.json -> "[ALLSKIP ]detail"
  python-door-detail FILE              certificate.json of the Python door -> "[ALLSKIP ]detail" or "FAIL why"
  bench-detail FILE [--must-claim K,..] mla-bench JSON -> "STATUS<TAB>detail"
  kernels FILE --select WHAT           `mla kernels --json` -> kernel names, one a line
  gpu-test-binaries BUILD_DIR          CTest's JSON test list (stdin) -> gtest binaries, one a line
  plan --steps FILE ...                the rehearsal's time plan (Markdown); exit 1 when it does not fit
"""
import argparse
import json
import re
import sys

# ---- gtest -------------------------------------------------------------------------------------


def gtest_verdict(path):
    """(status, detail) of a gtest JSON file: FAIL if any test failed, SKIP if every test skipped
    (no usable GPU), else PASS; an unreadable file is a FAIL that says why."""
    try:
        with open(path) as f:
            d = json.load(f)
    except Exception as e:
        return "FAIL", f"no readable gtest JSON ({e})"
    run = fail = skip = 0
    failed = []
    for s in d.get("testsuites", []):
        for t in s.get("testsuite", []):
            run += 1
            if t.get("failures"):
                fail += 1
                failed.append(f"{s['name']}.{t['name']}")
            elif t.get("result") == "SKIPPED":
                skip += 1
    status = "FAIL" if fail else ("SKIP" if run and skip == run else "PASS")
    return status, f"{run} tests, {fail} failed, {skip} skipped" + (": " + ", ".join(failed[:5]) if failed else "")


# ---- certificates ------------------------------------------------------------------------------


def _load(path):
    with open(path) as f:
        return json.load(f)


def certificate_detail(cert, plugin):
    """(allskip, detail) of the certificate of built-in kernels (plugin False: each kernel's
    nonzero verdict counts) or of a plug-in (plugin True: its cases counted by family, append or
    decode, since the plug-in step certifies both). allskip: every kernel was unavailable here."""
    parts, unavailable = [], 0
    for k in cert.get("kernels", []):
        if k.get("unavailable"):
            unavailable += 1
            parts.append(f"{k['name']}: unavailable ({k['unavailable']})")
            continue
        counts = {} if plugin else {v: n for v, n in k.get("counts", {}).items() if n}
        if not counts:
            for r in k.get("cases", []):
                v = (("append " if r.get("family") == "cache_append" else "decode ") if plugin else "") + r.get("verdict", "?")
                counts[v] = counts.get(v, 0) + 1
        iso = (k.get("origin") or {}).get("isolation")  # in_process or child_per_case
        parts.append(f"{k['name']}{f' ({iso})' if iso else ''}: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    allskip = bool(cert.get("kernels")) and unavailable == len(cert["kernels"])
    return allskip, "; ".join(parts)


def python_door_detail(cert):
    """(allskip, detail) of the Python door's certificate: a kernel whose library does not import
    here is unavailable, or has every case SKIPPED; allskip when no kernel could run."""
    parts, idle = [], 0
    for k in cert.get("kernels", []):
        counts = {v: n for v, n in k.get("counts", {}).items() if n}
        if k.get("unavailable") or set(counts) <= {"skipped", "SKIPPED"}:
            idle += 1
            parts.append(f"{k['name']}: unavailable ({k.get('unavailable') or 'every case skipped'})")
        else:
            parts.append(f"{k['name']} {k.get('version', '')}: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    allskip = bool(cert.get("kernels")) and idle == len(cert["kernels"])
    return allskip, "; ".join(parts)


# ---- the bench ---------------------------------------------------------------------------------


def _external_kernels(doc):
    """Names of the kernels from outside the suite (plug-ins, the Python door's): the mla_kernels
    entries of the context that carry an origin."""
    try:
        listed = json.loads(doc.get("context", {}).get("mla_kernels", "[]"))
    except (TypeError, ValueError):
        return set()
    return {k["name"] for k in listed if isinstance(k, dict) and "origin" in k and "name" in k}


def bench_detail(doc, must_claim):
    """(status, detail) of mla-bench's JSON (a partial run too: the rows kept). A refusal
    ("unsupported") is expected of a baseline on the FP8 and sparse points, but not of the kernels
    in must_claim (the optimized CUDA kernels, which claim every point the check runs); any other
    error of the suite's own kernels fails the step, as does a run without one good row. Rows of
    external kernels (FlashMLA, FlashInfer through the Python door) that were not timed (a judge's
    FAIL, a refusal, an error) are findings about those libraries, counted and quoted, never a
    failure of the step. The measured FP8/bf16 speedup of each must_claim kernel is quoted."""
    rows = [b for b in doc["benchmarks"] if b.get("run_type", "iteration") == "iteration"]
    state = doc.get("mla_run", {})
    own = tuple(f"{kind}/{k}/" for k in must_claim for kind in ("mla", "mla_ratio"))
    external = _external_kernels(doc)

    def is_external(b):
        parts = b["name"].split("/")
        return len(parts) > 2 and parts[0] in ("mla", "mla_ratio") and parts[1] in external

    def refusal_ok(b):
        return b.get("error_message", "").startswith("unsupported") and not (own and b["name"].startswith(own))

    ext_errors = [f"{b['name']}: {b.get('error_message', '')}" for b in rows if b.get("error_occurred") and is_external(b)]
    bad = [f"{b['name']}: {b.get('error_message', '')}" for b in rows
           if b.get("error_occurred") and not is_external(b) and not refusal_ok(b)]
    ok = sum(1 for b in rows if not b.get("error_occurred"))
    unsup = sum(1 for b in rows if b.get("error_occurred")) - len(bad) - len(ext_errors)
    ext_ok = sum(1 for b in rows if not b.get("error_occurred") and is_external(b))
    ratio_of = tuple(f"mla_ratio/{k}/" for k in must_claim)
    ratios = [f"{b['name'].split('/')[2]}: {b['speedup_fp8_over_bf16']:.3f}x" for b in rows
              if ratio_of and b["name"].startswith(ratio_of) and not b.get("error_occurred") and "speedup_fp8_over_bf16" in b]
    part = "" if state.get("complete", True) else f"; PARTIAL: {state.get('rows', '?')} benchmarks done, last {state.get('last', '?')}"
    ext = ""
    if external:
        ext = (f"; external kernels ({', '.join(sorted(external))}): {ext_ok} rows timed, {len(ext_errors)} not timed"
               + (" (" + "; ".join(e for e in ext_errors if "--mla_external_points" not in e)[:400] + ")"
                  if any("--mla_external_points" not in e for e in ext_errors) else ""))
    status = "FAIL" if bad or not ok else "PASS"
    return status, (f"{ok} rows, {unsup} unsupported{part}" + ("; errors: " + "; ".join(bad[:4]) if bad else "")
                    + ("; measured fp8/bf16 speedup " + ", ".join(ratios) if ratios else "") + ext)


# ---- kernels from the registry -----------------------------------------------------------------

# Output precisions from the narrowest: a stand-in closest to its CUDA kernel's output.
_WIDTH = {"bf16": 0, "f32": 1, "f64": 2}


def _kind(k):
    return k.get("kind", "decode")  # a listing from before kinds were listed holds decode only


def cuda_kernels(listing):
    """Every CUDA kernel the registry holds, of every case kind, in registration order: what the
    device check certifies (`mla certify --kernel NAME` runs each on its own kind's cases)."""
    return [k["name"] for k in listing if k.get("backend") == "cuda"]


def must_claim(listing):
    """The CUDA decode kernels meant for production (role optimized): a refusal of a bench point by
    one of them fails the bench step, where a baseline's refusal of FP8 or sparse points is expected.
    The bench step times decode points only."""
    return [k["name"] for k in listing
            if k.get("backend") == "cuda" and k.get("role") == "optimized" and _kind(k) == "decode"]


def standins(listing):
    """The host kernels a rehearsal certifies in place of the CUDA ones, in registration order, so
    that the certify step's host work is measured on a machine without a GPU: for each CUDA kernel
    a host kernel of its own case kind (a decode oracle cannot stand in for a merge: it would run
    other cases), of the same role with the narrowest output (the closest to the CUDA kernel's
    precision, and the cheapest); a role the host has no kernel of (optimized) is stood in for by
    the kind's oracle, the costliest host kernel, an upper bound on the host work, else by any
    host kernel of the kind. Raises ValueError when a CUDA kernel has no stand-in."""
    chosen = set()
    for k in listing:
        if k.get("backend") != "cuda":
            continue
        host = [h for h in listing if h.get("backend") == "cpu" and _kind(h) == _kind(k)]
        same = ([h for h in host if h.get("role") == k.get("role")] or [h for h in host if h.get("role") == "oracle"]
                or host)
        if not same:
            raise ValueError(f"no host kernel can stand in for {k['name']} (role {k.get('role')}): the registry has no "
                             f"host kernel of its kind ({_kind(k)})")
        chosen.add(min(same, key=lambda h: _WIDTH.get(h.get("out_dtype"), len(_WIDTH)))["name"])
    return [k["name"] for k in listing if k["name"] in chosen]


def select_kernels(listing, what):
    if not isinstance(listing, list) or not all(isinstance(k, dict) and "name" in k for k in listing):
        raise ValueError("not a kernel listing (a JSON array of objects with a name, as `mla kernels --json` prints)")
    return {"cuda": cuda_kernels, "standins": standins, "must-claim": must_claim}[what](listing)


# ---- CTest ---------------------------------------------------------------------------------------


def gpu_test_binaries(ctest, build_dir):
    """The executables of the gtest-discovered tests (their command carries --gtest_filter) that
    CTest's JSON list (ctest --show-only=json-v1 -L gpu) names under build_dir, each once, in order:
    the GPU test binaries, as make_bundle.sh picks them."""
    seen = []
    for t in ctest.get("tests", []):
        cmd = t.get("command") or [""]
        if not any(a.startswith("--gtest_filter=") for a in cmd[1:]):
            continue
        if cmd[0].startswith(build_dir + "/") and cmd[0] not in seen:
            seen.append(cmd[0])
    return seen


# ---- the rehearsal's time plan -------------------------------------------------------------------

# What the GPU adds to each phase beyond what a rehearsal measures.
_GPU_ADDS = {"setup": "unpacking happens before check.sh (run_on_device.sh)", "probe": "CUDA/NVML initialisation",
             "certify": "the CUDA kernels' own time (the stand-ins' fp64/fp32 host math stands in for it)",
             "bench": "ceilings + timed rows (bounded by Google Benchmark's min time x repetitions)",
             "torch": "torch's own timing", "report": "-", "sanitize_memcheck": "all of it: tool slowdown on 3 small problems",
             "sanitize_racecheck": "all of it: tool slowdown", "sanitize_synccheck": "all of it: tool slowdown",
             "package": "-"}


def read_steps(lines):
    """steps.tsv (name, status, seconds, detail) -> ({name: seconds}, {name: status})."""
    took, status = {}, {}
    for line in lines:
        f = line.rstrip("\n").split("\t")
        if len(f) >= 3 and f[2].isdigit():
            took[f[0]] = int(f[2])
            status[f[0]] = f[1]
    return took, status


def parse_pairs(text):
    """"a:1 b:2" -> {"a": 1, "b": 2} (the caps and the charged contexts as check.sh passes them)."""
    return {e.split(":")[0]: int(e.split(":")[1]) for e in text.split()}


def time_plan(took, status, input_rows, budget, cap, py_ms, sim_ctx, charged, certify_margin, command_limit,
              command_margin, door_rows=0, door_kernels=0, phase_rows=0):
    """(lines, fits): the time plan with what a rehearsal measured. It does not fit when the caps
    sum to more than the budget, a certify step leaves less than certify_margin % of its cap, the
    bench's measured inputs plus its GPU bound exceed the bench cap, or importing torch took over
    half the torch cap. door_rows: bench rows of Python-door kernels (each kernel and its overhead
    row at each of their points), each a door child forked by its kernel's fork server, which
    creates a CUDA context (sim_ctx) before its row is timed; door_kernels: how many such kernels,
    each with one fork server that imports torch once (py_ms, measured here); plus one import
    probe. phase_rows: CUDA kernel rows of the other kinds (prefill, merge), one per point, bounded
    like the decode rows."""
    out = []
    inputs = [r for r in input_rows if r["name"].startswith("inputs/")]
    gen = {r["name"]: r.get("items_per_second", 0) for r in input_rows if r["name"].startswith("gen/")}
    build_s = sum(r.get("seconds", 0) for r in inputs)
    bytes_ = sum(r.get("bytes", 0) for r in inputs)
    fits = True
    # The bench step: the host builds each point's inputs (measured here, on this machine's cores:
    # an upper bound for the device machine's 16), each CUDA kernel uploads them, then Google
    # Benchmark times the rows. With --mla_quick a row is 5 repetitions of >= 0.05 s of kernel
    # (manual) time, the first after an iteration-count estimate, and the last run of a repetition
    # overshoots the minimum by up to 1.4x: <= 0.5 s of kernel time per row. Each timed call also
    # pays an untimed L2 flush and an event wait, up to twice the kernel time at the 1K-token point,
    # so a row is bounded by 3 x 0.5 s of wall time. The three ceiling rows run >= 0.1 s x 5
    # repetitions (<= 1 s each, no flush) after the ceilings' own 10-repetition measurement (<= 2 s
    # each). Uploads are the one figure not measured by this suite: taken at 10 GB/s, the low end
    # of pageable host-to-device copies on a PCIe Gen5 H200 host.
    rows_n = 2 * len(inputs) + phase_rows  # two CUDA kernels per decode point (a refused pair costs nothing)
    gpu_s = rows_n * 3 * 0.5 + 3 * (1.0 + 2.0)
    upload_s = 2 * bytes_ / 10e9
    door_s = (door_rows * (sim_ctx + 3 * 0.5) + (max(door_kernels, 1) + 1) * py_ms / 1000) if door_rows else 0.0
    bench_need = build_s + upload_s + gpu_s + door_s
    # The certify phase: its steps run in parallel, each under the phase's cap, and each must leave
    # certify_margin % of it: the stand-ins' host work was measured, the contexts were charged, but
    # the CUDA kernels' own time and the first GPU run's surprises were not.
    phase_steps = [n for n in took if n in ("smoke_tests", "certify", "certify_plugin", "certify_python") or n.startswith("test_")]
    certify_steps = [n for n in ("certify", "certify_plugin", "certify_python") if n in took]
    certify_rehearsed = max([took[n] for n in phase_steps] or [0])
    limit = cap["certify"] * (100 - certify_margin) / 100
    out.append("## Time plan\n")
    out.append(f"Caps sum to {sum(cap.values())} s of the {budget} s budget (one command may run {command_limit} s: "
               f"give it a timeout of {budget + command_margin} s).")
    out.append(f"Rehearsed on this machine (no GPU): the host side of each phase, measured; the certify phase with "
               f"CPU stand-ins for the CUDA, plug-in and Python kernels and {sim_ctx:g} s charged per process that would "
               f"create a CUDA context.\n")
    out.append("| phase | planned (s) | rehearsed here (s) | planned time left | what the GPU adds |")
    out.append("|---|---|---|---|---|")
    total = 0.0
    for k, c in cap.items():
        if k == "certify":
            m = certify_rehearsed
            shown = f"{m} (slowest step of {len(phase_steps)} in parallel)"
        elif k == "bench":
            m = bench_need
            shown = f"{m:.0f} (inputs {build_s:.1f} measured + bounds, below)"
        elif k.startswith("sanitize_") or k not in took:
            m, shown = None, "not rehearsed (GPU only)" if k.startswith("sanitize_") else ""
        else:
            m = took[k]
            shown = str(m)
        total += m or 0
        left = f"{100 * (c - m) / c:.0f} %" if m is not None else ""
        out.append(f"| {k} | {c} | {shown} | {left} | {_GPU_ADDS.get(k, '')} |")
    out.append(f"| all | {sum(cap.values())} | {total:.0f} | | |")
    out.append("")
    parts = []
    for n in certify_steps:
        c = charged.get(n, 0)
        parts.append(f"{n} {took[n]} s ({status.get(n, '?')}, {c} simulated context{'' if c == 1 else 's'})")
    worst = max(certify_steps, key=lambda n: took[n]) if certify_steps else None
    out.append(f"Certify steps (each must end within {100 - certify_margin} % of the {cap['certify']} s cap, {limit:.0f} s): "
               + ("; ".join(parts) if parts else "none ran") + ".")
    if worst is not None:
        left = 100 * (cap["certify"] - took[worst]) / cap["certify"]
        out.append(f"Certify margin: {left:.0f} % of the cap left by the slowest, {worst}.")
        if took[worst] > limit:
            fits = False
            out.append(f"**{worst} took {took[worst]} s, over {100 - certify_margin} % of the certify cap: the certificate "
                       f"would not be safe on the GPU machine.**")
    else:
        fits = False
        out.append("**No certify step ran: the plan's most valuable phase was not rehearsed.**")
    out.append("")
    gen_rates = []
    for n, v in sorted(gen.items()):
        t = re.search(r"threads:(\d+)", n)
        if t:
            gen_rates.append(f"{n.split('/')[2]} {v / 1e6:.0f} M elements/s at {t.group(1)} thread(s)")
    out.append(f"Bench step: inputs {build_s:.1f} s measured here ({bytes_ / 2**30:.2f} GiB for {len(inputs)} points; generator "
               + ", ".join(gen_rates)
               + f") + uploads <= {upload_s:.1f} s + GPU rows <= {gpu_s:.0f} s ({rows_n} kernel rows, 3 ceilings)"
               + (f" + Python door rows <= {door_s:.0f} s ({door_rows} rows, each a forked child: context {sim_ctx:g} s, "
                  f"row 1.5 s; torch imported {py_ms / 1000:.1f} s once by each of {max(door_kernels, 1)} kernels' fork "
                  f"servers and once by the import probe)" if door_rows else "")
               + f" = {bench_need:.0f} s"
               f" of the {cap['bench']} s cap.")
    if bench_need > cap["bench"]:
        fits = False
        out.append("**The bench step does not fit its cap with the inputs measured here.**")
    if py_ms / 1000 > cap["torch"] / 2:
        fits = False
        out.append(f"**Importing torch took {py_ms / 1000:.0f} s here, over half the torch step's cap.**")
    if sum(cap.values()) > budget:
        fits = False
        out.append(f"**The caps sum to {sum(cap.values())} s, over the {budget} s budget.**")
    out.append("")
    out.append("Plan: " + ("fits" if fits else "DOES NOT FIT") + f" the {budget} s budget.")
    return out, fits


# ---- command line --------------------------------------------------------------------------------


def _print_lines(names):
    # Nothing at all for an empty list: bash's mapfile would read an empty line as one empty name.
    if names:
        print("\n".join(names))


def _main(argv):
    ap = argparse.ArgumentParser(prog="check_readers.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("gtest-verdict")
    p.add_argument("file")
    p = sub.add_parser("certificate-detail")
    p.add_argument("file")
    p.add_argument("--plugin", action="store_true", help="count the cases by family (append/decode)")
    p = sub.add_parser("python-door-detail")
    p.add_argument("file")
    p = sub.add_parser("bench-detail")
    p.add_argument("file")
    p.add_argument("--must-claim", default="", help="comma-separated kernels whose refusal of a point is a failure")
    p = sub.add_parser("kernels")
    p.add_argument("file", help="the output of `mla kernels --json`")
    p.add_argument("--select", required=True, choices=["cuda", "standins", "must-claim"])
    p = sub.add_parser("gpu-test-binaries")
    p.add_argument("build_dir")
    p = sub.add_parser("plan")
    p.add_argument("--steps", required=True, help="steps.tsv: name, status, seconds, detail")
    p.add_argument("--inputs", required=True, help="mla-input-rates' JSON (a missing or unreadable file: no rows)")
    p.add_argument("--budget", type=int, required=True)
    p.add_argument("--caps", required=True, help="'step:seconds ...' in the order the steps run")
    p.add_argument("--py-ms", default="0", help="milliseconds the torch import took")
    p.add_argument("--sim-ctx", type=float, required=True, help="seconds charged per simulated CUDA context")
    p.add_argument("--contexts", default="", help="'step:count ...' of the processes charged")
    p.add_argument("--certify-margin", type=int, required=True)
    p.add_argument("--command-limit", type=int, required=True)
    p.add_argument("--command-margin", type=int, required=True)
    p.add_argument("--door-rows", type=int, default=0, help="bench rows of Python-door kernels (a forked child each)")
    p.add_argument("--door-kernels", type=int, default=0, help="Python-door kernels benchmarked (one torch import each)")
    a = ap.parse_args(argv)

    if a.cmd == "gtest-verdict":
        print("\t".join(gtest_verdict(a.file)))
    elif a.cmd in ("certificate-detail", "python-door-detail"):
        try:
            cert = _load(a.file)
        except Exception as e:
            # The python door's step fails on it; the built-in kernels' step fails on its exit status.
            print(f"FAIL no readable certificate: {e}" if a.cmd == "python-door-detail" else f"no readable certificate: {e}")
            return 0
        allskip, detail = certificate_detail(cert, a.plugin) if a.cmd == "certificate-detail" else python_door_detail(cert)
        print(("ALLSKIP " if allskip else "") + detail)
    elif a.cmd == "bench-detail":
        try:
            doc = _load(a.file)
            status, detail = bench_detail(doc, [k for k in a.must_claim.split(",") if k])
        except Exception as e:
            status, detail = "FAIL", f"unreadable benchmark JSON: {e}"
        print(f"{status}\t{detail}")
    elif a.cmd == "kernels":
        try:
            names = select_kernels(_load(a.file), a.select)
        except (OSError, ValueError) as e:
            print(f"check_readers.py kernels: {a.file}: {e}", file=sys.stderr)
            return 1
        _print_lines(names)
    elif a.cmd == "gpu-test-binaries":
        _print_lines(gpu_test_binaries(json.load(sys.stdin), a.build_dir))
    elif a.cmd == "plan":
        with open(a.steps) as f:
            took, status = read_steps(f)
        try:
            rows = _load(a.inputs)["benchmarks"]
        except Exception:
            rows = []
        lines, fits = time_plan(took, status, rows, a.budget, parse_pairs(a.caps), float(a.py_ms or 0), a.sim_ctx,
                                parse_pairs(a.contexts), a.certify_margin, a.command_limit, a.command_margin,
                                door_rows=a.door_rows, door_kernels=a.door_kernels)
        print("\n".join(lines))
        return 0 if fits else 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
