"""CTest: the adapters certified end to end through `mla certify --python`, on the CPU.

Each green example (an adapter over its library's CPU stand-in) must PASS every selected case it
claims, with FlashMLA's unclaimed shapes NOT_CLAIMED for its own reason; each bug variant must be
red (FAIL or ERROR) on a case where its bug shows, for that reason (out or lse). A narrow
selection per run keeps it to seconds; the cases were chosen so that every bug changes them.
The green examples are also certified as a user would run them: the whole catalog (up to 16K
cached tokens) with the stored cases' fresh twins and the fresh family drawn inside each kernel's
domain, and must be PASS with every row PASS or NOT_CLAIMED.

    certify_adapters.py MLA GOLDENS WORK_DIR PYTHON [narrow|everything]
(narrow: the case selections; everything: the default runs; neither: both; CTest runs them as two
tests so they share the cores with the rest.) Exit 77 (CTest: skipped) when this mla has no
`certify --python`.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")

FLASHMLA_GREEN = (r"^attn_core/(all_empty|h16_varlen_ps64|h3_sq4_short)$|^attn_fp8/fp8_ue8m0_h128$"
                  r"|^attn_sparse/sparse_fp8_tiny_flashmla_ue8m0$")
FLASHINFER_GREEN = (r"^attn_core/(all_empty|h16_varlen_ps16|h128_sq2_v3_scale_ps16|h3_sq4_short)$"
                    r"|^attn_sparse/sparse_bf16_topk16$")
# A default run: every family, fresh included (None: no --case).
EVERYTHING = None

# (file:attr, case selection, what must happen)
RUNS = [
    ("flashmla_cpu.py:KERNEL", FLASHMLA_GREEN,
     {"pass": 3, "not_claimed": {"attn_core/h3_sq4_short": "page", "attn_fp8/fp8_ue8m0_h128": "bf16 cache"}}),
    ("flashmla_cpu.py:BUG_DROPPED_LAST_TOKEN", r"^attn_core/h16_varlen_ps64$", {"red": "out"}),
    ("flashmla_cpu.py:BUG_SLOTS_AS_POSITIONS", r"^attn_sparse/sparse_fp8_tiny_flashmla_ue8m0$", {"red": "out"}),
    ("flashmla_cpu.py:BUG_LSE_BASE2", r"^attn_core/h16_varlen_ps64$", {"red": "lse"}),
    ("flashinfer_cpu.py:KERNEL", FLASHINFER_GREEN,
     {"pass": 3, "not_claimed": {"attn_sparse/sparse_bf16_topk16": "",
                                 "attn_core/h3_sq4_short": "attends nothing"}}),
    ("flashinfer_cpu.py:BUG_NATURAL_LSE", r"^attn_core/h16_varlen_ps16$", {"red": "lse"}),
    ("flashinfer_cpu.py:BUG_SHORT_CSR", r"^attn_core/h16_varlen_ps16$", {"red": ""}),
    ("flashinfer_cpu.py:BUG_CAUSAL_TOP_LEFT", r"^attn_core/h128_sq2_v3_scale_ps16$", {"red": "out"}),
    ("flashmla_cpu.py:KERNEL", EVERYTHING, {"pass": 5, "not_claimed": {}, "fresh": 3, "twins": 3}),
    ("flashinfer_cpu.py:KERNEL", EVERYTHING, {"pass": 5, "not_claimed": {}, "fresh": 3, "twins": 3}),
]


def main() -> int:
    mla, goldens, work, python = sys.argv[1:5]
    part = sys.argv[5] if len(sys.argv) > 5 else ""
    if part not in ("", "narrow", "everything"):
        print(f"unknown part {part!r}: narrow or everything")
        return 2
    helptext = subprocess.run([mla, "certify", "--help"], capture_output=True, text=True).stdout
    if "--python" not in helptext:
        print("SKIPPED: this mla has no certify --python (the Python door)")
        return 77
    problems = []
    for spec, cases, want in RUNS:
        if part and (part == "everything") != (cases is EVERYTHING):
            continue
        out = os.path.join(work, spec.replace(".py:", "_").lower())
        if cases is EVERYTHING:
            out += "_everything"
        cmd = [mla, "certify", "--goldens", goldens, "--out", out, "--python", os.path.join(EXAMPLES, spec),
               "--python-exe", python, "--no-probe-unclaimed", "--timeout", "120"]
        cmd += ["--max-tokens", "16384"] if cases is EVERYTHING else ["--case", cases]
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True)
        took = time.monotonic() - t0
        try:
            cert = json.load(open(os.path.join(out, "certificate.json")))
            rows = {f"{c['family']}/{c['case']}": c for k in cert["kernels"] for c in k["cases"]}
        except Exception as e:
            problems.append(f"{spec}: no readable certificate ({e}); exit {p.returncode}: {p.stderr[-600:]}")
            continue
        verdicts = {n: r["verdict"] for n, r in rows.items()}
        print(f"{spec}: exit {p.returncode}, {took:.1f} s: {verdicts}")
        if "red" in want:
            red = {n: r for n, r in rows.items() if r["verdict"] in ("FAIL", "ERROR")}
            if p.returncode != 1 or not red:
                problems.append(f"{spec}: must be red, got exit {p.returncode}, {verdicts}")
            elif want["red"] and not any(want["red"] in " ".join(r["reasons"]) for r in red.values()):
                problems.append(f"{spec}: red, but no reason names {want['red']!r}: "
                                f"{[r['reasons'] for r in red.values()]}")
            continue
        if p.returncode != 0:
            problems.append(f"{spec}: must PASS, exit {p.returncode}: {verdicts} {p.stderr[-600:]}")
        passed = [n for n, v in verdicts.items() if v == "PASS"]
        if len(passed) < want["pass"]:
            problems.append(f"{spec}: {len(passed)} PASS, want {want['pass']}: {verdicts}")
        for kind, count in (("fresh", sum(1 for n in passed if n.startswith("fresh/"))),
                            ("twins", sum(1 for n in passed if n.endswith("~twin")))):
            if count < want.get(kind, 0):
                problems.append(f"{spec}: {count} {kind} rows PASS, want {want[kind]}: {verdicts}")
        for n, word in want["not_claimed"].items():
            r = rows.get(n)
            if r is None or r["verdict"] != "NOT_CLAIMED" or word not in " ".join(r["reasons"]):
                problems.append(f"{spec}: {n} must be NOT_CLAIMED naming {word!r}: "
                                f"{None if r is None else (r['verdict'], r['reasons'])}")
        for n, v in verdicts.items():
            if v not in ("PASS", "NOT_CLAIMED") and not (v == "SKIPPED" and "--max-tokens" in " ".join(rows[n]["reasons"])):
                problems.append(f"{spec}: {n} is {v}: {rows[n]['reasons']}")
    for pr in problems:
        print("PROBLEM:", pr)
    print("certify_adapters: " + ("ok" if not problems else f"{len(problems)} problems"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
