#!/usr/bin/env bash
# The device check: everything this suite can only verify on a GPU, in one command, from the
# bundle that make_bundle.sh writes (suites/device/README.md says how to carry and run it).
#
#   check.sh OUTDIR [--bundle DIR] [--goldens DIR] [--budget SECONDS]
#
# Steps, each under its own timeout(1) and inside an overall budget (default 330 s, env
# MLA_CHECK_BUDGET_S), so one hang cannot eat the device time; a failing step is recorded and the
# script goes on:
#   device      nvidia-smi subset, the binaries' own view of the GPU (mla-gpu-bench --mla_probe),
#               libraries resolved, tool versions                        -> OUTDIR/device.txt
#   tests       every gpu-labelled gtest binary, --gtest_output=json, in parallel (CPU-bound
#               references) together with
#   certify     mla certify over the golden catalog for the CUDA kernels (certificate json/md)
#   certify_plugin  mla certify --plugin cuda_plugin.so: the CUDA example plug-in (device pointers,
#               the host's non-blocking stream, decode + bf16/fp8 cache append) on attn_core and the
#               cache_append cases; expected green (results/certify_plugin/)
#   bench       mla-gpu-bench: GPU ceilings + the CUDA kernels on the memory- and compute-bound
#               points (CUDA events, L2 flush), alone on the GPU
#   torch       reports/tools/torch_side_by_side.py on the same points (absorbed einsum decode,
#               SDPA on decompressed K/V), merged into the bench JSON
#   report      reports/tools/bench_report.py over the merged JSON + certificate
#   sanitize    compute-sanitizer memcheck, racecheck, synccheck on small cases, with the budget
#               that is left (skipped with the reason when the tool is missing or refuses the device)
# OUTDIR receives at most 8 files (the device tool returns no more): summary.md, device.txt,
# results.tar.gz (every log and result), and copies of certificate.md, report.md, roofline.png,
# bandwidth.png when they were produced.
#
# Exit status: 0 every step passed; 1 a step failed or timed out; 2 nothing failed but some step
# was skipped (for example no GPU on this machine); 3 bad usage.
set -u
set -o pipefail

