"""The device check's arguments, time plan and surroundings: where the binaries, tools, goldens and
repository are, for a bundle or a CMake build tree (check.py's header says what the check does)."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

# The time plan (seconds); README.md "Time plan". In the order the steps run: the certificate
# first, then the benchmark rows, then the sanitizers. Sized from the H200 runs of 2026-12-04:
# the bench took 115 s with its prefill and merge points (70 s of it the host's truths), each
# sanitizer 0-2 s, so 40 s moved from the sanitizers' 70 to the bench.
PLAN = [("setup", 10), ("probe", 20), ("certify", 130), ("bench", 170), ("torch", 35), ("report", 15),
        ("sanitize_memcheck", 10), ("sanitize_racecheck", 10), ("sanitize_synccheck", 10), ("package", 10)]
COMMAND_LIMIT = 600  # the most one command may run on the GPU machine
COMMAND_MARGIN = 60  # what the command's timeout adds to the budget: start-up, the transfers back
CERTIFY_MARGIN = 25  # percent of its cap each certify step must leave unused in the rehearsal


class Usage(Exception):
    def __init__(self, message="", show_usage=False):
        super().__init__(message)
        self.message, self.show_usage = message, show_usage


class Args:
    pass


def parse_args(argv):
    if not argv:
        raise Usage(show_usage=True)
    a = Args()
    a.out, rest = argv[0], list(argv[1:])
    a.bundle, a.goldens = "", os.environ.get("MLA_GOLDENS_DIR", "")
    budget = os.environ.get("MLA_CHECK_BUDGET_S", "") or "420"
    a.rehearse = a.plan_only = False
    while rest:
        arg = rest.pop(0)
        if arg in ("--bundle", "--goldens", "--budget"):
            if not rest:
                raise Usage(f"check.sh: {arg} needs a value", show_usage=True)
            v = rest.pop(0)
            if arg == "--bundle":
                a.bundle = v
            elif arg == "--goldens":
                a.goldens = v
            else:
                budget = v
        elif arg == "--rehearse":
            a.rehearse = True
        elif arg == "--plan":
            a.plan_only = True
        elif arg in ("-h", "--help"):
            raise Usage(show_usage=True)
        else:
            raise Usage(f"check.sh: unknown argument {arg}", show_usage=True)
    if not re.fullmatch(r"[0-9]+", budget):
        raise Usage(f"check.sh: --budget needs whole seconds, got '{budget}'")
    a.budget = int(budget)
    a.t0 = int(os.environ.get("MLA_CHECK_T0", "") or time.time())
    a.cap = dict(PLAN)
    a.plan_total = sum(c for _, c in PLAN)
    # MLA_CHECK_CAPS=step=seconds,... shortens steps (the check's own tests use it).
    for e in os.environ.get("MLA_CHECK_CAPS", "").replace(",", " ").split():
        m = re.fullmatch(r"([a-z_]+)=([0-9]+)", e)
        if not m:
            raise Usage(f"check.sh: MLA_CHECK_CAPS entry '{e}' is not step=seconds")
        a.cap[m.group(1)] = int(m.group(2))
    a.reserve = a.cap["package"]
    return a


def plan_only(a):
    """--plan: the static half of the time plan, checked before anything is carried (preflight.sh):
    the caps fit the budget, and the budget plus the command's margin fits one command."""
    print(f"Time plan of {os.environ.get('MLA_CHECK_SELF') or sys.argv[0]}:")
    for name, _ in PLAN:
        print(f"  {name:<20} {a.cap[name]:>4} s")
    total = sum(a.cap[name] for name, _ in PLAN)
    print(f"  caps sum to {total} s of a {a.budget} s budget; run the command with a timeout of "
          f"{a.budget + COMMAND_MARGIN} s (at most {COMMAND_LIMIT})")
    if total > a.budget:
        print(f"check.sh --plan: the caps sum to {total} s, over the {a.budget} s budget", file=sys.stderr)
        return 1
    if a.budget + COMMAND_MARGIN > COMMAND_LIMIT:
        print(f"check.sh --plan: a {a.budget} s budget plus {COMMAND_MARGIN} s of margin is over the "
              f"{COMMAND_LIMIT} s one command may run", file=sys.stderr)
        return 1
    return 0


