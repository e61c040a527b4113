#!/usr/bin/env bash
# Packs what the device check needs into one folder that runs on the GPU machine with nothing
# installed beyond the driver and that machine's image (suites/device/README.md):
#
#   bin/    every test binary CTest labels `gpu` (read from CTest, so a new GPU test is bundled
#           without editing this script), the certifier `mla` (+ `mla-certify`), the benchmark
#           driver mla-bench, cuda_plugin.so and the rehearsal's CPU stand-in for it,
#           good_append.so; bin/gpu_tests.txt lists the GPU test binaries
#   lib/    every shared library those binaries load that is not part of the system (ldd), so the
#           Debian 12 build runs on the device image. Left out: the glibc family (the loader must
#           match the system's), the driver's libcuda/libnvidia-*, and libcublas/libcublasLt
#           (52 + 517 MiB; check.sh links them into lib/ from the image's CUDA 13 wheel,
#           site-packages/nvidia/cu13/lib, or its CUDA install: nothing goes on LD_LIBRARY_PATH)
#   lib/compat/  libstdc++ and libgcc_s of the build machine, linked into lib/ by check.sh only
#           when the image's own are too old for the binaries (a newer system libstdc++ is
#           preferred: libcublas from the wheel may need it)
#   python/ kernels/python: the Python door (mla_door, its FlashMLA and FlashInfer adapters) and
#           its examples, for `mla certify --python` (check.sh points MLA_DOOR_PATH here)
#   tools/  reports/tools (report generator, torch side-by-side) with the Python
#           reference beside it (tools/reports/mla_ref: the side-by-side's model constants),
#           this README
#   python/  the Python door (kernels/python: mla_door, its adapters and examples)
#   check.sh, check.py, check_env.py, check_steps.py, check_phases.py  the check (check.sh runs
#           check.py, standard-library Python)
#   goldens/  only with --with-goldens (31 MiB): the repository copy travels with the working
#           tree anyway, and carrying both would take the call past its 64 MiB
#   source.sha256  sha256 of every file of the source tree that travels to the device machine
#           (source_list.sh); run_on_device.sh refuses the bundle when the tree it runs in differs
#   MANIFEST.txt  build facts (commit, architectures, compiler) and sha256 of every file
# and OUT_DIR.tar.xz, the same folder compressed: the file to carry to the device machine.
#
# Usage: make_bundle.sh --build BUILD_DIR --out OUT_DIR [--source SRC_DIR] [--sources LIST] [--with-goldens]
#   --sources: the list source_list.sh wrote (the build's copy); default: written now
# The binaries must be linked with an $ORIGIN/../lib rpath (MLA_BUNDLE=ON, preset `device`).
set -euo pipefail

die() { echo "make_bundle.sh: $*" >&2; exit 1; }

BUILD="" OUT="" SRC="" GOLDENS=0 SOURCES=""
while (($#)); do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --source) SRC=$2; shift 2 ;;
    --sources) SOURCES=$2; shift 2 ;;
    --with-goldens) GOLDENS=1; shift ;;
    *) die "unknown argument $1 (see the header of this script)" ;;
  esac
done
[[ -n $BUILD && -n $OUT ]] || die "--build and --out are required"
BUILD=$(readlink -f "$BUILD")
[[ -f $BUILD/CMakeCache.txt ]] || die "$BUILD is not a CMake build folder"
[[ -n $SRC ]] || SRC=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt")
SRC=$(readlink -f "$SRC")
command -v python3 >/dev/null || die "python3 is needed to read CTest's test list"

cache_var() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
[[ $(cache_var MLA_BUNDLE) == ON ]] ||
  echo "make_bundle.sh: warning: $BUILD was not configured with MLA_BUNDLE=ON; the binaries have no \$ORIGIN/../lib rpath and will not find the bundled libraries" >&2

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib/compat" "$OUT/tools" "$OUT/python"
OUT=$(readlink -f "$OUT")