usage() { sed -n '2,30p' "$0" >&2; exit 3; }
(($#)) || usage
OUT=$1
shift
BUNDLE="" GOLDENS="${MLA_GOLDENS_DIR:-}" BUDGET=${MLA_CHECK_BUDGET_S:-330}
while (($#)); do
  case "$1" in
    --bundle) BUNDLE=$2; shift 2 ;;
    --goldens) GOLDENS=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "check.sh: unknown argument $1" >&2; usage ;;
  esac
done

T0=$(date +%s)
HERE=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)

# ---- where things are -----------------------------------------------------------------------
# A bundle (bin/ lib/ tools/) or, for tests on a build machine, a CMake build tree.
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
  MLA=$BIN/mla GPU_BENCH=$BIN/mla-gpu-bench
  CUDA_PLUGIN=$BIN/cuda_plugin.so
  REPO_GUESS=$(readlink -f "$BUNDLE/../../..")
elif [[ -f $BUNDLE/CMakeCache.txt ]]; then
  LAYOUT=build-tree
  BIN=$BUNDLE
  SRC=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUNDLE/CMakeCache.txt")
  TOOLS=$SRC/reports/tools
  mapfile -t GPU_TESTS < <(cd "$BUNDLE" && ctest --show-only=json-v1 -L gpu | python3 -c '
import json, os, sys
seen = []
for t in json.load(sys.stdin).get("tests", []):  # gtest binaries only, as make_bundle.sh picks them
    cmd = t.get("command") or [""]
    if not any(a.startswith("--gtest_filter=") for a in cmd[1:]): continue
    if cmd[0].startswith(sys.argv[1] + "/") and cmd[0] not in seen: seen.append(cmd[0])
print("\n".join(seen))' "$BUNDLE")
  MLA=$BUNDLE/tools/mla/mla GPU_BENCH=$BUNDLE/suites/device/mla-gpu-bench
  CUDA_PLUGIN=$BUNDLE/kernels/plugin/examples/cuda_plugin.so
  REPO_GUESS=$SRC
else
  echo "check.sh: $BUNDLE is neither a bundle (bin/) nor a CMake build tree" >&2; exit 3
fi
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
mkdir -p "$R/logs" "$R/tests" "$R/certify" "$R/certify_plugin" "$R/bench" "$R/torch" "$R/report" "$R/sanitize"
STEPS=$WORK/steps.tsv
: >"$STEPS"
trap 'rm -rf "$WORK"' EXIT

elapsed() { echo $(($(date +%s) - T0)); }
left() { echo $((BUDGET - $(elapsed))); }
log() { echo "[check $(elapsed)s] $*" >&2; }
# record NAME STATUS SECONDS DETAIL  (STATUS: PASS FAIL TIMEOUT SKIP)
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4//$'\n'/ }" >>"$STEPS"; log "$1: $2 ${4:-}"; }

# run_step NAME CAP_SECONDS CMD...: runs under timeout(1) with min(CAP, budget left - reserve),
# output to logs/NAME.log. Sets STEP_RC (124 = timed out) and STEP_S. Does not record.
RESERVE=20  # packaging, summary
run_step() {
  local name=$1 cap=$2
  shift 2
  local t=$(($(left) - RESERVE))
  ((t > cap)) && t=$cap
  if ((t < 5)); then STEP_RC=125; STEP_S=0; echo "budget exhausted" >"$R/logs/$name.log"; return; fi
  local s
  s=$(date +%s)
  timeout -k 10 "$t" "$@" >"$R/logs/$name.log" 2>&1
  STEP_RC=$?
  STEP_S=$(($(date +%s) - s))
}
tail_of() { tail -c "${2:-400}" "$R/logs/$1.log" 2>/dev/null | tr '\n\t' '  '; }

# ---- libraries: the bundle's lib/, cuBLAS from the image, compat libstdc++ only if needed ------
find_cublas() {
  local d
  d=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)
  [[ -n $d && -f $d/libcublas.so.13 ]] && { echo "$d"; return; }
  for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -f $d/libcublas.so.13 ]] && { echo "$d"; return; }
  done
  d=$(find /opt /usr/local/lib /usr/lib -name libcublas.so.13 -print -quit 2>/dev/null)
  [[ -n $d ]] && dirname "$d"
}
CUBLAS_DIR=$(find_cublas)
LIBPATH=""
[[ $LAYOUT == bundle ]] && LIBPATH=$BUNDLE/lib
[[ -n $CUBLAS_DIR ]] && LIBPATH=${LIBPATH:+$LIBPATH:}$CUBLAS_DIR
[[ -d /usr/local/cuda/lib64 && $CUBLAS_DIR != /usr/local/cuda/lib64 ]] && LIBPATH=${LIBPATH:+$LIBPATH:}/usr/local/cuda/lib64
export LD_LIBRARY_PATH=${LIBPATH}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
LIBNOTE="cuBLAS: ${CUBLAS_DIR:-NOT FOUND (the CUDA binaries cannot start)}"
if [[ $LAYOUT == bundle ]] && ! "$MLA" --help >/dev/null 2>"$WORK/start.err"; then
  if grep -q "GLIBCXX\|CXXABI\|GCC_" "$WORK/start.err"; then
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$BUNDLE/lib/compat
    LIBNOTE="$LIBNOTE; the system libstdc++ is too old, using lib/compat"
  fi
  "$MLA" --help >/dev/null 2>"$WORK/start.err" ||
    LIBNOTE="$LIBNOTE; THE BINARIES DO NOT START: $(head -c 300 "$WORK/start.err" | tr '\n' ' ')"
fi
export MLA_GOLDENS_DIR=$GOLDENS
[[ -n $REPO ]] && export MLA_SOURCE_DIR=$REPO
# The python3 that has torch (on the device image the plain python3, /opt/torch/.venv): the torch
# step needs it, the report needs numpy + matplotlib, which come with it there.
PY=""
for c in python3 /opt/torch/.venv/bin/python3 /usr/bin/python3; do
  c=$(command -v "$c" 2>/dev/null) || continue
  [[ -z $PY ]] && PY=$c
  if timeout 60 "$c" -c 'import torch' >/dev/null 2>&1; then PY=$c; break; fi
done

find_sanitizer() {  # on PATH, or where CUDA toolkits put it
  local c
  for c in "$(command -v compute-sanitizer 2>/dev/null)" /usr/local/cuda/bin/compute-sanitizer \
           /usr/local/cuda/compute-sanitizer/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
           /usr/local/cuda-*/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer; do
    [[ -n $c && -x $c ]] && { echo "$c"; return; }
  done
}
CS=$(find_sanitizer)