def _is_exe(p):
    return bool(p) and os.path.isfile(p) and os.access(p, os.X_OK)


class Setup:
    """Everything the steps need to know before the first one runs."""

    def __init__(self, a):
        self.a = a
        here = os.path.dirname(os.path.realpath(__file__))  # beside check.sh, in the bundle and in the tree
        # The simulated CUDA context start-up of a rehearsal (certify/include/mla/certify/child.hpp).
        self.sim_ctx = ""
        if a.rehearse:
            self.sim_ctx = os.environ.get("MLA_SIMULATED_CONTEXT_SECONDS", "") or "1.5"
            if not (re.fullmatch(r"[0-9]+(\.[0-9]+)?", self.sim_ctx) and float(self.sim_ctx) <= 60):
                raise Usage(f"check.sh: MLA_SIMULATED_CONTEXT_SECONDS='{self.sim_ctx}' is not a number of seconds "
                            "between 0 and 60")
        else:
            # A device run pays the real cost; a variable left in the environment must not add a fake one.
            os.environ.pop("MLA_SIMULATED_CONTEXT_SECONDS", None)
            os.environ.pop("MLA_SIMULATED_CONTEXT_LOG", None)
        self._locate(a, here)
        try:
            os.makedirs(a.out, exist_ok=True)
        except OSError:
            raise Usage(f"check.sh: cannot create {a.out}")
        self.out = os.path.realpath(a.out)
        self.work = tempfile.mkdtemp(prefix="mla-check.", dir="/tmp")
        self.r = os.path.join(self.work, "results")
        for d in ("logs", "tests", "certify", "certify_plugin", "certify_python", "bench", "torch", "report", "sanitize"):
            os.makedirs(os.path.join(self.r, d))
        self.steps = os.path.join(self.work, "steps.tsv")
        open(self.steps, "w").close()

    def _locate(self, a, here):
        """A bundle (bin/ lib/ tools/) or, for tests and rehearsals on a build machine, a CMake build tree."""
        bundle = a.bundle
        if not bundle:
            if os.path.isdir(os.path.join(here, "bin")):
                bundle = here
            elif os.path.isdir(os.path.join(os.getcwd(), "build/device/bundle/bin")):
                bundle = os.path.join(os.getcwd(), "build/device/bundle")
            else:
                raise Usage("check.sh: no bundle next to this script or at ./build/device/bundle; pass --bundle")
        b = self.bundle = os.path.realpath(bundle)
        if os.path.isdir(os.path.join(b, "bin")):
            self.layout = "bundle"
            bin_ = os.path.join(b, "bin")
            self.tools = os.path.join(b, "tools/reports")
            with open(os.path.join(bin_, "gpu_tests.txt")) as f:
                self.gpu_tests = [os.path.join(bin_, line.rstrip("\n")) for line in f]
            self.mla, self.bench_exe = os.path.join(bin_, "mla"), os.path.join(bin_, "mla-bench")
            self.smoke, self.input_rates = os.path.join(bin_, "mla_gpu_smoke_tests"), os.path.join(bin_, "mla-input-rates")
            self.cuda_plugin, self.standin_plugin = os.path.join(bin_, "cuda_plugin.so"), os.path.join(bin_, "good_append.so")
            self.door = os.path.join(b, "python")  # kernels/python (the Python door and its adapters)
            repo_guess = os.path.realpath(os.path.join(b, "../../.."))
        elif os.path.isfile(os.path.join(b, "CMakeCache.txt")):
            self.layout = "build-tree"
            src = ""
            with open(os.path.join(b, "CMakeCache.txt")) as f:
                for line in f:
                    if line.startswith("CMAKE_HOME_DIRECTORY:INTERNAL="):
                        src = line.rstrip("\n").split("=", 1)[1]
            self.tools = os.path.join(src, "reports/tools")
            self.gpu_tests = None  # from CTest, once the readers are importable (below)
            self.mla, self.bench_exe = os.path.join(b, "tools/mla/mla"), os.path.join(b, "suites/bench/mla-bench")
            self.smoke = os.path.join(b, "suites/device/mla_gpu_smoke_tests")
            self.input_rates = os.path.join(b, "suites/device/mla-input-rates")
            self.cuda_plugin = os.path.join(b, "kernels/plugin/examples/cuda_plugin.so")
            self.standin_plugin = os.path.join(b, "kernels/plugin/examples/good_append.so")
            self.door = os.path.join(src, "kernels/python")
            repo_guess = src
        else:
            raise Usage(f"check.sh: {b} is neither a bundle (bin/) nor a CMake build tree")
        # What the check reads from its steps' files, and which kernels it takes from the registry:
        # one tested module (reports/tools/check_readers.py), beside the report tools.
        self.readers_path = os.path.join(self.tools, "check_readers.py")
        if not os.path.isfile(self.readers_path):
            raise Usage(f"check.sh: {self.readers_path} is missing (the bundle's tools/reports)")
        sys.path.insert(0, self.tools)
        import check_readers
        self.readers = check_readers
        if self.gpu_tests is None:
            p = subprocess.run(["ctest", "--show-only=json-v1", "-L", "gpu"], cwd=b, capture_output=True, text=True)
            try:
                self.gpu_tests = check_readers.gpu_test_binaries(json.loads(p.stdout), b)
            except ValueError:
                self.gpu_tests = []
        self.goldens = a.goldens
        if not self.goldens:
            for g in (os.path.join(b, "goldens"), os.path.join(os.getcwd(), "fixtures/goldens"),
                      os.path.join(repo_guess, "fixtures/goldens")):
                if os.path.isfile(os.path.join(g, "MANIFEST.sha256")):
                    self.goldens = g
                    break
        self.repo = ""
        for r in (os.getcwd(), repo_guess):
            if os.path.isfile(os.path.join(r, "fixtures/SCHEMA.md")):
                self.repo = r
                break


