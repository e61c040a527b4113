#!/usr/bin/env bash
# CTest (cpu;L0): preflight.sh on a fake tree, bundle archive and rehearsal. A current bundle
# with a fitting rehearsal of that very archive is ready (exit 0); everything else is refused
# with exit 3 and words that say what was wrong: a bundle built from another tree (naming the
# file that differs), a time plan whose caps exceed the budget (the real check.sh --plan, from
# the bundle), a tree + archive over what the device run may carry, no rehearsal, a rehearsal of
# another archive, a rehearsal in which a step failed.
#   test_preflight.sh REPO_ROOT
set -uo pipefail
repo_src=$1
fail() { echo "test_preflight: $*" >&2; exit 1; }
work=$(mktemp -d /tmp/mla-preflight-test.XXXXXX)  # outside any git checkout
trap 'rm -rf "$work"' EXIT
tree=$work/tree pack=$work/pack
mkdir -p "$tree/suites/device" "$tree/fixtures" "$pack/bundle"
cp "$repo_src"/suites/device/{preflight.sh,run_on_device.sh,source_list.sh} "$tree/suites/device/"
cp "$repo_src"/suites/device/check{.sh,.py,_env.py,_steps.py,_phases.py} "$pack/bundle/"  # its --plan needs nothing else
echo "schema" >"$tree/fixtures/SCHEMA.md"
echo "kernel source" >"$tree/kernel.cu"
echo "source commit: 0123abc" >"$pack/bundle/MANIFEST.txt"
bash "$tree/suites/device/source_list.sh" "$tree" "$pack/bundle/source.sha256" || fail "source_list.sh failed"
mkdir -p "$tree/build/device"
tar -C "$pack" -cJf "$tree/build/device/bundle.tar.xz" bundle
sha=$(sha256sum "$tree/build/device/bundle.tar.xz" | cut -c1-64)
rehearsal() {  # SHA PLAN-LINE [STEP-ROW]: a summary.md as check.sh --rehearse writes it
  mkdir -p "$tree/reports/out/device"
  { echo "# Device check: INCOMPLETE"; echo; echo "Archive: build/device/bundle.tar.xz sha256 $1"; echo
    echo "| step | status | seconds | cap | detail |"; echo "|---|---|---|---|---|"
    echo "| certify | PASS | 40 | 110 | stand-ins |"; [[ -n ${3:-} ]] && echo "$3"
    echo "Certify margin: 64 % of the cap left by the slowest, certify."; echo "$2"; } >"$tree/reports/out/device/summary.md"
}
run() {  # NAME [env...]: preflight.sh from the tree; sets rc and log
  local name=$1; shift
  log=$work/$name.log
  (cd "$tree" && env "$@" bash suites/device/preflight.sh) >"$log" 2>&1
  rc=$?
}
refused() {  # NAME WORDS
  ((rc == 3)) || { cat "$log"; fail "$1: expected a refusal (exit 3), got $rc"; }
  grep -q "REFUSED: .*$2" "$log" || { cat "$log"; fail "$1: the refusal does not say /$2/"; }
  grep -q "then: ./mla.sh device" "$log" || fail "$1: the refusal does not say what to run"
}

rehearsal "$sha" "Plan: fits the 420 s budget."
run ready
((rc == 0)) || { cat "$log"; fail "a current bundle with its rehearsal was refused (exit $rc)"; }
grep -q "the bundle matches this tree" "$log" || fail "the tree check did not run: $(cat "$log")"
grep -q "caps sum to 420 s of a 420 s budget" "$log" || fail "the bundle's time plan was not checked: $(cat "$log")"
grep -qE "the device run carries [0-9.]+ MiB \([0-9]+ bytes\): the tree .* of 64.0 MiB" "$log" || fail "no size line: $(cat "$log")"
grep -q "^Certify margin: 64 %" "$log" || fail "the rehearsal's certify margin is not shown"
grep -q "ready: carry build/device/bundle.tar.xz, run: .* with a timeout of 480 s$" "$log" || fail "no ready line with the timeout: $(cat "$log")"

# The bench's planned cap, as the plan of the ready run printed it: raising it to 300 s puts the
# caps over the budget by the difference.
bench_cap=$(awk '$1 == "bench" && $3 == "s" {print $2; exit}' "$log")
[[ $bench_cap =~ ^[0-9]+$ ]] || { cat "$log"; fail "the plan does not list the bench step's cap"; }
run plan MLA_CHECK_CAPS=bench=300
refused "caps over the budget" "time plan does not fit"
grep -q "the caps sum to $((420 - bench_cap + 300)) s, over the 420 s budget" "$log" ||
  { cat "$log"; fail "check.sh --plan did not say by how much"; }

run size MLA_DEVICE_CARRY_LIMIT_BYTES=1000
refused "over the carry limit" "over the 1000 a device run may carry"

rehearsal "$(printf '0%.0s' {1..64})" "Plan: fits the 420 s budget."
run other
refused "a rehearsal of another archive" "rehearsal of another archive"

rehearsal "$sha" "Plan: DOES NOT FIT the 420 s budget."
run nofit
refused "a rehearsal whose plan does not fit" "time plan does not fit: Plan: DOES NOT FIT"

rehearsal "$sha" "Plan: fits the 420 s budget." "| certify_plugin | TIMEOUT | 110 | 110 | killed |"
run failed
refused "a rehearsal with a failed step" "a step failed in the rehearsal: | certify_plugin | TIMEOUT"

rm -r "$tree/reports/out/device"
run none
refused "no rehearsal" "no rehearsal at reports/out/device/summary.md"

rehearsal "$sha" "Plan: fits the 420 s budget."
echo "changed after the bundle was built" >>"$tree/kernel.cu"
run stale
refused "a stale bundle" "does not belong to this tree"
grep -q "built from commit 0123abc, and 1 of its .* source files differ here: kernel.cu" "$log" ||
  { cat "$log"; fail "the stale refusal does not name the commit and the file"; }

rm "$tree/build/device/bundle.tar.xz"
run missing
refused "a missing archive" "build/device/bundle.tar.xz not found"
echo "test_preflight: ok"
