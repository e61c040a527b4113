#!/usr/bin/env bash
# What the device run executes, from the repository root of the working-tree copy:
#   bash suites/device/run_on_device.sh "$OUT"            (carry: ["build/device/bundle.tar.xz"])
# Starts the check's clock (MLA_CHECK_T0: unpacking counts against the 7-minute budget), unpacks
# the bundle archive (make_bundle.sh) outside the tree, refuses a bundle built from another tree
# than this one (its source.sha256 against these files) with the command that rebuilds it, and
# runs the bundle's check.sh with OUTDIR and any further arguments.
#   --archive PATH   another archive (default build/device/bundle.tar.xz)
#   --rehearse       check.sh --rehearse: every step that runs without a GPU, and the time plan
#   --allow-stale    run a bundle from another tree anyway (recorded in device.txt)
#   --verify-only    stop after the checks that need no GPU: the bundle against this tree, then the
#                    bundle's own time plan (check.sh --plan); exit 0 when both hold. preflight.sh
#                    runs it here, before the device run, so a stale bundle costs no device time
# The archive, not the bundle folder, is carried: the working tree (36 MiB, 30 of them the
# goldens) and the carried paths share the call's 64 MiB.
set -euo pipefail
export MLA_CHECK_T0=${MLA_CHECK_T0:-$(date +%s)}
(($#)) || { echo "usage: run_on_device.sh OUTDIR [--archive PATH] [--rehearse] [--allow-stale] [--verify-only] [check.sh arguments]" >&2; exit 3; }
out=$1
shift
archive=build/device/bundle.tar.xz rehearse=() allow_stale=0 verify_only=0
while (($#)); do
  case "$1" in
    --archive) archive=$2; shift 2 ;;
    --rehearse) rehearse=(--rehearse); shift ;;
    --allow-stale) allow_stale=1; shift ;;
    --verify-only) verify_only=1; shift ;;
    *) break ;;
  esac
done
repo=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
rebuild="cmake --preset device && cmake --build --preset device -j2   (in the repository, then carry build/device/bundle.tar.xz)"

refuse() {  # the message on stderr and as OUTDIR/summary.md, which the device run returns
  mkdir -p "$out"
  { echo "# Device check: REFUSED"; echo; echo "$1"; echo; echo "Rebuild the bundle: $rebuild"; } >"$out/summary.md"
  echo "run_on_device.sh: $1" >&2
  echo "run_on_device.sh: rebuild the bundle with: $rebuild" >&2
  exit 3
}

[[ -f $archive ]] || refuse "$archive not found"
# Which archive ran, in summary.md: preflight.sh accepts a rehearsal only of the archive it carries.
export MLA_CHECK_ARCHIVE="$archive sha256 $(sha256sum "$archive" | cut -c1-64)"
dest=$(mktemp -d /tmp/mla-bundle.XXXXXX)
trap 'rm -rf "$dest"' EXIT  # the unpacked bundle (74 MiB) is not left behind
# tar needs xz(1); Python's tarfile (lzma is in the standard library) is the fallback.
if ! tar -xJf "$archive" -C "$dest" 2>/dev/null; then
  rm -rf "${dest:?}"/*
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$archive" "$dest" ||
    refuse "cannot unpack $archive"
fi
b=$dest/bundle
[[ -f $b/check.sh ]] || refuse "$archive holds no bundle/check.sh"

# The bundle's binaries and scripts must come from this tree: its list of the tree's files and
# their sha256 (source_list.sh at build time) must match the files here.
built_from=$(sed -n 's/^source commit: //p' "$b/MANIFEST.txt" 2>/dev/null || true)
stale=""
if [[ ! -f $b/source.sha256 ]]; then
  stale="the bundle has no source.sha256 (made by an older make_bundle.sh), so nothing ties it to this tree"
elif ! diffs=$(cd "$repo" && sha256sum --quiet --strict -c "$b/source.sha256" 2>/dev/null); then
  n=$(grep -c . <<<"$diffs" || true)
  stale="the bundle was built from commit ${built_from:-unknown}, and $n of its $(wc -l <"$b/source.sha256") source files differ here: $(head -5 <<<"$diffs" | tr '\n' ' ')"
fi
if [[ -n $stale ]]; then
  ((allow_stale && !verify_only)) || refuse "$stale"
  echo "run_on_device.sh: --allow-stale: $stale" >&2
  export MLA_CHECK_STALE_BUNDLE=$stale
fi
if ((verify_only)); then
  echo "run_on_device.sh: the bundle matches this tree ($(wc -l <"$b/source.sha256") files, built from commit ${built_from:-unknown})" >&2
  # The plan of the check.sh that travels, not of the one in the tree (they are the same file
  # when the bundle is current, which was just checked).
  bash "$b/check.sh" "$out" --plan "$@" || refuse "the bundle's time plan does not fit (check.sh --plan above)"
  exit 0
fi
rc=0
bash "$b/check.sh" "$out" "${rehearse[@]}" "$@" || rc=$?
exit "$rc"
