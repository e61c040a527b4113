#!/usr/bin/env bash
# One entry point for people and CI.
#   ./mla.sh certify   install what is missing, build, certify every implementation that can run
#                      here over the whole golden catalog and the drawn cases (the long ones
#                      too: --long), then the quick roofline benchmark;
#                      writes reports/out/cpu/ (certificate.{json,md,junit.xml}, report.md, plots)
#   ./mla.sh test      install what is missing, build, run every CPU test of tiers L0+L1
#                      (CTest: GoogleTest, pytest, golden regeneration check); test-l2: long ones;
#                      further arguments go to ctest (.ci/run: -E device_rehearsal)
#   ./mla.sh report    build, run mla-bench --mla_quick (extra args passed on), write bench.json,
#                      report.md, roofline.png, bandwidth.png to reports/out/bench/
#   ./mla.sh gate BASELINE.json RUN.json   regression gate (exit 1 on a significant slowdown)
#   ./mla.sh sanitize  build every host target with ASan+UBSan (preset asan), run the CPU tests
#                      of its test preset (README, "Hardening")
#   ./mla.sh repeat [P] [N]  the tests labelled tempstate (they write temp files or run
#                      certifiers) N times more (default 3) under ctest -j in a random order, in
#                      the build of preset P (default ci); .ci/run: once
#   ./mla.sh fuzz [S]  build the libFuzzer targets (preset fuzz, clang), replay suites/fuzz/corpus,
#                      fuzz the golden loader for S seconds (default 90); suites/fuzz/README.md
#   ./mla.sh device    build the GPU bundle (preset device, bundle targets only), then rehearse the
#                      device check with it here (suites/device/README.md): each phase's planned
#                      and rehearsed time, CUDA contexts charged, held to what CTest's
#                      device_rehearsal requires; reports/out/device/
#   ./mla.sh preflight before the device run: the bundle against the tree, the size the run
#                      carries, the rehearsal of this very archive; exit 3 refuses it
#   ./mla.sh door-overhead  the Python door's overhead per certificate row, with and without
#                      its fork server (reports/tools/door_overhead.py)
#   ./mla.sh deps | build | goldens | check-goldens | bench
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")"

PRESET=${MLA_PRESET:-ci}
BUILD_DIR=build/${PRESET}
PY=/usr/bin/python3
JOBS=${MLA_JOBS:-$(nproc)}

# Debian 12 packages; python3-torch is the reference's torch 1.13. libopenblas0-serial: the BLAS
# of the golden check (with_fast_blas below).
APT_PACKAGES=(
  build-essential cmake pkg-config git ccache lld
  libhdf5-dev hdf5-tools libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev libssl-dev
  python3 python3-torch python3-h5py python3-numpy python3-scipy python3-pytest python3-matplotlib
  libopenblas0-serial
)

log() { echo "[mla] $*" >&2; }

# Every build goes through ccache when it is installed (a launcher already chosen is kept). The
# presets ci and device compile the same host sources with the same flags (only their link
# options and CUDA architectures differ), so the device bundle's host objects come from the cache
# that the ci build filled. Paths are hashed relative to the repository, so a second clone or
# build folder hits the same entries. The launchers are read when a build folder is configured for
# the first time.
use_ccache() {
  command -v ccache >/dev/null || return 0
  local lang
  for lang in C CXX CUDA; do
    local var=CMAKE_${lang}_COMPILER_LAUNCHER
    [ -n "${!var:-}" ] || export "$var=ccache"
  done
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  # The tests' precompiled header (suites/CMakeLists.txt) is cacheable only with these two.
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros}
}

# The golden check's Python: single-threaded OpenBLAS in front of the reference BLAS that Debian's
# torch would otherwise call, when it is installed (suites/python/CMakeLists.txt says why). Writing
# the goldens keeps the system's BLAS: the committed files are that BLAS's bytes.
with_fast_blas() {
  local blas=/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)/openblas-serial
  if [ -e "$blas/libblas.so.3" ]; then
    LD_LIBRARY_PATH=$blas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"
  else
    "$@"
  fi
}

deps() {
  local missing=()
  for p in "${APT_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing: ${missing[*]}"
    local sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
}

build() {
  use_ccache
  cmake --preset "$PRESET" >&2
  cmake --build --preset "$PRESET" -j "$JOBS" >&2
}