# ---- 1. device --------------------------------------------------------------------------------
log "bundle $BUNDLE ($LAYOUT), goldens ${GOLDENS:-none}, budget ${BUDGET}s, output $OUT"
HAVE_GPU=1 NO_GPU_WHY=""
{
  echo "# Device check: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -n); kernel $(uname -r); $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); $(nproc) cores; $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "bundle: $BUNDLE ($LAYOUT); $(sed -n 's/^source commit: //p' "$BUNDLE/MANIFEST.txt" 2>/dev/null)"
  echo "libraries: $LIBNOTE"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo
  echo "## nvidia-smi"
  if command -v nvidia-smi >/dev/null; then
    timeout 30 nvidia-smi --query-gpu=name,driver_version,pci.bus_id,memory.total,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,power.limit,temperature.gpu,persistence_mode,compute_mode,mig.mode.current --format=csv 2>&1
    echo
    timeout 30 nvidia-smi -q -d CLOCK,PERFORMANCE 2>&1 | sed -n '1,80p'
  else
    echo "nvidia-smi: not found"
  fi
  echo
  echo "## mla-gpu-bench --mla_probe (the CUDA runtime's and NVML's view from the bundled binary)"
  timeout 60 "$GPU_BENCH" --mla_probe 2>&1
  echo "exit: $?"
  echo
  echo "## ldd $(basename "$GPU_BENCH")"
  ldd "$GPU_BENCH" 2>&1 | grep -v "^\s*linux-vdso"
  echo
  echo "## tools"
  echo "python3: ${PY:-not found} $($PY --version 2>&1)"
  echo "torch: $(timeout 60 "$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -1)"
  echo "matplotlib: $(timeout 30 "$PY" -c 'import matplotlib; print(matplotlib.__version__)' 2>&1 | tail -1)"
  CS=$(find_sanitizer)
  echo "compute-sanitizer: ${CS:-not found} $([[ -n $CS ]] && timeout 30 "$CS" --version 2>&1 | tail -1)"
} >"$OUT/device.txt" 2>&1
probe_rc=$(sed -n 's/^exit: //p' "$OUT/device.txt" | head -1)
if [[ $probe_rc != 0 ]]; then
  HAVE_GPU=0
  NO_GPU_WHY=$(sed -n '/^## mla-gpu-bench/,/^exit:/p' "$OUT/device.txt" | grep -o '"unavailable":"[^"]*"' | head -1 | cut -d'"' -f4)
  [[ -n $NO_GPU_WHY ]] || NO_GPU_WHY="mla-gpu-bench --mla_probe exited $probe_rc (see device.txt)"
fi
record device PASS "$(elapsed)" "$( ((HAVE_GPU)) && grep -o '"name":"[^"]*"' "$OUT/device.txt" | head -1 || echo "no usable GPU: $NO_GPU_WHY")"

# ---- 2. tests + certify, in parallel (CPU-bound references; the GPU is not being timed) --------
gtest_verdict() {  # json -> "STATUS<TAB>detail"
  "$PY" - "$1" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"FAIL\tno readable gtest JSON ({e})"); sys.exit()
run = fail = skip = 0
failed = []
for s in d.get("testsuites", []):
    for t in s.get("testsuite", []):
        run += 1
        if t.get("failures"):
            fail += 1; failed.append(f"{s['name']}.{t['name']}")
        elif t.get("result") == "SKIPPED":
            skip += 1
status = "FAIL" if fail else ("SKIP" if run and skip == run else "PASS")
print(f"{status}\t{run} tests, {fail} failed, {skip} skipped" + (": " + ", ".join(failed[:5]) if failed else ""))
EOF
}

phase_cap=$(( $(left) - RESERVE - 150 ))  # leave at least 150 s for bench, torch, report
((phase_cap > 200)) && phase_cap=200
((phase_cap < 60)) && phase_cap=60
phase_cap=${MLA_CHECK_TEST_CAP_S:-$phase_cap}  # the script's own test shortens it
for t in "${GPU_TESTS[@]}"; do
  n=$(basename "$t")
  ( run_step "test_$n" "$phase_cap" "$t" --gtest_output="json:$R/tests/$n.json"
    echo "$STEP_RC $STEP_S" >"$WORK/rc_test_$n" ) &
