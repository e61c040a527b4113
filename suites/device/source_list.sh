#!/usr/bin/env bash
# Writes the sha256 of every file that travels with the working tree to the device machine
# (tracked + untracked-not-ignored: what the device run copies), relative to SRC_DIR, to OUT, and
# replaces OUT only when the list changed, so the bundle that embeds it is rebuilt exactly when
# the tree differs from the one it was built from. run_on_device.sh checks the list against the
# tree it runs in and refuses a bundle built from another tree.
#   source_list.sh SRC_DIR OUT
set -euo pipefail
src=$1 out=$2
tmp=$out.tmp.$$
top=$(git -C "$src" rev-parse --show-toplevel 2>/dev/null || true)
if [[ -n $top && $(cd "$top" && pwd -P) == $(cd "$src" && pwd -P) ]]; then
  (cd "$src" && git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
     [[ -f $f && ! -L $f ]] && printf '%s\0' "$f"
   done | sort -z | xargs -0 -r sha256sum) >"$tmp"
else
  # Not a git checkout (a source tarball): every file but build outputs.
  (cd "$src" && find . -type f ! -path './build/*' ! -path './.git/*' ! -path '*/__pycache__/*' -printf '%P\0' |
     sort -z | xargs -0 -r sha256sum) >"$tmp"
fi
if [[ -f $out ]] && cmp -s "$tmp" "$out"; then rm -f "$tmp"; else mv "$tmp" "$out"; fi
