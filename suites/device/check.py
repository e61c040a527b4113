#!/usr/bin/env python3
"""The device check: everything this suite can only verify on a GPU, in one command of at most
seven minutes, from the bundle that make_bundle.sh writes (suites/device/README.md says how to
carry and run it; run_on_device.sh is what the device machine runs, through check.sh).

  check.sh OUTDIR [--bundle DIR] [--goldens DIR] [--budget SECONDS] [--rehearse]

Every step runs in its own process group under its own timeout, inside one budget (default 420
s, env MLA_CHECK_BUDGET_S, counted from MLA_CHECK_T0 when run_on_device.sh set it before
unpacking), probes included. The steps, in order, with their caps (the time plan; README.md,
"Time plan", says how the caps were sized), most valuable result first:
  probe             20  nvidia-smi, mla-bench --mla_probe, the libraries each binary
                        resolves, compute-sanitizer; python/torch/matplotlib are probed in the
                        background for the later steps                      -> OUTDIR/device.txt
  certify          130  in parallel: `certify` (every CUDA kernel of the registry, as
                        `mla kernels --json` lists them, over the golden catalog, --in-process:
                        the built-in kernels are trusted, so one process and one CUDA context for
                        the whole certificate instead of one per case), `certify_plugin`
                        (cuda_plugin.so through the C ABI, a child process per case),
                        `certify_python` (FlashMLA and FlashInfer through the Python door's
                        adapters with the python that imports torch, on a few cases, a child per
                        case; SKIP with the import error where the libraries are not installed),
                        the smoke test (mla_gpu_smoke_tests: one small problem per decode kernel
                        instance with the combine, both cache appends) and every other gpu test
                        binary: CPU-bound references, the GPU is not being timed
  bench            170  mla-bench --mla_backend=cuda: device ceilings + the CUDA kernels on the
                        device check's points, alone on the GPU, and beside them FlashMLA's and
                        FlashInfer's decode through the Python door (each where its adapter and
                        library import with the python that imports torch; the step's detail
                        says why one is absent) on two of the points, each judged before it is
                        timed; rows reach bench/gpu.json as each completes
  torch             35  reports/tools/torch_side_by_side.py on the same points, merged into the
                        bench JSON (a partial bench is merged as such)
  report            15  reports/tools/bench_report.py over the merged JSON + certificate
  sanitize_memcheck 10, sanitize_racecheck 10, sanitize_synccheck 10
                        compute-sanitizer on the smoke binary's three smallest decode problems
                        and both appends; last, so a slow tool costs only itself, and each gets
                        at least its cap, more when the earlier steps left time; no --leak-check
plus 10 s for unpacking (run_on_device.sh) and 10 s for packaging: 420 s in all. summary.md and
results.tar.gz are rewritten after the certify phase, the bench, the report and each sanitizer.

  check.sh OUTDIR --plan: print the plan and exit 0 when its caps fit the budget (preflight.sh).

--rehearse (on a machine without a GPU): the same steps, each GPU step recorded as SKIP with the
reason; in addition it builds the bench's inputs for every bench point (mla-input-rates, the host
half of the bench step), times the python/torch imports, and prints the time plan with what was
measured here. Exit 1 if a step failed or the plan does not fit the budget. What cannot run here
is stood in for, so that its host side is measured: the certify phase certifies host kernels in
place of the CUDA ones (the same flags, the same catalog; which ones the registry's listing
decides, reports/tools/check_readers.py standins(): cpu_mla_fp64 and cpu_naive_mha_fp32 with this
suite's registry), the CPU example plug-in good_append in place of cuda_plugin, and the door's
CPU stand-ins for FlashMLA and FlashInfer (examples/flashmla_cpu.py, flashinfer_cpu.py) on the
same cases; every process of those steps that would create a CUDA context on the GPU machine
waits MLA_SIMULATED_CONTEXT_SECONDS (default 1.5) once, and each certify step must end within 75 %
of its cap.

Libraries: nothing is exported on LD_LIBRARY_PATH. The binaries find the bundle's lib/ by their
rpath ($ORIGIN/../lib); cuBLAS (not bundled) is searched in the image's CUDA 13 wheels
(site-packages/nvidia/cu13/lib) first, then the CUDA install, and linked into the bundle's lib/;
lib/compat's libstdc++ is linked there only when the system's is too old for the binaries.

OUTDIR receives at most 8 files (a device run returns no more): summary.md (verdict, the first
failing step with its log tail, every step, the time plan), device.txt, results.tar.gz (every
log and result) and copies of certificate.md, report.md, roofline.png, bandwidth.png.

What the check reads from its steps' files (gtest JSON, certificates, the bench's rows) and the
rehearsal's time plan are functions of reports/tools/check_readers.py, which travels in the
bundle's tools/reports. Standard library only: the check runs where numpy and torch do not import.

Exit status: 0 every step passed; 1 a step failed or timed out (rehearsal: or the plan does not
fit); 2 nothing failed but some step was skipped (no GPU here, say); 3 bad usage.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

from check_env import Setup, Usage, parse_args, plan_only  # noqa: E402
from check_steps import Check  # noqa: E402


def main(argv):
    if os.environ.get("MLA_CHECK_PATH"):  # check.sh's PATH (it says why)
        os.environ["PATH"] = os.environ.pop("MLA_CHECK_PATH")
    try:
        a = parse_args(argv)
        if a.plan_only:
            return plan_only(a)
        setup = Setup(a)
    except Usage as e:
        if e.message:
            print(e.message, file=sys.stderr)
        if e.show_usage:
            print(__doc__, file=sys.stderr, end="")
        return 3
    return Check(setup).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
