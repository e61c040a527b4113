#!/usr/bin/env bash
# What the device tool's `run` executes, from the repository root of the working-tree copy:
#   bash suites/device/run_on_device.sh "$OUT"            (carry: ["build/device/bundle.tar.xz"])
# Unpacks the bundle archive (make_bundle.sh) outside the tree and runs its check.sh with OUTDIR and
# any further arguments. The archive, not the 43 MiB folder, is carried: the working tree (about
# 38 MiB with the 31 MiB of goldens) and the carried paths share the call's 64 MiB.
#   --archive PATH   another archive (default build/device/bundle.tar.xz)
set -euo pipefail
(($#)) || { echo "usage: run_on_device.sh OUTDIR [--archive PATH] [check.sh arguments]" >&2; exit 3; }
out=$1
shift
archive=build/device/bundle.tar.xz
if [[ ${1:-} == --archive ]]; then archive=$2; shift 2; fi
[[ -f $archive ]] || { echo "run_on_device.sh: $archive not found (build with: cmake --preset device && cmake --build --preset device; carry it)" >&2; exit 3; }
dest=$(mktemp -d /tmp/mla-bundle.XXXXXX)
# tar needs xz(1); Python's tarfile (lzma is in the standard library) is the fallback.
if ! tar -xJf "$archive" -C "$dest" 2>/dev/null; then
  rm -rf "${dest:?}"/*
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$archive" "$dest"
fi
exec bash "$dest/bundle/check.sh" "$out" "$@"
