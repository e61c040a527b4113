#!/usr/bin/python3
"""Chooses the committed corpus within a size budget, keeping as many covered edges as it can:

    FUZZER -merge=1 -use_counters=0 -merge_control_file=CTL EMPTY_DIR CANDIDATES_DIR
    /usr/bin/python3 suites/fuzz/prune_corpus.py CTL BUDGET_BYTES OUT_DIR

libFuzzer's merge keeps every input that adds a feature, however large: golden files are tens
of KiB each and a minimal set of them runs past the 2 MiB the repository allows. This reads the
edges (COV lines) each candidate covers from the merge's control file and picks greedily the
input with the most new edges per byte until the budget is spent or nothing new is left, copies
the choice into OUT_DIR and says how many edges the budget cost.
"""
from __future__ import annotations

import os
import shutil
import sys


def parse(ctl: str) -> dict[str, set[str]]:
    with open(ctl) as fh:
        lines = fh.read().splitlines()
    n = int(lines[0])
    files = lines[2:2 + n]
    cov: dict[str, set[str]] = {}
    for line in lines[2 + n:]:
        parts = line.split()
        if parts and parts[0] == "COV":
            cov[files[int(parts[1])]] = set(parts[2:])
    return cov


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    ctl, budget, out = argv[0], int(argv[1]), argv[2]
    cov = parse(ctl)
    every = set().union(*cov.values()) if cov else set()
    size = {f: os.path.getsize(f) for f in cov}
    chosen, covered, used = [], set(), 0
    while True:
        best, best_score = None, 0.0
        for f, edges in cov.items():
            new = len(edges - covered)
            if new and used + size[f] <= budget and new / max(size[f], 1) > best_score:
                best, best_score = f, new / max(size[f], 1)
        if best is None:
            break
        chosen.append(best)
        covered |= cov[best]
        used += size[best]
    os.makedirs(out, exist_ok=True)
    for f in chosen:
        shutil.copyfile(f, os.path.join(out, os.path.basename(f)))
    print(f"{len(chosen)} of {len(cov)} inputs, {used} bytes: {len(covered)} of {len(every)} edges "
          f"({len(every) - len(covered)} left out by the budget)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
