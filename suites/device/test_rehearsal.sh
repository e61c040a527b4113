#!/usr/bin/env bash
# CTest (cpu;L1): the device check's rehearsal on this machine (check.sh --rehearse against the
# build tree): every step that runs without a GPU, the certify phase with its CPU stand-ins and a
# simulated CUDA context per process that would create one, the bench's inputs built for every
# bench point as the bench would build them, and the time plan computed from what was measured
# here. It must pass (nothing failed, the GPU steps skipped with the reason), the plan must fit
# the budget, each certify step must leave its margin, and the built-in kernels must have been
# certified in one process (one context) while the plug-in and the Python kernels had children.
#   test_rehearsal.sh CHECK_SH BUILD_DIR OUT_DIR
#   test_rehearsal.sh --summary OUT_DIR   the same requirements on a rehearsal that already ran and
#                                         exited 0: `./mla.sh device` rehearses from the bundle's
#                                         archive and checks its summary here, so CI need not
#                                         rehearse a second time against the build tree (.ci/run)
set -uo pipefail
fail() { echo "test_rehearsal: $*" >&2; exit 1; }
if [[ ${1:-} == --summary ]]; then
  out=$2 rc=0
  ok=$out
  s=$out/summary.md
  [[ -f $s ]] || fail "no summary.md in $out"
else
  check=$1 build=$2 out=$3
  rm -rf "$out"
  start=$(date +%s)
  bash "$check" "$out" --bundle "$build" --rehearse
  rc=$?
  ok="$(($(date +%s) - start))s"
  s=$out/summary.md
  [[ -f $s ]] || fail "no summary.md"
  cat "$s"
fi
((rc == 0)) || fail "the rehearsal exited $rc (a step failed or the plan does not fit)"
grep -qE '^\| bench_inputs \| PASS \| [0-9]+ \| [0-9]* \| inputs of 11 bench points built on the host' "$s" ||
  fail "the bench inputs were not built for the 11 bench points"
grep -q '^## Time plan' "$s" || fail "no time plan in the summary"
grep -q '^Caps sum to 420 s of the 420 s budget' "$s" || fail "the caps do not sum to the 7-minute budget"
grep -q '^Plan: fits the 420 s budget.' "$s" || fail "the plan does not fit"
grep -qE '^Bench step: inputs [0-9.]+ s measured here' "$s" || fail "the bench step's measured inputs are missing"
! grep -qE '\| (FAIL|TIMEOUT) \|' "$s" || fail "a step failed in the rehearsal"
grep -qE '^\| certify \| PASS \| [0-9]+ \| [0-9]+ \| rehearsed with stand-ins: cpu_mla_fp64 \(in_process\): [0-9]+ PASS; cpu_naive_mha_fp32 \(in_process\): [0-9]+ PASS; cpu_prefill_naive_fp32 \(in_process\): [0-9]+ PASS; cpu_merge_f32 \(in_process\): [0-9]+ PASS; 1 process charged' "$s" ||
  fail "the built-in kernels (a host kernel of its own kind for each CUDA one: decode, prefill, merge) were not certified in one process (one simulated context)"
grep -qE '^\| certify_plugin \| PASS \| .*good_append \(child_per_case\): .*; ([2-9]|[1-9][0-9]+) processes charged' "$s" ||
  fail "the plug-in step did not run its cases in charged child processes"
grep -qE '^\| certify_python \| PASS \| .*flashmla_cpu_standin .*flashinfer_cpu_standin .*; ([2-9]|[1-9][0-9]+) processes charged' "$s" ||
  fail "the Python door step did not run its stand-ins in charged child processes"
grep -qE '^\| certify \| [0-9]+ \| [0-9]+ \(slowest step of [0-9]+ in parallel\) \| [0-9]+ % \|' "$s" || fail "no planned/rehearsed row for the certify phase"
margin=$(sed -n 's/^Certify margin: \(-\{0,1\}[0-9]*\) % of the cap left.*/\1/p' "$s")
[[ -n $margin ]] && ((margin >= 25)) || fail "the certify steps do not leave 25 % of their cap (margin: ${margin:-none})"
echo "test_rehearsal: ok ($ok)"