case "${1:-help}" in
  deps) deps ;;
  build) deps; build ;;
  test)
    deps; build
    # L2 (long context, on demand) is left to `./mla.sh test-l2`; L0 + L1 is the whole catalog.
    ctest --preset "$PRESET" -j "$JOBS" -L cpu -LE L2 "${@:2}"
    ;;
  repeat)
    # Proves every test owns its temp state: run together and again, none may see another's
    # files (suites/CMakeLists.txt, the tempstate label). The build must exist (test/sanitize).
    # A random order pairs each test with other neighbours than the test step's run did.
    ctest --preset "${2:-$PRESET}" -j "$JOBS" -L tempstate --schedule-random --repeat "until-fail:${3:-3}"
    ;;
  door-overhead)
    # The Python door's cost per certificate row, with and without its fork server
    # (kernels/plugin/README.md, "The Python door").
    deps; build
    $PY reports/tools/door_overhead.py --mla "$BUILD_DIR/tools/mla/mla" --python-exe "$PY" \
      --out "${MLA_REPORT_DIR:-reports/out}/door_overhead.json" "${@:2}"
    ;;
  test-l2)
    deps; build
    ctest --preset "$PRESET" -j "$JOBS" -L L2
    ;;
  certify)
    deps; build
    out=${MLA_REPORT_DIR:-reports/out/cpu}
    # The certificate decides the exit code; the roofline report beside it is produced even
    # when a kernel fails, so a red run still shows where the time went.
    mkdir -p "$out"
    # The certificate's one-screen summary (stdout) is kept, so the run can end with it: what a
    # reader of the last screen needs is the verdict and where the reports are, not the
    # benchmark's context.
    rc=0
    # --long: the full certification includes the long drawn prefill cases (certify/README.md).
    "$BUILD_DIR/tools/mla/mla" certify --goldens fixtures/goldens --long --out "$out" "${@:2}" |
      tee "$out/summary.txt" || rc=${PIPESTATUS[0]}
    if [ "$rc" -le 1 ] && [ -z "${MLA_NO_BENCH:-}" ]; then
      log "roofline benchmark (quick tier) -> $out/bench.json; its table in bench.txt, its context in bench.log"
      # One progress line per benchmark point (the median of its repetitions); the full console
      # table and the context (ceilings, machine, kernels) go to files.
      bench_rc=0
      # The kernels from outside that were certified are benchmarked beside the built-ins:
      # mla-bench takes the certifier's selectors as the certifier spells them.
      external=()
      args=("${@:2}")
      for ((i = 0; i < ${#args[@]}; i++)); do
        case "${args[i]}" in
          --plugin | --python | --python-exe)
            ((i + 1 < ${#args[@]})) && external+=("${args[i]}" "${args[i + 1]}") && i=$((i + 1)) ;;
          --plugin=* | --python=* | --python-exe=*) external+=("${args[i]}") ;;
        esac
      done
      "$BUILD_DIR/suites/bench/mla-bench" --mla_quick "${external[@]}" --benchmark_out="$out/bench.json" \
        --benchmark_out_format=json 2>"$out/bench.log" | tee "$out/bench.txt" |
        awk '/_median /{printf "[bench] %s %s %s\n", $1, $2, $3; fflush()}' >&2 || bench_rc=${PIPESTATUS[0]}
      if [ "$bench_rc" -ne 0 ]; then
        log "mla-bench failed (exit $bench_rc); the end of $out/bench.log:"
        tail -n 20 "$out/bench.log" >&2
      else
        $PY reports/tools/bench_report.py "$out/bench.json" --certificate "$out/certificate.json" \
          --out "$out" >"$out/report.log" 2>&1 || { tail -n 20 "$out/report.log" >&2; bench_rc=1; }
      fi
      echo
      cat "$out/summary.txt"
      [ "$bench_rc" -eq 0 ] && echo "report: $out/report.md (roofline.png, bandwidth.png)"
    fi
    exit "$rc"
    ;;
  bench)
    deps; build
    "$BUILD_DIR/suites/bench/mla-bench" "${@:2}"
    ;;
  report)
    deps; build
    out=${MLA_BENCH_DIR:-reports/out/bench}
    mkdir -p "$out"
    "$BUILD_DIR/suites/bench/mla-bench" --mla_quick --benchmark_out="$out/bench.json" \
      --benchmark_out_format=json "${@:2}" >&2
    $PY reports/tools/bench_report.py "$out/bench.json" --out "$out"
    log "wrote $out/report.md"
    ;;
  gate) $PY reports/tools/bench_gate.py "${@:2}" ;;
  sanitize)
    deps
    use_ccache
    cmake --preset asan >&2
    cmake --build --preset asan -j "$JOBS" >&2
    ctest --preset asan -j "$JOBS" -L cpu "${@:2}"
    ;;
  fuzz) deps clang libclang-rt-14-dev; suites/fuzz/run_ci.sh "${@:2}" ;;
  device)
    # The bundle must keep building (no GPU needed) and its binaries must start from the bundle
    # with nothing on LD_LIBRARY_PATH: the rehearsal runs every step of the device check that
    # runs without a GPU, from the archive that would travel, and checks the time plan.
    deps
    use_ccache
    cmake --preset device >&2
    cmake --build --preset device -j "$JOBS" --target bundle >&2
    ls -l build/device/bundle.tar.xz >&2
    out=${MLA_DEVICE_OUT:-reports/out/device}
    rm -rf "$out"
    suites/device/run_on_device.sh "$out" --rehearse
    # What CTest's device_rehearsal requires of a rehearsal, here of the archive's.
    bash suites/device/test_rehearsal.sh --summary "$out"
    ;;
  preflight) suites/device/preflight.sh "${@:2}" ;;
  goldens) deps; PYTHONPATH=reference/python $PY -m mla_ref.goldens write --out fixtures/goldens ;;
  check-goldens) deps; PYTHONPATH=reference/python with_fast_blas $PY -m mla_ref.goldens check --dir fixtures/goldens ;;
  *) sed -n '2,/^set -euo pipefail$/{/^set /!p}' "$0"; exit 2 ;;
esac
