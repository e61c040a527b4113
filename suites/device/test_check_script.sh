#!/usr/bin/env bash
# CTest (cpu;L1): check.sh against a build tree. Without a GPU every GPU step must be recorded as
# SKIP with the reason, nothing may fail, the exit status is 2 and OUTDIR must hold what the
# device run can return (<= 8 files, each < 16 MiB, summary.md, device.txt, results.tar.gz). With
# a GPU it is the device check itself, and its own exit status is the verdict.
#   test_check_script.sh CHECK_SH BUILD_DIR OUT_DIR
set -uo pipefail
check=$1 build=$2 out=$3
fail() { echo "test_check_script: $*" >&2; exit 1; }
rm -rf "$out"
bash "$check" "$out" --bundle "$build"
rc=$?
echo "check.sh exit status: $rc"
[[ -f $out/summary.md && -f $out/device.txt && -f $out/results.tar.gz ]] || fail "summary.md, device.txt or results.tar.gz missing: $(ls "$out")"
n=$(find "$out" -type f | wc -l)
((n <= 8)) || fail "$n files in $out; the device run returns at most 8"
while IFS= read -r f; do
  (($(stat -c %s "$f") < 16777216)) || fail "$f is over 16 MiB"
  [[ $(basename "$f") =~ ^[A-Za-z0-9._-]+$ ]] || fail "file name $(basename "$f") has characters the device run refuses"
done < <(find "$out" -type f)
listing=$(tar -tzf "$out/results.tar.gz") || fail "results.tar.gz is not a readable archive"
grep -q '^results/summary.md$' <<<"$listing" || fail "results.tar.gz lacks results/summary.md"
grep -q '^results/logs/' <<<"$listing" || fail "results.tar.gz lacks results/logs/"

probe=$("$build/suites/bench/mla-bench" --mla_probe >/dev/null 2>&1; echo $?)
if [[ $probe == 77 ]]; then
  ((rc == 2)) || fail "without a GPU check.sh must exit 2 (skipped, nothing failed), got $rc"
  ! grep -E '\| (FAIL|TIMEOUT) \|' "$out/summary.md" || fail "a step failed without a GPU"
  for step in bench sanitize_memcheck sanitize_racecheck sanitize_synccheck; do
    grep -qE "^\| $step \| SKIP \| [0-9]+ \| [0-9]* \| no usable GPU: CUDA unavailable" "$out/summary.md" ||
      fail "step $step is not a SKIP naming the reason"
  done
  grep -qE '^\| torch \| SKIP \| [0-9]+ \| .*skipped' "$out/summary.md" || fail "torch step is not a SKIP with the reason"
  grep -qE '^\| test_mla_cuda_attention_tests \| SKIP \|' "$out/summary.md" || fail "GPU tests did not skip"
  grep -qE '^\| smoke_tests \| SKIP \| [0-9]+ \| [0-9]+ \| 14 tests, 0 failed, 14 skipped' "$out/summary.md" ||
    fail "the smoke step did not run its 14 tests (skipped without a GPU)"
  grep -q "LD_LIBRARY_PATH (inherited, not set by the check)" "$out/device.txt" || fail "device.txt does not report LD_LIBRARY_PATH"
  grep -qE '^\| certify \| SKIP \|.*unavailable' "$out/summary.md" || fail "certify did not record the kernels as unavailable"
  # FlashMLA / FlashInfer through the Python door: not importable here, so a SKIP that says why
  grep -qE '^\| certify_python \| SKIP \| [0-9]+ \| [0-9]* \| .*(does not import|no certify --python|unavailable)' "$out/summary.md" ||
    fail "certify_python is not a SKIP naming the reason"
  grep -q "Device check: INCOMPLETE" "$out/summary.md" || fail "verdict line missing"
else
  echo "a GPU is present: check.sh ran the device check (exit $rc)"
  ((rc != 3)) || fail "usage error"
  exit "$rc"
fi
echo "test_check_script: ok"
