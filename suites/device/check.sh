#!/usr/bin/env bash
# The device check: everything this suite can only verify on a GPU, in one command of at most
# seven minutes, from the bundle that make_bundle.sh writes (suites/device/README.md says how to
# carry and run it; run_on_device.sh is what the device machine runs).
#
#   check.sh OUTDIR [--bundle DIR] [--goldens DIR] [--budget SECONDS] [--rehearse]
#
# Every step runs in its own process under its own timeout, inside one budget (default 420 s,
# env MLA_CHECK_BUDGET_S, counted from MLA_CHECK_T0 when run_on_device.sh set it before
# unpacking), probes included. The steps, in order, with their caps (the time plan; README.md,
# "Time plan", says how the caps were sized), most valuable result first:
#   probe             20  nvidia-smi, mla-gpu-bench --mla_probe, the libraries each binary
#                         resolves, compute-sanitizer; python/torch/matplotlib are probed in the
#                         background for the later steps                      -> OUTDIR/device.txt
#   certify          160  in parallel: `certify` (every CUDA kernel of the registry, as
#                         `mla kernels --json` lists them, over the golden catalog,
#                         --in-process: the built-in kernels are trusted, so one process and one
#                         CUDA context for the whole certificate instead of one per case),
#                         `certify_plugin` (cuda_plugin.so through the C ABI, a child process per
#                         case), `certify_python` (FlashMLA and FlashInfer through the Python
#                         door's adapters with the python that imports torch, on a few cases, a
#                         child per case; SKIP with the import error where the libraries are not
#                         installed), the smoke test (mla_gpu_smoke_tests: one small problem per
#                         decode kernel instance with the combine, both cache appends) and every
#                         other gpu test binary: CPU-bound references, the GPU is not being timed
#   bench            100  mla-gpu-bench: ceilings + the CUDA kernels on the device check's points,
#                         alone on the GPU; rows reach bench/gpu.json as each completes
#   torch             35  reports/tools/torch_side_by_side.py on the same points, merged into the
#                         bench JSON (a partial bench is merged as such)
#   report            15  reports/tools/bench_report.py over the merged JSON + certificate
#   sanitize_memcheck 20, sanitize_racecheck 30, sanitize_synccheck 20
#                         compute-sanitizer on the smoke binary's three smallest decode problems
#                         and both appends; last, so a slow tool costs only itself, and each gets
#                         at least its cap, more when the earlier steps left time; no --leak-check
# plus 10 s for unpacking (run_on_device.sh) and 10 s for packaging: 420 s in all. summary.md and
# results.tar.gz are rewritten after the certify phase, the bench, the report and each sanitizer.
#
#   check.sh OUTDIR --plan: print the plan and exit 0 when its caps fit the budget (preflight.sh).
#
# --rehearse (on a machine without a GPU): the same steps, each GPU step recorded as SKIP with
# the reason; in addition it builds the bench's inputs for every bench point (mla-input-rates,
# the host half of the bench step), times the python/torch imports, and prints the time plan
# with what was measured here. Exit 1 if a step failed or the plan does not fit the budget.
# What cannot run here is stood in for, so that its host side is measured: the certify phase
# certifies host kernels in place of the CUDA ones (the same flags, the same catalog; which ones
# the registry's listing decides, reports/tools/check_readers.py standins(): cpu_mla_fp64 and
# cpu_naive_mha_fp32 with this suite's registry), the CPU example plug-in good_append in place of
# cuda_plugin, and the door's CPU stand-ins for FlashMLA and FlashInfer (examples/flashmla_cpu.py,
# flashinfer_cpu.py) on the same cases; every process of those steps that would create a CUDA
# context on the GPU machine waits MLA_SIMULATED_CONTEXT_SECONDS (default 1.5) once, and each
# certify step must end within 75 % of its cap.
#
# Libraries: nothing is exported on LD_LIBRARY_PATH. The binaries find the bundle's lib/ by
# their rpath ($ORIGIN/../lib); cuBLAS (not bundled) is searched in the image's CUDA 13 wheels
# (site-packages/nvidia/cu13/lib) first, then the CUDA install, and linked into the bundle's lib/;
# lib/compat's libstdc++ is linked there only when the system's is too old for the binaries.
#
# OUTDIR receives at most 8 files (a device run returns no more): summary.md (verdict, the
# first failing step with its log tail, every step, the time plan), device.txt, results.tar.gz
# (every log and result) and copies of certificate.md, report.md, roofline.png, bandwidth.png.
#
# What the check reads from its steps' files (gtest JSON, certificates, the bench's rows) and the
# rehearsal's time plan are functions of reports/tools/check_readers.py, which travels in the
# bundle's tools/reports.
#
# Exit status: 0 every step passed; 1 a step failed or timed out (rehearsal: or the plan does not
# fit); 2 nothing failed but some step was skipped (no GPU here, say); 3 bad usage.
set -u
set -o pipefail

usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0" >&2; exit 3; }  # the header above
(($#)) || usage
OUT=$1
shift
BUNDLE="" GOLDENS="${MLA_GOLDENS_DIR:-}" BUDGET=${MLA_CHECK_BUDGET_S:-420} REHEARSE=0 PLAN_ONLY=0
while (($#)); do
  case "$1" in
    --bundle) BUNDLE=$2; shift 2 ;;
    --goldens) GOLDENS=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --rehearse) REHEARSE=1; shift ;;
    --plan) PLAN_ONLY=1; shift ;;
    -h|--help) usage ;;
    *) echo "check.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ $BUDGET =~ ^[0-9]+$ ]] || { echo "check.sh: --budget needs whole seconds, got '$BUDGET'" >&2; exit 3; }

T0=${MLA_CHECK_T0:-$(date +%s)}
HERE=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)

# ---- the time plan (seconds); README.md "Time plan" -------------------------------------------
# In the order the steps run: the certificate first, then the benchmark rows, then the sanitizers.
PLAN=(setup:10 probe:20 certify:160 bench:100 torch:35 report:15 sanitize_memcheck:20 sanitize_racecheck:30
      sanitize_synccheck:20 package:10)
