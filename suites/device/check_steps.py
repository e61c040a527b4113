"""The device check's steps, in the order they run (check.py's header says what each does and why
in that order): each its own process group under its own timeout, inside one budget."""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

from check_env import PLAN, find_cublas, find_sanitizer

# The smoke binary's smallest problems for compute-sanitizer: three decode problems (16-row tiles:
# the bf16 one, the FP8 one with its helper warps and shared-memory dequantization, FP8 sparse with
# its index gathers; each through the combine) and both cache appends, so the tools' 10-100x
# slowdown fits the slot.
SANITIZE_FILTER = ("Instance/Decode.OneProblemThroughDecodeAndCombine/rows16_bf16_dense:"
                   "Instance/Decode.OneProblemThroughDecodeAndCombine/rows16_fp8_dense:"
                   "Instance/Decode.OneProblemThroughDecodeAndCombine/rows16_fp8_sparse:Append.*")
# decode_b128_h16_sq1_sk8192 and its FP8 twin: the bf16-vs-FP8 comparison (mla-bench adds an
# mla_ratio row with the measured speedup); the sk8192 top-2048 pair is sparse decode.
BENCH_POINTS = ("decode_b128_h16_sq1_sk1024,decode_b128_h16_sq1_sk4096,decode_b128_h16_sq1_sk8192,fp8_b128_h16_sq1_sk8192,"
                "decode_b128_h16_sq1_sk16384,compute_b128_h64_sq1_sk4096,compute_b128_h64_sq2_sk4096,"
                "compute_b128_h128_sq1_sk4096,compute_b128_h128_sq2_sk4096,sparse_b64_h128_sq1_sk8192_top2048_bf16,"
                "sparse_b64_h128_sq1_sk8192_top2048_fp8")
# The CUDA kernels of the other kinds, on one point each (mla-bench's device side for them:
# events, the L2 flush, the device roofs): cuda_naive_prefill_cublas on V3's 4K-token causal
# prefill at 128 heads (the compute side of the roofline; its truth, the fp64 oracle and the bf16
# pipeline over 8.4M attended pairs per head, is the slowest of the bench's), cuda_merge on
# 16K tokens x 128 heads of bf16 states (memory-bound). Their inputs are built by mla-bench, not
# by the rehearsal's input rates (decode points only); the plan counts their rows.
PHASE_BENCH_POINTS = "prefill_causal_t4096_h128,merge_bf16_t16384_h128_d128"
# The field's decode kernels beside the suite's in the bench (FlashMLA, FlashInfer through the Python
# door's adapters: the module of each spec and the library it wraps). Each prepared point costs a
# door child (a torch import, ~3 s, and a CUDA context) for the kernel and another for its
# calling-path overhead row, so they are timed on two of the bench points only, the memory-bound
# serving decode and the compute-bound h=128 s_q=2 one; elsewhere their rows say why they were
# not timed.
PY_BENCH_KERNELS = (("mla_door.adapters.flashmla:kernel", "flash_mla"),
                    ("mla_door.adapters.flashinfer:kernel", "flashinfer.mla"))
PY_BENCH_POINTS = "decode_b128_h16_sq1_sk4096,compute_b128_h128_sq2_sk4096"
# The plug-in's C ABI with device pointers and the host's stream is what its step is for (the
# kernel it wraps is certified by `certify`): a child costs a context, so it gets the attn_core
# cases with the most to say about the ABI (paged cache, varlen, s_q > 1, an empty batch, wide
# heads), not the whole family, and the bf16 cache_append cases (the append cuda_plugin exports;
# the rehearsal's stand-in has more). Unclaimed shapes are not probed: the plug-in's claims are
# the wrapped kernel's own.
PLUGIN_CASES = r"^attn_core/(all_empty|h16_varlen_ps16|h64_sq2_ps64|h128_sq2_v3_scale_ps16)$|^cache_append/[^/]+/bf16/"
# The field's libraries as they are, through the Python door: three cases only, since each
# claimed case costs a claims child and two call children (a second, fresh process must repeat
# the first), each of which imports torch, and the call children create a CUDA context:
# FlashMLA's dense decode on the bf16 cache at page 64 (lengths 1 and 130, s_q 2) and its sparse
# decode on the FP8 cache; FlashInfer's causal s_q = 2 decode over 33 tokens at page 16 with 128
# heads, a shape FlashMLA does not claim (NOT_CLAIMED with its reason). (FlashInfer does not claim
# a causal row that attends nothing, so the first case is not its.)
# The Python door's step: decode cases for FlashMLA and FlashInfer, a chunked causal and a
# context-chunk prefill for FlashAttention, two merges, V3.2's drawn top-k at k = 2048, DeepGEMM's
# indexer logits, vLLM's indexer cache write, and FlashMLA's sparse prefill on its drawn calls and
# on the chain cases (the suite's indexer and top-k feeding it).
PY_DOOR_CASES = (r"^attn_core/(h128_sq2_v3_scale_ps16|h64_sq2_ps64)$|^attn_sparse/sparse_fp8_tiny_flashmla_ue8m0$"
                 r"|^prefill/(h16_chunked|noncausal_context)$|^merge/(h128|d512)$|^fresh/topk_k2048_"
                 r"|^indexer/h64_half_ue8m0$|^fresh/indexer_logits_|^fresh/indexer_append_|^fresh/sparse_prefill_"
                 r"|^fresh/sparse_chain_")
