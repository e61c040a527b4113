"""The device check's phases (check.py's header says what each does and why in this order); the
probe's body also runs as a program of its own, so that its step has a process group to end."""
import json
import os
import re
import subprocess
import sys
import threading
import time

from check_env import CERTIFY_MARGIN, COMMAND_LIMIT, COMMAND_MARGIN, PLAN
from check_steps import (BENCH_POINTS, NOT_STARTED, PHASE_BENCH_POINTS, PLUGIN_CASES, PY_BENCH_KERNELS, PY_BENCH_POINTS,
                         PY_DOOR_CASES, SANITIZE_FILTER, TIMED_OUT, lines_of, read_text)


class Phases:
    def __init__(self, check):
        self.c, self.s, self.a = check, check.s, check.a
        self.must_claim = []

    # ---- 1. probe ------------------------------------------------------------------------------

    def probe(self):
        c, s, a = self.c, self.s, self.a
        c.log(f"bundle {s.bundle} ({s.layout}), goldens {s.goldens or 'none'}, budget {a.budget}s, output {s.out}")
        params = {"bundle": s.bundle, "layout": s.layout, "libnote": c.libnote, "bench_exe": s.bench_exe,
                  "smoke": s.smoke, "cs": c.cs, "rehearse": a.rehearse, "work": s.work}
        env = dict(os.environ, MLA_CHECK_PROBE=json.dumps(params))
        rc, secs = c.run_step("probe", [sys.executable, os.path.realpath(__file__), "--probe-body"], env=env)
        device = read_text(c.logfile("probe"))
        with open(os.path.join(s.out, "device.txt"), "w") as f:
            f.write(device)
        probe_rc = next((ln[len("exit: "):] for ln in lines_of(device) if ln.startswith("exit: ")), "")
        if probe_rc == "0":
            c.have_gpu = True
        else:
            section = re.search(r"^## mla-bench --mla_probe.*?^exit:", device, re.S | re.M)
            m = re.search(r'"unavailable":"([^"]*)"', section.group(0)) if section else None
            c.no_gpu_why = (m.group(1) if m else "") or f"mla-bench --mla_probe exited {probe_rc or '?'} (see device.txt)"
        if rc in TIMED_OUT:
            c.record("probe", "TIMEOUT", secs, c.tail_of("probe", 200))
        elif not c.cublas_dir and s.layout == "bundle":
            c.record("probe", "FAIL", secs, c.libnote)
        elif "THE BINARIES DO NOT START" in c.libnote:
            c.record("probe", "FAIL", secs, c.libnote)
        else:
            m = re.search(r'"name":"[^"]*"', device)
            c.record("probe", "PASS", secs, ((m.group(0) if m else "") if c.have_gpu else f"no usable GPU: {c.no_gpu_why}")
                     + f"; {c.libnote}")

    # ---- 2. certify, with every GPU test beside it (CPU-bound references; the GPU is not timed) -----

    def gtest(self, name, json_path, rc, secs):
        """Records a gtest step from its exit status and JSON."""
        c = self.c
        if rc in TIMED_OUT:
            return c.record(name, "TIMEOUT", secs, f"killed after {secs}s: {c.tail_of(name, 200)}")
        if rc == NOT_STARTED:
            return c.record(name, "SKIP", 0, "budget exhausted")
        st, detail = c.readers.gtest_verdict(json_path)
        if rc != 0 and st != "FAIL":
            st, detail = "FAIL", f"exit {rc}; {detail}; {c.tail_of(name, 200)}"
        if st == "SKIP":
            detail += f" (no usable GPU: {c.no_gpu_why})"
        c.record(name, st, secs, detail)

    def kernels(self):
        """The built-in kernels come from the registry (`mla kernels --json`), not from names written
        here: a device run certifies every CUDA kernel; a rehearsal the host kernels that stand in for
        them (check_readers.standins says which and why). The bench holds the CUDA kernels meant for
        production (role optimized) to every point, where a baseline may refuse FP8 or sparse ones.
        Returns (names, why none)."""
        c, s = self.c, self.s
        listing_path = os.path.join(s.r, "kernels.json")
        with open(listing_path, "w") as out, open(c.logfile("kernels"), "w") as err:
            try:
                rc = subprocess.run([s.mla, "kernels", "--json"], stdout=out, stderr=err, timeout=60).returncode
            except (OSError, subprocess.SubprocessError) as e:
                err.write(f"{e}\n")
                rc = 1
        if rc != 0:
            return [], f"{os.path.basename(s.mla)} kernels --json failed: {c.tail_of('kernels', 300)}"
        try:
            listing = json.loads(read_text(listing_path))
            names = c.readers.select_kernels(listing, "standins" if self.a.rehearse else "cuda")
            self.must_claim = c.readers.select_kernels(listing, "must-claim")
        except ValueError as e:
            return [], f"mla kernels --json: {e}"
        if not names:
            what = "host stand-in for a CUDA kernel" if self.a.rehearse else "CUDA kernel"
            return [], f"the registry lists no {what} (mla kernels --json; built without CUDA?)"
        return names, ""

    def certify(self):
        """The certificate is the check's most valuable result, so it comes first, and it must fit its
        cap on the GPU machine, where a process's first CUDA call costs a second or more (driver,
        context, cuBLAS): the built-in CUDA kernels are certified --in-process (one process, one
        context, for the whole catalog: they are this project's own code, and the certificate
        written after every case survives a crash of the run), while the plug-in and the Python
        kernels keep a child per case, as untrusted code must. Each kernel's origin.isolation in
        the certificate says which it had. In a rehearsal, stand-ins run the same commands (the
        header) and MLA_SIMULATED_CONTEXT_SECONDS charges each process that would create a
        context; MLA_SIMULATED_CONTEXT_LOG counts them."""
        c, s, a = self.c, self.s, self.a
        phase_cap = min(a.cap["certify"], c.left() - a.reserve)
        names, kernels_why = self.kernels()
        if a.rehearse:
            plugin = s.standin_plugin
            py_kernels = ["--python", f"{s.door}/examples/flashmla_cpu.py:KERNEL", "--python", f"{s.door}/examples/flashinfer_cpu.py:KERNEL",
                          "--python", f"{s.door}/examples/flash_attn_cpu.py:FA3", "--python", f"{s.door}/examples/merge_cpu.py:VLLM",
                          "--python", f"{s.door}/examples/vllm_topk_cpu.py:KERNEL"]
            note = "rehearsed with stand-ins: "
        else:
            plugin = s.cuda_plugin
            # The field's libraries as they are, each SKIPPED with its import error where absent.
            py_kernels = [x for spec in ("flashmla:kernel", "flashinfer:kernel", "flash_attn:fa2", "flash_attn:fa3",
                                         "flashinfer_prefill:ragged", "merge_states:vllm", "merge_states:flashinfer",
                                         "vllm_topk:kernel", "flashinfer_topk:kernel", "deepgemm:kernel",
                                         "vllm_indexer_cache:kernel", "flashmla:sparse_prefill")
                          for x in ("--python", f"mla_door.adapters.{spec}")]
            note = ""
        results, threads = {}, []

        def start(name, cmd, env=None):
            def body():
                results[name] = c.run_step(name, cmd, cap=phase_cap, env=env)
            t = threading.Thread(target=body)
            t.start()
            threads.append(t)

        def sim_env(step, extra=None):  # the variables that charge the step's processes (rehearsal only)
            env = dict(os.environ, **(extra or {}))
            if a.rehearse:
                env.update(MLA_SIMULATED_CONTEXT_SECONDS=s.sim_ctx, MLA_SIMULATED_CONTEXT_LOG=f"{s.r}/{step}/contexts.log")
            return env

        smoke_name = os.path.basename(s.smoke)
        tests = [t for t in s.gpu_tests if os.path.basename(t) != smoke_name]  # the smoke step runs it
        if os.access(s.smoke, os.X_OK):
            start("smoke_tests", [s.smoke, f"--gtest_output=json:{s.r}/tests/smoke.json"])
        for t in tests:
            n = os.path.basename(t)
            start(f"test_{n}", [t, f"--gtest_output=json:{s.r}/tests/{n}.json"])
        certify = [s.mla, "certify", "--goldens", s.goldens]
        if s.goldens and not kernels_why:
            kernel_args = [x for k in names for x in ("--kernel", k)]
            start("certify", certify + ["--out", f"{s.r}/certify"] + kernel_args + ["--in-process", "--timeout", "60"],
                  sim_env("certify"))
        if s.goldens and os.path.isfile(plugin):
            start("certify_plugin", certify + ["--out", f"{s.r}/certify_plugin", "--plugin", plugin, "--family", "attn_core",
                                               "--family", "cache_append", "--case", PLUGIN_CASES, "--no-probe-unclaimed",
                                               "--timeout", "60"], sim_env("certify_plugin"))
        py_door = bool(s.goldens) and os.path.isdir(os.path.join(s.door, "mla_door")) and "--python" in self.help_of_certify()
        if py_door:
            py = c.python_info()[0]
            start("certify_python", certify + ["--out", f"{s.r}/certify_python"] + py_kernels
                  + ["--python-exe", py, "--case", PY_DOOR_CASES, "--timeout", "60"],
                  sim_env("certify_python", {"MLA_DOOR_PATH": s.door}))
        for t in threads:
            t.join()
        if not os.access(s.smoke, os.X_OK):
            c.record("smoke_tests", "FAIL", 0, f"{smoke_name} is not in the bundle (rebuild it: cmake --build --preset device)")
        else:
            self.gtest("smoke_tests", f"{s.r}/tests/smoke.json", *results["smoke_tests"])
        for t in tests:
            n = os.path.basename(t)
            self.gtest(f"test_{n}", f"{s.r}/tests/{n}.json", *results[f"test_{n}"])
        for cert in ("certify", "certify_plugin"):
            self.record_certificate(cert, cert == "certify_plugin", plugin, kernels_why, results.get(cert), note)
        self.record_python_door(py_door, results.get("certify_python"), note)

    def help_of_certify(self):
        try:
            return subprocess.run([self.s.mla, "certify", "--help"], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    def contexts_of(self, step):
        return sum(1 for ln in lines_of(read_text(f"{self.s.r}/{step}/contexts.log")) if ln)

    def ctx_note(self, step):
        if not self.a.rehearse:
            return ""
        n = self.contexts_of(step)
        return (f"; 1 process charged {self.s.sim_ctx} s for a CUDA context" if n == 1
                else f"; {n} processes charged {self.s.sim_ctx} s each for a CUDA context")

    def certificate(self, step, reader, *args):
        try:
            with open(f"{self.s.r}/{step}/certificate.json") as f:
                return reader(json.load(f), *args)
        except (OSError, ValueError) as e:
            return None, f"no readable certificate: {e}"

    def record_certificate(self, cert, plugin, plugin_path, kernels_why, result, note):
        c = self.c
        if not self.s.goldens:
            return c.record(cert, "SKIP", 0, "no golden catalog found (--goldens, MLA_GOLDENS_DIR, bundle goldens/, ./fixtures/goldens)")
        if plugin and not os.path.isfile(plugin_path):
            return c.record(cert, "SKIP", 0, f"no {os.path.basename(plugin_path)} at {plugin_path} (cuda_plugin.so is built only with CUDA)")
        if not plugin and kernels_why:
            return c.record(cert, "FAIL", 0, kernels_why)
        rc, secs = result
        if rc in TIMED_OUT:
            return c.record(cert, "TIMEOUT", secs, c.tail_of(cert, 200))
        if rc == NOT_STARTED:
            return c.record(cert, "SKIP", 0, "budget exhausted")
        allskip, detail = self.certificate(cert, c.readers.certificate_detail, plugin)
        detail = note + detail + self.ctx_note(cert)
        # Exit 4 with every kernel unavailable: NOT_JUDGED because nothing could run here, a SKIP.
        if rc in (0, 4) and allskip:
            c.record(cert, "SKIP", secs, detail)
        elif rc == 0:
            c.record(cert, "PASS", secs, detail)
        else:
            c.record(cert, "FAIL", secs, f"exit {rc}: {detail} {c.tail_of(cert, 200)}")

    def record_python_door(self, py_door, result, note):
        c, s = self.c, self.s
        if not py_door:
            if not s.goldens:
                return c.record("certify_python", "SKIP", 0, "no golden catalog found")
            if not os.path.isdir(os.path.join(s.door, "mla_door")):
                return c.record("certify_python", "SKIP", 0, f"no Python door package at {s.door}")
            return c.record("certify_python", "SKIP", 0, "this mla has no certify --python (the Python door)")
        rc, secs = result
        if rc in TIMED_OUT:
            return c.record("certify_python", "TIMEOUT", secs, c.tail_of("certify_python", 200))
        if rc == NOT_STARTED:
            return c.record("certify_python", "SKIP", 0, "budget exhausted")
        # SKIP when no library could run here (each kernel unavailable, or every case of it SKIPPED),
        # with each kernel's own reason.
        allskip, detail = self.certificate("certify_python", c.readers.python_door_detail)
        if allskip is None:
            return c.record("certify_python", "FAIL", secs, f"exit {rc}: {detail} {c.tail_of('certify_python', 200)}")
        detail = note + detail + self.ctx_note("certify_python")
        if rc in (0, 4) and allskip:
            c.record("certify_python", "SKIP", secs, detail)
        elif rc == 0:
            c.record("certify_python", "PASS", secs, detail)
        else:
            c.record("certify_python", "FAIL", secs, f"exit {rc}: {detail} {c.tail_of('certify_python', 200)}")

    # ---- 3. bench (alone on the GPU) -------------------------------------------------------------

    def bench(self):
        c, s = self.c, self.s
        self.points = os.environ.get("MLA_CHECK_POINTS", "") or BENCH_POINTS
        with open(f"{s.r}/bench/points.tsv", "w") as out, open(c.logfile("points"), "w") as err:
            try:
                subprocess.run([s.bench_exe, "--mla_list_points", f"--mla_points={self.points}"], stdout=out, stderr=err, timeout=60)
            except (OSError, subprocess.SubprocessError) as e:
                err.write(f"{e}\n")
        if not c.have_gpu:
            return c.record("bench", "SKIP", 0, f"no usable GPU: {c.no_gpu_why}")
        gpu_json = f"{s.r}/bench/gpu.json"
        py_args, py_note = self.python_bench_kernels()
        # --mla_backend=cuda: the registry's CUDA kernels only (the CPU ones would take minutes per
        # call on these production shapes); the Python door's kernels are added by name.
        # The other kinds' points ride along unless MLA_CHECK_POINTS chose the points.
        points = self.points if os.environ.get("MLA_CHECK_POINTS", "") else f"{self.points},{PHASE_BENCH_POINTS}"
        rc, secs = c.run_step("bench", [s.bench_exe, "--mla_backend=cuda", f"--mla_points={points}", "--mla_quick",
                                        f"--benchmark_out={gpu_json}"] + py_args,
                              env=dict(os.environ, MLA_DOOR_PATH=s.door))
        try:
            with open(gpu_json) as f:
                st, detail = c.readers.bench_detail(json.load(f), self.must_claim)
        except FileNotFoundError:
            st, detail = "FAIL", "no bench JSON written"
        except (OSError, ValueError, KeyError, TypeError) as e:
            st, detail = "FAIL", f"unreadable benchmark JSON: {e}"
        detail += f"; {py_note}" if py_note else ""
        if rc == NOT_STARTED:
            c.record("bench", "SKIP", 0, "budget exhausted")
        elif rc in TIMED_OUT:
            c.record("bench", "TIMEOUT", secs, f"killed after {secs}s; rows kept: {detail}")
        elif rc == 3:
            stopped = next((ln for ln in lines_of(read_text(c.logfile("bench"))) if "stopped timing at" in ln), "")
            c.record("bench", "FAIL", secs, f"a row left the CUDA context unusable: {stopped}; {detail}")
        elif rc != 0:
            c.record("bench", "FAIL", secs, f"exit {rc}: {detail} {c.tail_of('bench', 200)}")
        else:
            c.record("bench", st or "FAIL", secs, detail)

    def python_bench_kernels(self):
        """(mla-bench arguments, a note for the step's detail): FlashMLA's and FlashInfer's decode
        through the Python door, with the python that imports torch, each only when its adapter
        module and the library it wraps import there (one probe process: a torch import); the
        note names each one left out and why."""
        c, s = self.c, self.s
        py, torch, _, _ = c.python_info()
        if not os.path.isdir(os.path.join(s.door, "mla_door")):
            return [], f"FlashMLA/FlashInfer not benchmarked: no Python door package at {s.door}"
        if not torch or torch.startswith(("no torch", "not probed")):
            return [], f"FlashMLA/FlashInfer not benchmarked: {py} does not import torch ({torch})"
        probe = ("import importlib, sys\nsys.path.insert(0, sys.argv[1])\nimport torch\n"
                 "for spec, lib in zip(sys.argv[2::2], sys.argv[3::2]):\n"
                 "    for m in (spec.split(':')[0], lib):\n"
                 "        try:\n            importlib.import_module(m)\n"
                 "        except Exception as e:\n"
                 "            print(spec, f'{m} does not import: {type(e).__name__}: {e}'.replace(chr(10), ' ')); break\n"
                 "    else:\n        print(spec, 'ok')\n")
        out, rc = c.capture([py, "-c", probe, s.door] + [x for pair in PY_BENCH_KERNELS for x in pair], 60)
        said = dict(ln.split(" ", 1) for ln in lines_of(out) if " " in ln)
        args, absent = [], []
        for spec, _ in PY_BENCH_KERNELS:
            why = said.get(spec, f"the import probe exited {rc}")
            if why == "ok":
                args.append(f"--mla_python={spec}")
            else:
                absent.append(f"{spec.split('.')[-1].split(':')[0]}: {why}")
        if args:
            args += [f"--mla_python_exe={py}", f"--mla_external_points={PY_BENCH_POINTS}"]
        note = f"not benchmarked: {'; '.join(absent)}" if absent else ""
        return args, note

    @staticmethod
    def door_rows():
        """The bench's Python-door rows when both libraries import (what the plan must fit): each
        kernel and its overhead row at each of PY_BENCH_POINTS."""
        return 2 * len(PY_BENCH_KERNELS) * len(PY_BENCH_POINTS.split(","))

    def bench_inputs(self):
        """Rehearsal: the bench's host half, measured here."""
        c, s = self.c, self.s
        if not os.access(s.input_rates, os.X_OK):
            return c.record("bench_inputs", "FAIL", 0, f"{os.path.basename(s.input_rates)} is not in the bundle")
        out = f"{s.r}/bench/inputs.json"
        rc, secs = c.run_step("bench_inputs", [s.input_rates, f"--mla_points={self.points}",
                                               "--benchmark_filter=^(inputs/|gen/fill_bf16/.*/threads)", "--mla_gen_mib=64",
                                               f"--benchmark_out={out}", "--benchmark_out_format=json"], cap=self.a.cap["bench"])
        if rc in TIMED_OUT:
            c.record("bench_inputs", "TIMEOUT", secs, c.tail_of("bench_inputs", 200))
        elif rc != 0:
            c.record("bench_inputs", "FAIL", secs, f"exit {rc}: {c.tail_of('bench_inputs', 200)}")
        else:
            n = sum(1 for ln in lines_of(read_text(out)) if '"name": "inputs/' in ln)
            c.record("bench_inputs", "PASS", secs, f"inputs of {n} bench points built on the host")

    # ---- 4. torch side by side, 5. report --------------------------------------------------------

    def torch(self):
        c, s = self.c, self.s
        self.py, torch, self.mpl, ms = c.python_info()
        self.py_ms = ms
        with open(os.path.join(s.out, "device.txt"), "a") as f:
            f.write(f"\n## python\npython3: {self.py or 'not found'}; torch: {torch}; matplotlib: {self.mpl or '?'}; "
                    f"imports took {ms or '?'} ms\n")
        merge = []
        if os.path.isfile(f"{s.r}/bench/gpu.json"):
            merge = ["--merge-with", f"{s.r}/bench/gpu.json", "--merged-out", f"{s.r}/bench/combined.json"]
        rc, secs = c.run_step("torch", [self.py, f"{s.tools}/torch_side_by_side.py", "--points-tsv", f"{s.r}/bench/points.tsv",
                                        "--out", f"{s.r}/torch/torch.json"] + merge)
        if rc in TIMED_OUT:
            c.record("torch", "TIMEOUT", secs, c.tail_of("torch", 200))
        elif rc == NOT_STARTED:
            c.record("torch", "SKIP", 0, "budget exhausted")
        elif rc == 77:
            c.record("torch", "SKIP", secs, c.tail_of("torch", 300))
        elif rc != 0:
            c.record("torch", "FAIL", secs, f"exit {rc}: {c.tail_of('torch', 300)}")
        else:
            c.record("torch", "PASS", secs, c.tail_of("torch", 160))

    def report(self):
        c, s = self.c, self.s
        report_in = f"{s.r}/bench/combined.json"
        if not os.path.isfile(report_in):
            report_in = f"{s.r}/bench/gpu.json"
        if not os.path.isfile(report_in):
            return c.record("report", "SKIP", 0, "no benchmark JSON (bench step did not run)")
        if self.mpl in ("missing", ""):
            return c.record("report", "SKIP", 0, f"python3 ({self.py}) lacks matplotlib or numpy")
        cert = f"{s.r}/certify/certificate.json"
        rc, secs = c.run_step("report", [self.py, f"{s.tools}/bench_report.py", report_in]
                              + (["--certificate", cert] if os.path.isfile(cert) else []) + ["--out", f"{s.r}/report"])
        if rc == 0:
            c.record("report", "PASS", secs, "".join(f"{f} " for f in sorted(os.listdir(f"{s.r}/report"))))
        elif rc == NOT_STARTED:
            c.record("report", "SKIP", 0, "budget exhausted")
        elif rc in TIMED_OUT:
            c.record("report", "TIMEOUT", secs, c.tail_of("report", 200))
        else:
            c.record("report", "FAIL", secs, f"exit {rc}: {c.tail_of('report', 300)}")

    # ---- 6. compute-sanitizer, last, on the smallest problems -------------------------------------

    def sanitizers(self):
        """Last: a tool that is slow to start on this device costs its own step, never the
        certificate or the bench; each gets its cap, or an equal share of the time left when the
        earlier steps ended early (their caps are bounds, seldom used up). No --leak-check: cuBLAS
        keeps allocations to the end of the process that it would report."""
        c, s, a = self.c, self.s, self.a
        flt = os.environ.get("MLA_CHECK_SANITIZE_FILTER", "") or SANITIZE_FILTER
        tools = ["memcheck", "racecheck", "synccheck"]
        broken = ""
        for i, tool in enumerate(tools):
            step = f"sanitize_{tool}"
            cap = max(a.cap[step], (c.left() - a.reserve) // (len(tools) - i))
            why = (f"no usable GPU: {c.no_gpu_why}" if not c.have_gpu else
                   "compute-sanitizer not found on PATH or under /usr/local/cuda*/bin" if not c.cs else
                   f"{os.path.basename(s.smoke)} not in the bundle" if not os.access(s.smoke, os.X_OK) else broken)
            if why:
                c.record(step, "SKIP", 0, why)
                continue
            rc, secs = c.run_step(step, [c.cs, "--tool", tool, "--error-exitcode", "86", s.smoke, f"--gtest_filter={flt}",
                                         f"--gtest_output=json:{s.r}/sanitize/{tool}.json"], cap=cap)
            lines = lines_of(read_text(c.logfile(step)))
            summary = next((ln for ln in lines if "ERROR SUMMARY" in ln), "")
            refused = [ln for ln in lines if re.search(r"Device not supported|Unable to find injection library|"
                                                       r"Target application returned an error 999|Error: No attachable process", ln)]
            if rc == NOT_STARTED:
                c.record(step, "SKIP", 0, "budget exhausted")
            elif rc in TIMED_OUT:
                c.record(step, "TIMEOUT", secs, c.tail_of(step, 200))
            elif refused:
                first = next(ln for ln in lines if re.search(r"Device not supported|injection|999|attachable", ln))
                broken = f"compute-sanitizer cannot run here: {first}"
                c.record(step, "SKIP", secs, broken)
            elif rc == 86:
                found = [ln for ln in lines if re.match(r"^=+ (Invalid|Race|Barrier|Uninitialized|Error|ERROR)", ln)
                         and "ERROR SUMMARY" not in ln][:3]
                c.record(step, "FAIL", secs, "".join(f"{ln} " for ln in found) + summary)
            elif rc != 0:
                c.record(step, "FAIL", secs, f"exit {rc}: {c.tail_of(step, 300)}")
            else:
                c.record(step, "PASS", secs, summary)
            c.checkpoint(step)

    # ---- the time plan, with what a rehearsal measured ----------------------------------------------

    def plan(self):
        c, s, a = self.c, self.s, self.a
        took, status = c.readers.read_steps(lines_of(read_text(s.steps)))
        try:
            with open(f"{s.r}/bench/inputs.json") as f:
                rows = json.load(f)["benchmarks"]
        except (OSError, ValueError, KeyError, TypeError):
            rows = []
        charged = {st: self.contexts_of(st) for st in ("certify", "certify_plugin", "certify_python")}
        lines, fits = c.readers.time_plan(took, status, rows, a.budget, {n: a.cap[n] for n, _ in PLAN},
                                          float(getattr(self, "py_ms", "") or 0), float(s.sim_ctx), charged,
                                          CERTIFY_MARGIN, COMMAND_LIMIT, COMMAND_MARGIN,
                                          door_rows=self.door_rows(), door_kernels=len(PY_BENCH_KERNELS),
                                          phase_rows=len(PHASE_BENCH_POINTS.split(",")))
        text = "\n".join(lines) + "\n"
        with open(c.plan_md, "w") as f:
            f.write(text)
        sys.stderr.write(text)
        return fits


# ---- the probe's body, a process of its own ----------------------------------------------------------

def _run(cmd, timeout):
    """stdout+stderr of cmd and its exit status, 124 on its timeout (its process group ended)."""
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    except OSError as e:
        return f"{cmd[0]}: {e.strerror}\n", 127
    try:
        out, _ = p.communicate(timeout=timeout)
        return out.decode(errors="replace"), p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, _ = p.communicate()
        return out.decode(errors="replace"), 124


def probe_body(p):
    """device.txt: three probes at once, each under its own timeout, so the step stays within its
    cap whatever hangs; then the host, the libraries each binary resolves and the tools."""
    got = {}

    def smi():
        import shutil
        if not shutil.which("nvidia-smi"):
            got["smi"] = "nvidia-smi: not found\n"
            return
        q, _ = _run(["nvidia-smi", "--query-gpu=name,driver_version,pci.bus_id,memory.total,clocks.sm,clocks.max.sm,"
                     "clocks.mem,clocks.max.mem,power.draw,power.limit,temperature.gpu,persistence_mode,compute_mode,"
                     "mig.mode.current", "--format=csv"], 8)
        d, _ = _run(["nvidia-smi", "-q", "-d", "CLOCK,PERFORMANCE"], 6)
        parts = d.split("\n")  # its first 80 lines
        got["smi"] = q + "\n" + ("\n".join(parts[:80]) + "\n" if len(parts) > 81 else d)

    def bench():
        out, rc = _run([p["bench_exe"], "--mla_probe"], 15)
        got["bench"] = out + f"exit: {rc}\n"

    def cs():
        v = lines_of(_run([p["cs"], "--version"], 10)[0])[-1:] if p["cs"] else []
        got["cs"] = f"compute-sanitizer: {p['cs'] or 'not found'} {''.join(v)}\n"

    threads = [threading.Thread(target=f) for f in (smi, bench, cs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os_name = ""
    for line in lines_of(read_text("/etc/os-release")):
        if line.startswith("PRETTY_NAME="):
            os_name = line.split("=", 1)[1].strip('"')
    cpu = next((ln.split(":", 1)[1].lstrip() for ln in lines_of(read_text("/proc/cpuinfo")) if ln.startswith("model name")), "")
    mem = next((int(ln.split()[1]) for ln in lines_of(read_text("/proc/meminfo")) if ln.startswith("MemTotal")), 0)
    commit = next((ln[len("source commit: "):] for ln in lines_of(read_text(os.path.join(p["bundle"], "MANIFEST.txt")))
                   if ln.startswith("source commit: ")), "")
    stale = os.environ.get("MLA_CHECK_STALE_BUNDLE", "")
    out = [f"# Device check: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}{' (rehearsal)' if p['rehearse'] else ''}",
           f"host: {os.uname().nodename}; kernel {os.uname().release}; {os_name}",
           f"cpu: {cpu}; {len(os.sched_getaffinity(0))} cores; {mem / 1048576:.0f} GiB",
           f"bundle: {p['bundle']} ({p['layout']}); {commit}" + (f"; STALE (--allow-stale): {stale}" if stale else ""),
           f"libraries: {p['libnote']}",
           f"LD_LIBRARY_PATH (inherited, not set by the check): {os.environ.get('LD_LIBRARY_PATH') or 'unset'}",
           "", "## nvidia-smi"]
    text = "\n".join(out) + "\n" + got["smi"] + "\n## mla-bench --mla_probe (the CUDA runtime's and NVML's view from the bundled binary)\n"
    text += got["bench"] + "\n"
    for b in (p["bench_exe"], p["smoke"]):
        ldd, _ = _run(["ldd", b], 30)
        text += f"## ldd {os.path.basename(b)}\n" + "".join(ln for ln in ldd.splitlines(True) if not re.match(r"^\s*linux-vdso", ln)) + "\n"
    text += "## tools\n" + got["cs"]
    sys.stdout.write(text)


if __name__ == "__main__" and sys.argv[1:] == ["--probe-body"]:
    sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
    probe_body(json.loads(os.environ["MLA_CHECK_PROBE"]))