def find_cublas():
    """cuBLAS for CUDA 13: the image's wheels first (site-packages/nvidia/cu13/lib; older wheels:
    nvidia/cublas/lib), found by globbing, not by starting python; then the CUDA install."""
    def has(d):
        return os.path.isfile(os.path.join(d, "libcublas.so.13")) and os.path.isfile(os.path.join(d, "libcublasLt.so.13"))

    roots = []
    py = shutil.which("python3")
    if py:
        # A venv's bin/python3 is a link to the base interpreter: its own folder first, then the target's.
        roots += [os.path.join(os.path.dirname(py), ".."), os.path.join(os.path.dirname(os.path.realpath(py)), "..")]
    roots += ["/opt/torch/.venv", "/usr/local", "/usr"]
    for r in roots:
        for pattern in ("lib/python3*/site-packages/nvidia/cu13/lib", "lib/python3*/dist-packages/nvidia/cu13/lib",
                        "lib/python3/dist-packages/nvidia/cu13/lib", "lib/python3*/site-packages/nvidia/cublas/lib"):
            for d in sorted(glob.glob(os.path.join(r, pattern))):
                if has(d):
                    return os.path.realpath(d)
    for pattern in ("/usr/local/cuda/lib64", "/usr/local/cuda-*/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"):
        for d in sorted(glob.glob(pattern)):
            if has(d):
                return os.path.realpath(d)
    try:
        p = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10)
        for line in p.stdout.splitlines():
            m = re.search(r"libcublas\.so\.13 .*=> (.*)$", line)
            if m:
                return os.path.dirname(os.path.realpath(m.group(1)))
    except (OSError, subprocess.SubprocessError):
        pass
    return ""


def find_sanitizer():
    """compute-sanitizer on PATH, or where CUDA toolkits put it."""
    for pattern in (shutil.which("compute-sanitizer") or "", "/usr/local/cuda/bin/compute-sanitizer",
                    "/usr/local/cuda/compute-sanitizer/compute-sanitizer", "/usr/local/cuda-*/bin/compute-sanitizer",
                    "/usr/local/cuda-*/compute-sanitizer/compute-sanitizer", "/opt/nvidia/*/compute-sanitizer"):
        for c in sorted(glob.glob(pattern)) if pattern else []:
            if _is_exe(c):
                return c
    return ""
