#!/usr/bin/env bash
# Bounded fuzzing of the golden loader, for CI and for people (suites/fuzz/README.md):
#
#   suites/fuzz/run_ci.sh [SECONDS]     default 90: SECONDS on golden file bytes, SECONDS/2 on
#                                       golden contents (structure-aware), SECONDS/6 on manifests
#
# 1. builds the three fuzzers (preset `fuzz`: clang, libFuzzer, ASan + UBSan on all host code);
# 2. replays every committed input (corpus/) and every past finding (regressions/), each named on
#    the command line, in as many processes as fuzzing gets: any report fails at once, these
#    inputs are fixed;
# 3. fuzzes for the time given, starting from corpus/, in fork mode so that a crash inside
#    Debian's uninstrumented libhdf5 (README "Findings": it has known weaknesses on corrupt
#    files) does not end the run;
# 4. triages every artifact (triage.py): exit 1 when any crash, leak, UB report, timeout,
#    allocation over the limit or escaping non-mla exception is attributed to our code.
#
# Environment: MLA_FUZZ_BUILD_DIR (default build/fuzz), MLA_FUZZ_JOBS (parallel fuzzing
# processes, default 2 or fewer cores), MLA_FUZZ_WORK (keep the grown corpus and the artifacts
# there instead of a temporary folder), MLA_FUZZ_TOOL (the `mla` a golden that crashes libhdf5
# is replayed through, default build/ci/tools/mla/mla, which `./mla.sh test` builds; without
# it such an artifact counts as ours), MLA_FUZZ_KEEP (where the artifacts of a failing triage are
# copied, default reports/out/fuzz-findings).
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/../.."

secs=${1:-90}
build=${MLA_FUZZ_BUILD_DIR:-build/fuzz}
jobs=${MLA_FUZZ_JOBS:-$(( $(nproc) < 2 ? 1 : 2 ))}
here=suites/fuzz
mla_tool=${MLA_FUZZ_TOOL:-build/ci/tools/mla/mla}
keep=${MLA_FUZZ_KEEP:-reports/out/fuzz-findings}
log() { echo "[fuzz] $*" >&2; }

cmake --preset fuzz -B "$build" >&2
cmake --build "$build" -j "$jobs" --target fuzz_golden_loader fuzz_golden_schema fuzz_catalog_manifest >&2

if [ -n "${MLA_FUZZ_WORK:-}" ]; then
  work=$MLA_FUZZ_WORK
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi

# The fuzzers' scratch files live in the work folder, so a crashed process leaves none behind.
export MLA_FUZZ_SCRATCH=$work/scratch
# Leaks inside libhdf5 only are suppressed (suites/sanitize/lsan.supp says which and why).
# fast_unwind_on_fatal=0: a crash inside libhdf5 (no frame pointers) still gets a whole stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:check_initialization_order=1:strict_string_checks=1:fast_unwind_on_fatal=0}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/suites/sanitize/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# 2 GiB is the loader's own bound (kMaxElements float64 values): anything above it is a finding.
# 25 s leaves room for the largest generated tensor the schema allows (2^28 values, sha256'd).
limits=(-rss_limit_mb=3072 -malloc_limit_mb=2048 -timeout=25)

# Runs every input given once, split over $jobs processes (the schema fuzzer's 333 inputs took
# 40 s in one on 2 cores). Each input is named on the command line, so libFuzzer runs exactly
# those, one by one, and logs "Executed <input>" for each; a process that ends without having
# executed its share is a failure as much as a report is.
replay() {
  local bin=$1 prefix=$2
  shift 2
  local inputs=("$@") n=$# share=$(( ($# + jobs - 1) / jobs )) i ok=0
  local pids=() parts=()
  for ((i = 0; i * share < n; ++i)); do
    "$bin" "${limits[@]}" "${inputs[@]:i * share:share}" > "$prefix.$i.log" 2>&1 &
    pids+=($!)
    parts+=($(( n - i * share < share ? n - i * share : share )))
  done
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      tail -n 80 "$prefix.$i.log" >&2
      ok=1
    elif [ "$(grep -c '^Executed ' "$prefix.$i.log")" != "${parts[$i]}" ]; then
      tail -n 20 "$prefix.$i.log" >&2
      log "replay process $i executed $(grep -c '^Executed ' "$prefix.$i.log") of its ${parts[$i]} inputs"
      ok=1
    fi
  done
  return $ok
}

