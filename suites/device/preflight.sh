#!/usr/bin/env bash
# The last check here before the device run (suites/device/README.md, "2. Run it"): everything
# that can refuse the run without a GPU, so that a stale, oversized or unrehearsed bundle never
# costs device minutes.
#
#   preflight.sh [--archive PATH] [--rehearsal DIR]     (./mla.sh preflight; from the repository)
#
#   1. the bundle against this tree: run_on_device.sh --verify-only, the very check the device
#      run starts with (the bundle's source.sha256 against these files), then the bundle's own
#      time plan (check.sh --plan: the caps fit the budget, the budget fits one command)
#   2. the size of what the device run copies: the working tree (tracked and untracked files git
#      does not ignore, shared/ when there is one) plus the carried archive, against the 64 MiB a
#      run may carry (MLA_DEVICE_CARRY_LIMIT_BYTES overrides it, for tests)
#   3. the rehearsal of this very archive (DIR/summary.md, default reports/out/device, which
#      `./mla.sh device` writes): it must name the archive's sha256, and its time plan must fit
#      with nothing failed
#
# Exit 0: ready to carry; 3: refused, with what was wrong and what to run (the same code
# run_on_device.sh uses for a refusal).
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/../.."

archive=build/device/bundle.tar.xz rehearsal=${MLA_DEVICE_OUT:-reports/out/device}
while (($#)); do
  case "$1" in
    --archive) archive=$2; shift 2 ;;
    --rehearsal) rehearsal=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "preflight.sh: unknown argument '$1' (--archive PATH, --rehearsal DIR)" >&2; exit 3 ;;
  esac
done
limit=${MLA_DEVICE_CARRY_LIMIT_BYTES:-67108864}
[[ $limit =~ ^[0-9]+$ ]] || { echo "preflight.sh: MLA_DEVICE_CARRY_LIMIT_BYTES='$limit' is not a number of bytes" >&2; exit 3; }
rebuild="./mla.sh device   (builds the bundle and rehearses it), then ./mla.sh preflight"
refuse() {
  echo "preflight.sh: REFUSED: $1" >&2
  echo "preflight.sh: fix it, then: $rebuild" >&2
  exit 3
}
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# ---- 1. the bundle against this tree, and its time plan ----------------------------------------------
[[ -f $archive ]] || refuse "$archive not found"
scratch=$(mktemp -d /tmp/mla-preflight.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
if ! bash suites/device/run_on_device.sh "$scratch/out" --archive "$archive" --verify-only >"$scratch/verify.log" 2>&1; then
  cat "$scratch/verify.log" >&2
  why=$(grep -v -e '^run_on_device.sh: rebuild the bundle' -e '^run_on_device.sh: the bundle matches' "$scratch/verify.log" |
        sed -n 's/^run_on_device.sh: //p' | head -1)
  case $why in
    "the bundle's time plan"*) refuse "$why: $(grep -m1 '^check.sh --plan: ' "$scratch/verify.log")" ;;
    *) refuse "the bundle does not belong to this tree: ${why:-run_on_device.sh --verify-only failed (above)}" ;;
  esac
fi
cat "$scratch/verify.log"

# ---- 2. what the device run carries -------------------------------------------------------------------
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  tree_bytes=$(git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
  tree_files=$(git ls-files -co --exclude-standard | wc -l)
else
  tree_bytes=$(find . -type f ! -path './build/*' ! -path './.git/*' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
  tree_files=$(find . -type f ! -path './build/*' ! -path './.git/*' | wc -l)
fi
shared_bytes=0
[[ -d shared ]] && shared_bytes=$(du -sb shared | cut -f1)
archive_bytes=$(stat -c %s "$archive")
total=$((tree_bytes + shared_bytes + archive_bytes))
echo "preflight.sh: the device run carries $(mib "$total") ($total bytes): the tree $(mib "$tree_bytes") ($tree_files files)$( ((shared_bytes)) && echo ", shared/ $(mib "$shared_bytes")") + $archive $(mib "$archive_bytes"), of $(mib "$limit") ($((100 * (limit - total) / limit)) % left)"
((total <= limit)) ||
  refuse "the tree and the archive come to $total bytes, over the $limit a device run may carry; shrink the archive (make_bundle.sh) or move untracked files out of the tree"

# ---- 3. the rehearsal of this archive -----------------------------------------------------------------
sha=$(sha256sum "$archive" | cut -c1-64)
summary=$rehearsal/summary.md
[[ -f $summary ]] || refuse "no rehearsal at $summary"
grep -q "^Archive: .*sha256 $sha" "$summary" ||
  refuse "$summary is the rehearsal of another archive ($(sed -n 's/^Archive: //p' "$summary" | head -1)), not of $archive (sha256 $sha)"
grep -q '^Plan: fits the ' "$summary" || refuse "the rehearsal's time plan does not fit: $(grep -m1 '^Plan: ' "$summary" || echo 'no plan in it')"
if grep -qE '^\| [a-z0-9_]+ \| (FAIL|TIMEOUT) \|' "$summary"; then
  refuse "a step failed in the rehearsal: $(grep -m1 -E '^\| [a-z0-9_]+ \| (FAIL|TIMEOUT) \|' "$summary" | cut -c1-200)"
fi
grep -E '^Certify margin: ' "$summary" || true
echo "preflight.sh: ready: carry $archive, run: bash suites/device/run_on_device.sh \"\$OUT\" with a timeout of $(sed -n 's/.*run the command with a timeout of \([0-9]*\) s.*/\1/p' "$scratch/verify.log" | head -1) s"
