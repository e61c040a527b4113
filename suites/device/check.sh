#!/usr/bin/env bash
# The device check: everything this suite can only verify on a GPU, in one command of at most
# seven minutes, from the bundle that make_bundle.sh writes. check.py beside this script is the
# check (its header says every step, its cap and why); this wrapper stays the command that
# run_on_device.sh, preflight.sh, the tests and the README run.
#
#   check.sh OUTDIR [--bundle DIR] [--goldens DIR] [--budget SECONDS] [--rehearse]
#   check.sh OUTDIR --plan
#
# Any python3 runs it: the check uses the standard library only, so it runs where numpy and torch
# do not import (the torch and report steps find their own python).
# Exit status: 0 every step passed; 1 a step failed or timed out (rehearsal: or the plan does not
# fit); 2 nothing failed but some step was skipped (no GPU here, say); 3 bad usage.
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
py=$(command -v python3 || echo /usr/bin/python3)
# The caller's PATH travels apart: a python3 that is a version manager's shim puts its own bin/
# first, and the check's searches (python3's site-packages for cuBLAS, torch, the tools) must see
# the PATH the check was started with.
MLA_CHECK_SELF=$0 MLA_CHECK_PATH=$PATH exec "$py" "$here/check.py" "$@"
