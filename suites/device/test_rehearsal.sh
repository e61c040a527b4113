#!/usr/bin/env bash
# CTest (cpu;L1): the device check's rehearsal on this machine (check.sh --rehearse against the
# build tree): every step that runs without a GPU, the bench's inputs built for every bench point
# as the bench would build them, and the time plan computed from what was measured here. It must
# pass (nothing failed, the GPU steps skipped with the reason) and the plan must fit the budget.
#   test_rehearsal.sh CHECK_SH BUILD_DIR OUT_DIR
set -uo pipefail
check=$1 build=$2 out=$3
fail() { echo "test_rehearsal: $*" >&2; exit 1; }
rm -rf "$out"
start=$(date +%s)
bash "$check" "$out" --bundle "$build" --rehearse
rc=$?
took=$(($(date +%s) - start))
s=$out/summary.md
[[ -f $s ]] || fail "no summary.md"
cat "$s"
((rc == 0)) || fail "the rehearsal exited $rc (a step failed or the plan does not fit)"
grep -qE '^\| bench_inputs \| PASS \| [0-9]+ \| [0-9]* \| inputs of 11 bench points built on the host' "$s" ||
  fail "the bench inputs were not built for the 11 bench points"
grep -q '^## Time plan' "$s" || fail "no time plan in the summary"
grep -q '^Caps sum to 420 s of the 420 s budget' "$s" || fail "the caps do not sum to the 7-minute budget"
grep -q '^Plan: fits the 420 s budget.' "$s" || fail "the plan does not fit"
grep -qE '^Bench step: inputs [0-9.]+ s measured here' "$s" || fail "the bench step's measured inputs are missing"
! grep -qE '\| (FAIL|TIMEOUT) \|' "$s" || fail "a step failed in the rehearsal"
echo "test_rehearsal: ok (${took}s)"
