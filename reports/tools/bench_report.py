#!/usr/bin/env python3
"""Markdown report + roofline and bandwidth plots from mla-bench JSON (see mla_benchtools/report.py).

    /usr/bin/python3 reports/tools/bench_report.py run.json [--certificate certificate.json] --out DIR
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mla_benchtools.report import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