COMMAND_LIMIT=600   # the most one command may run on the GPU machine
COMMAND_MARGIN=60   # what the command's timeout adds to the budget: start-up, the transfers back
CERTIFY_MARGIN=25   # percent of its cap each certify step must leave unused in the rehearsal
declare -A CAP=()
PLAN_TOTAL=0
for e in "${PLAN[@]}"; do CAP[${e%%:*}]=${e#*:}; PLAN_TOTAL=$((PLAN_TOTAL + ${e#*:})); done
# MLA_CHECK_CAPS=step=seconds,... shortens steps (the script's own tests use it).
caps_env=${MLA_CHECK_CAPS:-}
for e in ${caps_env//,/ }; do
  [[ $e =~ ^([a-z_]+)=([0-9]+)$ ]] || { echo "check.sh: MLA_CHECK_CAPS entry '$e' is not step=seconds" >&2; exit 3; }
  CAP[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
done
RESERVE=${CAP[package]}

# --plan: the static half of the time plan, checked before anything is carried (preflight.sh):
# the caps fit the budget, and the budget plus the command's margin fits one command.
if ((PLAN_ONLY)); then
  echo "Time plan of $0:"
  for e in "${PLAN[@]}"; do printf '  %-20s %4s s\n' "${e%%:*}" "${CAP[${e%%:*}]}"; done
  sum=0
  for e in "${PLAN[@]}"; do sum=$((sum + CAP[${e%%:*}])); done
  echo "  caps sum to $sum s of a $BUDGET s budget; run the command with a timeout of $((BUDGET + COMMAND_MARGIN)) s (at most $COMMAND_LIMIT)"
  ((sum <= BUDGET)) || { echo "check.sh --plan: the caps sum to $sum s, over the $BUDGET s budget" >&2; exit 1; }
  ((BUDGET + COMMAND_MARGIN <= COMMAND_LIMIT)) ||
    { echo "check.sh --plan: a $BUDGET s budget plus ${COMMAND_MARGIN} s of margin is over the $COMMAND_LIMIT s one command may run" >&2; exit 1; }
  exit 0
fi

# The simulated CUDA context start-up of a rehearsal (certify/include/mla/certify/child.hpp).
SIM_CTX=""
if ((REHEARSE)); then
  SIM_CTX=${MLA_SIMULATED_CONTEXT_SECONDS:-1.5}
  [[ $SIM_CTX =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v v="$SIM_CTX" 'BEGIN { exit !(v <= 60) }' ||
    { echo "check.sh: MLA_SIMULATED_CONTEXT_SECONDS='$SIM_CTX' is not a number of seconds between 0 and 60" >&2; exit 3; }
else
  # A device run pays the real cost; a variable left in the environment must not add a fake one.
  unset MLA_SIMULATED_CONTEXT_SECONDS MLA_SIMULATED_CONTEXT_LOG
fi

# ---- where things are ---------------------------------------------------------------------------
# A bundle (bin/ lib/ tools/) or, for tests and rehearsals on a build machine, a CMake build tree.
if [[ -z $BUNDLE ]]; then
  if [[ -d $HERE/bin ]]; then BUNDLE=$HERE
  elif [[ -d $PWD/build/device/bundle/bin ]]; then BUNDLE=$PWD/build/device/bundle
  else echo "check.sh: no bundle next to this script or at ./build/device/bundle; pass --bundle" >&2; exit 3
  fi
fi
BUNDLE=$(readlink -f "$BUNDLE")
if [[ -d $BUNDLE/bin ]]; then
  LAYOUT=bundle
  BIN=$BUNDLE/bin
  TOOLS=$BUNDLE/tools/reports
  mapfile -t GPU_TESTS < <(sed 's|^|'"$BIN"'/|' "$BIN/gpu_tests.txt")
  MLA=$BIN/mla GPU_BENCH=$BIN/mla-gpu-bench SMOKE=$BIN/mla_gpu_smoke_tests INPUT_RATES=$BIN/mla-input-rates
  CUDA_PLUGIN=$BIN/cuda_plugin.so STANDIN_PLUGIN=$BIN/good_append.so
  DOOR=$BUNDLE/python                 # kernels/python (the Python door and its adapters)
  REPO_GUESS=$(readlink -f "$BUNDLE/../../..")
elif [[ -f $BUNDLE/CMakeCache.txt ]]; then
  LAYOUT=build-tree
  BIN=$BUNDLE
  SRC=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUNDLE/CMakeCache.txt")
  TOOLS=$SRC/reports/tools
  mapfile -t GPU_TESTS < <(cd "$BUNDLE" && ctest --show-only=json-v1 -L gpu | python3 "$TOOLS/check_readers.py" gpu-test-binaries "$BUNDLE")
  MLA=$BUNDLE/tools/mla/mla GPU_BENCH=$BUNDLE/suites/device/mla-gpu-bench
  SMOKE=$BUNDLE/suites/device/mla_gpu_smoke_tests INPUT_RATES=$BUNDLE/suites/device/mla-input-rates
  CUDA_PLUGIN=$BUNDLE/kernels/plugin/examples/cuda_plugin.so STANDIN_PLUGIN=$BUNDLE/kernels/plugin/examples/good_append.so
  DOOR=$SRC/kernels/python
  REPO_GUESS=$SRC
else
  echo "check.sh: $BUNDLE is neither a bundle (bin/) nor a CMake build tree" >&2; exit 3
fi
# What the check reads from its steps' files, and which kernels it takes from the registry: one
# tested module (reports/tools/check_readers.py, standard library only), beside the report tools.
READERS=$TOOLS/check_readers.py
[[ -f $READERS ]] || { echo "check.sh: $READERS is missing (the bundle's tools/reports)" >&2; exit 3; }
if [[ -z $GOLDENS ]]; then
  for g in "$BUNDLE/goldens" "$PWD/fixtures/goldens" "$REPO_GUESS/fixtures/goldens"; do
    [[ -f $g/MANIFEST.sha256 ]] && { GOLDENS=$g; break; }
  done
fi
REPO=""
for r in "$PWD" "$REPO_GUESS"; do [[ -f $r/fixtures/SCHEMA.md ]] && { REPO=$r; break; }; done

mkdir -p "$OUT" || { echo "check.sh: cannot create $OUT" >&2; exit 3; }
OUT=$(readlink -f "$OUT")
WORK=$(mktemp -d /tmp/mla-check.XXXXXX)
R=$WORK/results
mkdir -p "$R/logs" "$R/tests" "$R/certify" "$R/certify_plugin" "$R/certify_python" "$R/bench" "$R/torch" "$R/report" "$R/sanitize"
STEPS=$WORK/steps.tsv
: >"$STEPS"
BG_PIDS=()
cleanup() {
  local p
  for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT

elapsed() { echo $(($(date +%s) - T0)); }
left() { echo $((BUDGET - $(elapsed))); }
log() { echo "[check $(elapsed)s] $*" >&2; }
# record NAME STATUS SECONDS DETAIL  (STATUS: PASS FAIL TIMEOUT SKIP)
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4//$'\n'/ }" >>"$STEPS"; log "$1: $2 ${4:-}"; }

# run_step NAME CMD...: runs under timeout(1) with min(CAP[NAME], budget left - the packaging
# reserve), output to logs/NAME.log. Sets STEP_RC (124/137 = timed out, 125 = not started: no
# budget left) and STEP_S.
run_step() {
  local name=$1 cap=${CAP[${1%%:*}]:-${CAP[$1]:-30}}
  shift
  [[ -n ${STEP_CAP:-} ]] && cap=$STEP_CAP
  local t=$(($(left) - RESERVE))
  ((t > cap)) && t=$cap
  if ((t < 3)); then STEP_RC=125; STEP_S=0; echo "budget exhausted" >"$R/logs/$name.log"; return; fi
  local s
  s=$(date +%s)
  timeout -k 5 "$t" "$@" >"$R/logs/$name.log" 2>&1
  STEP_RC=$?
  STEP_S=$(($(date +%s) - s))
}
tail_of() { tail -c "${2:-400}" "$R/logs/$1.log" 2>/dev/null | tr '\n\t' '  '; }
timed_out() { ((STEP_RC == 124 || STEP_RC == 137)); }

# Any python3 reads JSON; the one with torch (found in the background) runs torch and the report.
PYJ=$(command -v python3 || echo /usr/bin/python3)

# ---- summary.md and results.tar.gz, rewritten after every phase -------------------------------
verdict_of() {  # -> "VERDICT<TAB>rc"
  local fails skips passes
  fails=$(awk -F'\t' '$2=="FAIL"||$2=="TIMEOUT"' "$STEPS" | wc -l)
  skips=$(awk -F'\t' '$2=="SKIP"' "$STEPS" | wc -l)
  passes=$(awk -F'\t' '$2=="PASS"' "$STEPS" | wc -l)
  if ((fails)); then printf 'FAILED (%s failed, %s skipped, %s passed)\t1\n' "$fails" "$skips" "$passes"
  elif ((skips)); then printf 'INCOMPLETE (%s skipped, %s passed, none failed)\t2\n' "$skips" "$passes"
  else printf 'PASSED (all %s steps)\t0\n' "$passes"
  fi
}
write_summary() {  # $1: "final" or the phase reached so far
  local phase=$1 v rc first
  IFS=$'\t' read -r v rc < <(verdict_of)
  first=$(awk -F'\t' '$2=="FAIL"||$2=="TIMEOUT" {print $1; exit}' "$STEPS")
  {
    if [[ $phase == final ]]; then echo "# Device check: $v"; else echo "# Device check: RUNNING (after $phase): $v so far"; fi
    echo
    [[ -n ${MLA_CHECK_ARCHIVE:-} ]] && { echo "Archive: $MLA_CHECK_ARCHIVE"; echo; }
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), $(elapsed) s of a ${BUDGET} s budget$( ((REHEARSE)) && echo ' (rehearsal: no GPU steps run)'); $(grep -m1 '^host:' "$OUT/device.txt" 2>/dev/null)"
    ((HAVE_GPU)) && echo "GPU: $(grep -A1 '^name, driver_version' "$OUT/device.txt" | tail -1)" || echo "GPU: none usable (${NO_GPU_WHY:-not probed yet})"
    echo
    if [[ -n $first ]]; then
      echo "## First failure: $first"
      echo
      awk -F'\t' -v s="$first" '$1==s {print $2 " after " $3 " s: " $4; exit}' "$STEPS"
      echo
      echo '```'
      tail -n 25 "$R/logs/$first.log" 2>/dev/null | cut -c1-300
      echo '```'
      echo
    fi
    echo "| step | status | seconds | cap | detail |"
    echo "|---|---|---|---|---|"
    awk -F'\t' -v caps="$(for e in "${PLAN[@]}"; do printf '%s:%s ' "${e%%:*}" "${CAP[${e%%:*}]}"; done)" '
      BEGIN { n = split(caps, a, " "); for (i = 1; i <= n; i++) { split(a[i], kv, ":"); cap[kv[1]] = kv[2] } }
      { gsub(/\|/, "\\|", $4); c = ($1 in cap) ? cap[$1] : ""; if ($1 ~ /^test_|^certify|^smoke_tests$/) c = cap["certify"];
        printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, c, $4 }' "$STEPS"
    echo
    [[ -f $WORK/plan.md ]] && cat "$WORK/plan.md"
    echo "Files: device.txt (GPU, driver, clocks, libraries), results.tar.gz (results/: logs/, tests/*.json,"
    echo "certify/, bench/gpu.json (rows as they completed) + combined.json, torch/, report/, sanitize/), and"
    echo "copies of certificate.md, report.md and the plots when produced."
  } >"$OUT/summary.md.tmp" && mv "$OUT/summary.md.tmp" "$OUT/summary.md"
}
package() {  # at most 8 files in OUTDIR, each well under 16 MiB
  local f
  for f in "$R"/logs/*.log; do  # a runaway log must not push the archive past the limit
    [[ -f $f ]] || continue
    (($(stat -c %s "$f") > 4194304)) && { tail -c 4194304 "$f" >"$f.tmp" && mv "$f.tmp" "$f" && echo "[truncated to the last 4 MiB]" >>"$f"; }
  done
  cp "$OUT/device.txt" "$R/device.txt" 2>/dev/null
  cp "$OUT/summary.md" "$R/summary.md" 2>/dev/null
  tar -C "$WORK" -czf "$OUT/results.tar.gz.tmp" results 2>/dev/null && mv "$OUT/results.tar.gz.tmp" "$OUT/results.tar.gz"
  for f in "$R/certify/certificate.md" "$R/report/report.md" "$R/report/roofline.png" "$R/report/bandwidth.png"; do
    [[ -f $f ]] && cp "$f" "$OUT/"
  done
}
checkpoint() { write_summary "$1"; package; }

HAVE_GPU=0 NO_GPU_WHY=""
record setup PASS "$(elapsed)" "bundle $BUNDLE ($LAYOUT), goldens ${GOLDENS:-none}, budget ${BUDGET} s (plan ${PLAN_TOTAL} s)${MLA_CHECK_STALE_BUNDLE:+; RUN WITH --allow-stale: $MLA_CHECK_STALE_BUNDLE}"
((BUDGET < PLAN_TOTAL)) && log "the budget (${BUDGET} s) is below the plan (${PLAN_TOTAL} s): the last steps get what is left"

# ---- libraries ----------------------------------------------------------------------------------
# cuBLAS for CUDA 13: the image's wheels first (site-packages/nvidia/cu13/lib; older wheels:
# nvidia/cublas/lib), found by globbing, not by starting python; then the CUDA install.
find_cublas() {
  local py d
  local -a roots=()
  # A venv's bin/python3 is a link to the base interpreter: its own folder first, then the target's.
  if py=$(command -v python3 2>/dev/null); then
    roots+=("$(dirname "$py")/.." "$(dirname "$(readlink -f "$py")")/..")
  fi
  roots+=(/opt/torch/.venv /usr/local /usr)
  for r in "${roots[@]}"; do
    for d in "$r"/lib/python3*/site-packages/nvidia/cu13/lib "$r"/lib/python3*/dist-packages/nvidia/cu13/lib \
             "$r"/lib/python3/dist-packages/nvidia/cu13/lib "$r"/lib/python3*/site-packages/nvidia/cublas/lib; do
      [[ -f $d/libcublas.so.13 && -f $d/libcublasLt.so.13 ]] && { readlink -f "$d"; return; }
    done
  done
  for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -f $d/libcublas.so.13 && -f $d/libcublasLt.so.13 ]] && { readlink -f "$d"; return; }
  done
  d=$(ldconfig -p 2>/dev/null | sed -n 's/.*libcublas\.so\.13 .*=> //p' | head -1)
  [[ -n $d ]] && dirname "$(readlink -f "$d")"
}
CUBLAS_DIR=$(find_cublas)
LIBNOTE="cuBLAS: ${CUBLAS_DIR:-NOT FOUND (searched site-packages/nvidia/cu13/lib, then /usr/local/cuda*; the cuBLAS baseline and the GEMM ceiling cannot run)}"
if [[ $LAYOUT == bundle ]]; then
  if [[ -n $CUBLAS_DIR ]]; then
    ln -sf "$CUBLAS_DIR/libcublas.so.13" "$BUNDLE/lib/libcublas.so.13"
    ln -sf "$CUBLAS_DIR/libcublasLt.so.13" "$BUNDLE/lib/libcublasLt.so.13"
    LIBNOTE="$LIBNOTE (linked into the bundle's lib/)"
  fi
  if ! "$MLA" --help >/dev/null 2>"$WORK/start.err"; then
    if grep -q "GLIBCXX\|CXXABI\|GCC_" "$WORK/start.err"; then
      for f in "$BUNDLE"/lib/compat/*; do ln -sf "compat/$(basename "$f")" "$BUNDLE/lib/$(basename "$f")"; done
      LIBNOTE="$LIBNOTE; the system libstdc++ is too old: lib/compat linked into lib/"
    fi
    "$MLA" --help >/dev/null 2>"$WORK/start.err" ||
      LIBNOTE="$LIBNOTE; THE BINARIES DO NOT START: $(head -c 300 "$WORK/start.err" | tr '\n' ' ')"
  fi
fi
export MLA_GOLDENS_DIR=$GOLDENS
[[ -n $REPO ]] && export MLA_SOURCE_DIR=$REPO

# python with torch and matplotlib, probed in the background (an import of torch takes seconds):
# the torch and report steps read the answer; nothing waits for it before then.
PROBE_PY=$WORK/python_probe.txt
(
  for c in python3 /opt/torch/.venv/bin/python3 /usr/bin/python3; do
    c=$(command -v "$c" 2>/dev/null) || continue
    s=$(date +%s%N)
    if v=$(timeout 40 "$c" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>/dev/null); then
      m=$(timeout 20 "$c" -c 'import matplotlib, numpy; print(matplotlib.__version__)' 2>/dev/null || echo "")
      printf '%s\t%s\t%s\t%s\n' "$c" "$v" "${m:-missing}" "$((($(date +%s%N) - s) / 1000000))" >"$PROBE_PY.tmp"
      mv "$PROBE_PY.tmp" "$PROBE_PY"
      exit 0
    fi
  done
  c=$(command -v python3 || echo "")
  m=$([[ -n $c ]] && timeout 20 "$c" -c 'import matplotlib, numpy; print(matplotlib.__version__)' 2>/dev/null || echo "")
  printf '%s\t%s\t%s\t%s\n' "$c" "no torch" "${m:-missing}" 0 >"$PROBE_PY.tmp" && mv "$PROBE_PY.tmp" "$PROBE_PY"
) &
BG_PIDS+=($!)
python_info() {  # waits (bounded by the budget) for the background probe; sets PY PY_TORCH PY_MPL PY_MS
  local waited=0
  while [[ ! -f $PROBE_PY ]] && ((waited < 45 && $(left) > RESERVE + 5)); do sleep 1; waited=$((waited + 1)); done
  PY="" PY_TORCH="not probed (budget)" PY_MPL="" PY_MS=""
  [[ -f $PROBE_PY ]] && IFS=$'\t' read -r PY PY_TORCH PY_MPL PY_MS <"$PROBE_PY"
  [[ -n $PY ]] || PY=$PYJ
}

find_sanitizer() {  # on PATH, or where CUDA toolkits put it
  local c
  for c in "$(command -v compute-sanitizer 2>/dev/null)" /usr/local/cuda/bin/compute-sanitizer \
           /usr/local/cuda/compute-sanitizer/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
           /usr/local/cuda-*/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer; do
    [[ -n $c && -x $c ]] && { echo "$c"; return; }
  done
}
CS=$(find_sanitizer)

# ---- 1. probe -------------------------------------------------------------------------------------
log "bundle $BUNDLE ($LAYOUT), goldens ${GOLDENS:-none}, budget ${BUDGET}s, output $OUT"
# Three probes at once, each under its own timeout, so the step stays within its cap whatever hangs.
probe_body() {
  local w=$1
  ( if command -v nvidia-smi >/dev/null; then
      timeout 8 nvidia-smi --query-gpu=name,driver_version,pci.bus_id,memory.total,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,power.limit,temperature.gpu,persistence_mode,compute_mode,mig.mode.current --format=csv 2>&1
      echo
      timeout 6 nvidia-smi -q -d CLOCK,PERFORMANCE 2>&1 | sed -n '1,80p'
    else
      echo "nvidia-smi: not found"
    fi ) >"$w/p_smi" 2>&1 &
  ( timeout 15 "$GPU_BENCH" --mla_probe 2>&1; echo "exit: $?" ) >"$w/p_bench" 2>&1 &
  ( echo "compute-sanitizer: ${CS:-not found} $([[ -n $CS ]] && timeout 10 "$CS" --version 2>&1 | tail -1)" ) >"$w/p_cs" 2>&1 &
  wait
  echo "# Device check: $(date -u +%Y-%m-%dT%H:%M:%SZ)$( ((REHEARSE)) && echo ' (rehearsal)')"
  echo "host: $(uname -n); kernel $(uname -r); $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); $(nproc) cores; $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "bundle: $BUNDLE ($LAYOUT); $(sed -n 's/^source commit: //p' "$BUNDLE/MANIFEST.txt" 2>/dev/null)${MLA_CHECK_STALE_BUNDLE:+; STALE (--allow-stale): $MLA_CHECK_STALE_BUNDLE}"
  echo "libraries: $LIBNOTE"
  echo "LD_LIBRARY_PATH (inherited, not set by the check): ${LD_LIBRARY_PATH:-unset}"
  echo
  echo "## nvidia-smi"
  cat "$w/p_smi"
  echo
  echo "## mla-gpu-bench --mla_probe (the CUDA runtime's and NVML's view from the bundled binary)"
  cat "$w/p_bench"
  echo
  for b in "$GPU_BENCH" "$SMOKE"; do
    echo "## ldd $(basename "$b")"
    ldd "$b" 2>&1 | grep -v "^\s*linux-vdso"
    echo
  done
  echo "## tools"
  cat "$w/p_cs"
}
run_step probe bash -c "$(declare -f probe_body); $(declare -p BUNDLE LAYOUT LIBNOTE GPU_BENCH SMOKE CS REHEARSE 2>/dev/null); probe_body $WORK"
cp "$R/logs/probe.log" "$OUT/device.txt"
probe_rc=$(sed -n 's/^exit: //p' "$OUT/device.txt" | head -1)
if [[ $probe_rc == 0 ]]; then
  HAVE_GPU=1
else
  NO_GPU_WHY=$(sed -n '/^## mla-gpu-bench/,/^exit:/p' "$OUT/device.txt" | grep -o '"unavailable":"[^"]*"' | head -1 | cut -d'"' -f4)
  [[ -n $NO_GPU_WHY ]] || NO_GPU_WHY="mla-gpu-bench --mla_probe exited ${probe_rc:-?} (see device.txt)"
fi
if timed_out; then record probe TIMEOUT "$STEP_S" "$(tail_of probe 200)"
elif [[ -z $CUBLAS_DIR && $LAYOUT == bundle ]]; then record probe FAIL "$STEP_S" "$LIBNOTE"
elif grep -q "THE BINARIES DO NOT START" <<<"$LIBNOTE"; then record probe FAIL "$STEP_S" "$LIBNOTE"
else record probe PASS "$STEP_S" "$( ((HAVE_GPU)) && grep -o '"name":"[^"]*"' "$OUT/device.txt" | head -1 || echo "no usable GPU: $NO_GPU_WHY"); $LIBNOTE"
fi

# gtest JSON -> "STATUS<TAB>detail"
gtest_verdict() { "$PYJ" "$READERS" gtest-verdict "$1"; }
# record a gtest step from its exit status and JSON
record_gtest() {  # name json
  local name=$1 json=$2 st detail
  if timed_out; then record "$name" TIMEOUT "$STEP_S" "killed after ${STEP_S}s: $(tail_of "$name" 200)"; return; fi
  if ((STEP_RC == 125)); then record "$name" SKIP 0 "budget exhausted"; return; fi
  IFS=$'\t' read -r st detail < <(gtest_verdict "$json")
  ((STEP_RC != 0)) && [[ $st != FAIL ]] && { st=FAIL; detail="exit $STEP_RC; $detail; $(tail_of "$name" 200)"; }
  [[ $st == SKIP ]] && detail="$detail (no usable GPU: $NO_GPU_WHY)"
  record "$name" "$st" "$STEP_S" "$detail"
}

# ---- 2. certify, with every GPU test beside it (CPU-bound references; the GPU is not timed) -----
# The certificate is the check's most valuable result, so it comes first, and it must fit its cap
# on the GPU machine, where a process's first CUDA call costs a second or more (driver, context,
# cuBLAS): the built-in CUDA kernels are certified --in-process (one process, one context, for the
# whole catalog: they are this project's own code, and the certificate written after every case
# survives a crash of the run), while the plug-in and the Python kernels keep a child per case, as
# untrusted code must. Each kernel's origin.isolation in the certificate says which it had.
# In a rehearsal, stand-ins run the same commands (the header) and MLA_SIMULATED_CONTEXT_SECONDS
# charges each process that would create a context; MLA_SIMULATED_CONTEXT_LOG counts them.
PHASE_CAP=$(( CAP[certify] < $(left) - RESERVE ? CAP[certify] : $(left) - RESERVE ))
PHASE_PIDS=()
# The built-in kernels come from the registry (`mla kernels --json`), not from names written here:
# a device run certifies every CUDA kernel; a rehearsal the host kernels that stand in for them
# (check_readers.py, standins(), says which and why). The bench holds the CUDA kernels meant for
# production (role optimized) to every point, where a baseline may refuse FP8 or sparse ones.
CERT_KERNELS=() MUST_CLAIM=() KERNELS_WHY=""
if "$MLA" kernels --json >"$R/kernels.json" 2>"$R/logs/kernels.log"; then
  mapfile -t names < <("$PYJ" "$READERS" kernels "$R/kernels.json" --select "$( ((REHEARSE)) && echo standins || echo cuda)" 2>>"$R/logs/kernels.log")
  for k in "${names[@]}"; do CERT_KERNELS+=(--kernel "$k"); done
  mapfile -t MUST_CLAIM < <("$PYJ" "$READERS" kernels "$R/kernels.json" --select must-claim 2>>"$R/logs/kernels.log")
  ((${#CERT_KERNELS[@]})) ||
    KERNELS_WHY="the registry lists no $( ((REHEARSE)) && echo 'host stand-in for a CUDA kernel' || echo 'CUDA kernel') (mla kernels --json; built without CUDA?) $(tail -c 200 "$R/logs/kernels.log" | tr '\n' ' ')"
else
  KERNELS_WHY="$(basename "$MLA") kernels --json failed: $(tail -c 300 "$R/logs/kernels.log" | tr '\n' ' ')"
fi
if ((REHEARSE)); then
  CERT_PLUGIN=$STANDIN_PLUGIN
  PY_KERNELS=(--python "$DOOR/examples/flashmla_cpu.py:KERNEL" --python "$DOOR/examples/flashinfer_cpu.py:KERNEL")
  STANDIN_NOTE="rehearsed with stand-ins: "
else
  CERT_PLUGIN=$CUDA_PLUGIN
  PY_KERNELS=(--python mla_door.adapters.flashmla:kernel --python mla_door.adapters.flashinfer:kernel)
  STANDIN_NOTE=""
fi
sim_env() {  # STEP -> env(1) and the variables that charge the step's processes (rehearsal only)
  ((REHEARSE)) && printf '%s\n' env "MLA_SIMULATED_CONTEXT_SECONDS=$SIM_CTX" "MLA_SIMULATED_CONTEXT_LOG=$R/$1/contexts.log"
}
contexts_of() { [[ -f $R/$1/contexts.log ]] && grep -c . "$R/$1/contexts.log" || echo 0; }
ctx_note() {
  ((REHEARSE)) || return 0
  local n
  n=$(contexts_of "$1")
  if ((n == 1)); then echo "; 1 process charged ${SIM_CTX} s for a CUDA context"
  else echo "; $n processes charged ${SIM_CTX} s each for a CUDA context"
  fi
}
if [[ -x $SMOKE ]]; then
  ( STEP_CAP=$PHASE_CAP run_step smoke_tests "$SMOKE" --gtest_output="json:$R/tests/smoke.json"
    echo "$STEP_RC $STEP_S" >"$WORK/rc_smoke_tests" ) &
  PHASE_PIDS+=($!)
fi
for t in "${GPU_TESTS[@]}"; do
  n=$(basename "$t")
  [[ $n == "$(basename "$SMOKE")" ]] && continue  # the smoke step above
  ( STEP_CAP=$PHASE_CAP run_step "test_$n" "$t" --gtest_output="json:$R/tests/$n.json"
    echo "$STEP_RC $STEP_S" >"$WORK/rc_test_$n" ) &
  PHASE_PIDS+=($!)
done
if [[ -n $GOLDENS && -z $KERNELS_WHY ]]; then
  ( mapfile -t sim < <(sim_env certify)
    STEP_CAP=$PHASE_CAP run_step certify "${sim[@]}" "$MLA" certify --goldens "$GOLDENS" --out "$R/certify" \
      "${CERT_KERNELS[@]}" --in-process --timeout 60
    echo "$STEP_RC $STEP_S" >"$WORK/rc_certify" ) &
  PHASE_PIDS+=($!)
fi
# The plug-in's C ABI with device pointers and the host's stream is what this step is for (the
# kernel it wraps is certified above): a child costs a context, so it gets the attn_core cases
# with the most to say about the ABI (paged cache, varlen, s_q > 1, an empty batch, wide heads),
# not the whole family, and the bf16 cache_append cases (the append cuda_plugin exports; the
# rehearsal's stand-in has more). Unclaimed shapes are not probed: the plug-in's claims are the
# wrapped kernel's own.
PLUGIN_CASES='^attn_core/(all_empty|h16_varlen_ps16|h64_sq2_ps64|h128_sq2_v3_scale_ps16)$|^cache_append/[^/]+/bf16/'
if [[ -n $GOLDENS && -f $CERT_PLUGIN ]]; then
  ( mapfile -t sim < <(sim_env certify_plugin)
    STEP_CAP=$PHASE_CAP run_step certify_plugin "${sim[@]}" "$MLA" certify --goldens "$GOLDENS" --out "$R/certify_plugin" \
      --plugin "$CERT_PLUGIN" --family attn_core --family cache_append --case "$PLUGIN_CASES" --no-probe-unclaimed --timeout 60
    echo "$STEP_RC $STEP_S" >"$WORK/rc_certify_plugin" ) &
  PHASE_PIDS+=($!)
fi
# The field's libraries as they are, through the Python door (mla certify --python): the
# adapters import the installed flash_mla / flashinfer with the python that imports torch; where
# either does not import, its unavailable() makes every case SKIPPED with the import error. Three
# cases only: each claimed case costs a claims child and two call children (a second, fresh
# process must repeat the first), each of which imports torch, and the call children create a
# CUDA context (the rehearsal measured 3-5 s a child on the shared 2-core VM): FlashMLA's dense
# decode on the bf16 cache at page 64 (lengths 1 and 130, s_q 2) and its sparse decode on the
# FP8 cache; FlashInfer's causal s_q = 2 decode over 33 tokens at page 16 with 128 heads, a shape
# FlashMLA does not claim (NOT_CLAIMED with its reason). (FlashInfer does not claim a causal row
# that attends nothing, so the first case is not its.)
PY_DOOR_CASES='^attn_core/(h128_sq2_v3_scale_ps16|h64_sq2_ps64)$|^attn_sparse/sparse_fp8_tiny_flashmla_ue8m0$'
PY_DOOR=0
if [[ -n $GOLDENS && -d $DOOR/mla_door && $("$MLA" certify --help 2>/dev/null) == *--python* ]]; then
  PY_DOOR=1
  python_info
  ( export MLA_DOOR_PATH=$DOOR
    mapfile -t sim < <(sim_env certify_python)
    STEP_CAP=$PHASE_CAP run_step certify_python "${sim[@]}" "$MLA" certify --goldens "$GOLDENS" --out "$R/certify_python" \
      "${PY_KERNELS[@]}" --python-exe "$PY" --case "$PY_DOOR_CASES" --timeout 60
    echo "$STEP_RC $STEP_S" >"$WORK/rc_certify_python" ) &
  PHASE_PIDS+=($!)
fi
((${#PHASE_PIDS[@]})) && wait "${PHASE_PIDS[@]}"
if [[ ! -x $SMOKE ]]; then
  record smoke_tests FAIL 0 "$(basename "$SMOKE") is not in the bundle (rebuild it: cmake --build --preset device)"
else
  read -r STEP_RC STEP_S <"$WORK/rc_smoke_tests"
  record_gtest smoke_tests "$R/tests/smoke.json"
fi
for t in "${GPU_TESTS[@]}"; do
  n=$(basename "$t")
  [[ $n == "$(basename "$SMOKE")" ]] && continue
  read -r STEP_RC STEP_S <"$WORK/rc_test_$n"
  record_gtest "test_$n" "$R/tests/$n.json"
done
certificate_detail() {  # certificate.json plugin(0/1) -> "[ALLSKIP ]detail"
  local plugin=()
  [[ $2 == 1 ]] && plugin=(--plugin)
  "$PYJ" "$READERS" certificate-detail "$1" "${plugin[@]}" 2>&1
}
for cert in certify certify_plugin; do
  plugin=0; [[ $cert == certify_plugin ]] && plugin=1
  if [[ -z $GOLDENS ]]; then record $cert SKIP 0 "no golden catalog found (--goldens, MLA_GOLDENS_DIR, bundle goldens/, ./fixtures/goldens)"; continue; fi
  if ((plugin)) && [[ ! -f $CERT_PLUGIN ]]; then record $cert SKIP 0 "no $(basename "$CERT_PLUGIN") at $CERT_PLUGIN (cuda_plugin.so is built only with CUDA)"; continue; fi
  if ((!plugin)) && [[ -n $KERNELS_WHY ]]; then record $cert FAIL 0 "$KERNELS_WHY"; continue; fi
  read -r STEP_RC STEP_S <"$WORK/rc_$cert"
  if timed_out; then record $cert TIMEOUT "$STEP_S" "$(tail_of $cert 200)"; continue; fi
  if ((STEP_RC == 125)); then record $cert SKIP 0 "budget exhausted"; continue; fi
  detail=$(certificate_detail "$R/$cert/certificate.json" $plugin)
  allskip=0
  [[ $detail == ALLSKIP* ]] && { allskip=1; detail=${detail#ALLSKIP }; }
  detail=$STANDIN_NOTE$detail$(ctx_note $cert)
  # Exit 4 with every kernel unavailable: NOT_JUDGED because nothing could run here, a SKIP.
  if (((STEP_RC == 0 || STEP_RC == 4) && allskip)); then record $cert SKIP "$STEP_S" "$detail"
  elif ((STEP_RC == 0)); then record $cert PASS "$STEP_S" "$detail"
  else record $cert FAIL "$STEP_S" "exit $STEP_RC: $detail $(tail_of $cert 200)"
  fi
done
python_door_detail() {  # certificate.json -> "[ALLSKIP ]detail" or "FAIL why"
  "$PYJ" "$READERS" python-door-detail "$1" 2>&1
}
if ((!PY_DOOR)); then
  if [[ -z $GOLDENS ]]; then record certify_python SKIP 0 "no golden catalog found"
  elif [[ ! -d $DOOR/mla_door ]]; then record certify_python SKIP 0 "no Python door package at $DOOR"
  else record certify_python SKIP 0 "this mla has no certify --python (the Python door)"
  fi
else
  read -r STEP_RC STEP_S <"$WORK/rc_certify_python"
  if timed_out; then record certify_python TIMEOUT "$STEP_S" "$(tail_of certify_python 200)"
  elif ((STEP_RC == 125)); then record certify_python SKIP 0 "budget exhausted"
  else
    # SKIP when no library could run here (each kernel unavailable, or every case of it SKIPPED),
    # with each kernel's own reason.
    detail=$(python_door_detail "$R/certify_python/certificate.json")
    allskip=0
    [[ $detail == ALLSKIP* ]] && { allskip=1; detail=${detail#ALLSKIP }; }
    [[ $detail == FAIL* ]] || detail=$STANDIN_NOTE$detail$(ctx_note certify_python)
    if [[ $detail == FAIL* ]]; then record certify_python FAIL "$STEP_S" "exit $STEP_RC: ${detail#FAIL } $(tail_of certify_python 200)"
    elif (((STEP_RC == 0 || STEP_RC == 4) && allskip)); then record certify_python SKIP "$STEP_S" "$detail"
    elif ((STEP_RC == 0)); then record certify_python PASS "$STEP_S" "$detail"
    else record certify_python FAIL "$STEP_S" "exit $STEP_RC: $detail $(tail_of certify_python 200)"
    fi
  fi
fi
checkpoint certify

# ---- 3. bench (alone on the GPU) ------------------------------------------------------------------
# decode_b128_h16_sq1_sk8192 and its FP8 twin: the bf16-vs-FP8 comparison (mla-gpu-bench adds an
# mla_ratio row with the measured speedup); the sk8192 top-2048 pair is sparse decode.
BENCH_POINTS=${MLA_CHECK_POINTS:-decode_b128_h16_sq1_sk1024,decode_b128_h16_sq1_sk4096,decode_b128_h16_sq1_sk8192,fp8_b128_h16_sq1_sk8192,decode_b128_h16_sq1_sk16384,compute_b128_h64_sq1_sk4096,compute_b128_h64_sq2_sk4096,compute_b128_h128_sq1_sk4096,compute_b128_h128_sq2_sk4096,sparse_b64_h128_sq1_sk8192_top2048_bf16,sparse_b64_h128_sq1_sk8192_top2048_fp8}
"$GPU_BENCH" --mla_list --mla_points="$BENCH_POINTS" >"$R/bench/points.tsv" 2>"$R/logs/points.log"
bench_detail() {  # gpu.json -> "STATUS<TAB>detail" (partial runs: the rows kept)
  "$PYJ" "$READERS" bench-detail "$1" --must-claim "$(IFS=,; echo "${MUST_CLAIM[*]}")" 2>&1
}
if ((!HAVE_GPU)); then
  record bench SKIP 0 "no usable GPU: $NO_GPU_WHY"
else
  run_step bench "$GPU_BENCH" --mla_points="$BENCH_POINTS" --mla_quick --benchmark_out="$R/bench/gpu.json"
  IFS=$'\t' read -r st detail < <([[ -f $R/bench/gpu.json ]] && bench_detail "$R/bench/gpu.json" || printf 'FAIL\tno bench JSON written\n')
  if ((STEP_RC == 125)); then record bench SKIP 0 "budget exhausted"
  elif timed_out; then record bench TIMEOUT "$STEP_S" "killed after ${STEP_S}s; rows kept: $detail"
  elif ((STEP_RC == 3)); then record bench FAIL "$STEP_S" "a row left the CUDA context unusable: $(grep -m1 'stopped timing at' "$R/logs/bench.log"); $detail"
  elif ((STEP_RC != 0)); then record bench FAIL "$STEP_S" "exit $STEP_RC: $detail $(tail_of bench 200)"
  else record bench "${st:-FAIL}" "$STEP_S" "$detail"
  fi
fi
checkpoint bench

# ---- rehearsal: the bench's host half, measured here ---------------------------------------------
if ((REHEARSE)); then
  if [[ -x $INPUT_RATES ]]; then
    STEP_CAP=${CAP[bench]} run_step bench_inputs "$INPUT_RATES" --mla_points="$BENCH_POINTS" --benchmark_filter='^(inputs/|gen/fill_bf16/.*/threads)' \
      --mla_gen_mib=64 --benchmark_out="$R/bench/inputs.json" --benchmark_out_format=json
    if timed_out; then record bench_inputs TIMEOUT "$STEP_S" "$(tail_of bench_inputs 200)"
    elif ((STEP_RC != 0)); then record bench_inputs FAIL "$STEP_S" "exit $STEP_RC: $(tail_of bench_inputs 200)"
    else record bench_inputs PASS "$STEP_S" "inputs of $(grep -c '"name": "inputs/' "$R/bench/inputs.json") bench points built on the host"
    fi
  else
    record bench_inputs FAIL 0 "$(basename "$INPUT_RATES") is not in the bundle"
  fi
fi

# ---- 4. torch side by side -------------------------------------------------------------------------
python_info
{ echo; echo "## python"; echo "python3: ${PY:-not found}; torch: $PY_TORCH; matplotlib: ${PY_MPL:-?}; imports took ${PY_MS:-?} ms"; } >>"$OUT/device.txt"
if [[ -z $PY ]]; then
  record torch SKIP 0 "python3 not found"
else
  merge=()
  [[ -f $R/bench/gpu.json ]] && merge=(--merge-with "$R/bench/gpu.json" --merged-out "$R/bench/combined.json")
  run_step torch "$PY" "$TOOLS/torch_side_by_side.py" --points-tsv "$R/bench/points.tsv" --out "$R/torch/torch.json" "${merge[@]}"
  if timed_out; then record torch TIMEOUT "$STEP_S" "$(tail_of torch 200)"
  elif ((STEP_RC == 125)); then record torch SKIP 0 "budget exhausted"
  elif ((STEP_RC == 77)); then record torch SKIP "$STEP_S" "$(tail_of torch 300)"
  elif ((STEP_RC != 0)); then record torch FAIL "$STEP_S" "exit $STEP_RC: $(tail_of torch 300)"
  else record torch PASS "$STEP_S" "$(tail_of torch 160)"
  fi
fi

# ---- 5. report -----------------------------------------------------------------------------------
REPORT_IN=$R/bench/combined.json
[[ -f $REPORT_IN ]] || REPORT_IN=$R/bench/gpu.json
if [[ ! -f $REPORT_IN ]]; then
  record report SKIP 0 "no benchmark JSON (bench step did not run)"
elif [[ $PY_MPL == missing || -z $PY_MPL ]]; then
  record report SKIP 0 "python3 ($PY) lacks matplotlib or numpy"
else
  cert=()
  [[ -f $R/certify/certificate.json ]] && cert=(--certificate "$R/certify/certificate.json")
  run_step report "$PY" "$TOOLS/bench_report.py" "$REPORT_IN" "${cert[@]}" --out "$R/report"
  if ((STEP_RC == 0)); then record report PASS "$STEP_S" "$(ls "$R/report" | tr '\n' ' ')"
  elif ((STEP_RC == 125)); then record report SKIP 0 "budget exhausted"
  elif timed_out; then record report TIMEOUT "$STEP_S" "$(tail_of report 200)"
  else record report FAIL "$STEP_S" "exit $STEP_RC: $(tail_of report 300)"
  fi
fi

checkpoint report

# ---- 6. compute-sanitizer, last, on the smallest problems ------------------------------------
# Three decode problems of the smoke binary, its smallest (16-row tiles: the bf16 one, the FP8 one
# with its helper warps and shared-memory dequantization, FP8 sparse with its index gathers; each
# through the combine) and both cache appends, so the tools' 10-100x slowdown fits the slot. Last:
# a tool that is slow to start on this device costs its own step, never the certificate or the
# bench. No --leak-check: cuBLAS keeps allocations to the end of the process that it would report.
SAN_FILTER=${MLA_CHECK_SANITIZE_FILTER:-'Instance/Decode.OneProblemThroughDecodeAndCombine/rows16_bf16_dense:Instance/Decode.OneProblemThroughDecodeAndCombine/rows16_fp8_dense:Instance/Decode.OneProblemThroughDecodeAndCombine/rows16_fp8_sparse:Append.*'}
# The last phase takes what the others left: each tool gets its cap, or an equal share of the
# time left when the earlier steps ended early (their caps are bounds, seldom used up).
SAN_TOOLS=(memcheck racecheck synccheck)
san_left=${#SAN_TOOLS[@]}
for tool in "${SAN_TOOLS[@]}"; do
  step=sanitize_$tool
  share=$(( ($(left) - RESERVE) / san_left ))
  san_left=$((san_left - 1))
  san_cap=${CAP[$step]}
  ((share > san_cap)) && san_cap=$share
  if ((!HAVE_GPU)); then record "$step" SKIP 0 "no usable GPU: $NO_GPU_WHY"; continue; fi
  if [[ -z $CS ]]; then record "$step" SKIP 0 "compute-sanitizer not found on PATH or under /usr/local/cuda*/bin"; continue; fi
  if [[ ! -x $SMOKE ]]; then record "$step" SKIP 0 "$(basename "$SMOKE") not in the bundle"; continue; fi
  if [[ -n ${SAN_BROKEN:-} ]]; then record "$step" SKIP 0 "$SAN_BROKEN"; continue; fi
  STEP_CAP=$san_cap run_step "$step" "$CS" --tool "$tool" --error-exitcode 86 \
    "$SMOKE" --gtest_filter="$SAN_FILTER" --gtest_output="json:$R/sanitize/$tool.json"
  log_f="$R/logs/$step.log"
  if ((STEP_RC == 125)); then record "$step" SKIP 0 "budget exhausted"
  elif timed_out; then record "$step" TIMEOUT "$STEP_S" "$(tail_of "$step" 200)"
  elif grep -q "Device not supported\|Unable to find injection library\|Target application returned an error 999\|Error: No attachable process" "$log_f"; then
    SAN_BROKEN="compute-sanitizer cannot run here: $(grep -m1 'Device not supported\|injection\|999\|attachable' "$log_f")"
    record "$step" SKIP "$STEP_S" "$SAN_BROKEN"
  elif ((STEP_RC == 86)); then record "$step" FAIL "$STEP_S" "$(grep -E '^=+ (Invalid|Race|Barrier|Uninitialized|Error|ERROR)' "$log_f" | grep -v 'ERROR SUMMARY' | head -3 | tr '\n' ' ')$(grep -m1 'ERROR SUMMARY' "$log_f")"
  elif ((STEP_RC != 0)); then record "$step" FAIL "$STEP_S" "exit $STEP_RC: $(tail_of "$step" 300)"
  else record "$step" PASS "$STEP_S" "$(grep -m1 'ERROR SUMMARY' "$log_f")"
  fi
  checkpoint "$step"
done


# ---- the time plan, with what a rehearsal measured -------------------------------------------------
plan_fits=1
if ((REHEARSE)); then
  caps_now=$(for e in "${PLAN[@]}"; do printf '%s:%s ' "${e%%:*}" "${CAP[${e%%:*}]}"; done)
  contexts=$(for st in certify certify_plugin certify_python; do printf '%s:%s ' "$st" "$(contexts_of $st)"; done)
  "$PYJ" "$READERS" plan --steps "$STEPS" --inputs "$R/bench/inputs.json" --budget "$BUDGET" --caps "$caps_now" \
    --py-ms "${PY_MS:-0}" --sim-ctx "$SIM_CTX" --contexts "$contexts" --certify-margin "$CERTIFY_MARGIN" \
    --command-limit "$COMMAND_LIMIT" --command-margin "$COMMAND_MARGIN" >"$WORK/plan.md" 2>&1 || plan_fits=0
  cat "$WORK/plan.md" >&2
fi

# ---- package ------------------------------------------------------------------------------------------
write_summary final
package
IFS=$'\t' read -r verdict rc < <(verdict_of)
log "$verdict; $(ls "$OUT" | wc -l) files in $OUT"
cat "$OUT/summary.md"
if ((REHEARSE)); then
  # A rehearsal passes when nothing failed and the plan fits; skipped GPU steps are expected.
  ((rc == 1 || !plan_fits)) && exit 1
  exit 0
fi
exit "$rc"