# ---- binaries ---------------------------------------------------------------------------------
# The GPU tests, as CTest knows them: the executable of every gtest-discovered test labelled gpu
# (its command carries --gtest_filter) that lives in the build tree. Other gpu tests (mla-bench's
# device smoke run) are covered by check.sh's own steps.
mapfile -t gpu_tests < <(cd "$BUILD" && ctest --show-only=json-v1 -L gpu | python3 -c '
import json, os, sys
build = sys.argv[1]
seen = []
for t in json.load(sys.stdin).get("tests", []):
    cmd = t.get("command") or []
    if not cmd or not any(a.startswith("--gtest_filter=") for a in cmd[1:]):
        continue
    if os.path.realpath(cmd[0]).startswith(build + "/") and cmd[0] not in seen:
        seen.append(cmd[0])
print("\n".join(seen))' "$BUILD")
((${#gpu_tests[@]})) || die "CTest lists no gpu-labelled test binary in $BUILD (built with CUDA and tests?)"
: >"$OUT/bin/gpu_tests.txt"
for t in "${gpu_tests[@]}"; do
  [[ -x $t ]] || die "gpu test binary $t is missing (build first)"
  cp "$t" "$OUT/bin/"
  basename "$t" >>"$OUT/bin/gpu_tests.txt"
done

copy_bin() {  # path, required(1/0)
  if [[ -x $1 ]]; then cp "$1" "$OUT/bin/"; elif [[ $2 == 1 ]]; then die "$1 is missing (build first)"; fi
}
copy_bin "$BUILD/tools/mla/mla" 1
ln -sf mla "$OUT/bin/mla-certify"
copy_bin "$BUILD/suites/bench/mla-bench" 1  # the bench step, the probe and the points table
copy_bin "$BUILD/kernels/plugin/examples/cuda_plugin.so" 1  # the CUDA example plug-in check.sh certifies
# check.sh --rehearse: the CPU example plug-in with an append entry, certified in cuda_plugin's
# place so that the rehearsal measures the plug-in step's children (28 KiB)
copy_bin "$BUILD/kernels/plugin/examples/good_append.so" 1
copy_bin "$BUILD/suites/device/mla-input-rates" 1  # check.sh --rehearse: the bench's host half

# ---- libraries ----------------------------------------------------------------------------------
# The glibc family and the loader, the driver's libraries, and cuBLAS are not copied (see header).
skip_re='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec|libpthread|libdl\.so|librt\.so|libresolv|libutil|libanl|libnsl|libcuda\.so|libnvidia-|libcublas\.so|libcublasLt\.so)'
compat_re='^(libstdc\+\+\.so|libgcc_s\.so)'
is_elf() { [[ $(head -c 4 "$1" | od -An -tx1 | tr -d ' \n') == 7f454c46 ]]; }
declare -A copied=()
for b in "$OUT"/bin/*; do
  [[ -L $b ]] && continue
  is_elf "$b" || continue
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    [[ $name =~ $skip_re ]] && continue
    [[ $path == "not" ]] && {
      [[ $name =~ ^libcublas ]] && continue
      die "$(basename "$b") needs $name, which is not found on this machine"
    }
    [[ -n ${copied[$name]:-} ]] && continue
    if [[ $name =~ $compat_re ]]; then dest=$OUT/lib/compat/$name; else dest=$OUT/lib/$name; fi
    cp -L "$path" "$dest"
    copied[$name]=$path
  done < <(ldd "$b")
done

# ---- tools, goldens -----------------------------------------------------------------------------
cp "$SRC/suites/device/check.sh" "$OUT/check.sh"
chmod +x "$OUT/check.sh"
# check.sh runs check.py beside it, which imports its own modules from the same folder.
cp "$SRC"/suites/device/check{.py,_env.py,_steps.py,_phases.py} "$OUT/"
cp "$SRC/suites/device/README.md" "$OUT/tools/README-device.md"
mkdir -p "$OUT/tools/reports"
(cd "$SRC/reports/tools" && find . -type f -name '*.py' ! -path './tests/*' ! -path '*/__pycache__/*' -print0 |
  while IFS= read -r -d '' f; do mkdir -p "$OUT/tools/reports/$(dirname "$f")"; cp "$f" "$OUT/tools/reports/$f"; done)
[[ -f $OUT/tools/reports/torch_side_by_side.py ]] || die "reports/tools/torch_side_by_side.py is missing"
# The Python reference (132 KiB), whose model constants the side-by-side reads (mla_ref.config):
# beside it, where torch_side_by_side.py looks when there is no source tree around it.
mkdir -p "$OUT/tools/reports/mla_ref"
cp "$SRC"/reference/python/mla_ref/*.py "$OUT/tools/reports/mla_ref/"
[[ -f $OUT/tools/reports/mla_ref/config.py ]] || die "reference/python/mla_ref/config.py is missing"
# The Python door (mla certify --python) and its examples: bin/mla finds them at ../python.
(cd "$SRC/kernels/python" && find . -type f -name '*.py' ! -path './tests/*' ! -path '*/__pycache__/*' -print0 |
  while IFS= read -r -d '' f; do mkdir -p "$OUT/python/$(dirname "$f")"; cp "$f" "$OUT/python/$f"; done)
[[ -f $OUT/python/mla_door/child.py ]] || die "kernels/python/mla_door/child.py is missing"
if ((GOLDENS)); then
  cp -r "$SRC/fixtures/goldens" "$OUT/goldens"
fi
if [[ -n $SOURCES ]]; then
  cp "$SOURCES" "$OUT/source.sha256"
else
  bash "$SRC/suites/device/source_list.sh" "$SRC" "$OUT/source.sha256"
fi

# ---- checks and manifest ------------------------------------------------------------------------
# Every bundled library must be the one each binary resolves (the rpath reaches lib/ first).
for b in "$OUT"/bin/*; do
  [[ -L $b ]] && continue
  is_elf "$b" || continue
  while read -r name arrow path _; do
    [[ $arrow == "=>" && -f $OUT/lib/$name ]] || continue
    [[ $(readlink -f "$path") == "$OUT/lib/$name" ]] ||
      die "$(basename "$b") resolves $name to $path, not the bundled copy (no \$ORIGIN/../lib rpath? configure with MLA_BUNDLE=ON)"
  done < <(ldd "$b")
done

{
  echo "# MLA GPU bundle"
  echo "created: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(. /etc/os-release && echo "$PRETTY_NAME"))"
  echo "source commit: $(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$SRC" diff --quiet HEAD 2>/dev/null || echo ' (working tree had changes)')"
  echo "source tree: $(wc -l <"$OUT/source.sha256") files, list sha256 $(sha256sum "$OUT/source.sha256" | cut -c1-64) (source.sha256)"
  echo "build: $BUILD ($(cache_var CMAKE_BUILD_TYPE)), CUDA architectures $(cache_var MLA_CUDA_ARCHITECTURES), MLA_BUNDLE=$(cache_var MLA_BUNDLE)"
  nvcc=$(sed -n 's/^set(CMAKE_CUDA_COMPILER "\(.*\)")$/\1/p' "$BUILD"/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null | head -1)
  echo "compilers: $(cache_var CMAKE_CXX_COMPILER) ($("$(cache_var CMAKE_CXX_COMPILER)" -dumpfullversion 2>/dev/null)), ${nvcc:-nvcc?} ($("${nvcc:-false}" --version 2>/dev/null | tail -1))"
  echo "gpu tests: $(tr '\n' ' ' <"$OUT/bin/gpu_tests.txt")"
  # The oldest glibc the device image may have: the newest symbol version any bundled file needs.
  echo "needs glibc >= $(for f in "$OUT"/bin/* "$OUT"/lib/*.so*; do [[ -L $f ]] || objdump -T "$f" 2>/dev/null; done |
    grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1 | cut -d_ -f2) (lib/compat: $(for f in "$OUT"/lib/compat/*; do objdump -T "$f" 2>/dev/null; done |
    grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1 | cut -d_ -f2))"
  echo "goldens bundled: $([[ $GOLDENS == 1 ]] && echo yes || echo 'no (check.sh uses the repository copy)')"
  echo "not bundled, taken from the device image: glibc, libcuda/libnvidia-* (driver), libcublas.so.13 + libcublasLt.so.13 (torch's nvidia-cublas wheel)"
  echo
  echo "## sha256"
  (cd "$OUT" && find . -type f ! -name MANIFEST.txt -print0 | sort -z | xargs -0 sha256sum)
} >"$OUT/MANIFEST.txt"

# The archive is what travels to the device (the folder is 81 MiB, the working tree about 50, the
# call's limit 64): xz finds the CUDA kernels' fatbins and the static libraries repeated in every
# binary. -9e in one thread (one 192 MiB block holds the whole folder, so every binary's copy of
# a fatbin is in one dictionary window): 11.6 MiB against 16.7 MiB with -6 -T2, whose split blocks
# lose the repeats across binaries; 44 s against about 15 s on the 2-core VM, and with -6 the
# tree plus the archive no longer fit in 64 MiB.
# MLA_BUNDLE_FAST=1 is for an archive that is rehearsed and never carried (CI: the bundle must
# keep building and starting from its archive): preset 1 with the same single 192 MiB window,
# 13 MiB in 9 s against 11.5 MiB in 45 s on the 2-core VM. The archive that travels is built
# without it; `./mla.sh preflight` measures its size against the limit before every device run.
xz_options=(-9e -T1)
[[ ${MLA_BUNDLE_FAST:-0} == 1 ]] && xz_options=(-T1 --lzma2=preset=1,dict=192MiB)
tar -C "$(dirname "$OUT")" -cf - "$(basename "$OUT")" | xz "${xz_options[@]}" >"$OUT.tar.xz.tmp"
mv "$OUT.tar.xz.tmp" "$OUT.tar.xz"
size=$(du -sb "$OUT" | cut -f1)
asize=$(stat -c %s "$OUT.tar.xz")
echo "make_bundle.sh: $OUT: $(grep -c . "$OUT/bin/gpu_tests.txt") gpu test binaries + $(find "$OUT/bin" -type f ! -name '*.txt' | wc -l) in all, $(find "$OUT/lib" -type f | wc -l) libraries, $((size / 1048576)) MiB ($size bytes); $OUT.tar.xz $((asize / 1048576)) MiB ($asize bytes)"