status=0
for target in golden_loader golden_schema catalog_manifest; do
  bin=$build/suites/fuzz/fuzz_$target
  case $target in
    golden_loader) t=$secs ;;
    golden_schema) t=$(( secs / 2 > 5 ? secs / 2 : 5 )) ;;
    *) t=$(( secs / 6 > 5 ? secs / 6 : 5 )) ;;
  esac
  dict=()
  [ "$target" = golden_loader ] && dict=(-dict=$here/golden.dict)

  replay=("$here/corpus/$target")
  [ -d "$here/regressions/$target" ] && replay+=("$here/regressions/$target")
  mapfile -t inputs < <(find "${replay[@]}" -type f | sort)
  log "$target: replaying ${#inputs[@]} committed inputs in $jobs process(es)"
  if ! replay "$bin" "$work/$target-replay" "${inputs[@]}"; then
    log "$target: a committed input fails (log above)"
    status=1
    continue
  fi

  mkdir -p "$work/$target-corpus" "$work/$target-artifacts"
  log "$target: fuzzing for ${t}s with $jobs process(es)"
  # -detect_leaks=0: libFuzzer's per-input leak check runs a whole LSan pass whenever an input
  # ends with more mallocs than frees, which HDF5's free lists make the rule: 95% of the time.
  # Leaks are still caught: LSan runs when each fuzzing process exits (reported below), the
  # replay above checks every committed input one by one, and the fuzz target aborts on any
  # HDF5 handle left open after an input.
  "$bin" "${limits[@]}" "${dict[@]}" -detect_leaks=0 -fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 \
    -ignore_ooms=1 -max_total_time="$t" -artifact_prefix="$work/$target-artifacts/" \
    "$work/$target-corpus" "$here/corpus/$target" > "$work/$target-fuzz.log" 2>&1 || true
  # The last status line of fork mode: "#<execs>: cov: ... corp: ... exec/s ... oom/timeout/crash: a/b/c".
  last=$(grep -E '^#[0-9]+: cov:' "$work/$target-fuzz.log" | tail -n 1 || true)
  log "$target: ${last:-no status line (see $work/$target-fuzz.log)}"
  [ -n "$last" ] || { tail -n 40 "$work/$target-fuzz.log" >&2; status=1; }
  if grep -q "ERROR: LeakSanitizer" "$work/$target-fuzz.log"; then
    grep -B2 -A30 "ERROR: LeakSanitizer" "$work/$target-fuzz.log" | head -n 80 >&2
    log "$target: a fuzzing process leaked at exit (not inside libhdf5: those are suppressed)"
    status=1
  fi

  shopt -s nullglob
  artifacts=("$work/$target-artifacts"/*)
  shopt -u nullglob
  if ((${#artifacts[@]})); then
    tool=()
    if [ -x "$mla_tool" ]; then
      tool=(--tool "$mla_tool")
    else
      log "$target: $mla_tool not built: a crash inside libhdf5 cannot be shown harmless to the tool and counts as ours"
    fi
    if ! /usr/bin/python3 $here/triage.py "$bin" "${artifacts[@]}" "${tool[@]}" -- "${limits[@]}" >&2; then
      status=1
      # The inputs that reproduce a finding outlive the temporary work folder: copied to
      # $keep/<target>/ and, when small, printed in base64, so that a CI log alone is enough to
      # replay one and commit it under regressions/ (a finding once lost with its folder was
      # not found again in minutes of fuzzing).
      mkdir -p "$keep/$target"
      cp "${artifacts[@]}" "$keep/$target/"
      log "$target: the artifacts are kept in $keep/$target/"
      for a in "${artifacts[@]}"; do
        if [ "$(stat -c %s "$a")" -le 16384 ]; then
          log "$target: $(basename "$a") in base64 (base64 -d > FILE):"
          base64 -w 120 "$a" >&2
        fi
      done
    fi
  else
    log "$target: no artifact"
  fi
done
exit $status
