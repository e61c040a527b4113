#!/usr/bin/env python3
"""Regression gate: a run against a stored baseline of the same machine model (see mla_benchtools/gate.py).

    /usr/bin/python3 reports/tools/bench_gate.py baseline.json run.json [--threshold 0.10] [--alpha 0.05]

Exit 0: no significant slowdown; 1: a case is SLOWER; 2: the files cannot be compared.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mla_benchtools.gate import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