TIMED_OUT = (124, 137)
NOT_STARTED = 125


def read_text(path, default=""):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return default


def lines_of(text):
    """Lines as grep and tail count them: split at newlines only, no empty last line."""
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def _flat(text):
    return text.replace("\n", " ").replace("\t", " ")


class Check:
    def __init__(self, s):
        self.s, self.a = s, s.a
        self.readers = s.readers
        self.lock = threading.Lock()
        self.children = set()
        self.have_gpu, self.no_gpu_why = False, ""
        self.py_probe = None  # (python, torch, matplotlib, ms) once the background probe answered
        self.py_done = threading.Event()
        self.plan_md = os.path.join(s.work, "plan.md")

    # ---- clock, log, steps --------------------------------------------------------------------

    def elapsed(self):
        return int(time.time()) - self.a.t0

    def left(self):
        return self.a.budget - self.elapsed()

    def log(self, msg):
        print(f"[check {self.elapsed()}s] {msg}", file=sys.stderr, flush=True)

    def record(self, name, status, seconds, detail=""):
        """One row of steps.tsv (STATUS: PASS FAIL TIMEOUT SKIP)."""
        with self.lock, open(self.s.steps, "a") as f:
            f.write(f"{name}\t{status}\t{seconds}\t{detail.replace(chr(10), ' ')}\n")
        self.log(f"{name}: {status} {detail}")

    def logfile(self, name):
        return os.path.join(self.s.r, "logs", name + ".log")

    def tail_of(self, name, n=400):
        try:
            with open(self.logfile(name), "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - n))
                return _flat(f.read().decode(errors="replace"))
        except OSError:
            return ""

    def run_step(self, name, cmd, cap=None, env=None):
        """Runs cmd in its own process group with min(cap, the budget left - the packaging reserve)
        seconds, output to logs/NAME.log; on the deadline the group gets SIGTERM, then SIGKILL 5 s
        later. Returns (rc, seconds): 124/137 timed out, 125 not started (no budget left)."""
        if cap is None:
            cap = self.a.cap.get(name, 30)
        t = min(self.left() - self.a.reserve, cap)
        if t < 3:
            with open(self.logfile(name), "w") as f:
                f.write("budget exhausted\n")
            return NOT_STARTED, 0
        start = time.time()
        with open(self.logfile(name), "wb") as log:
            rc = self.spawn(cmd, t, stdout=log, env=env)
        return rc, int(time.time()) - int(start)

    def spawn(self, cmd, timeout, stdout, env=None, stderr=subprocess.STDOUT):
        try:
            p = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                                 start_new_session=True, env=env)
        except OSError as e:
            stdout.write(f"{cmd[0]}: {e.strerror}\n".encode())
            return 126 if isinstance(e, PermissionError) else 127
        with self.lock:
            self.children.add(p)
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._signal(p, signal.SIGTERM)
            try:
                p.wait(timeout=5)
                return 124
            except subprocess.TimeoutExpired:
                self._signal(p, signal.SIGKILL)
                p.wait()
                return 137
        finally:
            with self.lock:
                self.children.discard(p)

    @staticmethod
    def _signal(p, sig):
        try:
            os.killpg(p.pid, sig)
        except OSError:
            pass

    def capture(self, cmd, timeout):
        """stdout of a short command (a probe; its stderr is dropped), its exit status; 124 when it
        timed out."""
        import tempfile
        with tempfile.TemporaryFile() as f:
            rc = self.spawn(cmd, timeout, stdout=f, stderr=subprocess.DEVNULL)
            f.seek(0)
            return f.read().decode(errors="replace"), rc

    # ---- summary.md and results.tar.gz, rewritten after every phase -------------------------------

    def rows(self):
        out = []
        for line in lines_of(read_text(self.s.steps)):
            f = line.split("\t")
            out.append((f + ["", "", "", ""])[:4])
        return out

    def verdict(self):
        rows = self.rows()
        fails = sum(1 for r in rows if r[1] in ("FAIL", "TIMEOUT"))
        skips = sum(1 for r in rows if r[1] == "SKIP")
        passes = sum(1 for r in rows if r[1] == "PASS")
        if fails:
            return f"FAILED ({fails} failed, {skips} skipped, {passes} passed)", 1
        if skips:
            return f"INCOMPLETE ({skips} skipped, {passes} passed, none failed)", 2
        return f"PASSED (all {passes} steps)", 0

    def write_summary(self, phase):
        s, rows = self.s, self.rows()
        v, _ = self.verdict()
        first = next((r for r in rows if r[1] in ("FAIL", "TIMEOUT")), None)
        device = read_text(os.path.join(s.out, "device.txt"))
        L = [f"# Device check: {v}" if phase == "final" else f"# Device check: RUNNING (after {phase}): {v} so far", ""]
        if os.environ.get("MLA_CHECK_ARCHIVE"):
            L += [f"Archive: {os.environ['MLA_CHECK_ARCHIVE']}", ""]
        host = next((ln for ln in lines_of(device) if ln.startswith("host:")), "")
        L.append(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, {self.elapsed()} s of a {self.a.budget} s budget"
                 f"{' (rehearsal: no GPU steps run)' if self.a.rehearse else ''}; {host}")
        if self.have_gpu:
            d = lines_of(device)
            i = next((i for i, ln in enumerate(d) if ln.startswith("name, driver_version")), None)
            L.append(f"GPU: {d[i + 1] if i is not None and i + 1 < len(d) else (d[i] if i is not None else '')}")
        else:
            L.append(f"GPU: none usable ({self.no_gpu_why or 'not probed yet'})")
        L.append("")
        if first:
            tail = lines_of(read_text(self.logfile(first[0])))[-25:]
            L += [f"## First failure: {first[0]}", "", f"{first[1]} after {first[2]} s: {first[3]}", "", "```"]
            L += [ln[:300] for ln in tail] + ["```", ""]
        L += ["| step | status | seconds | cap | detail |", "|---|---|---|---|---|"]
        caps = {n: self.a.cap[n] for n, _ in PLAN}
        for name, status, secs, detail in rows:
            c = caps.get(name, "")
            if re.match(r"^test_|^certify|^smoke_tests$", name):
                c = caps["certify"]
            L.append(f"| {name} | {status} | {secs} | {c} | {detail.replace('|', chr(92) + '|')} |")
        L.append("")
        text = "\n".join(L) + "\n" + read_text(self.plan_md)
        text += ("Files: device.txt (GPU, driver, clocks, libraries), results.tar.gz (results/: logs/, tests/*.json,\n"
                 "certify/, bench/gpu.json (rows as they completed) + combined.json, torch/, report/, sanitize/), and\n"
                 "copies of certificate.md, report.md and the plots when produced.\n")
        with open(os.path.join(s.out, "summary.md.tmp"), "w") as f:
            f.write(text)
        os.replace(os.path.join(s.out, "summary.md.tmp"), os.path.join(s.out, "summary.md"))

    def package(self):
        """At most 8 files in OUTDIR, each well under 16 MiB."""
        s, limit = self.s, 4194304
        for f in glob.glob(os.path.join(s.r, "logs", "*.log")):  # a runaway log must not push the archive past the limit
            if os.path.getsize(f) > limit:
                with open(f, "rb") as src:
                    src.seek(-limit, 2)
                    data = src.read()
                with open(f, "wb") as dst:
                    dst.write(data + b"[truncated to the last 4 MiB]\n")
        for name in ("device.txt", "summary.md"):
            if os.path.isfile(os.path.join(s.out, name)):
                shutil.copy(os.path.join(s.out, name), os.path.join(s.r, name))
        tmp = os.path.join(s.out, "results.tar.gz.tmp")
        if subprocess.run(["tar", "-C", s.work, "-czf", tmp, "results"], stderr=subprocess.DEVNULL).returncode == 0:
            os.replace(tmp, os.path.join(s.out, "results.tar.gz"))
        for f in ("certify/certificate.md", "report/report.md", "report/roofline.png", "report/bandwidth.png"):
            if os.path.isfile(os.path.join(s.r, f)):
                shutil.copy(os.path.join(s.r, f), s.out)

    def checkpoint(self, phase):
        self.write_summary(phase)
        self.package()

    # ---- the run ---------------------------------------------------------------------------------

    def run(self):
        # Ended from outside (the command's own timeout, ^C): the steps' process groups are ended
        # and the scratch folder removed on the way out, as on any other exit.
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))
        try:
            return self._run()
        finally:
            with self.lock:
                for p in list(self.children):
                    self._signal(p, signal.SIGKILL)
            shutil.rmtree(self.s.work, ignore_errors=True)

    def _run(self):
        s, a = self.s, self.a
        stale = os.environ.get("MLA_CHECK_STALE_BUNDLE", "")
        self.record("setup", "PASS", self.elapsed(),
                    f"bundle {s.bundle} ({s.layout}), goldens {s.goldens or 'none'}, budget {a.budget} s (plan {a.plan_total} s)"
                    + (f"; RUN WITH --allow-stale: {stale}" if stale else ""))
        if a.budget < a.plan_total:
            self.log(f"the budget ({a.budget} s) is below the plan ({a.plan_total} s): the last steps get what is left")
        self.libraries()
        os.environ["MLA_GOLDENS_DIR"] = s.goldens
        if s.repo:
            os.environ["MLA_SOURCE_DIR"] = s.repo
        threading.Thread(target=self.probe_python, daemon=True).start()
        self.cs = find_sanitizer()
        from check_phases import Phases
        ph = Phases(self)
        ph.probe()
        ph.certify()
        self.checkpoint("certify")
        ph.bench()
        self.checkpoint("bench")
        if a.rehearse:
            ph.bench_inputs()
        ph.torch()
        ph.report()
        self.checkpoint("report")
        ph.sanitizers()
        plan_fits = ph.plan() if a.rehearse else True
        self.write_summary("final")
        self.package()
        verdict, rc = self.verdict()
        self.log(f"{verdict}; {len(os.listdir(s.out))} files in {s.out}")
        sys.stdout.write(read_text(os.path.join(s.out, "summary.md")))
        sys.stdout.flush()
        if a.rehearse:
            # A rehearsal passes when nothing failed and the plan fits; skipped GPU steps are expected.
            return 1 if rc == 1 or not plan_fits else 0
        return rc

    # ---- libraries -------------------------------------------------------------------------------

    def libraries(self):
        s = self.s
        self.cublas_dir = find_cublas()
        self.libnote = "cuBLAS: " + (self.cublas_dir or "NOT FOUND (searched site-packages/nvidia/cu13/lib, then "
                                     "/usr/local/cuda*; the cuBLAS baseline and the GEMM ceiling cannot run)")
        if s.layout != "bundle":
            return
        lib = os.path.join(s.bundle, "lib")

        def link(target, name):
            dest = os.path.join(lib, name)
            if os.path.lexists(dest):
                os.remove(dest)
            os.symlink(target, dest)

        if self.cublas_dir:
            for name in ("libcublas.so.13", "libcublasLt.so.13"):
                link(os.path.join(self.cublas_dir, name), name)
            self.libnote += " (linked into the bundle's lib/)"
        err, rc = self.starts()
        if rc != 0:
            if re.search(r"GLIBCXX|CXXABI|GCC_", err):
                for f in sorted(glob.glob(os.path.join(lib, "compat", "*"))):
                    link("compat/" + os.path.basename(f), os.path.basename(f))
                self.libnote += "; the system libstdc++ is too old: lib/compat linked into lib/"
            err, rc = self.starts()
            if rc != 0:
                self.libnote += "; THE BINARIES DO NOT START: " + err[:300].replace("\n", " ")

    def starts(self):
        try:
            p = subprocess.run([self.s.mla, "--help"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
            return p.stderr.decode(errors="replace"), p.returncode
        except (OSError, subprocess.SubprocessError) as e:
            return str(e), 127

    # ---- python with torch and matplotlib, probed in the background ---------------------------------

    def probe_python(self):
        """An import of torch takes seconds: the torch and report steps read the answer; nothing
        waits for it before then."""
        try:
            for c in ("python3", "/opt/torch/.venv/bin/python3", "/usr/bin/python3"):
                c = shutil.which(c)
                if not c:
                    continue
                start = time.time()
                v, rc = self.capture([c, "-c", "import torch; print(torch.__version__, 'cuda', torch.version.cuda, "
                                          "'available', torch.cuda.is_available())"], 40)
                if rc == 0:
                    m = self.matplotlib(c)
                    self.py_probe = (c, v.rstrip("\n"), m or "missing", str(int((time.time() - start) * 1000)))
                    return
            c = shutil.which("python3") or ""
            self.py_probe = (c, "no torch", (self.matplotlib(c) if c else "") or "missing", "0")
        finally:
            self.py_done.set()

    def matplotlib(self, py):
        out, rc = self.capture([py, "-c", "import matplotlib, numpy; print(matplotlib.__version__)"], 20)
        return out.rstrip("\n") if rc == 0 else ""

    def python_info(self):
        """Waits (bounded by the budget) for the background probe: (python, torch, matplotlib, ms)."""
        waited = 0
        while not self.py_done.is_set() and waited < 45 and self.left() > self.a.reserve + 5:
            self.py_done.wait(1)
            waited += 1
        py, torch, mpl, ms = self.py_probe if self.py_done.is_set() and self.py_probe else ("", "not probed (budget)", "", "")
        return (py or shutil.which("python3") or "/usr/bin/python3"), torch, mpl, ms