done
CERT_KERNELS=(--kernel cuda_mla_decode --kernel cuda_naive_mha_cublas)
if [[ -n $GOLDENS ]]; then
  ( run_step certify "$phase_cap" "$MLA" certify --goldens "$GOLDENS" --out "$R/certify" "${CERT_KERNELS[@]}" --timeout 120
    echo "$STEP_RC $STEP_S" >"$WORK/rc_certify" ) &
fi
if [[ -n $GOLDENS && -f $CUDA_PLUGIN ]]; then
  # Unclaimed shapes are not probed: the plug-in's claims are the wrapped kernel's own.
  ( run_step certify_plugin "$phase_cap" "$MLA" certify --goldens "$GOLDENS" --out "$R/certify_plugin" \
      --plugin "$CUDA_PLUGIN" --family attn_core --family cache_append --no-probe-unclaimed --timeout 120
    echo "$STEP_RC $STEP_S" >"$WORK/rc_certify_plugin" ) &
fi
wait
for t in "${GPU_TESTS[@]}"; do
  n=$(basename "$t")
  read -r rc s <"$WORK/rc_test_$n"
  if ((rc == 124 || rc == 137)); then record "test_$n" TIMEOUT "$s" "killed after ${s}s: $(tail_of "test_$n" 200)"
  elif ((rc == 125)); then record "test_$n" SKIP 0 "budget exhausted"
  else
    IFS=$'\t' read -r st detail < <(gtest_verdict "$R/tests/$n.json")
    ((rc != 0)) && [[ $st != FAIL ]] && { st=FAIL; detail="exit $rc; $detail; $(tail_of "test_$n" 200)"; }
    [[ $st == SKIP ]] && detail="$detail (no usable GPU: $NO_GPU_WHY)"
    record "test_$n" "$st" "$s" "$detail"
  fi
done
if [[ -z $GOLDENS ]]; then
  record certify SKIP 0 "no golden catalog found (--goldens, MLA_GOLDENS_DIR, bundle goldens/, ./fixtures/goldens)"
