#!/usr/bin/env python3
"""Measures what the Python front door costs per certificate row, beyond the kernel's own compute.

A certification's wall time is a fixed start-up (describing the kernel, hashing the catalog,
starting the door's fork server) plus, per row, the children that row runs (claims, the calls in
one process, the second process) and the host's judging. The fixed part is taken out by running
two selections of the same family, a small and a large one, and taking the slope:

    per-row overhead = (wall(large) - wall(small)) / (rows(large) - rows(small)) - kernel per row

where "kernel per row" bounds the kernel's own compute from the certificate: each row records its
fastest call (run_seconds), and a row makes at most MAX_CALLS calls of its case. The kernel is
the suite's torch decode (kernels/python/examples/torch_mla.py) on the small attn_core cases,
whose calls take about a millisecond, so the overhead is what remains.

Each configuration runs --repeats times (median wall). It is measured twice: with the door's fork
server (the default: children forked from a process that has imported torch) and without it
(MLA_DOOR_SERVER=0: each child a fresh interpreter that imports torch), so the report shows what
the server saves on this machine.

    python3 reports/tools/door_overhead.py --mla build/ci/tools/mla/mla \
        --goldens fixtures/goldens --python-exe /usr/bin/python3 --out door_overhead.json

Prints a table; writes the measurements as JSON. Exit status 0, or 1 when a certification did not
pass (a run that is not green measures nothing).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

# Calls of one row: a plug-in or Python kernel is called 3 to 5 times in its first process, then
# once in a second process (certify/src/run/session.hpp, CallSchedule).
MAX_CALLS = 6
SMALL = r"attn_core/h3_sq2_short$"
LARGE = r"attn_core/"


def per_row(small, large, max_calls=MAX_CALLS):
    """The slope between two runs (each {"wall": s, "rows": n, "kernel": s}): wall seconds per
    additional row, and that less the kernel's bound per row."""
    rows = large["rows"] - small["rows"]
    if rows <= 0:
        raise ValueError("the large selection must certify more rows than the small one")
    slope = (large["wall"] - small["wall"]) / rows
    kernel = max_calls * (large["kernel"] - small["kernel"]) / rows
    return {"wall_per_row": slope, "kernel_bound_per_row": kernel, "overhead_per_row": slope - kernel}


def certify_once(args, selection, env):
    with tempfile.TemporaryDirectory(prefix="door-overhead-") as out:
        cmd = [args.mla, "certify", "--goldens", args.goldens, "--out", out, "--python", args.spec,
               "--python-exe", args.python_exe, "--family", "attn_core", "--case", selection, "--seed", "1"]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            sys.stderr.write(p.stdout)
            raise RuntimeError(f"certification exited {p.returncode}: {' '.join(cmd)}")
        with open(os.path.join(out, "certificate.json")) as f:
            cert = json.load(f)
    rows = [r for k in cert["kernels"] for r in k["cases"]]
    return {"wall": wall, "rows": len(rows), "kernel": sum(r.get("run_seconds") or 0.0 for r in rows)}


def measure(args, server):
    env = dict(os.environ)
    if server:
        env.pop("MLA_DOOR_SERVER", None)
    else:
        env["MLA_DOOR_SERVER"] = "0"
    runs = {}
    for name, selection in (("small", SMALL), ("large", LARGE)):
        tries = [certify_once(args, selection, env) for _ in range(args.repeats)]
        runs[name] = {"wall": statistics.median(t["wall"] for t in tries), "rows": tries[0]["rows"],
                      "kernel": statistics.median(t["kernel"] for t in tries),
                      "walls": [t["wall"] for t in tries]}
    return {"runs": runs, **per_row(runs["small"], runs["large"])}


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mla", required=True, help="the mla executable")
    p.add_argument("--goldens", default=os.path.join(root, "fixtures", "goldens"))
    p.add_argument("--python-exe", default=sys.executable)
    p.add_argument("--spec", default=os.path.join(root, "kernels", "python", "examples", "torch_mla.py") + ":KERNEL")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", help="JSON file for the measurements")
    args = p.parse_args(argv)
    try:
        result = {"machine": {"node": platform.node(), "cpus": os.cpu_count(), "python": args.python_exe},
                  "spec": args.spec, "repeats": args.repeats, "max_calls_per_row": MAX_CALLS,
                  "fork_server": measure(args, True), "fresh_interpreters": measure(args, False)}
    except RuntimeError as e:
        print(f"door_overhead: {e}", file=sys.stderr)
        return 1
    print(f"{'children':<20} {'rows':>10} {'wall/row s':>11} {'kernel/row s':>13} {'overhead/row s':>15}")
    for name in ("fork_server", "fresh_interpreters"):
        r = result[name]
        rows = f"{r['runs']['small']['rows']}->{r['runs']['large']['rows']}"
        print(f"{name:<20} {rows:>10} {r['wall_per_row']:>11.3f} {r['kernel_bound_per_row']:>13.4f} "
              f"{r['overhead_per_row']:>15.3f}")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