else
  read -r rc s <"$WORK/rc_certify"
  if ((rc == 124 || rc == 137)); then record certify TIMEOUT "$s" "$(tail_of certify 200)"
  else
    detail=$("$PY" - "$R/certify/certificate.json" <<'EOF' 2>&1
import json, sys
c = json.load(open(sys.argv[1]))
parts, unavailable = [], 0
for k in c.get("kernels", []):
    if k.get("unavailable"):
        unavailable += 1; parts.append(f"{k['name']}: unavailable"); continue
    counts = {v: n for v, n in k.get("counts", {}).items() if n}
    if not counts:  # older certificates: count the cases' verdicts
        for r in k.get("cases", []):
            v = r.get("verdict", "?"); counts[v] = counts.get(v, 0) + 1
    parts.append(f"{k['name']}: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
print(("ALLSKIP " if c.get("kernels") and unavailable == len(c["kernels"]) else "") + "; ".join(parts))
EOF
)
    if ((rc == 0)) && [[ $detail == ALLSKIP* ]]; then record certify SKIP "$s" "${detail#ALLSKIP }"
    elif ((rc == 0)); then record certify PASS "$s" "$detail"
    else record certify FAIL "$s" "exit $rc: $detail $(tail_of certify 200)"
    fi
  fi
fi

if [[ -z $GOLDENS ]]; then
  record certify_plugin SKIP 0 "no golden catalog found"
elif [[ ! -f $CUDA_PLUGIN ]]; then
  record certify_plugin SKIP 0 "no cuda_plugin.so at $CUDA_PLUGIN (built only with CUDA)"
else
  read -r rc s <"$WORK/rc_certify_plugin"
  if ((rc == 124 || rc == 137)); then record certify_plugin TIMEOUT "$s" "$(tail_of certify_plugin 200)"
  else
    detail=$("$PY" - "$R/certify_plugin/certificate.json" <<'EOF' 2>&1
import json, sys
c = json.load(open(sys.argv[1]))
parts, unavailable = [], 0
for k in c.get("kernels", []):
    if k.get("unavailable"):
        unavailable += 1; parts.append(f"{k['name']}: unavailable ({k['unavailable']})"); continue
    counts = {}
    for r in k.get("cases", []):
        v = ("append " if r.get("family") == "cache_append" else "decode ") + r.get("verdict", "?")
        counts[v] = counts.get(v, 0) + 1
    parts.append(f"{k['name']}: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
print(("ALLSKIP " if c.get("kernels") and unavailable == len(c["kernels"]) else "") + "; ".join(parts))
EOF
)
    if ((rc == 0)) && [[ $detail == ALLSKIP* ]]; then record certify_plugin SKIP "$s" "${detail#ALLSKIP }"
    elif ((rc == 0)); then record certify_plugin PASS "$s" "$detail"
    else record certify_plugin FAIL "$s" "exit $rc: $detail $(tail_of certify_plugin 200)"
    fi
  fi
fi

# ---- 3. bench (alone on the GPU) ---------------------------------------------------------------
# decode_b128_h16_sq1_sk8192 and its FP8 twin are the bf16-vs-FP8 comparison (mla-gpu-bench
# adds an mla_ratio row with the measured speedup); the sk8192 top-2048 pair is sparse decode.
BENCH_POINTS=${MLA_CHECK_POINTS:-decode_b128_h16_sq1_sk1024,decode_b128_h16_sq1_sk4096,decode_b128_h16_sq1_sk8192,fp8_b128_h16_sq1_sk8192,decode_b128_h16_sq1_sk16384,compute_b128_h64_sq1_sk4096,compute_b128_h64_sq2_sk4096,compute_b128_h128_sq1_sk4096,compute_b128_h128_sq2_sk4096,sparse_b64_h128_sq1_sk8192_top2048_bf16,sparse_b64_h128_sq1_sk8192_top2048_fp8}
"$GPU_BENCH" --mla_list --mla_points="$BENCH_POINTS" >"$R/bench/points.tsv" 2>"$R/logs/points.log"
if ((!HAVE_GPU)); then
  record bench SKIP 0 "no usable GPU: $NO_GPU_WHY"
else
  # 180 s: the four issue-5 points add ~3 GiB of host inputs, built one after another.
  run_step bench 180 "$GPU_BENCH" --mla_points="$BENCH_POINTS" --mla_quick \
    --benchmark_out="$R/bench/gpu.json" --benchmark_out_format=json
  if ((STEP_RC == 124 || STEP_RC == 137)); then record bench TIMEOUT "$STEP_S" "$(tail_of bench 200)"
  elif ((STEP_RC == 125)); then record bench SKIP 0 "budget exhausted"
  elif ((STEP_RC != 0)); then record bench FAIL "$STEP_S" "exit $STEP_RC: $(tail_of bench 300)"
  else
    # Rows refused as unsupported are expected only where a kernel does not claim the point:
    # cuda_naive_mha_cublas refuses FP8 and sparse (and so its mla_ratio rows); cuda_mla_decode
    # claims every point here. Any other error fails the step. The measured FP8/bf16 speedups
    # (mla_ratio rows) go into the step's detail line.
    IFS=$'\t' read -r st detail < <("$PY" - "$R/bench/gpu.json" <<'EOF' 2>&1
import json, sys
try:
    rows = [b for b in json.load(open(sys.argv[1]))["benchmarks"] if b.get("run_type", "iteration") == "iteration"]
except Exception as e:
    print(f"FAIL\tunreadable benchmark JSON: {e}"); sys.exit()
def refusal_ok(b):  # cuda_mla_decode claims every point the check runs
    return (b.get("error_message", "").startswith("unsupported")
            and not b["name"].startswith(("mla/cuda_mla_decode/", "mla_ratio/cuda_mla_decode/")))
bad = [f"{b['name']}: {b.get('error_message', '')}" for b in rows if b.get("error_occurred") and not refusal_ok(b)]
ok = sum(1 for b in rows if not b.get("error_occurred"))
unsup = sum(1 for b in rows if b.get("error_occurred")) - len(bad)
ratios = [f"{b['name'].split('/')[2]}: {b['speedup_fp8_over_bf16']:.3f}x" for b in rows
          if b["name"].startswith("mla_ratio/cuda_mla_decode/") and not b.get("error_occurred") and "speedup_fp8_over_bf16" in b]
print(("FAIL" if bad or not ok else "PASS") + f"\t{ok} rows, {unsup} unsupported" + ("; errors: " + "; ".join(bad[:4]) if bad else "")
      + ("; measured fp8/bf16 speedup " + ", ".join(ratios) if ratios else ""))
EOF
)
    record bench "${st:-FAIL}" "$STEP_S" "$detail"
  fi
fi

# ---- 4. torch side by side ---------------------------------------------------------------------
if [[ -z $PY ]]; then
  record torch SKIP 0 "python3 not found"
else
  merge=()
  [[ -f $R/bench/gpu.json ]] && merge=(--merge-with "$R/bench/gpu.json" --merged-out "$R/bench/combined.json")
  run_step torch 90 "$PY" "$TOOLS/torch_side_by_side.py" --points-tsv "$R/bench/points.tsv" \
    --out "$R/torch/torch.json" "${merge[@]}"
  if ((STEP_RC == 124 || STEP_RC == 137)); then record torch TIMEOUT "$STEP_S" "$(tail_of torch 200)"
  elif ((STEP_RC == 125)); then record torch SKIP 0 "budget exhausted"
  elif ((STEP_RC == 77)); then record torch SKIP "$STEP_S" "$(tail_of torch 300)"
  elif ((STEP_RC != 0)); then record torch FAIL "$STEP_S" "exit $STEP_RC: $(tail_of torch 300)"
  else record torch PASS "$STEP_S" "$(tail_of torch 160)"
  fi
fi

# ---- 5. report ---------------------------------------------------------------------------------
REPORT_IN=$R/bench/combined.json
[[ -f $REPORT_IN ]] || REPORT_IN=$R/bench/gpu.json
if [[ ! -f $REPORT_IN ]]; then
  record report SKIP 0 "no benchmark JSON (bench step did not run)"
elif ! "$PY" -c 'import matplotlib, numpy' 2>/dev/null; then
  record report SKIP 0 "python3 lacks matplotlib or numpy"
else
  cert=()
  [[ -f $R/certify/certificate.json ]] && cert=(--certificate "$R/certify/certificate.json")
  run_step report 40 "$PY" "$TOOLS/bench_report.py" "$REPORT_IN" "${cert[@]}" --out "$R/report"
  if ((STEP_RC == 0)); then record report PASS "$STEP_S" "$(ls "$R/report" | tr '\n' ' ')"
  elif ((STEP_RC == 125)); then record report SKIP 0 "budget exhausted"
  else record report FAIL "$STEP_S" "exit $STEP_RC: $(tail_of report 300)"
  fi
fi

# ---- 6. compute-sanitizer on small cases, with what is left of the budget ---------------------
# Small cases only: the tools slow kernels 10-100x. Every CUDA kernel is covered: the attention
# tests on a few synthetic problems (varlen with empty sequences, causal multi-token with odd
# pages, forced split counts: cuda_mla_decode and the cuBLAS naive baseline), the two
# CudaMlaDecodeFp8Sparse cases (the FP8 instance with its helper warps and shared-memory
# dequantization, the sparse one with its index gathers), and every bf16 and FP8 cache-append
# test (small by construction). Memcheck first over all of them: it finds the most.
SAN_FILTER=${MLA_CHECK_SANITIZE_FILTER:-'Synthetic/CudaAttention.MatchesTruth/varlen_h16:Synthetic/CudaAttention.MatchesTruth/sq4_causal_odd_pages:CudaAttentionSplits.*:Synthetic/CudaMlaDecodeFp8Sparse.MatchesTruth/fp8_sq4_causal_odd_pages:Synthetic/CudaMlaDecodeFp8Sparse.MatchesTruth/sparse_fp8_topk37_sq2_h5'}
# name suffix | test binary | gtest filter
SAN_TARGETS=("|mla_cuda_attention_tests|$SAN_FILTER" "_append|mla_cuda_cache_append_tests|*"
             "_append_fp8|mla_cuda_cache_append_fp8_tests|*")
for tool in memcheck racecheck synccheck; do
  for target in "${SAN_TARGETS[@]}"; do
    IFS='|' read -r suffix bin_name filter <<<"$target"
    step="sanitize_$tool$suffix"
    bin=""
    for t in "${GPU_TESTS[@]}"; do [[ $(basename "$t") == "$bin_name" ]] && bin=$t; done
    if ((!HAVE_GPU)); then record "$step" SKIP 0 "no usable GPU: $NO_GPU_WHY"; continue; fi
    if [[ -z $CS ]]; then record "$step" SKIP 0 "compute-sanitizer not found on PATH or under /usr/local/cuda*/bin"; continue; fi
    if [[ -z $bin ]]; then record "$step" SKIP 0 "$bin_name not in the bundle"; continue; fi
    if [[ -n ${SAN_BROKEN:-} ]]; then record "$step" SKIP 0 "$SAN_BROKEN"; continue; fi
    extra=()
    [[ $tool == memcheck ]] && extra=(--leak-check full)
    run_step "$step" 90 "$CS" --tool "$tool" --error-exitcode 86 "${extra[@]}" \
      "$bin" --gtest_filter="$filter" --gtest_output="json:$R/sanitize/$tool$suffix.json"
    log_f="$R/logs/$step.log"
    if ((STEP_RC == 125)); then record "$step" SKIP 0 "budget exhausted"
    elif ((STEP_RC == 124 || STEP_RC == 137)); then record "$step" TIMEOUT "$STEP_S" "$(tail_of "$step" 200)"
    elif grep -q "Device not supported\|Unable to find injection library\|Target application returned an error 999\|Error: No attachable process" "$log_f"; then
      SAN_BROKEN="compute-sanitizer cannot run here: $(grep -m1 'Device not supported\|injection\|999\|attachable' "$log_f")"
      record "$step" SKIP "$STEP_S" "$SAN_BROKEN"
    elif ((STEP_RC == 86)); then record "$step" FAIL "$STEP_S" "$(grep -E '^=+ (Invalid|Race|Barrier|Uninitialized|Leaked|Error|ERROR)' "$log_f" | grep -v 'ERROR SUMMARY' | head -3 | tr '\n' ' ')$(grep -m1 'ERROR SUMMARY' "$log_f")"
    elif ((STEP_RC != 0)); then record "$step" FAIL "$STEP_S" "exit $STEP_RC: $(tail_of "$step" 300)"
    else record "$step" PASS "$STEP_S" "$(grep -m1 'ERROR SUMMARY' "$log_f")"
    fi
  done
done

# ---- package: at most 8 files, each well under 16 MiB ------------------------------------------
for f in "$R"/logs/*.log; do  # a runaway log must not push the archive past the limit
  (($(stat -c %s "$f") > 4194304)) && { tail -c 4194304 "$f" >"$f.tmp" && mv "$f.tmp" "$f" && echo "[truncated to the last 4 MiB]" >>"$f"; }
done
cp "$OUT/device.txt" "$R/device.txt"
fails=$(awk -F'\t' '$2=="FAIL"||$2=="TIMEOUT"' "$STEPS" | wc -l)
skips=$(awk -F'\t' '$2=="SKIP"' "$STEPS" | wc -l)
passes=$(awk -F'\t' '$2=="PASS"' "$STEPS" | wc -l)
if ((fails)); then verdict="FAILED ($fails failed, $skips skipped, $passes passed)"; rc=1
elif ((skips)); then verdict="INCOMPLETE ($skips skipped, $passes passed, none failed)"; rc=2
else verdict="PASSED (all $passes steps)"; rc=0
fi
{
  echo "# Device check: $verdict"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), $(elapsed) s of a ${BUDGET} s budget; $(grep -m1 '^host:' "$OUT/device.txt")"
  ((HAVE_GPU)) && echo "GPU: $(grep -A1 '^name, driver_version' "$OUT/device.txt" | tail -1)" || echo "GPU: none usable ($NO_GPU_WHY)"
  echo
  echo "| step | status | seconds | detail |"
  echo "|---|---|---|---|"
  awk -F'\t' '{ gsub(/\|/, "\\|", $4); printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4 }' "$STEPS"
  echo
  echo "Files: device.txt (GPU, driver, clocks, libraries), results.tar.gz (results/: logs/, tests/*.json,"
  echo "certify/, bench/gpu.json + combined.json, torch/torch.json, report/, sanitize/), and copies of"
  echo "certificate.md, report.md and the plots when produced."
} >"$OUT/summary.md"
cp "$OUT/summary.md" "$R/summary.md"
tar -C "$WORK" -czf "$OUT/results.tar.gz" results
for f in "$R/certify/certificate.md" "$R/report/report.md" "$R/report/roofline.png" "$R/report/bandwidth.png"; do
  [[ -f $f ]] && cp "$f" "$OUT/"
done
log "$verdict; $(ls "$OUT" | wc -l) files in $OUT"
cat "$OUT/summary.md"
exit $rc
